//! The catalog: buckets, objects, uploads and durable usage, in one redb file.
//!
//! Every mutation is one write transaction that also moves the tenant's durable usage
//! (table `usage`) and, after commit, the in-memory [`Ledger`]. Reads use snapshot read
//! transactions and never block writers.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::Bound;
use std::path::Path;

use md5::{Digest, Md5};
use std::sync::{Condvar, Mutex, PoisonError};

use redb::{Database, Durability, ReadableDatabase, ReadableTable, TableDefinition};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::keys;
use crate::record::{Precondition, decode_object, decode_object_with_body, encode_object, to_json};
use crate::{
    Change, CommitHook, Ledger, MetaError, ObjectRecord, PartRecord, Reservation, Result, Segment,
    UploadRecord,
};
use std::sync::Arc;

const BUCKETS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("buckets");
const OBJECTS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("objects");
const UPLOADS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("uploads");
const USAGE: TableDefinition<&str, u64> = TableDefinition::new("usage");

/// S3's minimum size for every part but the last.
pub const MIN_PART_SIZE: u64 = 5 * 1024 * 1024;

#[derive(Debug, Serialize, Deserialize)]
struct BucketRecord {
    created_ms: i64,
}

fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T> {
    serde_json::from_slice(bytes).map_err(|e| MetaError::Corrupt(e.to_string()))
}

/// One entry of a listing page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    Object(String, ObjectRecord),
    /// A common prefix (ends with the delimiter).
    Prefix(String),
}

impl Entry {
    pub fn name(&self) -> &str {
        match self {
            Self::Object(k, _) | Self::Prefix(k) => k,
        }
    }
}

/// What to list: keys starting with `prefix`, strictly after `after`, rolled up at
/// `delimiter`, at most `max` entries.
#[derive(Debug, Clone, Default)]
pub struct ListQuery<'a> {
    pub prefix: &'a str,
    pub delimiter: Option<&'a str>,
    pub after: Option<&'a str>,
    pub max: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListPage {
    pub entries: Vec<Entry>,
    /// More entries follow; resume with `after` = the last entry's name.
    pub truncated: bool,
}

/// A part named in CompleteMultipartUpload.
#[derive(Debug, Clone)]
pub struct PartSpec {
    pub number: u32,
    /// The part's ETag as the client sent it (quotes allowed).
    pub etag: String,
}

/// What start-up reconciliation found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ReconcileReport {
    /// Tenants whose stored usage differed from the catalog: `(tenant, stored, actual)`.
    pub usage_fixed: Vec<(String, u64, u64)>,
}

/// The gateway catalog and its quota ledger.
pub struct Catalog {
    db: Database,
    ledger: Ledger,
    group: GroupCommit,
    hook: Option<Arc<dyn CommitHook>>,
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

impl Catalog {
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
        }
        txn.commit()?;
        let catalog = Self {
            db,
            ledger: Ledger::default(),
            group: GroupCommit::default(),
            hook: None,
        };
        let report = catalog.recompute_usage()?;
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

    /// Makes `rec` the object at `key`, settling `reservation` into usage. `body` is the
    /// object's bytes when it is inline (`rec.inline`, no segments), stored in the same
    /// transaction and so durable with it; `None` when its bytes are in blobs. Returns the
    /// object it replaced, whose blobs the caller deletes.
    pub fn put_object(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
        rec: &ObjectRecord,
        body: Option<&[u8]>,
        reservation: Reservation,
    ) -> Result<Option<ObjectRecord>> {
        self.put_object_if(
            tenant,
            bucket,
            key,
            rec,
            body,
            reservation,
            &Precondition::None,
        )
    }

