//! The local filesystem backend: `object_store`'s `LocalFileSystem` (fsync on, empty
//! directories cleaned up), except that multipart uploads, which carry every body longer than
//! one part, are written around the page cache.
//!
//! Why: a body written through the page cache costs a copy of every byte into fresh cache
//! pages, then their writeback and reclaim, which makes a checkpoint burst on the node agent
//! CPU-bound; and a checkpoint, read back rarely and at a paced rate by the drain, need not stay
//! in the memory the trainer wants.
//!
//! `O_DIRECT` takes memory from aligned addresses only. A chunk of the body whose address
//! agrees with its offset modulo the block (the server arranges it: see
//! `sluice_serve::framing`) is written from where it is; any other byte is first copied into a
//! reused, aligned buffer, written a MiB at a time.
//!
//! Files are staged and published exactly as `LocalFileSystem` stages them (`<name>#<n>`, the
//! file fsynced, renamed into place, its directory fsynced), so listings, reads, start-up
//! reconciliation and crash recovery see no difference. A part's bytes that do not fill a whole
//! aligned block are carried into the next part; the last block is padded, written, and the
//! file truncated to its length before the fsync. Filesystems that refuse `O_DIRECT` (tmpfs
//! before Linux 6.6, for one) get the same code with buffered writes: which one is decided once, by a probe, when
//! the store opens.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io;
use std::ops::Range;
use std::os::unix::fs::{FileExt as _, OpenOptionsExt as _};
use std::path::{Path as FsPath, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions, Result, UploadPart,
};

/// Alignment of every direct write's memory, offset and length: the logical block size of any
/// disk in use (512 B or 4 KiB).
pub const ALIGN: usize = 4096;
/// Bytes copied and written per system call: large enough that a call's cost is small, small
/// enough that the buffer stays in the CPU's cache between the copy and the write.
const IO: usize = 1024 * 1024;
/// Buffers kept for reuse; more may exist while many parts are in flight.
const POOL: usize = 64;
/// Chunks gathered into one write at most (far below the system's `IOV_MAX`).
const GATHER_MAX: usize = 64;

/// The local filesystem under `root`, with multipart uploads written directly to the disk.
#[derive(Debug)]
pub struct LocalDisk {
    inner: LocalFileSystem,
    direct: bool,
    buffers: Arc<Buffers>,
}

impl LocalDisk {
    /// Opens the filesystem under `root` (which must exist), probing whether it takes direct
    /// writes.
    pub fn open(root: &FsPath) -> Result<Self> {
        let direct = probe_direct(root);
        tracing::info!(
            dir = %root.display(),
            direct,
            "local disk: large bodies written {}",
            if direct {
                "around the page cache (O_DIRECT)"
            } else {
                "through the page cache (this filesystem refuses O_DIRECT)"
            }
        );
        Self::open_with(root, direct)
    }

    /// The filesystem under `root`, writing multipart uploads directly (`O_DIRECT`) or through
    /// the page cache, as told, without a probe: for tests that run both modes on one disk. A
    /// filesystem that refuses `O_DIRECT` fails every direct upload.
    #[doc(hidden)]
    pub fn open_with(root: &FsPath, direct: bool) -> Result<Self> {
        let inner = LocalFileSystem::new_with_prefix(root)?
            .with_fsync(true)
            .with_automatic_cleanup(true);
        Ok(Self {
            inner,
            direct,
            buffers: Arc::default(),
        })
    }

    /// Whether multipart uploads are written around the page cache (`O_DIRECT`).
    pub fn direct(&self) -> bool {
        self.direct
    }
}

impl fmt::Display for LocalDisk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LocalDisk({})", self.inner)
    }
}

#[cfg(target_os = "linux")]
fn direct_flag() -> Option<i32> {
    Some(libc::O_DIRECT)
}

#[cfg(not(target_os = "linux"))]
fn direct_flag() -> Option<i32> {
    None
}

