//! One put's transfer: the local copy read back and checked, a single PUT or a resumable
//! multipart upload, and the HEAD that verifies it upstream.
//!
//! The read-back is verified before anything of it is sent (issue #30): blobs through the
//! verifying reader, chunk by chunk against their record's checksums; an inline body against
//! its record's CRC; then the whole body against the CRC taken when it was acknowledged. A
//! copy that fails is never uploaded: the op fails as `DrainError::Local` (permanent, shown
//! in status, logged at error once) and is counted in the node's
//! `sluice_integrity_errors_total{tenant}`.

use std::sync::Arc;

use bytes::Bytes;
use futures::TryStreamExt;
use md5::{Digest, Md5};
use object_store::PutPayload;
use sluice_md5::Md5Stream;
use sluice_meta::MetaError;
use sluice_s3::blob::integrity::{self, ReadLabel};
use sluice_store::Crc;
use tokio::time::Instant;

use super::{Drain, DrainError, Outcome, RATE_WINDOW, lock};
use crate::journal::{DonePart, Op, OpKind, UploadProgress};
use crate::upstream::UpstreamError;

pub(super) fn hex(bytes: &[u8]) -> String {
    sluice_s3::blob::hex(bytes)
}

impl Drain {
    pub(super) fn sent(&self, tenant: &str, bytes: u64) {
        if let Some(t) = lock(&self.tenants).get_mut(tenant) {
            let now = Instant::now();
            t.drained_bytes_total += bytes;
            t.window.push_back((now, bytes));
            while t
                .window
                .front()
                .is_some_and(|(at, _)| now.saturating_duration_since(*at) > RATE_WINDOW)
            {
                t.window.pop_front();
            }
        }
    }

    /// Reads `range` of the op's local copy: its bytes, checksum and MD5. `None`: the op was
    /// superseded meanwhile (its local copy is gone or replaced).
    pub(super) async fn read_local(
        &self,
        op: &Op,
        object: &sluice_meta::ObjectRecord,
        range: std::ops::Range<u64>,
    ) -> Result<Option<(Vec<Bytes>, Crc, [u8; 16])>, DrainError> {
        let chunks: Result<Vec<Bytes>, String> = if object.inline {
            self.read_inline(op, object, range).await?
        } else {
            let stream = self.blobs.read_labeled(
                &self.admission.local_pacer(&op.tenant),
                &label(op),
                &object.segments,
                range,
                None,
            );
            stream.try_collect().await.map_err(|e| {
                if integrity::is_corrupt(&e) {
                    // Logged with the object by the reader; counted where the node's
                    // metrics are.
                    self.corrupt(&op.tenant);
                }
                e.to_string()
            })
        };
        match chunks {
            Ok(chunks) => {
                let mut md5 = Md5Stream::new();
                for c in &chunks {
                    md5.update(c.clone()).await;
                }
                let crc = Crc::of_chunks(chunks.iter().map(|c| &c[..]));
                Ok(Some((chunks, crc, md5.finish().await)))
            }
            Err(e) => {
                let seq = op.seq;
                if self.blocking(move |j| j.op(seq)).await?.is_none() {
                    // Overwritten or deleted locally meanwhile: its successor carries on.
                    return Ok(None);
                }
                Err(DrainError::Local {
                    key: op.key.clone(),
                    message: e,
                })
            }
        }
    }

    /// Reads `range` of an inline object's body from the catalog. While its op is live the
    /// object at its key is exactly `object` (a newer write supersedes the op in the same
    /// transaction); anything else there is an error, unless the op was superseded meanwhile.
    async fn read_inline(
        &self,
        op: &Op,
        object: &sluice_meta::ObjectRecord,
        range: std::ops::Range<u64>,
    ) -> Result<Result<Vec<Bytes>, String>, DrainError> {
        let (t, b, k) = (op.tenant.clone(), op.bucket.clone(), op.key.clone());
        let found = self
            .blocking(move |j| j.catalog().get_object_with_body(&t, &b, &k))
            .await;
        let found = match found {
            // The bucket is gone: so is the object (the op is superseded; checked below).
            Err(DrainError::Journal(MetaError::NoSuchBucket)) => None,
            other => other?,
        };
        Ok(match found {
            Some((current, Some(body))) if current == *object => {
                if let Some(Err(corrupt)) =
                    integrity::check_inline(object.inline_checksums.as_deref(), &body)
                {
                    let metrics = self.admission.metrics().tenant(&op.tenant);
                    let e = integrity::report(&metrics, &op.tenant, &label(op), corrupt);
                    return Ok(Err(e.to_string()));
                }
                let body = Bytes::from(body);
                let to = usize::try_from(range.end)
                    .unwrap_or(usize::MAX)
                    .min(body.len());
                let from = usize::try_from(range.start).unwrap_or(usize::MAX).min(to);
                Ok(vec![body.slice(from..to)])
            }
            _ => Err("the inline object is no longer in the catalog".to_owned()),
        })
    }

