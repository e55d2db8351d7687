//! Rebuild inserts and named leases in the embedded engine.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redb::ReadableTable;
use serde::{Deserialize, Serialize};

use super::{
    BUCKETS, BucketRecord, LEASES, OBJECTS, RedbCatalog, add_usage, decode, require_bucket,
};
use crate::keys;
use crate::record::{decode_object, encode_object, to_json};
use crate::{ObjectRecord, Result};

/// A named lease: who holds it and until when (milliseconds since the Unix epoch).
#[derive(Debug, Serialize, Deserialize)]
struct LeaseRecord {
    holder: String,
    expires_ms: u64,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl RedbCatalog {
    /// [`crate::Engine::restore_bucket`].
    pub fn restore_bucket(&self, tenant: &str, bucket: &str, created_ms: i64) -> Result<()> {
        let txn = self.begin()?;
        {
            let mut t = txn.open_table(BUCKETS)?;
            let k = keys::bucket(tenant, bucket);
            if t.get(k.as_slice())?.is_some() {
                drop(t);
                txn.abort()?;
                return Ok(());
            }
            t.insert(
                k.as_slice(),
                to_json(&BucketRecord { created_ms }).as_slice(),
            )?;
        }
        self.finish(txn)
    }

    /// [`crate::Engine::restore_object_with_body`].
    pub fn restore_object_with_body(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
        record: &ObjectRecord,
        body: Option<&[u8]>,
    ) -> Result<bool> {
        let value = encode_object(record, body)?;
        let txn = self.begin()?;
        let old = {
            require_bucket(&txn, tenant, bucket)?;
            let mut t = txn.open_table(OBJECTS)?;
            let k = keys::entry(tenant, bucket, key);
            let old = t
                .get(k.as_slice())?
                .map(|v| decode_object(v.value()))
                .transpose()?;
            if old.as_ref().is_some_and(|o| o.version >= record.version) {
                drop(t);
                txn.abort()?;
                return Ok(false);
            }
            t.insert(k.as_slice(), value.as_slice())?;
            add_usage(
                &txn,
                tenant,
                record.size,
                old.as_ref().map_or(0, |o| o.size),
            )?;
            old
        };
        self.finish(txn)?;
        if let Some(o) = &old {
            self.ledger.free(tenant, o.size, 0);
        }
        self.ledger
            .add(tenant, record.size, u64::from(old.is_none()));
        Ok(true)
    }

    /// [`crate::Engine::try_lease`]; the lease lives in the catalog's file.
    pub fn try_lease(&self, name: &str, holder: &str, ttl: Duration) -> Result<bool> {
        let now = now_ms();
        let txn = self.begin()?;
        {
            let mut t = txn.open_table(LEASES)?;
            let current: Option<LeaseRecord> =
                t.get(name)?.map(|v| decode(v.value())).transpose()?;
            if let Some(c) = current
                && c.holder != holder
                && c.expires_ms > now
            {
                drop(t);
                txn.abort()?;
                return Ok(false);
            }
            let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
            let lease = LeaseRecord {
                holder: holder.to_owned(),
                expires_ms: now.saturating_add(ttl_ms),
            };
            t.insert(name, to_json(&lease).as_slice())?;
        }
        self.finish(txn)?;
        Ok(true)
    }

    /// [`crate::Engine::lease_holder`].
    pub fn lease_holder(&self, name: &str) -> Result<Option<String>> {
        let txn = redb::ReadableDatabase::begin_read(self.database())?;
        let t = txn.open_table(LEASES)?;
        let current: Option<LeaseRecord> = t.get(name)?.map(|v| decode(v.value())).transpose()?;
        Ok(current
            .filter(|c| c.expires_ms > now_ms())
            .map(|c| c.holder))
    }

    /// [`crate::Engine::release_lease`].
    pub fn release_lease(&self, name: &str, holder: &str) -> Result<()> {
        let txn = self.begin()?;
        {
            let mut t = txn.open_table(LEASES)?;
            let current: Option<LeaseRecord> =
                t.get(name)?.map(|v| decode(v.value())).transpose()?;
            if current.is_none_or(|c| c.holder != holder) {
                drop(t);
                txn.abort()?;
                return Ok(());
            }
            t.remove(name)?;
        }
        self.finish(txn)
    }
}
