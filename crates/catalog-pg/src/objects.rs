//! Buckets, objects and rebuild inserts in the shared catalog.

use sluice_meta::{
    MetaError, ObjectRecord, Precondition, Reservation, Result, encode_object, next_version,
};

use crate::db::{Tx, TxError, TxResult};
use crate::escrow::Amount;
use crate::{Inner, from_json, signed, to_json};

pub(crate) fn require_bucket(tx: &Tx<'_>, tenant: &str, bucket: &str) -> TxResult<()> {
    tx.query_opt(
        "SELECT 1 FROM buckets WHERE tenant = $1 AND name = $2",
        &[&tenant.as_bytes(), &bucket.as_bytes()],
    )?
    .map(drop)
    .ok_or(TxError::Meta(MetaError::NoSuchBucket))
}

/// The record at `key`, if any (its body not read).
pub(crate) fn current(
    tx: &Tx<'_>,
    tenant: &str,
    bucket: &str,
    key: &str,
) -> TxResult<Option<ObjectRecord>> {
    tx.query_opt(
        "SELECT record FROM objects WHERE tenant = $1 AND bucket = $2 AND key = $3",
        &[&tenant.as_bytes(), &bucket.as_bytes(), &key.as_bytes()],
    )?
    .map(|r| from_json(r.get(0)))
    .transpose()
}

/// Writes `rec` (and its inline body) at `key`.
pub(crate) fn store(
    tx: &Tx<'_>,
    tenant: &str,
    bucket: &str,
    key: &str,
    rec: &ObjectRecord,
    body: Option<&[u8]>,
) -> TxResult<()> {
    tx.execute(
        "INSERT INTO objects (tenant, bucket, key, record, body) VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (tenant, bucket, key) DO UPDATE
         SET record = excluded.record, body = excluded.body",
        &[
            &tenant.as_bytes(),
            &bucket.as_bytes(),
            &key.as_bytes(),
            &to_json(rec)?,
            &body,
        ],
    )?;
    Ok(())
}

/// Inserts `rec` (and its inline body) at `key` if nothing is there; returns whether it did.
fn insert_new(
    tx: &Tx<'_>,
    tenant: &str,
    bucket: &str,
    key: &str,
    rec: &ObjectRecord,
    body: Option<&[u8]>,
) -> TxResult<bool> {
    let n = tx.execute(
        "INSERT INTO objects (tenant, bucket, key, record, body) VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (tenant, bucket, key) DO NOTHING",
        &[
            &tenant.as_bytes(),
            &bucket.as_bytes(),
            &key.as_bytes(),
            &to_json(rec)?,
            &body,
        ],
    )?;
    Ok(n == 1)
}

/// A record and its body as stored, checked against each other.
pub(crate) fn decode(record: &[u8], has_body: bool) -> TxResult<ObjectRecord> {
    let rec: ObjectRecord = from_json(record)?;
    if rec.inline != has_body {
        return Err(TxError::Meta(MetaError::Corrupt(
            "object value: an inline record without its body, or a body without one".into(),
        )));
    }
    Ok(rec)
}

impl Inner {
    pub(crate) fn create_bucket(&self, tenant: &str, bucket: &str, now_ms: i64) -> Result<()> {
        let max = self.ledger.max_buckets(tenant);
        self.db.write(|tx| {
            if tx
                .query_opt(
                    "SELECT 1 FROM buckets WHERE tenant = $1 AND name = $2",
                    &[&tenant.as_bytes(), &bucket.as_bytes()],
                )?
                .is_some()
            {
                return Err(TxError::Meta(MetaError::BucketExists));
            }
            if max != u64::MAX {
                let owned: i64 = tx
                    .query_one(
                        "SELECT COUNT(*) FROM buckets WHERE tenant = $1",
                        &[&tenant.as_bytes()],
                    )?
                    .get(0);
                if crate::unsigned(owned) >= max {
                    return Err(TxError::Meta(MetaError::TooManyBuckets { max }));
                }
            }
            tx.execute(
                "INSERT INTO buckets (tenant, name, created_ms) VALUES ($1, $2, $3)",
                &[&tenant.as_bytes(), &bucket.as_bytes(), &now_ms],
            )?;
            Ok(())
        })?;
        self.committed();
        Ok(())
    }

