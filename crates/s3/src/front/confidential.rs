//! The front's side of confidential bodies (see [`crate::confidential`]): for a tenant the
//! [`Confidential`](crate::Confidential) gives a key, every body is encrypted before the
//! blob writer (or the catalog, for an inline body) sees it, and every read, local or from
//! the tier, decrypts and authenticates what it returns; HEAD, GET, GetObjectAttributes and
//! listings report the plaintext length. A tenant whose key is unavailable is refused before
//! anything is read or written. A multipart upload's parts are encrypted as they arrive,
//! each as piece `n` (its part number) under the generation drawn at its creation, and the
//! completion records the parts' plaintext sizes in the entry (`completed_metadata`);
//! CopyObject and UploadPartCopy decrypt their source and encrypt it again for the
//! destination (`store_sealed`), never copying ciphertext. Every read is checked against its directory's rollback
//! manifest, and every write rewrites it (`manifest`).

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;

use s3s::dto;
use sluice_meta::{Entry as ListEntry, ListPage, ObjectRecord, UploadRecord};

use super::Front;
use super::objects::ReadConditions;
use crate::blob::ReadStream;
use crate::confidential::manifest::is_manifest;
use crate::confidential::stream::{self, Fetch, Opening};
use crate::confidential::{ENTRY, Entry, TenantKey};
use crate::error::{ApiError, ApiResult, TierError};

mod manifest;
pub(crate) use manifest::Manifests;

/// How one body is encrypted: the tenant's key and the object's entry.
pub(super) struct Sealing {
    pub key: Arc<TenantKey>,
    pub entry: Entry,
    pub bucket: String,
    pub object: String,
    pub part: u32,
}

impl Front {
    /// The tenant's key, `None` for a tenant whose bodies go in clear, or the refusal of a
    /// tenant whose key is unavailable.
    pub(super) fn tenant_key(&self, tenant: &str) -> ApiResult<Option<Arc<TenantKey>>> {
        match &self.inner.confidential {
            None => Ok(None),
            Some(c) => c.tenant_key(tenant).map_err(ApiError::KeyUnavailable),
        }
    }

    /// For a confidential tenant, a fresh entry added to `metadata` (a client may not set
    /// it, and it counts against the metadata limit, since the gateway will hold it to it).
    pub(super) fn sealing(
        &self,
        tenant: &str,
        bucket: &str,
        object: &str,
        metadata: &mut BTreeMap<String, String>,
    ) -> ApiResult<Option<Sealing>> {
        let Some(key) = self.tenant_key(tenant)? else {
            return Ok(None);
        };
        if metadata.contains_key(ENTRY) {
            return Err(ApiError::InvalidArgument(format!(
                "x-amz-meta-{ENTRY} is reserved on this node: it describes the encryption"
            )));
        }
        let entry = Entry::fresh(self.inner.segment_size);
        metadata.insert(ENTRY.to_owned(), entry.encode());
        // With room for the length recorded once the body is in (" n=" and 20 digits).
        let size: usize = metadata
            .iter()
            .map(|(k, v)| k.len() + v.len())
            .sum::<usize>()
            + 23;
        if size > super::METADATA_MAX {
            return Err(ApiError::MetadataTooLarge(size));
        }
        Ok(Some(Sealing {
            key,
            entry,
            bucket: bucket.to_owned(),
            object: object.to_owned(),
            part: 0,
        }))
    }

    /// Records the plaintext length of a body just encrypted in its entry in `metadata`
    /// (refused if that takes the metadata over the limit).
    pub(super) fn seal_length(
        seal: &Sealing,
        stored: u64,
        metadata: &mut BTreeMap<String, String>,
    ) -> ApiResult<()> {
        let layout = sluice_crypt::Layout::from_ciphertext_len(seal.entry.segment_size, stored)
            .map_err(|e| ApiError::Internal(format!("an encrypted body's length: {e}")))?;
        let entry = Entry {
            plaintext: Some(layout.plaintext_len()),
            ..seal.entry.clone()
        };
        metadata.insert(ENTRY.to_owned(), entry.encode());
        let size: usize = metadata.iter().map(|(k, v)| k.len() + v.len()).sum();
        if size > super::METADATA_MAX {
            return Err(ApiError::MetadataTooLarge(size));
        }
        Ok(())
    }

    /// Encrypts the plaintext `body` of `len` bytes for `seal` and stores it as
    /// [`Front::receive`] stores a client's sealed body (inline when small): a copy's.
    pub(super) async fn store_sealed<S, E>(
        &self,
        tenant: &str,
        bucket: &str,
        seal: &Sealing,
        body: S,
        len: u64,
        inline: Option<u64>,
    ) -> ApiResult<(
        super::objects::Stored,
        crate::blob::Written,
        sluice_meta::Reservation,
    )>
    where
        S: futures::Stream<Item = Result<bytes::Bytes, E>> + Send + Unpin,
        E: std::fmt::Display,
    {
        let stored_len = sluice_crypt::Layout::new(seal.entry.segment_size, len)
            .map(|l| l.ciphertext_len())
            .map_err(|e| ApiError::Internal(format!("encrypting a body: {e}")))?;
        let identity = seal
            .entry
            .identity(tenant, &seal.bucket, &seal.object, seal.part);
        let sealed = stream::Encrypting::new(
            body,
            &seal.key,
            &seal.entry,
            &identity,
            false,
            &self.inner.seal_buffers,
        )?;
        let max = sluice_crypt::Layout::new(seal.entry.segment_size, self.config().max_object_size)
            .map_or(u64::MAX, |l| l.ciphertext_len());
        self.store_body(tenant, bucket, sealed, Some(stored_len), max, inline, None)
            .await
    }

