//! The tier behind a front end: the store that a node's front buffers for (the node agent's
//! shared tier), and the merge of the two.
//!
//! A [`Front`](super::Front) given a tier serves the union of this store and the tier, this
//! store first (its copy is the newest: a local object is either not drained yet or identical
//! upstream):
//! - a GET, HEAD or CopyObject whose object is not here (`NoSuchKey`, or `NoSuchBucket` for a
//!   bucket only the tier has) is answered from the tier;
//! - a listing merges this store's catalog page with the tier's objects (`merge`): a name on
//!   both sides is listed once, as it is here. The S3 listings are then built from the merged
//!   entries by the same code as without a tier, so both processes answer alike;
//! - ListBuckets lists both sides, a bucket on both once;
//! - an operation that needs a bucket that only the tier has (the writes, HeadBucket,
//!   GetBucketLocation, GetBucketVersioning) first creates it here, so the write is absorbed;
//! - a quota refusal is the local buffer's (`ApiError::LocalQuotaExceeded`), with why the
//!   buffer is not emptying if the tier is not taking the tenant's data.
//!
//! A tier answers as this store sees it: an object deleted here whose deletion has not reached
//! the tier yet is absent from its answers, and so is such a bucket from ListBuckets and bucket
//! lookups. It speaks domain errors: absence is `NoSuchKey` (objects) or `NoSuchBucket`
//! (listings), an unsatisfiable range `InvalidRange`, and every other failure an
//! `ApiError::Tier`, classified by the tier's HTTP status.
//!
//! When the tier fails, a listing of a bucket this store has lists what is here, ListBuckets
//! lists this store's buckets and a bucket lookup finds none upstream, each reported as an
//! upstream failure (the request's log line is at warn); a read that needs the tier fails
//! with its error.

use std::cmp::Ordering;
use std::ops::Range;

use s3s::dto;
use sluice_meta::{Entry, ListPage, ListQuery, ObjectRecord};

use crate::blob::ReadStream;
use crate::error::ApiResult;

/// An object read from the tier: its record (size, ETag without quotes, last modified,
/// representation headers and metadata; no segments), the bytes served and their stream.
pub struct TierRead {
    pub record: ObjectRecord,
    /// The bytes of the object that `body` holds.
    pub range: Range<u64>,
    pub body: ReadStream,
}

/// A bucket of the tier, for ListBuckets.
#[derive(Debug, Clone, PartialEq)]
pub struct TierBucket {
    pub name: String,
    pub created: Option<dto::Timestamp>,
}

/// The store behind this one, as this store sees it (see the module doc).
#[async_trait::async_trait]
pub trait Tier: Send + Sync + 'static {
    /// The record of the object at `key`, or `NoSuchKey`.
    async fn head(&self, tenant: &str, bucket: &str, key: &str) -> ApiResult<ObjectRecord>;

    /// The object at `key`, or the bytes `range` of it: `NoSuchKey`, or `InvalidRange`.
    async fn get(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
        range: Option<dto::Range>,
    ) -> ApiResult<TierRead>;

    /// Every object of the bucket whose key starts with `prefix` and sorts after `after`, in
    /// any order (objects only: the front rolls up common prefixes); `NoSuchBucket` if the
    /// tier has no such bucket.
    async fn list(
        &self,
        tenant: &str,
        bucket: &str,
        prefix: &str,
        after: Option<&str>,
    ) -> ApiResult<Vec<(String, ObjectRecord)>>;

    /// The tenant's buckets.
    async fn buckets(&self, tenant: &str) -> ApiResult<Vec<TierBucket>>;

    /// Whether the tenant has this bucket on the tier.
    async fn has_bucket(&self, tenant: &str, bucket: &str) -> ApiResult<bool>;

    /// Why this store's bytes for the tenant are not reaching the tier, if the last attempt
    /// failed: the refusal quoted when the tenant's local buffer is full.
    fn stalled(&self, tenant: &str) -> Option<String>;

    /// Whether this store may acknowledge a write of `bytes` more for the tenant: the tier's
    /// quota held for it (the node agent's shared-tier escrow), or
    /// [`ApiError::SharedQuotaExceeded`]. Asked before the body is read when its length is
    /// declared, else once it is written, and always before the commit that acknowledges it.
    /// What it returns is attached to the write's reservation, told whether the write
    /// committed ([`sluice_meta::Reservation::on_end`]).
    async fn admit_write(&self, tenant: &str, bytes: u64) -> ApiResult<Option<sluice_meta::OnEnd>> {
        let _ = (tenant, bytes);
        Ok(None)
    }
}

/// The tier's objects as listing entries for `q` (its `max` aside): sorted, keys at or before
/// `q.after` dropped, keys rolled up at the delimiter into common prefixes, each once and only
/// if after `q.after` (a common prefix returned on an earlier page covers every key under it).
/// The same rule as the catalog's own listing.
pub(super) fn roll_up(mut objects: Vec<(String, ObjectRecord)>, q: &ListQuery<'_>) -> Vec<Entry> {
    objects.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    let delimiter = q.delimiter.filter(|d| !d.is_empty());
    let after = |name: &str| q.after.is_none_or(|a| name > a);
    let mut out: Vec<Entry> = Vec::new();
    for (key, rec) in objects {
        let Some(rest) = key.strip_prefix(q.prefix) else {
            continue;
        };
        if !after(&key) {
            continue;
        }
        let common = delimiter.and_then(|d| rest.find(d).map(|i| q.prefix.len() + i + d.len()));
        match common {
            Some(end) => {
                let common = &key[..end];
                // Keys under one prefix are adjacent in key order: one entry for them all.
                if after(common) && out.last().is_none_or(|e| e.name() != common) {
                    out.push(Entry::Prefix(common.to_owned()));
                }
            }
            None => out.push(Entry::Object(key, rec)),
        }
    }
    out
}

/// One page of the union of this store's catalog page and the tier's entries (from
/// [`roll_up`] of the same query), in name order, at most `max` entries; a name on both sides
/// once, as it is here.
///
/// Exact because the catalog's page is: it is truncated only when it holds `max` entries, all
/// at or before its last, so the union's first `max` entries are at or before it too.
pub(super) fn merge(local: ListPage, tier: Vec<Entry>, max: usize) -> ListPage {
    let mut here = local.entries.into_iter().peekable();
    let mut there = tier.into_iter().peekable();
    let mut entries = Vec::new();
    loop {
        let next = match (here.peek(), there.peek()) {
            (None, None) => break,
            (Some(_), None) => here.next(),
            (None, Some(_)) => there.next(),
            (Some(h), Some(t)) => match h.name().cmp(t.name()) {
                Ordering::Less => here.next(),
                Ordering::Greater => there.next(),
                Ordering::Equal => {
                    there.next();
                    here.next()
                }
            },
        };
        let Some(next) = next else { break };
        if entries.len() == max {
            return ListPage {
                entries,
                truncated: true,
            };
        }
        entries.push(next);
    }
    ListPage {
        entries,
        truncated: local.truncated,
    }
}

#[cfg(test)]
mod tests;
