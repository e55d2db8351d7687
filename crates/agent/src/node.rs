//! The shared tier as the node's [`Tier`]: the gateway upstream, as this node sees it.
//!
//! The agent serves the gateway's own [`sluice_s3::Front`] over the node's catalog and disk,
//! with a [`SharedTier`] behind it. The front does every S3 operation and every merge (reads
//! that miss here, listings, ListBuckets, buckets made upstream and used here first: see
//! [`sluice_s3::front::tier`]); writes need nothing from the tier, since the front's catalog
//! commit appends the journal entry (see [`crate::journal`]). This module answers the front's
//! questions about upstream:
//! - less what this node deleted and upstream has not yet: a key whose newest journalled change
//!   is a delete is absent from reads and listings, a bucket whose deletion is on its way up
//!   from ListBuckets and bucket lookups;
//! - with upstream's failures as the front's domain errors, by the HTTP status upstream
//!   answered with ([`tier_error`]), never by their text;
//! - with why the drain is not emptying a tenant's buffer (its last failure), for the front's
//!   quota refusal;
//! - with upstream's bodies held to the length its answer declared ([`exactly`]): the gateway
//!   verifies every chunk it sends and breaks its connection on a corrupt one (issue #30), and
//!   a body that ends early or runs long is an error here, so the front breaks its client's
//!   connection too and never ends a 200 cleanly with short or wrong bytes.

use std::collections::HashSet;
use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt as _;
use futures::stream::BoxStream;
use object_store::{Attribute, Attributes, GetOptions, GetRange, ObjectMeta};
use s3s::dto;
use sluice_meta::{MetaError, ObjectRecord};
use sluice_s3::blob::ReadStream;
use sluice_s3::error::{ApiError, ApiResult, TierError};
use sluice_s3::{Tier, TierBucket, TierRead};

use crate::drain::Drain;
use crate::escrow::SharedQuota;
use crate::journal::Journal;
use crate::upstream::{Pool, Upstream, UpstreamError};

/// Upstream behind the node's front end (see the module doc).
pub struct SharedTier {
    journal: Arc<Journal>,
    upstream: Arc<Pool<Upstream>>,
    drain: Arc<Drain>,
    /// The shared-tier quota this node holds before it acknowledges (see [`crate::escrow`]).
    quota: Option<Arc<SharedQuota>>,
}

/// The one translation of an upstream failure into the front's terms, by the HTTP status
/// upstream answered with; `absent` is what a 404 means for the call (`NoSuchKey` for an
/// object, `NoSuchBucket` for a listing).
fn tier_error(e: UpstreamError, absent: ApiError) -> ApiError {
    match e {
        UpstreamError::NotFound => absent,
        UpstreamError::RangeNotSatisfiable => ApiError::InvalidRange,
        UpstreamError::SlowDown(m) => TierError::SlowDown(m).into(),
        UpstreamError::Unavailable(m) => TierError::Unavailable(m).into(),
        UpstreamError::Refused { status, message } => TierError::Refused { status, message }.into(),
    }
}

/// An upstream object's record as the front keeps records: the ETag without its quotes, the
/// representation headers by lower-case name, the user metadata; no segments (its bytes are
/// upstream).
fn record(meta: &ObjectMeta, attributes: &Attributes) -> ObjectRecord {
    let mut rec = ObjectRecord {
        size: meta.size,
        etag: meta
            .e_tag
            .as_deref()
            .unwrap_or_default()
            .trim_matches('"')
            .to_owned(),
        last_modified_ms: meta.last_modified.timestamp_millis(),
        ..ObjectRecord::default()
    };
    for (k, v) in attributes {
        let v = v.as_ref().to_owned();
        let header = match k {
            Attribute::ContentType => {
                rec.content_type = Some(v);
                continue;
            }
            Attribute::Metadata(name) => {
                rec.metadata.insert(name.to_string(), v);
                continue;
            }
            Attribute::CacheControl => "cache-control",
            Attribute::ContentDisposition => "content-disposition",
            Attribute::ContentEncoding => "content-encoding",
            Attribute::ContentLanguage => "content-language",
            _ => continue,
        };
        rec.headers.insert(header.to_owned(), v);
    }
    rec
}

/// An S3 range as `object_store` asks for it.
fn get_range(range: dto::Range) -> GetRange {
    match range {
        dto::Range::Int {
            first,
            last: Some(last),
        } => GetRange::Bounded(first..last.saturating_add(1)),
        dto::Range::Int { first, last: None } => GetRange::Offset(first),
        dto::Range::Suffix { length } => GetRange::Suffix(length),
    }
}

/// Upstream's objects as this node sees them: those after `after`, less the keys whose
/// deletion here has not reached upstream.
fn visible(
    listed: Vec<ObjectMeta>,
    deleted: &HashSet<String>,
    after: Option<&str>,
) -> Vec<(String, ObjectRecord)> {
    listed
        .into_iter()
        .map(|m| (m.location.to_string(), m))
        .filter(|(key, _)| after.is_none_or(|a| key.as_str() > a) && !deleted.contains(key))
        .map(|(key, m)| {
            let rec = record(&m, &Attributes::new());
            (key, rec)
        })
        .collect()
}

/// Upstream's buckets less those whose deletion here has not reached upstream.
fn buckets_seen(
    upstream: Vec<crate::upstream::UpstreamBucket>,
    deleting: &HashSet<String>,
) -> Vec<TierBucket> {
    upstream
        .into_iter()
        .filter(|b| !deleting.contains(&b.name))
        .map(|b| TierBucket {
            created: b
                .creation_date
                .as_deref()
                .and_then(|d| dto::Timestamp::parse(dto::TimestampFormat::DateTime, d).ok()),
            name: b.name,
        })
        .collect()
}

