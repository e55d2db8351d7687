//! Whole-body checksums computed on the way in, by a decorator around the local blob store.
//!
//! Every byte the S3 front end writes to the node's disk passes through [`ChecksumStore`],
//! which records a CRC-64/NVME of each blob and remembers it until the catalog commit that
//! makes the blob part of an object takes it ([`Checksums::lookup`]); the journal then stores
//! the object's whole-body checksum, combined from its segments. The agent's blob writer
//! computes the checksum as each body chunk arrives and hands it over in a
//! [`BlobCrcSlot`] (hashing parts when they reach the store would read every byte from memory
//! again); a write without one is hashed here, part by part in order, and a slot that
//! disagrees with the bytes' length fails the write. A small object kept inline in the
//! catalog has no blob: the journal takes the checksum of its bytes from the commit itself.
//! The drain recomputes the checksum from the bytes it reads back and refuses to upload on a
//! mismatch: a local corruption is an error, never silent.
//!
//! CRC-64/NVME is combinable: `crc(a ‖ b)` follows from `crc(a)`, `crc(b)` and `len(b)`, so
//! a multipart object's checksum is the combination of its parts' and an upload resumed after
//! a crash verifies the whole body without re-reading the parts already sent.

use std::collections::HashMap;
use std::fmt;
use std::ops::Range;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions, Result, UploadPart,
};

/// A blob's CRC-64/NVME (the checksum S3 itself keeps of whole objects) and length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlobCrc {
    pub crc: u64,
    pub len: u64,
}

/// Where a blob writer (`sluice_s3::BlobStore::with_blob_crc`) leaves the [`BlobCrc`] of a
/// body it writes, for the store underneath: in the `extensions` of the
/// blob's `put_opts` (already set) or `put_multipart_opts` (set before `complete` is called).
///
/// The writer computes it chunk by chunk as the body arrives, while each chunk is still in the
/// CPU's cache from the socket read; a store hashing the same bytes when they reach it, parts
/// of several MiB later, reads them from memory again.
#[derive(Debug, Clone, Default)]
pub struct BlobCrcSlot(Arc<OnceLock<BlobCrc>>);

impl BlobCrcSlot {
    /// The blob's checksum, once the writer has read the whole body.
    pub fn get(&self) -> Option<BlobCrc> {
        self.0.get().copied()
    }

    /// Sets the checksum; a slot belongs to one blob and is set once, when its body has
    /// ended (a second value is ignored).
    pub fn set(&self, crc: BlobCrc) {
        let _ = self.0.set(crc);
    }
}

const ALGO: crc_fast::CrcAlgorithm = crc_fast::CrcAlgorithm::Crc64Nvme;

/// CRC-64/NVME's generator polynomial, bit-reflected as the CRC is (x^0 is the top bit).
const POLY: u64 = 0xAD93_D235_94C9_3659_u64.reverse_bits();

/// `a·b mod POLY`, both reflected.
const fn mul_mod(a: u64, mut b: u64) -> u64 {
    let mut product = 0;
    let mut bit = 1u64 << 63;
    while bit != 0 {
        if a & bit != 0 {
            product ^= b;
        }
        bit >>= 1;
        b = if b & 1 == 0 { b >> 1 } else { (b >> 1) ^ POLY };
    }
    product
}

/// `x^(2^k) mod POLY` for every `k`.
const X_TO_2K: [u64; 64] = {
    let mut table = [0u64; 64];
    table[0] = 1 << 62; // x^1
    let mut k = 1;
    while k < 64 {
        table[k] = mul_mod(table[k - 1], table[k - 1]);
        k += 1;
    }
    table
};

/// `x^(8n) mod POLY`: what a checksum is multiplied by when `n` bytes follow it.
///
/// Combining checksums this way costs one product per set bit of `n`, where
/// `crc_fast::checksum_combine` raises a GF(2) matrix to the power `n`: the journal combines
/// one per segment of every multipart object it commits, on the request's thread.
fn x_to_8n(mut n: u64) -> u64 {
    let mut power = 1u64 << 63; // x^0
    let mut k = 3; // 8n = n·2^3
    while n != 0 && k < 64 {
        if n & 1 != 0 {
            power = mul_mod(X_TO_2K[k], power);
        }
        n >>= 1;
        k += 1;
    }
    power
}

/// A CRC-64/NVME with the length it covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Crc {
    pub crc: u64,
    pub len: u64,
}

impl Crc {
    pub fn of(bytes: &[u8]) -> Self {
        Self {
            crc: crc_fast::checksum(ALGO, bytes),
            len: bytes.len() as u64,
        }
    }

    /// The checksum of `self`'s bytes followed by `next`'s.
    #[must_use]
    pub fn then(self, next: Self) -> Self {
        if self.len == 0 {
            return next;
        }
        if next.len == 0 {
            return self;
        }
        Self {
            crc: mul_mod(x_to_8n(next.len), self.crc) ^ next.crc,
            len: self.len + next.len,
        }
    }

