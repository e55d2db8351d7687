use bytes::Bytes;
use md5::Digest as _;

use super::*;

fn reference(chunks: &[Bytes]) -> [u8; 16] {
    let mut md5 = md5::Md5::new();
    for c in chunks {
        md5.update(c);
    }
    md5.finalize().into()
}

/// Deterministic pseudo-random numbers (xorshift64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// `len` pseudo-random bytes cut into chunks of 1..=max_chunk bytes, with empty ones between.
fn body(seed: u64, len: usize, max_chunk: usize) -> Vec<Bytes> {
    let mut rng = Rng(seed | 1);
    let data = Bytes::from((0..len).map(|_| rng.next() as u8).collect::<Vec<u8>>());
    let mut out = Vec::new();
    let mut at = 0;
    while at < len {
        if rng.below(7) == 0 {
            out.push(Bytes::new());
        }
        let end = (at + 1 + rng.below(max_chunk)).min(len);
        out.push(data.slice(at..end));
        at = end;
    }
    out
}

/// Every kernel this target and CPU can run: the portable one first.
fn kernels() -> Vec<Kernel> {
    let all = [
        Kernel::Portable,
        #[cfg(target_arch = "x86_64")]
        Kernel::Asm,
        #[cfg(target_arch = "x86_64")]
        Kernel::Lanes,
    ];
    all.into_iter()
        .filter(|k| !k.lanes() || lanes::available())
        .collect()
}

/// The sixteen-lane kernel, where this CPU has it.
fn lanes_kernel() -> Option<Kernel> {
    kernels().into_iter().find(|k| k.lanes())
}

fn hex(digest: &[u8; 16]) -> String {
    use std::fmt::Write as _;
    digest.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// RFC 1321's test suite (appendix A.5), and a million `a`s.
fn known_vectors() -> Vec<(Vec<u8>, &'static str)> {
    let digits = b"1234567890".repeat(8);
    vec![
        (b"".to_vec(), "d41d8cd98f00b204e9800998ecf8427e"),
        (b"a".to_vec(), "0cc175b9c0f1b6a831c399e269772661"),
        (b"abc".to_vec(), "900150983cd24fb0d6963f7d28e17f72"),
        (
            b"message digest".to_vec(),
            "f96b697d7cb7938d525a2f31aaf161d0",
        ),
        (
            b"abcdefghijklmnopqrstuvwxyz".to_vec(),
            "c3fcd3d76192e4007dfb496cca67e13b",
        ),
        (
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789".to_vec(),
            "d174ab98d277d9f5a5611c2c9f419d9f",
        ),
        (digits, "57edf4a22be3c955ac49da2e2107b67a"),
        (vec![b'a'; 1_000_000], "7707d6ae4e027c70eea2a935c2296f21"),
    ]
}

#[test]
fn the_scalar_hasher_matches_the_reference_at_every_padding_boundary() {
    for kernel in kernels() {
        for len in (0..200).chain([4095, 4096, 4097, 100_000]) {
            let chunks = body(len as u64 + 3, len, 70);
            let mut md5 = Md5::new(kernel);
            for c in &chunks {
                md5.update(c);
            }
            assert_eq!(
                md5.finalize(),
                reference(&chunks),
                "{kernel:?}, length {len}"
            );
        }
    }
}

#[test]
fn every_kernel_gives_the_known_digests() {
    for kernel in kernels() {
        for (input, want) in known_vectors() {
            // Whole, and in pieces that leave every tail length.
            let mut whole = Md5::new(kernel);
            whole.update(&input);
            let mut pieces = Md5::new(kernel);
            for piece in input.chunks(37) {
                pieces.update(piece);
            }
            for md5 in [whole, pieces] {
                assert_eq!(
                    hex(&md5.finalize()),
                    want,
                    "{kernel:?}, {} bytes",
                    input.len()
                );
            }
        }
    }
}

/// The portable kernel through the whole stream (inline, then its own pool, which has no
/// lanes): the known digests, and for random bodies of every awkward length the digest the
/// assembly core and the lanes give (and the reference) — bodies cut differently for each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_portable_stream_hashes_every_length_as_the_other_kernels_do() {
    for (input, want) in known_vectors() {
        let chunks = input.chunks(100_000).map(Bytes::copy_from_slice).collect();
        let got = hash_with(Kernel::Portable, chunks).await;
        assert_eq!(hex(&got), want, "{} bytes", input.len());
    }
    let offload = OFFLOAD_MIN as usize;
    let lens = [
        0,
        1,
        55,
        56,
        63,
        64,
        65,
        127,
        128,
        129,
        4096,
        offload - 1,
        offload,
        offload + 1,
        offload + 63,
        offload + 65,
        3 * 1024 * 1024 + 17,
        MAX_PENDING + 1,
        2 * MAX_PENDING + 55,
    ];
    for (i, &len) in lens.iter().enumerate() {
        // A chunk crossing OFFLOAD_MIN, or OFFLOAD_MIN reached exactly.
        let max_chunk = [1, 64, 1000, 70_000, offload, 1 << 20][i % 6].max(len / 256);
        let portable = body(i as u64 + 11, len, max_chunk);
        let want = reference(&portable);
        let got = hash_with(Kernel::Portable, portable.clone()).await;
        assert_eq!(hex(&got), hex(&want), "portable, {len} bytes");
        for kernel in kernels().into_iter().skip(1) {
            // The same bytes, cut elsewhere.
            let whole: Vec<u8> = portable.iter().flat_map(|c| c.iter().copied()).collect();
            let mut rng = Rng(i as u64 + 99);
            let mut other = Vec::new();
            let mut at = 0;
            while at < whole.len() {
                let end = (at + 1 + rng.below(max_chunk * 2)).min(whole.len());
                other.push(Bytes::copy_from_slice(&whole[at..end]));
                at = end;
            }
            assert_eq!(
                hex(&hash_with(kernel, other).await),
                hex(&got),
                "{kernel:?} against portable, {len} bytes"
            );
        }
    }
}

