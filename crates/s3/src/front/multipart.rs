//! Multipart uploads. Parts are blobs counted against the quota as soon as they are stored;
//! completing an upload is one catalog transaction that turns the listed parts into the
//! object's segments (no bytes are copied) and frees the parts that were not listed.

use s3s::dto;
use sluice_meta::{PartRecord, PartSpec, UploadRecord};

use super::buckets::owner;
use super::objects::{Representation, representation, write_precondition};
use super::{Front, etag, now_ms, timestamp};
use crate::checksum::{self, Algorithm, Expected};
use crate::error::{ApiError, ApiResult};

const MAX_PART_NUMBER: i32 = 10_000;

fn part_number(n: i32) -> ApiResult<u32> {
    if (1..=MAX_PART_NUMBER).contains(&n) {
        Ok(n.unsigned_abs())
    } else {
        Err(ApiError::InvalidArgument(format!(
            "part number must be an integer between 1 and {MAX_PART_NUMBER}"
        )))
    }
}

/// Parses `bytes=first-last` (inclusive) against the source size.
fn copy_range(spec: Option<&str>, size: u64) -> ApiResult<std::ops::Range<u64>> {
    let Some(spec) = spec else {
        return Ok(0..size);
    };
    let bad = || ApiError::InvalidArgument(format!("invalid x-amz-copy-source-range {spec:?}"));
    let (a, b) = spec
        .strip_prefix("bytes=")
        .and_then(|r| r.split_once('-'))
        .ok_or_else(bad)?;
    let first: u64 = a.trim().parse().map_err(|_| bad())?;
    let last: u64 = b.trim().parse().map_err(|_| bad())?;
    if first > last || last >= size {
        return Err(ApiError::InvalidRange);
    }
    Ok(first..last + 1)
}

impl Front {
    pub(super) async fn create_multipart_upload_op(
        &self,
        tenant: &str,
        input: dto::CreateMultipartUploadInput,
    ) -> ApiResult<dto::CreateMultipartUploadOutput> {
        let mut repr = representation!(input)?;
        // A confidential upload's entry (its generation) is drawn now; every part is
        // encrypted under it, and completion adds the parts' sizes.
        self.sealing(tenant, &input.bucket, &input.key, &mut repr.metadata)?;
        self.require_bucket(tenant, &input.bucket).await?;
        let id: u128 = rand::random();
        let upload_id = format!("{id:032x}");
        let rec = UploadRecord {
            key: input.key.clone(),
            initiated_ms: now_ms(),
            content_type: repr.content_type,
            headers: repr.headers,
            metadata: repr.metadata,
            parts: std::collections::BTreeMap::new(),
        };
        let (t, b, u) = (tenant.to_owned(), input.bucket.clone(), upload_id.clone());
        self.meta(move |c| c.create_upload(&t, &b, &u, &rec))
            .await?;
        Ok(dto::CreateMultipartUploadOutput {
            bucket: Some(input.bucket),
            key: Some(input.key),
            upload_id: Some(upload_id),
            ..Default::default()
        })
    }

    async fn upload(
        &self,
        tenant: &str,
        bucket: &str,
        upload_id: &str,
        key: &str,
    ) -> ApiResult<UploadRecord> {
        let (t, b, u, k) = (
            tenant.to_owned(),
            bucket.to_owned(),
            upload_id.to_owned(),
            key.to_owned(),
        );
        self.meta(move |c| c.get_upload(&t, &b, &u, &k)).await
    }

    /// Records a stored part blob, deleting the part it replaced (or, on failure, itself).
    async fn commit_part(
        &self,
        tenant: &str,
        bucket: &str,
        upload_id: &str,
        key: &str,
        number: u32,
        part: PartRecord,
        reservation: sluice_meta::Reservation,
    ) -> ApiResult<()> {
        let blob = part.blob.clone();
        let (t, b, u, k) = (
            tenant.to_owned(),
            bucket.to_owned(),
            upload_id.to_owned(),
            key.to_owned(),
        );
        match self
            .meta(move |c| c.put_part(&t, &b, &u, &k, number, part, reservation))
            .await
        {
            Ok(replaced) => {
                self.blobs().delete(tenant, replaced.map(|p| p.blob)).await;
                Ok(())
            }
            Err(e) => {
                self.blobs().delete(tenant, [blob]).await;
                Err(e)
            }
        }
    }

