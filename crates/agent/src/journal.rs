//! The drain journal: what the node holds that the shared tier does not have yet, in the
//! order clients wrote it.
//!
//! # Format
//!
//! Tables in the agent's catalog file (one redb database, so a journal entry and the catalog
//! change it describes commit in one transaction):
//! - `drain_ops`: sequence number → [`Op`]. Every visible change (object put — including a
//!   copy or a completed multipart upload —, object delete, bucket create/delete) gets the
//!   next number in the transaction that makes it visible ([`JournalHook`]), so drain order
//!   is write order. An op leaves the table when it is durable upstream, or when a newer op
//!   for the same key supersedes it (the newer one inherits its `chain_start`).
//! - `drain_latest`: key → the sequence number of its newest live op (tombstones for reads).
//! - `drain_durable`: key → the record of the local copy verified upstream (size, ETag,
//!   checksum): the only local copies eviction may delete.
//! - `drain_markers`: tenant → commit markers durable upstream, newest last ("durable up to").
//! - `drain_aborts`: upstream multipart uploads of superseded ops, to abort.
//!
//! # Ordering invariants
//!
//! 1. Ops on one key reach upstream in sequence order, one at a time (the drain never runs
//!    two ops of a key at once, and a superseded op is never started again).
//! 2. A delete (and a bucket deletion) starts only when every op of its tenant with a lower
//!    sequence number is durable or superseded: deletes reach the shared tier in order with
//!    the writes before them.
//! 3. A commit marker `m` under prefix `P` (its key up to the last `/`) starts only when no
//!    live op under `P` in the same bucket has a lower sequence number, and no live non-marker
//!    put under `P` continues a chain that started before `m` (a shard rewritten after the
//!    marker was written still belongs to the checkpoint). A marker that arrives as a copy is
//!    a put like any other. So the shared tier never shows a marker before its checkpoint.
//!    Markers wait only on lower sequence numbers or on non-marker puts, and those wait on
//!    nothing, so the waits cannot form a cycle.
//!
//! # Crash model
//!
//! An op is created in the catalog transaction that acknowledges the write (redb durable
//! commit, after the blob's fsync; an inline object's bytes are in that same transaction). Upload progress (multipart upload id, then each part's
//! ETag and checksum) is committed before the drain relies on it, so after a kill -9 an
//! upload resumes with the parts not yet recorded; a part sent but not recorded is sent
//! again (S3 replaces a part by number). Completion is idempotent: an op is marked durable
//! only after a HEAD upstream shows the expected size and ETag, and a completion that fails
//! because the upload is already complete is resolved by that same HEAD.
//!
//! The catalog group-commits (transactions commit in memory, then one fsync covers many;
//! no writer is answered before its commit is durable). The drain may therefore read an op
//! in the moment between its commit and that fsync; if the node dies just then, the write was
//! never acknowledged and the shared tier may hold it whole, as after a PUT whose response was
//! lost — never in part, and never a marker before its checkpoint (the lost ops are the
//! newest, and everything a marker waits for has lower sequence numbers).

use std::collections::{BTreeMap, HashSet};
use std::ops::Bound;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sluice_meta::redb::{self, ReadableDatabase, ReadableTable, TableDefinition};
use sluice_meta::{Change, CommitHook, MetaError, ObjectRecord};

use crate::AgentError;
use sluice_store::{Checksums, Crc};

const OPS: TableDefinition<u64, &[u8]> = TableDefinition::new("drain_ops");
const LATEST: TableDefinition<&[u8], u64> = TableDefinition::new("drain_latest");
const DURABLE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("drain_durable");
const MARKERS: TableDefinition<&str, &[u8]> = TableDefinition::new("drain_markers");
const ABORTS: TableDefinition<u64, &[u8]> = TableDefinition::new("drain_aborts");
const META: TableDefinition<&str, u64> = TableDefinition::new("drain_meta");

/// Markers remembered per tenant for status and retention.
const MARKERS_KEPT: usize = 64;

