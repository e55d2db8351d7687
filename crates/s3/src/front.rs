//! The S3 operations, each confined to the caller's namespace.
//!
//! Every handler takes the tenant from [`Caller`] (attached by the access check) and passes it
//! to every catalog and blob call; there is no code path that takes a tenant from the request
//! itself. Another tenant's bucket is simply absent from the caller's namespace, so errors
//! about it are the same as for a bucket that does not exist.
//!
//! Write ordering: blob written and fsynced → catalog transaction (object visible, usage
//! settled) → recovery record written (see [`crate::recovery`]) → old record and old blobs
//! deleted → acknowledgement. Delete ordering: catalog first, record and blobs after. A PutObject
//! body of at most [`INLINE_MAX`] bytes skips the blob: it is committed inline, in the
//! catalog transaction that makes the object visible (a copy of an inline object stays
//! inline; parts are always blobs, since completion assembles objects from them). Reads,
//! copies and quota treat both alike, and the tenant's pacer admits the same bytes.
//!
//! On the node agent the front has a [`Tier`] behind it, the shared tier it buffers for: reads
//! that miss here, listings and ListBuckets take the tier in (see [`tier`]).

mod buckets;
mod confidential;
pub mod escrow;
mod listing;
mod multipart;
mod objects;
mod recovery;
pub mod tier;

pub use buckets::owner;
pub use objects::METADATA_MAX;
pub use tier::{Tier, TierBucket, TierRead};

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use s3s::dto::{self, Timestamp};
use s3s::{S3, S3Request, S3Response, S3Result};
use sluice_meta::{Catalog, MetaError};

use sluice_metrics::Metrics;
use sluice_throttle::Throttle;

use crate::auth::Caller;
use crate::blob::{BlobStore, Pacer};
use crate::checksum::Expected;
use crate::confidential::Confidential;
use crate::error::{ApiError, ApiResult};
use sluice_serve::sendfile::SendfileLane;

/// The largest PutObject body kept inline in the catalog instead of in a blob.
///
/// A blob costs a small PUT three fsyncs in a row (the file, its directory, then the
/// catalog commit); inline, its only fsync is the catalog's group commit, which concurrent
/// writers share. Up to a few tens of KiB those fixed costs dominate a write; past that the
/// bytes do, and keeping them in the catalog costs more than it saves: redb rewrites a
/// value's pages whenever its leaf changes, and listings read whole values from disk. 16 KiB
/// takes in the small files that pay most per byte (commit markers, configs, indexes, the
/// 4 KiB benchmark objects) while a 1,000-key listing page reads at most ~16 MiB and the
/// catalog stays a small fraction of the data it describes. It is well under the smallest
/// part size (64 KiB), so the decision never waits for more than one part's buffer.
pub const INLINE_MAX: u64 = 16 * 1024;

/// Settings of the front end.
#[derive(Debug, Clone)]
pub struct FrontConfig {
    pub region: String,
    /// Largest object body accepted by PutObject (and per part by UploadPart).
    pub max_object_size: u64,
}

/// The S3 service implementation. Cheap to clone.
#[derive(Clone)]
pub struct Front {
    inner: Arc<Inner>,
}

#[derive(Clone)]
struct Inner {
    catalog: Arc<Catalog>,
    blobs: Arc<BlobStore>,
    config: FrontConfig,
    throttle: Option<Arc<Throttle>>,
    metrics: Arc<Metrics>,
    tier: Option<Arc<dyn Tier>>,
    /// Tenants whose bodies are encrypted here (the node agent's keys; see
    /// [`crate::confidential`]).
    confidential: Option<Arc<dyn Confidential>>,
    /// Plaintext bytes per segment of the bodies encrypted here.
    segment_size: u32,
    /// The buffers bodies are encrypted into (see [`crate::confidential::SealBuffers`]).
    seal_buffers: crate::confidential::SealBuffers,
    /// The rollback manifests' marks, locks and caches (see
    /// [`crate::confidential::manifest`]).
    manifests: Arc<confidential::Manifests>,
    /// Whether commits write recovery records (see [`crate::recovery`]): yes, unless a tier
    /// is behind this front.
    records: bool,
    /// Whether inline objects get records too (see [`Front::without_inline_records`]).
    inline_records: bool,
}

