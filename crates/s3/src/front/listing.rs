//! Bucket listings: ListObjects (v1), ListObjectsV2 and ListObjectVersions (unversioned
//! buckets: every current object, version "null"). All three page through the catalog in key
//! order with the same resume rule: strictly after the last name returned, where a returned
//! common prefix also covers every key under it. With a tier behind the front, the page is the
//! merge of the catalog's and the tier's (`tier::merge`); the rest is the same.
//!
//! The cases S3 defines at the edges: an empty delimiter is no delimiter; a prefix ending in
//! the delimiter lists the keys directly under it and rolls deeper ones up; `max-keys=0` is an
//! empty page, not truncated; `encoding-type=url` percent-encodes every byte of keys,
//! prefixes, delimiter and markers but the unreserved characters and `/` (a space as `%20`,
//! `+` as `%2B`, which every SDK's decoder, `+`-as-space ones included, reads back exactly).

use s3s::dto;
use sluice_meta::{Entry, ListPage, ListQuery, MetaError};

use super::buckets::owner;
use super::tier::{merge, roll_up};
use super::{Front, etag, timestamp};
use crate::error::{ApiError, ApiResult};

const MAX_KEYS: i32 = 1000;

fn max_keys(requested: Option<i32>) -> ApiResult<usize> {
    match requested {
        None => Ok(MAX_KEYS.unsigned_abs() as usize),
        Some(n) if n < 0 => Err(ApiError::InvalidArgument(
            "max-keys must not be negative".into(),
        )),
        Some(n) => Ok(n.min(MAX_KEYS).unsigned_abs() as usize),
    }
}

/// Whether a page has more after it. A page of `max-keys=0` is empty and not truncated,
/// whatever the bucket holds, as S3 answers it (Ceph's s3-tests, written against AWS, check
/// `IsTruncated` false): it asks for nothing, so nothing is left over.
fn truncated(page: &ListPage, max: usize) -> bool {
    page.truncated && max > 0
}

/// Keys and prefixes as the client asked them encoded (`encoding-type=url`).
struct Encoder(bool);

impl Encoder {
    fn new(encoding: Option<&dto::EncodingType>) -> ApiResult<Self> {
        match encoding.map(dto::EncodingType::as_str) {
            None => Ok(Self(false)),
            Some(e) if e.eq_ignore_ascii_case(dto::EncodingType::URL) => Ok(Self(true)),
            Some(e) => Err(ApiError::InvalidArgument(format!(
                "invalid encoding type {e:?}"
            ))),
        }
    }

    fn apply(&self, s: String) -> String {
        if !self.0 {
            return s;
        }
        let mut out = String::with_capacity(s.len());
        for b in s.bytes() {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b'/') {
                out.push(b as char);
            } else {
                const DIGITS: &[u8; 16] = b"0123456789ABCDEF";
                out.push('%');
                out.push(DIGITS[usize::from(b >> 4)] as char);
                out.push(DIGITS[usize::from(b & 0xf)] as char);
            }
        }
        out
    }

    fn apply_opt(&self, s: Option<String>) -> Option<String> {
        s.map(|s| self.apply(s))
    }

    fn prefixes(&self, prefixes: Vec<String>) -> Vec<dto::CommonPrefix> {
        prefixes
            .into_iter()
            .map(|p| dto::CommonPrefix {
                prefix: Some(self.apply(p)),
            })
            .collect()
    }

    fn encoding_type(&self) -> Option<dto::EncodingType> {
        self.0
            .then(|| dto::EncodingType::from_static(dto::EncodingType::URL))
    }
}

fn encode_token(name: &str) -> String {
    crate::blob::hex(name.as_bytes())
}

fn decode_token(token: &str) -> ApiResult<String> {
    let bad = || ApiError::InvalidArgument("the continuation token is not valid".into());
    if !token.len().is_multiple_of(2) {
        return Err(bad());
    }
    let bytes = (0..token.len())
        .step_by(2)
        .map(|i| {
            token
                .get(i..i + 2)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        })
        .collect::<Option<Vec<u8>>>()
        .ok_or_else(bad)?;
    String::from_utf8(bytes).map_err(|_| bad())
}

struct Split {
    objects: Vec<(String, sluice_meta::ObjectRecord)>,
    prefixes: Vec<String>,
    last: Option<String>,
}