/// `body`, failing unless it holds exactly `len` bytes: an error in place of its end when it
/// ends short, and in place of the chunk that takes it past `len` (see the module doc).
fn exactly(
    body: BoxStream<'static, object_store::Result<Bytes>>,
    len: u64,
) -> BoxStream<'static, object_store::Result<Bytes>> {
    let wrong = move |seen: u64, what: &str| object_store::Error::Generic {
        store: "sluice",
        source: format!(
            "the shared tier's body {what}: {seen} bytes of the {len} its answer declared"
        )
        .into(),
    };
    futures::stream::unfold(Some((body, 0u64)), move |state| async move {
        let (mut body, seen) = state?;
        match body.next().await {
            Some(Ok(chunk)) => {
                let seen = seen + chunk.len() as u64;
                if seen > len {
                    return Some((Err(wrong(seen, "ran long")), None));
                }
                Some((Ok(chunk), Some((body, seen))))
            }
            Some(Err(e)) => Some((Err(e), None)),
            None if seen == len => None,
            None => Some((Err(wrong(seen, "ended early")), None)),
        }
    })
    .boxed()
}

impl SharedTier {
    pub fn new(journal: Arc<Journal>, upstream: Arc<Pool<Upstream>>, drain: Arc<Drain>) -> Self {
        Self {
            journal,
            upstream,
            drain,
            quota: None,
        }
    }

    /// Writes are acknowledged only within the shared-tier quota `quota` holds.
    #[must_use]
    pub fn with_quota(mut self, quota: Arc<SharedQuota>) -> Self {
        self.quota = Some(quota);
        self
    }

    /// Runs a (blocking) journal read on the blocking pool.
    async fn journal<T, F>(&self, f: F) -> ApiResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Journal) -> Result<T, MetaError> + Send + 'static,
    {
        let j = Arc::clone(&self.journal);
        tokio::task::spawn_blocking(move || f(&j))
            .await
            .map_err(|e| ApiError::Internal(format!("journal task: {e}")))?
            .map_err(ApiError::from)
    }

    /// The object from upstream, or only its record (`head`), unless it was deleted here.
    async fn fetch(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
        range: Option<dto::Range>,
        head: bool,
    ) -> ApiResult<object_store::GetResult> {
        let (t, b, k) = (tenant.to_owned(), bucket.to_owned(), key.to_owned());
        if self.journal(move |j| j.pending_delete(&t, &b, &k)).await? {
            return Err(ApiError::NoSuchKey);
        }
        let options = GetOptions {
            range: range.map(get_range),
            head,
            ..GetOptions::default()
        };
        self.upstream
            .get(tenant, bucket, key, options)
            .await
            .map_err(|e| tier_error(e, ApiError::NoSuchKey))
    }
}

#[async_trait::async_trait]
impl Tier for SharedTier {
    async fn head(&self, tenant: &str, bucket: &str, key: &str) -> ApiResult<ObjectRecord> {
        let got = self.fetch(tenant, bucket, key, None, true).await?;
        Ok(record(&got.meta, &got.attributes))
    }

    async fn get(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
        range: Option<dto::Range>,
    ) -> ApiResult<TierRead> {
        let got = self.fetch(tenant, bucket, key, range, false).await?;
        let record = record(&got.meta, &got.attributes);
        let range: Range<u64> = got.range.clone();
        let len = range.end - range.start;
        Ok(TierRead {
            record,
            range,
            body: ReadStream::new(exactly(got.into_stream(), len)),
        })
    }

    async fn list(
        &self,
        tenant: &str,
        bucket: &str,
        prefix: &str,
        after: Option<&str>,
    ) -> ApiResult<Vec<(String, ObjectRecord)>> {
        let (t, b, p) = (tenant.to_owned(), bucket.to_owned(), prefix.to_owned());
        let (listed, deleted) = tokio::join!(
            self.upstream.list(tenant, bucket, prefix),
            self.journal(move |j| j.pending_deletes_under(&t, &b, &p)),
        );
        let listed = listed.map_err(|e| tier_error(e, MetaError::NoSuchBucket.into()))?;
        let deleted: HashSet<String> = deleted?.into_iter().collect();
        Ok(visible(listed, &deleted, after))
    }

    async fn buckets(&self, tenant: &str) -> ApiResult<Vec<TierBucket>> {
        let t = tenant.to_owned();
        let (listed, deleting) = tokio::join!(
            self.upstream.list_buckets(tenant),
            self.journal(move |j| j.pending_bucket_deletes(&t)),
        );
        let no_listing = || TierError::Unavailable("ListBuckets answered 404".into()).into();
        let listed = listed.map_err(|e| tier_error(e, no_listing()))?;
        Ok(buckets_seen(listed, &deleting?))
    }

    async fn has_bucket(&self, tenant: &str, bucket: &str) -> ApiResult<bool> {
        let t = tenant.to_owned();
        let (exists, deleting) = tokio::join!(
            self.upstream.bucket_exists(tenant, bucket),
            self.journal(move |j| j.pending_bucket_deletes(&t)),
        );
        let exists = exists.map_err(|e| tier_error(e, MetaError::NoSuchBucket.into()))?;
        Ok(exists && !deleting?.contains(bucket))
    }

    async fn admit_write(&self, tenant: &str, bytes: u64) -> ApiResult<Option<sluice_meta::OnEnd>> {
        match &self.quota {
            Some(q) => q.admit(tenant, bytes).await,
            None => Ok(None),
        }
    }

    fn stalled(&self, tenant: &str) -> Option<String> {
        self.drain.with_tenants(|t| {
            t.get(tenant)
                .and_then(|t| t.last_error.as_ref())
                .map(|e| e.message.clone())
        })
    }
}

#[cfg(test)]
mod tests;