impl Front {
    pub fn new(catalog: Arc<Catalog>, blobs: Arc<BlobStore>, config: FrontConfig) -> Self {
        Self::with_throttle(catalog, blobs, config, None, Arc::default())
    }

    /// A front end whose operations and body grains pass `throttle`, recording `metrics`.
    pub fn with_throttle(
        catalog: Arc<Catalog>,
        blobs: Arc<BlobStore>,
        config: FrontConfig,
        throttle: Option<Arc<Throttle>>,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                catalog,
                blobs,
                config,
                throttle,
                metrics,
                tier: None,
                confidential: None,
                segment_size: sluice_crypt::DEFAULT_SEGMENT_SIZE,
                seal_buffers: crate::confidential::SealBuffers::default(),
                manifests: Arc::default(),
                records: true,
                inline_records: true,
            }),
        }
    }

    /// This front end in front of `tier`: the local store becomes a buffer of the tier's (see
    /// [`tier`]).
    #[must_use]
    pub fn with_tier(mut self, tier: Arc<dyn Tier>) -> Self {
        let inner = Arc::make_mut(&mut self.inner);
        inner.tier = Some(tier);
        inner.records = false;
        self
    }

    /// This front end encrypting the bodies of the tenants `keys` gives a key for, and
    /// refusing the requests of those whose key is unavailable (see [`crate::confidential`]).
    #[must_use]
    pub fn with_confidential(mut self, keys: Arc<dyn Confidential>) -> Self {
        Arc::make_mut(&mut self.inner).confidential = Some(keys);
        self
    }

    /// Encrypts bodies in segments of `bytes` plaintext bytes instead of
    /// [`sluice_crypt::DEFAULT_SEGMENT_SIZE`] (tests crossing many segment boundaries).
    #[must_use]
    pub fn with_segment_size(mut self, bytes: u32) -> Self {
        Arc::make_mut(&mut self.inner).segment_size = bytes;
        self
    }

    /// Writes no recovery record for objects kept inline in the catalog: on the embedded
    /// catalog over the local filesystem a record costs a small PUT about half its
    /// throughput (a file and its directory fsynced after the shared catalog commit), and
    /// such objects then live only in the catalog, like the catalog itself: a rebuild does
    /// not bring them back and `sluice catalog check` reports them.
    #[must_use]
    pub fn without_inline_records(mut self) -> Self {
        Arc::make_mut(&mut self.inner).inline_records = false;
        self
    }

    /// The tier to ask after `e`, when `e` says this store has no such object or bucket and
    /// there is a tier behind it.
    fn tier_after(&self, e: &ApiError) -> Option<&Arc<dyn Tier>> {
        let missed = matches!(
            e,
            ApiError::NoSuchKey | ApiError::Meta(MetaError::NoSuchBucket)
        );
        self.inner.tier.as_ref().filter(|_| missed)
    }

    /// A quota refusal of a front with a tier is its local buffer's, and says why the buffer
    /// is not emptying.
    fn scope_quota(&self, tenant: &str, e: ApiError) -> ApiError {
        match (e, &self.inner.tier) {
            (
                ApiError::Meta(
                    refused @ (MetaError::QuotaExceeded { .. } | MetaError::TooManyObjects { .. }),
                ),
                Some(tier),
            ) => ApiError::LocalQuotaExceeded {
                refused,
                stalled: tier.stalled(tenant),
            },
            (e, _) => e,
        }
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.inner.metrics
    }

    pub fn throttle(&self) -> Option<&Arc<Throttle>> {
        self.inner.throttle.as_ref()
    }

    fn pacer(&self, tenant: &str) -> Pacer {
        Pacer {
            tenant: Arc::from(tenant),
            throttle: self.inner.throttle.clone(),
            metrics: self.inner.metrics.tenant(tenant),
        }
    }

    /// Runs one operation for the caller: admission of its per-operation cost (or
    /// `SlowDown`), then the handler, then metrics.
    async fn run<T, F, Fut>(
        &self,
        op: &'static str,
        requester: Requester,
        f: F,
    ) -> S3Result<S3Response<T>>
    where
        F: FnOnce(Arc<str>) -> Fut,
        Fut: std::future::Future<Output = ApiResult<T>>,
    {
        let Requester { tenant, elsewhere } = requester;
        let started = std::time::Instant::now();
        let metrics = self.inner.metrics.tenant(&tenant);
        // What of it the reservation phase served, until the answer's head (for the client's
        // ρ; see `sluice_throttle::elsewhere`). Pinned here so the handler's future is not
        // held twice.
        let (result, reserved) =
            sluice_throttle::elsewhere::counting_reserved(std::pin::pin!(async {
                let admitted = match &self.inner.throttle {
                    None => Ok(()),
                    Some(t) => t
                        .admit_op_elsewhere(&tenant, elsewhere)
                        .await
                        .map(|waited| metrics.queue_wait_seconds.observe(waited)),
                };
                match admitted {
                    Ok(()) => f(Arc::clone(&tenant)).await,
                    Err(throttled) => {
                        metrics
                            .throttled
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        Err(ApiError::SlowDown(throttled))
                    }
                }
            }))
            .await;
        if matches!(result, Err(ApiError::Meta(MetaError::QuotaExceeded { .. }))) {
            metrics
                .quota_refused
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        metrics.op(
            op,
            if result.is_ok() { "ok" } else { "error" },
            started.elapsed(),
        );
        let output = result.map_err(|e| self.scope_quota(&tenant, e))?;
        let mut response = S3Response::new(output);
        let dmclock = self.inner.throttle.as_ref().map(|t| t.config().policy)
            == Some(sluice_throttle::Policy::DmClock);
        // Digits and a space: always a valid header value.
        if let (true, Ok(v)) = (dmclock, http::HeaderValue::from_str(&reserved.to_string())) {
            response
                .headers
                .insert(sluice_throttle::elsewhere::RESERVED_HEADER, v);
        }
        Ok(response)
    }

    /// The region this endpoint answers for.
    pub fn region(&self) -> &str {
        &self.inner.config.region
    }

    pub fn catalog(&self) -> &Arc<Catalog> {
        &self.inner.catalog
    }

    pub fn blobs(&self) -> &Arc<BlobStore> {
        &self.inner.blobs
    }

    fn config(&self) -> &FrontConfig {
        &self.inner.config
    }

    /// Runs a (blocking) catalog call on the blocking pool.
    async fn meta<T, F>(&self, f: F) -> ApiResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Catalog) -> Result<T, MetaError> + Send + 'static,
    {
        let catalog = Arc::clone(&self.inner.catalog);
        tokio::task::spawn_blocking(move || f(&catalog))
            .await
            .map_err(|e| ApiError::Internal(format!("catalog task: {e}")))?
            .map_err(ApiError::from)
    }
}

