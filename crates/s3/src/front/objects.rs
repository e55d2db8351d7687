//! Object operations: put, get, head, delete, copy (`copy`), GetObjectAttributes
//! (`attributes`). With a tier behind the front, a GET, HEAD or CopyObject whose object is not
//! here reads it from the tier. An inline body is checked against its record's checksums
//! before any read uses it (`verify_inline`).

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;

use base64::Engine;
use bytes::Bytes;
use s3s::dto::{self, StreamingBlob};
use s3s::stream::ByteStream;
use sluice_meta::{ObjectRecord, Precondition, Segment};

use super::confidential::Sealing;
use super::{Front, INLINE_MAX, etag, now_ms, timestamp};
use crate::blob::integrity::{self, ReadLabel};
use crate::blob::{self, BodyLimits, ReadStream, Written};
use crate::checksum::{self, Algorithm, Digest, Expected, Hashing};
use crate::confidential::stream::Encrypting;
use crate::error::{ApiError, ApiResult};
use crate::name;
use sluice_serve::sendfile::SendfileLane;

mod conditions;
pub(super) use conditions::{ReadConditions, write_precondition, write_precondition_of};

/// The most user-defined metadata an object may carry: the UTF-8 bytes of every key and value
/// (`x-amz-meta-` excluded), S3's limit. Every byte is returned in each GET and HEAD.
pub const METADATA_MAX: usize = 2048;

/// [`Representation::new`] from any s3s input that carries the representation headers (they
/// have the same names in PutObject, CopyObject and CreateMultipartUpload).
macro_rules! representation {
    ($input:expr) => {
        Representation::new(
            $input.content_type,
            $input.cache_control,
            $input.content_disposition,
            $input.content_encoding,
            $input.content_language,
            $input.expires,
            $input.metadata,
        )
    };
}
pub(super) use representation;

mod attributes;
pub(super) mod copy;

/// Representation headers stored with an object, by lower-case name.
#[derive(Default)]
pub(super) struct Representation {
    pub content_type: Option<String>,
    pub headers: BTreeMap<String, String>,
    pub metadata: BTreeMap<String, String>,
}

impl Representation {
    /// Refuses user metadata over [`METADATA_MAX`] (`MetadataTooLarge`); called before any
    /// byte of the body is taken.
    pub(super) fn new(
        content_type: Option<String>,
        cache_control: Option<String>,
        content_disposition: Option<String>,
        content_encoding: Option<String>,
        content_language: Option<String>,
        expires: Option<dto::Timestamp>,
        metadata: Option<dto::Metadata>,
    ) -> ApiResult<Self> {
        let metadata: BTreeMap<String, String> = metadata.unwrap_or_default().into_iter().collect();
        let size: usize = metadata.iter().map(|(k, v)| k.len() + v.len()).sum();
        if size > METADATA_MAX {
            return Err(ApiError::MetadataTooLarge(size));
        }
        let mut headers = BTreeMap::new();
        // "aws-chunked" describes the request's transfer framing, not the object.
        let content_encoding = content_encoding.and_then(|v| {
            let rest: Vec<&str> = v
                .split(',')
                .map(str::trim)
                .filter(|e| !e.is_empty() && !e.eq_ignore_ascii_case("aws-chunked"))
                .collect();
            (!rest.is_empty()).then(|| rest.join(","))
        });
        for (k, v) in [
            ("cache-control", cache_control),
            ("content-disposition", content_disposition),
            ("content-encoding", content_encoding),
            ("content-language", content_language),
            ("expires", expires.and_then(|t| http_date(&t))),
        ] {
            if let Some(v) = v {
                headers.insert(k.to_owned(), v);
            }
        }
        Ok(Self {
            content_type,
            headers,
            metadata,
        })
    }
}

/// Where a received body is, not yet referenced by the catalog.
pub(super) enum Stored {
    /// In a new blob.
    Blob(String),
    /// In memory (at most the inline limit), for the catalog to keep with the record.
    Inline(Bytes),
}

