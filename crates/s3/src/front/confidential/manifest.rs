//! The front's side of rollback manifests (see [`crate::confidential::manifest`] for the
//! format and what they detect).
//!
//! # Writing
//!
//! A confidential tenant's PutObject, DeleteObject(s), CopyObject and
//! CompleteMultipartUpload go through the `*_guarded` handlers here: a client's request
//! naming a manifest is refused, and once the object's commit is durable (the catalog
//! transaction that also journals it for the drain) the directory's manifest is rewritten
//! before the request is answered. The new manifest names, for each key touched, what the
//! node's catalog holds *then* (its generation, or deleted), so two racing writes of one key
//! leave the manifest naming whichever the catalog kept. Manifest writes are serialized per
//! directory and batched: writers register their keys, the first to get the directory's lock
//! writes every key registered so far, the others find theirs written and return — the
//! concurrent PUTs of a PyTorch DCP checkpoint share manifest writes, and none is lost.
//! The manifest object is journalled after the objects it names, so the drain never sends it
//! ahead of them within one key's order, and a commit marker (`journal` invariant 3) waits for
//! it as for any other rewrite under its directory. The high-water mark is raised after the
//! manifest commits. A failed manifest write fails the request (its keys stay registered for
//! the next write); the object is then visible but refused on read until a write in its
//! directory succeeds — a refusal, never a stale body.
//!
//! # Reading
//!
//! Every GET and HEAD of a confidential tenant's object (local or from the tier) is checked
//! against its directory's manifest, read once per directory (local copy first, else the
//! tier) and cached in memory; a mismatch re-reads it once (another node may have written
//! a newer one) before refusing. The manifest must decrypt, verify its MAC, be for this
//! tenant, bucket and directory, and carry a counter at least the node's mark (raised to it);
//! a directory without a manifest passes unless the node has a mark for it.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use futures::TryStreamExt as _;
use s3s::dto::{self, StreamingBlob};

use crate::checksum::Expected;
use crate::confidential::manifest::{
    HighWater, MANIFEST_NAME, Manifest, MemoryHighWater, RolledBack, Scope, Slot, directory,
    is_manifest, manifest_key,
};
use crate::confidential::{Entry, TenantKey, is_undecryptable};
use crate::error::{ApiError, ApiResult};
use crate::front::Front;
use crate::front::objects::ReadConditions;
use sluice_meta::{MetaError, ObjectRecord, Precondition};

/// What a write did to a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Touch {
    Put,
    Delete,
}

/// Directories whose manifest is kept in memory before the idle ones are forgotten.
pub(super) const DIRS_KEPT: usize = 256;

/// The manifests' state of a front: the node's marks and each directory's lock and cache.
pub(crate) struct Manifests {
    marks: Arc<dyn HighWater>,
    dirs: Mutex<HashMap<Vec<u8>, Arc<Dir>>>,
}

impl Default for Manifests {
    fn default() -> Self {
        Self::new(Arc::new(MemoryHighWater::default()))
    }
}

impl Manifests {
    pub(crate) fn new(marks: Arc<dyn HighWater>) -> Self {
        Self {
            marks,
            dirs: Mutex::default(),
        }
    }

    fn dir(&self, scope: Scope<'_>) -> Arc<Dir> {
        let mut id = Vec::new();
        for s in [scope.tenant, scope.bucket, scope.directory] {
            id.extend_from_slice(s.as_bytes());
            id.push(0);
        }
        let mut dirs = self.dirs.lock().unwrap_or_else(PoisonError::into_inner);
        if dirs.len() >= DIRS_KEPT && !dirs.contains_key(&id) {
            // Forget the directories no request is in and no failed write left keys in: a
            // directory forgotten is read again (its manifest, checked against the mark).
            dirs.retain(|_, d| Arc::strong_count(d) > 1 || !d.pending().keys.is_empty());
        }
        Arc::clone(dirs.entry(id).or_default())
    }
}

#[derive(Default)]
struct Dir {
    pending: Mutex<Pending>,
    known: tokio::sync::Mutex<Known>,
}