/// Who asks: the tenant, and what it says other gateways served it (dmClock's δ/ρ, which
/// the throttle applies only when it honours them; see `sluice_throttle::elsewhere`).
struct Requester {
    tenant: Arc<str>,
    elsewhere: Option<sluice_throttle::elsewhere::Elsewhere>,
}

/// The tenant the access check attached to this request, and the δ/ρ its headers carry (a
/// malformed value is `InvalidArgument`).
fn caller<T>(req: &S3Request<T>) -> ApiResult<Requester> {
    use sluice_throttle::elsewhere::{DELTA_HEADER, Elsewhere, RHO_HEADER};
    let tenant = req
        .extensions
        .get::<Caller>()
        .map(|c| Arc::clone(&c.0))
        .ok_or(ApiError::AccessDenied)?;
    let value = |name| req.headers.get(name).map(http::HeaderValue::as_bytes);
    let elsewhere = Elsewhere::from_values(value(DELTA_HEADER), value(RHO_HEADER))
        .map_err(|e| ApiError::InvalidArgument(e.to_string()))?;
    Ok(Requester { tenant, elsewhere })
}

use sluice_meta::now_ms;

fn timestamp(ms: i64) -> Timestamp {
    let ms = u64::try_from(ms).unwrap_or(0);
    Timestamp::from(UNIX_EPOCH + Duration::from_millis(ms))
}

