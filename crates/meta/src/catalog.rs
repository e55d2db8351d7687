//! The catalog seam: buckets, objects, multipart uploads, durable usage and named leases,
//! behind one trait ([`Engine`]) with two engines.
//!
//! - [`RedbCatalog`] (this crate): one redb file on the gateway's (or node agent's) disk,
//!   private to one process. Every mutation is one write transaction that also moves the
//!   tenant's durable usage (table `usage`) and, after commit, the in-memory [`Ledger`];
//!   reads use snapshot transactions and never block writers.
//! - `sluice-catalog-pg` (its own crate, so that the node agent, which depends on this one,
//!   carries no PostgreSQL client): one database shared by every gateway of a deployment.
//!
//! Callers hold a [`Catalog`], a cheap clonable handle over `Arc<dyn Engine>` that
//! dereferences to the engine, so they call `catalog.put_object(...)` whatever the engine.
//! Every call blocks (on redb, or on a database round trip): make it from a blocking thread
//! (`tokio::task::spawn_blocking`), never from an async task.
//!
//! # The contract every engine keeps
//!
//! - An object becomes visible in the transaction that moves its tenant's usage and object
//!   count, so usage equals the bytes the catalog references, and a failed call changed
//!   nothing.
//! - Every committed object record carries a `version`, set by the engine inside the commit
//!   transaction to `max(previous.version + 1, now in microseconds)` for that key: monotonic per
//!   key, with no global counter. Rebuild and restore keep, of two records for one key, the
//!   one with the greater version.
//! - A mutation is durable before its call returns.

use std::collections::{HashMap, HashSet};
use std::ops::Deref;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::record::Precondition;
use crate::{Ledger, ObjectRecord, PartRecord, Reservation, Result, UploadRecord};

mod assemble;
mod embedded;

pub use assemble::assemble_upload;
pub use embedded::RedbCatalog;

/// S3's minimum size for every part but the last.
pub const MIN_PART_SIZE: u64 = 5 * 1024 * 1024;

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
/// A catalog engine. Every method blocks; call it from a blocking thread.
///
/// Names are validated by the caller (tenant ids, bucket names and object keys contain no
/// NUL). Errors are [`crate::MetaError`]s; a method that fails changes nothing.
pub trait Engine: Send + Sync {
    /// The in-memory quota ledger: where writers reserve before bytes move, and where
    /// tenants' quotas and limits are configured.
    fn ledger(&self) -> &Ledger;

    /// Whether other processes share this catalog (PostgreSQL: every gateway). A shared
    /// catalog does not know which backend blobs are another gateway's writes in progress,
    /// so start-up code must not delete "orphans" against it.
    fn is_shared(&self) -> bool;

    /// Every blob the catalog references, per tenant.
    fn referenced_blobs(&self) -> Result<HashMap<String, HashSet<String>>>;

    // ---- buckets ---------------------------------------------------------------------

    /// Creates a bucket, or fails with `BucketExists` or `TooManyBuckets` (the tenant's
    /// `max_buckets`, counted in the creating transaction).
    fn create_bucket(&self, tenant: &str, bucket: &str, now_ms: i64) -> Result<()>;

    /// Deletes an empty bucket, aborting its multipart uploads; returns their blobs.
    fn delete_bucket(&self, tenant: &str, bucket: &str) -> Result<Vec<String>>;

    fn bucket_exists(&self, tenant: &str, bucket: &str) -> Result<bool>;

    /// The tenant's buckets with their creation times, by name.
    fn list_buckets(&self, tenant: &str) -> Result<Vec<(String, i64)>>;

    // ---- objects ---------------------------------------------------------------------

    fn get_object(&self, tenant: &str, bucket: &str, key: &str) -> Result<Option<ObjectRecord>>;

    /// The object at `key` with its body if it is inline (`None` when its bytes are in
    /// blobs), read from one snapshot.
    fn get_object_with_body(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
    ) -> Result<Option<(ObjectRecord, Option<Vec<u8>>)>>;

