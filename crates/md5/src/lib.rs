//! The MD5 of every body (the S3 ETag), hashed for many concurrent bodies at once.
//!
//! MD5 is a chain: every 64-byte block depends on the one before, so one body hashes at one
//! core's scalar speed, and in a checkpoint burst of concurrent large PUTs through the node
//! agent MD5 is a large share of the CPU. Different bodies are independent chains, though,
//! and on x86-64 one AVX-512 instruction advances sixteen of them ([`lanes`]). So a body, once
//! it is larger than [`OFFLOAD_MIN`], is handed to a small pool of hasher threads; a hasher
//! takes every body with bytes waiting and advances them together, sixteen at a time, a body
//! joining a lane as another leaves it. Fewer than [`MIN_SIMD_BODIES`] bodies, or a kernel
//! without lanes, are hashed one at a time by the scalar core instead.
//!
//! A hasher waits until the lanes can be filled: it starts a batch when sixteen bodies have
//! bytes waiting, or every body in the pool has, or a body is needed (its writer called
//! [`Md5Stream::finish`] or is [`MAX_PENDING`] ahead). Waiting for every body, rather than
//! batching whatever is ready, is what puts most bytes into batches of sixteen. A 16-lane
//! step costs the same however many lanes are busy, so a batch hashes a rectangle: it stops
//! as soon as one of its lanes runs dry, and what the others have not reached waits for the
//! next batch, unless a writer waits for it. A writer that is [`MAX_PENDING`] ahead is owed
//! only what brings it back to half that, so the lanes stop soon after it; only a finishing
//! body is hashed to its end, one at a time once fewer than [`MIN_SIMD_BODIES`] lanes are
//! left. For the same reason, with the 16-lane kernel only one hasher works per sixteen
//! bodies in the pool: two hashers would split sixteen bodies into two batches of eight that
//! never meet again. (Fewer than [`MIN_SIMD_BODIES`] bodies are hashed one at a time, by as
//! many hashers as there are.) [`MAX_PENDING`] is large enough that writers seldom reach it
//! while the pool waits for a body that has nothing yet: each time they do, a batch starts
//! whose lanes run dry one by one.
//!
//! The bytes queued are the very `Bytes` the write path stores (reference counted, never
//! copied), at most `MAX_PENDING` per body: a writer that gets further ahead waits for the
//! hashers, so memory stays bounded and a saturated pool slows writers down rather than
//! growing queues. Bodies no larger than `OFFLOAD_MIN` are hashed inline by the caller: the
//! hop to another thread would cost more than it saves.
//!
//! # Kernels
//! The code that advances the chains is chosen once per process (a `Kernel`):
//! - on x86-64 with AVX-512F, the sixteen lanes, and md5-asm's assembly core for one body at
//!   a time;
//! - on x86-64 without AVX-512F, the assembly core alone;
//! - on every other target (aarch64: Grace, Graviton), or on x86-64 when the environment has
//!   `SLUICE_MD5_PORTABLE=1`, md-5's pure-Rust compression function, one body at a time.
//!
//! All compute the same function, and the pool, its batching and its bounds are the same for
//! each; without lanes a batch is simply hashed one body after another. md5-asm and the
//! AVX-512 code are built only for x86-64; the portable kernel is built everywhere, so that
//! it is tested on x86-64 too, against the others.

pub mod lanes;

use std::collections::VecDeque;
use std::ffi::OsStr;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};

use bytes::Bytes;
use tokio::sync::Notify;

/// Bytes of a body hashed inline before it moves to the pool.
pub const OFFLOAD_MIN: u64 = 256 * 1024;
/// Bytes of one body that may wait for a hasher before its writer waits too.
pub const MAX_PENDING: usize = 16 * 1024 * 1024;
/// Bodies below which the 16-lane kernel costs more per byte than the scalar core.
pub const MIN_SIMD_BODIES: usize = 3;
/// Bodies one hasher takes at a time.
const MAX_BATCH: usize = 64;

/// The environment variable that forces the portable kernel on x86-64 (any value but empty
/// or `0`).
const PORTABLE_ENV: &str = "SLUICE_MD5_PORTABLE";