fn etag(hex: &str) -> dto::ETag {
    dto::ETag::Strong(hex.to_owned())
}

/// Delegates an S3 trait method to its `*_op` handler through [`Front::run`], passing on any
/// extra argument (GetObject's sendfile lane).
macro_rules! op {
    ($self:ident, $req:ident, $name:literal, $handler:ident $(, $extra:expr)?) => {{
        let tenant = caller(&$req)?;
        let input = $req.input;
        $self
            .run(
                $name,
                tenant,
                |t| async move { $self.$handler(&t, input $(, $extra)?).await },
            )
            .await
    }};
}

#[async_trait::async_trait]
impl S3 for Front {
    async fn list_buckets(
        &self,
        req: S3Request<dto::ListBucketsInput>,
    ) -> S3Result<S3Response<dto::ListBucketsOutput>> {
        let tenant = caller(&req)?;
        self.run("ListBuckets", tenant, |t| async move {
            self.list_buckets_op(&t).await
        })
        .await
    }

    async fn create_bucket(
        &self,
        req: S3Request<dto::CreateBucketInput>,
    ) -> S3Result<S3Response<dto::CreateBucketOutput>> {
        op!(self, req, "CreateBucket", create_bucket_op)
    }

    async fn delete_bucket(
        &self,
        req: S3Request<dto::DeleteBucketInput>,
    ) -> S3Result<S3Response<dto::DeleteBucketOutput>> {
        op!(self, req, "DeleteBucket", delete_bucket_op)
    }

    async fn head_bucket(
        &self,
        req: S3Request<dto::HeadBucketInput>,
    ) -> S3Result<S3Response<dto::HeadBucketOutput>> {
        op!(self, req, "HeadBucket", head_bucket_op)
    }

    async fn get_bucket_location(
        &self,
        req: S3Request<dto::GetBucketLocationInput>,
    ) -> S3Result<S3Response<dto::GetBucketLocationOutput>> {
        op!(self, req, "GetBucketLocation", get_bucket_location_op)
    }

    async fn get_bucket_versioning(
        &self,
        req: S3Request<dto::GetBucketVersioningInput>,
    ) -> S3Result<S3Response<dto::GetBucketVersioningOutput>> {
        op!(self, req, "GetBucketVersioning", get_bucket_versioning_op)
    }

    async fn put_object(
        &self,
        req: S3Request<dto::PutObjectInput>,
    ) -> S3Result<S3Response<dto::PutObjectOutput>> {
        let checksum = Expected::from_request(&req.headers, req.trailing_headers.as_ref());
        let escrow = escrow::holder(&req.headers);
        let tenant = caller(&req)?;
        let input = req.input;
        self.run("PutObject", tenant, |t| async move {
            self.put_object_guarded(&t, input, checksum?, escrow?.as_deref())
                .await
        })
        .await
    }

    async fn get_object(
        &self,
        req: S3Request<dto::GetObjectInput>,
    ) -> S3Result<S3Response<dto::GetObjectOutput>> {
        let lane = req.extensions.get::<SendfileLane>().cloned();
        op!(self, req, "GetObject", get_object_guarded, lane.as_ref())
    }

    async fn head_object(
        &self,
        req: S3Request<dto::HeadObjectInput>,
    ) -> S3Result<S3Response<dto::HeadObjectOutput>> {
        op!(self, req, "HeadObject", head_object_guarded)
    }