/// One change to carry upstream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Op {
    pub seq: u64,
    pub tenant: String,
    pub bucket: String,
    pub key: String,
    pub kind: OpKind,
    /// The lowest sequence number of the chain of ops on this key this one superseded
    /// (its own when it superseded none).
    pub chain_start: u64,
    pub marker: bool,
    /// Wall-clock milliseconds when the write was acknowledged.
    pub enqueued_ms: i64,
    #[serde(default)]
    pub upload: Option<UploadProgress>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum OpKind {
    /// Upload `object` (its local segments, or its inline body in the catalog) to `key`.
    /// `crc` is the whole body's checksum computed on the way in (`None` only for multipart
    /// uploads begun before a restart; the drain then computes it from the local bytes).
    /// The op holds the record, never inline bytes: an op is live only while its object is
    /// the one at `key`, so the drain reads the body from the catalog.
    Put {
        object: ObjectRecord,
        crc: Option<Crc>,
    },
    Delete,
    CreateBucket,
    DeleteBucket,
}

/// An upstream multipart upload in progress.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UploadProgress {
    pub upload_id: String,
    pub part_size: u64,
    /// Completed parts by index (0-based): upstream ETag (hex MD5) and checksum.
    pub parts: BTreeMap<u32, DonePart>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DonePart {
    pub etag: String,
    pub crc: Crc,
}

/// A local copy verified durable upstream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DurableCopy {
    pub object: ObjectRecord,
    pub marker: bool,
    pub durable_ms: i64,
}

/// A commit marker durable upstream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DurableMarker {
    pub bucket: String,
    pub prefix: String,
    pub key: String,
    pub durable_ms: i64,
}

/// An upstream multipart upload to abort.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingAbort {
    pub tenant: String,
    pub bucket: String,
    pub key: String,
    pub upload_id: String,
}

fn encode<T: Serialize>(v: &T) -> Vec<u8> {
    serde_json::to_vec(v).unwrap_or_default()
}

fn decode<T: for<'de> Deserialize<'de>>(bytes: &[u8]) -> Result<T, MetaError> {
    serde_json::from_slice(bytes).map_err(|e| MetaError::Corrupt(e.to_string()))
}

fn key_of(tenant: &str, bucket: &str, key: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(tenant.len() + bucket.len() + key.len() + 2);
    k.extend_from_slice(tenant.as_bytes());
    k.push(0);
    k.extend_from_slice(bucket.as_bytes());
    k.push(0);
    k.extend_from_slice(key.as_bytes());
    k
}

/// The directory of a key: everything up to and including its last `/` ("" at the top).
pub fn prefix_of(key: &str) -> &str {
    key.rfind('/').map_or("", |i| &key[..=i])
}

/// Does `key`'s file name match one of the tenant's commit-marker patterns?
pub fn is_marker(patterns: &[String], key: &str) -> bool {
    let name = key.rsplit('/').next().unwrap_or(key);
    patterns.iter().any(|p| match p.strip_prefix('*') {
        Some(suffix) => name.ends_with(suffix) && name.len() > suffix.len(),
        None => name == p,
    })
}

use sluice_meta::now_ms;

/// Appends ops in the catalog's transactions. Markers are classified with the tenant's
/// patterns at write time.
pub struct JournalHook {
    markers: std::sync::RwLock<BTreeMap<String, Vec<String>>>,
    sums: Arc<Checksums>,
    wake: Arc<tokio::sync::Notify>,
}

impl JournalHook {
    pub fn new(
        markers: BTreeMap<String, Vec<String>>,
        sums: Arc<Checksums>,
        wake: Arc<tokio::sync::Notify>,
    ) -> Self {
        Self {
            markers: std::sync::RwLock::new(markers),
            sums,
            wake,
        }
    }

    /// A configuration reload: the tenants' marker patterns, for writes from now on.
    pub fn set_markers(&self, markers: BTreeMap<String, Vec<String>>) {
        *self
            .markers
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = markers;
    }

