use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use futures::stream::BoxStream;
use object_store::memory::InMemory;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, ObjectMeta, PutMultipartOptions, PutOptions,
    PutPayload, PutResult, UploadPart,
};
use sluice_meta::Ledger;
use tokio::sync::mpsc;

use super::*;

/// An in-memory store whose multipart part uploads say when they first run, and which
/// keeps the [`BlobCrcSlot`] (if any) each blob's put came with.
#[derive(Debug)]
struct Watched {
    inner: InMemory,
    started: mpsc::UnboundedSender<usize>,
    slots: std::sync::Mutex<Vec<(Path, Option<BlobCrcSlot>)>>,
}

impl Watched {
    fn new(started: mpsc::UnboundedSender<usize>) -> Self {
        Self {
            inner: InMemory::new(),
            started,
            slots: std::sync::Mutex::default(),
        }
    }

    fn keep_slot(&self, location: &Path, extensions: &object_store::Extensions) {
        self.slots
            .lock()
            .expect("slots")
            .push((location.clone(), extensions.get::<BlobCrcSlot>().cloned()));
    }
}

impl fmt::Display for Watched {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Watched")
    }
}

#[derive(Debug)]
struct WatchedUpload {
    inner: Box<dyn MultipartUpload>,
    started: mpsc::UnboundedSender<usize>,
}

#[async_trait]
impl MultipartUpload for WatchedUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        let (started, len) = (self.started.clone(), data.content_length());
        let part = self.inner.put_part(data);
        Box::pin(async move {
            let _ = started.send(len);
            part.await
        })
    }

    async fn complete(&mut self) -> object_store::Result<PutResult> {
        self.inner.complete().await
    }

    async fn abort(&mut self) -> object_store::Result<()> {
        self.inner.abort().await
    }
}