/// The code that advances MD5 states. Every kernel computes the same function: a state may
/// be advanced by one and finished by another.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kernel {
    /// md-5's pure-Rust compression function, one body at a time: every target.
    Portable,
    /// md5-asm's assembly core, one body at a time.
    #[cfg(target_arch = "x86_64")]
    Asm,
    /// The assembly core, and sixteen bodies at a time by AVX-512 ([`lanes`]) where a batch
    /// has company. Only where [`lanes::available`].
    #[cfg(target_arch = "x86_64")]
    Lanes,
}

impl Kernel {
    /// The process's kernel, chosen on first use.
    fn get() -> Self {
        static KERNEL: OnceLock<Kernel> = OnceLock::new();
        *KERNEL.get_or_init(|| {
            Self::choose(
                std::env::var_os(PORTABLE_ENV).as_deref(),
                lanes::available(),
            )
        })
    }

    /// The fastest kernel this target and CPU (`avx512`) have, unless `portable` (the value of
    /// [`PORTABLE_ENV`]) asks for the portable one.
    fn choose(portable: Option<&OsStr>, avx512: bool) -> Self {
        let forced = portable.is_some_and(|v| !v.is_empty() && v != "0");
        #[cfg(target_arch = "x86_64")]
        if !forced {
            return if avx512 { Self::Lanes } else { Self::Asm };
        }
        let _ = (forced, avx512);
        Self::Portable
    }

    /// Advances `state` by `blocks`.
    fn compress(self, state: &mut [u32; 4], blocks: &[[u8; 64]]) {
        match self {
            Self::Portable => portable_md5::block_api::compress(state, blocks),
            #[cfg(target_arch = "x86_64")]
            Self::Asm | Self::Lanes => md5_asm::compress(state, blocks),
        }
    }

    /// Whether batches of this kernel advance sixteen bodies at a time.
    #[cfg(target_arch = "x86_64")]
    fn lanes(self) -> bool {
        self == Self::Lanes
    }

    /// Whether batches of this kernel advance sixteen bodies at a time: never, off x86-64.
    #[cfg(not(target_arch = "x86_64"))]
    #[expect(clippy::unused_self, reason = "the lanes are x86-64's")]
    fn lanes(self) -> bool {
        false
    }
}

/// MD5 over bytes fed in any pieces: the state after every whole block, and the partial
/// block after them.
#[derive(Clone, Copy)]
struct Md5 {
    /// What advances `state`.
    kernel: Kernel,
    state: [u32; 4],
    tail: [u8; 64],
    tail_len: usize,
    len: u64,
}

impl Md5 {
    const fn new(kernel: Kernel) -> Self {
        Self {
            kernel,
            state: [0x6745_2301, 0xefcd_ab89, 0x98ba_dcfe, 0x1032_5476],
            tail: [0; 64],
            tail_len: 0,
            len: 0,
        }
    }

    /// Moves `data` into the tail until it is a whole block; returns what is left of `data`.
    fn fill_tail<'a>(&mut self, data: &'a [u8]) -> &'a [u8] {
        let take = (64 - self.tail_len).min(data.len());
        self.tail[self.tail_len..self.tail_len + take].copy_from_slice(&data[..take]);
        self.tail_len += take;
        &data[take..]
    }

    fn update(&mut self, mut data: &[u8]) {
        self.len += data.len() as u64;
        if self.tail_len > 0 {
            data = self.fill_tail(data);
            if self.tail_len < 64 {
                return;
            }
            self.kernel.compress(&mut self.state, &[self.tail]);
            self.tail_len = 0;
        }
        let (blocks, rest) = data.as_chunks::<64>();
        self.kernel.compress(&mut self.state, blocks);
        self.fill_tail(rest);
    }

    fn finalize(&self) -> [u8; 16] {
        let mut state = self.state;
        let mut last = [[0u8; 64]; 2];
        last[0][..self.tail_len].copy_from_slice(&self.tail[..self.tail_len]);
        last[0][self.tail_len] = 0x80;
        let blocks = if self.tail_len < 56 { 1 } else { 2 };
        last[blocks - 1][56..].copy_from_slice(&self.len.wrapping_mul(8).to_le_bytes());
        self.kernel.compress(&mut state, &last[..blocks]);
        let mut out = [0u8; 16];
        for (o, s) in out.chunks_exact_mut(4).zip(state) {
            o.copy_from_slice(&s.to_le_bytes());
        }
        out
    }
}

/// A body's MD5, computed as its bytes go by.
pub struct Md5Stream {
    /// Its pool's kernel (and the inline hasher's).
    kernel: Kernel,
    mode: Mode,
}

