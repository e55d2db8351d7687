//! [`InMemoryUpstream`]: the shared tier's twin for tests — buckets, whole objects with their
//! bytes and ETags, multipart uploads, per tenant — that also keeps, in order, every change a
//! reader of the shared tier could see ([`Event`]), for a model to check.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard, PoisonError};

use bytes::Bytes;
use md5::{Digest, Md5};
use object_store::PutPayload;
use sluice_meta::ObjectRecord;

use super::{Head, UpstreamError, UpstreamStore};

/// A change visible upstream, in the order the twin applied them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// `key` now holds `bytes` (a PUT, or a completed multipart upload).
    Put {
        tenant: String,
        bucket: String,
        key: String,
        bytes: Bytes,
    },
    /// A DELETE reached `key` (`existed`: there was an object to remove).
    Delete {
        tenant: String,
        bucket: String,
        key: String,
        existed: bool,
    },
    CreateBucket {
        tenant: String,
        bucket: String,
    },
    DeleteBucket {
        tenant: String,
        bucket: String,
    },
}

#[derive(Debug, Clone)]
struct Object {
    bytes: Bytes,
    etag: String,
}

#[derive(Debug, Default)]
struct Bucket {
    objects: BTreeMap<String, Object>,
    /// Upload id → key and parts by index.
    uploads: HashMap<String, (String, BTreeMap<usize, Object>)>,
}

#[derive(Debug, Default)]
struct State {
    buckets: BTreeMap<(String, String), Bucket>,
    next_upload: u64,
    completed_uploads: usize,
    events: Vec<Event>,
}

/// The shared tier in memory (see the module doc). Follows [`UpstreamStore`]'s contract; no
/// limits (part sizes, quotas) beyond it.
#[derive(Debug, Default)]
pub struct InMemoryUpstream {
    state: Mutex<State>,
}

fn md5_hex(bytes: &[u8]) -> String {
    sluice_s3::blob::hex(&Md5::digest(bytes))
}

/// A payload's bytes in one piece.
fn whole(payload: &PutPayload) -> Bytes {
    let mut out = Vec::with_capacity(payload.content_length());
    for chunk in payload {
        out.extend_from_slice(chunk);
    }
    Bytes::from(out)
}

