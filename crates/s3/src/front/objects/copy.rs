//! CopyObject and the copy sources UploadPartCopy shares: the source read through its
//! checksums (a corrupt source fails the copy instead of spreading), or copied server-side
//! where the backend checks its own bytes; an inline source's copy stays inline with its
//! checksums; a source only the tier has is read from it, its failures the tier's.
//! A confidential tenant's copy is decrypted and encrypted again for its destination
//! (`copy_sealed`; see [`crate::front::confidential`]).

use std::ops::Range;
use std::sync::{Arc, PoisonError};

use bytes::Bytes;
use futures::TryStreamExt as _;
use md5::{Digest as _, Md5};
use s3s::dto;
use sluice_meta::Precondition;

use super::super::tier::TierRead;
use super::super::{Front, INLINE_MAX, etag, timestamp};
use super::{ReadConditions, Representation, Source, Stored, new_object};
use crate::blob::integrity;
use crate::blob::{ReadStream, Written};
use crate::error::{ApiError, ApiResult, TierError};
use crate::name;

impl Front {
    /// Resolves a copy source in the caller's own namespace (here only): its object.
    pub(in crate::front) async fn copy_source(
        &self,
        tenant: &str,
        source: &dto::CopySource,
    ) -> ApiResult<Source> {
        let (bucket, key) = copy_source_name(source)?;
        self.object_with_body(tenant, bucket, key).await
    }

    /// Copies `range` of `src` into a new blob, server-side when it is one whole blob.
    pub(in crate::front) async fn copy_bytes(
        &self,
        tenant: &str,
        bucket: &str,
        source: &Source,
        range: Range<u64>,
    ) -> ApiResult<(String, Written, sluice_meta::Reservation)> {
        let src = &source.rec;
        let len = range.end - range.start;
        let whole_single =
            src.segments.len() == 1 && range.start == 0 && len == src.size && src.parts == 0;
        // On the local filesystem a copy reads the source through its checksums (a corrupt
        // source fails the copy instead of spreading); other backends copy server-side,
        // checking their own bytes, and the copy keeps the source's checksums.
        if whole_single
            && !self.blobs().has_local_files()
            && let Some(md5) = hex16(&src.etag)
        {
            let mut reservation = self.catalog().ledger().reserve(tenant, len)?;
            self.admit_write(tenant, len, &mut reservation).await?;
            let blob = self.blobs().blob_name(bucket);
            // The tier moves the bytes even when it copies them itself.
            self.pacer(tenant).admit_copy(len).await;
            self.blobs()
                .copy(tenant, &src.segments[0].blob, &blob)
                .await?;
            let written = Written {
                size: len,
                md5,
                inline: None,
                checksums: src.segments[0].checksums.clone(),
            };
            return Ok((blob, written, reservation));
        }
        // A source that fails to read (a checksum that does not match, a blob gone) fails
        // the copy with its own error, not as a client's broken body.
        let (body, failed) = source_failures(self.read_object(tenant, source, range, None));
        let stored = self
            .store_body(tenant, bucket, body, Some(len), u64::MAX, None, None)
            .await;
        let (stored, written, reservation) = match stored {
            Ok(stored) => stored,
            Err(e) => return Err(take(&failed).map_or(e, ApiError::Backend)),
        };
        Ok((stored.into_blob()?, written, reservation))
    }

    /// Copies an inline object's body into a new inline record's: the space reserved first
    /// and the bytes admitted as a server-side copy of them would be.
    async fn copy_inline(
        &self,
        tenant: &str,
        body: &Bytes,
        client: Option<sluice_meta::ClientChecksum>,
    ) -> ApiResult<(Stored, Written, sluice_meta::Reservation)> {
        let len = body.len() as u64;
        let mut reservation = self.catalog().ledger().reserve(tenant, len)?;
        self.admit_write(tenant, len, &mut reservation).await?;
        self.pacer(tenant).admit_copy(len).await;
        // The source's body was verified when it was read (`object_with_body`): the copy's
        // checksums are taken from it, and keep the client's checksum as S3's copy does.
        let mut checksums = integrity::of_body(body);
        checksums.client = client;
        let written = Written {
            size: len,
            md5: Md5::digest(body).into(),
            inline: None,
            checksums: Some(checksums),
        };
        Ok((Stored::Inline(body.clone()), written, reservation))
    }

    /// An unconditional CopyObject.
    #[cfg(test)]
    pub(in crate::front) async fn copy_object_op(
        &self,
        tenant: &str,
        input: dto::CopyObjectInput,
    ) -> ApiResult<dto::CopyObjectOutput> {
        self.copy_object_if_op(tenant, input, Ok(Precondition::None))
            .await
    }