    /// For a confidential tenant, how part `part` of `upload` is encrypted: under the
    /// entry its CreateMultipartUpload drew (its generation), as piece `part`.
    pub(super) fn part_sealing(
        &self,
        tenant: &str,
        bucket: &str,
        object: &str,
        upload: &UploadRecord,
        part: u32,
    ) -> ApiResult<Option<Sealing>> {
        let Some(key) = self.tenant_key(tenant)? else {
            return Ok(None);
        };
        let entry = Entry::of(&upload.metadata).map_err(|e| {
            ApiError::InvalidRequest(format!(
                "{bucket}/{object}: this upload was started before encryption was on for the tenant ({e}); abort it and start it again"
            ))
        })?;
        Ok(Some(Sealing {
            key,
            entry: Entry {
                plaintext: None,
                parts: None,
                ..entry
            },
            bucket: bucket.to_owned(),
            object: object.to_owned(),
            part,
        }))
    }

    /// For a confidential tenant, the completed object's user metadata: the upload's, its
    /// entry given the listed parts' plaintext sizes (`p=`), which a reader needs to find
    /// each part's header once the drain has re-cut the body. Part `i` of the list must be
    /// part number `i` (1-based): it was encrypted as piece `i`. A part the list names
    /// wrongly (missing, another ETag) is left for the completing transaction to refuse.
    pub(super) async fn completed_metadata(
        &self,
        tenant: &str,
        bucket: &str,
        upload_id: &str,
        object: &str,
        specs: &[sluice_meta::PartSpec],
    ) -> ApiResult<Option<BTreeMap<String, String>>> {
        if self.tenant_key(tenant)?.is_none() {
            return Ok(None);
        }
        let (t, b, u, k) = (
            tenant.to_owned(),
            bucket.to_owned(),
            upload_id.to_owned(),
            object.to_owned(),
        );
        let upload = self.meta(move |c| c.get_upload(&t, &b, &u, &k)).await?;
        let mut entry = self
            .part_sealing(tenant, bucket, object, &upload, 1)?
            .map(|s| s.entry)
            .ok_or_else(|| ApiError::Internal("a confidential upload without a key".into()))?;
        let mut sizes = Vec::with_capacity(specs.len());
        for (i, spec) in specs.iter().enumerate() {
            if u64::from(spec.number) != i as u64 + 1 {
                return Err(ApiError::InvalidArgument(format!(
                    "{bucket}/{object}: an encrypted upload must list its parts numbered 1, 2, 3, … without gaps (part {} listed {}th)",
                    spec.number,
                    i + 1
                )));
            }
            let size = match upload.parts.get(&spec.number) {
                Some(p) if p.etag == spec.etag.trim_matches('"') => {
                    sluice_crypt::Layout::from_ciphertext_len(entry.segment_size, p.size)
                        .map_err(|e| {
                            ApiError::Internal(format!("an encrypted part's length: {e}"))
                        })?
                        .plaintext_len()
                }
                _ => 0,
            };
            sizes.push(size);
        }
        entry.parts = Some(sizes);
        let mut metadata = upload.metadata;
        metadata.insert(ENTRY.to_owned(), entry.encode());
        let size: usize = metadata.iter().map(|(k, v)| k.len() + v.len()).sum();
        if size > super::METADATA_MAX {
            return Err(ApiError::MetadataTooLarge(size));
        }
        Ok(Some(metadata))
    }

    fn opening(
        key: Arc<TenantKey>,
        tenant: &str,
        bucket: &str,
        object: &str,
        rec: &ObjectRecord,
    ) -> ApiResult<(Opening, u64)> {
        let mut opening = Opening {
            key,
            entry: Entry {
                segment_size: 0,
                generation: 0,
                plaintext: None,
                parts: None,
            },
            tenant: tenant.to_owned(),
            bucket: bucket.to_owned(),
            object: object.to_owned(),
        };
        opening.entry = Entry::of(&rec.metadata).map_err(|e| opening.refuse(&e))?;
        let plain = opening
            .entry
            .plaintext_len(rec.size)
            .map_err(|e| opening.refuse(&e))?;
        Ok((opening, plain))
    }