impl Dir {
    fn pending(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Keys written whose manifest entry is not yet written, and the tickets that say whose are.
#[derive(Default)]
struct Pending {
    keys: BTreeMap<String, Touch>,
    submitted: u64,
    written: u64,
}

/// The directory's manifest as last read or written here.
#[derive(Default)]
enum Known {
    #[default]
    Unread,
    Absent,
    Read(Manifest),
}

/// Why a manifest could not be used: refused (tampered, rolled back) or not read (the tier
/// unavailable...).
enum Load {
    Refused(String),
    Failed(ApiError),
}

impl From<ApiError> for Load {
    fn from(e: ApiError) -> Self {
        Self::Failed(e)
    }
}

fn missed(e: &ApiError) -> bool {
    matches!(
        e,
        ApiError::NoSuchKey | ApiError::Meta(MetaError::NoSuchBucket)
    )
}

fn rolled_back(bucket: &str, key: &str, reason: String) -> ApiError {
    ApiError::Backend(
        RolledBack {
            bucket: bucket.to_owned(),
            key: key.to_owned(),
            reason,
        }
        .into_store_error(),
    )
}

fn reserved(key: &str) -> ApiError {
    ApiError::InvalidArgument(format!(
        "{key}: keys named {MANIFEST_NAME} are reserved on this node for the rollback manifests of confidential objects"
    ))
}

impl Front {
    /// Marks kept where `marks` keeps them (the node agent's catalog file) instead of in
    /// memory (see [`crate::confidential::manifest::HighWater`]).
    #[must_use]
    pub fn with_rollback_marks(mut self, marks: Arc<dyn HighWater>) -> Self {
        Arc::make_mut(&mut self.inner).manifests = Arc::new(Manifests::new(marks));
        self
    }

    /// Whether `key` is a manifest of a confidential tenant (reserved).
    fn is_reserved(&self, tenant: &str, key: &str) -> ApiResult<bool> {
        Ok(is_manifest(key) && self.tenant_key(tenant)?.is_some())
    }

    async fn marks<T: Send + 'static>(
        &self,
        scope: Scope<'_>,
        f: impl FnOnce(&dyn HighWater, Scope<'_>) -> Result<T, String> + Send + 'static,
    ) -> ApiResult<T> {
        let marks = Arc::clone(&self.inner.manifests.marks);
        let (t, b, d) = (
            scope.tenant.to_owned(),
            scope.bucket.to_owned(),
            scope.directory.to_owned(),
        );
        tokio::task::spawn_blocking(move || {
            let scope = Scope {
                tenant: &t,
                bucket: &b,
                directory: &d,
            };
            f(&*marks, scope)
        })
        .await
        .map_err(|e| ApiError::Internal(format!("rollback marks task: {e}")))?
        .map_err(ApiError::Internal)
    }

    /// The node's mark for `scope`.
    async fn mark(&self, scope: Scope<'_>) -> ApiResult<u64> {
        self.marks(scope, HighWater::get).await
    }

    /// Raises the node's mark for `scope` to `counter`.
    async fn raise_mark(&self, scope: Scope<'_>, counter: u64) -> ApiResult<()> {
        self.marks(scope, move |m, s| m.raise(s, counter)).await
    }

    pub(in crate::front) async fn put_object_guarded(
        &self,
        tenant: &str,
        input: dto::PutObjectInput,
        expected: Expected,
        escrow: Option<&str>,
    ) -> ApiResult<dto::PutObjectOutput> {
        if self.is_reserved(tenant, &input.key)? {
            return Err(reserved(&input.key));
        }
        let (bucket, key) = (input.bucket.clone(), input.key.clone());
        let out = self
            .put_object_from(tenant, input, expected, escrow)
            .await?;
        self.touch(tenant, &bucket, &key, Touch::Put).await?;
        Ok(out)
    }

    pub(in crate::front) async fn delete_object_guarded(
        &self,
        tenant: &str,
        input: dto::DeleteObjectInput,
    ) -> ApiResult<dto::DeleteObjectOutput> {
        if self.is_reserved(tenant, &input.key)? {
            return Err(reserved(&input.key));
        }
        let (bucket, key) = (input.bucket.clone(), input.key.clone());
        let out = self.delete_object_op(tenant, input).await?;
        self.touch(tenant, &bucket, &key, Touch::Delete).await?;
        Ok(out)
    }

    pub(in crate::front) async fn delete_objects_guarded(
        &self,
        tenant: &str,
        input: dto::DeleteObjectsInput,
    ) -> ApiResult<dto::DeleteObjectsOutput> {
        for o in &input.delete.objects {
            if self.is_reserved(tenant, &o.key)? {
                return Err(reserved(&o.key));
            }
        }
        let bucket = input.bucket.clone();
        let keys: Vec<String> = input.delete.objects.iter().map(|o| o.key.clone()).collect();
        let out = self.delete_objects_op(tenant, input).await?;
        let touched: Vec<(&str, Touch)> =
            keys.iter().map(|k| (k.as_str(), Touch::Delete)).collect();
        self.touch_all(tenant, &bucket, &touched).await?;
        Ok(out)
    }

    pub(in crate::front) async fn copy_object_guarded(
        &self,
        tenant: &str,
        input: dto::CopyObjectInput,
        cond: ApiResult<Precondition>,
    ) -> ApiResult<dto::CopyObjectOutput> {
        if self.is_reserved(tenant, &input.key)? {
            return Err(reserved(&input.key));
        }
        if let dto::CopySource::Bucket { key, .. } = &input.copy_source
            && self.is_reserved(tenant, key)?
        {
            return Err(reserved(key));
        }
        let (bucket, key) = (input.bucket.clone(), input.key.clone());
        let out = self.copy_object_if_op(tenant, input, cond).await?;
        self.touch(tenant, &bucket, &key, Touch::Put).await?;
        Ok(out)
    }

    pub(in crate::front) async fn create_multipart_guarded(
        &self,
        tenant: &str,
        input: dto::CreateMultipartUploadInput,
    ) -> ApiResult<dto::CreateMultipartUploadOutput> {
        if self.is_reserved(tenant, &input.key)? {
            return Err(reserved(&input.key));
        }
        self.create_multipart_upload_op(tenant, input).await
    }

    pub(in crate::front) async fn complete_multipart_guarded(
        &self,
        tenant: &str,
        input: dto::CompleteMultipartUploadInput,
    ) -> ApiResult<dto::CompleteMultipartUploadOutput> {
        if self.is_reserved(tenant, &input.key)? {
            return Err(reserved(&input.key));
        }
        let (bucket, key) = (input.bucket.clone(), input.key.clone());
        let out = self.complete_multipart_upload_op(tenant, input).await?;
        self.touch(tenant, &bucket, &key, Touch::Put).await?;
        Ok(out)
    }

    pub(in crate::front) async fn get_object_guarded(
        &self,
        tenant: &str,
        input: dto::GetObjectInput,
        lane: Option<&sluice_serve::sendfile::SendfileLane>,
    ) -> ApiResult<dto::GetObjectOutput> {
        if self.is_reserved(tenant, &input.key)? {
            return Err(ApiError::NoSuchKey);
        }
        self.get_object_op(tenant, input, lane).await
    }

    /// HeadObject, for a confidential tenant checked against the manifest first.
    pub(in crate::front) async fn head_object_guarded(
        &self,
        tenant: &str,
        input: dto::HeadObjectInput,
    ) -> ApiResult<dto::HeadObjectOutput> {
        if self.tenant_key(tenant)?.is_some() {
            if is_manifest(&input.key) {
                return Err(ApiError::NoSuchKey);
            }
            let rec = match self.object(tenant, &input.bucket, &input.key).await {
                Ok(rec) => rec,
                Err(e) => match self.tier_after(&e) {
                    Some(tier) => tier.head(tenant, &input.bucket, &input.key).await?,
                    None => return Err(e),
                },
            };
            // An object without an entry is refused by the HEAD itself.
            if let Ok(entry) = Entry::of(&rec.metadata) {
                self.check_rollback(tenant, &input.bucket, &input.key, &entry, rec.size)
                    .await?;
            }
        }
        self.head_object_op(tenant, input).await
    }

    pub(in crate::front) async fn get_object_attributes_guarded(
        &self,
        tenant: &str,
        input: dto::GetObjectAttributesInput,
    ) -> ApiResult<dto::GetObjectAttributesOutput> {
        if self.is_reserved(tenant, &input.key)? {
            return Err(ApiError::NoSuchKey);
        }
        self.get_object_attributes_op(tenant, input).await
    }

    /// Rewrites the manifest of `key`'s directory to name what the catalog now holds at
    /// `key` (and at every key registered before this write got the directory's lock).
    async fn touch(&self, tenant: &str, bucket: &str, key: &str, touch: Touch) -> ApiResult<()> {
        self.touch_all(tenant, bucket, &[(key, touch)]).await
    }

    /// [`Front::touch`] for several keys: one manifest write per directory they are in.
    async fn touch_all(&self, tenant: &str, bucket: &str, keys: &[(&str, Touch)]) -> ApiResult<()> {
        let Some(tkey) = self.tenant_key(tenant)? else {
            return Ok(());
        };
        let mut by_dir: BTreeMap<&str, Vec<(&str, Touch)>> = BTreeMap::new();
        for &(key, touch) in keys.iter().filter(|(k, _)| !is_manifest(k)) {
            by_dir.entry(directory(key)).or_default().push((key, touch));
        }
        let mut outcome = Ok(());
        for (directory, keys) in by_dir {
            let scope = Scope {
                tenant,
                bucket,
                directory,
            };
            if let Err(e) = self.touch_dir(&tkey, scope, &keys).await {
                outcome = Err(e);
            }
        }
        outcome
    }

    async fn touch_dir(
        &self,
        tkey: &Arc<TenantKey>,
        scope: Scope<'_>,
        keys: &[(&str, Touch)],
    ) -> ApiResult<()> {
        let dir = self.inner.manifests.dir(scope);
        let ticket = {
            let mut p = dir.pending();
            for &(key, touch) in keys {
                p.keys.insert(key.to_owned(), touch);
            }
            p.submitted += 1;
            p.submitted
        };
        let mut known = dir.known.lock().await;
        let (keys, upto) = {
            let mut p = dir.pending();
            if p.written >= ticket {
                return Ok(());
            }
            (std::mem::take(&mut p.keys), p.submitted)
        };
        match self.write_manifest(tkey, scope, &mut known, &keys).await {
            Ok(()) => {
                dir.pending().written = upto;
                Ok(())
            }
            Err(e) => {
                let mut p = dir.pending();
                for (k, t) in keys {
                    p.keys.entry(k).or_insert(t);
                }
                Err(e)
            }
        }
    }

    async fn write_manifest(
        &self,
        tkey: &Arc<TenantKey>,
        scope: Scope<'_>,
        known: &mut Known,
        keys: &BTreeMap<String, Touch>,
    ) -> ApiResult<()> {
        let mk = manifest_key(scope.directory);
        let mut manifest = match std::mem::take(known) {
            Known::Read(m) => m,
            Known::Absent => Manifest::default(),
            Known::Unread => match self.load_manifest(tkey, scope).await {
                Ok(m) => m.unwrap_or_default(),
                Err(Load::Failed(e)) => return Err(e),
                Err(Load::Refused(why)) => return Err(rolled_back(scope.bucket, &mk, why)),
            },
        };
        for (key, touch) in keys {
            match self.slot_of(scope, key, *touch).await? {
                Some(slot) => manifest.objects.insert(key.clone(), slot),
                None => manifest.objects.remove(key),
            };
        }
        let seen = self.mark(scope).await?;
        manifest.counter = manifest.counter.max(seen) + 1;
        let body = Bytes::from(manifest.seal(tkey, scope));
        let len = i64::try_from(body.len()).unwrap_or(i64::MAX);
        let input = dto::PutObjectInput {
            bucket: scope.bucket.to_owned(),
            key: mk,
            body: Some(StreamingBlob::wrap(futures::stream::once(async move {
                Ok::<_, std::io::Error>(body)
            }))),
            content_length: Some(len),
            content_type: Some("application/json".to_owned()),
            ..Default::default()
        };
        self.put_object_from(scope.tenant, input, Expected::None, None)
            .await?;
        self.raise_mark(scope, manifest.counter).await?;
        *known = Known::Read(manifest);
        Ok(())
    }

    /// What the manifest should say of `key` now: the catalog's object (or, when the local
    /// copy is gone after a put, the tier's), deleted, or nothing (not encrypted).
    async fn slot_of(&self, scope: Scope<'_>, key: &str, touch: Touch) -> ApiResult<Option<Slot>> {
        let (tenant, bucket) = (scope.tenant, scope.bucket);
        let rec: Option<ObjectRecord> = match self.object(tenant, bucket, key).await {
            Ok(rec) => Some(rec),
            Err(e) if missed(&e) => match (&self.inner.tier, touch) {
                (Some(tier), Touch::Put) => match tier.head(tenant, bucket, key).await {
                    Ok(rec) => Some(rec),
                    Err(e) if missed(&e) => None,
                    Err(e) => return Err(e),
                },
                _ => None,
            },
            Err(e) => return Err(e),
        };
        Ok(match rec {
            None => Some(Slot::Deleted),
            Some(rec) => Entry::of(&rec.metadata).ok().map(|e| Slot::Live {
                generation: e.generation,
                plaintext: e.plaintext_len(rec.size).ok(),
            }),
        })
    }

    /// The directory's manifest as stored (here, else on the tier), verified against the key,
    /// the scope and the node's mark (raised to its counter); `None` where there is none and
    /// the node has no mark.
    async fn load_manifest(
        &self,
        tkey: &Arc<TenantKey>,
        scope: Scope<'_>,
    ) -> Result<Option<Manifest>, Load> {
        let mk = manifest_key(scope.directory);
        let mark = self.mark(scope).await?;
        let input = dto::GetObjectInput {
            bucket: scope.bucket.to_owned(),
            key: mk.clone(),
            ..Default::default()
        };
        let conditions = ReadConditions::default();
        let read = self
            .get_sealed(scope.tenant, Arc::clone(tkey), &input, &conditions)
            .await;
        let body = match read {
            Ok((_, _, body)) => body.try_collect::<Vec<Bytes>>().await,
            Err(e) if missed(&e) => {
                if mark > 0 {
                    return Err(Load::Refused(format!(
                        "its directory's manifest {mk} is missing, yet this node has seen its counter at {mark}"
                    )));
                }
                return Ok(None);
            }
            Err(ApiError::Backend(e)) => Err(e),
            Err(e) => return Err(Load::Failed(e)),
        };
        let body = match body {
            Ok(chunks) => chunks.concat(),
            Err(e) if is_undecryptable(&e) => {
                return Err(Load::Refused(format!("its directory's manifest {mk}: {e}")));
            }
            Err(e) => return Err(Load::Failed(ApiError::Backend(e))),
        };
        let manifest = Manifest::open(&body, tkey, scope)
            .map_err(|e| Load::Refused(format!("its directory's manifest {mk}: {e}")))?;
        if manifest.counter < mark {
            return Err(Load::Refused(format!(
                "its directory's manifest {mk} has counter {}, below the {mark} this node has seen: an older manifest put back",
                manifest.counter
            )));
        }
        if manifest.counter > mark {
            self.raise_mark(scope, manifest.counter).await?;
        }
        Ok(Some(manifest))
    }

    /// Refuses the object at `key`, stored with `entry` in `stored` bytes, if its directory's
    /// manifest names a newer write of it, or the manifest itself does not hold (see the
    /// module doc).
    ///
    /// Boxed: reading the manifest goes through `get_sealed`, which calls this.
    pub(in crate::front) fn check_rollback<'a>(
        &'a self,
        tenant: &'a str,
        bucket: &'a str,
        key: &'a str,
        entry: &'a Entry,
        stored: u64,
    ) -> futures::future::BoxFuture<'a, ApiResult<()>> {
        Box::pin(self.check_rollback_now(tenant, bucket, key, entry, stored))
    }