    fn append(
        &self,
        txn: &redb::WriteTransaction,
        tenant: &str,
        bucket: &str,
        key: &str,
        kind: OpKind,
    ) -> Result<(), MetaError> {
        let mut meta = txn.open_table(META)?;
        let seq = meta.get("next_seq")?.map_or(1, |v| v.value());
        meta.insert("next_seq", seq + 1)?;
        let mut ops = txn.open_table(OPS)?;
        let mut latest = txn.open_table(LATEST)?;
        let lk = key_of(tenant, bucket, key);
        let mut chain_start = seq;
        let previous = latest.get(lk.as_slice())?.map(|v| v.value());
        if let Some(prev) = previous {
            let old = ops
                .remove(prev)?
                .map(|v| decode::<Op>(v.value()))
                .transpose()?;
            if let Some(old) = old {
                chain_start = old.chain_start;
                if let Some(u) = old.upload {
                    txn.open_table(ABORTS)?.insert(
                        old.seq,
                        encode(&PendingAbort {
                            tenant: old.tenant,
                            bucket: old.bucket,
                            key: old.key,
                            upload_id: u.upload_id,
                        })
                        .as_slice(),
                    )?;
                }
            }
        }
        if matches!(kind, OpKind::Put { .. } | OpKind::Delete) {
            txn.open_table(DURABLE)?.remove(lk.as_slice())?;
        }
        let marker = matches!(kind, OpKind::Put { .. })
            && self
                .markers
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .get(tenant)
                .is_some_and(|p| is_marker(p, key));
        let op = Op {
            seq,
            tenant: tenant.to_owned(),
            bucket: bucket.to_owned(),
            key: key.to_owned(),
            kind,
            chain_start,
            marker,
            enqueued_ms: now_ms(),
            upload: None,
        };
        ops.insert(seq, encode(&op).as_slice())?;
        latest.insert(lk.as_slice(), seq)?;
        self.wake.notify_one();
        Ok(())
    }

    /// The whole body's checksum: of the inline bytes committed with it, or combined from
    /// the checksums [`ChecksumStore`](sluice_store::ChecksumStore) took of its blobs.
    fn crc_of(&self, tenant: &str, object: &ObjectRecord, body: Option<&[u8]>) -> Option<Crc> {
        if object.inline {
            return body.map(Crc::of);
        }
        object.segments.iter().try_fold(Crc::default(), |acc, s| {
            self.sums
                .lookup(&format!("tenants/{tenant}/{}", s.blob))
                .filter(|c| c.len == s.size)
                .map(|c| acc.then(c))
        })
    }
}

impl CommitHook for JournalHook {
    fn on_commit(
        &self,
        txn: &redb::WriteTransaction,
        change: &Change<'_>,
    ) -> Result<(), MetaError> {
        match *change {
            Change::Put {
                tenant,
                bucket,
                key,
                object,
                body,
                ..
            } => {
                let crc = self.crc_of(tenant, object, body);
                let kind = OpKind::Put {
                    object: object.clone(),
                    crc,
                };
                self.append(txn, tenant, bucket, key, kind)
            }
            Change::Delete {
                tenant,
                bucket,
                key,
                ..
            } => self.append(txn, tenant, bucket, key, OpKind::Delete),
            Change::BucketCreated { tenant, bucket } => {
                self.append(txn, tenant, bucket, "", OpKind::CreateBucket)
            }
            Change::BucketDeleted { tenant, bucket } => {
                self.append(txn, tenant, bucket, "", OpKind::DeleteBucket)
            }
        }
    }
}

/// Reads and advances the journal (blocking: call from a blocking thread).
pub struct Journal {
    catalog: Arc<sluice_meta::Catalog>,
}

impl Journal {
    /// Opens the journal's tables in the catalog's database (creating them).
    pub fn open(catalog: Arc<sluice_meta::Catalog>) -> Result<Self, AgentError> {
        let txn = catalog.database().begin_write().map_err(MetaError::from)?;
        {
            txn.open_table(OPS).map_err(MetaError::from)?;
            txn.open_table(LATEST).map_err(MetaError::from)?;
            txn.open_table(DURABLE).map_err(MetaError::from)?;
            txn.open_table(MARKERS).map_err(MetaError::from)?;
            txn.open_table(ABORTS).map_err(MetaError::from)?;
            txn.open_table(META).map_err(MetaError::from)?;
        }
        txn.commit().map_err(MetaError::from)?;
        Ok(Self { catalog })
    }

    pub fn catalog(&self) -> &Arc<sluice_meta::Catalog> {
        &self.catalog
    }

    fn db(&self) -> &redb::Database {
        self.catalog.database()
    }

