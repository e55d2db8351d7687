//! The shared tier as the agent sees it.
//!
//! [`UpstreamStore`] is the seam the drain works through: the few operations that carry the
//! journal upstream (bucket create/delete, PUT, a multipart upload's steps, HEAD to verify,
//! DELETE), per tenant. [`Upstream`] is the real one: an S3 client per (tenant, bucket) with
//! the tenant's own keys (`object_store`'s `AmazonS3`), plus the bucket calls `object_store`
//! has no API for, signed with its SigV4 authorizer; it also serves the node's reads
//! (`get`, `list`, `list_buckets`, `bucket_exists`). [`Pool`] puts one `Upstream` per gateway
//! of `[agent] upstream` behind the same calls, spreading them over the gateways and failing
//! over when one dies (see `pool`), each request carrying dmClock's δ and ρ, what the pool's
//! other gateways served its tenant since its previous request to this one, in any phase and
//! by reservation (see `ledger`). Tests have an in-memory twin (`memory`)
//! and a fault-injecting decorator (`faults`); one conformance suite runs against both real
//! and twin.
//!
//! # Errors
//!
//! Every failure is an [`UpstreamError`] decided by the HTTP status of the upstream's answer,
//! never by its text: 404 is [`NotFound`](UpstreamError::NotFound), 416
//! [`RangeNotSatisfiable`](UpstreamError::RangeNotSatisfiable), 503 and 429
//! [`SlowDown`](UpstreamError::SlowDown), other 5xx, 408, network errors and timeouts
//! [`Unavailable`](UpstreamError::Unavailable), any other 4xx
//! [`Refused`](UpstreamError::Refused) (permanent: `QuotaExceeded`, `AccessDenied`, a bad
//! key). See `answer` for how the status survives `object_store`.
//!
//! `object_store` does not retry error answers (and retries a failed connection once): the
//! drain owns retrying, with backoff and jitter, forever, so that every failure is visible in
//! status; the node's reads answer their client at once, and S3 clients retry.

mod answer;
#[cfg(test)]
mod conformance;
#[cfg(test)]
pub mod faults;
mod ledger;
#[cfg(test)]
pub mod memory;
mod pool;
mod s3;

use object_store::PutPayload;
use sluice_meta::ObjectRecord;

pub use pool::{FIRST_REST, GatewayState, MAX_REST, Pool};
pub use s3::{Credentials, EscrowAnswer, Upstream, UpstreamBucket, path};

/// Why an upstream call failed, by the HTTP status of the answer (see the module doc).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UpstreamError {
    /// 404: no such key, bucket or multipart upload.
    #[error("not found upstream")]
    NotFound,
    /// 416: the range asked for is outside the object.
    #[error("the range is not satisfiable upstream")]
    RangeNotSatisfiable,
    /// 503 or 429: throttled; back off with jitter.
    #[error("upstream asks to slow down: {0}")]
    SlowDown(String),
    /// Network errors, timeouts, other 5xx: retry with backoff.
    #[error("upstream unavailable: {0}")]
    Unavailable(String),
    /// Any other 4xx (`QuotaExceeded` 403, `AccessDenied`, a bad key): retrying soon will not
    /// help. The drain still retries, slowly, so the data drains once an operator fixes the
    /// cause.
    #[error("upstream refused: {message} ({status})")]
    Refused { status: u16, message: String },
}

impl UpstreamError {
    /// The error an answer with this (non-success) status stands for; `detail` says what the
    /// upstream said (its S3 error code and message).
    pub fn from_status(status: u16, detail: String) -> Self {
        match status {
            404 => Self::NotFound,
            416 => Self::RangeNotSatisfiable,
            429 | 503 => Self::SlowDown(detail),
            408 | 500..=599 => Self::Unavailable(detail),
            _ => Self::Refused {
                status,
                message: detail,
            },
        }
    }

    /// Will retrying soon not help (a refusal)?
    pub fn is_permanent(&self) -> bool {
        matches!(self, Self::Refused { .. })
    }
}

/// What HEAD shows of an object upstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub size: u64,
    /// Hex, without quotes: the MD5 of a single PUT, or MD5-of-part-MD5s `-N` of a multipart
    /// upload.
    pub etag: String,
}