    /// The checksum of chunks laid end to end (one streaming pass, no combining).
    pub fn of_chunks<'a>(chunks: impl IntoIterator<Item = &'a [u8]>) -> Self {
        let mut digest = crc_fast::Digest::new(ALGO);
        let mut len = 0u64;
        for c in chunks {
            digest.update(c);
            len += c.len() as u64;
        }
        Self {
            crc: digest.finalize(),
            len,
        }
    }

    pub fn of_payload(payload: &PutPayload) -> Self {
        Self::of_chunks(payload.iter().map(|b| &b[..]))
    }

    pub fn hex(&self) -> String {
        format!("{:016x}", self.crc)
    }
}

impl From<BlobCrc> for Crc {
    fn from(c: BlobCrc) -> Self {
        Self {
            crc: c.crc,
            len: c.len,
        }
    }
}

/// Checksums of blobs written but not yet taken by a catalog commit, by backend path.
#[derive(Debug, Default)]
pub struct Checksums(Mutex<HashMap<String, Crc>>);

impl Checksums {
    fn put(&self, path: &Path, crc: Crc) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(path.to_string(), crc);
    }

    fn get(&self, path: &Path) -> Option<Crc> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(path.as_ref())
            .copied()
    }

    fn forget(&self, path: &Path) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(path.as_ref());
    }

    /// The checksum of the blob at backend path `path`, if it was written by this process.
    pub fn lookup(&self, path: &str) -> Option<Crc> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(path)
            .copied()
    }
}

/// The checksumming decorator: forwards every call to `inner`, recording what it writes.
#[derive(Debug)]
pub struct ChecksumStore {
    inner: Arc<dyn ObjectStore>,
    sums: Arc<Checksums>,
}

impl ChecksumStore {
    pub fn new(inner: Arc<dyn ObjectStore>, sums: Arc<Checksums>) -> Self {
        Self { inner, sums }
    }

    /// The checksum of the blob at `path`: the one recorded when it was written, or, for a
    /// blob written before a restart, computed by reading it back once.
    async fn checksum_of(&self, path: &Path) -> Result<Crc> {
        if let Some(c) = self.sums.get(path) {
            return Ok(c);
        }
        let mut stream = self
            .inner
            .get_opts(path, GetOptions::default())
            .await?
            .into_stream();
        let mut digest = crc_fast::Digest::new(ALGO);
        let mut len = 0u64;
        while let Some(chunk) = stream.next().await {
            let chunk: Bytes = chunk?;
            digest.update(&chunk);
            len += chunk.len() as u64;
        }
        Ok(Crc {
            crc: digest.finalize(),
            len,
        })
    }
}

impl fmt::Display for ChecksumStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ChecksumStore({})", self.inner)
    }
}

struct ChecksumUpload {
    inner: Box<dyn MultipartUpload>,
    path: Path,
    sums: Arc<Checksums>,
    sum: Sum,
    len: u64,
}

/// Where an upload's checksum comes from.
enum Sum {
    /// The writer's, computed on arrival; set before `complete`.
    Given(BlobCrcSlot),
    /// One running digest over the parts in body order: combining per-part checksums would
    /// cost a GF(2) matrix power per part.
    Own(Box<crc_fast::Digest>),
}

/// The writer's checksum of a blob of `len` bytes, if it gave one (see the module doc).
fn given(slot: &BlobCrcSlot, path: &Path, len: u64) -> Result<Crc> {
    match slot.get() {
        Some(c) if c.len == len => Ok(c.into()),
        other => Err(object_store::Error::Generic {
            store: "ChecksumStore",
            source: format!(
                "{path}: the writer's checksum covers {:?} bytes, the blob has {len}",
                other.map(|c| c.len)
            )
            .into(),
        }),
    }
}

