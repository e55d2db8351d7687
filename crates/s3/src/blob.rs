//! Object bytes in the backend: immutable blobs under a per-tenant prefix.
//!
//! Every tenant sees the backend through an `object_store` `PrefixStore` rooted at
//! `tenants/<id>/`, so no blob name of one tenant can address another's data: the namespace
//! boundary is built into the store handle, not checked per call. Blob names are generated
//! here (`<bucket>/<fan-out>/<random id>`), never derived from object keys.
//!
//! Writes stream: a body is cut into parts of the store's part size (a grain on the local
//! filesystem, at least 5 MiB on S3 backends, which require it) and uploaded with
//! [`WRITE_BEHIND_BYTES`] worth of parts outstanding (at least two), so a request holds a few
//! MiB at most whatever the object's size. A body shorter than one part is a single `put`.
//! On the local filesystem both paths write a temporary file, fsync it and rename it into
//! place; a blob is therefore whole or absent. A body no larger than the caller's inline
//! limit ([`BodyLimits::inline`]) is not written at all but handed back, for the catalog to
//! keep with the object's record: the decision is taken when the body ends, so a body of
//! unknown length is held (never more than a part, as any body is) and goes to a blob as
//! soon as it turns out longer. Either way its bytes are admitted through the pacer exactly
//! as if they were written, and [`read_inline`] admits an inline body's bytes as a backend
//! read of them would be.
//!
//! Reads fetch ranges of at most one grain, [`READ_AHEAD_BYTES`] ahead of the sender. Both
//! windows are in bytes, not parts, so that one request alone can keep the tier busy however
//! small the grain: a request with nothing admitted when the tier frees up loses its turn.
//! A grain that the connection sends from a local file ([`sluice_serve::sendfile`]) is admitted
//! here all the same, and read from the disk by the kernel as the connection sends it (the
//! file's own read-ahead running a few MiB ahead), not by the fetch.
//! Every backend transfer,
//! in and out, is admitted through the tenant's [`Pacer`] right before it is issued, with its
//! size as its cost: the throughput scheduler therefore decides the order in which the
//! backend sees work, not merely the pace at which clients' bytes are received.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, OnceLock, PoisonError, RwLock};