    /// [`Catalog::put_object`] if the object at `key` satisfies `cond`, decided in the write
    /// transaction that replaces it: writers are serial, so of concurrent create-only puts of
    /// one key exactly one succeeds. On [`MetaError::PreconditionFailed`] nothing changed and
    /// the reservation is released; the caller deletes `rec`'s blobs as after any failure.
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
    ) -> Result<Option<ObjectRecord>> {
        let value = encode_object(rec, body)?;
        let txn = self.begin()?;
        let (old, slot) = {
            require_bucket(&txn, tenant, bucket)?;
            let mut t = txn.open_table(OBJECTS)?;
            let k = keys::entry(tenant, bucket, key);
            cond.check_at(&t, &k)?;
            let old = t
                .insert(k.as_slice(), value.as_slice())?
                .map(|v| decode_object(v.value()))
                .transpose()?;
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
                    object: rec,
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
        Ok(old)
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

    /// Turns an upload into an object made of the listed parts. Returns the object, the
    /// object it replaced (if any) and the blobs of parts uploaded but not listed; the caller
    /// deletes the blobs of the latter two.
    pub fn complete_upload(
        &self,
        tenant: &str,
        bucket: &str,
        upload_id: &str,
        key: &str,
        parts: &[PartSpec],
        now_ms: i64,
    ) -> Result<(ObjectRecord, Option<ObjectRecord>, Vec<String>)> {
        self.complete_upload_if(
            tenant,
            bucket,
            upload_id,
            key,
            parts,
            now_ms,
            &Precondition::None,
        )
    }

    /// [`Catalog::complete_upload`] if the object at `key` satisfies `cond`, decided in the
    /// transaction that completes it. On [`MetaError::PreconditionFailed`] nothing changed:
    /// the upload stays in progress (S3 lets the client retry or abort it).
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
            let object = assemble(&mut upload, parts, now_ms)?;
            let value = encode_object(&object, None)?;
            let mut objects = txn.open_table(OBJECTS)?;
            cond.check_at(&objects, &keys::entry(tenant, bucket, key))?;
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

impl Catalog {
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

/// Builds the object from the listed parts (removing them from `upload`), checking order,
/// ETags and the minimum part size. Its ETag is the MD5 of the parts' binary MD5s, `-N`.
fn assemble(upload: &mut UploadRecord, parts: &[PartSpec], now_ms: i64) -> Result<ObjectRecord> {
    if parts.is_empty() {
        return Err(MetaError::InvalidPart(0));
    }
    if parts.windows(2).any(|w| w[1].number <= w[0].number) {
        return Err(MetaError::InvalidPartOrder);
    }
    for (i, p) in parts.iter().enumerate() {
        let stored = upload
            .parts
            .get(&p.number)
            .ok_or(MetaError::InvalidPart(p.number))?;
        if p.etag.trim_matches('"') != stored.etag {
            return Err(MetaError::InvalidPart(p.number));
        }
        if i + 1 < parts.len() && stored.size < MIN_PART_SIZE {
            return Err(MetaError::EntityTooSmall(p.number));
        }
    }
    let mut md5 = Md5::new();
    let mut segments = Vec::with_capacity(parts.len());
    let mut size = 0;
    for p in parts {
        let part = upload
            .parts
            .remove(&p.number)
            .ok_or(MetaError::InvalidPart(p.number))?;
        let digest =
            hex_decode(&part.etag).ok_or_else(|| MetaError::Corrupt("part etag".into()))?;
        md5.update(&digest);
        size += part.size;
        if part.size > 0 {
            segments.push(Segment {
                blob: part.blob,
                size: part.size,
            });
        } else {
            // An empty part has no bytes to serve; keep its blob for deletion.
            upload.parts.insert(p.number, part);
        }
    }
    let etag = format!("{}-{}", hex(&md5.finalize()), parts.len());
    Ok(ObjectRecord {
        size,
        etag,
        last_modified_ms: now_ms,
        content_type: upload.content_type.clone(),
        headers: upload.headers.clone(),
        metadata: upload.metadata.clone(),
        segments,
        inline: false,
        parts: u32::try_from(parts.len()).unwrap_or(u32::MAX),
    })
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

fn hex_decode(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests;
