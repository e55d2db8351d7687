//! The embedded engine: the catalog in one redb file, private to one process.
//!
//! Every mutation is one write transaction that also moves the tenant's durable usage
//! (table `usage`) and, after commit, the in-memory [`Ledger`]. Reads use snapshot read
//! transactions and never block writers. Writers are serial (redb has one write transaction at
//! a time), so the ledger's object and bucket counts taken inside a transaction are exact.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::Bound;
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, PoisonError};

use redb::{Database, Durability, ReadableDatabase, ReadableTable, TableDefinition};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::{Entry, ListPage, ListQuery, ReconcileReport};
use crate::keys;
use crate::record::{
    Precondition, decode_object, decode_object_with_body, encode_object, next_version, to_json,
};
use crate::{
    Change, CommitHook, Ledger, MetaError, ObjectRecord, Reservation, Result, UploadRecord,
};

mod engine;
mod escrow;
mod restore;
mod tenants;
mod uploads;

const BUCKETS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("buckets");
const OBJECTS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("objects");
const UPLOADS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("uploads");
const USAGE: TableDefinition<&str, u64> = TableDefinition::new("usage");
const LEASES: TableDefinition<&str, &[u8]> = TableDefinition::new("leases");

#[derive(Debug, Serialize, Deserialize)]
struct BucketRecord {
    created_ms: i64,
}

fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T> {
    serde_json::from_slice(bytes).map_err(|e| MetaError::Corrupt(e.to_string()))
}

/// The embedded catalog and its quota ledger (see the module doc).
pub struct RedbCatalog {
    db: Database,
    ledger: Ledger,
    group: GroupCommit,
    hook: Option<Arc<dyn CommitHook>>,
    /// Serialises tenant changes' read-then-write (see `tenants`).
    tenants_lock: Mutex<()>,
}

/// Group commit: transactions commit in memory (`Durability::None`) and then wait until one
/// fsynced commit covers them. Whoever finds no sync in progress performs one (an empty
/// `Durability::Immediate` commit, which makes every earlier commit durable); the others wait
/// for it. A mutation returns only once it is durable, so concurrent writers share fsyncs
/// instead of queueing for one each. A reader may see a commit a moment before it is durable;
/// no writer is answered before it is.
#[derive(Default)]
struct GroupCommit {
    state: Mutex<GroupState>,
    synced: Condvar,
}

#[derive(Default)]
struct GroupState {
    committed: u64,
    durable: u64,
    syncing: bool,
}

impl RedbCatalog {
    /// Opens (or creates) the catalog, recomputes every tenant's usage from the objects and
    /// parts it references (fixing the stored figure if a crash left it stale), and loads the
    /// ledger with it.
    pub fn open(path: &Path) -> Result<(Self, ReconcileReport)> {
        let db = Database::create(path)?;
        let txn = db.begin_write()?;
        {
            txn.open_table(BUCKETS)?;
            txn.open_table(OBJECTS)?;
            txn.open_table(UPLOADS)?;
            txn.open_table(USAGE)?;
            txn.open_table(LEASES)?;
            txn.open_table(escrow::AGENT_ESCROW)?;
            txn.open_table(tenants::TENANTS)?;
            txn.open_table(tenants::TENANT_AUDIT)?;
        }
        txn.commit()?;
        let catalog = Self {
            db,
            ledger: Ledger::default(),
            group: GroupCommit::default(),
            hook: None,
            tenants_lock: Mutex::new(()),
        };
        let report = catalog.recompute_usage()?;
        catalog.load_escrow()?;
        Ok((catalog, report))
    }

    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    fn begin(&self) -> Result<redb::WriteTransaction> {
        let mut txn = self.db.begin_write()?;
        txn.set_durability(Durability::None)
            .map_err(|e| MetaError::Corrupt(e.to_string()))?;
        Ok(txn)
    }

    /// Commits `txn` and returns once it is durable (see [`GroupCommit`]).
    fn finish(&self, txn: redb::WriteTransaction) -> Result<()> {
        let seq = {
            let mut st = self
                .group
                .state
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            // Commit under the lock so that sequence numbers follow commit order.
            txn.commit()?;
            st.committed += 1;
            st.committed
        };
        let mut st = self
            .group
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        loop {
            if st.durable >= seq {
                return Ok(());
            }
            if st.syncing {
                st = self
                    .group
                    .synced
                    .wait(st)
                    .unwrap_or_else(PoisonError::into_inner);
                continue;
            }
            st.syncing = true;
            let target = st.committed;
            drop(st);
            let result = self.sync();
            st = self
                .group
                .state
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            st.syncing = false;
            if result.is_ok() {
                st.durable = st.durable.max(target);
            }
            self.group.synced.notify_all();
            result?;
        }
    }