/// A portable stream is hashed by the portable kernel all the way: inline, then in the
/// portable pool, which has no lanes, whatever the process's kernel.
#[tokio::test]
async fn a_portable_stream_stays_portable_in_its_own_pool() {
    let mut md5 = Md5Stream::with_kernel(Kernel::Portable);
    let chunks = body(3, 2 * OFFLOAD_MIN as usize, 4096);
    let want = reference(&chunks);
    for c in chunks {
        md5.update(c).await;
        let kernel = match &md5.mode {
            Mode::Inline(m) => m.kernel,
            Mode::Pooled(b) => b.lock().md5.kernel,
        };
        assert_eq!(kernel, Kernel::Portable);
    }
    assert!(matches!(md5.mode, Mode::Pooled(_)), "past OFFLOAD_MIN");
    let pool = pool(Kernel::Portable).expect("the portable pool");
    assert!(!pool.simd && !pool.ready().lanes);
    assert_eq!(md5.finish().await, want);
}

#[test]
fn the_environment_switch_forces_the_portable_kernel() {
    let forced = |v: &str| Kernel::choose(Some(OsStr::new(v)), true);
    assert_eq!(forced("1"), Kernel::Portable);
    assert_eq!(forced("yes"), Kernel::Portable);
    assert_eq!(
        Kernel::choose(Some(OsStr::new("1")), false),
        Kernel::Portable
    );
    #[cfg(target_arch = "x86_64")]
    {
        assert_eq!(forced("0"), Kernel::Lanes, "0 forces nothing");
        assert_eq!(forced(""), Kernel::Lanes, "nor does an empty value");
        assert_eq!(Kernel::choose(None, true), Kernel::Lanes);
        assert_eq!(Kernel::choose(None, false), Kernel::Asm);
        assert_eq!(Kernel::choose(Some(OsStr::new("0")), false), Kernel::Asm);
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        assert_eq!(Kernel::choose(None, false), Kernel::Portable);
        assert_eq!(forced("0"), Kernel::Portable);
    }
}

/// The process's kernel is the one its environment and CPU call for: run the tests with
/// `SLUICE_MD5_PORTABLE=1` and every test that uses [`Md5Stream::new`] runs the portable one.
#[test]
fn the_process_kernel_follows_the_environment() {
    let env = std::env::var_os(PORTABLE_ENV);
    let want = Kernel::choose(env.as_deref(), lanes::available());
    assert_eq!(Kernel::get(), want);
    if env.is_some_and(|v| v == "1") {
        assert_eq!(Kernel::get(), Kernel::Portable);
    }
}