    /// Makes `rec` the object at `key`, settling `reservation` into usage. `body` is the
    /// object's bytes when it is inline (`rec.inline`, no segments), stored in the same
    /// transaction; `None` when its bytes are in blobs. `rec.version` is ignored: the engine
    /// sets it in the commit transaction. Returns the version committed and the object it
    /// replaced, whose blobs the caller deletes.
    fn put_object(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
        rec: &ObjectRecord,
        body: Option<&[u8]>,
        reservation: Reservation,
    ) -> Result<(u64, Option<ObjectRecord>)> {
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

    /// [`Engine::put_object`] if the object at `key` satisfies `cond`, decided in the
    /// transaction that replaces it: of concurrent create-only puts of one key exactly one
    /// succeeds. On [`crate::MetaError::PreconditionFailed`] nothing changed and the
    /// reservation is released; the caller deletes `rec`'s blobs as after any failure.
    #[allow(clippy::too_many_arguments)]
    fn put_object_if(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
        rec: &ObjectRecord,
        body: Option<&[u8]>,
        reservation: Reservation,
        cond: &Precondition,
    ) -> Result<(u64, Option<ObjectRecord>)>;

    /// Removes the object at `key` (if any) and returns it; the caller deletes its blobs.
    fn delete_object(&self, tenant: &str, bucket: &str, key: &str) -> Result<Option<ObjectRecord>>;

    /// Removes the object at `key` only if it is still exactly `expected`, telling no hook:
    /// the node agent evicts its local copy of an object that is durable elsewhere, which is
    /// not a delete clients asked for. Returns whether it was removed.
    fn evict_object(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
        expected: &ObjectRecord,
    ) -> Result<bool>;

    /// One page of a bucket listing, in key order (by the keys' UTF-8 bytes).
    fn list_objects(&self, tenant: &str, bucket: &str, q: &ListQuery<'_>) -> Result<ListPage>;

    // ---- multipart uploads -----------------------------------------------------------

    /// Records a new upload; it counts against `max_objects` until completed or aborted.
    fn create_upload(
        &self,
        tenant: &str,
        bucket: &str,
        upload_id: &str,
        rec: &UploadRecord,
    ) -> Result<()>;

    /// The upload `upload_id` for `key`, or `NoSuchUpload`.
    fn get_upload(
        &self,
        tenant: &str,
        bucket: &str,
        upload_id: &str,
        key: &str,
    ) -> Result<UploadRecord>;

    /// Records an uploaded part, settling its reservation. Returns the part it replaced.
    #[allow(clippy::too_many_arguments)]
    fn put_part(
        &self,
        tenant: &str,
        bucket: &str,
        upload_id: &str,
        key: &str,
        number: u32,
        part: PartRecord,
        reservation: Reservation,
    ) -> Result<Option<PartRecord>>;

    /// Turns an upload into an object made of the listed parts. Returns the object (with the
    /// version committed), the object it replaced (if any) and the blobs of parts uploaded
    /// but not listed; the caller deletes the blobs of the latter two.
    fn complete_upload(
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
            None,
        )
    }

    /// [`Engine::complete_upload`] if the object at `key` satisfies `cond`, decided in the
    /// transaction that completes it. On [`crate::MetaError::PreconditionFailed`] nothing
    /// changed: the upload stays in progress (S3 lets the client retry or abort it).
    ///
    /// With `metadata`, the object records that user metadata in place of the upload's: the
    /// caller's, worked out from the parts it lists (whose ETags, checked in the
    /// transaction, pin them). The node agent records there what an encrypted object's
    /// reader needs (its parts' sizes).
    #[allow(clippy::too_many_arguments)]
    fn complete_upload_if(
        &self,
        tenant: &str,
        bucket: &str,
        upload_id: &str,
        key: &str,
        parts: &[PartSpec],
        now_ms: i64,
        cond: &Precondition,
        metadata: Option<&std::collections::BTreeMap<String, String>>,
    ) -> Result<(ObjectRecord, Option<ObjectRecord>, Vec<String>)>;

    /// Drops an upload and returns its part blobs for deletion.
    fn abort_upload(
        &self,
        tenant: &str,
        bucket: &str,
        upload_id: &str,
        key: &str,
    ) -> Result<Vec<String>>;

    /// The bucket's uploads in progress, sorted by (key, upload id).
    fn list_uploads(&self, tenant: &str, bucket: &str) -> Result<Vec<(String, UploadRecord)>>;

    // ---- rebuild (recovery from the backend) ----------------------------------------

    /// Creates `bucket` with `created_ms` as a rebuild does: no `max_buckets` check, and a
    /// bucket that exists already is left as it is (idempotent).
    fn restore_bucket(&self, tenant: &str, bucket: &str, created_ms: i64) -> Result<()>;

    /// Installs `record` at `key` as a rebuild does, keeping `record.version` as it is: of
    /// the record there and `record`, the one with the greater version stays (the record
    /// there on a tie, so restoring twice changes nothing). Usage and the object count move
    /// without a quota or `max_objects` check. The bucket must exist (`NoSuchBucket`).
    /// Returns whether `record` is now the object at `key`. The blobs of a record it
    /// replaced are not returned: they are unreferenced, for the garbage collector.
    /// An inline record needs its body: see [`Engine::restore_object_with_body`].
    fn restore_object(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
        record: &ObjectRecord,
    ) -> Result<bool> {
        self.restore_object_with_body(tenant, bucket, key, record, None)
    }

    /// [`Engine::restore_object`] with an inline object's body (`Some` exactly when
    /// `record.inline`).
    fn restore_object_with_body(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
        record: &ObjectRecord,
        body: Option<&[u8]>,
    ) -> Result<bool>;

    // ---- leases ----------------------------------------------------------------------

    /// Takes or renews the lease `name` for `holder` for `ttl` from now: `true` when the
    /// lease was free, had lapsed, or is already `holder`'s (then renewed); `false` when
    /// another holder's lease is live. One holder at a time per name, across every process
    /// sharing the catalog (the garbage collector runs under one).
    fn try_lease(&self, name: &str, holder: &str, ttl: Duration) -> Result<bool>;

    /// Gives the lease `name` up if `holder` holds it (otherwise changes nothing).
    fn release_lease(&self, name: &str, holder: &str) -> Result<()>;

    /// Who holds the lease `name` now, if anyone's is live (the gateways find their QoS
    /// coordinator by it).
    fn lease_holder(&self, name: &str) -> Result<Option<String>>;

    // ---- node agents' escrow ---------------------------------------------------------

    /// Sets `holder`'s (a node agent's) escrow of `tenant`'s quota to `target` bytes for
    /// `ttl` from now, as far as the quota allows: growing it takes free space (partly, if
    /// less is free; never below what it holds), shrinking gives space back. Across every
    /// process sharing the catalog, `used + reserved + live escrow ≤ quota`; a grant whose
    /// `ttl` lapses without renewal holds nothing. An upload whose reservation came from
    /// [`Ledger::reserve_from_escrow`] spends the holder's escrow in its commit.
    fn grant_escrow(
        &self,
        tenant: &str,
        holder: &str,
        target: u64,
        ttl: Duration,
    ) -> Result<crate::EscrowGrant>;

    // ---- tenants ---------------------------------------------------------------------

    /// Seeds the configuration file's tenants `specs` in one transaction (see `tenants`:
    /// inserted where the catalog lacks them, a difference reported, on the embedded catalog
    /// a tenant only the file wrote following it), each write audited as `config`.
    fn seed_tenants(&self, specs: &[crate::TenantSpec]) -> Result<crate::SeedReport>;

    /// Every tenant the catalog holds, by id (keys revoked or expired included). `Option`
    /// for engines that store none; both of sluice's do.
    fn tenants(&self) -> Result<Option<Vec<crate::TenantSpec>>>;

    /// Applies one administrative change and its audit entry (`who` did it) in one
    /// transaction; the tenant after it (`None`: removed), or why it was refused, nothing
    /// changed.
    fn change_tenant(
        &self,
        change: &crate::TenantChange,
        who: &str,
    ) -> Result<std::result::Result<Option<crate::TenantSpec>, crate::TenantRefusal>>;

    /// The audit record, oldest first: every entry, or `tenant`'s.
    fn tenant_history(&self, tenant: Option<&str>) -> Result<Vec<crate::AuditEntry>>;
}

/// A catalog: a cheap clonable handle over an engine, dereferencing to it.
#[derive(Clone)]
pub struct Catalog {
    engine: Arc<dyn Engine>,
    /// The same engine when it is the embedded one: the node agent keeps its journal in the
    /// catalog's redb file and hooks its commits.
    embedded: Option<Arc<RedbCatalog>>,
}

impl Catalog {
    /// Opens (or creates) the embedded redb catalog at `path` (see [`RedbCatalog::open`]).
    pub fn open(path: &Path) -> Result<(Self, ReconcileReport)> {
        let (engine, report) = RedbCatalog::open(path)?;
        Ok((Self::from(engine), report))
    }