    /// An empty durable commit: persists every earlier `Durability::None` commit.
    fn sync(&self) -> Result<()> {
        let mut txn = self.db.begin_write()?;
        txn.set_durability(Durability::Immediate)
            .map_err(|e| MetaError::Corrupt(e.to_string()))?;
        txn.commit()?;
        Ok(())
    }

    /// Installs `hook`, called inside every mutation's write transaction (see [`CommitHook`]).
    #[must_use]
    pub fn with_hook(mut self, hook: Arc<dyn CommitHook>) -> Self {
        self.hook = Some(hook);
        self
    }

    /// The redb database, for a hook's owner that keeps its own tables in the same file.
    pub fn database(&self) -> &Database {
        &self.db
    }

    fn notify(&self, txn: &redb::WriteTransaction, change: &Change<'_>) -> Result<()> {
        match &self.hook {
            Some(h) => h.on_commit(txn, change),
            None => Ok(()),
        }
    }

    /// Removes the object at `key` only if it is still exactly `expected`, without telling
    /// the hook: the node agent evicts its local copy of an object that is durable elsewhere,
    /// which is not a delete clients asked for. Returns whether it was removed.
    pub fn evict_object(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
        expected: &ObjectRecord,
    ) -> Result<bool> {
        let txn = self.begin()?;
        {
            let mut t = txn.open_table(OBJECTS)?;
            let k = keys::entry(tenant, bucket, key);
            let current = t
                .get(k.as_slice())?
                .map(|v| decode_object(v.value()))
                .transpose()?;
            if current.as_ref() != Some(expected) {
                drop(t);
                txn.abort()?;
                return Ok(false);
            }
            t.remove(k.as_slice())?;
            add_usage(&txn, tenant, 0, expected.size)?;
        }
        self.finish(txn)?;
        self.ledger.free(tenant, expected.size, 1);
        Ok(true)
    }

    fn recompute_usage(&self) -> Result<ReconcileReport> {
        let mut actual: BTreeMap<String, u64> = BTreeMap::new();
        let mut counts: BTreeMap<String, u64> = BTreeMap::new();
        let txn = self.begin()?;
        let mut report = ReconcileReport::default();
        {
            for row in txn.open_table(OBJECTS)?.iter()? {
                let (k, v) = row?;
                let (tenant, _) = keys::split_tenant(k.value())
                    .ok_or_else(|| MetaError::Corrupt("object key".into()))?;
                let rec = decode_object(v.value())?;
                *actual.entry(tenant.to_owned()).or_default() += rec.size;
                *counts.entry(tenant.to_owned()).or_default() += 1;
            }
            for row in txn.open_table(UPLOADS)?.iter()? {
                let (k, v) = row?;
                let (tenant, _) = keys::split_tenant(k.value())
                    .ok_or_else(|| MetaError::Corrupt("upload key".into()))?;
                let rec: UploadRecord = decode(v.value())?;
                *actual.entry(tenant.to_owned()).or_default() += rec.bytes();
                *counts.entry(tenant.to_owned()).or_default() += 1;
            }
            let mut usage = txn.open_table(USAGE)?;
            let stored: Vec<(String, u64)> = usage
                .iter()?
                .map(|r| r.map(|(k, v)| (k.value().to_owned(), v.value())))
                .collect::<std::result::Result<_, _>>()?;
            for (tenant, was) in &stored {
                if !actual.contains_key(tenant) {
                    actual.insert(tenant.clone(), 0);
                    if *was != 0 {
                        report.usage_fixed.push((tenant.clone(), *was, 0));
                    }
                }
            }
            for (tenant, bytes) in &actual {
                let was = stored
                    .iter()
                    .find(|(t, _)| t == tenant)
                    .map_or(0, |(_, v)| *v);
                if was != *bytes {
                    if was != 0 || *bytes != 0 {
                        report.usage_fixed.push((tenant.clone(), was, *bytes));
                    }
                    usage.insert(tenant.as_str(), *bytes)?;
                }
            }
        }
        self.finish(txn)?;
        for (tenant, bytes) in actual {
            let objects = counts.get(&tenant).copied().unwrap_or(0);
            self.ledger.set_used(&tenant, bytes, objects);
        }
        report.usage_fixed.sort();
        report.usage_fixed.dedup();
        Ok(report)
    }