    /// GetObject of a confidential tenant's object, here or on the tier: the record as the
    /// client sees it, the plaintext range served and its (primed) stream.
    pub(super) async fn get_sealed(
        &self,
        tenant: &str,
        key: Arc<TenantKey>,
        input: &dto::GetObjectInput,
        conditions: &ReadConditions,
    ) -> ApiResult<(ObjectRecord, Range<u64>, ReadStream)> {
        let (bucket, object) = (input.bucket.as_str(), input.key.as_str());
        let (rec, fetch): (ObjectRecord, Fetch) =
            match self.object_with_body(tenant, bucket, object).await {
                Ok(src) => {
                    conditions.check(&src.rec)?;
                    let rec = src.rec.clone();
                    let (me, t, src) = (self.clone(), tenant.to_owned(), Arc::new(src));
                    let fetch: Fetch = Arc::new(move |r| {
                        let body = me.read_object(&t, &src, r, None);
                        Box::pin(async move { Ok(body) })
                    });
                    (rec, fetch)
                }
                Err(e) => {
                    let Some(tier) = self.tier_after(&e) else {
                        return Err(e);
                    };
                    let rec = tier.head(tenant, bucket, object).await?;
                    conditions.check(&rec)?;
                    let tier = Arc::clone(tier);
                    let (t, b, k) = (tenant.to_owned(), bucket.to_owned(), object.to_owned());
                    let etag = rec.etag.clone();
                    let fetch: Fetch = Arc::new(move |r: Range<u64>| {
                        let (tier, t, b, k, etag) = (
                            Arc::clone(&tier),
                            t.clone(),
                            b.clone(),
                            k.clone(),
                            etag.clone(),
                        );
                        Box::pin(async move {
                            let want = dto::Range::Int {
                                first: r.start,
                                last: Some(r.end.saturating_sub(1)),
                            };
                            let read = tier.get(&t, &b, &k, Some(want)).await?;
                            if read.record.etag != etag || read.range != r {
                                return Err(TierError::Unavailable(format!(
                                    "{b}/{k} changed on the shared tier during the read; retry"
                                ))
                                .into());
                            }
                            Ok(read.body)
                        })
                    });
                    (rec, fetch)
                }
            };
        let (opening, plain) = Self::opening(key, tenant, bucket, object, &rec)?;
        self.check_rollback(tenant, bucket, object, &opening.entry, rec.size)
            .await?;
        let range = match &input.range {
            None => 0..plain,
            Some(r) => r.check(plain).map_err(|_| ApiError::InvalidRange)?,
        };
        let body = stream::decrypt(opening, rec.size, &range, fetch)?
            .primed()
            .await?;
        Ok((shown(&rec, plain), range, body))
    }

    /// A confidential tenant's object as HEAD shows it: its plaintext length, without the
    /// entry (refused if the entry does not fit the stored body).
    pub(super) fn head_sealed(
        key: Arc<TenantKey>,
        tenant: &str,
        bucket: &str,
        object: &str,
        rec: &ObjectRecord,
    ) -> ApiResult<ObjectRecord> {
        let (_, plain) = Self::opening(key, tenant, bucket, object, rec)?;
        Ok(shown(rec, plain))
    }

    /// A listing page as a confidential tenant sees it: each object at its plaintext length
    /// and without the entry. An object only the tier has is listed without its metadata, so
    /// its entry is read with a HEAD (a few at a time); one whose entry is missing or does
    /// not fit is listed at its stored length (its bytes are never served).
    pub(super) async fn sealed_page(
        &self,
        tenant: &str,
        bucket: &str,
        page: ListPage,
    ) -> ApiResult<ListPage> {
        use futures::StreamExt as _;
        if self.tenant_key(tenant)?.is_none() {
            return Ok(page);
        }
        let tier = self.inner.tier.clone();
        let entries: Vec<ListEntry> = futures::stream::iter(page.entries)
            .map(|e| {
                let tier = tier.clone();
                async move {
                    let ListEntry::Object(name, mut rec) = e else {
                        return Ok(e);
                    };
                    if !rec.metadata.contains_key(ENTRY)
                        && let Some(tier) = &tier
                    {
                        rec = tier.head(tenant, bucket, &name).await?;
                    }
                    let plain = Entry::of(&rec.metadata)
                        .and_then(|en| en.plaintext_len(rec.size))
                        .unwrap_or(rec.size);
                    Ok::<_, ApiError>(ListEntry::Object(name, shown(&rec, plain)))
                }
            })
            .buffered(16)
            .collect::<Vec<_>>()
            .await
            .into_iter()
            // A directory's rollback manifest is the node's, not the client's.
            .filter(|e| !matches!(e, Ok(ListEntry::Object(name, _)) if is_manifest(name)))
            .collect::<ApiResult<_>>()?;
        Ok(ListPage {
            entries,
            truncated: page.truncated,
        })
    }
}

/// `rec` as a client sees it: `plain` bytes long, without the entry.
fn shown(rec: &ObjectRecord, plain: u64) -> ObjectRecord {
    let mut rec = rec.clone();
    rec.size = plain;
    rec.metadata.remove(ENTRY);
    rec
}

#[cfg(test)]
mod tests;