    /// Every live op, in sequence order.
    pub fn pending(&self) -> Result<Vec<Op>, MetaError> {
        let txn = self.db().begin_read()?;
        let t = txn.open_table(OPS)?;
        let mut out = Vec::new();
        for row in t.iter()? {
            let (_, v) = row?;
            out.push(decode(v.value())?);
        }
        Ok(out)
    }

    /// The live op `seq`, if it is still live.
    pub fn op(&self, seq: u64) -> Result<Option<Op>, MetaError> {
        let txn = self.db().begin_read()?;
        txn.open_table(OPS)?
            .get(seq)?
            .map(|v| decode(v.value()))
            .transpose()
    }

    /// Records upload progress of a live op; `false` if it was superseded meanwhile.
    pub fn set_upload(&self, seq: u64, upload: Option<UploadProgress>) -> Result<bool, MetaError> {
        let txn = self.db().begin_write()?;
        let live = {
            let mut t = txn.open_table(OPS)?;
            let op = t.get(seq)?.map(|v| decode::<Op>(v.value())).transpose()?;
            match op {
                None => false,
                Some(mut op) => {
                    op.upload = upload;
                    t.insert(seq, encode(&op).as_slice())?;
                    true
                }
            }
        };
        txn.commit()?;
        Ok(live)
    }

    /// Marks a live op done upstream: it leaves the journal; a put's local copy becomes
    /// evictable, a marker is remembered. `false` if it had been superseded.
    pub fn complete(&self, op: &Op) -> Result<bool, MetaError> {
        let txn = self.db().begin_write()?;
        {
            let mut ops = txn.open_table(OPS)?;
            if ops.remove(op.seq)?.is_none() {
                drop(ops);
                txn.abort()?;
                return Ok(false);
            }
            let lk = key_of(&op.tenant, &op.bucket, &op.key);
            let mut latest = txn.open_table(LATEST)?;
            if latest.get(lk.as_slice())?.map(|v| v.value()) == Some(op.seq) {
                latest.remove(lk.as_slice())?;
            }
            let now = now_ms();
            if let OpKind::Put { object, .. } = &op.kind {
                let copy = DurableCopy {
                    object: object.clone(),
                    marker: op.marker,
                    durable_ms: now,
                };
                txn.open_table(DURABLE)?
                    .insert(lk.as_slice(), encode(&copy).as_slice())?;
                if op.marker {
                    let mut markers = txn.open_table(MARKERS)?;
                    let mut list: Vec<DurableMarker> = markers
                        .get(op.tenant.as_str())?
                        .map(|v| decode(v.value()))
                        .transpose()?
                        .unwrap_or_default();
                    list.retain(|m| !(m.bucket == op.bucket && m.key == op.key));
                    list.push(DurableMarker {
                        bucket: op.bucket.clone(),
                        prefix: prefix_of(&op.key).to_owned(),
                        key: op.key.clone(),
                        durable_ms: now,
                    });
                    if list.len() > MARKERS_KEPT {
                        list.drain(..list.len() - MARKERS_KEPT);
                    }
                    markers.insert(op.tenant.as_str(), encode(&list).as_slice())?;
                }
            }
        }
        txn.commit()?;
        Ok(true)
    }

    /// The tenant's buckets deleted here whose deletion has not reached upstream yet.
    pub fn pending_bucket_deletes(&self, tenant: &str) -> Result<HashSet<String>, MetaError> {
        Ok(self
            .pending()?
            .into_iter()
            .filter(|o| o.tenant == tenant && o.kind == OpKind::DeleteBucket)
            .map(|o| o.bucket)
            .collect())
    }

    /// Is the newest op on this key a delete not yet applied upstream?
    pub fn pending_delete(&self, tenant: &str, bucket: &str, key: &str) -> Result<bool, MetaError> {
        let txn = self.db().begin_read()?;
        let latest = txn.open_table(LATEST)?;
        let Some(seq) = latest
            .get(key_of(tenant, bucket, key).as_slice())?
            .map(|v| v.value())
        else {
            return Ok(false);
        };
        let ops = txn.open_table(OPS)?;
        let op: Option<Op> = ops.get(seq)?.map(|v| decode(v.value())).transpose()?;
        Ok(op.is_some_and(|o| o.kind == OpKind::Delete))
    }