    async fn check_rollback_now(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
        entry: &Entry,
        stored: u64,
    ) -> ApiResult<()> {
        if is_manifest(key) {
            return Ok(());
        }
        let Some(tkey) = self.tenant_key(tenant)? else {
            return Ok(());
        };
        let scope = Scope {
            tenant,
            bucket,
            directory: directory(key),
        };
        let dir = self.inner.manifests.dir(scope);
        let mut known = dir.known.lock().await;
        let refuse = |why: String| rolled_back(bucket, key, why);
        for attempt in 0..2 {
            if attempt == 1 || matches!(*known, Known::Unread) {
                *known = match self.load_manifest(&tkey, scope).await {
                    Ok(Some(m)) => Known::Read(m),
                    Ok(None) => Known::Absent,
                    Err(Load::Failed(e)) => {
                        *known = Known::Unread;
                        return Err(e);
                    }
                    Err(Load::Refused(why)) => {
                        *known = Known::Unread;
                        return Err(refuse(why));
                    }
                };
            }
            let verdict = match &*known {
                Known::Read(m) => m.check(key, entry, stored),
                Known::Absent | Known::Unread => Ok(()),
            };
            match verdict {
                Ok(()) => return Ok(()),
                Err(why) if attempt == 1 => return Err(refuse(why)),
                Err(_) => {}
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