    /// Every blob the catalog references, per tenant.
    pub fn referenced_blobs(&self) -> Result<HashMap<String, HashSet<String>>> {
        let txn = self.db.begin_read()?;
        let mut out: HashMap<String, HashSet<String>> = HashMap::new();
        for row in txn.open_table(OBJECTS)?.iter()? {
            let (k, v) = row?;
            let (tenant, _) = keys::split_tenant(k.value())
                .ok_or_else(|| MetaError::Corrupt("object key".into()))?;
            let rec = decode_object(v.value())?;
            out.entry(tenant.to_owned())
                .or_default()
                .extend(rec.blobs().map(str::to_owned));
        }
        for row in txn.open_table(UPLOADS)?.iter()? {
            let (k, v) = row?;
            let (tenant, _) = keys::split_tenant(k.value())
                .ok_or_else(|| MetaError::Corrupt("upload key".into()))?;
            let rec: UploadRecord = decode(v.value())?;
            out.entry(tenant.to_owned())
                .or_default()
                .extend(rec.parts.values().map(|p| p.blob.clone()));
        }
        Ok(out)
    }

    // ---- buckets -------------------------------------------------------------------------

    pub fn create_bucket(&self, tenant: &str, bucket: &str, now_ms: i64) -> Result<()> {
        let txn = self.begin()?;
        {
            let mut t = txn.open_table(BUCKETS)?;
            let k = keys::bucket(tenant, bucket);
            if t.get(k.as_slice())?.is_some() {
                return Err(MetaError::BucketExists);
            }
            let max = self.ledger.max_buckets(tenant);
            if max != u64::MAX {
                // Counted up to the limit only.
                let prefix = keys::tenant_prefix(tenant);
                let end = keys::prefix_end(&prefix);
                let limit = usize::try_from(max).unwrap_or(usize::MAX);
                let owned = t.range::<&[u8]>(prefix_bounds(&prefix, end.as_deref()))?;
                if owned.take(limit).count() == limit {
                    return Err(MetaError::TooManyBuckets { max });
                }
            }
            t.insert(
                k.as_slice(),
                to_json(&BucketRecord { created_ms: now_ms }).as_slice(),
            )?;
            self.notify(&txn, &Change::BucketCreated { tenant, bucket })?;
        }
        self.finish(txn)?;
        Ok(())
    }

    /// Deletes an empty bucket, aborting its multipart uploads; returns their blobs.
    pub fn delete_bucket(&self, tenant: &str, bucket: &str) -> Result<Vec<String>> {
        let txn = self.begin()?;
        let mut blobs = Vec::new();
        let (mut freed, mut aborted) = (0, 0);
        {
            let mut buckets = txn.open_table(BUCKETS)?;
            let k = keys::bucket(tenant, bucket);
            if buckets.get(k.as_slice())?.is_none() {
                return Err(MetaError::NoSuchBucket);
            }
            let prefix = keys::bucket_prefix(tenant, bucket);
            let end = keys::prefix_end(&prefix);
            let bounds = (
                Bound::Included(prefix.as_slice()),
                end.as_deref().map_or(Bound::Unbounded, Bound::Excluded),
            );
            if txn
                .open_table(OBJECTS)?
                .range::<&[u8]>(bounds)?
                .next()
                .is_some()
            {
                return Err(MetaError::BucketNotEmpty);
            }
            let mut uploads = txn.open_table(UPLOADS)?;
            let gone = uploads.extract_from_if::<&[u8], _>(bounds, |_, _| true)?;
            for row in gone {
                let (_, v) = row?;
                let rec: UploadRecord = decode(v.value())?;
                freed += rec.bytes();
                aborted += 1;
                blobs.extend(rec.parts.into_values().map(|p| p.blob));
            }
            buckets.remove(k.as_slice())?;
            add_usage(&txn, tenant, 0, freed)?;
            self.notify(&txn, &Change::BucketDeleted { tenant, bucket })?;
        }
        self.finish(txn)?;
        self.ledger.free(tenant, freed, aborted);
        Ok(blobs)
    }