enum Mode {
    /// Hashed by the caller (small so far, or no pool).
    Inline(Md5),
    /// Handed to the pool.
    Pooled(Arc<Body>),
}

impl Default for Md5Stream {
    fn default() -> Self {
        Self::new()
    }
}

impl Md5Stream {
    pub fn new() -> Self {
        Self::with_kernel(Kernel::get())
    }

    /// A stream hashed by `kernel`, inline and in that kernel's pool.
    fn with_kernel(kernel: Kernel) -> Self {
        Self {
            kernel,
            mode: Mode::Inline(Md5::new(kernel)),
        }
    }

    /// Appends `chunk` to the body. Waits only when the pool is [`MAX_PENDING`] behind, until
    /// it is no longer.
    pub async fn update(&mut self, chunk: Bytes) {
        match &mut self.mode {
            Mode::Inline(md5) => match pool(self.kernel) {
                Some(pool) if md5.len + chunk.len() as u64 > OFFLOAD_MIN => {
                    let body = Arc::new(Body {
                        queue: Mutex::new(Queue {
                            md5: *md5,
                            pending: VecDeque::new(),
                            pending_bytes: 0,
                            busy: false,
                            wait: Wait::Nothing,
                            abandoned: false,
                        }),
                        progress: Notify::new(),
                    });
                    pool.ready().active += 1;
                    pool.submit(&body, chunk);
                    self.mode = Mode::Pooled(body);
                }
                _ => md5.update(&chunk),
            },
            Mode::Pooled(body) => {
                if let Some(pool) = pool(self.kernel) {
                    pool.submit(body, chunk);
                    let over = {
                        let mut q = body.lock();
                        let over = q.pending_bytes > MAX_PENDING;
                        if over {
                            q.wait = Wait::Room;
                        }
                        over
                    };
                    if over {
                        pool.hurry();
                        body.wait_until(|q| q.pending_bytes <= MAX_PENDING).await;
                        body.lock().wait = Wait::Nothing;
                    }
                }
            }
        }
    }

    /// The MD5 of everything appended, once the pool has caught up with it.
    pub async fn finish(self) -> [u8; 16] {
        match &self.mode {
            Mode::Inline(md5) => md5.finalize(),
            Mode::Pooled(body) => {
                let busy = {
                    let mut q = body.lock();
                    q.wait = Wait::End;
                    q.busy
                };
                if busy && let Some(pool) = pool(self.kernel) {
                    pool.hurry();
                }
                body.wait_until(|q| !q.busy).await;
                body.lock().md5.finalize()
            }
        }
    }
}

impl Drop for Md5Stream {
    /// An abandoned body (its request failed or went away): the hashers skip what is queued.
    fn drop(&mut self) {
        if let Mode::Pooled(body) = &self.mode {
            let mut q = body.lock();
            q.pending.clear();
            q.pending_bytes = 0;
            q.abandoned = true;
            drop(q);
            if let Some(pool) = pool(self.kernel) {
                let mut ready = pool.ready();
                ready.active = ready.active.saturating_sub(1);
                // One body fewer to wait for.
                if ready.worth_a_batch() {
                    pool.wake.notify_one();
                }
            }
        }
    }
}

/// One body in the pool.
struct Body {
    queue: Mutex<Queue>,
    /// Woken whenever a hasher has advanced this body.
    progress: Notify,
}

struct Queue {
    /// The MD5 of every byte hashed so far (not `pending`).
    md5: Md5,
    pending: VecDeque<Bytes>,
    /// Bytes queued or being hashed.
    pending_bytes: usize,
    /// In the pool's ready queue or on a hasher: `md5` is not final.
    busy: bool,
    /// What its writer waits for: a batch may not leave it all its bytes (see
    /// [`Queue::owed`]).
    wait: Wait,
    /// Its stream was dropped: nothing of it is worth hashing any more.
    abandoned: bool,
}

/// What a body's writer waits for, if anything.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Wait {
    Nothing,
    /// To be no more than [`MAX_PENDING`] ahead of the hashers.
    Room,
    /// Its MD5 ([`Md5Stream::finish`]).
    End,
}