fn split(page: ListPage) -> Split {
    let last = page.entries.last().map(|e| e.name().to_owned());
    let mut objects = Vec::new();
    let mut prefixes = Vec::new();
    for e in page.entries {
        match e {
            Entry::Object(k, r) => objects.push((k, r)),
            Entry::Prefix(p) => prefixes.push(p),
        }
    }
    Split {
        objects,
        prefixes,
        last,
    }
}

impl Front {
    /// One page of the bucket (see [`Front::merged_page`]), as a confidential tenant sees it
    /// if it is one.
    async fn page(
        &self,
        tenant: &str,
        bucket: &str,
        prefix: Option<&str>,
        delimiter: Option<&str>,
        after: Option<String>,
        max: usize,
    ) -> ApiResult<ListPage> {
        let page = self
            .merged_page(tenant, bucket, prefix, delimiter, after, max)
            .await?;
        self.sealed_page(tenant, bucket, page).await
    }

    /// One page of the bucket: the catalog's, or with a tier its merge with the tier's
    /// objects. A bucket either side has is listed; when the tier fails, a bucket this store
    /// has is listed as it is here.
    async fn merged_page(
        &self,
        tenant: &str,
        bucket: &str,
        prefix: Option<&str>,
        delimiter: Option<&str>,
        after: Option<String>,
        max: usize,
    ) -> ApiResult<ListPage> {
        let prefix = prefix.unwrap_or("");
        let (t, b, p) = (tenant.to_owned(), bucket.to_owned(), prefix.to_owned());
        let (d, a) = (delimiter.map(str::to_owned), after.clone());
        let local = self.meta(move |c| {
            c.list_objects(
                &t,
                &b,
                &ListQuery {
                    prefix: &p,
                    delimiter: d.as_deref(),
                    after: a.as_deref(),
                    max,
                },
            )
        });
        let Some(tier) = &self.inner.tier else {
            return local.await;
        };
        let remote = tier.list(tenant, bucket, prefix, after.as_deref());
        let (local, remote) = futures::future::join(local, remote).await;
        let local = match local {
            Ok(page) => Some(page),
            Err(ApiError::Meta(MetaError::NoSuchBucket)) => None,
            Err(e) => return Err(e),
        };
        let remote = match (remote, &local) {
            (Ok(objects), _) => objects,
            (Err(ApiError::Meta(MetaError::NoSuchBucket)), Some(_)) => Vec::new(),
            (Err(ApiError::Tier(e)), Some(_)) => {
                sluice_serve::request::upstream_failure(format_args!(
                    "listing this node's objects only: {e}"
                ));
                Vec::new()
            }
            (Err(e), _) => return Err(e),
        };
        let q = ListQuery {
            prefix,
            delimiter,
            after: after.as_deref(),
            max,
        };
        let local = local.unwrap_or(ListPage {
            entries: Vec::new(),
            truncated: false,
        });
        Ok(merge(local, roll_up(remote, &q), max))
    }

    fn objects(
        enc: &Encoder,
        tenant: &str,
        objects: Vec<(String, sluice_meta::ObjectRecord)>,
        fetch_owner: bool,
    ) -> Vec<dto::Object> {
        objects
            .into_iter()
            .map(|(k, r)| dto::Object {
                key: Some(enc.apply(k)),
                size: i64::try_from(r.size).ok(),
                e_tag: Some(etag(&r.etag)),
                last_modified: Some(timestamp(r.last_modified_ms)),
                storage_class: Some(dto::ObjectStorageClass::from_static(
                    dto::ObjectStorageClass::STANDARD,
                )),
                owner: fetch_owner.then(|| owner(tenant)),
                ..Default::default()
            })
            .collect()
    }