    /// UploadPart, its space reserved from `escrow`'s escrow when it names a node agent.
    pub(super) async fn upload_part_op(
        &self,
        tenant: &str,
        input: dto::UploadPartInput,
        expected: Expected,
        escrow: Option<&str>,
    ) -> ApiResult<dto::UploadPartOutput> {
        let number = part_number(input.part_number)?;
        let upload = self
            .upload(tenant, &input.bucket, &input.upload_id, &input.key)
            .await?;
        let seal = self.part_sealing(tenant, &input.bucket, &input.key, &upload, number)?;
        let received = self
            .receive(
                tenant,
                &input.bucket,
                input.body,
                input.content_length,
                input.content_md5.as_deref(),
                &expected,
                None,
                escrow,
                seal.as_ref(),
            )
            .await?;
        let etag_hex = received.written.etag();
        let part = PartRecord {
            blob: received.stored.into_blob()?,
            size: received.written.size,
            etag: etag_hex.clone(),
            last_modified_ms: now_ms(),
            checksums: received.written.checksums.clone(),
        };
        self.commit_part(
            tenant,
            &input.bucket,
            &input.upload_id,
            &input.key,
            number,
            part,
            received.reservation,
        )
        .await?;
        let digest = received.checksum.as_ref();
        Ok(dto::UploadPartOutput {
            e_tag: Some(etag(&etag_hex)),
            checksum_crc32: checksum::value(digest, Algorithm::Crc32),
            checksum_crc32c: checksum::value(digest, Algorithm::Crc32c),
            checksum_crc64nvme: checksum::value(digest, Algorithm::Crc64Nvme),
            checksum_sha1: checksum::value(digest, Algorithm::Sha1),
            checksum_sha256: checksum::value(digest, Algorithm::Sha256),
            ..Default::default()
        })
    }