    pub fn bucket_exists(&self, tenant: &str, bucket: &str) -> Result<bool> {
        let txn = self.db.begin_read()?;
        let t = txn.open_table(BUCKETS)?;
        Ok(t.get(keys::bucket(tenant, bucket).as_slice())?.is_some())
    }

    /// The tenant's buckets with their creation times, by name.
    pub fn list_buckets(&self, tenant: &str) -> Result<Vec<(String, i64)>> {
        let txn = self.db.begin_read()?;
        let t = txn.open_table(BUCKETS)?;
        let prefix = keys::tenant_prefix(tenant);
        let end = keys::prefix_end(&prefix);
        let bounds = prefix_bounds(&prefix, end.as_deref());
        let mut out = Vec::new();
        for row in t.range::<&[u8]>(bounds)? {
            let (k, v) = row?;
            let name = String::from_utf8_lossy(&k.value()[prefix.len()..]).into_owned();
            let rec: BucketRecord = decode(v.value())?;
            out.push((name, rec.created_ms));
        }
        Ok(out)
    }

    // ---- objects -------------------------------------------------------------------------

    pub fn get_object(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
    ) -> Result<Option<ObjectRecord>> {
        let txn = self.read_bucket(tenant, bucket)?;
        let t = txn.open_table(OBJECTS)?;
        t.get(keys::entry(tenant, bucket, key).as_slice())?
            .map(|v| decode_object(v.value()))
            .transpose()
    }

    /// The object at `key` with its body if it is inline (`None` when its bytes are in
    /// blobs), read from one snapshot.
    pub fn get_object_with_body(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
    ) -> Result<Option<(ObjectRecord, Option<Vec<u8>>)>> {
        let txn = self.read_bucket(tenant, bucket)?;
        let t = txn.open_table(OBJECTS)?;
        t.get(keys::entry(tenant, bucket, key).as_slice())?
            .map(|v| decode_object_with_body(v.value()))
            .transpose()
    }

    /// [`crate::Engine::put_object_if`]: writers are serial, so of concurrent create-only
    /// puts of one key exactly one succeeds.
    #[allow(clippy::too_many_arguments)]
    pub fn put_object_if(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
        rec: &ObjectRecord,
        body: Option<&[u8]>,
        reservation: Reservation,
        cond: &Precondition,
    ) -> Result<(u64, Option<ObjectRecord>)> {
        // Refuse a record that contradicts its body before opening a transaction.
        encode_object(rec, body)?;
        let mut rec = rec.clone();
        let txn = self.begin()?;
        let (old, slot) = {
            require_bucket(&txn, tenant, bucket)?;
            let mut t = txn.open_table(OBJECTS)?;
            let k = keys::entry(tenant, bucket, key);
            let old = t
                .get(k.as_slice())?
                .map(|v| decode_object(v.value()))
                .transpose()?;
            cond.check(old.as_ref())?;
            rec.version = next_version(old.as_ref().map(|o| o.version));
            let value = encode_object(&rec, body)?;
            t.insert(k.as_slice(), value.as_slice())?;
            // A new key is one more object; an overwrite is not.
            let slot = match old {
                None => Some(self.ledger.take_object(tenant)?),
                Some(_) => None,
            };
            add_usage(&txn, tenant, rec.size, old.as_ref().map_or(0, |o| o.size))?;
            self.notify(
                &txn,
                &Change::Put {
                    tenant,
                    bucket,
                    key,
                    object: &rec,
                    body,
                    replaced: old.as_ref(),
                },
            )?;
            (old, slot)
        };
        self.finish(txn)?;
        if let Some(slot) = slot {
            slot.keep();
        }
        reservation.settle(rec.size, old.as_ref().map_or(0, |o| o.size));
        Ok((rec.version, old))
    }

    /// Removes the object at `key` (if any) and returns it; the caller deletes its blobs.
    pub fn delete_object(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
    ) -> Result<Option<ObjectRecord>> {
        let txn = self.begin()?;
        let old = {
            require_bucket(&txn, tenant, bucket)?;
            let mut t = txn.open_table(OBJECTS)?;
            let old = t
                .remove(keys::entry(tenant, bucket, key).as_slice())?
                .map(|v| decode_object(v.value()))
                .transpose()?;
            if let Some(o) = &old {
                add_usage(&txn, tenant, 0, o.size)?;
            }
            self.notify(
                &txn,
                &Change::Delete {
                    tenant,
                    bucket,
                    key,
                    old: old.as_ref(),
                },
            )?;
            old
        };
        if old.is_none() && self.hook.is_none() {
            txn.abort()?;
            return Ok(None);
        }
        self.finish(txn)?;
        if let Some(o) = &old {
            self.ledger.free(tenant, o.size, 1);
        }
        Ok(old)
    }