#[async_trait]
impl ObjectStore for Watched {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.keep_slot(location, &opts.extensions);
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.keep_slot(location, &opts.extensions);
        let inner = self.inner.put_multipart_opts(location, opts).await?;
        Ok(Box::new(WatchedUpload {
            inner,
            started: self.started.clone(),
        }))
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

#[test]
fn a_file_range_reads_exactly_or_fails() {
    use std::io::Write;
    let dir = std::env::temp_dir().join(format!("sluice-blob-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("blob");
    let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::File::create(&path)
        .and_then(|mut f| f.write_all(&data))
        .expect("write");
    let file = std::fs::File::open(&path).expect("open");
    // Grains of 8 KiB: reads of 4 KiB or more go through kept buffers.
    let buffers = ReadBuffers::new(8192);
    let whole = read_file_range(&file, None, 0..8192, &buffers).expect("read");
    assert_eq!(&whole[..], &data[..8192]);
    let at = whole.as_ptr();
    drop(whole);
    // Into the same buffer, over the bytes it held: exactly the range's.
    let got = read_file_range(&file, None, 1234..5678, &buffers).expect("read");
    assert_eq!(got.as_ptr(), at);
    assert_eq!(&got[..], &data[1234..5678]);
    for range in [9_000..11_000, 5_000..11_000] {
        let err = read_file_range(&file, None, range, &buffers).expect_err("past the end");
        assert_eq!(err.kind(), std::io::ErrorKind::UnexpectedEof);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A file of `len` patterned bytes in a fresh directory of the system's temporary directory
/// (a real disk here: `O_DIRECT` reads need one), written, synced and dropped from the page
/// cache.
fn patterned_file(name: &str, len: usize) -> (tempfile::TempDir, std::path::PathBuf, Vec<u8>) {
    use std::io::Write;
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join(name);
    let data: Vec<u8> = (0..len as u64)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 7) as u8)
        .collect();
    let mut f = std::fs::File::create(&path).expect("create");
    f.write_all(&data).expect("write");
    f.sync_all().expect("sync");
    uncache(&path);
    (dir, path, data)
}

/// Drops the (clean) pages of the file at `path` from the page cache.
fn uncache(path: &std::path::Path) {
    let f = std::fs::File::open(path).expect("open");
    rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::DontNeed).expect("fadvise");
}

#[test]
fn a_grain_is_read_around_the_page_cache_unless_its_first_page_is_cached() {
    let len = 64 * 1024;
    let (_dir, path, data) = patterned_file("blob", len);
    let file = std::fs::File::open(&path).expect("open");
    let direct = open_direct(&file, &path).expect("O_DIRECT");
    let buffers = ReadBuffers::new(len);
    let mut page = vec![0u8; buffers::ALIGN];
    // Each probe below looks at a page no probe or read has touched: a probe's miss brings
    // its page in.
    assert_eq!(
        probe_cache(&file, 8192, &mut page),
        None,
        "a dropped page is cached"
    );
    // Its first page not cached: read around the cache, which it leaves as it was.
    let got = read_file_range(&file, Some(&direct), 0..len as u64, &buffers).expect("read");
    assert!(got[..] == data[..], "wrong bytes read directly");
    assert_eq!(
        probe_cache(&file, 16_384, &mut page),
        None,
        "the direct read filled the page cache"
    );
    // Its first page cached (read through the cache): the whole grain is read through the
    // cache, which holds all of it then.
    drop(got);
    rustix::io::pread(&file, &mut page, 0).expect("read the first page");
    let got = read_file_range(&file, Some(&direct), 0..len as u64, &buffers).expect("read");
    assert!(got[..] == data[..], "wrong bytes read through the cache");
    assert_eq!(probe_cache(&file, 24_576, &mut page), Some(buffers::ALIGN));
    assert!(
        page[..] == data[24_576..28_672],
        "the probe read the wrong bytes"
    );
    // A probe from inside a page reads to that page's end, and at the end of the file none.
    assert_eq!(
        probe_cache(&file, 24_576 + 100, &mut page),
        Some(buffers::ALIGN - 100)
    );
    assert_eq!(probe_cache(&file, len as u64, &mut page), None);
}

#[test]
fn direct_reads_return_exactly_the_range_from_any_offset_to_the_end_of_the_file() {
    // Three blocks and a part of a fourth: ranges start and end inside blocks, and reach the
    // file's last, partial block.
    let len = 3 * buffers::ALIGN + 1234;
    let (_dir, path, data) = patterned_file("blob", len);
    let file = std::fs::File::open(&path).expect("open");
    let Some(direct) = open_direct(&file, &path) else {
        panic!("the temporary directory's filesystem refused O_DIRECT");
    };
    let buffers = ReadBuffers::new(4 * buffers::ALIGN);
    let ranges = [
        0..len,
        0..1,
        1..len,
        4095..4097,
        5000..len,
        len - 1..len,
        4096..8192,
        100..3 * 4096,
    ];
    for range in ranges {
        // Every read from the disk: a cached first page would take the read to the cache.
        uncache(&path);
        let r = range.start as u64..range.end as u64;
        let got = read_file_range(&file, Some(&direct), r, &buffers).expect("read");
        assert_eq!(got.len(), range.len(), "{range:?}");
        assert!(got[..] == data[range.clone()], "{range:?}: wrong bytes");
    }
}

#[test]
fn a_direct_read_past_the_end_of_the_file_fails_and_never_returns_short_data() {
    let len = 2 * buffers::ALIGN + 10;
    let (_dir, path, _) = patterned_file("blob", len);
    let file = std::fs::File::open(&path).expect("open");
    let direct = open_direct(&file, &path).expect("O_DIRECT");
    let buffers = ReadBuffers::new(4 * buffers::ALIGN);
    let len = len as u64;
    // Short by a byte inside the last block, by whole blocks, and wholly past the end.
    for range in [
        0..len + 1,
        4096..len + 5000,
        len..len + 4096,
        len + 10..len + 20,
    ] {
        let err = read_file_range(&file, Some(&direct), range.clone(), &buffers)
            .expect_err("past the end");
        assert_eq!(err.kind(), std::io::ErrorKind::UnexpectedEof, "{range:?}");
        assert!(err.to_string().contains("shorter than its record"), "{err}");
    }
}

#[test]
fn a_read_sees_a_write_still_in_the_page_cache() {
    use std::io::{Seek, SeekFrom, Write};
    let (_dir, path, mut data) = patterned_file("blob", 64 * 1024);
    let file = std::fs::File::open(&path).expect("open");
    let direct = open_direct(&file, &path).expect("O_DIRECT");
    let buffers = ReadBuffers::new(64 * 1024);
    // A byte changed through the page cache and not synced (a dirty page): the read must see
    // it, as the checksums' check relies on. The dirty page is at 40,000, past the first
    // (not cached): the read goes around the cache, and the kernel writes the page back first.
    let mut w = std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .expect("open to write");
    w.seek(SeekFrom::Start(40_000)).expect("seek");
    w.write_all(&[!data[40_000]]).expect("write");
    data[40_000] = !data[40_000];
    let got = read_file_range(&file, Some(&direct), 0..64 * 1024, &buffers).expect("read");
    assert!(
        got[..] == data[..],
        "the direct read missed the cached write"
    );
}

#[test]
fn a_refused_direct_read_is_left_to_the_page_cache_and_a_missing_file_has_no_direct_handle() {
    let (dir, path, data) = patterned_file("blob", 4 * buffers::ALIGN);
    let file = std::fs::File::open(&path).expect("open");
    assert!(open_direct(&file, &dir.path().join("absent")).is_none());
    let direct = open_direct(&file, &path).expect("O_DIRECT");
    // A buffer off its block boundary: the kernel refuses the direct read (EINVAL), which
    // reads nothing and is no error, so that the caller reads the range through the cache.
    let mut buf = vec![0u8; 6 * buffers::ALIGN];
    let off = buf.as_ptr().align_offset(buffers::ALIGN) + 1;
    let space = &mut buf[off..off + 4 * buffers::ALIGN];
    let never = |_| -> std::io::Error { unreachable!("not short") };
    let got = read_direct(&direct, space, 0, 4 * buffers::ALIGN, never).expect("no error");
    assert_eq!(got, 0, "a misaligned direct read was taken");
    // The same read with an aligned buffer is taken whole.
    let buffers = ReadBuffers::new(4 * buffers::ALIGN);
    let mut lent = buffers.take(4 * buffers::ALIGN);
    let got = read_direct(&direct, lent.space(), 0, 4 * buffers::ALIGN, never).expect("read");
    assert_eq!(got, 4 * buffers::ALIGN);
    assert!(lent.freeze(0..got)[..] == data[..]);
}

#[tokio::test]
async fn a_lane_read_on_local_files_sends_each_blob_from_one_open_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root: Arc<dyn ObjectStore> =
        Arc::new(object_store::local::LocalFileSystem::new_with_prefix(dir.path()).expect("local"));
    const GRAIN: u64 = 64 * 1024;
    let (a, b) = (
        vec![1u8; 3 * GRAIN as usize - 5],
        vec![2u8; GRAIN as usize + 9],
    );
    for (name, bytes) in [("ckpt/a", &a), ("ckpt/b", &b)] {
        root.put(
            &Path::from(format!("tenants/t/{name}")),
            bytes.clone().into(),
        )
        .await
        .expect("put");
    }
    let segments = [
        Segment {
            blob: "ckpt/a".into(),
            size: a.len() as u64,
            checksums: None,
        },
        Segment {
            blob: "ckpt/b".into(),
            size: b.len() as u64,
            checksums: None,
        },
    ];
    let whole = 0..(a.len() + b.len()) as u64;
    let pacer = Pacer::unthrottled("t");
    let lane = SendfileLane::default();

    // Without local files (any other backend) a lane changes nothing: bytes.
    let plain = BlobStore::new(Arc::clone(&root), GRAIN, GRAIN);
    let got: Vec<Bytes> = plain
        .read(&pacer, &segments, whole.clone(), Some(&lane))
        .try_collect()
        .await
        .expect("read");
    assert!(got.iter().all(|g| !SendfileLane::is_placeholder(g)));
    assert_eq!(got.concat(), [a.clone(), b.clone()].concat());

    let local = BlobStore::new(root, GRAIN, GRAIN).with_local_files();
    // From 10 bytes into `a` (grains count from the range's start) to 3 bytes into the
    // second grain of `b`.
    let range = 10..a.len() as u64 + GRAIN + 3;
    let got: Vec<Bytes> = local
        .read(&pacer, &segments, range, Some(&lane))
        .try_collect()
        .await
        .expect("read");
    let mut sends = Vec::new();
    for g in &got {
        assert!(SendfileLane::is_placeholder(g));
        let send = lane.next(g).expect("queued in order");
        lane.sent(send.len);
        sends.push(send);
    }
    let stretches: Vec<(u64, usize)> = sends.iter().map(|s| (s.offset, s.len)).collect();
    let g = GRAIN as usize;
    assert_eq!(
        stretches,
        [
            (10, g),
            (10 + GRAIN, g),
            (10 + 2 * GRAIN, g - 15),
            (0, g),
            (GRAIN, 3)
        ]
    );
    // The grains of one blob share its open file; the two blobs' files differ.
    assert!(
        sends[..3]
            .iter()
            .all(|s| Arc::ptr_eq(&s.file, &sends[0].file))
    );
    assert!(Arc::ptr_eq(&sends[3].file, &sends[4].file));
    assert!(!Arc::ptr_eq(&sends[0].file, &sends[3].file));

    // A blob shorter than its record fails the read before any of it is stood in.
    let on_disk = dir.path().join("tenants/t/ckpt/a");
    std::fs::OpenOptions::new()
        .write(true)
        .open(&on_disk)
        .and_then(|f| f.set_len(2 * GRAIN))
        .expect("truncate");
    let mut read = local.read(&pacer, &segments[..1], 10..a.len() as u64, Some(&lane));
    let first = read.next().await.expect("an item");
    assert!(
        first.is_err(),
        "the shortfall is found when the blob is opened"
    );
}

#[tokio::test]
async fn an_inline_read_is_exact_or_fails() {
    let body = Bytes::from_static(b"0123456789");
    let pacer = Pacer::unthrottled("t");
    let read = |r: Range<u64>| read_inline(&pacer, body.clone(), r).try_collect::<Vec<_>>();
    assert_eq!(
        read(2..5).await.expect("read"),
        [Bytes::from_static(b"234")]
    );
    assert!(read(3..3).await.expect("empty").is_empty());
    assert!(read(5..11).await.is_err(), "a range past the body");
    assert_eq!(
        pacer
            .metrics
            .bytes_out
            .load(std::sync::atomic::Ordering::Relaxed),
        3 + 6
    );
}

/// Regression: an admitted part used to sit unpolled until the next part had been read
/// from the client, so the tier saw admitted work late and bunched (a standing queue in
/// front of other tenants that the scheduler could not see). A part must start on the
/// backend while the body is still open and silent.
#[tokio::test]
async fn an_admitted_part_starts_before_the_next_body_bytes_arrive() {
    const PART: u64 = 64 * 1024;
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let backend = Arc::new(Watched::new(started_tx));
    let store = Arc::new(BlobStore::new(backend.clone(), PART, PART));
    let (body_tx, body_rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(1);
    let body = Box::pin(futures::stream::unfold(body_rx, |mut rx| async move {
        rx.recv().await.map(|chunk| (chunk, rx))
    }));
    let ledger = Ledger::default();
    ledger.set_quota("t", 1 << 30);
    let mut reservation = ledger.reserve("t", 0).expect("reserve");
    let writer = {
        let store = Arc::clone(&store);
        tokio::spawn(async move {
            let limits = BodyLimits {
                declared: None,
                max: 1 << 30,
                inline: None,
            };
            let pacer = Pacer::unthrottled("t");
            store
                .write(&pacer, "b/x", body, limits, &mut reservation)
                .await
        })
    };
    let first = Bytes::from(vec![1u8; PART as usize]);
    body_tx.send(Ok(first.clone())).await.expect("send");
    let len = tokio::time::timeout(Duration::from_secs(10), started.recv())
        .await
        .expect("the first part did not start while the body waited for more bytes")
        .expect("watcher");
    assert_eq!(len, PART as usize);
    let rest = Bytes::from(vec![2u8; 1000]);
    body_tx.send(Ok(rest.clone())).await.expect("send");
    drop(body_tx);
    let written = writer.await.expect("task").expect("write");
    assert_eq!(written.size, PART + 1000);
    let stored = backend
        .inner
        .get(&Path::from("tenants/t/b/x"))
        .await
        .expect("stored")
        .bytes()
        .await
        .expect("bytes");
    assert_eq!(stored, [first, rest].concat());
}

/// Writes `bytes` as the blob `name` of tenant `t`, in chunks of a size that divides
/// neither a part nor the body.
async fn write_all(store: &BlobStore, ledger: &Ledger, name: &str, bytes: &[u8]) {
    let chunks: Vec<Result<Bytes, std::io::Error>> = bytes
        .chunks(10_007)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    let mut reservation = ledger.reserve("t", bytes.len() as u64).expect("reserve");
    let limits = BodyLimits {
        declared: Some(bytes.len() as u64),
        max: 1 << 30,
        inline: None,
    };
    store
        .write(
            &Pacer::unthrottled("t"),
            name,
            futures::stream::iter(chunks),
            limits,
            &mut reservation,
        )
        .await
        .expect("write");
}

/// A blob store asked for checksums hands the store, for every blob, the CRC-64/NVME and
/// length of exactly the bytes written, whether the body is one put or many parts and
/// however it was chunked on the wire; one not asked hands none.
#[tokio::test]
async fn blob_checksums_cover_exactly_the_bytes_written_and_only_when_asked() {
    const PART: u64 = 64 * 1024;
    let body: Vec<u8> = (0..(3 * PART + 12_345))
        .map(|i| (i * 7 % 253) as u8)
        .collect();
    let (tx, _started) = mpsc::unbounded_channel();
    let backend = Arc::new(Watched::new(tx));
    let checked = BlobStore::new(backend.clone(), PART, PART).with_blob_crc();
    let plain = BlobStore::new(backend.clone(), PART, PART);
    let ledger = Ledger::default();
    ledger.set_quota("t", 1 << 30);
    let small = &body[..5000];
    write_all(&checked, &ledger, "b/large", &body).await;
    write_all(&checked, &ledger, "b/small", small).await;
    write_all(&plain, &ledger, "b/plain", &body).await;
    let slots = backend.slots.lock().expect("slots").clone();
    let crc_of = |bytes: &[u8]| BlobCrc {
        crc: crc_fast::checksum(crc_fast::CrcAlgorithm::Crc64Nvme, bytes),
        len: bytes.len() as u64,
    };
    let slot_of = |name: &str| {
        let path = Path::from(format!("tenants/t/{name}"));
        slots
            .iter()
            .find(|(p, _)| *p == path)
            .unwrap_or_else(|| panic!("no put of {name}"))
            .1
            .clone()
    };
    let large = slot_of("b/large").expect("a slot for the multipart blob");
    assert_eq!(large.get(), Some(crc_of(&body)));
    let small_slot = slot_of("b/small").expect("a slot for the single put");
    assert_eq!(small_slot.get(), Some(crc_of(small)));
    assert!(
        slot_of("b/plain").is_none(),
        "a store not asked gets no slot"
    );
    assert_ne!(
        crc_of(&body),
        crc_of(&body[1..]),
        "the checksum sees every byte"
    );
}

/// A local-filesystem store over a temporary directory, with `body` written as the blob
/// `b/00/x` of tenant `t` through the store (so with the checksums a write records).
async fn local_with_blob(body: &[u8]) -> (tempfile::TempDir, BlobStore, Segment) {
    let dir = tempfile::tempdir().expect("tempdir");
    let root: Arc<dyn ObjectStore> =
        Arc::new(object_store::local::LocalFileSystem::new_with_prefix(dir.path()).expect("local"));
    let store = BlobStore::new(root, integrity::CHUNK, integrity::CHUNK).with_local_files();
    let ledger = Ledger::default();
    ledger.set_quota("t", 1 << 30);
    let mut reservation = ledger.reserve("t", body.len() as u64).expect("reserve");
    let chunks: Vec<Result<Bytes, std::io::Error>> = body
        .chunks(70_001)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    let limits = BodyLimits {
        declared: Some(body.len() as u64),
        max: 1 << 30,
        inline: None,
    };
    let written = store
        .write(
            &Pacer::unthrottled("t"),
            "b/00/x",
            futures::stream::iter(chunks),
            limits,
            &mut reservation,
        )
        .await
        .expect("write");
    let segment = Segment {
        blob: "b/00/x".into(),
        size: written.size,
        checksums: written.checksums,
    };
    (dir, store, segment)
}

/// Reads `range` of the one-segment object, with or without a sendfile lane; placeholders
/// are resolved from the file as the connection would send it.
async fn read_range(
    store: &BlobStore,
    pacer: &Pacer,
    seg: &Segment,
    range: Range<u64>,
    lane: Option<&SendfileLane>,
) -> Result<Vec<u8>, object_store::Error> {
    use std::os::unix::fs::FileExt;
    let mut read = store.read(pacer, std::slice::from_ref(seg), range, lane);
    let mut out = Vec::new();
    while let Some(item) = read.next().await {
        let b = item?;
        match lane.filter(|_| SendfileLane::is_placeholder(&b)) {
            Some(lane) => {
                let send = lane.next(&b).expect("queued in order");
                let mut buf = vec![0; send.len];
                send.file
                    .read_exact_at(&mut buf, send.offset)
                    .expect("pread");
                lane.sent(send.len);
                out.extend_from_slice(&buf);
            }
            None => out.extend_from_slice(&b),
        }
    }
    Ok(out)
}

/// Issue #30: a byte flipped in a blob on the local filesystem was served with the rest. Now
/// every read that touches the bad chunk fails, with or without the sendfile lane, and is
/// counted; reads of the other chunks (widened to whole chunks, sent exactly) still succeed.
#[tokio::test]
async fn a_flipped_byte_fails_every_read_of_its_chunk_and_no_other() {
    let mib = usize::try_from(integrity::CHUNK).expect("chunk");
    let body: Vec<u8> = (0..3 * mib + 4321).map(|i| (i * 13 % 251) as u8).collect();
    let (dir, store, seg) = local_with_blob(&body).await;
    let sums = seg.checksums.clone().expect("a write records checksums");
    assert_eq!(sums.values.len(), 4);
    let pacer = Pacer::unthrottled("t");
    let lane = SendfileLane::default();
    let len = body.len() as u64;
    let m = integrity::CHUNK;
    for l in [None, Some(&lane)] {
        let got = read_range(&store, &pacer, &seg, 0..len, l)
            .await
            .expect("intact");
        assert!(got == body);
        let got = read_range(&store, &pacer, &seg, m + 7..2 * m + 9, l)
            .await
            .expect("a range across chunks");
        assert!(got[..] == body[mib + 7..2 * mib + 9]);
    }

    let on_disk = dir.path().join("tenants/t/b/00/x");
    let mut bytes = std::fs::read(&on_disk).expect("read");
    bytes[mib + mib / 2] ^= 0x01;
    std::fs::write(&on_disk, &bytes).expect("write");

    for l in [None, Some(&lane)] {
        for range in [0..len, m + 10..m + 20, 10..m + 1, 2 * m - 1..3 * m] {
            let r = read_range(&store, &pacer, &seg, range.clone(), l).await;
            let e = r.expect_err("a read touching the flipped byte fails");
            assert!(integrity::is_corrupt(&e), "{range:?}: {e}");
        }
        for range in [0..m, 2 * m..len, 5..m - 5, 3 * m..len] {
            let got = read_range(&store, &pacer, &seg, range.clone(), l)
                .await
                .expect("a read of other chunks succeeds");
            let (a, b) = (
                usize::try_from(range.start).expect("start"),
                usize::try_from(range.end).expect("end"),
            );
            assert!(got[..] == body[a..b], "{range:?}");
        }
    }
    assert_eq!(
        pacer
            .metrics
            .integrity_errors
            .load(std::sync::atomic::Ordering::Relaxed),
        8
    );
    // The first grain of a whole read is the intact chunk 0: the failure comes after it,
    // as an error item (the connection is then broken), never as a clean end.
    let mut read = store.read(&pacer, std::slice::from_ref(&seg), 0..len, None);
    assert!(read.next().await.expect("chunk 0").is_ok());
    assert!(read.next().await.expect("chunk 1").is_err());
}

/// A GET on a connection with a sendfile lane reads verified segments into buffers (never
/// placeholders), exactly, however many grains are in flight at once.
#[tokio::test]
async fn verified_segments_bypass_the_lane_and_read_exactly() {
    let mib = usize::try_from(integrity::CHUNK).expect("chunk");
    let body: Vec<u8> = (0..24 * mib + 3).map(|i| (i * 7 % 253) as u8).collect();
    let (_dir, store, seg) = local_with_blob(&body).await;
    let pacer = Pacer::unthrottled("t");
    let lane = SendfileLane::default();
    for _ in 0..4 {
        let got = read_range(&store, &pacer, &seg, 0..body.len() as u64, Some(&lane))
            .await
            .expect("an intact blob reads");
        assert!(got == body);
    }
    let mut read = store.read(&pacer, std::slice::from_ref(&seg), 0..10, Some(&lane));
    let first = read.next().await.expect("a grain").expect("read");
    assert!(!SendfileLane::is_placeholder(&first));
}

/// A segment recorded before checksums existed is read unverified, and counted.
#[tokio::test]
async fn a_segment_without_checksums_is_served_and_counted_as_unverified() {
    let body = vec![9u8; 100_000];
    let (_dir, store, mut seg) = local_with_blob(&body).await;
    seg.checksums = None;
    let pacer = Pacer::unthrottled("t");
    let got = read_range(&store, &pacer, &seg, 10..20, None)
        .await
        .expect("read");
    assert_eq!(got, vec![9u8; 10]);
    assert_eq!(
        pacer
            .metrics
            .unverified_reads
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
}