    /// Keys under `prefix` in a bucket whose newest op is a pending delete.
    pub fn pending_deletes_under(
        &self,
        tenant: &str,
        bucket: &str,
        prefix: &str,
    ) -> Result<Vec<String>, MetaError> {
        let txn = self.db().begin_read()?;
        let latest = txn.open_table(LATEST)?;
        let ops = txn.open_table(OPS)?;
        let start = key_of(tenant, bucket, prefix);
        let base = key_of(tenant, bucket, "").len();
        let mut out = Vec::new();
        for row in latest.range::<&[u8]>((Bound::Included(start.as_slice()), Bound::Unbounded))? {
            let (k, v) = row?;
            if !k.value().starts_with(&start) {
                break;
            }
            let op: Option<Op> = ops.get(v.value())?.map(|x| decode(x.value())).transpose()?;
            if op.is_some_and(|o| o.kind == OpKind::Delete) {
                out.push(String::from_utf8_lossy(&k.value()[base..]).into_owned());
            }
        }
        Ok(out)
    }

    /// Local copies verified upstream: `(tenant, bucket, key, copy)`.
    pub fn durable_copies(&self) -> Result<Vec<(String, String, String, DurableCopy)>, MetaError> {
        let txn = self.db().begin_read()?;
        let t = txn.open_table(DURABLE)?;
        let mut out = Vec::new();
        for row in t.iter()? {
            let (k, v) = row?;
            let mut parts = k.value().splitn(3, |b| *b == 0);
            let (Some(t), Some(b), Some(key)) = (parts.next(), parts.next(), parts.next()) else {
                continue;
            };
            out.push((
                String::from_utf8_lossy(t).into_owned(),
                String::from_utf8_lossy(b).into_owned(),
                String::from_utf8_lossy(key).into_owned(),
                decode(v.value())?,
            ));
        }
        Ok(out)
    }

    /// Forgets a durable local copy (it was evicted, or is gone).
    pub fn forget_durable(&self, tenant: &str, bucket: &str, key: &str) -> Result<(), MetaError> {
        let txn = self.db().begin_write()?;
        txn.open_table(DURABLE)?
            .remove(key_of(tenant, bucket, key).as_slice())?;
        txn.commit()?;
        Ok(())
    }

    /// The tenant's commit markers durable upstream, oldest first.
    pub fn markers(&self, tenant: &str) -> Result<Vec<DurableMarker>, MetaError> {
        let txn = self.db().begin_read()?;
        txn.open_table(MARKERS)?
            .get(tenant)?
            .map(|v| decode(v.value()))
            .transpose()
            .map(Option::unwrap_or_default)
    }

    /// Upstream uploads left by superseded ops.
    pub fn aborts(&self) -> Result<Vec<(u64, PendingAbort)>, MetaError> {
        let txn = self.db().begin_read()?;
        let t = txn.open_table(ABORTS)?;
        let mut out = Vec::new();
        for row in t.iter()? {
            let (k, v) = row?;
            out.push((k.value(), decode(v.value())?));
        }
        Ok(out)
    }

    pub fn abort_done(&self, id: u64) -> Result<(), MetaError> {
        let txn = self.db().begin_write()?;
        txn.open_table(ABORTS)?.remove(id)?;
        txn.commit()?;
        Ok(())
    }
}

/// Which live ops may start now (invariants 1–3 of the module doc), in sequence order.
/// `busy` says whether an op on the same key is in flight.
pub fn eligible<'a>(ops: &'a [Op], busy: &dyn Fn(&Op) -> bool) -> Vec<&'a Op> {
    let mut out = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        if busy(op) {
            continue;
        }
        let earlier = &ops[..i];
        let ok = match op.kind {
            OpKind::Delete | OpKind::DeleteBucket => !earlier.iter().any(|o| o.tenant == op.tenant),
            OpKind::CreateBucket => !earlier
                .iter()
                .any(|o| o.tenant == op.tenant && o.bucket == op.bucket),
            OpKind::Put { .. } => {
                // Nothing in a bucket goes up before the bucket does.
                let bucket_first = !earlier.iter().any(|o| {
                    o.tenant == op.tenant
                        && o.bucket == op.bucket
                        && matches!(o.kind, OpKind::CreateBucket)
                });
                bucket_first && (!op.marker || marker_ready(ops, op))
            }
        };
        if ok {
            out.push(op);
        }
    }
    out
}