    pub(crate) fn delete_bucket(&self, tenant: &str, bucket: &str) -> Result<Vec<String>> {
        let (_slot, slot) = self.slot();
        let (blobs, freed, aborted) = self.db.write(|tx| {
            require_bucket(tx, tenant, bucket)?;
            let k = (&tenant.as_bytes(), &bucket.as_bytes());
            if tx
                .query_opt(
                    "SELECT 1 FROM objects WHERE tenant = $1 AND bucket = $2 LIMIT 1",
                    &[k.0, k.1],
                )?
                .is_some()
            {
                return Err(TxError::Meta(MetaError::BucketNotEmpty));
            }
            let (mut blobs, mut freed, mut aborted) = (Vec::new(), 0u64, 0u64);
            for row in tx.query(
                "DELETE FROM uploads WHERE tenant = $1 AND bucket = $2 RETURNING record",
                &[k.0, k.1],
            )? {
                let rec: sluice_meta::UploadRecord = from_json(row.get(0))?;
                freed += rec.bytes();
                aborted += 1;
                blobs.extend(rec.parts.into_values().map(|p| p.blob));
            }
            tx.execute(
                "DELETE FROM buckets WHERE tenant = $1 AND name = $2",
                &[k.0, k.1],
            )?;
            self.charge(tx, tenant, slot, -signed(freed), -signed(aborted))?;
            Ok((blobs, freed, aborted))
        })?;
        self.committed();
        self.ledger.free(tenant, freed, aborted);
        Ok(blobs)
    }

    pub(crate) fn bucket_exists(&self, tenant: &str, bucket: &str) -> Result<bool> {
        Ok(self
            .db
            .read_one(
                "SELECT 1 FROM buckets WHERE tenant = $1 AND name = $2",
                &[&tenant.as_bytes(), &bucket.as_bytes()],
            )?
            .is_some())
    }

    pub(crate) fn list_buckets(&self, tenant: &str) -> Result<Vec<(String, i64)>> {
        self.db.read(|tx| {
            Ok(tx
                .query(
                    "SELECT name, created_ms FROM buckets WHERE tenant = $1 ORDER BY name",
                    &[&tenant.as_bytes()],
                )?
                .into_iter()
                .map(|r| {
                    let name: &[u8] = r.get(0);
                    (String::from_utf8_lossy(name).into_owned(), r.get(1))
                })
                .collect())
        })
    }