    /// One page of a bucket listing, in key order.
    pub fn list_objects(&self, tenant: &str, bucket: &str, q: &ListQuery<'_>) -> Result<ListPage> {
        let txn = self.read_bucket(tenant, bucket)?;
        let t = txn.open_table(OBJECTS)?;
        let base = keys::bucket_prefix(tenant, bucket);
        let mut start_key = keys::entry(tenant, bucket, q.prefix);
        let end = keys::prefix_end(&start_key);
        let mut start_excluded = false;
        if let Some(after) = q.after {
            let a = keys::entry(tenant, bucket, after);
            if a >= start_key {
                start_key = a;
                start_excluded = true;
            }
        }
        let delimiter = q.delimiter.filter(|d| !d.is_empty());
        let mut entries = Vec::new();
        let mut truncated = false;
        'scan: loop {
            let lower = if start_excluded {
                Bound::Excluded(start_key.as_slice())
            } else {
                Bound::Included(start_key.as_slice())
            };
            let upper = end.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
            let mut jump = None;
            for row in t.range::<&[u8]>((lower, upper))? {
                let (k, v) = row?;
                let name = std::str::from_utf8(&k.value()[base.len()..])
                    .map_err(|e| MetaError::Corrupt(e.to_string()))?
                    .to_owned();
                if let Some(d) = delimiter
                    && let Some(pos) = name[q.prefix.len()..].find(d)
                {
                    let common = name[..q.prefix.len() + pos + d.len()].to_owned();
                    // A common prefix at or before the marker was returned on an earlier page.
                    if q.after.is_none_or(|a| common.as_str() > a) {
                        if entries.len() == q.max {
                            truncated = true;
                            break 'scan;
                        }
                        entries.push(Entry::Prefix(common.clone()));
                    }
                    jump = keys::prefix_end(&keys::entry(tenant, bucket, &common));
                    break;
                }
                if entries.len() == q.max {
                    truncated = true;
                    break 'scan;
                }
                entries.push(Entry::Object(name, decode_object(v.value())?));
            }
            match jump {
                Some(next) => {
                    start_key = next;
                    start_excluded = false;
                }
                None => break,
            }
        }
        Ok(ListPage { entries, truncated })
    }
}

impl RedbCatalog {
    /// A snapshot in which `bucket` exists, or `NoSuchBucket`.
    fn read_bucket(&self, tenant: &str, bucket: &str) -> Result<redb::ReadTransaction> {
        let txn = self.db.begin_read()?;
        if txn
            .open_table(BUCKETS)?
            .get(keys::bucket(tenant, bucket).as_slice())?
            .is_none()
        {
            return Err(MetaError::NoSuchBucket);
        }
        Ok(txn)
    }
}

/// The key range of everything starting with `prefix` (`end` = `keys::prefix_end(prefix)`).
fn prefix_bounds<'a>(
    prefix: &'a [u8],
    end: Option<&'a [u8]>,
) -> (Bound<&'a [u8]>, Bound<&'a [u8]>) {
    (
        Bound::Included(prefix),
        end.map_or(Bound::Unbounded, Bound::Excluded),
    )
}

fn require_bucket(txn: &redb::WriteTransaction, tenant: &str, bucket: &str) -> Result<()> {
    if txn
        .open_table(BUCKETS)?
        .get(keys::bucket(tenant, bucket).as_slice())?
        .is_none()
    {
        return Err(MetaError::NoSuchBucket);
    }
    Ok(())
}

fn add_usage(txn: &redb::WriteTransaction, tenant: &str, added: u64, freed: u64) -> Result<()> {
    if added == freed {
        return Ok(());
    }
    let mut t = txn.open_table(USAGE)?;
    let cur = t.get(tenant)?.map_or(0, |v| v.value());
    t.insert(tenant, cur.saturating_add(added).saturating_sub(freed))?;
    Ok(())
}
