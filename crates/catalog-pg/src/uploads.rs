//! Multipart uploads in the shared catalog.

use sluice_meta::{
    MetaError, ObjectRecord, PartRecord, PartSpec, Precondition, Reservation, Result, UploadRecord,
    assemble_upload, next_version,
};

use crate::db::{Tx, TxError, TxResult};
use crate::escrow::Amount;
use crate::objects::{current, require_bucket, store};
use crate::{Inner, from_json, signed, to_json};

/// The upload `upload_id` for `key`, or `NoSuchUpload`.
fn upload(
    tx: &Tx<'_>,
    tenant: &str,
    bucket: &str,
    upload_id: &str,
    key: &str,
) -> TxResult<UploadRecord> {
    let rec: UploadRecord = tx
        .query_opt(
            "SELECT record FROM uploads WHERE tenant = $1 AND bucket = $2 AND upload_id = $3",
            &[
                &tenant.as_bytes(),
                &bucket.as_bytes(),
                &upload_id.as_bytes(),
            ],
        )?
        .map(|r| from_json(r.get(0)))
        .transpose()?
        .ok_or(TxError::Meta(MetaError::NoSuchUpload))?;
    if rec.key != key {
        return Err(TxError::Meta(MetaError::NoSuchUpload));
    }
    Ok(rec)
}

fn remove(tx: &Tx<'_>, tenant: &str, bucket: &str, upload_id: &str) -> TxResult<()> {
    tx.execute(
        "DELETE FROM uploads WHERE tenant = $1 AND bucket = $2 AND upload_id = $3",
        &[
            &tenant.as_bytes(),
            &bucket.as_bytes(),
            &upload_id.as_bytes(),
        ],
    )?;
    Ok(())
}

impl Inner {
    pub(crate) fn create_upload(
        &self,
        tenant: &str,
        bucket: &str,
        upload_id: &str,
        rec: &UploadRecord,
    ) -> Result<()> {
        let (_slot, slot) = self.slot();
        let ticket = self.prepare(
            tenant,
            Amount {
                bytes: 0,
                objects: 1,
            },
        );
        let result = self.db.write(|tx| {
            require_bucket(tx, tenant, bucket)?;
            self.charge_checked(tx, tenant, slot, 0, 1, &ticket)?;
            tx.execute(
                "INSERT INTO uploads (tenant, bucket, upload_id, record) VALUES ($1, $2, $3, $4)",
                &[
                    &tenant.as_bytes(),
                    &bucket.as_bytes(),
                    &upload_id.as_bytes(),
                    &to_json(rec)?,
                ],
            )?;
            Ok(())
        });
        self.settle(tenant, &ticket, result.is_ok());
        result?;
        self.committed();
        self.ledger.add(tenant, 0, 1);
        Ok(())
    }

    pub(crate) fn get_upload(
        &self,
        tenant: &str,
        bucket: &str,
        upload_id: &str,
        key: &str,
    ) -> Result<UploadRecord> {
        self.db.read(|tx| {
            require_bucket(tx, tenant, bucket)?;
            upload(tx, tenant, bucket, upload_id, key)
        })
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn put_part(
        &self,
        tenant: &str,
        bucket: &str,
        upload_id: &str,
        key: &str,
        number: u32,
        part: &PartRecord,
        reservation: Reservation,
    ) -> Result<Option<PartRecord>> {
        let size = part.size;
        let (_slot, slot) = self.slot();
        let ticket = self
            .prepare(
                tenant,
                Amount {
                    bytes: size,
                    objects: 0,
                },
            )
            .drawn_from(reservation.escrow());
        let result = self.db.write(|tx| {
            let mut rec = upload(tx, tenant, bucket, upload_id, key)?;
            let old = rec.parts.insert(number, part.clone());
            tx.execute(
                "UPDATE uploads SET record = $4
                 WHERE tenant = $1 AND bucket = $2 AND upload_id = $3",
                &[
                    &tenant.as_bytes(),
                    &bucket.as_bytes(),
                    &upload_id.as_bytes(),
                    &to_json(&rec)?,
                ],
            )?;
            let freed = old.as_ref().map_or(0, |p| p.size);
            self.charge_checked(tx, tenant, slot, signed(size) - signed(freed), 0, &ticket)?;
            Ok(old)
        });
        self.settle(tenant, &ticket, result.is_ok());
        let old = result?;
        self.committed();
        reservation.settle(size, old.as_ref().map_or(0, |p| p.size));
        Ok(old)
    }

    /// [`sluice_meta::Engine::complete_upload_if`].
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn complete_upload_if(
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
        let (_slot, slot) = self.slot();
        let (object, replaced, unused, freed) = self.db.write(|tx| {
            require_bucket(tx, tenant, bucket)?;
            let mut up = upload(tx, tenant, bucket, upload_id, key)?;
            let mut object = assemble_upload(&mut up, parts, now_ms)?;
            if let Some(m) = metadata {
                object.metadata = m.clone();
            }
            let replaced = current(tx, tenant, bucket, key)?;
            cond.check(replaced.as_ref())?;
            object.version = next_version(replaced.as_ref().map(|o| o.version));
            remove(tx, tenant, bucket, upload_id)?;
            store(tx, tenant, bucket, key, &object, None)?;
            let unused: Vec<PartRecord> = std::mem::take(&mut up.parts).into_values().collect();
            let freed = unused.iter().map(|p| p.size).sum::<u64>()
                + replaced.as_ref().map_or(0, |o| o.size);
            // The upload becomes the object: one fewer only if it replaced one.
            self.charge(
                tx,
                tenant,
                slot,
                -signed(freed),
                -i64::from(replaced.is_some()),
            )?;
            let unused: Vec<String> = unused.into_iter().map(|p| p.blob).collect();
            Ok((object, replaced, unused, freed))
        })?;
        self.committed();
        self.ledger
            .free(tenant, freed, u64::from(replaced.is_some()));
        Ok((object, replaced, unused))
    }

    pub(crate) fn abort_upload(
        &self,
        tenant: &str,
        bucket: &str,
        upload_id: &str,
        key: &str,
    ) -> Result<Vec<String>> {
        let (_slot, slot) = self.slot();
        let rec = self.db.write(|tx| {
            require_bucket(tx, tenant, bucket)?;
            let rec = upload(tx, tenant, bucket, upload_id, key)?;
            remove(tx, tenant, bucket, upload_id)?;
            self.charge(tx, tenant, slot, -signed(rec.bytes()), -1)?;
            Ok(rec)
        })?;
        self.committed();
        self.ledger.free(tenant, rec.bytes(), 1);
        Ok(rec.parts.into_values().map(|p| p.blob).collect())
    }

    pub(crate) fn list_uploads(
        &self,
        tenant: &str,
        bucket: &str,
    ) -> Result<Vec<(String, UploadRecord)>> {
        let mut out = self.db.read(|tx| {
            require_bucket(tx, tenant, bucket)?;
            let mut out = Vec::new();
            for row in tx.query(
                "SELECT upload_id, record FROM uploads WHERE tenant = $1 AND bucket = $2",
                &[&tenant.as_bytes(), &bucket.as_bytes()],
            )? {
                let id: &[u8] = row.get(0);
                let rec: UploadRecord = from_json(row.get(1))?;
                out.push((String::from_utf8_lossy(id).into_owned(), rec));
            }
            Ok(out)
        })?;
        out.sort_by(|a, b| (&a.1.key, &a.0).cmp(&(&b.1.key, &b.0)));
        Ok(out)
    }
}
