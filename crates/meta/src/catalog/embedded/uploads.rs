//! Multipart uploads in the embedded engine.

use redb::ReadableTable;

use super::{OBJECTS, RedbCatalog, UPLOADS, add_usage, decode, prefix_bounds, require_bucket};
use crate::catalog::{PartSpec, assemble_upload};
use crate::keys;
use crate::record::{Precondition, decode_object, encode_object, next_version, to_json};
use crate::{Change, MetaError, ObjectRecord, PartRecord, Reservation, Result, UploadRecord};

impl RedbCatalog {
    // ---- multipart uploads ---------------------------------------------------------------

    pub fn create_upload(
        &self,
        tenant: &str,
        bucket: &str,
        upload_id: &str,
        rec: &UploadRecord,
    ) -> Result<()> {
        let txn = self.begin()?;
        let slot = {
            require_bucket(&txn, tenant, bucket)?;
            let slot = self.ledger.take_object(tenant)?;
            txn.open_table(UPLOADS)?.insert(
                keys::entry(tenant, bucket, upload_id).as_slice(),
                to_json(rec).as_slice(),
            )?;
            slot
        };
        self.finish(txn)?;
        slot.keep();
        Ok(())
    }

    /// The upload `upload_id` for `key`, or `NoSuchUpload`.
    pub fn get_upload(
        &self,
        tenant: &str,
        bucket: &str,
        upload_id: &str,
        key: &str,
    ) -> Result<UploadRecord> {
        let txn = self.read_bucket(tenant, bucket)?;
        let t = txn.open_table(UPLOADS)?;
        let rec: UploadRecord = t
            .get(keys::entry(tenant, bucket, upload_id).as_slice())?
            .map(|v| decode(v.value()))
            .transpose()?
            .ok_or(MetaError::NoSuchUpload)?;
        if rec.key != key {
            return Err(MetaError::NoSuchUpload);
        }
        Ok(rec)
    }

    /// Records an uploaded part, settling its reservation. Returns the part it replaced.
    pub fn put_part(
        &self,
        tenant: &str,
        bucket: &str,
        upload_id: &str,
        key: &str,
        number: u32,
        part: PartRecord,
        reservation: Reservation,
    ) -> Result<Option<PartRecord>> {
        let txn = self.begin()?;
        let size = part.size;
        let old = {
            let mut t = txn.open_table(UPLOADS)?;
            let k = keys::entry(tenant, bucket, upload_id);
            let mut rec: UploadRecord = t
                .get(k.as_slice())?
                .map(|v| decode(v.value()))
                .transpose()?
                .ok_or(MetaError::NoSuchUpload)?;
            if rec.key != key {
                return Err(MetaError::NoSuchUpload);
            }
            let old = rec.parts.insert(number, part);
            t.insert(k.as_slice(), to_json(&rec).as_slice())?;
            add_usage(&txn, tenant, size, old.as_ref().map_or(0, |p| p.size))?;
            old
        };
        self.finish(txn)?;
        reservation.settle(size, old.as_ref().map_or(0, |p| p.size));
        Ok(old)
    }

    /// [`crate::Engine::complete_upload_if`].
    #[allow(clippy::too_many_arguments)]
    pub fn complete_upload_if(
        &self,
        tenant: &str,
        bucket: &str,
        upload_id: &str,
        key: &str,
        parts: &[PartSpec],
        now_ms: i64,
        cond: &Precondition,
        metadata: Option<&std::collections::BTreeMap<String, String>>,
    ) -> Result<(ObjectRecord, Option<ObjectRecord>, Vec<String>)> {
        let txn = self.begin()?;
        let (object, replaced, unused, freed) = {
            require_bucket(&txn, tenant, bucket)?;
            let mut uploads = txn.open_table(UPLOADS)?;
            let uk = keys::entry(tenant, bucket, upload_id);
            let mut upload: UploadRecord = uploads
                .get(uk.as_slice())?
                .map(|v| decode(v.value()))
                .transpose()?
                .ok_or(MetaError::NoSuchUpload)?;
            if upload.key != key {
                return Err(MetaError::NoSuchUpload);
            }
            let mut object = assemble_upload(&mut upload, parts, now_ms)?;
            if let Some(m) = metadata {
                object.metadata = m.clone();
            }
            let mut objects = txn.open_table(OBJECTS)?;
            let ok = keys::entry(tenant, bucket, key);
            let current = objects
                .get(ok.as_slice())?
                .map(|v| decode_object(v.value()))
                .transpose()?;
            cond.check(current.as_ref())?;
            object.version = next_version(current.as_ref().map(|o| o.version));
            let value = encode_object(&object, None)?;
            uploads.remove(uk.as_slice())?;
            let unused: Vec<PartRecord> = std::mem::take(&mut upload.parts).into_values().collect();
            let unused_bytes: u64 = unused.iter().map(|p| p.size).sum();
            let replaced = objects
                .insert(
                    keys::entry(tenant, bucket, key).as_slice(),
                    value.as_slice(),
                )?
                .map(|v| decode_object(v.value()))
                .transpose()?;
            let freed = unused_bytes + replaced.as_ref().map_or(0, |o| o.size);
            add_usage(&txn, tenant, 0, freed)?;
            self.notify(
                &txn,
                &Change::Put {
                    tenant,
                    bucket,
                    key,
                    object: &object,
                    body: None,
                    replaced: replaced.as_ref(),
                },
            )?;
            (
                object,
                replaced,
                unused.into_iter().map(|p| p.blob).collect(),
                freed,
            )
        };
        self.finish(txn)?;
        // The upload became the object: one fewer only if it replaced one.
        self.ledger
            .free(tenant, freed, u64::from(replaced.is_some()));
        Ok((object, replaced, unused))
    }

    /// Drops an upload and returns its part blobs for deletion.
    pub fn abort_upload(
        &self,
        tenant: &str,
        bucket: &str,
        upload_id: &str,
        key: &str,
    ) -> Result<Vec<String>> {
        let txn = self.begin()?;
        let rec = {
            require_bucket(&txn, tenant, bucket)?;
            let mut t = txn.open_table(UPLOADS)?;
            let k = keys::entry(tenant, bucket, upload_id);
            let rec: UploadRecord = t
                .get(k.as_slice())?
                .map(|v| decode(v.value()))
                .transpose()?
                .ok_or(MetaError::NoSuchUpload)?;
            if rec.key != key {
                return Err(MetaError::NoSuchUpload);
            }
            t.remove(k.as_slice())?;
            add_usage(&txn, tenant, 0, rec.bytes())?;
            rec
        };
        self.finish(txn)?;
        self.ledger.free(tenant, rec.bytes(), 1);
        Ok(rec.parts.into_values().map(|p| p.blob).collect())
    }

    /// The bucket's uploads in progress, sorted by (key, upload id).
    pub fn list_uploads(&self, tenant: &str, bucket: &str) -> Result<Vec<(String, UploadRecord)>> {
        let txn = self.read_bucket(tenant, bucket)?;
        let t = txn.open_table(UPLOADS)?;
        let prefix = keys::bucket_prefix(tenant, bucket);
        let end = keys::prefix_end(&prefix);
        let bounds = prefix_bounds(&prefix, end.as_deref());
        let mut out = Vec::new();
        for row in t.range::<&[u8]>(bounds)? {
            let (k, v) = row?;
            let id = String::from_utf8_lossy(&k.value()[prefix.len()..]).into_owned();
            out.push((id, decode::<UploadRecord>(v.value())?));
        }
        out.sort_by(|a, b| (&a.1.key, &a.0).cmp(&(&b.1.key, &b.0)));
        Ok(out)
    }
}