/// Whether a file under `root` can be opened with `O_DIRECT` and written one aligned block.
///
/// The probe's name is hidden from listings as a staged upload is (`#` and digits), so a probe
/// left behind by a crash is never taken for an object; the next probe truncates it.
fn probe_direct(root: &FsPath) -> bool {
    let Some(flag) = direct_flag() else {
        return false;
    };
    let path = root.join(".direct-probe#0");
    let ok = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(flag)
        .open(&path)
        .and_then(|f| {
            let mut buf = Aligned::new();
            f.write_all_at(&buf.slice()[..ALIGN], 0)
        })
        .is_ok();
    let _ = std::fs::remove_file(&path);
    ok
}

/// An `IO`-byte buffer whose start is `ALIGN`-aligned (a slice into a larger allocation).
struct Aligned {
    raw: Vec<u8>,
    start: usize,
}

impl Aligned {
    fn new() -> Self {
        let raw = vec![0u8; IO + ALIGN];
        let start = (ALIGN - raw.as_ptr().addr() % ALIGN) % ALIGN;
        Self { raw, start }
    }

    fn slice(&mut self) -> &mut [u8] {
        &mut self.raw[self.start..self.start + IO]
    }
}

/// Aligned buffers for reuse: fresh pages cost a fault and a clearing each.
#[derive(Default)]
struct Buffers(Mutex<Vec<Aligned>>);

impl fmt::Debug for Buffers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Buffers")
    }
}

impl Buffers {
    fn take(&self) -> Aligned {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop()
            .unwrap_or_else(Aligned::new)
    }

    fn give(&self, buf: Aligned) {
        let mut pool = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if pool.len() < POOL {
            pool.push(buf);
        }
    }
}

fn io_error(source: io::Error) -> object_store::Error {
    object_store::Error::Generic {
        store: "LocalDisk",
        source: Box::new(source),
    }
}

/// Completing or aborting an upload that was already completed or aborted.
fn finished() -> object_store::Error {
    io_error(io::Error::other(
        "the upload was already completed or aborted",
    ))
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> Result<T> {
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r.map_err(io_error),
        Err(e) => Err(io_error(io::Error::other(e))),
    }
}

/// Fsyncs the directory `dir`, so that entries just added to or removed from it are durable.
fn fsync_dir(dir: &FsPath) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Creates `dir` and its missing ancestors, fsyncing every new directory and the first one
/// that existed (whose entry list changed).
fn create_dirs(dir: &FsPath) -> io::Result<()> {
    let mut existing = dir;
    while !existing.exists() {
        match existing.parent() {
            Some(p) => existing = p,
            None => break,
        }
    }
    std::fs::create_dir_all(dir)?;
    let mut d = dir;
    loop {
        fsync_dir(d)?;
        if d == existing {
            return Ok(());
        }
        match d.parent() {
            Some(p) => d = p,
            None => return Ok(()),
        }
    }
}

