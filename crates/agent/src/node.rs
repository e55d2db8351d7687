//! The agent's S3 service: the gateway's [`Front`] over the node's own catalog and disk,
//! decorated so that the node and the shared tier read as one store.
//!
//! Writes go to [`Front`] unchanged (its catalog commit appends the journal entry, see
//! [`crate::journal`]); when a bucket exists upstream but not yet on this node it is created
//! locally first. Reads prefer the local copy (it is the newest: a local object is either
//! not yet drained or identical upstream) and fall back to upstream, except for keys whose
//! newest change is a delete still on its way up. Listings merge both sides the same way, and
//! so does ListBuckets (a bucket whose deletion here is still on its way up is gone).
//! Every other operation is forwarded as is.

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::sync::Arc;

use object_store::{Attribute, GetOptions, GetRange};
use s3s::dto::{self, StreamingBlob, Timestamp};
use s3s::{S3, S3Error, S3ErrorCode, S3Request, S3Response, S3Result, s3_error};
use sluice_meta::{Entry, ListQuery, MetaError};
use sluice_s3::blob::ReadStream;
use sluice_s3::{Caller, Front};

use crate::drain::Drain;
use crate::journal::Journal;
use crate::upstream::{Upstream, UpstreamBucket, UpstreamError};

/// The node agent's S3 implementation.
#[derive(Clone)]
pub struct NodeS3 {
    front: Front,
    journal: Arc<Journal>,
    upstream: Arc<Upstream>,
    drain: Arc<Drain>,
}

fn caller<T>(req: &S3Request<T>) -> S3Result<Arc<str>> {
    req.extensions
        .get::<Caller>()
        .map(|c| Arc::clone(&c.0))
        .ok_or_else(|| s3_error!(AccessDenied))
}

fn is(e: &S3Error, code: &S3ErrorCode) -> bool {
    e.code() == code
}

fn upstream_err(e: &UpstreamError) -> S3Error {
    match e {
        UpstreamError::NotFound => s3_error!(NoSuchKey),
        other => {
            tracing::warn!(error = %other, "upstream read failed");
            let mut err = S3Error::with_message(
                S3ErrorCode::ServiceUnavailable,
                format!("the shared tier is unreachable and this node has no copy: {other}"),
            );
            err.set_status_code(http::StatusCode::SERVICE_UNAVAILABLE);
            err
        }
    }
}

fn internal(e: impl std::fmt::Display) -> S3Error {
    tracing::error!(error = %e, "agent internal error");
    s3_error!(InternalError)
}

fn ts_ms(ms: i64) -> Timestamp {
    let ms = u64::try_from(ms).unwrap_or(0);
    Timestamp::from(std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms))
}

fn strong(etag: &str) -> dto::ETag {
    dto::ETag::Strong(etag.trim_matches('"').to_owned())
}

/// One object of a merged listing.
struct Listed {
    size: u64,
    etag: String,
    last_modified_ms: i64,
}

struct Merged {
    objects: Vec<(String, Listed)>,
    prefixes: Vec<String>,
    truncated: bool,
    last: Option<String>,
}

fn hex(s: &str) -> String {
    sluice_s3::blob::hex(s.as_bytes())
}