    pub(super) async fn upload_part_copy_op(
        &self,
        tenant: &str,
        input: dto::UploadPartCopyInput,
    ) -> ApiResult<dto::UploadPartCopyOutput> {
        let number = part_number(input.part_number)?;
        let (blob, written, reservation) = if let Some(key) = self.tenant_key(tenant)? {
            self.part_copy_sealed(tenant, key, &input, number).await?
        } else {
            let src = self.copy_source(tenant, &input.copy_source).await?;
            self.upload(tenant, &input.bucket, &input.upload_id, &input.key)
                .await?;
            let range = copy_range(input.copy_source_range.as_deref(), src.rec.size)?;
            self.copy_bytes(tenant, &input.bucket, &src, range).await?
        };
        let now = now_ms();
        let part = PartRecord {
            blob,
            size: written.size,
            etag: written.etag(),
            last_modified_ms: now,
            checksums: written.checksums.clone(),
        };
        self.commit_part(
            tenant,
            &input.bucket,
            &input.upload_id,
            &input.key,
            number,
            part,
            reservation,
        )
        .await?;
        Ok(dto::UploadPartCopyOutput {
            copy_part_result: Some(dto::CopyPartResult {
                e_tag: Some(etag(&written.etag())),
                last_modified: Some(timestamp(now)),
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    /// UploadPartCopy for a confidential tenant: the source's plaintext (its
    /// `x-amz-copy-source-range` in plaintext coordinates) read through the authenticated
    /// path and encrypted again as part `number` of the destination upload.
    async fn part_copy_sealed(
        &self,
        tenant: &str,
        key: std::sync::Arc<crate::confidential::TenantKey>,
        input: &dto::UploadPartCopyInput,
        number: u32,
    ) -> ApiResult<(String, crate::blob::Written, sluice_meta::Reservation)> {
        use super::objects::copy::{copy_source_name, source_failures, take};
        let (src_bucket, src_key) = copy_source_name(&input.copy_source)?;
        let upload = self
            .upload(tenant, &input.bucket, &input.upload_id, &input.key)
            .await?;
        let seal = self
            .part_sealing(tenant, &input.bucket, &input.key, &upload, number)?
            .ok_or_else(|| ApiError::Internal("a confidential copy without a key".into()))?;
        // Parsed here, checked against the plaintext length by the read.
        let wanted = match input.copy_source_range.as_deref() {
            None => None,
            Some(spec) => Some(copy_range(Some(spec), u64::MAX)?),
        };
        let get = dto::GetObjectInput::builder()
            .bucket(src_bucket.to_owned())
            .key(src_key.to_owned())
            .range(wanted.as_ref().map(|r| dto::Range::Int {
                first: r.start,
                last: Some(r.end - 1),
            }))
            .build()
            .map_err(|e| ApiError::Internal(format!("a copy's source read: {e}")))?;
        let conditions = super::objects::ReadConditions::default();
        let (_, range, body) = self.get_sealed(tenant, key, &get, &conditions).await?;
        if wanted.as_ref().is_some_and(|w| *w != range) {
            return Err(ApiError::InvalidRange);
        }
        let (body, failed) = source_failures(body);
        let (stored, written, reservation) = self
            .store_sealed(
                tenant,
                &input.bucket,
                &seal,
                body,
                range.end - range.start,
                None,
            )
            .await
            .map_err(|e| take(&failed).map_or(e, ApiError::Backend))?;
        Ok((stored.into_blob()?, written, reservation))
    }

    pub(super) async fn complete_multipart_upload_op(
        &self,
        tenant: &str,
        input: dto::CompleteMultipartUploadInput,
    ) -> ApiResult<dto::CompleteMultipartUploadOutput> {
        let listed = input
            .multipart_upload
            .and_then(|m| m.parts)
            .unwrap_or_default();
        let mut specs = Vec::with_capacity(listed.len());
        for p in listed {
            let number = part_number(p.part_number.unwrap_or(0))?;
            let etag = p.e_tag.map(dto::ETag::into_value).unwrap_or_default();
            specs.push(PartSpec { number, etag });
        }
        if specs.is_empty() {
            return Err(ApiError::MalformedXml(
                "CompleteMultipartUpload must list at least one part".into(),
            ));
        }
        // Decided in the completing transaction; on failure the upload stays, as in S3.
        let cond = write_precondition(input.if_match, input.if_none_match)?;
        let (t, b, u, k) = (
            tenant.to_owned(),
            input.bucket.clone(),
            input.upload_id.clone(),
            input.key.clone(),
        );
        let metadata = self.completed_metadata(tenant, &b, &u, &k, &specs).await?;
        let (object, replaced, unused) = self
            .meta(move |c| {
                c.complete_upload_if(&t, &b, &u, &k, &specs, now_ms(), &cond, metadata.as_ref())
            })
            .await?;
        let recorded = self
            .record_object(tenant, &input.bucket, &input.key, &object, None)
            .await;
        let mut garbage = unused;
        if let Some(old) = replaced {
            self.drop_record(tenant, &input.bucket, &input.key, old.version)
                .await;
            garbage.extend(old.segments.into_iter().map(|s| s.blob));
        }
        self.blobs().delete(tenant, garbage).await;
        recorded?;
        Ok(dto::CompleteMultipartUploadOutput {
            bucket: Some(input.bucket.clone()),
            key: Some(input.key.clone()),
            e_tag: Some(etag(&object.etag)),
            location: Some(format!("/{}/{}", input.bucket, input.key)),
            ..Default::default()
        })
    }

    pub(super) async fn abort_multipart_upload_op(
        &self,
        tenant: &str,
        input: dto::AbortMultipartUploadInput,
    ) -> ApiResult<dto::AbortMultipartUploadOutput> {
        let (t, b, u, k) = (tenant.to_owned(), input.bucket, input.upload_id, input.key);
        let blobs = self.meta(move |c| c.abort_upload(&t, &b, &u, &k)).await?;
        self.blobs().delete(tenant, blobs).await;
        Ok(dto::AbortMultipartUploadOutput::default())
    }

    pub(super) async fn list_parts_op(
        &self,
        tenant: &str,
        input: dto::ListPartsInput,
    ) -> ApiResult<dto::ListPartsOutput> {
        let rec = self
            .upload(tenant, &input.bucket, &input.upload_id, &input.key)
            .await?;
        let max = input
            .max_parts
            .unwrap_or(1000)
            .clamp(0, 1000)
            .unsigned_abs() as usize;
        let marker = input.part_number_marker.unwrap_or(0);
        let mut parts: Vec<dto::Part> = rec
            .parts
            .iter()
            .filter(|(n, _)| i64::from(**n) > i64::from(marker))
            .take(max + 1)
            .map(|(n, p)| dto::Part {
                part_number: i32::try_from(*n).ok(),
                e_tag: Some(etag(&p.etag)),
                size: i64::try_from(p.size).ok(),
                last_modified: Some(timestamp(p.last_modified_ms)),
                ..Default::default()
            })
            .collect();
        let truncated = parts.len() > max;
        parts.truncate(max);
        Ok(dto::ListPartsOutput {
            bucket: Some(input.bucket),
            key: Some(input.key),
            upload_id: Some(input.upload_id),
            is_truncated: Some(truncated),
            max_parts: i32::try_from(max).ok(),
            part_number_marker: input.part_number_marker,
            next_part_number_marker: parts.last().and_then(|p| p.part_number),
            initiator: Some(dto::Initiator {
                display_name: Some(tenant.to_owned()),
                id: Some(tenant.to_owned()),
            }),
            owner: Some(owner(tenant)),
            parts: Some(parts),
            ..Default::default()
        })
    }

    pub(super) async fn list_multipart_uploads_op(
        &self,
        tenant: &str,
        input: dto::ListMultipartUploadsInput,
    ) -> ApiResult<dto::ListMultipartUploadsOutput> {
        let (t, b) = (tenant.to_owned(), input.bucket.clone());
        let all = self.meta(move |c| c.list_uploads(&t, &b)).await?;
        let prefix = input.prefix.clone().unwrap_or_default();
        let max = input
            .max_uploads
            .unwrap_or(1000)
            .clamp(0, 1000)
            .unsigned_abs() as usize;
        let key_marker = input.key_marker.clone().unwrap_or_default();
        let id_marker = input.upload_id_marker.clone().unwrap_or_default();
        let delimiter = input.delimiter.clone().filter(|d| !d.is_empty());
        let mut uploads = Vec::new();
        let mut prefixes: Vec<String> = Vec::new();
        let mut truncated = false;
        for (id, rec) in all {
            if !rec.key.starts_with(&prefix) {
                continue;
            }
            let after_marker = key_marker.is_empty()
                || rec.key > key_marker
                || (rec.key == key_marker && !id_marker.is_empty() && id > id_marker);
            if !after_marker {
                continue;
            }
            if let Some(d) = &delimiter
                && let Some(pos) = rec.key[prefix.len()..].find(d.as_str())
            {
                let common = rec.key[..prefix.len() + pos + d.len()].to_owned();
                if prefixes.last() != Some(&common) {
                    if uploads.len() + prefixes.len() == max {
                        truncated = true;
                        break;
                    }
                    prefixes.push(common);
                }
                continue;
            }
            if uploads.len() + prefixes.len() == max {
                truncated = true;
                break;
            }
            uploads.push((id, rec));
        }
        let next = uploads
            .last()
            .map(|(id, rec)| (rec.key.clone(), id.clone()));
        Ok(dto::ListMultipartUploadsOutput {
            bucket: Some(input.bucket),
            prefix: input.prefix,
            delimiter: input.delimiter,
            key_marker: input.key_marker,
            upload_id_marker: input.upload_id_marker,
            max_uploads: i32::try_from(max).ok(),
            is_truncated: Some(truncated),
            next_key_marker: next.as_ref().map(|n| n.0.clone()),
            next_upload_id_marker: next.map(|n| n.1),
            common_prefixes: Some(
                prefixes
                    .into_iter()
                    .map(|p| dto::CommonPrefix { prefix: Some(p) })
                    .collect(),
            ),
            uploads: Some(
                uploads
                    .into_iter()
                    .map(|(id, rec)| dto::MultipartUpload {
                        key: Some(rec.key),
                        upload_id: Some(id),
                        initiated: Some(timestamp(rec.initiated_ms)),
                        initiator: Some(dto::Initiator {
                            display_name: Some(tenant.to_owned()),
                            id: Some(tenant.to_owned()),
                        }),
                        owner: Some(owner(tenant)),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        })
    }
}