fn marker_ready(ops: &[Op], m: &Op) -> bool {
    let prefix = prefix_of(&m.key);
    !ops.iter().any(|o| {
        o.seq != m.seq
            && o.tenant == m.tenant
            && o.bucket == m.bucket
            && o.key != m.key
            && o.key.starts_with(prefix)
            && (o.seq < m.seq
                || (!o.marker && matches!(o.kind, OpKind::Put { .. }) && o.chain_start < m.seq))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(seq: u64, key: &str, kind: OpKind, marker: bool) -> Op {
        Op {
            seq,
            tenant: "t".into(),
            bucket: "b".into(),
            key: key.into(),
            kind,
            chain_start: seq,
            marker,
            enqueued_ms: 0,
            upload: None,
        }
    }

    fn put() -> OpKind {
        OpKind::Put {
            object: ObjectRecord::default(),
            crc: None,
        }
    }

    fn seqs(ops: &[Op]) -> Vec<u64> {
        eligible(ops, &|_| false).iter().map(|o| o.seq).collect()
    }

    #[test]
    fn markers_match_names_and_suffixes() {
        let p: Vec<String> = sluice_config::DEFAULT_COMMIT_MARKERS
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        assert!(is_marker(&p, "run/step-1/.metadata"));
        assert!(!is_marker(&p, "run/step-1/.metadata.tmp"));
        assert!(is_marker(&p, "ckpt/latest_checkpointed_iteration.txt"));
        assert!(is_marker(&p, "x/step.commit"));
        assert!(!is_marker(&p, "x/.commit.bak"));
        assert_eq!(prefix_of("a/b/c"), "a/b/");
        assert_eq!(prefix_of("c"), "");
    }

    #[test]
    fn a_marker_waits_for_every_earlier_object_in_its_directory() {
        let ops = vec![
            op(1, "run/s1/__0_0.distcp", put(), false),
            op(2, "run/s1/__1_0.distcp", put(), false),
            op(3, "run/s1/.metadata", put(), true),
            op(4, "run/s2/__0_0.distcp", put(), false),
        ];
        assert_eq!(seqs(&ops), vec![1, 2, 4]);
        assert_eq!(seqs(&ops[2..]), vec![3, 4]);
    }

    #[test]
    fn a_marker_waits_for_a_shard_rewritten_after_it() {
        let mut rewritten = op(5, "run/s1/__0_0.distcp", put(), false);
        rewritten.chain_start = 1;
        let ops = vec![op(3, "run/s1/.metadata", put(), true), rewritten];
        assert_eq!(seqs(&ops), vec![5]);
    }

    #[test]
    fn deletes_wait_for_everything_before_them_and_markers_do_not_wait_for_later_deletes() {
        // DCP over S3: .metadata.tmp put (1), copied to .metadata (2), .metadata.tmp deleted
        // (3, superseding 1 so its chain starts at 1).
        let mut del = op(3, "run/s1/.metadata.tmp", OpKind::Delete, false);
        del.chain_start = 1;
        let ops = vec![
            op(0, "run/s1/__0_0.distcp", put(), false),
            op(2, "run/s1/.metadata", put(), true),
            del,
        ];
        assert_eq!(seqs(&ops), vec![0]);
        assert_eq!(seqs(&ops[1..]), vec![2]);
        assert_eq!(seqs(&ops[2..]), vec![3]);
    }

    #[test]
    fn two_markers_in_one_directory_do_not_deadlock() {
        let mut b2 = op(3, "d/b.commit", put(), true);
        b2.chain_start = 1;
        let ops = vec![op(2, "d/a.commit", put(), true), b2];
        assert_eq!(seqs(&ops), vec![2]);
    }

    #[test]
    fn busy_keys_are_skipped() {
        let ops = vec![op(1, "k", put(), false), op(2, "j", put(), false)];
        let started: Vec<u64> = eligible(&ops, &|o| o.key == "k")
            .iter()
            .map(|o| o.seq)
            .collect();
        assert_eq!(started, vec![2]);
    }
}