/// The operations the drain carries the journal upstream with, per tenant.
///
/// Contract (the conformance suite checks it on every implementation): a write into a bucket
/// that does not exist upstream is [`UpstreamError::NotFound`]; deleting an absent key,
/// aborting an absent upload and creating a bucket the tenant already owns succeed; deleting
/// an absent bucket succeeds and a non-empty one is left in place (logged), also successfully;
/// `put_part` and `complete_multipart` of an unknown (or completed, or aborted) upload are
/// `NotFound`; a part sent again under the same index replaces the first; ETags are hex
/// without quotes; an object becomes visible whole, by `put` or `complete_multipart`, never in
/// part.
#[async_trait::async_trait]
pub trait UpstreamStore: Send + Sync {
    /// Where the shared tier is, for status.
    fn endpoint(&self) -> &str;

    /// The state of each gateway behind this store, for status: one that is always up unless
    /// the store is a [`Pool`], which tracks its gateways' failures.
    fn gateways(&self) -> Vec<GatewayState> {
        vec![GatewayState {
            endpoint: self.endpoint().to_owned(),
            up: true,
            consecutive_failures: 0,
            failures_total: 0,
            retry_in_seconds: None,
            last_error: None,
            last_error_at_ms: None,
        }]
    }

    async fn create_bucket(&self, tenant: &str, bucket: &str) -> Result<(), UpstreamError>;

    async fn delete_bucket(&self, tenant: &str, bucket: &str) -> Result<(), UpstreamError>;

    /// Uploads `payload` as `key` with `object`'s headers and metadata; the upstream's ETag,
    /// if it answered one.
    async fn put(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
        payload: PutPayload,
        object: &ObjectRecord,
    ) -> Result<Option<String>, UpstreamError>;

    /// Starts a multipart upload of `key` with `object`'s headers and metadata: its id.
    async fn create_multipart(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
        object: &ObjectRecord,
    ) -> Result<String, UpstreamError>;

    /// Uploads part `index` (0-based): its ETag.
    async fn put_part(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
        upload_id: &str,
        index: usize,
        payload: PutPayload,
    ) -> Result<String, UpstreamError>;

    /// Completes the upload with parts `0..etags.len()`.
    async fn complete_multipart(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
        upload_id: &str,
        etags: Vec<String>,
    ) -> Result<(), UpstreamError>;

    async fn abort_multipart(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
        upload_id: &str,
    ) -> Result<(), UpstreamError>;

    /// What HEAD shows of `key`; `None` if it is absent.
    async fn head(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
    ) -> Result<Option<Head>, UpstreamError>;

    async fn delete(&self, tenant: &str, bucket: &str, key: &str) -> Result<(), UpstreamError>;
}

/// A shared store is a store (the model test keeps a handle on its twin).
#[async_trait::async_trait]
impl<T: UpstreamStore + ?Sized> UpstreamStore for std::sync::Arc<T> {
    fn endpoint(&self) -> &str {
        (**self).endpoint()
    }

    fn gateways(&self) -> Vec<GatewayState> {
        (**self).gateways()
    }

    async fn create_bucket(&self, tenant: &str, bucket: &str) -> Result<(), UpstreamError> {
        (**self).create_bucket(tenant, bucket).await
    }

    async fn delete_bucket(&self, tenant: &str, bucket: &str) -> Result<(), UpstreamError> {
        (**self).delete_bucket(tenant, bucket).await
    }

    async fn put(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
        payload: PutPayload,
        object: &ObjectRecord,
    ) -> Result<Option<String>, UpstreamError> {
        (**self).put(tenant, bucket, key, payload, object).await
    }

    async fn create_multipart(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
        object: &ObjectRecord,
    ) -> Result<String, UpstreamError> {
        (**self).create_multipart(tenant, bucket, key, object).await
    }

    async fn put_part(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
        upload_id: &str,
        index: usize,
        payload: PutPayload,
    ) -> Result<String, UpstreamError> {
        (**self)
            .put_part(tenant, bucket, key, upload_id, index, payload)
            .await
    }

    async fn complete_multipart(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
        upload_id: &str,
        etags: Vec<String>,
    ) -> Result<(), UpstreamError> {
        (**self)
            .complete_multipart(tenant, bucket, key, upload_id, etags)
            .await
    }

    async fn abort_multipart(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
        upload_id: &str,
    ) -> Result<(), UpstreamError> {
        (**self)
            .abort_multipart(tenant, bucket, key, upload_id)
            .await
    }

    async fn head(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
    ) -> Result<Option<Head>, UpstreamError> {
        (**self).head(tenant, bucket, key).await
    }

    async fn delete(&self, tenant: &str, bucket: &str, key: &str) -> Result<(), UpstreamError> {
        (**self).delete(tenant, bucket, key).await
    }
}