impl InMemoryUpstream {
    pub fn new() -> Self {
        Self::default()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Every visible change so far, oldest first.
    pub fn events(&self) -> Vec<Event> {
        self.state().events.clone()
    }

    /// The visible changes from the `from`-th on.
    pub fn events_since(&self, from: usize) -> Vec<Event> {
        self.state()
            .events
            .get(from..)
            .map(<[Event]>::to_vec)
            .unwrap_or_default()
    }

    /// How many visible changes there have been.
    pub fn event_count(&self) -> usize {
        self.state().events.len()
    }

    /// The bytes at `key`, if any.
    pub fn object(&self, tenant: &str, bucket: &str, key: &str) -> Option<Bytes> {
        self.state()
            .buckets
            .get(&(tenant.to_owned(), bucket.to_owned()))
            .and_then(|b| b.objects.get(key))
            .map(|o| o.bytes.clone())
    }

    /// Every key in a bucket, sorted.
    pub fn keys(&self, tenant: &str, bucket: &str) -> Vec<String> {
        self.state()
            .buckets
            .get(&(tenant.to_owned(), bucket.to_owned()))
            .map(|b| b.objects.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Multipart uploads completed.
    pub fn completed_uploads(&self) -> usize {
        self.state().completed_uploads
    }

    /// Multipart uploads neither completed nor aborted.
    pub fn open_uploads(&self) -> usize {
        self.state().buckets.values().map(|b| b.uploads.len()).sum()
    }

    pub fn bucket_exists(&self, tenant: &str, bucket: &str) -> bool {
        self.state()
            .buckets
            .contains_key(&(tenant.to_owned(), bucket.to_owned()))
    }
}

impl State {
    fn bucket(&mut self, tenant: &str, bucket: &str) -> Result<&mut Bucket, UpstreamError> {
        self.buckets
            .get_mut(&(tenant.to_owned(), bucket.to_owned()))
            .ok_or(UpstreamError::NotFound)
    }

    fn upload(
        &mut self,
        tenant: &str,
        bucket: &str,
        key: &str,
        upload_id: &str,
    ) -> Result<&mut BTreeMap<usize, Object>, UpstreamError> {
        match self.bucket(tenant, bucket)?.uploads.get_mut(upload_id) {
            Some((k, parts)) if k == key => Ok(parts),
            _ => Err(UpstreamError::NotFound),
        }
    }

    fn set(&mut self, tenant: &str, bucket: &str, key: &str, object: Object) {
        let bytes = object.bytes.clone();
        if let Some(b) = self
            .buckets
            .get_mut(&(tenant.to_owned(), bucket.to_owned()))
        {
            b.objects.insert(key.to_owned(), object);
            self.events.push(Event::Put {
                tenant: tenant.to_owned(),
                bucket: bucket.to_owned(),
                key: key.to_owned(),
                bytes,
            });
        }
    }
}

#[async_trait::async_trait]
impl UpstreamStore for InMemoryUpstream {
    fn endpoint(&self) -> &'static str {
        "memory:"
    }

    async fn create_bucket(&self, tenant: &str, bucket: &str) -> Result<(), UpstreamError> {
        let mut s = self.state();
        let name = (tenant.to_owned(), bucket.to_owned());
        if let std::collections::btree_map::Entry::Vacant(e) = s.buckets.entry(name) {
            e.insert(Bucket::default());
            s.events.push(Event::CreateBucket {
                tenant: tenant.to_owned(),
                bucket: bucket.to_owned(),
            });
        }
        Ok(())
    }

    async fn delete_bucket(&self, tenant: &str, bucket: &str) -> Result<(), UpstreamError> {
        let mut s = self.state();
        let name = (tenant.to_owned(), bucket.to_owned());
        if s.buckets.get(&name).is_some_and(|b| b.objects.is_empty()) {
            s.buckets.remove(&name);
            s.events.push(Event::DeleteBucket {
                tenant: tenant.to_owned(),
                bucket: bucket.to_owned(),
            });
        }
        Ok(())
    }

    async fn put(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
        payload: PutPayload,
        _object: &ObjectRecord,
    ) -> Result<Option<String>, UpstreamError> {
        let bytes = whole(&payload);
        let etag = md5_hex(&bytes);
        let mut s = self.state();
        s.bucket(tenant, bucket)?;
        s.set(
            tenant,
            bucket,
            key,
            Object {
                bytes,
                etag: etag.clone(),
            },
        );
        Ok(Some(etag))
    }

    async fn create_multipart(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
        _object: &ObjectRecord,
    ) -> Result<String, UpstreamError> {
        let mut s = self.state();
        s.next_upload += 1;
        let id = format!("upload-{}", s.next_upload);
        s.bucket(tenant, bucket)?
            .uploads
            .insert(id.clone(), (key.to_owned(), BTreeMap::new()));
        Ok(id)
    }

    async fn put_part(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
        upload_id: &str,
        index: usize,
        payload: PutPayload,
    ) -> Result<String, UpstreamError> {
        let bytes = whole(&payload);
        let etag = md5_hex(&bytes);
        self.state().upload(tenant, bucket, key, upload_id)?.insert(
            index,
            Object {
                bytes,
                etag: etag.clone(),
            },
        );
        Ok(etag)
    }

    async fn complete_multipart(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
        upload_id: &str,
        etags: Vec<String>,
    ) -> Result<(), UpstreamError> {
        let mut s = self.state();
        let parts = s.upload(tenant, bucket, key, upload_id)?;
        let mut bytes = Vec::new();
        let mut md5 = Md5::new();
        for (i, etag) in etags.iter().enumerate() {
            match parts.get(&i) {
                Some(p) if &p.etag == etag => {
                    bytes.extend_from_slice(&p.bytes);
                    md5.update(Md5::digest(&p.bytes));
                }
                _ => {
                    return Err(UpstreamError::Refused {
                        status: 400,
                        message: format!("InvalidPart: part {i} with ETag {etag}"),
                    });
                }
            }
        }
        let etag = format!("{}-{}", sluice_s3::blob::hex(&md5.finalize()), etags.len());
        s.bucket(tenant, bucket)?.uploads.remove(upload_id);
        s.completed_uploads += 1;
        s.set(
            tenant,
            bucket,
            key,
            Object {
                bytes: Bytes::from(bytes),
                etag,
            },
        );
        Ok(())
    }

    async fn abort_multipart(
        &self,
        tenant: &str,
        bucket: &str,
        _key: &str,
        upload_id: &str,
    ) -> Result<(), UpstreamError> {
        if let Ok(b) = self.state().bucket(tenant, bucket) {
            b.uploads.remove(upload_id);
        }
        Ok(())
    }

    async fn head(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
    ) -> Result<Option<Head>, UpstreamError> {
        // HEAD in a bucket that is not there is a 404 like any absent key.
        Ok(self.state().bucket(tenant, bucket).ok().and_then(|b| {
            b.objects.get(key).map(|o| Head {
                size: o.bytes.len() as u64,
                etag: o.etag.clone(),
            })
        }))
    }

    async fn delete(&self, tenant: &str, bucket: &str, key: &str) -> Result<(), UpstreamError> {
        let mut s = self.state();
        let Ok(b) = s.bucket(tenant, bucket) else {
            return Ok(());
        };
        let existed = b.objects.remove(key).is_some();
        s.events.push(Event::Delete {
            tenant: tenant.to_owned(),
            bucket: bucket.to_owned(),
            key: key.to_owned(),
            existed,
        });
        Ok(())
    }
}