    /// Counts a local copy that failed its checksum in the node's per-tenant metrics.
    fn corrupt(&self, tenant: &str) {
        self.admission
            .metrics()
            .tenant(tenant)
            .integrity_errors
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    pub(super) async fn put(&self, op: &Op) -> Result<Outcome, DrainError> {
        let OpKind::Put { object, crc } = &op.kind else {
            return Err(DrainError::Task("not a put".into()));
        };
        let expected_etag = if object.size <= self.sizes.single_put_max {
            let Some((chunks, got, md5)) = self.read_local(op, object, 0..object.size).await?
            else {
                return Ok(Outcome::Superseded);
            };
            check_crc(op, *crc, got).inspect_err(|_| self.corrupt(&op.tenant))?;
            self.pace(&op.tenant, object.size).await;
            let payload: PutPayload = chunks.into_iter().collect();
            let etag = self
                .upstream
                .put(&op.tenant, &op.bucket, &op.key, payload, object)
                .await?;
            let md5 = hex(&md5);
            if let Some(e) = etag
                && e != md5
            {
                return Err(DrainError::Mismatch {
                    key: op.key.clone(),
                    message: format!("upstream ETag {e}, sent MD5 {md5}"),
                });
            }
            self.sent(&op.tenant, object.size);
            md5
        } else {
            match self.multipart(op, object, *crc).await? {
                Some(etag) => etag,
                None => return Ok(Outcome::Superseded),
            }
        };
        let head = self
            .upstream
            .head(&op.tenant, &op.bucket, &op.key)
            .await?
            .ok_or_else(|| DrainError::Mismatch {
                key: op.key.clone(),
                message: "absent after upload".into(),
            })?;
        let etag = head.etag;
        if head.size != object.size || etag != expected_etag {
            return Err(DrainError::Mismatch {
                key: op.key.clone(),
                message: format!(
                    "upstream has {} bytes with ETag {etag}, expected {} bytes with ETag {expected_etag}",
                    head.size, object.size
                ),
            });
        }
        let o = op.clone();
        Ok(if self.blocking(move |j| j.complete(&o)).await? {
            Outcome::Done { bytes: object.size }
        } else {
            Outcome::Superseded
        })
    }

    /// A resumable multipart upload; returns the expected upstream ETag, or `None` if the op
    /// was superseded meanwhile.
    async fn multipart(
        &self,
        op: &Op,
        object: &sluice_meta::ObjectRecord,
        crc: Option<Crc>,
    ) -> Result<Option<String>, DrainError> {
        let part_size = self.sizes.part_size.max(object.size.div_ceil(10_000));
        let mut progress = if let Some(p) = &op.upload {
            p.clone()
        } else {
            let upload_id = self
                .upstream
                .create_multipart(&op.tenant, &op.bucket, &op.key, object)
                .await?;
            let p = UploadProgress {
                upload_id,
                part_size,
                parts: std::collections::BTreeMap::new(),
            };
            if !self.record(op.seq, Some(p.clone())).await? {
                let _ = self
                    .upstream
                    .abort_multipart(&op.tenant, &op.bucket, &op.key, &p.upload_id)
                    .await;
                return Ok(None);
            }
            p
        };
        let part_size = progress.part_size;
        let n = object.size.div_ceil(part_size);
        for i in 0..n {
            let idx = u32::try_from(i).unwrap_or(u32::MAX);
            if progress.parts.contains_key(&idx) {
                continue;
            }
            let range = i * part_size..object.size.min((i + 1) * part_size);
            let len = range.end - range.start;
            let Some((chunks, got, md5)) = self.read_local(op, object, range).await? else {
                return Ok(None);
            };
            self.pace(&op.tenant, len).await;
            let payload: PutPayload = chunks.into_iter().collect();
            let etag = self
                .upstream
                .put_part(
                    &op.tenant,
                    &op.bucket,
                    &op.key,
                    &progress.upload_id,
                    usize::try_from(i).unwrap_or(usize::MAX),
                    payload,
                )
                .await?;
            let md5 = hex(&md5);
            if etag != md5 {
                return Err(DrainError::Mismatch {
                    key: op.key.clone(),
                    message: format!("part {i}: upstream ETag {etag}, sent MD5 {md5}"),
                });
            }
            self.sent(&op.tenant, len);
            progress.parts.insert(idx, DonePart { etag, crc: got });
            if !self.record(op.seq, Some(progress.clone())).await? {
                return Ok(None);
            }
        }
        let whole = progress
            .parts
            .values()
            .fold(Crc::default(), |acc, p| acc.then(p.crc));
        check_crc(op, crc, whole).inspect_err(|_| self.corrupt(&op.tenant))?;
        let mut md5 = Md5::new();
        for p in progress.parts.values() {
            md5.update(hex::decode(&p.etag).unwrap_or_default());
        }
        let expected = format!("{}-{}", hex(&md5.finalize()), progress.parts.len());
        let etags: Vec<String> = progress.parts.values().map(|p| p.etag.clone()).collect();
        if let Err(e) = self
            .upstream
            .complete_multipart(&op.tenant, &op.bucket, &op.key, &progress.upload_id, etags)
            .await
        {
            // Already completed before a crash? The HEAD after this decides; an upload that
            // vanished otherwise starts again from scratch.
            let head = self.upstream.head(&op.tenant, &op.bucket, &op.key).await?;
            let done = head.is_some_and(|h| h.size == object.size && h.etag == expected);
            if !done {
                if e == UpstreamError::NotFound {
                    self.record(op.seq, None).await?;
                }
                return Err(e.into());
            }
        }
        Ok(Some(expected))
    }

    async fn record(&self, seq: u64, p: Option<UploadProgress>) -> Result<bool, DrainError> {
        self.blocking(move |j| j.set_upload(seq, p)).await
    }
}

/// The object an op is of, for the error log of a read that fails its checksum.
fn label(op: &Op) -> Arc<ReadLabel> {
    Arc::new(ReadLabel {
        bucket: op.bucket.clone(),
        key: op.key.clone(),
    })
}

pub(super) fn check_crc(op: &Op, expected: Option<Crc>, got: Crc) -> Result<(), DrainError> {
    match expected {
        Some(e) if e != got => Err(DrainError::Local {
            key: op.key.clone(),
            message: format!(
                "checksum mismatch: written {} ({} bytes), read back {} ({} bytes)",
                e.hex(),
                e.len,
                got.hex(),
                got.len
            ),
        }),
        _ => Ok(()),
    }
}