impl Stored {
    /// The blob of a body received without an inline limit (a part).
    pub(super) fn into_blob(self) -> ApiResult<String> {
        match self {
            Self::Blob(name) => Ok(name),
            Self::Inline(_) => Err(ApiError::Internal(
                "a body received for a blob was kept inline".into(),
            )),
        }
    }

    /// Deletes the blob, if there is one (the body is not going to be referenced).
    async fn discard(self, front: &Front, tenant: &str) {
        if let Self::Blob(name) = self {
            front.blobs().delete(tenant, [name]).await;
        }
    }
}

/// An object read for its bytes: its record and, if it is inline, its body.
pub(super) struct Source {
    pub rec: ObjectRecord,
    pub inline: Option<Bytes>,
    /// Its bucket and key, named in the log if its bytes fail their checksum.
    pub label: Arc<ReadLabel>,
}

/// A request body stored, not yet referenced by the catalog.
pub(super) struct Received {
    pub stored: Stored,
    pub written: Written,
    pub reservation: sluice_meta::Reservation,
    /// The client's `x-amz-checksum-*`, verified against the body.
    pub checksum: Option<Digest>,
}

/// The declared length of a request body, if known.
fn declared_length(body: &StreamingBlob, content_length: Option<i64>) -> Option<u64> {
    body.remaining_length()
        .exact()
        .map(|n| n as u64)
        .or_else(|| content_length.and_then(|n| u64::try_from(n).ok()))
}

/// Checks a Content-MD5 header against the MD5 of the body received.
fn check_md5(content_md5: Option<&str>, md5: &[u8; 16]) -> ApiResult<()> {
    let Some(b64) = content_md5 else {
        return Ok(());
    };
    let expected = base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .map_err(|_| ApiError::InvalidDigest)?;
    if expected.as_slice() == md5 {
        Ok(())
    } else {
        Err(ApiError::BadDigest)
    }
}

fn header(rec: &ObjectRecord, name: &str) -> Option<String> {
    rec.headers.get(name).cloned()
}

/// A date as HTTP writes it (IMF-fixdate), the form `Expires` is stored in.
fn http_date(t: &dto::Timestamp) -> Option<String> {
    let mut out = Vec::new();
    t.format(dto::TimestampFormat::HttpDate, &mut out).ok()?;
    String::from_utf8(out).ok()
}

/// The stored `Expires` of an object.
fn expires(rec: &ObjectRecord) -> Option<dto::Timestamp> {
    let v = rec.headers.get("expires")?;
    dto::Timestamp::parse(dto::TimestampFormat::HttpDate, v).ok()
}

fn metadata(rec: &ObjectRecord) -> Option<dto::Metadata> {
    (!rec.metadata.is_empty()).then(|| rec.metadata.clone().into_iter().collect())
}