    /// CopyObject; `cond` is the destination's `If-Match`/`If-None-Match` (s3s's input has
    /// no field for them, so they are read from the headers): decided at the commit, as a
    /// PutObject's.
    pub(in crate::front) async fn copy_object_if_op(
        &self,
        tenant: &str,
        mut input: dto::CopyObjectInput,
        cond: ApiResult<Precondition>,
    ) -> ApiResult<dto::CopyObjectOutput> {
        let cond = cond?;
        if let Some(key) = self.tenant_key(tenant)? {
            return self.copy_sealed(tenant, key, input, cond).await;
        }
        let (src_bucket, src_key) = copy_source_name(&input.copy_source)?;
        let src = match self.object_with_body(tenant, src_bucket, src_key).await {
            Ok(src) => Copied::Here(src),
            Err(e) => match self.tier_after(&e) {
                Some(tier) => Copied::Tier(tier.get(tenant, src_bucket, src_key, None).await?),
                None => return Err(e),
            },
        };
        self.require_bucket(tenant, &input.bucket).await?;
        let replace = input
            .metadata_directive
            .as_ref()
            .is_some_and(|d| d.as_str() == dto::MetadataDirective::REPLACE);
        if src_bucket == input.bucket && src_key == input.key && !replace {
            return Err(ApiError::InvalidRequest(
                "This copy request is illegal because it is trying to copy an object to itself without changing the object's metadata".into(),
            ));
        }
        let src_rec = match &src {
            Copied::Here(s) => &s.rec,
            Copied::Tier(t) => &t.record,
        };
        // The source's conditions: any that fails is a 412 (a copy has nothing to answer 304).
        ReadConditions {
            if_match: input.copy_source_if_match.take(),
            if_none_match: input.copy_source_if_none_match.take(),
            if_modified_since: input.copy_source_if_modified_since.take(),
            if_unmodified_since: input.copy_source_if_unmodified_since.take(),
        }
        .check(src_rec)
        .map_err(|e| match e {
            ApiError::NotModified { .. } => ApiError::PreconditionFailed,
            e => e,
        })?;
        let repr = if replace {
            representation!(input)?
        } else {
            Representation {
                content_type: src_rec.content_type.clone(),
                headers: src_rec.headers.clone(),
                metadata: src_rec.metadata.clone(),
            }
        };
        // A copy keeps its source's kind of storage: an inline object's copy stays inline. One
        // from the tier is stored as a PUT of its bytes would be.
        let (stored, written, reservation) = match src {
            Copied::Here(Source {
                inline: Some(body),
                rec,
                ..
            }) => {
                let client = rec.inline_checksums.and_then(|s| s.client);
                self.copy_inline(tenant, &body, client).await?
            }
            Copied::Here(src) => {
                let (blob, written, reservation) = self
                    .copy_bytes(tenant, &input.bucket, &src, 0..src.rec.size)
                    .await?;
                (Stored::Blob(blob), written, reservation)
            }
            Copied::Tier(read) => {
                let len = read.range.end - read.range.start;
                let (body, failed) = source_failures(read.body);
                let stored = self
                    .store_body(
                        tenant,
                        &input.bucket,
                        body,
                        Some(len),
                        self.config().max_object_size,
                        Some(INLINE_MAX),
                        None,
                    )
                    .await;
                // A source cut short by the tier (its gateway broke the connection: a corrupt
                // chunk there, or a failure) is the tier's failure, not a client's body.
                stored.map_err(|e| match take(&failed) {
                    Some(cause) => TierError::Unavailable(format!(
                        "reading the copy source from the shared tier: {cause}"
                    ))
                    .into(),
                    None => e,
                })?
            }
        };
        self.commit_copy(
            tenant,
            (&input.bucket, &input.key),
            (stored, written, reservation),
            repr,
            cond,
        )
        .await
    }
}