fn unhex(token: &str) -> S3Result<String> {
    let bad = || s3_error!(InvalidArgument, "the continuation token is not valid");
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

fn url_encode(on: bool, s: String) -> String {
    if !on {
        return s;
    }
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b'/') {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

fn max_keys(n: Option<i32>) -> S3Result<usize> {
    match n {
        None => Ok(1000),
        Some(n) if n < 0 => Err(s3_error!(InvalidArgument, "max-keys must not be negative")),
        Some(n) => Ok(n.min(1000).unsigned_abs() as usize),
    }
}

fn url_encoding(e: Option<&dto::EncodingType>) -> S3Result<bool> {
    match e.map(dto::EncodingType::as_str) {
        None => Ok(false),
        Some(v) if v.eq_ignore_ascii_case(dto::EncodingType::URL) => Ok(true),
        Some(v) => Err(s3_error!(InvalidArgument, "invalid encoding type {v:?}")),
    }
}

impl NodeS3 {
    pub fn new(
        front: Front,
        journal: Arc<Journal>,
        upstream: Arc<Upstream>,
        drain: Arc<Drain>,
    ) -> Self {
        Self {
            front,
            journal,
            upstream,
            drain,
        }
    }

    /// A full local buffer says why: the tenant's backlog, and upstream's state.
    fn explain<T>(&self, tenant: &str, r: S3Result<T>) -> S3Result<T> {
        let Err(e) = r else {
            return r;
        };
        if e.code().as_str() != "QuotaExceeded" {
            return Err(e);
        }
        let upstream = self.drain.with_tenants(|t| {
            t.get(tenant)
                .and_then(|t| t.last_error.as_ref())
                .map(|e| e.message.clone())
        });
        let why = match upstream {
            Some(err) => format!("the shared tier is not taking this tenant's data ({err})"),
            None => "the drain to the shared tier has not caught up".to_owned(),
        };
        let mut err = S3Error::with_message(
            S3ErrorCode::Custom("QuotaExceeded".into()),
            format!(
                "this node's local buffer for the tenant is full: {why}; {}",
                e.message().unwrap_or("")
            ),
        );
        err.set_status_code(http::StatusCode::FORBIDDEN);
        Err(err)
    }

    async fn blocking<T, F>(&self, f: F) -> S3Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Journal) -> Result<T, MetaError> + Send + 'static,
    {
        let j = Arc::clone(&self.journal);
        tokio::task::spawn_blocking(move || f(&j))
            .await
            .map_err(internal)?
            .map_err(|e| sluice_s3::error::to_s3(sluice_s3::error::ApiError::Meta(e)))
    }

    /// Creates locally a bucket that exists upstream only (made elsewhere, or before this
    /// node's disk was replaced), so that writes to it can be absorbed here.
    async fn ensure_bucket(&self, tenant: &str, bucket: &str) -> S3Result<()> {
        let (t, b) = (tenant.to_owned(), bucket.to_owned());
        if self
            .blocking(move |j| j.catalog().bucket_exists(&t, &b))
            .await?
        {
            return Ok(());
        }
        if let Ok(true) = self.upstream.bucket_exists(tenant, bucket).await {
            let (t, b) = (tenant.to_owned(), bucket.to_owned());
            let now = now_ms();
            match self
                .blocking(move |j| j.catalog().create_bucket(&t, &b, now))
                .await
            {
                Ok(()) => {}
                Err(e) if is(&e, &S3ErrorCode::BucketAlreadyOwnedByYou) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    async fn deleted_here(&self, tenant: &str, bucket: &str, key: &str) -> S3Result<bool> {
        let (t, b, k) = (tenant.to_owned(), bucket.to_owned(), key.to_owned());
        self.blocking(move |j| j.pending_delete(&t, &b, &k)).await
    }

    /// GET (or, with `head`, HEAD) from upstream, as a GetObject answer.
    async fn get_upstream(
        &self,
        tenant: &str,
        input: &dto::GetObjectInput,
        head: bool,
    ) -> S3Result<dto::GetObjectOutput> {
        if self.deleted_here(tenant, &input.bucket, &input.key).await? {
            return Err(s3_error!(NoSuchKey));
        }
        let range = input.range.map(|r| match r {
            dto::Range::Int {
                first,
                last: Some(last),
            } => GetRange::Bounded(first..last + 1),
            dto::Range::Int { first, last: None } => GetRange::Offset(first),
            dto::Range::Suffix { length } => GetRange::Suffix(length),
        });
        let options = GetOptions {
            range: range.clone(),
            head,
            ..GetOptions::default()
        };
        let got = match self
            .upstream
            .get(tenant, &input.bucket, &input.key, options)
            .await
        {
            Ok(g) => g,
            Err(UpstreamError::RangeNotSatisfiable) if range.is_some() => {
                return Err(s3_error!(InvalidRange));
            }
            Err(e) => return Err(upstream_err(&e)),
        };
        let meta = got.meta.clone();
        let r = got.range.clone();
        let attrs = got.attributes.clone();
        let body = (!head).then(|| StreamingBlob::wrap(ReadStream::new(got.into_stream())));
        let mut out = dto::GetObjectOutput {
            body,
            content_length: i64::try_from(r.end - r.start).ok(),
            content_range: range.map(|_| {
                format!(
                    "bytes {}-{}/{}",
                    r.start,
                    r.end.saturating_sub(1),
                    meta.size
                )
            }),
            accept_ranges: Some("bytes".into()),
            e_tag: meta.e_tag.as_deref().map(strong),
            last_modified: Some(ts_ms(meta.last_modified.timestamp_millis())),
            ..Default::default()
        };
        let mut metadata = dto::Metadata::default();
        for (k, v) in &attrs {
            let v = v.as_ref().to_owned();
            match k {
                Attribute::ContentType => out.content_type = Some(v),
                Attribute::CacheControl => out.cache_control = Some(v),
                Attribute::ContentDisposition => out.content_disposition = Some(v),
                Attribute::ContentEncoding => out.content_encoding = Some(v),
                Attribute::ContentLanguage => out.content_language = Some(v),
                Attribute::Metadata(name) => {
                    metadata.insert(name.to_string(), v);
                }
                _ => {}
            }
        }
        if !metadata.is_empty() {
            out.metadata = Some(metadata);
        }
        Ok(out)
    }

    /// CopyObject whose source is upstream only: its bytes come down and land here as a PUT
    /// of the destination (journalled and drained like any other write).
    async fn copy_from_upstream(
        &self,
        tenant: &str,
        req: S3Request<dto::CopyObjectInput>,
    ) -> S3Result<S3Response<dto::CopyObjectOutput>> {
        let dto::CopySource::Bucket { bucket, key, .. } = &req.input.copy_source else {
            return Err(s3_error!(NoSuchKey));
        };
        let source = dto::GetObjectInput {
            bucket: bucket.to_string(),
            key: key.to_string(),
            ..Default::default()
        };
        let got = self.get_upstream(tenant, &source, false).await?;
        let replace = req
            .input
            .metadata_directive
            .as_ref()
            .is_some_and(|d| d.as_str() == dto::MetadataDirective::REPLACE);
        let put = req.map_input(|c| {
            let (content_type, cache_control, disposition, encoding, language, metadata) =
                if replace {
                    (
                        c.content_type,
                        c.cache_control,
                        c.content_disposition,
                        c.content_encoding,
                        c.content_language,
                        c.metadata,
                    )
                } else {
                    (
                        got.content_type,
                        got.cache_control,
                        got.content_disposition,
                        got.content_encoding,
                        got.content_language,
                        got.metadata,
                    )
                };
            dto::PutObjectInput {
                bucket: c.bucket,
                key: c.key,
                body: got.body,
                content_length: got.content_length,
                content_type,
                cache_control,
                content_disposition: disposition,
                content_encoding: encoding,
                content_language: language,
                metadata,
                ..Default::default()
            }
        });
        let put = self.front.put_object(put).await;
        let put = self.explain(tenant, put)?;
        Ok(S3Response::new(dto::CopyObjectOutput {
            copy_object_result: Some(dto::CopyObjectResult {
                e_tag: put.output.e_tag,
                last_modified: Some(ts_ms(now_ms())),
                ..Default::default()
            }),
            ..Default::default()
        }))
    }

    /// One page of the union of the local and upstream listings.
    async fn merged(
        &self,
        tenant: &str,
        bucket: &str,
        prefix: &str,
        delimiter: Option<&str>,
        after: Option<&str>,
        max: usize,
    ) -> S3Result<Merged> {
        let (t, b, p) = (tenant.to_owned(), bucket.to_owned(), prefix.to_owned());
        let local = self
            .blocking(move |j| {
                let page = j.catalog().list_objects(
                    &t,
                    &b,
                    &ListQuery {
                        prefix: &p,
                        delimiter: None,
                        after: None,
                        max: usize::MAX,
                    },
                );
                let deleted = j.pending_deletes_under(&t, &b, &p)?;
                Ok((page, deleted))
            })
            .await?;
        let (page, deleted) = local;
        let mut all: BTreeMap<String, Listed> = BTreeMap::new();
        let local_bucket = match page {
            Ok(_) | Err(MetaError::NoSuchBucket) => page.is_ok(),
            Err(e) => return Err(sluice_s3::error::to_s3(sluice_s3::error::ApiError::Meta(e))),
        };
        match self.upstream.list(tenant, bucket, prefix).await {
            Ok(metas) => {
                for m in metas {
                    all.insert(
                        m.location.to_string(),
                        Listed {
                            size: m.size,
                            etag: m.e_tag.unwrap_or_default(),
                            last_modified_ms: m.last_modified.timestamp_millis(),
                        },
                    );
                }
            }
            Err(UpstreamError::NotFound) if local_bucket => {}
            Err(UpstreamError::NotFound) => return Err(s3_error!(NoSuchBucket)),
            Err(e) if local_bucket => {
                tracing::warn!(error = %e, tenant, bucket, "listing local objects only: upstream unavailable");
            }
            Err(e) => return Err(upstream_err(&e)),
        }
        for k in deleted {
            all.remove(&k);
        }
        if let Ok(page) = page {
            for e in page.entries {
                if let Entry::Object(k, r) = e {
                    all.insert(
                        k,
                        Listed {
                            size: r.size,
                            etag: r.etag,
                            last_modified_ms: r.last_modified_ms,
                        },
                    );
                }
            }
        }
        let delimiter = delimiter.filter(|d| !d.is_empty());
        let mut out = Merged {
            objects: Vec::new(),
            prefixes: Vec::new(),
            truncated: false,
            last: None,
        };
        let mut count = 0;
        for (key, listed) in all {
            if after.is_some_and(|a| key.as_str() <= a) {
                // A common prefix returned earlier also covers its keys (checked below).
                if delimiter.is_none() {
                    continue;
                }
            }
            let rolled = delimiter.and_then(|d| key[prefix.len()..].find(d).map(|i| (d, i)));
            let name = if let Some((d, i)) = rolled {
                let common = key[..prefix.len() + i + d.len()].to_owned();
                if after.is_some_and(|a| common.as_str() <= a)
                    || out.prefixes.last() == Some(&common)
                {
                    continue;
                }
                Entry::Prefix(common)
            } else {
                if after.is_some_and(|a| key.as_str() <= a) {
                    continue;
                }
                Entry::Object(key, sluice_meta::ObjectRecord::default())
            };
            if count == max {
                out.truncated = true;
                break;
            }
            count += 1;
            out.last = Some(name.name().to_owned());
            match name {
                Entry::Prefix(p) => out.prefixes.push(p),
                Entry::Object(k, _) => out.objects.push((k, listed)),
            }
        }
        Ok(out)
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn contents(
    objects: Vec<(String, Listed)>,
    enc: bool,
    owner: Option<&dto::Owner>,
) -> Vec<dto::Object> {
    objects
        .into_iter()
        .map(|(k, l)| dto::Object {
            key: Some(url_encode(enc, k)),
            size: i64::try_from(l.size).ok(),
            e_tag: Some(strong(&l.etag)),
            last_modified: Some(ts_ms(l.last_modified_ms)),
            storage_class: Some(dto::ObjectStorageClass::from_static(
                dto::ObjectStorageClass::STANDARD,
            )),
            owner: owner.cloned(),
            ..Default::default()
        })
        .collect()
}

/// Adds to this node's buckets the tenant's buckets upstream, except those whose deletion
/// here has not reached upstream yet; sorted by name, as S3 lists them.
fn merge_buckets(
    local: &mut Vec<dto::Bucket>,
    upstream: Vec<UpstreamBucket>,
    deleting: &HashSet<String>,
    region: &str,
) {
    let here: HashSet<String> = local.iter().filter_map(|b| b.name.clone()).collect();
    for b in upstream {
        if here.contains(&b.name) || deleting.contains(&b.name) {
            continue;
        }
        let created = b
            .creation_date
            .as_deref()
            .and_then(|d| Timestamp::parse(dto::TimestampFormat::DateTime, d).ok());
        local.push(dto::Bucket {
            name: Some(b.name),
            creation_date: created,
            bucket_region: Some(region.to_owned()),
        });
    }
    local.sort_by(|a, b| a.name.cmp(&b.name));
}

fn common(prefixes: Vec<String>, enc: bool) -> Vec<dto::CommonPrefix> {
    prefixes
        .into_iter()
        .map(|p| dto::CommonPrefix {
            prefix: Some(url_encode(enc, p)),
        })
        .collect()
}

#[async_trait::async_trait]
impl S3 for NodeS3 {
    async fn list_buckets(
        &self,
        req: S3Request<dto::ListBucketsInput>,
    ) -> S3Result<S3Response<dto::ListBucketsOutput>> {
        let tenant = caller(&req)?;
        let mut resp = self.front.list_buckets(req).await?;
        match self.upstream.list_buckets(&tenant).await {
            Ok(upstream) => {
                let t = tenant.to_string();
                let deleting = self.blocking(move |j| j.pending_bucket_deletes(&t)).await?;
                let region = self.front.region().to_owned();
                merge_buckets(
                    resp.output.buckets.get_or_insert_with(Vec::new),
                    upstream,
                    &deleting,
                    &region,
                );
            }
            Err(e) => {
                tracing::warn!(error = %e, tenant = %tenant, "listing this node's buckets only: upstream unavailable");
            }
        }
        Ok(resp)
    }

    async fn delete_bucket(
        &self,
        req: S3Request<dto::DeleteBucketInput>,
    ) -> S3Result<S3Response<dto::DeleteBucketOutput>> {
        self.front.delete_bucket(req).await
    }

    async fn get_bucket_location(
        &self,
        req: S3Request<dto::GetBucketLocationInput>,
    ) -> S3Result<S3Response<dto::GetBucketLocationOutput>> {
        let tenant = caller(&req)?;
        self.ensure_bucket(&tenant, &req.input.bucket).await?;
        self.front.get_bucket_location(req).await
    }

    async fn get_bucket_versioning(
        &self,
        req: S3Request<dto::GetBucketVersioningInput>,
    ) -> S3Result<S3Response<dto::GetBucketVersioningOutput>> {
        let tenant = caller(&req)?;
        self.ensure_bucket(&tenant, &req.input.bucket).await?;
        self.front.get_bucket_versioning(req).await
    }

    /// Buckets are unversioned: every key of the merged listing (node and upstream, as
    /// ListObjectsV2 sees them) is one version, `null`, the latest. The key marker alone
    /// resumes.
    async fn list_object_versions(
        &self,
        req: S3Request<dto::ListObjectVersionsInput>,
    ) -> S3Result<S3Response<dto::ListObjectVersionsOutput>> {
        let tenant = caller(&req)?;
        let input = req.input;
        let enc = url_encoding(input.encoding_type.as_ref())?;
        let max = max_keys(input.max_keys)?;
        let prefix = input.prefix.clone().unwrap_or_default();
        let marker = input.key_marker.clone().filter(|m| !m.is_empty());
        let m = self
            .merged(
                &tenant,
                &input.bucket,
                &prefix,
                input.delimiter.as_deref(),
                marker.as_deref(),
                max,
            )
            .await?;
        let owner = sluice_s3::front::owner(&tenant);
        let versions = m
            .objects
            .into_iter()
            .map(|(k, l)| dto::ObjectVersion {
                key: Some(url_encode(enc, k)),
                version_id: Some("null".into()),
                is_latest: Some(true),
                size: i64::try_from(l.size).ok(),
                e_tag: Some(strong(&l.etag)),
                last_modified: Some(ts_ms(l.last_modified_ms)),
                owner: Some(owner.clone()),
                storage_class: Some(dto::ObjectVersionStorageClass::from_static(
                    dto::ObjectVersionStorageClass::STANDARD,
                )),
                ..Default::default()
            })
            .collect();
        Ok(S3Response::new(dto::ListObjectVersionsOutput {
            name: Some(input.bucket),
            prefix: Some(url_encode(enc, prefix)),
            delimiter: input.delimiter.map(|d| url_encode(enc, d)),
            key_marker: Some(url_encode(enc, input.key_marker.unwrap_or_default())),
            version_id_marker: input.version_id_marker,
            max_keys: i32::try_from(max).ok(),
            is_truncated: Some(m.truncated),
            next_key_marker: if m.truncated {
                m.last.map(|l| url_encode(enc, l))
            } else {
                None
            },
            next_version_id_marker: m.truncated.then(|| "null".to_owned()),
            common_prefixes: Some(common(m.prefixes, enc)),
            versions: Some(versions),
            encoding_type: enc.then(|| dto::EncodingType::from_static(dto::EncodingType::URL)),
            ..Default::default()
        }))
    }

    async fn complete_multipart_upload(
        &self,
        req: S3Request<dto::CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<dto::CompleteMultipartUploadOutput>> {
        self.front.complete_multipart_upload(req).await
    }

    async fn abort_multipart_upload(
        &self,
        req: S3Request<dto::AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<dto::AbortMultipartUploadOutput>> {
        self.front.abort_multipart_upload(req).await
    }

    async fn list_parts(
        &self,
        req: S3Request<dto::ListPartsInput>,
    ) -> S3Result<S3Response<dto::ListPartsOutput>> {
        self.front.list_parts(req).await
    }

    async fn list_multipart_uploads(
        &self,
        req: S3Request<dto::ListMultipartUploadsInput>,
    ) -> S3Result<S3Response<dto::ListMultipartUploadsOutput>> {
        self.front.list_multipart_uploads(req).await
    }

    async fn upload_part(
        &self,
        req: S3Request<dto::UploadPartInput>,
    ) -> S3Result<S3Response<dto::UploadPartOutput>> {
        let tenant = caller(&req)?;
        let r = self.front.upload_part(req).await;
        self.explain(&tenant, r)
    }

    async fn upload_part_copy(
        &self,
        req: S3Request<dto::UploadPartCopyInput>,
    ) -> S3Result<S3Response<dto::UploadPartCopyOutput>> {
        let tenant = caller(&req)?;
        let r = self.front.upload_part_copy(req).await;
        self.explain(&tenant, r)
    }

    async fn create_bucket(
        &self,
        req: S3Request<dto::CreateBucketInput>,
    ) -> S3Result<S3Response<dto::CreateBucketOutput>> {
        self.front.create_bucket(req).await
    }

    async fn head_bucket(
        &self,
        req: S3Request<dto::HeadBucketInput>,
    ) -> S3Result<S3Response<dto::HeadBucketOutput>> {
        let tenant = caller(&req)?;
        self.ensure_bucket(&tenant, &req.input.bucket).await?;
        self.front.head_bucket(req).await
    }

    async fn put_object(
        &self,
        req: S3Request<dto::PutObjectInput>,
    ) -> S3Result<S3Response<dto::PutObjectOutput>> {
        let tenant = caller(&req)?;
        self.ensure_bucket(&tenant, &req.input.bucket).await?;
        let r = self.front.put_object(req).await;
        self.explain(&tenant, r)
    }

    async fn copy_object(
        &self,
        req: S3Request<dto::CopyObjectInput>,
    ) -> S3Result<S3Response<dto::CopyObjectOutput>> {
        let tenant = caller(&req)?;
        self.ensure_bucket(&tenant, &req.input.bucket).await?;
        let again = req.clone();
        match self.front.copy_object(req).await {
            Err(e) if is(&e, &S3ErrorCode::NoSuchKey) || is(&e, &S3ErrorCode::NoSuchBucket) => {
                // The source may exist upstream only (evicted here, or written elsewhere).
                self.copy_from_upstream(&tenant, again).await
            }
            other => self.explain(&tenant, other),
        }
    }

    async fn create_multipart_upload(
        &self,
        req: S3Request<dto::CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<dto::CreateMultipartUploadOutput>> {
        let tenant = caller(&req)?;
        self.ensure_bucket(&tenant, &req.input.bucket).await?;
        self.front.create_multipart_upload(req).await
    }

    async fn delete_object(
        &self,
        req: S3Request<dto::DeleteObjectInput>,
    ) -> S3Result<S3Response<dto::DeleteObjectOutput>> {
        let tenant = caller(&req)?;
        self.ensure_bucket(&tenant, &req.input.bucket).await?;
        self.front.delete_object(req).await
    }

    async fn delete_objects(
        &self,
        req: S3Request<dto::DeleteObjectsInput>,
    ) -> S3Result<S3Response<dto::DeleteObjectsOutput>> {
        let tenant = caller(&req)?;
        self.ensure_bucket(&tenant, &req.input.bucket).await?;
        self.front.delete_objects(req).await
    }

    async fn get_object(
        &self,
        req: S3Request<dto::GetObjectInput>,
    ) -> S3Result<S3Response<dto::GetObjectOutput>> {
        let tenant = caller(&req)?;
        let input = req.input.clone();
        match self.front.get_object(req).await {
            Err(e) if is(&e, &S3ErrorCode::NoSuchKey) || is(&e, &S3ErrorCode::NoSuchBucket) => Ok(
                S3Response::new(self.get_upstream(&tenant, &input, false).await?),
            ),
            other => other,
        }
    }

    async fn head_object(
        &self,
        req: S3Request<dto::HeadObjectInput>,
    ) -> S3Result<S3Response<dto::HeadObjectOutput>> {
        let tenant = caller(&req)?;
        let input = req.input.clone();
        match self.front.head_object(req).await {
            Err(e) if is(&e, &S3ErrorCode::NoSuchKey) || is(&e, &S3ErrorCode::NoSuchBucket) => {
                let get = dto::GetObjectInput {
                    bucket: input.bucket.clone(),
                    key: input.key.clone(),
                    ..Default::default()
                };
                let got = self.get_upstream(&tenant, &get, true).await?;
                Ok(S3Response::new(dto::HeadObjectOutput {
                    content_length: got.content_length,
                    accept_ranges: got.accept_ranges,
                    e_tag: got.e_tag,
                    last_modified: got.last_modified,
                    content_type: got.content_type,
                    cache_control: got.cache_control,
                    content_disposition: got.content_disposition,
                    content_encoding: got.content_encoding,
                    content_language: got.content_language,
                    metadata: got.metadata,
                    ..Default::default()
                }))
            }
            other => other,
        }
    }

    async fn list_objects_v2(
        &self,
        req: S3Request<dto::ListObjectsV2Input>,
    ) -> S3Result<S3Response<dto::ListObjectsV2Output>> {
        let tenant = caller(&req)?;
        let input = req.input;
        let enc = url_encoding(input.encoding_type.as_ref())?;
        let max = max_keys(input.max_keys)?;
        let token = input.continuation_token.as_deref().map(unhex).transpose()?;
        let after = match (token, input.start_after.clone()) {
            (Some(t), Some(s)) => Some(t.max(s)),
            (t, s) => t.or(s),
        };
        let prefix = input.prefix.clone().unwrap_or_default();
        let m = self
            .merged(
                &tenant,
                &input.bucket,
                &prefix,
                input.delimiter.as_deref(),
                after.as_deref(),
                max,
            )
            .await?;
        let key_count = m.objects.len() + m.prefixes.len();
        Ok(S3Response::new(dto::ListObjectsV2Output {
            name: Some(input.bucket),
            prefix: Some(url_encode(enc, prefix)),
            delimiter: input.delimiter.map(|d| url_encode(enc, d)),
            start_after: input.start_after.map(|s| url_encode(enc, s)),
            max_keys: i32::try_from(max).ok(),
            key_count: i32::try_from(key_count).ok(),
            is_truncated: Some(m.truncated),
            continuation_token: input.continuation_token,
            next_continuation_token: if m.truncated {
                m.last.as_deref().map(hex)
            } else {
                None
            },
            contents: Some(contents(
                m.objects,
                enc,
                input
                    .fetch_owner
                    .unwrap_or(false)
                    .then(|| sluice_s3::front::owner(&tenant))
                    .as_ref(),
            )),
            common_prefixes: Some(common(m.prefixes, enc)),
            encoding_type: enc.then(|| dto::EncodingType::from_static(dto::EncodingType::URL)),
            ..Default::default()
        }))
    }

    async fn list_objects(
        &self,
        req: S3Request<dto::ListObjectsInput>,
    ) -> S3Result<S3Response<dto::ListObjectsOutput>> {
        let tenant = caller(&req)?;
        let input = req.input;
        let enc = url_encoding(input.encoding_type.as_ref())?;
        let max = max_keys(input.max_keys)?;
        let prefix = input.prefix.clone().unwrap_or_default();
        let m = self
            .merged(
                &tenant,
                &input.bucket,
                &prefix,
                input.delimiter.as_deref(),
                input.marker.as_deref(),
                max,
            )
            .await?;
        Ok(S3Response::new(dto::ListObjectsOutput {
            name: Some(input.bucket),
            prefix: Some(url_encode(enc, prefix)),
            delimiter: input.delimiter.clone().map(|d| url_encode(enc, d)),
            marker: input.marker.map(|s| url_encode(enc, s)),
            max_keys: i32::try_from(max).ok(),
            is_truncated: Some(m.truncated),
            next_marker: if m.truncated && input.delimiter.is_some() {
                m.last.map(|l| url_encode(enc, l))
            } else {
                None
            },
            // ListObjects (v1) always names the owner, as the gateway does.
            contents: Some(contents(
                m.objects,
                enc,
                Some(&sluice_s3::front::owner(&tenant)),
            )),
            common_prefixes: Some(common(m.prefixes, enc)),
            encoding_type: enc.then(|| dto::EncodingType::from_static(dto::EncodingType::URL)),
            ..Default::default()
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bucket(name: &str) -> dto::Bucket {
        dto::Bucket {
            name: Some(name.to_owned()),
            ..Default::default()
        }
    }

    fn upstream(name: &str) -> UpstreamBucket {
        UpstreamBucket {
            name: name.to_owned(),
            creation_date: Some("2026-01-02T03:04:05.000Z".to_owned()),
        }
    }

    #[test]
    fn bucket_listing_is_the_union_less_deletions_on_their_way_up() {
        let mut local = vec![bucket("zeta"), bucket("ckpt")];
        let deleting: HashSet<String> = ["old".to_owned()].into();
        merge_buckets(
            &mut local,
            vec![upstream("ckpt"), upstream("data"), upstream("old")],
            &deleting,
            "us-east-1",
        );
        let names: Vec<_> = local.iter().filter_map(|b| b.name.as_deref()).collect();
        assert_eq!(names, ["ckpt", "data", "zeta"]);
        let data = &local[1];
        assert!(data.creation_date.is_some());
        assert_eq!(data.bucket_region.as_deref(), Some("us-east-1"));
    }
}