impl Front {
    /// Streams a body into a new blob with the space reserved first (from `escrow`'s, a node
    /// agent's, if named: see [`super::escrow`]), or keeps it in memory if it is at most
    /// `inline` bytes; returns where it is and what was written. On error no blob is left and
    /// the reservation is released.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn store_body<S, E>(
        &self,
        tenant: &str,
        bucket: &str,
        body: S,
        declared: Option<u64>,
        max: u64,
        inline: Option<u64>,
        escrow: Option<&str>,
    ) -> ApiResult<(Stored, Written, sluice_meta::Reservation)>
    where
        S: futures::Stream<Item = Result<bytes::Bytes, E>> + Send + Unpin,
        E: std::fmt::Display,
    {
        if let Some(d) = declared
            && d > max
        {
            return Err(ApiError::EntityTooLarge(max));
        }
        let mut reservation = self.reserve(tenant, declared.unwrap_or(0), escrow)?;
        if let Some(d) = declared {
            self.admit_write(tenant, d, &mut reservation).await?;
        }
        let blob = self.blobs().blob_name(bucket);
        let limits = BodyLimits {
            declared,
            max,
            inline,
        };
        let mut written = self
            .blobs()
            .write(&self.pacer(tenant), &blob, body, limits, &mut reservation)
            .await?;
        let stored = match written.inline.take() {
            Some(bytes) => Stored::Inline(bytes),
            None => Stored::Blob(blob),
        };
        if declared.is_none()
            && let Err(e) = self
                .admit_write(tenant, written.size, &mut reservation)
                .await
        {
            stored.discard(self, tenant).await;
            return Err(e);
        }
        Ok((stored, written, reservation))
    }

    /// Stores a client's request body (PutObject, UploadPart) in a new blob, or in memory if
    /// it is at most `inline` bytes: the declared length reserved first, the size limit
    /// enforced, Content-MD5 and the `x-amz-checksum-*` the client declared checked (the
    /// verified checksum is returned, for the response). With `seal`, the body is encrypted
    /// before the store sees it: what is stored, reserved, limited and kept inline is the
    /// ciphertext, and the client's digests are checked against the plaintext.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn receive(
        &self,
        tenant: &str,
        bucket: &str,
        body: Option<StreamingBlob>,
        content_length: Option<i64>,
        content_md5: Option<&str>,
        checksum: &Expected,
        inline: Option<u64>,
        escrow: Option<&str>,
        seal: Option<&Sealing>,
    ) -> ApiResult<Received> {
        let body = body.unwrap_or_else(|| {
            StreamingBlob::wrap(futures::stream::empty::<Result<bytes::Bytes, std::io::Error>>())
        });
        let declared = declared_length(&body, content_length);
        let mut body = Hashing::new(body, checksum.algorithm());
        let max = self.config().max_object_size;
        let (stored, written, reservation, md5) = match seal {
            None => {
                let (stored, written, reservation) = self
                    .store_body(tenant, bucket, &mut body, declared, max, inline, escrow)
                    .await?;
                let md5 = written.md5;
                (stored, written, reservation, md5)
            }
            Some(seal) => {
                let stored_len = |plain: u64| {
                    sluice_crypt::Layout::new(seal.entry.segment_size, plain)
                        .map(|l| l.ciphertext_len())
                        .map_err(|e| ApiError::Internal(format!("encrypting a body: {e}")))
                };
                let identity = seal
                    .entry
                    .identity(tenant, &seal.bucket, &seal.object, seal.part);
                let mut sealed = Encrypting::new(
                    &mut body,
                    &seal.key,
                    &seal.entry,
                    &identity,
                    content_md5.is_some(),
                    &self.inner.seal_buffers,
                )?;
                let declared = declared.map(stored_len).transpose()?;
                let (stored, written, reservation) = self
                    .store_body(
                        tenant,
                        bucket,
                        &mut sealed,
                        declared,
                        stored_len(max)?,
                        inline,
                        escrow,
                    )
                    .await?;
                // Without a Content-MD5 there is nothing to check it against.
                let md5 = sealed.plaintext_md5().unwrap_or_default();
                (stored, written, reservation, md5)
            }
        };
        let verified = check_md5(content_md5, &md5).and_then(|()| checksum.verify(body.finish()));
        let mut written = written;
        if let (Ok(Some(d)), Some(sums)) = (&verified, written.checksums.as_mut()) {
            sums.client = Some(d.stored());
        }
        match verified {
            Ok(checksum) => Ok(Received {
                stored,
                written,
                reservation,
                checksum,
            }),
            Err(e) => {
                stored.discard(self, tenant).await;
                Err(e)
            }
        }
    }

    /// Makes `rec` visible at `key` if the object there meets `cond` (decided in the
    /// catalog's commit), with its body when it is inline; deletes the blobs it replaced, or
    /// on failure (a failed condition too) its own.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn commit_object(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
        rec: ObjectRecord,
        inline: Option<Bytes>,
        reservation: sluice_meta::Reservation,
        cond: Precondition,
    ) -> ApiResult<ObjectRecord> {
        let (t, b, k, r) = (
            tenant.to_owned(),
            bucket.to_owned(),
            key.to_owned(),
            rec.clone(),
        );
        let body = inline.clone();
        match self
            .meta(move |c| c.put_object_if(&t, &b, &k, &r, body.as_deref(), reservation, &cond))
            .await
        {
            Ok((version, replaced)) => {
                let rec = ObjectRecord { version, ..rec };
                let recorded = self
                    .record_object(tenant, bucket, key, &rec, inline.as_deref())
                    .await;
                if let Some(old) = replaced {
                    self.drop_record(tenant, bucket, key, old.version).await;
                    self.blobs()
                        .delete(tenant, old.segments.into_iter().map(|s| s.blob))
                        .await;
                }
                recorded.map(|()| rec)
            }
            Err(e) => {
                self.blobs()
                    .delete(tenant, rec.segments.into_iter().map(|s| s.blob))
                    .await;
                Err(e)
            }
        }
    }

    #[cfg(test)]
    pub(super) async fn put_object_op(
        &self,
        tenant: &str,
        input: dto::PutObjectInput,
        expected: Expected,
    ) -> ApiResult<dto::PutObjectOutput> {
        self.put_object_from(tenant, input, expected, None).await
    }

    /// PutObject, its space reserved from `escrow`'s escrow when it names a node agent.
    pub(super) async fn put_object_from(
        &self,
        tenant: &str,
        mut input: dto::PutObjectInput,
        expected: Expected,
        escrow: Option<&str>,
    ) -> ApiResult<dto::PutObjectOutput> {
        let cond = write_precondition(input.if_match.take(), input.if_none_match.take())?;
        let mut repr = representation!(input)?;
        let seal = self.sealing(tenant, &input.bucket, &input.key, &mut repr.metadata)?;
        self.require_bucket(tenant, &input.bucket).await?;
        let received = self
            .receive(
                tenant,
                &input.bucket,
                input.body,
                input.content_length,
                input.content_md5.as_deref(),
                &expected,
                Some(INLINE_MAX),
                escrow,
                seal.as_ref(),
            )
            .await?;
        if let Some(seal) = &seal
            && let Err(e) = Self::seal_length(seal, received.written.size, &mut repr.metadata)
        {
            received.stored.discard(self, tenant).await;
            return Err(e);
        }
        let (rec, inline) = new_object(received.stored, &received.written, repr);
        let rec = self
            .commit_object(
                tenant,
                &input.bucket,
                &input.key,
                rec,
                inline,
                received.reservation,
                cond,
            )
            .await?;
        // The client's verified checksum, or (as S3 does since 2024 when a client sends none)
        // the body's CRC-64/NVME, combined from the chunk checksums taken on the way in (not
        // for an encrypted body: those are of its ciphertext).
        let digest = received.checksum.clone().or_else(|| {
            seal.is_none()
                .then(|| checksum::crc64nvme_of(&received.written))
                .flatten()
        });
        let digest = digest.as_ref();
        Ok(dto::PutObjectOutput {
            e_tag: Some(etag(&rec.etag)),
            size: i64::try_from(rec.size).ok(),
            checksum_crc32: checksum::value(digest, Algorithm::Crc32),
            checksum_crc32c: checksum::value(digest, Algorithm::Crc32c),
            checksum_crc64nvme: checksum::value(digest, Algorithm::Crc64Nvme),
            checksum_sha1: checksum::value(digest, Algorithm::Sha1),
            checksum_sha256: checksum::value(digest, Algorithm::Sha256),
            checksum_type: digest
                .map(|_| dto::ChecksumType::from_static(dto::ChecksumType::FULL_OBJECT)),
            ..Default::default()
        })
    }

    pub(super) async fn object(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
    ) -> ApiResult<ObjectRecord> {
        let (t, b, k) = (tenant.to_owned(), bucket.to_owned(), key.to_owned());
        self.meta(move |c| c.get_object(&t, &b, &k))
            .await?
            .ok_or(ApiError::NoSuchKey)
    }

    /// The object at `key` with its inline body, if it has one, from one snapshot.
    pub(super) async fn object_with_body(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
    ) -> ApiResult<Source> {
        let (t, b, k) = (tenant.to_owned(), bucket.to_owned(), key.to_owned());
        let (rec, inline) = self
            .meta(move |c| c.get_object_with_body(&t, &b, &k))
            .await?
            .ok_or(ApiError::NoSuchKey)?;
        let label = Arc::new(ReadLabel {
            bucket: bucket.to_owned(),
            key: key.to_owned(),
        });
        if let Some(body) = &inline {
            self.verify_inline(tenant, &label, &rec, body)?;
        }
        Ok(Source {
            rec,
            inline: inline.map(Bytes::from),
            label,
        })
    }

    /// Checks an inline body against its record's checksums before any of it is used (a
    /// GET's body, a HEAD's checksum, a copy's source): a mismatch is counted, logged with
    /// the object and refused as a blob's would be (500, nothing sent); a record written
    /// before inline checksums existed is served unverified, and counted.
    fn verify_inline(
        &self,
        tenant: &str,
        label: &ReadLabel,
        rec: &ObjectRecord,
        body: &[u8],
    ) -> ApiResult<()> {
        let metrics = self.metrics().tenant(tenant);
        match integrity::check_inline(rec.inline_checksums.as_deref(), body) {
            Some(Ok(())) => Ok(()),
            Some(Err(corrupt)) => Err(ApiError::Backend(integrity::report(
                &metrics, tenant, label, corrupt,
            ))),
            None => {
                metrics
                    .unverified_reads
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                Ok(())
            }
        }
    }

    /// The bytes `range` of an object, from its inline body or its blobs, admitted through
    /// the tenant's pacer either way; with a `lane`, local-filesystem blobs as placeholders
    /// for the connection to send (a GET's response body only: see [`sluice_serve::sendfile`]).
    pub(super) fn read_object(
        &self,
        tenant: &str,
        src: &Source,
        range: Range<u64>,
        lane: Option<&SendfileLane>,
    ) -> ReadStream {
        let pacer = self.pacer(tenant);
        match &src.inline {
            Some(body) => blob::read_inline(&pacer, body.clone(), range),
            None => self
                .blobs()
                .read_labeled(&pacer, &src.label, &src.rec.segments, range, lane),
        }
    }

    pub(super) async fn get_object_op(
        &self,
        tenant: &str,
        mut input: dto::GetObjectInput,
        lane: Option<&SendfileLane>,
    ) -> ApiResult<dto::GetObjectOutput> {
        if input.part_number.is_some() {
            return Err(ApiError::NotImplemented("GetObject by partNumber"));
        }
        let conditions = ReadConditions {
            if_match: input.if_match.take(),
            if_none_match: input.if_none_match.take(),
            if_modified_since: input.if_modified_since.take(),
            if_unmodified_since: input.if_unmodified_since.take(),
        };
        let mut stored = None;
        let sealed = match self.tenant_key(tenant)? {
            Some(key) => Some(self.get_sealed(tenant, key, &input, &conditions).await?),
            None => None,
        };
        let (rec, range, body) = if let Some(sealed) = sealed {
            sealed
        } else {
            match self
                .object_with_body(tenant, &input.bucket, &input.key)
                .await
            {
                Ok(src) => {
                    conditions.check(&src.rec)?;
                    let range = match &input.range {
                        None => 0..src.rec.size,
                        Some(r) => r.check(src.rec.size).map_err(|_| ApiError::InvalidRange)?,
                    };
                    // The whole object's checksum, for a whole object's read (as S3: none for a
                    // range).
                    if checksum_mode(input.checksum_mode.as_ref()) && input.range.is_none() {
                        stored = checksum::of_object(&src.rec, src.inline.as_deref());
                    }
                    let body = self.read_object(tenant, &src, range.clone(), lane);
                    let body = self.checked_body(tenant, &src.rec, &range, body).await?;
                    (src.rec, range, body)
                }
                Err(e) => match self.tier_after(&e) {
                    Some(tier) => {
                        let read = tier
                            .get(tenant, &input.bucket, &input.key, input.range)
                            .await?;
                        conditions.check(&read.record)?;
                        (read.record, read.range, read.body)
                    }
                    None => return Err(e),
                },
            }
        };
        let rec = &rec;
        Ok(dto::GetObjectOutput {
            body: Some(StreamingBlob::wrap(body)),
            content_length: i64::try_from(range.end - range.start).ok(),
            content_range: input
                .range
                .is_some()
                .then(|| content_range(&range, rec.size)),
            accept_ranges: Some("bytes".into()),
            e_tag: Some(etag(&rec.etag)),
            last_modified: Some(timestamp(rec.last_modified_ms)),
            content_type: input
                .response_content_type
                .or_else(|| rec.content_type.clone()),
            cache_control: input
                .response_cache_control
                .or_else(|| header(rec, "cache-control")),
            content_disposition: input
                .response_content_disposition
                .or_else(|| header(rec, "content-disposition")),
            content_encoding: input
                .response_content_encoding
                .or_else(|| header(rec, "content-encoding")),
            content_language: input
                .response_content_language
                .or_else(|| header(rec, "content-language")),
            expires: input.response_expires.or_else(|| expires(rec)),
            metadata: metadata(rec),
            parts_count: (rec.parts > 0).then(|| i32::try_from(rec.parts).unwrap_or(i32::MAX)),
            checksum_crc32: stored_value(stored.as_ref(), Algorithm::Crc32),
            checksum_crc32c: stored_value(stored.as_ref(), Algorithm::Crc32c),
            checksum_crc64nvme: stored_value(stored.as_ref(), Algorithm::Crc64Nvme),
            checksum_sha1: stored_value(stored.as_ref(), Algorithm::Sha1),
            checksum_sha256: stored_value(stored.as_ref(), Algorithm::Sha256),
            checksum_type: stored.as_ref().map(|(_, kind)| kind.dto()),
            ..Default::default()
        })
    }

    pub(super) async fn head_object_op(
        &self,
        tenant: &str,
        input: dto::HeadObjectInput,
    ) -> ApiResult<dto::HeadObjectOutput> {
        let mut stored = None;
        let wants_checksum = checksum_mode(input.checksum_mode.as_ref());
        let here = if wants_checksum {
            // An inline object's checksum is taken from its body.
            self.object_with_body(tenant, &input.bucket, &input.key)
                .await
                .map(|src| {
                    stored = checksum::of_object(&src.rec, src.inline.as_deref());
                    src.rec
                })
        } else {
            self.object(tenant, &input.bucket, &input.key).await
        };
        let key = self.tenant_key(tenant)?;
        let mut rec = match here {
            Ok(rec) => rec,
            Err(e) => match self.tier_after(&e) {
                Some(tier) => tier.head(tenant, &input.bucket, &input.key).await?,
                None => return Err(e),
            },
        };
        if let Some(key) = key {
            // The stored body's checksums are of its ciphertext: none is shown.
            stored = None;
            rec = Self::head_sealed(key, tenant, &input.bucket, &input.key, &rec)?;
        }
        ReadConditions {
            if_match: input.if_match,
            if_none_match: input.if_none_match,
            if_modified_since: input.if_modified_since,
            if_unmodified_since: input.if_unmodified_since,
        }
        .check(&rec)?;
        Ok(dto::HeadObjectOutput {
            content_length: i64::try_from(rec.size).ok(),
            accept_ranges: Some("bytes".into()),
            e_tag: Some(etag(&rec.etag)),
            last_modified: Some(timestamp(rec.last_modified_ms)),
            content_type: rec.content_type.clone(),
            cache_control: header(&rec, "cache-control"),
            content_disposition: header(&rec, "content-disposition"),
            content_encoding: header(&rec, "content-encoding"),
            content_language: header(&rec, "content-language"),
            expires: expires(&rec),
            metadata: metadata(&rec),
            parts_count: (rec.parts > 0).then(|| i32::try_from(rec.parts).unwrap_or(i32::MAX)),
            checksum_crc32: stored_value(stored.as_ref(), Algorithm::Crc32),
            checksum_crc32c: stored_value(stored.as_ref(), Algorithm::Crc32c),
            checksum_crc64nvme: stored_value(stored.as_ref(), Algorithm::Crc64Nvme),
            checksum_sha1: stored_value(stored.as_ref(), Algorithm::Sha1),
            checksum_sha256: stored_value(stored.as_ref(), Algorithm::Sha256),
            checksum_type: stored.as_ref().map(|(_, kind)| kind.dto()),
            ..Default::default()
        })
    }

    /// Removes an object; `Ok` whether or not it existed (S3 semantics).
    pub(super) async fn remove_object(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
    ) -> ApiResult<()> {
        let (t, b, k) = (tenant.to_owned(), bucket.to_owned(), key.to_owned());
        if let Some(old) = self.meta(move |c| c.delete_object(&t, &b, &k)).await? {
            self.drop_record(tenant, bucket, key, old.version).await;
            self.blobs()
                .delete(tenant, old.segments.into_iter().map(|s| s.blob))
                .await;
        }
        Ok(())
    }

    pub(super) async fn delete_object_op(
        &self,
        tenant: &str,
        input: dto::DeleteObjectInput,
    ) -> ApiResult<dto::DeleteObjectOutput> {
        if input.version_id.as_deref().is_some_and(|v| v != "null") {
            return Err(ApiError::InvalidArgument(
                "versioning is not enabled".into(),
            ));
        }
        self.require_bucket(tenant, &input.bucket).await?;
        self.remove_object(tenant, &input.bucket, &input.key)
            .await?;
        Ok(dto::DeleteObjectOutput::default())
    }

    pub(super) async fn delete_objects_op(
        &self,
        tenant: &str,
        input: dto::DeleteObjectsInput,
    ) -> ApiResult<dto::DeleteObjectsOutput> {
        self.require_bucket(tenant, &input.bucket).await?;
        if input.delete.objects.len() > 1000 {
            return Err(ApiError::MalformedXml(
                "at most 1000 keys per request".into(),
            ));
        }
        let quiet = input.delete.quiet.unwrap_or(false);
        let mut deleted = Vec::new();
        let mut errors = Vec::new();
        for obj in input.delete.objects {
            let result = match name::check_key(&obj.key) {
                Err(e) => Err(ApiError::Name(e)),
                Ok(()) => self.remove_object(tenant, &input.bucket, &obj.key).await,
            };
            match result {
                Ok(()) => {
                    if !quiet {
                        deleted.push(dto::DeletedObject {
                            key: Some(obj.key),
                            ..Default::default()
                        });
                    }
                }
                Err(e) => {
                    let s3 = crate::error::to_s3(e);
                    errors.push(dto::Error {
                        code: Some(s3.code().as_str().to_owned()),
                        key: Some(obj.key),
                        message: s3.message().map(str::to_owned),
                        version_id: None,
                    });
                }
            }
        }
        Ok(dto::DeleteObjectsOutput {
            deleted: Some(deleted),
            errors: Some(errors),
            ..Default::default()
        })
    }
}