    /// The object at `key` (with its body when `with_body` and it is inline), or
    /// `NoSuchBucket`, from one statement outside a transaction block (one round trip).
    pub(crate) fn read_object(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
        with_body: bool,
    ) -> Result<Option<(ObjectRecord, Option<Vec<u8>>)>> {
        let sql = if with_body {
            "SELECT o.record, o.body IS NOT NULL, o.body FROM buckets b
             LEFT JOIN objects o ON o.tenant = b.tenant AND o.bucket = b.name AND o.key = $3
             WHERE b.tenant = $1 AND b.name = $2"
        } else {
            "SELECT o.record, o.body IS NOT NULL, NULL::BYTEA FROM buckets b
             LEFT JOIN objects o ON o.tenant = b.tenant AND o.bucket = b.name AND o.key = $3
             WHERE b.tenant = $1 AND b.name = $2"
        };
        let row = self
            .db
            .read_one(
                sql,
                &[&tenant.as_bytes(), &bucket.as_bytes(), &key.as_bytes()],
            )?
            .ok_or(MetaError::NoSuchBucket)?;
        let Some(record) = row.get::<_, Option<&[u8]>>(0) else {
            return Ok(None);
        };
        let rec = decode(record, row.get::<_, bool>(1)).map_err(TxError::into_meta)?;
        let body: Option<Vec<u8>> = row.get(2);
        Ok(Some((rec, body)))
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn put_object_if(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
        rec: &ObjectRecord,
        body: Option<&[u8]>,
        reservation: Reservation,
        cond: &Precondition,
    ) -> Result<(u64, Option<ObjectRecord>)> {
        // Refuse a record that contradicts its body before any round trip.
        encode_object(rec, body)?;
        let (_slot, slot) = self.slot();
        let ticket = self
            .prepare(
                tenant,
                Amount {
                    bytes: rec.size,
                    objects: 1,
                },
            )
            .drawn_from(reservation.escrow());
        let result = self.db.write(|tx| {
            require_bucket(tx, tenant, bucket)?;
            // A new key is inserted without reading it first: under SERIALIZABLE the read
            // of an absent key locks its index page, and concurrent commits inserting
            // neighbouring keys then failed each other's serialization (a quarter of the
            // commits retried at 16 writers). The insert reads nothing.
            let fresh = ObjectRecord {
                version: next_version(None),
                ..rec.clone()
            };
            if insert_new(tx, tenant, bucket, key, &fresh, body)? {
                cond.check(None)?;
                self.charge_checked(tx, tenant, slot, signed(fresh.size), 1, &ticket)?;
                return Ok((fresh.version, None));
            }
            let old = current(tx, tenant, bucket, key)?;
            cond.check(old.as_ref())?;
            let version = next_version(old.as_ref().map(|o| o.version));
            let rec = ObjectRecord {
                version,
                ..rec.clone()
            };
            store(tx, tenant, bucket, key, &rec, body)?;
            let freed = old.as_ref().map_or(0, |o| o.size);
            self.charge_checked(
                tx,
                tenant,
                slot,
                signed(rec.size) - signed(freed),
                i64::from(old.is_none()),
                &ticket,
            )?;
            Ok((version, old))
        });
        self.settle(tenant, &ticket, result.is_ok());
        let (version, old) = result?;
        self.committed();
        if old.is_none() {
            self.ledger.add(tenant, 0, 1);
        }
        reservation.settle(rec.size, old.as_ref().map_or(0, |o| o.size));
        Ok((version, old))
    }

    /// Deletes the object at `key`; with `expected`, only if it is exactly that record (an
    /// eviction). Returns what was deleted.
    pub(crate) fn delete_object(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
        expected: Option<&ObjectRecord>,
    ) -> Result<Option<ObjectRecord>> {
        let (_slot, slot) = self.slot();
        let old = self.db.write(|tx| {
            if expected.is_none() {
                require_bucket(tx, tenant, bucket)?;
            }
            let Some(old) = current(tx, tenant, bucket, key)? else {
                return Ok(None);
            };
            if expected.is_some_and(|e| *e != old) {
                return Ok(None);
            }
            tx.execute(
                "DELETE FROM objects WHERE tenant = $1 AND bucket = $2 AND key = $3",
                &[&tenant.as_bytes(), &bucket.as_bytes(), &key.as_bytes()],
            )?;
            self.charge(tx, tenant, slot, -signed(old.size), -1)?;
            Ok(Some(old))
        })?;
        if let Some(o) = &old {
            self.committed();
            self.ledger.free(tenant, o.size, 1);
        }
        Ok(old)
    }

    pub(crate) fn restore_bucket(&self, tenant: &str, bucket: &str, created_ms: i64) -> Result<()> {
        self.db.write(|tx| {
            tx.execute(
                "INSERT INTO buckets (tenant, name, created_ms) VALUES ($1, $2, $3)
                 ON CONFLICT (tenant, name) DO NOTHING",
                &[&tenant.as_bytes(), &bucket.as_bytes(), &created_ms],
            )?;
            Ok(())
        })
    }

    pub(crate) fn restore_object_with_body(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
        record: &ObjectRecord,
        body: Option<&[u8]>,
    ) -> Result<bool> {
        encode_object(record, body)?;
        let (_slot, slot) = self.slot();
        let outcome = self.db.write(|tx| {
            require_bucket(tx, tenant, bucket)?;
            let old = current(tx, tenant, bucket, key)?;
            if old.as_ref().is_some_and(|o| o.version >= record.version) {
                return Ok(None);
            }
            store(tx, tenant, bucket, key, record, body)?;
            let freed = old.as_ref().map_or(0, |o| o.size);
            self.charge(
                tx,
                tenant,
                slot,
                signed(record.size) - signed(freed),
                i64::from(old.is_none()),
            )?;
            Ok(Some(old))
        })?;
        let Some(old) = outcome else {
            return Ok(false);
        };
        self.committed();
        if let Some(o) = &old {
            self.ledger.free(tenant, o.size, 0);
        }
        self.ledger
            .add(tenant, record.size, u64::from(old.is_none()));
        Ok(true)
    }
}