    async fn get_object_attributes(
        &self,
        req: S3Request<dto::GetObjectAttributesInput>,
    ) -> S3Result<S3Response<dto::GetObjectAttributesOutput>> {
        op!(
            self,
            req,
            "GetObjectAttributes",
            get_object_attributes_guarded
        )
    }

    async fn delete_object(
        &self,
        req: S3Request<dto::DeleteObjectInput>,
    ) -> S3Result<S3Response<dto::DeleteObjectOutput>> {
        op!(self, req, "DeleteObject", delete_object_guarded)
    }

    async fn delete_objects(
        &self,
        req: S3Request<dto::DeleteObjectsInput>,
    ) -> S3Result<S3Response<dto::DeleteObjectsOutput>> {
        op!(self, req, "DeleteObjects", delete_objects_guarded)
    }

    async fn copy_object(
        &self,
        req: S3Request<dto::CopyObjectInput>,
    ) -> S3Result<S3Response<dto::CopyObjectOutput>> {
        let cond = objects::write_precondition_of(&req.headers);
        op!(self, req, "CopyObject", copy_object_guarded, cond)
    }

    async fn list_objects(
        &self,
        req: S3Request<dto::ListObjectsInput>,
    ) -> S3Result<S3Response<dto::ListObjectsOutput>> {
        op!(self, req, "ListObjects", list_objects_op)
    }

    async fn list_objects_v2(
        &self,
        req: S3Request<dto::ListObjectsV2Input>,
    ) -> S3Result<S3Response<dto::ListObjectsV2Output>> {
        op!(self, req, "ListObjectsV2", list_objects_v2_op)
    }

    async fn list_object_versions(
        &self,
        req: S3Request<dto::ListObjectVersionsInput>,
    ) -> S3Result<S3Response<dto::ListObjectVersionsOutput>> {
        op!(self, req, "ListObjectVersions", list_object_versions_op)
    }

    async fn create_multipart_upload(
        &self,
        req: S3Request<dto::CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<dto::CreateMultipartUploadOutput>> {
        op!(self, req, "CreateMultipartUpload", create_multipart_guarded)
    }

    async fn upload_part(
        &self,
        req: S3Request<dto::UploadPartInput>,
    ) -> S3Result<S3Response<dto::UploadPartOutput>> {
        let checksum = Expected::from_request(&req.headers, req.trailing_headers.as_ref());
        let escrow = escrow::holder(&req.headers);
        let tenant = caller(&req)?;
        let input = req.input;
        self.run("UploadPart", tenant, |t| async move {
            self.upload_part_op(&t, input, checksum?, escrow?.as_deref())
                .await
        })
        .await
    }

    async fn upload_part_copy(
        &self,
        req: S3Request<dto::UploadPartCopyInput>,
    ) -> S3Result<S3Response<dto::UploadPartCopyOutput>> {
        op!(self, req, "UploadPartCopy", upload_part_copy_op)
    }

    async fn complete_multipart_upload(
        &self,
        req: S3Request<dto::CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<dto::CompleteMultipartUploadOutput>> {
        op!(
            self,
            req,
            "CompleteMultipartUpload",
            complete_multipart_guarded
        )
    }

    async fn abort_multipart_upload(
        &self,
        req: S3Request<dto::AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<dto::AbortMultipartUploadOutput>> {
        op!(self, req, "AbortMultipartUpload", abort_multipart_upload_op)
    }

    async fn list_parts(
        &self,
        req: S3Request<dto::ListPartsInput>,
    ) -> S3Result<S3Response<dto::ListPartsOutput>> {
        op!(self, req, "ListParts", list_parts_op)
    }

    async fn list_multipart_uploads(
        &self,
        req: S3Request<dto::ListMultipartUploadsInput>,
    ) -> S3Result<S3Response<dto::ListMultipartUploadsOutput>> {
        op!(self, req, "ListMultipartUploads", list_multipart_uploads_op)
    }
}

#[cfg(test)]
mod tests;