/// Opens a new staging file `<dest>#<n>` (the first `n` free), creating its directory.
fn new_staged(dest: &FsPath, direct: bool) -> io::Result<(File, PathBuf)> {
    let mut n = 1u32;
    loop {
        let mut staging = dest.as_os_str().to_owned();
        staging.push(format!("#{n}"));
        let staging = PathBuf::from(staging);
        let mut options = OpenOptions::new();
        options.write(true).create_new(true);
        if direct && let Some(flag) = direct_flag() {
            options.custom_flags(flag);
        }
        match options.open(&staging) {
            Ok(f) => return Ok((f, staging)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => n += 1,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let dir = dest
                    .parent()
                    .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no parent"))?;
                create_dirs(dir)?;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Writes the first `len` bytes of `chunks` (a multiple of `ALIGN`) at `offset` (aligned);
/// returns how many of them were copied on the way.
///
/// A chunk whose address agrees with its file offset modulo `ALIGN` (bytes read into a page of
/// the server's buffers at a page of the body: see `sluice_serve::framing`) is written from where it is, its
/// whole blocks at least, gathered with its neighbours into writes of about `IO` bytes. Other
/// bytes are copied into an aligned buffer and written from there a buffer at a time.
fn write_aligned(
    file: &File,
    buffers: &Buffers,
    chunks: &[Bytes],
    len: usize,
    offset: u64,
) -> io::Result<usize> {
    let mut out = Writer {
        file,
        offset,
        buffers,
        buf: None,
        copy_at: 0,
        filled: 0,
        copied: 0,
        gather: Vec::new(),
        gather_at: 0,
        gathered: 0,
    };
    let result = out.write(chunks, len);
    if let Some(buf) = out.buf.take() {
        buffers.give(buf);
    }
    result.map(|()| out.copied)
}

/// The state of one [`write_aligned`].
struct Writer<'a> {
    file: &'a File,
    offset: u64,
    buffers: &'a Buffers,
    /// The aligned buffer, taken from the pool when first needed...
    buf: Option<Aligned>,
    /// ...the range's position of its first byte...
    copy_at: usize,
    /// ...and its bytes not yet written.
    filled: usize,
    /// Bytes copied in all.
    copied: usize,
    /// Chunks' blocks to write as they are, contiguous from `gather_at`, `gathered` bytes.
    gather: Vec<io::IoSlice<'a>>,
    gather_at: usize,
    gathered: usize,
}

impl<'a> Writer<'a> {
    fn write(&mut self, chunks: &'a [Bytes], len: usize) -> io::Result<()> {
        // Where the next byte of the range goes.
        let mut pos = 0;
        for chunk in chunks {
            let mut rest = &chunk[..];
            while !rest.is_empty() && pos < len {
                let room = rest.len().min(len - pos);
                let in_phase = rest.as_ptr().addr().wrapping_sub(pos) % ALIGN == 0;
                if in_phase && pos % ALIGN == 0 && room >= ALIGN {
                    // The copied bytes before these end on a block: they can go now.
                    self.flush_copy()?;
                    let n = room / ALIGN * ALIGN;
                    self.gather(pos, &rest[..n])?;
                    pos += n;
                    rest = &rest[n..];
                    continue;
                }
                // Copied; in phase, only up to the next block boundary, past which the chunk
                // is written from where it is.
                let mut n = room.min(IO - self.filled);
                if in_phase {
                    n = n.min(ALIGN - pos % ALIGN);
                }
                self.copy(pos, &rest[..n]);
                pos += n;
                rest = &rest[n..];
                if self.filled == IO || pos == len {
                    self.flush_copy()?;
                }
            }
        }
        self.flush_gathered()
    }

    fn copy(&mut self, pos: usize, bytes: &[u8]) {
        if self.filled == 0 {
            self.copy_at = pos;
        }
        let buf = self.buf.get_or_insert_with(|| self.buffers.take());
        buf.slice()[self.filled..self.filled + bytes.len()].copy_from_slice(bytes);
        self.filled += bytes.len();
        self.copied += bytes.len();
    }

    /// Writes the copied bytes (whole blocks: they end at a boundary or at the range's end).
    fn flush_copy(&mut self) -> io::Result<()> {
        let n = std::mem::take(&mut self.filled);
        if let Some(buf) = self.buf.as_mut()
            && n > 0
        {
            let at = self.offset + self.copy_at as u64;
            self.file.write_all_at(&buf.slice()[..n], at)?;
        }
        Ok(())
    }

    fn gather(&mut self, pos: usize, blocks: &'a [u8]) -> io::Result<()> {
        if self.gathered > 0 && self.gather_at + self.gathered != pos {
            self.flush_gathered()?;
        }
        if self.gathered == 0 {
            self.gather_at = pos;
        }
        self.gather.push(io::IoSlice::new(blocks));
        self.gathered += blocks.len();
        if self.gathered >= IO || self.gather.len() >= GATHER_MAX {
            self.flush_gathered()?;
        }
        Ok(())
    }

    fn flush_gathered(&mut self) -> io::Result<()> {
        let mut at = self.offset + self.gather_at as u64;
        let mut slices = &mut self.gather[..];
        while !slices.is_empty() {
            let n = match rustix::io::pwritev(self.file, slices, at) {
                Ok(n) => n,
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            };
            if n == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            at += n as u64;
            io::IoSlice::advance_slices(&mut slices, n);
        }
        self.gather.clear();
        self.gathered = 0;
        Ok(())
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl ObjectStore for LocalDisk {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        if !opts.attributes.is_empty() {
            // Refused there, with the same error it gives for every store.
            return self.inner.put_multipart_opts(location, opts).await;
        }
        let dest = self.inner.path_to_filesystem(location)?;
        let direct = self.direct;
        let (file, staging) = {
            let dest = dest.clone();
            blocking(move || new_staged(&dest, direct)).await?
        };
        Ok(Box::new(DirectUpload {
            file: Arc::new(Mutex::new(file)),
            staging: Some(staging),
            dest,
            buffers: Arc::clone(&self.buffers),
            offset: 0,
            carry: Vec::new(),
            size: 0,
        }))
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        self.inner.get_opts(location, options).await
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        self.inner.get_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.inner.copy_opts(from, to, options).await
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        self.inner.rename_opts(from, to, options).await
    }
}

/// A multipart upload into a staging file; parts are written as they are handed over (each
/// at its own offset, so several may be in flight, though their writes take turns on the
/// file) and the file is published on completion.
struct DirectUpload {
    /// Held by a part's writer for all its writes: writes that extend a file take ext4's
    /// inode lock exclusively, and a second part's writer would spin on it instead of
    /// sleeping.
    file: Arc<Mutex<File>>,
    /// The staging file, until it is published or removed.
    staging: Option<PathBuf>,
    dest: PathBuf,
    buffers: Arc<Buffers>,
    /// Where the next part's aligned bytes go.
    offset: u64,
    /// The bytes handed over that do not yet fill an aligned block (fewer than `ALIGN`).
    carry: Vec<u8>,
    /// Bytes handed over in all.
    size: u64,
}

impl fmt::Debug for DirectUpload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DirectUpload")
            .field("dest", &self.dest)
            .field("size", &self.size)
            .finish_non_exhaustive()
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl MultipartUpload for DirectUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        let mut chunks: Vec<Bytes> = Vec::with_capacity(data.as_ref().len() + 1);
        if !self.carry.is_empty() {
            chunks.push(Bytes::from(std::mem::take(&mut self.carry)));
        }
        chunks.extend(data.iter().cloned());
        let total: usize = chunks.iter().map(Bytes::len).sum();
        let len = total / ALIGN * ALIGN;
        // The unaligned tail waits for the next part (or the completion).
        let mut skip = len;
        for c in &chunks {
            if skip >= c.len() {
                skip -= c.len();
            } else {
                self.carry.extend_from_slice(&c[skip..]);
                skip = 0;
            }
        }
        self.size += data.content_length() as u64;
        let offset = self.offset;
        self.offset += len as u64;
        let file = Arc::clone(&self.file);
        let buffers = Arc::clone(&self.buffers);
        Box::pin(blocking(move || {
            let file = file.lock().unwrap_or_else(PoisonError::into_inner);
            write_aligned(&file, &buffers, &chunks, len, offset).map(drop)
        }))
    }

    async fn complete(&mut self) -> Result<PutResult> {
        let staging = self.staging.take().ok_or_else(finished)?;
        let kept = staging.clone();
        let file = Arc::clone(&self.file);
        let buffers = Arc::clone(&self.buffers);
        let tail = std::mem::take(&mut self.carry);
        let (offset, size, dest) = (self.offset, self.size, self.dest.clone());
        let published = blocking(move || {
            let file = file.lock().unwrap_or_else(PoisonError::into_inner);
            if !tail.is_empty() {
                // The last block, padded to a whole one; the padding is cut off below.
                let mut buf = buffers.take();
                let block = &mut buf.slice()[..ALIGN];
                block[..tail.len()].copy_from_slice(&tail);
                block[tail.len()..].fill(0);
                let r = file.write_all_at(block, offset);
                buffers.give(buf);
                r?;
            }
            file.set_len(size)?;
            file.sync_all()?;
            std::fs::rename(&staging, &dest)?;
            if let Some(dir) = dest.parent() {
                fsync_dir(dir)?;
            }
            Ok(())
        })
        .await;
        if published.is_err() {
            // Not published: the staging file goes (a failed rename leaves it in place).
            self.staging = Some(kept);
        }
        published.map(|()| PutResult {
            e_tag: None,
            version: None,
            extensions: http::Extensions::default(),
        })
    }

    async fn abort(&mut self) -> Result<()> {
        let staging = self.staging.take().ok_or_else(finished)?;
        blocking(move || std::fs::remove_file(&staging)).await
    }
}

impl Drop for DirectUpload {
    fn drop(&mut self) {
        // Neither completed nor aborted (the request went away): the staging file goes.
        if let Some(staging) = self.staging.take() {
            match tokio::runtime::Handle::try_current() {
                Ok(r) => drop(r.spawn_blocking(move || std::fs::remove_file(staging))),
                Err(_) => drop(std::fs::remove_file(staging)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use futures::TryStreamExt as _;
    use object_store::ObjectStoreExt as _;

    use super::*;

    /// Deterministic bytes, different at every offset of a few MiB.
    fn bytes(len: usize, seed: u8) -> Bytes {
        (0..len)
            .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[3] ^ seed)
            .collect()
    }

    async fn read_back(disk: &LocalDisk, path: &Path) -> Bytes {
        let got = disk.get(path).await.expect("get");
        got.bytes().await.expect("read")
    }

    fn files_under(dir: &FsPath) -> Vec<String> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(files_under(&p));
            } else {
                out.push(p.display().to_string());
            }
        }
        out
    }

    /// Parts of awkward lengths (a block and one byte, three bytes, none, a part in which no
    /// block ends) written by both modes come back byte for byte, with no padding.
    #[tokio::test]
    async fn parts_of_any_length_are_stored_exactly() {
        let lens = [
            IO + ALIGN + 1,
            3,
            0,
            ALIGN - 4,
            2 * IO,
            IO - 1,
            5 * ALIGN,
            777,
        ];
        for direct in [true, false] {
            let dir = tempfile::tempdir().expect("tempdir");
            let disk = LocalDisk::open_with(dir.path(), direct).expect("open");
            let path = Path::from("b/00/blob");
            let mut upload = disk.put_multipart(&path).await.expect("create");
            let mut expected = Vec::new();
            let mut writes = Vec::new();
            for (i, len) in lens.iter().enumerate() {
                // Each part in two pieces, as a request body arrives.
                let part = bytes(*len, i as u8);
                expected.extend_from_slice(&part);
                let cut = len / 3;
                let payload = PutPayload::from_iter([part.slice(..cut), part.slice(cut..)]);
                writes.push(upload.put_part(payload));
            }
            // Parts may finish in any order.
            for w in writes.into_iter().rev() {
                w.await.expect("part");
            }
            upload.complete().await.expect("complete");
            let got = read_back(&disk, &path).await;
            assert_eq!(got.len(), expected.len(), "direct={direct}");
            assert!(got == expected, "direct={direct}: content differs");
            let on_disk = std::fs::metadata(dir.path().join("b/00/blob")).expect("stat");
            assert_eq!(on_disk.len(), expected.len() as u64);
            assert_eq!(
                files_under(dir.path()).len(),
                1,
                "only the published file is left"
            );
        }
    }

    /// A whole multiple of the alignment (no padded block) is stored exactly too.
    #[tokio::test]
    async fn an_aligned_body_is_stored_exactly() {
        let dir = tempfile::tempdir().expect("tempdir");
        let disk = LocalDisk::open_with(dir.path(), true).expect("open");
        let path = Path::from("b/blob");
        let body = bytes(3 * IO, 7);
        let mut upload = disk.put_multipart(&path).await.expect("create");
        upload
            .put_part(PutPayload::from(body.slice(..IO)))
            .await
            .expect("part");
        upload
            .put_part(PutPayload::from(body.slice(IO..)))
            .await
            .expect("part");
        upload.complete().await.expect("complete");
        let got = read_back(&disk, &path).await;
        assert!(got == body);
    }

    /// `len` bytes of `body` from `from` as a chunk whose address is `phase` past a block
    /// boundary.
    fn placed(body: &[u8], from: usize, len: usize, phase: usize) -> Bytes {
        let mut raw = vec![0u8; len + 2 * ALIGN];
        let start = (ALIGN - raw.as_ptr().addr() % ALIGN) % ALIGN + phase % ALIGN;
        raw[start..start + len].copy_from_slice(&body[from..from + len]);
        Bytes::from(raw).slice(start..start + len)
    }

    /// Chunks in phase with the file (address and offset agreeing modulo a block) are
    /// written from where they are, but for the partial blocks at their edges; chunks out of
    /// phase are copied whole. Either way the file holds exactly the body.
    #[test]
    fn chunks_in_phase_are_written_without_a_copy() {
        let len = 3 * IO + 5 * ALIGN;
        let body = bytes(len, 9);
        // Chunk boundaries (by offset) off any block boundary but the ends.
        let cuts = [0, 1000, 1000 + IO + ALIGN + 7, 2 * IO + 3, len];
        for (in_phase, expect_copied) in [(true, None), (false, Some(len))] {
            let chunks: Vec<Bytes> = cuts
                .windows(2)
                .enumerate()
                .map(|(i, w)| {
                    // The first chunk is always out of phase (as a body's first bytes, read
                    // together with the request head, are).
                    let phase = if in_phase && i > 0 { w[0] } else { w[0] + 1 };
                    placed(&body, w[0], w[1] - w[0], phase)
                })
                .collect();
            let dir = tempfile::tempdir().expect("tempdir");
            let direct = probe_direct(dir.path());
            let (file, path) = new_staged(&dir.path().join("blob"), direct).expect("staged");
            let copied = write_aligned(&file, &Buffers::default(), &chunks, len, 0).expect("write");
            // In phase: the three blocks a cut falls in (the first holds the first chunk).
            // Out of phase: everything.
            let expect = expect_copied.unwrap_or(3 * ALIGN);
            assert_eq!(copied, expect, "in_phase={in_phase}");
            drop(file);
            assert!(
                std::fs::read(&path).expect("read") == body,
                "in_phase={in_phase}"
            );
        }
    }

    /// Until it completes an upload is invisible (its staging file is not listed and no object
    /// is at its path); aborted or dropped, it leaves nothing behind.
    #[tokio::test]
    async fn an_unfinished_upload_is_invisible_and_leaves_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let disk = LocalDisk::open_with(dir.path(), true).expect("open");
        let path = Path::from("b/00/blob");
        for abort in [true, false] {
            let mut upload = disk.put_multipart(&path).await.expect("create");
            upload
                .put_part(PutPayload::from(bytes(IO + 10, 1)))
                .await
                .expect("part");
            let listed: Vec<_> = disk.list(None).try_collect().await.expect("list");
            assert!(listed.is_empty(), "listed {listed:?}");
            assert!(disk.head(&path).await.is_err());
            assert_eq!(files_under(dir.path()).len(), 1, "the staging file");
            if abort {
                upload.abort().await.expect("abort");
                assert!(upload.complete().await.is_err(), "complete after abort");
            } else {
                drop(upload);
                // The removal runs on the blocking pool: wait (ten seconds at most) for it.
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
                while !files_under(dir.path()).is_empty() && std::time::Instant::now() < deadline {
                    tokio::task::yield_now().await;
                }
            }
            assert!(files_under(dir.path()).is_empty(), "abort={abort}");
        }
    }

    #[test]
    fn the_probe_finds_direct_writes_on_a_disk_filesystem_and_leaves_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let direct = probe_direct(dir.path());
        // The test directory is on a disk filesystem here (ext4); an older tmpfs would refuse.
        let tmpfs = std::fs::read_to_string("/proc/mounts")
            .unwrap_or_default()
            .lines()
            .any(|l| l.contains(" /tmp tmpfs "));
        if cfg!(target_os = "linux") && !tmpfs {
            assert!(direct);
        }
        assert!(files_under(dir.path()).is_empty());
    }
}