impl Queue {
    /// Bytes a batch that takes this body's queue must hash rather than hand back: all of
    /// them once it is finishing, down to half of [`MAX_PENDING`] while its writer waits to
    /// get under it, none otherwise.
    fn owed(&self) -> usize {
        match self.wait {
            Wait::End => usize::MAX,
            Wait::Room => self.pending_bytes.saturating_sub(MAX_PENDING / 2),
            Wait::Nothing => 0,
        }
    }
}

impl Body {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    async fn wait_until(&self, done: impl Fn(&Queue) -> bool) {
        loop {
            // Created before the check, so a wake-up between the check and the await is kept.
            let progressed = self.progress.notified();
            if done(&self.lock()) {
                return;
            }
            progressed.await;
        }
    }
}

struct Pool {
    /// Batches are hashed sixteen bodies at a time ([`Kernel::lanes`]).
    simd: bool,
    ready: Mutex<Ready>,
    wake: Condvar,
}

struct Ready {
    bodies: VecDeque<Arc<Body>>,
    /// A body cannot wait for the lanes to fill: start a batch now.
    urgent: bool,
    /// Bodies in the pool whose streams are alive.
    active: usize,
    /// Hashers at work on a batch.
    working: usize,
    /// Batches are hashed sixteen bodies at a time (the pool's `simd`).
    lanes: bool,
}

impl Ready {
    /// Sixteen bodies wait, or every body in the pool does, or one cannot wait; and, where
    /// batches use the lanes, fewer hashers are at work than there are sixteens of bodies in
    /// the pool.
    fn worth_a_batch(&self) -> bool {
        let lanes = self.lanes && self.active >= MIN_SIMD_BODIES;
        !self.bodies.is_empty()
            && (self.urgent || self.bodies.len() >= self.active.clamp(1, 16))
            && (!lanes || self.working < self.active.div_ceil(16))
    }
}

/// The hasher pool of `kernel`, started on first use; `None` if no thread could be started.
/// A process uses only the pool of its own kernel ([`Kernel::get`]); tests start the others.
fn pool(kernel: Kernel) -> Option<&'static Arc<Pool>> {
    static PORTABLE: OnceLock<Option<Arc<Pool>>> = OnceLock::new();
    #[cfg(target_arch = "x86_64")]
    static ASM: OnceLock<Option<Arc<Pool>>> = OnceLock::new();
    #[cfg(target_arch = "x86_64")]
    static LANES: OnceLock<Option<Arc<Pool>>> = OnceLock::new();
    let cell = match kernel {
        Kernel::Portable => &PORTABLE,
        #[cfg(target_arch = "x86_64")]
        Kernel::Asm => &ASM,
        #[cfg(target_arch = "x86_64")]
        Kernel::Lanes => &LANES,
    };
    cell.get_or_init(|| Pool::start(kernel)).as_ref()
}

impl Pool {
    fn start(kernel: Kernel) -> Option<Arc<Self>> {
        let pool = Arc::new(Self {
            simd: kernel.lanes(),
            ready: Mutex::new(Ready {
                bodies: VecDeque::new(),
                urgent: false,
                active: 0,
                working: 0,
                lanes: kernel.lanes(),
            }),
            wake: Condvar::new(),
        });
        let hashers = std::thread::available_parallelism().map_or(2, |n| n.get().min(4));
        let mut started = 0;
        for i in 0..hashers {
            let pool = Arc::clone(&pool);
            let spawned = std::thread::Builder::new()
                .name(format!("sluice-md5-{i}"))
                .spawn(move || pool.hash_forever());
            started += usize::from(spawned.is_ok());
        }
        (started > 0).then_some(pool)
    }

    fn ready(&self) -> MutexGuard<'_, Ready> {
        self.ready.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn submit(&self, body: &Arc<Body>, chunk: Bytes) {
        if chunk.is_empty() {
            return;
        }
        let schedule = {
            let mut q = body.lock();
            q.pending_bytes += chunk.len();
            q.pending.push_back(chunk);
            !std::mem::replace(&mut q.busy, true)
        };
        if schedule {
            let mut ready = self.ready();
            ready.bodies.push_back(Arc::clone(body));
            if ready.worth_a_batch() {
                self.wake.notify_one();
            }
        }
    }

    /// Starts a batch now: a body is needed.
    fn hurry(&self) {
        let mut ready = self.ready();
        ready.urgent = true;
        if ready.worth_a_batch() {
            self.wake.notify_one();
        }
    }