impl fmt::Debug for ChecksumUpload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChecksumUpload")
            .field("inner", &self.inner)
            .field("path", &self.path)
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl MultipartUpload for ChecksumUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        // Parts are handed over in body order (they may complete in any order).
        self.len += data.content_length() as u64;
        if let Sum::Own(digest) = &mut self.sum {
            for chunk in &data {
                digest.update(chunk);
            }
        }
        self.inner.put_part(data)
    }

    async fn complete(&mut self) -> Result<PutResult> {
        let crc = match &self.sum {
            Sum::Given(slot) => given(slot, &self.path, self.len)?,
            Sum::Own(digest) => Crc {
                crc: digest.finalize(),
                len: self.len,
            },
        };
        let r = self.inner.complete().await?;
        self.sums.put(&self.path, crc);
        Ok(r)
    }

    async fn abort(&mut self) -> Result<()> {
        self.inner.abort().await
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl ObjectStore for ChecksumStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        let crc = match opts.extensions.get::<BlobCrcSlot>() {
            Some(slot) => given(slot, location, payload.content_length() as u64)?,
            None => Crc::of_payload(&payload),
        };
        let r = self.inner.put_opts(location, payload, opts).await?;
        self.sums.put(location, crc);
        Ok(r)
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        let sum = match opts.extensions.get::<BlobCrcSlot>() {
            Some(slot) => Sum::Given(slot.clone()),
            None => Sum::Own(Box::new(crc_fast::Digest::new(ALGO))),
        };
        let inner = self.inner.put_multipart_opts(location, opts).await?;
        Ok(Box::new(ChecksumUpload {
            inner,
            path: location.clone(),
            sums: Arc::clone(&self.sums),
            sum,
            len: 0,
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
        let sums = Arc::clone(&self.sums);
        let locations = locations.inspect_ok(move |p| sums.forget(p)).boxed();
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

    /// The destination is recorded with the source's checksum once the copy has succeeded.
    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        let crc = self.checksum_of(from).await?;
        self.inner.copy_opts(from, to, options).await?;
        self.sums.put(to, crc);
        Ok(())
    }

    /// The inner store's own rename (on the local filesystem one atomic `rename`, not a copy
    /// and a delete); the checksum moves with the blob once the rename has succeeded.
    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> Result<()> {
        let crc = self.checksum_of(from).await?;
        self.inner.rename_opts(from, to, options).await?;
        self.sums.forget(from);
        self.sums.put(to, crc);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn combining_equals_checksumming_the_concatenation() {
        let a = b"hello, ".repeat(1000);
        let b = b"world".repeat(777);
        let whole = [a.as_slice(), b.as_slice()].concat();
        assert_eq!(Crc::of(&a).then(Crc::of(&b)), Crc::of(&whole));
        assert_eq!(
            Crc::of_chunks([a.as_slice(), b.as_slice()]),
            Crc::of(&whole)
        );
        assert_eq!(Crc::default().then(Crc::of(&b)), Crc::of(&b));
        assert_eq!(Crc::of(&a).then(Crc::default()), Crc::of(&a));
    }

    #[tokio::test]
    async fn a_multipart_blob_is_recorded_with_the_checksum_of_its_whole_body() {
        use object_store::memory::InMemory;
        let sums = Arc::new(Checksums::default());
        let store = ChecksumStore::new(Arc::new(InMemory::new()), Arc::clone(&sums));
        let parts: Vec<Vec<u8>> = (0..5u8)
            .map(|i| vec![i; 1000 + usize::from(i) * 333])
            .collect();
        let path = Path::from("b/00/blob");
        let mut upload = store
            .put_multipart_opts(&path, PutMultipartOptions::default())
            .await
            .expect("start");
        for p in &parts {
            // Parts of several chunks each.
            let (x, y) = p.split_at(p.len() / 3);
            let payload: PutPayload = [Bytes::copy_from_slice(x), Bytes::copy_from_slice(y)]
                .into_iter()
                .collect();
            upload.put_part(payload).await.expect("part");
        }
        assert_eq!(
            sums.lookup(path.as_ref()),
            None,
            "not before it is complete"
        );
        upload.complete().await.expect("complete");
        assert_eq!(sums.lookup(path.as_ref()), Some(Crc::of(&parts.concat())));
    }

    /// A writer's checksum is recorded as given (the store does not hash the bytes again),
    /// and one that does not cover the blob's bytes fails the write, which leaves nothing.
    #[tokio::test]
    async fn a_writers_checksum_is_taken_as_given_and_one_that_does_not_fit_fails() {
        use object_store::ObjectStoreExt as _;
        use object_store::memory::InMemory;
        let sums = Arc::new(Checksums::default());
        let inner = Arc::new(InMemory::new());
        let store = ChecksumStore::new(inner.clone(), Arc::clone(&sums));
        let body = Bytes::from(vec![7u8; 3000]);
        // Any value the writer gives is what the journal gets: here one that is not the
        // bytes' own, so a store hashing them anyway would record something else.
        let stated = BlobCrc { crc: 42, len: 3000 };
        let multipart = |slot: &BlobCrcSlot| {
            let mut opts = PutMultipartOptions::default();
            opts.extensions.insert(slot.clone());
            opts
        };

        // Multipart: the slot is set (or not) after the parts, before completing. Unset, or
        // covering another length: refused, and nothing is visible.
        let cases = [
            ("given", Some(stated), true),
            ("unset", None, false),
            ("short", Some(BlobCrc { crc: 42, len: 2999 }), false),
        ];
        for (name, set, ok) in cases {
            let slot = BlobCrcSlot::default();
            let path = Path::from(format!("b/00/{name}"));
            let mut upload = store
                .put_multipart_opts(&path, multipart(&slot))
                .await
                .expect("start");
            upload.put_part(body.clone().into()).await.expect("part");
            if let Some(c) = set {
                slot.set(c);
            }
            let completed = upload.complete().await;
            if ok {
                completed.expect("complete");
                assert_eq!(sums.lookup(path.as_ref()), Some(Crc { crc: 42, len: 3000 }));
            } else {
                completed.expect_err("a checksum that does not cover the blob");
                assert_eq!(sums.lookup(path.as_ref()), None);
                assert!(inner.head(&path).await.is_err(), "nothing visible");
            }
        }

        // A single put: the slot comes set.
        for (name, set, ok) in [
            ("single", stated, true),
            ("single-short", BlobCrc { crc: 42, len: 1 }, false),
        ] {
            let slot = BlobCrcSlot::default();
            slot.set(set);
            let mut opts = PutOptions::default();
            opts.extensions.insert(slot);
            let path = Path::from(format!("b/00/{name}"));
            let put = store.put_opts(&path, body.slice(..).into(), opts).await;
            if ok {
                put.expect("put");
                assert_eq!(sums.lookup(path.as_ref()), Some(Crc { crc: 42, len: 3000 }));
            } else {
                put.expect_err("a checksum of another length");
                assert!(inner.head(&path).await.is_err(), "nothing visible");
            }
        }
    }

    /// A rename is the inner store's own, one operation (the trait's default is a copy and a
    /// delete: neither atomic nor, on a device, cheap), and the checksum moves with the blob;
    /// a refused rename moves nothing; a blob written before a restart is read back once.
    #[tokio::test(start_paused = true)]
    async fn a_rename_is_the_inner_stores_own_and_moves_the_checksum() {
        use std::time::Duration;

        use object_store::ObjectStoreExt as _;
        use object_store::memory::InMemory;
        use tokio::time::Instant;

        const MIB: usize = 1024 * 1024;
        // 100 ms an operation, 1 MiB/s: a rename costs 0.1 s, a copy and a delete 1.2 s.
        let inner: Arc<dyn ObjectStore> = Arc::new(crate::EmulatedDevice::new(
            Arc::new(InMemory::new()),
            MIB as f64,
            10.0,
        ));
        let sums = Arc::new(Checksums::default());
        let store = ChecksumStore::new(Arc::clone(&inner), Arc::clone(&sums));
        let body = Bytes::from(vec![3u8; MIB]);
        let (a, b, c) = (Path::from("a"), Path::from("b"), Path::from("c"));

        store.put(&a, body.clone().into()).await.expect("put");
        let start = Instant::now();
        store.rename(&a, &b).await.expect("rename");
        let took = start.elapsed();
        assert!(
            took.abs_diff(Duration::from_millis(100)) < Duration::from_millis(2),
            "the rename took {took:?}"
        );
        assert!(inner.head(&a).await.is_err(), "moved");
        assert_eq!(sums.lookup("a"), None);
        assert_eq!(sums.lookup("b"), Some(Crc::of(&body)));

        // Refused (the destination exists): both stay as they were.
        inner.put(&c, "other".into()).await.expect("put");
        let refused = store.rename_if_not_exists(&b, &c).await;
        assert!(
            matches!(refused, Err(object_store::Error::AlreadyExists { .. })),
            "{refused:?}"
        );
        assert_eq!(sums.lookup("b"), Some(Crc::of(&body)));
        assert_eq!(sums.lookup("c"), None);

        // `c` was written under the decorator's back, as before a restart.
        store.rename(&c, &a).await.expect("rename");
        assert_eq!(sums.lookup("a"), Some(Crc::of(b"other")));
        assert_eq!(sums.lookup("c"), None);
    }

    /// The fast combination agrees with crc_fast's own (a GF(2) matrix power) at lengths
    /// from one byte to past 4 GiB, and with checksumming the concatenation.
    #[test]
    fn combining_agrees_with_crc_fast_at_any_length() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for len in [
            1u64,
            2,
            7,
            8,
            63,
            64,
            4095,
            4096,
            1 << 20,
            (4 << 20) + 3,
            5 << 30,
        ] {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let (a, b) = (x, x.rotate_left(17));
            assert_eq!(
                mul_mod(x_to_8n(len), a) ^ b,
                crc_fast::checksum_combine(ALGO, a, b, len),
                "len {len}"
            );
        }
        let body: Vec<u8> = (0..100_000u32).map(|i| (i * 31 % 251) as u8).collect();
        for cut in [0, 1, 4096, 65_537, 99_999, 100_000] {
            let (a, b) = body.split_at(cut);
            assert_eq!(Crc::of(a).then(Crc::of(b)), Crc::of(&body), "cut {cut}");
        }
    }
}