    /// A handle over any engine (a shared one: `sluice-catalog-pg`).
    pub fn new(engine: Arc<dyn Engine>) -> Self {
        Self {
            engine,
            embedded: None,
        }
    }

    /// The engine itself.
    pub fn engine(&self) -> &Arc<dyn Engine> {
        &self.engine
    }

    /// The embedded engine, if this catalog is one.
    pub fn embedded(&self) -> Option<&Arc<RedbCatalog>> {
        self.embedded.as_ref()
    }

    /// Installs a commit hook on the embedded engine (see [`RedbCatalog::with_hook`]).
    ///
    /// # Panics
    /// On a catalog that is not the embedded one, or whose handle was already cloned: a hook
    /// is installed once, right after opening.
    #[must_use]
    pub fn with_hook(self, hook: Arc<dyn crate::CommitHook>) -> Self {
        let Self { engine, embedded } = self;
        drop(engine);
        let redb = embedded.expect("commit hooks are the embedded catalog's");
        let redb = Arc::try_unwrap(redb)
            .unwrap_or_else(|_| panic!("a hook is installed before the catalog is shared"));
        Self::from(redb.with_hook(hook))
    }

    /// The embedded engine's redb database (see [`RedbCatalog::database`]).
    ///
    /// # Panics
    /// On a catalog that is not the embedded one.
    pub fn database(&self) -> &redb::Database {
        self.embedded
            .as_ref()
            .expect("only the embedded catalog has a redb database")
            .database()
    }
}

impl Deref for Catalog {
    type Target = dyn Engine;

    fn deref(&self) -> &Self::Target {
        &*self.engine
    }
}

impl From<RedbCatalog> for Catalog {
    fn from(engine: RedbCatalog) -> Self {
        Self::from(Arc::new(engine))
    }
}

impl From<Arc<RedbCatalog>> for Catalog {
    fn from(engine: Arc<RedbCatalog>) -> Self {
        Self {
            engine: Arc::clone(&engine) as Arc<dyn Engine>,
            embedded: Some(engine),
        }
    }
}

impl std::fmt::Debug for Catalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Catalog")
            .field("shared", &self.engine.is_shared())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests;