/// The record of an object whose body was just stored, with its body if that is inline.
fn new_object(
    stored: Stored,
    written: &Written,
    repr: Representation,
) -> (ObjectRecord, Option<Bytes>) {
    let (segments, inline) = match stored {
        Stored::Blob(blob) => (
            vec![Segment {
                blob,
                size: written.size,
                checksums: written.checksums.clone(),
            }],
            None,
        ),
        Stored::Inline(body) => (Vec::new(), Some(body)),
    };
    let inline_checksums = inline.as_ref().and(written.checksums.clone()).map(Box::new);
    let rec = ObjectRecord {
        size: written.size,
        etag: written.etag(),
        last_modified_ms: now_ms(),
        content_type: repr.content_type,
        headers: repr.headers,
        metadata: repr.metadata,
        segments,
        inline: inline.is_some(),
        inline_checksums,
        parts: 0,
        version: 0,
    };
    (rec, inline)
}

/// Whether a GET or HEAD asked for the stored checksum (`x-amz-checksum-mode: ENABLED`).
fn checksum_mode(mode: Option<&dto::ChecksumMode>) -> bool {
    mode.is_some_and(|m| m.as_str().eq_ignore_ascii_case(dto::ChecksumMode::ENABLED))
}

/// The response field for `algorithm` of an object's stored checksum.
fn stored_value(stored: Option<&(Digest, checksum::Kind)>, algorithm: Algorithm) -> Option<String> {
    checksum::value(stored.map(|(d, _)| d), algorithm)
}

fn content_range(range: &Range<u64>, size: u64) -> String {
    format!(
        "bytes {}-{}/{size}",
        range.start,
        range.end.saturating_sub(1)
    )
}

#[cfg(test)]
mod tests;