    fn hash_forever(&self) {
        loop {
            let batch: Vec<Arc<Body>> = {
                let mut ready = self.ready();
                while !ready.worth_a_batch() {
                    ready = self
                        .wake
                        .wait(ready)
                        .unwrap_or_else(PoisonError::into_inner);
                }
                ready.urgent = false;
                ready.working += 1;
                let n = ready.bodies.len().min(MAX_BATCH);
                ready.bodies.drain(..n).collect()
            };
            self.hash_batch(&batch);
            let mut ready = self.ready();
            ready.working -= 1;
            // Another hasher may have waited for this one to finish.
            if ready.worth_a_batch() {
                self.wake.notify_one();
            }
        }
    }

    /// Advances every body of `batch` through the bytes it had queued, as far as
    /// [`hash_many`] takes it; the rest goes back to its queue.
    fn hash_batch(&self, batch: &[Arc<Body>]) {
        let mut md5s = Vec::with_capacity(batch.len());
        let mut chunks: Vec<Vec<Bytes>> = Vec::with_capacity(batch.len());
        let mut owed = Vec::with_capacity(batch.len());
        // Only where other bodies keep the lanes busy: a lone body would never have company.
        let company = self.simd && batch.len() >= MIN_SIMD_BODIES;
        for body in batch {
            let mut q = body.lock();
            md5s.push(q.md5);
            chunks.push(q.pending.drain(..).collect());
            owed.push(if company { q.owed() } else { usize::MAX });
        }
        let left = hash_many(&mut md5s, &chunks, self.simd, &owed);
        let mut requeue = false;
        for (((body, md5), taken), left) in batch.iter().zip(md5s).zip(&chunks).zip(left) {
            {
                let mut q = body.lock();
                q.md5 = md5;
                let n: usize = taken.iter().map(Bytes::len).sum::<usize>()
                    - left.iter().map(Bytes::len).sum::<usize>();
                q.pending_bytes = q.pending_bytes.saturating_sub(n);
                if !q.abandoned {
                    for chunk in left.into_iter().rev() {
                        q.pending.push_front(chunk);
                    }
                }
                q.busy = !q.pending.is_empty();
                if q.busy {
                    let mut ready = self.ready();
                    ready.bodies.push_back(Arc::clone(body));
                    // Still owed bytes (needed since the batch began, say): the hurry that
                    // said so may have found the batch under way, without it.
                    ready.urgent |= q.owed() > 0;
                    requeue = true;
                }
            }
            body.progress.notify_waiters();
        }
        if requeue && self.ready().worth_a_batch() {
            self.wake.notify_one();
        }
    }
}