#[test]
fn sixteen_lanes_advance_exactly_like_sixteen_scalar_chains() {
    if !lanes::available() {
        eprintln!("no AVX-512F on this CPU: the kernel is not used here");
        return;
    }
    let mut rng = Rng(42);
    let data: Vec<u8> = (0..64 * 64 * 16).map(|_| rng.next() as u8).collect();
    // Blocks at odd addresses, as bodies' bytes are wherever the network put them.
    let (blocks, _) = data[5..].as_chunks::<64>();
    for round in 0..50 {
        let mut states = [[0u32; 4]; 16];
        let mut runs: [Option<lanes::Run<'_>>; 16] = [None; 16];
        for k in 0..16 {
            states[k] = [
                rng.next() as u32,
                rng.next() as u32,
                rng.next() as u32,
                rng.next() as u32,
            ];
            // Some lanes idle; runs of different lengths at different places.
            if rng.below(4) != 0 {
                let start = rng.below(blocks.len() - 64);
                runs[k] = Some(&blocks[start..start + 1 + rng.below(63)]);
            }
        }
        let before = states;
        let n = lanes::compress16(&mut states, &runs);
        let shortest = runs.iter().flatten().map(|r| r.len()).min().unwrap_or(0);
        assert_eq!(n, shortest, "round {round}");
        for k in 0..16 {
            let mut want = before[k];
            if let Some(run) = runs[k] {
                Kernel::Portable.compress(&mut want, &run[..n]);
            }
            assert_eq!(states[k], want, "round {round}, lane {k}");
        }
    }
}

/// The scalar hasher's state after `chunks`.
fn hashed(kernel: Kernel, chunks: &[Bytes]) -> Md5 {
    let mut md5 = Md5::new(kernel);
    for c in chunks {
        md5.update(c);
    }
    md5
}

#[test]
fn a_batch_hashes_each_body_as_if_alone_with_or_without_simd() {
    for (kernel, simd) in kernels().into_iter().map(|k| (k, k.lanes())) {
        for bodies in [1, 2, 3, 5, 16, 17, 40] {
            let mut rng = Rng(bodies as u64 * 7 + u64::from(simd));
            let inputs: Vec<(Vec<Bytes>, Vec<Bytes>)> = (0..bodies)
                .map(|i| {
                    // A prefix hashed before the batch (leaving a partial tail), then the batch.
                    let all = body(
                        rng.next(),
                        rng.below(300_000),
                        [1, 63, 4096, 100_000][i % 4],
                    );
                    let split = rng.below(all.len() + 1);
                    (all[..split].to_vec(), all[split..].to_vec())
                })
                .collect();
            let mut md5s: Vec<Md5> = inputs
                .iter()
                .map(|(before, _)| hashed(kernel, before))
                .collect();
            let batch: Vec<Vec<Bytes>> = inputs.iter().map(|(_, b)| b.clone()).collect();
            hash_many(&mut md5s, &batch, simd, &[]);
            for (i, (md5, (before, after))) in md5s.iter().zip(&inputs).enumerate() {
                let whole: Vec<Bytes> = before.iter().chain(after).cloned().collect();
                assert_eq!(
                    md5.finalize(),
                    reference(&whole),
                    "{kernel:?}, {bodies} bodies, body {i}"
                );
            }
        }
    }
}

async fn hash(chunks: Vec<Bytes>) -> [u8; 16] {
    hash_with(Kernel::get(), chunks).await
}

async fn hash_with(kernel: Kernel, chunks: Vec<Bytes>) -> [u8; 16] {
    let mut md5 = Md5Stream::with_kernel(kernel);
    for c in chunks {
        md5.update(c).await;
    }
    md5.finish().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_streams_hash_exactly_as_one_at_a_time() {
    for kernel in kernels() {
        concurrent_streams(kernel).await;
    }
}

/// Forty streams of `kernel` at once, in its pool.
async fn concurrent_streams(kernel: Kernel) {
    // Sizes straddle OFFLOAD_MIN, MAX_PENDING / 2 and MAX_PENDING; some are alone in the pool
    // for a while, most share it.
    let sizes = [
        0,
        1,
        65,
        OFFLOAD_MIN as usize,
        OFFLOAD_MIN as usize + 1,
        MAX_PENDING / 2 + 63,
        3 * 1024 * 1024 + 17,
        MAX_PENDING * 2 + 5,
    ];
    let mut tasks = tokio::task::JoinSet::new();
    for (i, size) in sizes.iter().cycle().take(40).enumerate() {
        // Tiny chunks for small bodies only: a 16 MiB body in bytes would be 16 M updates.
        let max_chunk = [1, 100, 4096, 70_000, 1 << 20][i % 5].max(size / 256);
        let chunks = body(i as u64 + 1, *size, max_chunk);
        tasks.spawn(async move {
            let want = reference(&chunks);
            (hash_with(kernel, chunks).await, want, i)
        });
    }
    let mut n = 0;
    while let Some(r) = tasks.join_next().await {
        let (got, want, i) = r.expect("task");
        assert_eq!(got, want, "{kernel:?}, body {i}");
        n += 1;
    }
    assert_eq!(n, 40);
}

#[tokio::test]
async fn a_lone_stream_is_not_left_waiting_for_company() {
    // One body in the pool, far below MAX_PENDING: its bytes are hashed without company.
    let chunks = body(5, OFFLOAD_MIN as usize + 1000, 4096);
    let want = reference(&chunks);
    assert_eq!(hash(chunks).await, want);
}

#[tokio::test]
async fn an_abandoned_stream_does_not_wedge_the_pool() {
    let mut dropped = Md5Stream::new();
    for c in body(7, 4 * 1024 * 1024, 1 << 20) {
        dropped.update(c).await;
    }
    drop(dropped);
    let chunks = body(8, 2 * 1024 * 1024, 1 << 16);
    let want = reference(&chunks);
    assert_eq!(hash(chunks).await, want);
}

/// Bodies that may wait are left, where the lanes ran dry, for a later batch; hashing what
/// is left later gives every body its own MD5, and one body far longer than the others is
/// left most of its bytes instead of having them hashed one block at a time.
#[test]
fn a_deferred_body_is_left_its_unhashed_bytes_and_hashes_exactly_later() {
    let Some(kernel) = lanes_kernel() else {
        return;
    };
    for round in 0..20u64 {
        let mut rng = Rng(round + 1);
        let bodies = 3 + rng.below(20);
        let inputs: Vec<(Vec<Bytes>, Vec<Bytes>)> = (0..bodies)
            .map(|i| {
                // Body 0 is far longer than the rest.
                let len = if i == 0 {
                    1_000_000 + rng.below(100_000)
                } else {
                    rng.below(200_000)
                };
                let all = body(rng.next(), len, [100_000, 63, 4096, 1][i % 4]);
                let split = rng.below(all.len().min(3) + 1);
                (all[..split].to_vec(), all[split..].to_vec())
            })
            .collect();
        let mut md5s: Vec<Md5> = inputs
            .iter()
            .map(|(before, _)| hashed(kernel, before))
            .collect();
        let batch: Vec<Vec<Bytes>> = inputs.iter().map(|(_, b)| b.clone()).collect();
        let defer: Vec<bool> = (0..bodies).map(|i| i == 0 || rng.below(2) == 0).collect();
        let owed: Vec<usize> = defer
            .iter()
            .map(|&d| if d { 0 } else { usize::MAX })
            .collect();
        let left = hash_many(&mut md5s, &batch, true, &owed);
        let long: usize = batch[0].iter().map(Bytes::len).sum();
        let long_left: usize = left[0].iter().map(Bytes::len).sum();
        assert!(
            long_left > long / 2,
            "round {round}: the long body was left {long_left} of {long} bytes"
        );
        for (i, (md5, left)) in md5s.iter_mut().zip(&left).enumerate() {
            if !defer[i] {
                assert!(left.is_empty(), "round {round}: body {i} may not wait");
            }
            if !left.is_empty() {
                // Handed back from the start of a slice of a chunk: no partial block kept.
                assert_eq!(
                    (md5.len % 64, md5.tail_len),
                    (0, 0),
                    "round {round}, body {i}"
                );
            }
            for c in left {
                md5.update(c);
            }
        }
        for (i, (md5, (before, after))) in md5s.iter().zip(&inputs).enumerate() {
            let whole: Vec<Bytes> = before.iter().chain(after).cloned().collect();
            assert_eq!(md5.finalize(), reference(&whole), "round {round}, body {i}");
        }
    }
}

/// Bodies that may wait are hashed as a rectangle: the lanes stop when the first runs dry,
/// and every body keeps the rest; a body owed bytes keeps the lanes going until it has had
/// them (and not much more), one owed everything is hashed to its end. Every body's MD5 is
/// exact once what it was left is hashed after.
#[test]
fn a_batch_hashes_a_rectangle_and_what_is_owed() {
    let Some(kernel) = lanes_kernel() else {
        return;
    };
    for round in 0..20u64 {
        let mut rng = Rng(round + 7);
        let bodies = 16;
        let lens: Vec<usize> = (0..bodies).map(|_| 64 * (1000 + rng.below(3000))).collect();
        let shortest = *lens.iter().min().expect("bodies");
        let owed: Vec<usize> = (0..bodies)
            .map(|i| match (round, i) {
                (0..10, _) => 0,
                (_, 0) => shortest + 64 * 500,
                (_, 1) => usize::MAX,
                _ => 0,
            })
            .collect();
        let inputs: Vec<Vec<Bytes>> = lens
            .iter()
            .enumerate()
            .map(|(i, &len)| body(rng.next(), len, [100_000, 4096, 1000][i % 3]))
            .collect();
        let mut md5s = vec![Md5::new(kernel); bodies];
        let left = hash_many(&mut md5s, &inputs, true, &owed);
        for (i, (md5, left)) in md5s.iter_mut().zip(&left).enumerate() {
            let hashed = md5.len as usize;
            let want = owed[i].min(lens[i]);
            // Past the rectangle: blocks completed from a chunk's tail (always hashed), and
            // for a body owed bytes, the rest of the run that paid them.
            let slack = if owed[i] == 0 { 64 * 64 } else { 100_000 };
            if owed[i] == usize::MAX {
                assert!(
                    left.is_empty(),
                    "round {round}: body {i} was owed everything"
                );
            } else if round < 10 || owed[i] > 0 {
                // The rectangle: the shortest body's length, unless more was owed.
                let floor = want.max(shortest);
                assert!(
                    (floor..=floor + slack).contains(&hashed),
                    "round {round}: body {i} hashed {hashed}, owed {want}, shortest {shortest}"
                );
            } else {
                // Riding along while others are owed bytes: at least the rectangle.
                assert!(
                    hashed >= shortest,
                    "round {round}: body {i} hashed {hashed}"
                );
            }
            for c in left {
                md5.update(c);
            }
            assert_eq!(
                md5.finalize(),
                reference(&inputs[i]),
                "round {round}, body {i}"
            );
        }
    }
}

/// A batch waits for every body in the pool (up to sixteen) unless one cannot wait; with
/// lanes, one hasher works per sixteen bodies.
#[test]
fn a_batch_waits_for_every_body_in_the_pool_or_for_an_urgent_one() {
    let body = || {
        Arc::new(Body {
            queue: Mutex::new(Queue {
                md5: Md5::new(Kernel::Portable),
                pending: VecDeque::new(),
                pending_bytes: 0,
                busy: true,
                wait: Wait::Nothing,
                abandoned: false,
            }),
            progress: Notify::new(),
        })
    };
    let ready = |waiting: usize, active: usize, urgent: bool| Ready {
        bodies: (0..waiting).map(|_| body()).collect(),
        urgent,
        active,
        working: 0,
        lanes: true,
    };
    let working = |waiting: usize, active: usize, working: usize, lanes: bool| Ready {
        working,
        lanes,
        ..ready(waiting, active, true)
    };
    assert!(!ready(0, 0, true).worth_a_batch(), "nothing to hash");
    assert!(ready(1, 1, false).worth_a_batch(), "a lone body");
    assert!(
        !ready(4, 5, false).worth_a_batch(),
        "one body of five has nothing yet"
    );
    assert!(ready(5, 5, false).worth_a_batch());
    assert!(ready(4, 5, true).worth_a_batch(), "a body cannot wait");
    assert!(!ready(15, 40, false).worth_a_batch());
    assert!(
        ready(16, 40, false).worth_a_batch(),
        "sixteen fill the lanes"
    );
    assert!(
        !working(16, 16, 1, true).worth_a_batch(),
        "sixteen bodies are one batch at a time"
    );
    assert!(working(16, 16, 0, true).worth_a_batch());
    assert!(
        working(20, 33, 2, true).worth_a_batch(),
        "33 bodies make three batches"
    );
    assert!(!working(20, 33, 3, true).worth_a_batch());
    assert!(
        working(16, 16, 3, false).worth_a_batch(),
        "one at a time, bodies are hashed by every hasher"
    );
    assert!(
        working(1, 2, 1, true).worth_a_batch(),
        "too few bodies for the lanes: one at a time, by every hasher"
    );
}

/// A writer waiting for room is owed what brings it back to half the limit; a finishing one,
/// everything; one that does not wait, nothing.
#[test]
fn a_waiting_writer_is_owed_what_it_waits_for() {
    let queue = |wait: Wait, pending_bytes: usize| Queue {
        md5: Md5::new(Kernel::Portable),
        pending: VecDeque::new(),
        pending_bytes,
        busy: true,
        wait,
        abandoned: false,
    };
    let over = MAX_PENDING + 5;
    assert_eq!(queue(Wait::Nothing, over).owed(), 0);
    assert_eq!(queue(Wait::Room, over).owed(), MAX_PENDING / 2 + 5);
    assert_eq!(queue(Wait::Room, MAX_PENDING / 4).owed(), 0);
    assert_eq!(queue(Wait::End, 10).owed(), usize::MAX);
}