    pub(super) async fn list_objects_v2_op(
        &self,
        tenant: &str,
        input: dto::ListObjectsV2Input,
    ) -> ApiResult<dto::ListObjectsV2Output> {
        let enc = Encoder::new(input.encoding_type.as_ref())?;
        let max = max_keys(input.max_keys)?;
        let token = input
            .continuation_token
            .as_deref()
            .map(decode_token)
            .transpose()?;
        let after = match (token, input.start_after.clone()) {
            (Some(t), Some(s)) => Some(t.max(s)),
            (t, s) => t.or(s),
        };
        let page = self
            .page(
                tenant,
                &input.bucket,
                input.prefix.as_deref(),
                input.delimiter.as_deref(),
                after,
                max,
            )
            .await?;
        let truncated = truncated(&page, max);
        let s = split(page);
        let key_count = s.objects.len() + s.prefixes.len();
        Ok(dto::ListObjectsV2Output {
            name: Some(input.bucket),
            prefix: Some(enc.apply(input.prefix.unwrap_or_default())),
            delimiter: enc.apply_opt(input.delimiter),
            start_after: enc.apply_opt(input.start_after),
            max_keys: i32::try_from(max).ok(),
            key_count: i32::try_from(key_count).ok(),
            is_truncated: Some(truncated),
            continuation_token: input.continuation_token,
            next_continuation_token: if truncated {
                s.last.as_deref().map(encode_token)
            } else {
                None
            },
            common_prefixes: Some(enc.prefixes(s.prefixes)),
            contents: Some(Self::objects(
                &enc,
                tenant,
                s.objects,
                input.fetch_owner.unwrap_or(false),
            )),
            encoding_type: enc.encoding_type(),
            ..Default::default()
        })
    }

    pub(super) async fn list_objects_op(
        &self,
        tenant: &str,
        input: dto::ListObjectsInput,
    ) -> ApiResult<dto::ListObjectsOutput> {
        let enc = Encoder::new(input.encoding_type.as_ref())?;
        let max = max_keys(input.max_keys)?;
        let page = self
            .page(
                tenant,
                &input.bucket,
                input.prefix.as_deref(),
                input.delimiter.as_deref(),
                input.marker.clone().filter(|m| !m.is_empty()),
                max,
            )
            .await?;
        let truncated = truncated(&page, max);
        let s = split(page);
        Ok(dto::ListObjectsOutput {
            name: Some(input.bucket),
            prefix: Some(enc.apply(input.prefix.unwrap_or_default())),
            delimiter: enc.apply_opt(input.delimiter),
            marker: Some(enc.apply(input.marker.unwrap_or_default())),
            max_keys: i32::try_from(max).ok(),
            is_truncated: Some(truncated),
            next_marker: if truncated {
                enc.apply_opt(s.last)
            } else {
                None
            },
            common_prefixes: Some(enc.prefixes(s.prefixes)),
            contents: Some(Self::objects(&enc, tenant, s.objects, true)),
            encoding_type: enc.encoding_type(),
            ..Default::default()
        })
    }

    pub(super) async fn list_object_versions_op(
        &self,
        tenant: &str,
        input: dto::ListObjectVersionsInput,
    ) -> ApiResult<dto::ListObjectVersionsOutput> {
        let enc = Encoder::new(input.encoding_type.as_ref())?;
        let max = max_keys(input.max_keys)?;
        // Each key has exactly one version ("null"), so the key marker alone resumes.
        let page = self
            .page(
                tenant,
                &input.bucket,
                input.prefix.as_deref(),
                input.delimiter.as_deref(),
                input.key_marker.clone().filter(|m| !m.is_empty()),
                max,
            )
            .await?;
        let truncated = truncated(&page, max);
        let s = split(page);
        let versions = s
            .objects
            .into_iter()
            .map(|(k, r)| dto::ObjectVersion {
                key: Some(enc.apply(k)),
                version_id: Some("null".into()),
                is_latest: Some(true),
                size: i64::try_from(r.size).ok(),
                e_tag: Some(etag(&r.etag)),
                last_modified: Some(timestamp(r.last_modified_ms)),
                owner: Some(owner(tenant)),
                storage_class: Some(dto::ObjectVersionStorageClass::from_static(
                    dto::ObjectVersionStorageClass::STANDARD,
                )),
                ..Default::default()
            })
            .collect();
        Ok(dto::ListObjectVersionsOutput {
            name: Some(input.bucket),
            prefix: Some(enc.apply(input.prefix.unwrap_or_default())),
            delimiter: enc.apply_opt(input.delimiter),
            key_marker: Some(enc.apply(input.key_marker.unwrap_or_default())),
            version_id_marker: input.version_id_marker,
            max_keys: i32::try_from(max).ok(),
            is_truncated: Some(truncated),
            next_key_marker: if truncated {
                enc.apply_opt(s.last)
            } else {
                None
            },
            next_version_id_marker: truncated.then(|| "null".to_owned()),
            common_prefixes: Some(enc.prefixes(s.prefixes)),
            versions: Some(versions),
            encoding_type: enc.encoding_type(),
            ..Default::default()
        })
    }
}