use bytes::Bytes;
use futures::stream::{self, BoxStream};
use futures::{Stream, StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::prefix::PrefixStore;
use object_store::{
    GetOptions, GetResultPayload, MultipartUpload, ObjectStore, ObjectStoreExt,
    PutMultipartOptions, PutOptions, PutPayloadMut,
};
use sluice_md5::Md5Stream;
use sluice_meta::{Reservation, Segment, SegmentChecksums};

use crate::error::{ApiError, ApiResult};

mod buffers;
pub mod integrity;

use buffers::ReadBuffers;
use integrity::{ChunkHasher, ReadLabel, Verify};

use sluice_serve::sendfile::{PLACEHOLDER_MAX, SendfileLane};
use sluice_store::{BlobCrc, BlobCrcSlot};

/// The largest transfer issued to the backend at once on reads, and the part size on backends
/// that accept small parts, when no throughput scheduler is configured (which sets its own
/// grain, 1 MiB by default): larger transfers cost less per byte.
pub const DEFAULT_GRAIN: u64 = 4 * 1024 * 1024;
/// Bytes of parts a PUT keeps uploading while it reads the rest of the body (at least two
/// parts).
pub const WRITE_BEHIND_BYTES: u64 = 4 * 1024 * 1024;
/// Bytes a GET keeps admitted and fetching ahead of what it has sent (at least two grains).
///
/// With a throughput scheduler this is also how a reader stays in line: its next grain must
/// already be queued when the tier frees up, or a neighbour's grain goes first and every grain
/// of the read waits behind one of the neighbour's. A few MiB ahead covers the time a grain
/// takes to be fetched and handed to the client.
pub const READ_AHEAD_BYTES: u64 = 4 * 1024 * 1024;

/// The shortest read of a local blob that goes around the page cache ([`read_file_range`]).
const DIRECT_MIN: u64 = 512 * 1024;

/// An object's bytes as a stream that is `Send + Sync` (what s3s bodies require).
///
/// The mutex is never contended: `poll_next` has exclusive access and uses `get_mut`; it is
/// there only so that the boxed stream (which is `Send`, not `Sync`) may be shared.
pub struct ReadStream(std::sync::Mutex<BoxStream<'static, Result<Bytes, object_store::Error>>>);

impl ReadStream {
    /// Wraps any byte stream (e.g. an upstream GET's body) for an s3s response.
    pub fn new(stream: BoxStream<'static, Result<Bytes, object_store::Error>>) -> Self {
        Self(std::sync::Mutex::new(stream))
    }
}

impl Stream for ReadStream {
    type Item = Result<Bytes, object_store::Error>;

    fn poll_next(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        self.get_mut()
            .0
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .poll_next_unpin(cx)
    }
}

/// Admission and accounting of body bytes for one request: every grain passes the tenant's
/// throughput scheduler (when one is configured) and is counted in its metrics.
#[derive(Clone)]
pub struct Pacer {
    pub tenant: Arc<str>,
    pub throttle: Option<Arc<sluice_throttle::Throttle>>,
    pub metrics: Arc<sluice_metrics::TenantMetrics>,
}

impl Pacer {
    /// A pacer that admits everything at once and records into throwaway metrics (internal
    /// readers such as the node agent's drain).
    pub fn unthrottled(tenant: &str) -> Self {
        Self {
            tenant: Arc::from(tenant),
            throttle: None,
            metrics: Arc::default(),
        }
    }

    /// Admits bytes the backend copies on its own (server-side copy).
    pub async fn admit_copy(&self, bytes: u64) {
        if let Some(t) = &self.throttle {
            let waited = t.admit_bytes(&self.tenant, bytes).await;
            self.metrics.queue_wait_seconds.observe(waited);
        }
    }

    async fn admit(&self, bytes: u64, inbound: bool) {
        if inbound {
            self.admit_counted(bytes, bytes, 0).await;
        } else {
            self.admit_counted(bytes, 0, bytes).await;
        }
    }

    /// Admits a transfer of `bytes` from or to the backend, of which `sent` go to the
    /// client (a read widened to whole checksummed chunks fetches more than it sends).
    async fn admit_counted(&self, bytes: u64, received: u64, sent: u64) {
        if bytes == 0 {
            return;
        }
        if let Some(t) = &self.throttle {
            let waited = t.admit_bytes(&self.tenant, bytes).await;
            self.metrics.queue_wait_seconds.observe(waited);
        }
        if received > 0 {
            self.metrics.add_bytes_in(received);
        }
        if sent > 0 {
            self.metrics.add_bytes_out(sent);
        }
    }
}

/// What a completed write stored.
#[derive(Debug, Clone)]
pub struct Written {
    pub size: u64,
    pub md5: [u8; 16],
    /// The body itself when it was within the inline limit: nothing was written to the
    /// backend. `None`: the body is in the blob the write was given.
    pub inline: Option<Bytes>,
    /// The body's per-chunk checksums, computed on the way in, of a blob or an inline body
    /// alike (`None` only for a server-side copy of a blob that had none).
    pub checksums: Option<SegmentChecksums>,
}

impl Written {
    pub fn etag(&self) -> String {
        hex(&self.md5)
    }
}

pub fn hex(bytes: &[u8]) -> String {
    hex::encode(bytes)
}

/// How much a body may hold.
#[derive(Debug, Clone, Copy)]
pub struct BodyLimits {
    /// The declared length, if the client sent one; the reservation already covers it.
    pub declared: Option<u64>,
    /// The largest body accepted.
    pub max: u64,
    /// A body of at most this many bytes is handed back in [`Written::inline`] instead of
    /// written to the backend. `None`: always write the blob (multipart parts, which the
    /// catalog assembles from blobs).
    pub inline: Option<u64>,
}

/// The backend, seen per tenant.
pub struct BlobStore {
    root: Arc<dyn ObjectStore>,
    tenants: RwLock<HashMap<String, Arc<dyn ObjectStore>>>,
    grain: u64,
    part_size: u64,
    blob_crc: bool,
    /// Whether the backend hands back local files (see [`BlobStore::with_local_files`]).
    local_files: bool,
    /// What local-disk grains are read into (see [`buffers`]).
    buffers: ReadBuffers,
    /// The writer tag this process puts in its blob names (see [`BlobStore::blob_name`]).
    writer: OnceLock<String>,
}

/// One object of the backend as a listing gives it.
#[derive(Debug, Clone)]
pub struct Listed {
    pub tenant: String,
    /// The name under the tenant's prefix.
    pub name: String,
    pub size: u64,
    /// Milliseconds since the Unix epoch.
    pub last_modified_ms: i64,
}

/// The backend prefix under which a tenant's blobs live.
pub fn tenant_root(tenant: &str) -> Path {
    Path::from(format!("tenants/{tenant}"))
}

impl BlobStore {
    /// A store reading in `grain`-sized ranges and writing `part_size` parts.
    pub fn new(root: Arc<dyn ObjectStore>, grain: u64, part_size: u64) -> Self {
        let grain = grain.max(64 * 1024);
        Self {
            root,
            tenants: RwLock::default(),
            grain,
            part_size: part_size.max(64 * 1024),
            blob_crc: false,
            local_files: false,
            buffers: ReadBuffers::new(usize::try_from(grain).unwrap_or(usize::MAX)),
            writer: OnceLock::new(),
        }
    }

    /// Tags every blob name this store makes from now on with `writer` (16 hex digits: the
    /// embedded catalog's run, see `reconcile`), so start-up cleanup can tell this catalog's
    /// own orphans from blobs another catalog wrote. Set once; later calls change nothing.
    pub fn set_writer(&self, writer: String) {
        let _ = self.writer.set(writer);
    }

    /// Computes every written blob's [`BlobCrc`] on arrival and hands it to the store in a
    /// [`BlobCrcSlot`].
    #[must_use]
    pub fn with_blob_crc(mut self) -> Self {
        self.blob_crc = true;
        self
    }

    /// The backend is the local filesystem, whose reads hand back the open file: a GET on a
    /// connection that sends files itself (one with a [`SendfileLane`]) then opens each blob
    /// once and has the connection send every grain of it from that one file, whose read-ahead
    /// state the kernel keeps from grain to grain.
    #[must_use]
    pub fn with_local_files(mut self) -> Self {
        self.local_files = true;
        self
    }

    /// Whether the backend is the local filesystem (see [`BlobStore::with_local_files`]).
    pub fn has_local_files(&self) -> bool {
        self.local_files
    }

    /// Grains a GET has in flight: [`READ_AHEAD_BYTES`] worth, at least two.
    fn read_ahead(&self) -> usize {
        window(READ_AHEAD_BYTES, self.grain)
    }

    pub fn root(&self) -> &Arc<dyn ObjectStore> {
        &self.root
    }

    /// The tenant's view of the backend: everything it names is under `tenants/<id>/`.
    pub fn tenant(&self, tenant: &str) -> Arc<dyn ObjectStore> {
        if let Some(s) = self
            .tenants
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(tenant)
        {
            return Arc::clone(s);
        }
        let store: Arc<dyn ObjectStore> = Arc::new(PrefixStore::new(
            Arc::clone(&self.root),
            tenant_root(tenant),
        ));
        self.tenants
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(tenant.to_owned())
            .or_insert(store)
            .clone()
    }

    /// A fresh, unguessable blob name in `bucket`.
    ///
    /// Blobs fan out over 256 subdirectories per bucket (`<bucket>/<2 hex>/<32 hex>`): on the
    /// local filesystem every blob commit fsyncs its directory, and fsyncs of one directory
    /// serialise in the kernel. With a writer tag set, the name ends `-<writer>`.
    pub fn blob_name(&self, bucket: &str) -> String {
        let id: u128 = rand::random();
        match self.writer.get() {
            Some(w) => format!("{bucket}/{:02x}/{id:032x}-{w}", id >> 120),
            None => format!("{bucket}/{:02x}/{id:032x}", id >> 120),
        }
    }

    /// Streams `body` into the blob `name`, growing `reservation` chunk by chunk when the
    /// length was not declared. On any error nothing is left visible under `name`.
    pub async fn write<S, E>(
        &self,
        pacer: &Pacer,
        name: &str,
        body: S,
        limits: BodyLimits,
        reservation: &mut Reservation,
    ) -> ApiResult<Written>
    where
        S: Stream<Item = Result<Bytes, E>> + Send + Unpin,
        E: std::fmt::Display,
    {
        let store = self.tenant(&pacer.tenant);
        let path = Path::from(name);
        let mut upload: Option<Box<dyn MultipartUpload>> = None;
        let result = write_inner(
            &store,
            &path,
            body,
            limits,
            reservation,
            pacer,
            self.part_size,
            self.blob_crc,
            &mut upload,
        )
        .await;
        if result.is_err()
            && let Some(mut u) = upload
            && let Err(e) = u.abort().await
        {
            tracing::warn!(error = %e, blob = name, "aborting a failed blob upload");
        }
        result
    }

    /// The bytes `range` of an object made of `segments`, fetched a grain at a time. With a
    /// `lane` (a GET's response on a connection that sends files itself) on local files, the
    /// grains are not read here: the stream carries placeholders for them, and the connection
    /// sends them from the blob's file (see [`sluice_serve::sendfile`]).
    pub fn read(
        &self,
        pacer: &Pacer,
        segments: &[Segment],
        range: Range<u64>,
        lane: Option<&SendfileLane>,
    ) -> ReadStream {
        self.read_labeled(pacer, &Arc::default(), segments, range, lane)
    }

    /// [`BlobStore::read`], naming the object in the error logged if its bytes fail their
    /// checksum. Every segment with checksums is read in whole chunks, each verified before
    /// any of its bytes is passed on; a segment without (an object written before checksums
    /// existed) is read unverified and counted (`sluice_unverified_reads_total`).
    pub fn read_labeled(
        &self,
        pacer: &Pacer,
        label: &Arc<ReadLabel>,
        segments: &[Segment],
        range: Range<u64>,
        lane: Option<&SendfileLane>,
    ) -> ReadStream {
        let store = self.tenant(&pacer.tenant);
        let label = Arc::clone(label);
        let pacer = pacer.clone();
        let buffers = self.buffers.clone();
        let send = lane.is_some() && self.local_files;
        let mut grains = Vec::new();
        let mut base = 0;
        for (index, seg) in segments.iter().enumerate() {
            let (start, end) = (base, base + seg.size);
            base = end;
            let lo = range.start.max(start);
            let hi = range.end.min(end);
            if lo >= hi {
                continue;
            }
            // The part of the blob wanted, and the part fetched: whole chunks when verified.
            let (want_lo, want_hi) = (lo - start, hi - start);
            let verify = seg.checksums.as_ref().map(|sums| Verify {
                sums: Arc::new(sums.clone()),
                segment: index,
                blob: Arc::from(seg.blob.as_str()),
            });
            let (fetch_lo, fetch_hi, step) = if let Some(v) = &verify {
                let c = v.sums.chunk_size.max(1);
                let hi = want_hi.div_ceil(c).saturating_mul(c).min(seg.size);
                (want_lo / c * c, hi, (self.grain / c).max(1) * c)
            } else {
                pacer
                    .metrics
                    .unverified_reads
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                (want_lo, want_hi, self.grain)
            };
            // A verified segment is read into buffers and checked there, not sent by the
            // connection with `sendfile`: checking the pages first (a second read of each)
            // measured far slower than the buffered path (docs/integrity.md). Either way, on
            // local files every grain of the segment reads from one open file.
            let blob = self.local_files.then(|| {
                Arc::new(BlobFile {
                    file: tokio::sync::OnceCell::new(),
                    end: fetch_hi,
                })
            });
            let send = send && verify.is_none();
            let mut at = fetch_lo;
            while at < fetch_hi {
                let to = fetch_hi.min(at + step);
                grains.push(GrainSpec {
                    path: Path::from(seg.blob.as_str()),
                    fetch: at..to,
                    want: at.max(want_lo)..to.min(want_hi),
                    file: blob.clone(),
                    send,
                    verify: verify.clone(),
                });
                at = to;
            }
        }
        // Each grain is fetched by a task, so it reaches the backend as soon as it is admitted
        // even while the client is slow to take the previous one (see `write_inner`).
        let fetched = stream::iter(grains)
            .map(move |spec: GrainSpec| {
                let store = Arc::clone(&store);
                let pacer = pacer.clone();
                let buffers = buffers.clone();
                let label = Arc::clone(&label);
                let task = AbortOnDrop(tokio::spawn(async move {
                    let GrainSpec {
                        path,
                        fetch: r,
                        want,
                        file,
                        send,
                        verify,
                    } = spec;
                    pacer
                        .admit_counted(r.end - r.start, 0, want.end - want.start)
                        .await;
                    let grain = match file {
                        Some(blob) if send => {
                            send_grain(&store, &path, r.clone(), &blob, buffers.clone()).await?
                        }
                        Some(blob) => {
                            read_grain(&store, &path, r.clone(), &blob, buffers.clone()).await?
                        }
                        None => fetch(&store, &path, r.clone(), buffers.clone()).await?,
                    };
                    let checked = match verify {
                        None => Ok(grain),
                        Some(v) => verified(grain, r.start, &v)?,
                    };
                    match checked {
                        Ok(grain) => Ok(grain.narrowed(r.start, want)),
                        Err(corrupt) => Err(integrity::report(
                            &pacer.metrics,
                            &pacer.tenant,
                            &label,
                            corrupt,
                        )),
                    }
                }));
                async move {
                    task.await.unwrap_or_else(|e| {
                        Err(object_store::Error::Generic {
                            store: "sluice",
                            source: Box::new(e),
                        })
                    })
                }
            })
            .buffered(self.read_ahead());
        // Placeholders are queued as the body yields them: the order hyper writes them in.
        let lane = lane.cloned();
        let stream = fetched
            .map(move |grain| match grain? {
                Grain::Bytes(b) => Ok(b),
                Grain::File(file, r) => lane
                    .as_ref()
                    .and_then(|lane| {
                        let len = usize::try_from(r.end - r.start).ok()?;
                        lane.stand_in(file, r.start, len)
                    })
                    .ok_or_else(|| object_store::Error::Generic {
                        store: "sluice",
                        source: "a file grain with no lane to send it".into(),
                    }),
            })
            .boxed();
        ReadStream(std::sync::Mutex::new(stream))
    }

    /// Copies a blob inside the tenant's prefix (server-side on S3 backends).
    pub async fn copy(&self, tenant: &str, from: &str, to: &str) -> ApiResult<()> {
        let store = self.tenant(tenant);
        store
            .copy(&Path::from(from), &Path::from(to))
            .await
            .map_err(ApiError::from)
    }

    /// Deletes blobs, logging (not failing on) errors: an undeleted blob is an orphan that
    /// start-up reconciliation removes.
    pub async fn delete(&self, tenant: &str, names: impl IntoIterator<Item = String>) {
        let store = self.tenant(tenant);
        for name in names {
            match store.delete(&Path::from(name.as_str())).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => tracing::warn!(error = %e, blob = name, "deleting a blob failed"),
            }
        }
    }

    /// Every blob of every tenant in the backend: `(tenant, blob name)`.
    pub async fn list_all(&self) -> ApiResult<Vec<(String, String)>> {
        Ok(self
            .list_all_meta()
            .await?
            .into_iter()
            .map(|l| (l.tenant, l.name))
            .collect())
    }

    /// Every object under `tenants/` in the backend (blobs and recovery records), with its
    /// size and age.
    pub async fn list_all_meta(&self) -> ApiResult<Vec<Listed>> {
        let mut out = Vec::new();
        let mut listing = self.root.list(Some(&Path::from("tenants")));
        while let Some(meta) = listing.try_next().await? {
            let mut parts = meta.location.parts();
            let (Some(_), Some(tenant)) = (parts.next(), parts.next()) else {
                continue;
            };
            let rest: Vec<String> = parts.map(|p| p.as_ref().to_owned()).collect();
            out.push(Listed {
                tenant: tenant.as_ref().to_owned(),
                name: rest.join("/"),
                size: meta.size,
                last_modified_ms: meta.last_modified.timestamp_millis(),
            });
        }
        Ok(out)
    }

    /// Writes a small object (a recovery record) whole, durable when this returns.
    pub async fn put_small(&self, tenant: &str, name: &str, bytes: Bytes) -> ApiResult<()> {
        self.tenant(tenant)
            .put(&Path::from(name), bytes.into())
            .await?;
        Ok(())
    }

    /// Reads a small object whole (`None`: there is none).
    pub async fn get_small(&self, tenant: &str, name: &str) -> ApiResult<Option<Bytes>> {
        match self.tenant(tenant).get(&Path::from(name)).await {
            Ok(r) => Ok(Some(r.bytes().await?)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Fails (`NotFound`, a 5xx) unless every blob in `names` is in the backend.
    pub async fn check_present(&self, tenant: &str, names: &[&str]) -> ApiResult<()> {
        let store = self.tenant(tenant);
        let heads = names.iter().map(|n| {
            let store = Arc::clone(&store);
            let path = Path::from(*n);
            async move { store.head(&path).await }
        });
        futures::future::try_join_all(heads).await?;
        Ok(())
    }
}

impl ReadStream {
    /// Waits for the first chunk, so that a body whose first blob is gone fails here — before
    /// a status line goes out — and never as a 200 with a short body.
    pub async fn primed(mut self) -> ApiResult<Self> {
        let first = self.next().await;
        let first = match first {
            None => return Ok(self),
            Some(r) => r?,
        };
        let rest = self.0.into_inner().unwrap_or_else(PoisonError::into_inner);
        Ok(Self::new(
            stream::once(async move { Ok(first) }).chain(rest).boxed(),
        ))
    }
}

/// The bytes `range` of an inline body (an object kept in the catalog), admitted through the
/// tenant's pacer as a backend read of the same bytes would be. A range beyond the body is
/// an error, never short data.
pub fn read_inline(pacer: &Pacer, body: Bytes, range: Range<u64>) -> ReadStream {
    if range.is_empty() {
        return ReadStream::new(stream::empty().boxed());
    }
    let pacer = pacer.clone();
    let read = async move {
        pacer.admit(range.end - range.start, false).await;
        let to = usize::try_from(range.end).unwrap_or(usize::MAX);
        let from = usize::try_from(range.start).unwrap_or(usize::MAX);
        if to > body.len() {
            return Err(object_store::Error::Generic {
                store: "sluice",
                source: format!("range {range:?} of an inline body of {} bytes", body.len()).into(),
            });
        }
        Ok(body.slice(from..to))
    };
    ReadStream::new(stream::once(read).boxed())
}

/// A fetched grain: its bytes, or (to be sent by the connection) the open file and range.
enum Grain {
    Bytes(Bytes),
    File(Arc<std::fs::File>, Range<u64>),
}

impl Grain {
    /// The part `want` of a grain fetched from `offset` of its blob.
    fn narrowed(self, offset: u64, want: Range<u64>) -> Self {
        match self {
            Self::Bytes(b) => {
                let from = usize::try_from(want.start - offset).unwrap_or(usize::MAX);
                let to = usize::try_from(want.end - offset).unwrap_or(usize::MAX);
                Self::Bytes(b.slice(from.min(b.len())..to.min(b.len())))
            }
            Self::File(file, _) => Self::File(file, want),
        }
    }
}

/// One grain of a read: the blob, the bytes fetched (whole chunks when verified), the part of
/// them sent, the blob's shared file on local files, whether the connection sends the grain
/// from it, and its checksums.
struct GrainSpec {
    path: Path,
    fetch: Range<u64>,
    want: Range<u64>,
    file: Option<Arc<BlobFile>>,
    send: bool,
    verify: Option<Verify>,
}

/// Checks a grain fetched from `offset` of its blob against its checksums. Verified
/// segments are never handed to the sendfile lane (see [`BlobStore::read_labeled`]), so a
/// file grain here is a broken invariant, refused rather than sent unchecked.
fn verified(
    grain: Grain,
    offset: u64,
    verify: &Verify,
) -> object_store::Result<Result<Grain, integrity::Corrupt>> {
    match grain {
        Grain::Bytes(b) => Ok(verify.check(offset, &b).map(|()| Grain::Bytes(b))),
        Grain::File(..) => Err(object_store::Error::Generic {
            store: "sluice",
            source: "a verified grain was to be sent from its file unchecked".into(),
        }),
    }
}

/// The bytes `range` of a blob. On the local filesystem (the backend hands back the open
/// file) they are read straight into a buffer from `buffers`, without zero-filling it first:
/// `get_range` would zero-fill a fresh buffer per grain before reading over it, a memset per
/// byte served that showed as 5% of the gateway's CPU under a GET benchmark. Other backends
/// stream as usual.
async fn fetch(
    store: &Arc<dyn ObjectStore>,
    path: &Path,
    range: Range<u64>,
    buffers: ReadBuffers,
) -> object_store::Result<Grain> {
    let result = get_range(store, path, range).await?;
    let range = result.range.clone();
    match result.payload {
        GetResultPayload::File(file, local) => tokio::task::spawn_blocking(move || {
            read_file_range(&file, None, range, &buffers)
                .map(Grain::Bytes)
                .map_err(|source| object_store::Error::Generic {
                    store: "LocalFileSystem",
                    source: format!("reading {}: {source}", local.display()).into(),
                })
        })
        .await
        .map_err(|e| object_store::Error::Generic {
            store: "sluice",
            source: Box::new(e),
        })?,
        GetResultPayload::Stream(_) => result.bytes().await.map(Grain::Bytes),
    }
}

/// `range` of the blob at `path`, as the backend hands it back (an open file on the local
/// filesystem, a stream elsewhere).
async fn get_range(
    store: &Arc<dyn ObjectStore>,
    path: &Path,
    range: Range<u64>,
) -> object_store::Result<object_store::GetResult> {
    store
        .get_opts(
            path,
            GetOptions {
                range: Some(range.into()),
                ..GetOptions::default()
            },
        )
        .await
}

/// A blob's file, opened by the first of a read's grains to need it and shared by the rest
/// (`None`: the backend streamed instead).
struct BlobFile {
    file: tokio::sync::OnceCell<Option<Arc<Opened>>>,
    /// Where the read ends in this blob: the file must hold that much.
    end: u64,
}

/// A blob's file as the backend opened it, and, opened by the first read that goes around the
/// page cache ([`read_file_range`]), the same file again with `O_DIRECT`.
struct Opened {
    file: Arc<std::fs::File>,
    local: std::path::PathBuf,
    direct: std::sync::OnceLock<Option<std::fs::File>>,
}

impl Opened {
    /// The file opened with `O_DIRECT` (see [`open_direct`]), opened on the first call.
    fn direct(&self) -> Option<&std::fs::File> {
        self.direct
            .get_or_init(|| open_direct(&self.file, &self.local))
            .as_ref()
    }
}

/// `path` (the file `file` has open) opened again for reading with `O_DIRECT`, or `None`
/// where that cannot be done (the filesystem refuses it, or the file is gone): the reads then
/// take the page cache. Once it is open, `file` is advised random access: its reads are then
/// only the probes of [`probe_cache`], whose misses should read in their one page and no
/// read-ahead, and the reads of grains found cached, which ask for the rest by `WILLNEED`.
fn open_direct(file: &std::fs::File, path: &std::path::Path) -> Option<std::fs::File> {
    use rustix::fs::{Mode, OFlags};
    let flags = OFlags::RDONLY | OFlags::DIRECT | OFlags::CLOEXEC;
    let direct = rustix::fs::open(path, flags, Mode::empty()).ok()?;
    let _ = rustix::fs::fadvise(file, 0, None, rustix::fs::Advice::Random);
    Some(std::fs::File::from(direct))
}

/// The blob's file, opened by the first grain to need it (the backend hands back the open
/// file) and checked then to hold all the read wants of it (blobs never change once written):
/// a blob shorter than its record fails the read before its first byte, never sends or reads
/// short data. `None`: the backend streams instead (none with local files).
async fn open_blob<'a>(
    store: &Arc<dyn ObjectStore>,
    path: &Path,
    range: Range<u64>,
    blob: &'a BlobFile,
) -> object_store::Result<Option<&'a Arc<Opened>>> {
    let opened = blob
        .file
        .get_or_try_init(|| async {
            let result = get_range(store, path, range).await?;
            let GetResultPayload::File(file, local) = result.payload else {
                return Ok(None);
            };
            if result.meta.size < blob.end {
                return Err(object_store::Error::Generic {
                    store: "LocalFileSystem",
                    source: format!(
                        "reading {}: {} bytes, short of {}: the blob is shorter than its record",
                        local.display(),
                        result.meta.size,
                        blob.end
                    )
                    .into(),
                });
            }
            Ok(Some(Arc::new(Opened {
                file: Arc::new(file),
                local,
                direct: std::sync::OnceLock::new(),
            })))
        })
        .await?;
    Ok(opened.as_ref())
}

/// `range` of a blob, for the connection to send from the blob's file, unread here. All
/// grains of one blob in a read share one open file ([`open_blob`]): opened afresh per grain,
/// the file's read-ahead would start over small at every grain. A backend that streams
/// instead is fetched as [`fetch`] does.
async fn send_grain(
    store: &Arc<dyn ObjectStore>,
    path: &Path,
    range: Range<u64>,
    blob: &BlobFile,
    buffers: ReadBuffers,
) -> object_store::Result<Grain> {
    if !usize::try_from(range.end - range.start).is_ok_and(|n| n <= PLACEHOLDER_MAX) {
        return fetch(store, path, range, buffers).await;
    }
    match open_blob(store, path, range.clone(), blob).await? {
        Some(opened) => Ok(Grain::File(Arc::clone(&opened.file), range)),
        None => fetch(store, path, range, buffers).await,
    }
}

/// `range` of a blob read into a buffer (to be verified before it is sent), from the blob's
/// file that all grains of the read share ([`open_blob`]) with a positioned read: the file's
/// read-ahead state then runs from grain to grain, where a file opened per grain started
/// over at every grain, and a grain costs one blocking call instead of an open, a stat and
/// a read. A backend that streams instead is fetched as [`fetch`] does.
async fn read_grain(
    store: &Arc<dyn ObjectStore>,
    path: &Path,
    range: Range<u64>,
    blob: &BlobFile,
    buffers: ReadBuffers,
) -> object_store::Result<Grain> {
    let Some(opened) = open_blob(store, path, range.clone(), blob).await? else {
        return fetch(store, path, range, buffers).await;
    };
    let opened = Arc::clone(opened);
    // Only a read of a good part of a grain goes around the page cache: a short one (a small
    // object, a short range) may well find its pages cached, and costs the disk little if not.
    let around = range.end - range.start >= DIRECT_MIN;
    let name = path.to_string();
    tokio::task::spawn_blocking(move || {
        let direct = if around { opened.direct() } else { None };
        read_file_range(&opened.file, direct, range, &buffers)
            .map(Grain::Bytes)
            .map_err(|source| object_store::Error::Generic {
                store: "LocalFileSystem",
                source: format!("reading blob {name}: {source}").into(),
            })
    })
    .await
    .map_err(|e| object_store::Error::Generic {
        store: "sluice",
        source: Box::new(e),
    })?
}

/// Reads exactly `range` of `file` into a buffer from `buffers`; a file shorter than the range
/// is an error, never short data. Positioned reads leave the file's offset alone, so the grains
/// of one blob may read its one open file at once.
///
/// With `direct` (the same file opened with `O_DIRECT`) a range whose first page is not in
/// the page cache ([`probe_cache`]), rounded out to whole blocks, is read from the disk
/// straight into the buffer's aligned space, around the page cache: no copy out of the cache,
/// and no cache filled with a copy of what is about to be sent. A file whose `O_DIRECT` reads
/// are refused (`EINVAL`) is read through the cache from where the direct reads stopped. The
/// page cache and `O_DIRECT` agree: the kernel writes back a dirty page before a direct read
/// of it.
fn read_file_range(
    file: &std::fs::File,
    direct: Option<&std::fs::File>,
    range: Range<u64>,
    buffers: &ReadBuffers,
) -> std::io::Result<Bytes> {
    let len = range.end - range.start;
    let want = usize::try_from(len).map_err(std::io::Error::other)?;
    let align = buffers::ALIGN as u64;
    // Where the read starts in the buffer's space: the range's offset in its block when read
    // by whole blocks.
    let lead = if direct.is_some() {
        (range.start % align) as usize
    } else {
        0
    };
    let base = range.start - lead as u64;
    let end = lead + want;
    let mut lent = buffers.take(want);
    let space = lent.space();
    let short = |got: usize| {
        std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            format!(
                "{} of {len} bytes: the blob is shorter than its record",
                got.saturating_sub(lead)
            ),
        )
    };
    let mut done = lead;
    let mut direct = direct;
    // A grain whose first page is in the page cache is read from there: hot data (a shard
    // every rank restores, a blob just written) stays a copy from memory. The probe's miss
    // brings that one page in, so a grain read twice is read through the cache the second
    // time and is cached from then on; one read once costs the disk a page more.
    if let Some(n) = direct.and_then(|_| probe_cache(file, range.start, &mut space[lead..])) {
        done += n;
        direct = None;
    }
    if let Some(direct) = direct {
        let blocks = &mut space[..end.next_multiple_of(buffers::ALIGN)];
        done = read_direct(direct, blocks, base, end, short)?.max(lead);
    }
    if done < end {
        // All of the rest is about to be read: have the kernel fetch it at once rather than as
        // its read-ahead window ramps up. Advice only: an error changes nothing but the speed.
        if let Some(n) = std::num::NonZeroU64::new((end - done) as u64) {
            let from = base + done as u64;
            let _ = rustix::fs::fadvise(file, from, Some(n), rustix::fs::Advice::WillNeed);
        }
    }
    while done < end {
        match rustix::io::pread(file, &mut space[done..end], base + done as u64) {
            Ok(0) => return Err(short(done)),
            Ok(n) => done += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(lent.freeze(lead..end))
}

/// Whether the page of `file` holding `at` is in the page cache: if so, how many bytes of it
/// from `at` (at most the rest of that page, and of `buf`) it read into `buf` from there, and
/// `None` when it is not (the read would have waited for the disk: `RWF_NOWAIT`), at the end
/// of the file, or the filesystem cannot say. A miss reads that one page in, and no
/// read-ahead beyond it once the file is advised random access ([`open_direct`]).
fn probe_cache(file: &std::fs::File, at: u64, buf: &mut [u8]) -> Option<usize> {
    let page = buffers::ALIGN - (at % buffers::ALIGN as u64) as usize;
    let n = page.min(buf.len());
    let mut slice = [std::io::IoSliceMut::new(&mut buf[..n])];
    match rustix::io::preadv2(file, &mut slice, at, rustix::io::ReadWriteFlags::NOWAIT) {
        Ok(n) if n > 0 => Some(n),
        _ => None,
    }
}

/// Reads whole blocks of `file` (opened with `O_DIRECT`) from `base` into `space` (aligned, a
/// whole number of blocks) until the first `end` bytes are in: how many bytes are in, at least
/// `end`, or fewer where the filesystem refused a direct read (`EINVAL`), for the caller to
/// read the rest through the page cache. A file that ends short of `end` is `short(bytes in)`.
fn read_direct(
    file: &std::fs::File,
    space: &mut [u8],
    base: u64,
    end: usize,
    short: impl Fn(usize) -> std::io::Error,
) -> std::io::Result<usize> {
    let mut done = 0;
    while done < end {
        match rustix::io::pread(file, &mut space[done..], base + done as u64) {
            // A read of less than whole blocks ends at the end of the file.
            Ok(n) if n == 0 || n % buffers::ALIGN != 0 => {
                done += n;
                return if done >= end {
                    Ok(done)
                } else {
                    Err(short(done))
                };
            }
            Ok(n) => done += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(rustix::io::Errno::INVAL) => return Ok(done),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(done)
}

/// How many transfers of `unit` bytes fill a window of `bytes`: at least two, so that one is
/// always in flight while the next is prepared.
fn window(bytes: u64, unit: u64) -> usize {
    usize::try_from(bytes / unit.max(1)).map_or(2, |n| n.max(2))
}

/// A part upload's outcome; a task that panicked or was cancelled fails the write.
fn joined(r: Result<object_store::Result<()>, tokio::task::JoinError>) -> ApiResult<()> {
    match r {
        Ok(r) => r.map_err(ApiError::from),
        Err(e) => Err(ApiError::Internal(format!("part upload task: {e}"))),
    }
}

async fn write_inner<S, E>(
    store: &Arc<dyn ObjectStore>,
    path: &Path,
    mut body: S,
    limits: BodyLimits,
    reservation: &mut Reservation,
    pacer: &Pacer,
    part_size: u64,
    blob_crc: bool,
    upload: &mut Option<Box<dyn MultipartUpload>>,
) -> ApiResult<Written>
where
    S: Stream<Item = Result<Bytes, E>> + Send + Unpin,
    E: std::fmt::Display,
{
    let parts_in_flight = window(WRITE_BEHIND_BYTES, part_size);
    let mut md5 = Md5Stream::new();
    // The body's chunk checksums so far; the whole blob's (for a store that wants it) is
    // combined from them, in the slot that carries it to the store once the body has ended.
    let mut chunks = ChunkHasher::default();
    let crc = blob_crc.then(BlobCrcSlot::default);
    let mut size: u64 = 0;
    let mut buf = PutPayloadMut::new();
    // Parts upload as tasks, so each starts on the backend the moment it is admitted rather
    // than when this loop next polls them: an admitted grain that waits here would reach the
    // tier late and bunched with the next, queueing in front of other tenants' grains. The
    // set aborts whatever is still running if the request is dropped.
    let mut in_flight = tokio::task::JoinSet::new();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| ApiError::Body(e.to_string()))?;
        let len = chunk.len() as u64;
        size += len;
        if size > limits.max {
            return Err(ApiError::EntityTooLarge(limits.max));
        }
        match limits.declared {
            Some(d) if size > d => return Err(ApiError::BodyTooLong),
            Some(_) => {}
            None => reservation.grow(len)?,
        }
        chunks.update(&chunk);
        md5.update(chunk.clone()).await;
        buf.push(chunk);
        if buf.content_length() as u64 >= part_size {
            let part = std::mem::take(&mut buf).freeze();
            pacer.admit(part.content_length() as u64, true).await;
            if upload.is_none() {
                let mut opts = PutMultipartOptions::default();
                if let Some(slot) = &crc {
                    opts.extensions.insert(slot.clone());
                }
                *upload = Some(store.put_multipart_opts(path, opts).await?);
            }
            if let Some(u) = upload.as_mut() {
                in_flight.spawn(u.put_part(part));
            }
            while in_flight.len() >= parts_in_flight {
                if let Some(r) = in_flight.join_next().await {
                    joined(r)?;
                }
            }
        }
    }
    if limits.declared.is_some_and(|d| size < d) {
        return Err(ApiError::IncompleteBody);
    }
    let rest = buf.freeze();
    pacer.admit(rest.content_length() as u64, true).await;
    let checksums = chunks.finish();
    let slot = crc.inspect(|slot| {
        slot.set(BlobCrc {
            crc: integrity::whole(&checksums, size).crc,
            len: size,
        });
    });
    let mut inline = None;
    match upload.as_mut() {
        // Nothing has gone to the backend (the body is shorter than a part) and it is small
        // enough to keep: hand it back instead of writing it.
        None if limits.inline.is_some_and(|max| size <= max) => inline = Some(Bytes::from(rest)),
        None => {
            let mut opts = PutOptions::default();
            if let Some(slot) = slot {
                opts.extensions.insert(slot);
            }
            store.put_opts(path, rest, opts).await?;
        }
        Some(u) => {
            if rest.content_length() > 0 {
                in_flight.spawn(u.put_part(rest));
            }
            while let Some(r) = in_flight.join_next().await {
                joined(r)?;
            }
            u.complete().await?;
        }
    }
    Ok(Written {
        size,
        md5: md5.finish().await,
        checksums: Some(checksums),
        inline,
    })
}

/// A spawned task that is aborted when its handle is dropped (a GET whose client went away).
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl<T> std::future::Future for AbortOnDrop<T> {
    type Output = Result<T, tokio::task::JoinError>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        std::pin::Pin::new(&mut self.0).poll(cx)
    }
}

#[cfg(test)]
mod tests;