impl Front {
    /// CopyObject of a confidential tenant: the source decrypted through the authenticated
    /// read (here or from the tier, its rollback checked), and its plaintext encrypted again
    /// under a fresh data key and the destination's identity — never the ciphertext copied
    /// (bound to the source's name and generation, it would not open at the destination).
    async fn copy_sealed(
        &self,
        tenant: &str,
        key: Arc<crate::confidential::TenantKey>,
        mut input: dto::CopyObjectInput,
        cond: Precondition,
    ) -> ApiResult<dto::CopyObjectOutput> {
        let (src_bucket, src_key) = copy_source_name(&input.copy_source)?;
        let replace = input
            .metadata_directive
            .as_ref()
            .is_some_and(|d| d.as_str() == dto::MetadataDirective::REPLACE);
        if src_bucket == input.bucket && src_key == input.key && !replace {
            return Err(ApiError::InvalidRequest(
                "This copy request is illegal because it is trying to copy an object to itself without changing the object's metadata".into(),
            ));
        }
        let get = dto::GetObjectInput::builder()
            .bucket(src_bucket.to_owned())
            .key(src_key.to_owned())
            .build()
            .map_err(|e| ApiError::Internal(format!("a copy's source read: {e}")))?;
        let conditions = ReadConditions {
            if_match: input.copy_source_if_match.take(),
            if_none_match: input.copy_source_if_none_match.take(),
            if_modified_since: input.copy_source_if_modified_since.take(),
            if_unmodified_since: input.copy_source_if_unmodified_since.take(),
        };
        let (src_rec, range, body) = self
            .get_sealed(tenant, key, &get, &conditions)
            .await
            .map_err(|e| match e {
                ApiError::NotModified { .. } => ApiError::PreconditionFailed,
                e => e,
            })?;
        self.require_bucket(tenant, &input.bucket).await?;
        let mut repr = if replace {
            representation!(input)?
        } else {
            Representation {
                content_type: src_rec.content_type.clone(),
                headers: src_rec.headers.clone(),
                metadata: src_rec.metadata.clone(),
            }
        };
        let seal = self
            .sealing(tenant, &input.bucket, &input.key, &mut repr.metadata)?
            .ok_or_else(|| ApiError::Internal("a confidential copy without a key".into()))?;
        let (body, failed) = source_failures(body);
        let stored = self
            .store_sealed(
                tenant,
                &input.bucket,
                &seal,
                body,
                range.end - range.start,
                Some(INLINE_MAX),
            )
            .await;
        let (stored, written, reservation) =
            stored.map_err(|e| take(&failed).map_or(e, ApiError::Backend))?;
        if let Err(e) = Self::seal_length(&seal, written.size, &mut repr.metadata) {
            stored.discard(self, tenant).await;
            return Err(e);
        }
        self.commit_copy(
            tenant,
            (&input.bucket, &input.key),
            (stored, written, reservation),
            repr,
            cond,
        )
        .await
    }

    /// Commits a copy's new object as `(bucket, key)` and answers it.
    async fn commit_copy(
        &self,
        tenant: &str,
        (bucket, key): (&str, &str),
        (stored, written, reservation): (Stored, Written, sluice_meta::Reservation),
        repr: Representation,
        cond: Precondition,
    ) -> ApiResult<dto::CopyObjectOutput> {
        let (rec, inline) = new_object(stored, &written, repr);
        let rec = self
            .commit_object(tenant, bucket, key, rec, inline, reservation, cond)
            .await?;
        Ok(dto::CopyObjectOutput {
            copy_object_result: Some(dto::CopyObjectResult {
                e_tag: Some(etag(&rec.etag)),
                last_modified: Some(timestamp(rec.last_modified_ms)),
                ..Default::default()
            }),
            ..Default::default()
        })
    }
}

/// The source of a CopyObject: here, or read from the tier behind.
enum Copied {
    Here(Source),
    Tier(TierRead),
}

/// The bucket and key of a copy source, checked as names in the caller's namespace.
pub(in crate::front) fn copy_source_name(source: &dto::CopySource) -> ApiResult<(&str, &str)> {
    let dto::CopySource::Bucket {
        bucket,
        key,
        version_id,
    } = source
    else {
        return Err(ApiError::NotImplemented("access-point copy sources"));
    };
    name::check_bucket(bucket)?;
    name::check_key(key)?;
    if version_id.as_deref().is_some_and(|v| v != "null") {
        return Err(ApiError::InvalidArgument(
            "versioning is not enabled".into(),
        ));
    }
    Ok((bucket, key))
}

/// Parses a 32-hex-digit MD5 ETag.
fn hex16(s: &str) -> Option<[u8; 16]> {
    if s.len() != 32 {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}
/// Where a copy source's read failure is kept, for the copy to fail with it.
pub(in crate::front) type Failure = Arc<std::sync::Mutex<Option<object_store::Error>>>;

/// A copy source's bytes as a body to store, its read failure kept aside: the write sees a
/// broken body, the copy answers with why the source broke.
pub(in crate::front) fn source_failures(
    read: ReadStream,
) -> (
    impl futures::Stream<Item = Result<bytes::Bytes, String>> + Send + Unpin,
    Failure,
) {
    let failed = Failure::default();
    let seen = Arc::clone(&failed);
    let body = read.map_err(move |e| {
        let text = e.to_string();
        *seen.lock().unwrap_or_else(PoisonError::into_inner) = Some(e);
        text
    });
    (body, failed)
}

pub(in crate::front) fn take(failed: &Failure) -> Option<object_store::Error> {
    failed.lock().unwrap_or_else(PoisonError::into_inner).take()
}