/// Appends `chunks[i]` to `md5s[i]` for every `i`, or at least its first `owed[i]` bytes:
/// whole blocks sixteen bodies at a time (`simd`), the rest one body at a time.
///
/// The lanes stop as soon as fewer are busy than at the start (a lane ran dry), unless a body
/// in the batch is still owed bytes; they stop anyway below [`MIN_SIMD_BODIES`]. Then each body
/// is hashed one block run at a time until it has had its `owed[i]` bytes, and what is left
/// is returned (`left[i]`, in order, from the start of a slice of a chunk) with `md5s[i]`
/// covering only what came before it, for the body to join a later batch instead of costing
/// up to sixteen times as much per byte now. `owed[i] == usize::MAX` hashes everything.
fn hash_many(
    md5s: &mut [Md5],
    chunks: &[Vec<Bytes>],
    simd: bool,
    owed: &[usize],
) -> Vec<Vec<Bytes>> {
    let lens_before: Vec<u64> = md5s.iter().map(|m| m.len).collect();
    // Each body's bytes as runs of whole blocks, in order: slices of its chunks, and blocks
    // completed from a partial tail (copied, at most one per chunk) kept in `carried`.
    let mut carried: Vec<Vec<[u8; 64]>> = Vec::with_capacity(md5s.len());
    let mut plans: Vec<Vec<Piece>> = Vec::with_capacity(md5s.len());
    for (md5, chunks) in md5s.iter_mut().zip(chunks) {
        let mut blocks = Vec::new();
        let mut plan = Vec::new();
        let mut tail = (md5.tail, md5.tail_len);
        for (c, chunk) in chunks.iter().enumerate() {
            md5.len += chunk.len() as u64;
            let mut at = 0;
            if tail.1 > 0 {
                let take = (64 - tail.1).min(chunk.len());
                tail.0[tail.1..tail.1 + take].copy_from_slice(&chunk[..take]);
                tail.1 += take;
                at = take;
                if tail.1 < 64 {
                    continue;
                }
                plan.push(Piece::Carried(blocks.len()));
                blocks.push(tail.0);
                tail.1 = 0;
            }
            let whole = (chunk.len() - at) / 64 * 64;
            if whole > 0 {
                plan.push(Piece::Chunk(c, at..at + whole));
            }
            let rest = &chunk[at + whole..];
            tail.0[..rest.len()].copy_from_slice(rest);
            tail.1 = rest.len();
        }
        (md5.tail, md5.tail_len) = tail;
        carried.push(blocks);
        plans.push(plan);
    }
    let mut runs: Vec<VecDeque<&[[u8; 64]]>> = plans
        .iter()
        .enumerate()
        .map(|(i, plan)| {
            plan.iter()
                .map(|piece| match piece {
                    Piece::Carried(b) => std::slice::from_ref(&carried[i][*b]),
                    Piece::Chunk(c, r) => chunks[i][*c][r.clone()].as_chunks::<64>().0,
                })
                .collect()
        })
        .collect();

    // Bytes of each body hashed so far in this batch (whole blocks, carried ones included).
    let mut hashed = vec![0usize; md5s.len()];
    let still_owed =
        |i: usize, hashed: &[usize]| hashed[i] < owed.get(i).copied().unwrap_or(usize::MAX);
    if simd {
        // Lanes hold bodies; a body that runs out leaves its lane to the next one waiting.
        let mut waiting: VecDeque<usize> =
            (0..runs.len()).filter(|&i| !runs[i].is_empty()).collect();
        let mut lanes: [Option<usize>; 16] = [None; 16];
        let mut full = None;
        loop {
            for lane in &mut lanes {
                if lane.is_none() {
                    *lane = waiting.pop_front();
                }
            }
            let busy = lanes.iter().flatten().count();
            let full = *full.get_or_insert(busy);
            let owing = lanes
                .iter()
                .flatten()
                .chain(&waiting)
                .any(|&i| still_owed(i, &hashed));
            if busy < MIN_SIMD_BODIES || (busy < full && !owing) {
                break;
            }
            let mut states = [[0u32; 4]; 16];
            let mut input: [Option<lanes::Run<'_>>; 16] = [None; 16];
            for (k, lane) in lanes.iter().enumerate() {
                if let Some(i) = *lane {
                    states[k] = md5s[i].state;
                    input[k] = runs[i].front().copied();
                }
            }
            let n = lanes::compress16(&mut states, &input);
            for (k, lane) in lanes.iter_mut().enumerate() {
                if let Some(i) = *lane {
                    md5s[i].state = states[k];
                    hashed[i] += n * 64;
                    let body = &mut runs[i];
                    if let Some(front) = body.front_mut() {
                        *front = &front[n..];
                        if front.is_empty() {
                            body.pop_front();
                        }
                    }
                    if body.is_empty() {
                        *lane = None;
                    }
                }
            }
        }
    }
    let mut left = vec![Vec::new(); md5s.len()];
    for (i, (md5, runs)) in md5s.iter_mut().zip(&mut runs).enumerate() {
        // A block completed from a tail is hashed here (it is not a slice of a chunk); from
        // the first slice of a chunk on, once the body has had what it is owed, the rest is
        // handed back.
        while let Some(front) = runs.front() {
            let piece = &plans[i][plans[i].len() - runs.len()];
            if let Piece::Chunk(c, r) = piece
                && !still_owed(i, &hashed)
            {
                let at = r.end - front.len() * 64;
                let mut rest = vec![chunks[i][*c].slice(at..)];
                rest.extend(chunks[i][c + 1..].iter().cloned());
                let before: usize = chunks[i][..*c].iter().map(Bytes::len).sum();
                md5.len = lens_before[i] + (before + at) as u64;
                md5.tail_len = 0;
                left[i] = rest;
                runs.clear();
                break;
            }
            md5.kernel.compress(&mut md5.state, front);
            hashed[i] += front.len() * 64;
            runs.pop_front();
        }
    }
    left
}

/// Where a run of whole blocks is: a block completed from a partial tail, or a range of a
/// chunk.
enum Piece {
    Carried(usize),
    Chunk(usize, std::ops::Range<usize>),
}

#[cfg(test)]
mod tests;
