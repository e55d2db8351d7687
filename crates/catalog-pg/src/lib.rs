//! The shared catalog engine: every gateway of a deployment over one PostgreSQL database
//! (or a distributed engine that speaks its protocol and SQL: CockroachDB, YugabyteDB).
//!
//! [`PgCatalog`] implements [`sluice_meta::Engine`]; wrap it in a [`sluice_meta::Catalog`].
//!
//! # The client, and why
//!
//! `tokio-postgres` with the `deadpool-postgres` pool. The catalog's callers are blocking
//! threads (the S3 front runs every catalog call under `spawn_blocking`), so the engine drives
//! each statement with `Handle::block_on` on the gateway's own runtime: the connections are
//! tasks on that runtime, no second runtime or thread pool is started, and a call made by
//! mistake from an async task panics at once ("Cannot start a runtime from within a
//! runtime") instead of stalling a worker. The synchronous `postgres` crate would start a
//! runtime per connection; `sqlx` brings a query macro layer, its own pool and many more
//! crates for nothing this engine needs. Statements are prepared once per connection
//! (`prepare_cached`), so a statement costs one round trip.
//!
//! # SQL subset
//!
//! Plain tables with primary keys, `INSERT ... ON CONFLICT`, `RETURNING`, `BYTEA`, `BIGINT`;
//! every write transaction is SERIALIZABLE and retried from the start on SQLSTATE 40001
//! (serialization failure) or 40P01 (deadlock), with jittered exponential backoff. No
//! advisory locks, no LISTEN/NOTIFY, no extensions, no stored procedures.
//!
//! # Quotas across gateways
//!
//! Usage lives in rows per (tenant, gateway, slot): a gateway writes only its own rows, each
//! commit in one of [`SLOTS`] rows that no other commit of this gateway holds at that moment
//! (local locks), so commits of one gateway never conflict with each other on usage. Quota
//! headroom is held in escrow (see `escrow`): chunks granted from the database to a gateway
//! under its lease, spent by commits that then read only their own lease row; a commit
//! without enough headroom, or whose lease lapsed, sums the tenant's usage and the other
//! gateways' live escrow in its own SERIALIZABLE transaction and refuses what would exceed
//! the quota (or `max_objects`), so quotas hold exactly cluster-wide. Near the quota (less
//! than half free) no escrow is granted and every such commit is checked against the sum.
//! `max_buckets` is counted in the creating transaction. The in-memory
//! [`sluice_meta::Ledger`] is this gateway's fast pre-check (reservations before bytes move);
//! it is reloaded from the database in the background, and the database decides at commit.
//!
//! # Commits and durability
//!
//! A call returns once its transaction has committed, which PostgreSQL makes durable
//! (`synchronous_commit` as the server is configured). Concurrent commits from the pool's
//! connections share WAL flushes: PostgreSQL's own group commit, which is how this engine
//! batches commits. What a commit costs besides is round trips and retries, so: a
//! transaction's `BEGIN` travels with its first statement (see `db`); a single-row read (a
//! GET's record, the re-read after a PUT's recovery record) is one statement outside a
//! transaction block, one round trip; and a PutObject of a new key inserts it without
//! reading it first, because under SERIALIZABLE the read of an absent key locks its index
//! page and concurrent commits of neighbouring keys failed one another's serialization (a
//! quarter of the commits retried at 16 writers; `examples/commit_rate.rs` counts them).

// The test harness (`tests/common`) names this crate by its name, in unit tests too.
#[cfg(test)]
extern crate self as sluice_catalog_pg;

mod db;
mod escrow;
mod list;
mod objects;
mod schema;
#[cfg(any(test, feature = "server"))]
pub mod server;
mod tenants;
mod uploads;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use sluice_meta::{
    Engine, Ledger, ListPage, ListQuery, MetaError, ObjectRecord, PartRecord, PartSpec,
    Precondition, Reservation, Result, UploadRecord,
};
use tokio::runtime::Handle;

pub use schema::SCHEMA_VERSION;
#[cfg(feature = "server")]
pub use schema::migration;

use db::{Db, Tx, TxError, TxResult};

/// Usage rows per (tenant, gateway): how many commits of one gateway can write usage at once.
pub const SLOTS: usize = 16;

/// How the engine connects and keeps its ledger fresh.
#[derive(Debug, Clone)]
pub struct PgOptions {
    /// Connections in the pool.
    pub pool_size: usize,
    /// How often the in-memory ledger is reloaded from the database (other gateways'
    /// writes and deletes), this gateway's lease renewed and its escrow folded.
    pub refresh: Duration,
    /// How long this gateway's lease (and so its escrow) outlives its last renewal: a killed
    /// gateway's escrow returns after this. Renewed every `refresh`, so at least twice that.
    pub lease_ttl: Duration,
}

impl Default for PgOptions {
    fn default() -> Self {
        Self {
            pool_size: 16,
            refresh: Duration::from_secs(2),
            lease_ttl: Duration::from_secs(10),
        }
    }
}

/// The catalog in a shared PostgreSQL database (see the crate doc).
pub struct PgCatalog {
    inner: Arc<Inner>,
    refresher: tokio::task::JoinHandle<()>,
}

struct Inner {
    db: Db,
    ledger: Ledger,
    /// This process's name in the usage rows: unique per open.
    holder: String,
    slots: Vec<Mutex<()>>,
    next_slot: AtomicUsize,
    /// Commits made by this engine: a ledger refresh that raced one is dropped.
    commits: AtomicU64,
    escrow: Mutex<escrow::Escrow>,
    lease_ttl: Duration,
}

impl Drop for PgCatalog {
    /// Stops the renewal and gives this gateway's lease and escrow back in the background
    /// (best effort: if the runtime is stopping too, they return when the lease lapses).
    fn drop(&mut self) {
        self.refresher.abort();
        let (pool, name, holder) = (
            self.inner.db.pool.clone(),
            self.inner.lease_name(),
            self.inner.holder.clone(),
        );
        self.inner.db.handle.spawn(async move {
            let Ok(client) = pool.get().await else { return };
            let released = client
                .execute(
                    "DELETE FROM leases WHERE name = $1 AND holder = $2",
                    &[&name, &holder],
                )
                .await;
            if released.is_ok() {
                let _ = client
                    .execute("DELETE FROM escrow WHERE holder = $1", &[&holder])
                    .await;
            }
        });
    }
}

impl PgCatalog {
    /// Connects to `url` (`postgres://user:password@host:port/database`), migrates the
    /// schema (refusing one newer than [`SCHEMA_VERSION`]) and loads the ledger's usage.
    /// The connections run on `handle`'s runtime. Call from a blocking thread.
    pub fn open(url: &str, handle: Handle, options: &PgOptions) -> Result<Self> {
        let db = Db::connect(url, handle, options.pool_size)?;
        migrate_racing(&db)?;
        let inner = Arc::new(Inner {
            db,
            ledger: Ledger::default(),
            holder: holder_id(),
            slots: (0..SLOTS).map(|_| Mutex::new(())).collect(),
            next_slot: AtomicUsize::new(0),
            commits: AtomicU64::new(0),
            escrow: Mutex::default(),
            lease_ttl: options.lease_ttl,
        });
        inner.take_lease()?;
        inner.refresh_ledger()?;
        let refresher = inner
            .db
            .handle
            .spawn(refresh_loop(Arc::downgrade(&inner), options.refresh));
        Ok(Self { inner, refresher })
    }

    /// This engine's name in the database's usage rows.
    pub fn holder(&self) -> &str {
        &self.inner.holder
    }

    /// Reloads the ledger's usage and object counts from the database now.
    pub fn refresh_ledger(&self) -> Result<()> {
        self.inner.refresh_ledger()
    }
}

/// Concurrent first starts may race on creating the tables themselves (a unique violation
/// in PostgreSQL's catalog): the loser tries again and finds them.
fn migrate_racing(db: &Db) -> Result<()> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        match schema::migrate(db) {
            Err(MetaError::Database(e))
                if attempt < 5
                    && e.downcast_ref::<tokio_postgres::Error>()
                        .and_then(tokio_postgres::Error::code)
                        == Some(&tokio_postgres::error::SqlState::UNIQUE_VIOLATION) => {}
            other => return other,
        }
    }
}

fn holder_id() -> String {
    use std::hash::{BuildHasher, RandomState};
    let n = RandomState::new().hash_one((std::process::id(), std::time::SystemTime::now()));
    format!("gw-{n:016x}")
}

async fn refresh_loop(inner: Weak<Inner>, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        let Some(inner) = inner.upgrade() else { return };
        // The refresh blocks on the database: on a blocking thread, like every catalog call.
        let result = tokio::task::spawn_blocking(move || {
            inner.renew().and_then(|()| inner.refresh_ledger())
        })
        .await;
        if let Ok(Err(e)) = result {
            tracing::warn!(error = %e, "the catalog database did not answer a ledger refresh");
        }
    }
}

pub(crate) fn signed(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

pub(crate) fn unsigned(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

pub(crate) fn to_json<T: serde::Serialize>(v: &T) -> TxResult<Vec<u8>> {
    serde_json::to_vec(v).map_err(|e| TxError::Meta(MetaError::Corrupt(e.to_string())))
}

pub(crate) fn from_json<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> TxResult<T> {
    serde_json::from_slice(bytes).map_err(|e| TxError::Meta(MetaError::Corrupt(e.to_string())))
}

impl Inner {
    /// Holds one usage slot for a commit: a free one if any, else waits for one.
    fn slot(&self) -> (MutexGuard<'_, ()>, i32) {
        let start = self.next_slot.fetch_add(1, Ordering::Relaxed);
        for i in 0..SLOTS {
            let n = (start + i) % SLOTS;
            if let Ok(g) = self.slots[n].try_lock() {
                return (g, n as i32);
            }
        }
        let n = start % SLOTS;
        let g = self.slots[n].lock().unwrap_or_else(PoisonError::into_inner);
        (g, n as i32)
    }

    fn committed(&self) {
        self.commits.fetch_add(1, Ordering::SeqCst);
    }

    /// `(quota, max_objects)` of a configured tenant.
    fn limits(&self, tenant: &str) -> TxResult<(u64, u64)> {
        let quota = self.ledger.usage(tenant).ok_or(MetaError::UnknownTenant)?.2;
        let max = self
            .ledger
            .objects(tenant)
            .ok_or(MetaError::UnknownTenant)?
            .1;
        Ok((quota, max))
    }

    /// Moves the tenant's usage by `bytes` and `objects` in this gateway's `slot` row,
    /// unchecked (a decrease, or a restore); increases go through `charge_checked`.
    fn charge(
        &self,
        tx: &Tx<'_>,
        tenant: &str,
        slot: i32,
        bytes: i64,
        objects: i64,
    ) -> TxResult<()> {
        if bytes != 0 || objects != 0 {
            tx.execute(
                "INSERT INTO usage (tenant, holder, slot, bytes, objects)
                 VALUES ($1, $2, $3, $4, $5)
                 ON CONFLICT (tenant, holder, slot) DO UPDATE
                 SET bytes = usage.bytes + excluded.bytes,
                     objects = usage.objects + excluded.objects",
                &[&tenant.as_bytes(), &self.holder, &slot, &bytes, &objects],
            )?;
        }
        Ok(())
    }

    fn refresh_ledger(&self) -> Result<()> {
        self.refresh_agents()?;
        let before = self.commits.load(Ordering::SeqCst);
        let rows = self.db.read(|tx| {
            tx.query(
                "SELECT tenant, COALESCE(SUM(bytes), 0)::BIGINT, COALESCE(SUM(objects), 0)::BIGINT
                 FROM usage GROUP BY tenant",
                &[],
            )
        })?;
        if self.commits.load(Ordering::SeqCst) != before {
            // A commit of ours landed meanwhile and moved the ledger itself; the next
            // refresh will see it.
            return Ok(());
        }
        for row in rows {
            let tenant: &[u8] = row.get(0);
            let tenant = String::from_utf8_lossy(tenant);
            self.ledger
                .set_used(&tenant, unsigned(row.get(1)), unsigned(row.get(2)));
        }
        Ok(())
    }

    fn referenced_blobs(&self) -> Result<HashMap<String, HashSet<String>>> {
        self.db.read(|tx| {
            let mut out: HashMap<String, HashSet<String>> = HashMap::new();
            for row in tx.query("SELECT tenant, record FROM objects", &[])? {
                let tenant = String::from_utf8_lossy(row.get::<_, &[u8]>(0)).into_owned();
                let rec: ObjectRecord = from_json(row.get(1))?;
                out.entry(tenant)
                    .or_default()
                    .extend(rec.blobs().map(str::to_owned));
            }
            for row in tx.query("SELECT tenant, record FROM uploads", &[])? {
                let tenant = String::from_utf8_lossy(row.get::<_, &[u8]>(0)).into_owned();
                let rec: UploadRecord = from_json(row.get(1))?;
                out.entry(tenant)
                    .or_default()
                    .extend(rec.parts.values().map(|p| p.blob.clone()));
            }
            Ok(out)
        })
    }

    fn try_lease(&self, name: &str, holder: &str, ttl: Duration) -> Result<bool> {
        let ttl_ms = signed(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX));
        self.db.write(|tx| {
            let n = tx.execute(
                "INSERT INTO leases (name, holder, expires_ms)
                 VALUES ($1, $2, (EXTRACT(EPOCH FROM now()) * 1000)::BIGINT + $3)
                 ON CONFLICT (name) DO UPDATE
                 SET holder = excluded.holder, expires_ms = excluded.expires_ms
                 WHERE leases.holder = excluded.holder
                    OR leases.expires_ms <= (EXTRACT(EPOCH FROM now()) * 1000)::BIGINT",
                &[&name, &holder, &ttl_ms],
            )?;
            Ok(n == 1)
        })
    }

    fn release_lease(&self, name: &str, holder: &str) -> Result<()> {
        self.db.write(|tx| {
            tx.execute(
                "DELETE FROM leases WHERE name = $1 AND holder = $2",
                &[&name, &holder],
            )?;
            Ok(())
        })
    }

    fn lease_holder(&self, name: &str) -> Result<Option<String>> {
        let row = self.db.read_one(
            "SELECT holder FROM leases WHERE name = $1
             AND expires_ms > (EXTRACT(EPOCH FROM now()) * 1000)::BIGINT",
            &[&name],
        )?;
        Ok(row.map(|r| r.get(0)))
    }
}

impl Engine for PgCatalog {
    fn grant_escrow(
        &self,
        tenant: &str,
        holder: &str,
        target: u64,
        ttl: Duration,
    ) -> Result<sluice_meta::EscrowGrant> {
        self.inner.grant_escrow(tenant, holder, target, ttl)
    }

    fn ledger(&self) -> &Ledger {
        &self.inner.ledger
    }

    fn is_shared(&self) -> bool {
        true
    }

    fn referenced_blobs(&self) -> Result<HashMap<String, HashSet<String>>> {
        self.inner.referenced_blobs()
    }

    fn create_bucket(&self, tenant: &str, bucket: &str, now_ms: i64) -> Result<()> {
        self.inner.create_bucket(tenant, bucket, now_ms)
    }

    fn delete_bucket(&self, tenant: &str, bucket: &str) -> Result<Vec<String>> {
        self.inner.delete_bucket(tenant, bucket)
    }

    fn bucket_exists(&self, tenant: &str, bucket: &str) -> Result<bool> {
        self.inner.bucket_exists(tenant, bucket)
    }

    fn list_buckets(&self, tenant: &str) -> Result<Vec<(String, i64)>> {
        self.inner.list_buckets(tenant)
    }

    fn get_object(&self, tenant: &str, bucket: &str, key: &str) -> Result<Option<ObjectRecord>> {
        Ok(self
            .inner
            .read_object(tenant, bucket, key, false)?
            .map(|(rec, _)| rec))
    }

    fn get_object_with_body(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
    ) -> Result<Option<(ObjectRecord, Option<Vec<u8>>)>> {
        self.inner.read_object(tenant, bucket, key, true)
    }

    fn put_object_if(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
        rec: &ObjectRecord,
        body: Option<&[u8]>,
        reservation: Reservation,
        cond: &Precondition,
    ) -> Result<(u64, Option<ObjectRecord>)> {
        self.inner
            .put_object_if(tenant, bucket, key, rec, body, reservation, cond)
    }

    fn delete_object(&self, tenant: &str, bucket: &str, key: &str) -> Result<Option<ObjectRecord>> {
        self.inner.delete_object(tenant, bucket, key, None)
    }

    fn evict_object(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
        expected: &ObjectRecord,
    ) -> Result<bool> {
        Ok(self
            .inner
            .delete_object(tenant, bucket, key, Some(expected))?
            .is_some())
    }

    fn list_objects(&self, tenant: &str, bucket: &str, q: &ListQuery<'_>) -> Result<ListPage> {
        self.inner.list_objects(tenant, bucket, q)
    }

    fn create_upload(
        &self,
        tenant: &str,
        bucket: &str,
        upload_id: &str,
        rec: &UploadRecord,
    ) -> Result<()> {
        self.inner.create_upload(tenant, bucket, upload_id, rec)
    }

    fn get_upload(
        &self,
        tenant: &str,
        bucket: &str,
        upload_id: &str,
        key: &str,
    ) -> Result<UploadRecord> {
        self.inner.get_upload(tenant, bucket, upload_id, key)
    }

    fn put_part(
        &self,
        tenant: &str,
        bucket: &str,
        upload_id: &str,
        key: &str,
        number: u32,
        part: PartRecord,
        reservation: Reservation,
    ) -> Result<Option<PartRecord>> {
        self.inner
            .put_part(tenant, bucket, upload_id, key, number, &part, reservation)
    }

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
    ) -> Result<(ObjectRecord, Option<ObjectRecord>, Vec<String>)> {
        self.inner.complete_upload_if(
            tenant, bucket, upload_id, key, parts, now_ms, cond, metadata,
        )
    }

    fn abort_upload(
        &self,
        tenant: &str,
        bucket: &str,
        upload_id: &str,
        key: &str,
    ) -> Result<Vec<String>> {
        self.inner.abort_upload(tenant, bucket, upload_id, key)
    }

    fn list_uploads(&self, tenant: &str, bucket: &str) -> Result<Vec<(String, UploadRecord)>> {
        self.inner.list_uploads(tenant, bucket)
    }

    fn restore_bucket(&self, tenant: &str, bucket: &str, created_ms: i64) -> Result<()> {
        self.inner.restore_bucket(tenant, bucket, created_ms)
    }

    fn restore_object_with_body(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
        record: &ObjectRecord,
        body: Option<&[u8]>,
    ) -> Result<bool> {
        self.inner
            .restore_object_with_body(tenant, bucket, key, record, body)
    }

    fn try_lease(&self, name: &str, holder: &str, ttl: Duration) -> Result<bool> {
        self.inner.try_lease(name, holder, ttl)
    }

    fn seed_tenants(&self, specs: &[sluice_meta::TenantSpec]) -> Result<sluice_meta::SeedReport> {
        self.inner.seed_tenants(specs)
    }

    fn tenants(&self) -> Result<Option<Vec<sluice_meta::TenantSpec>>> {
        self.inner.tenants().map(Some)
    }

    fn change_tenant(
        &self,
        change: &sluice_meta::TenantChange,
        who: &str,
    ) -> Result<std::result::Result<Option<sluice_meta::TenantSpec>, sluice_meta::TenantRefusal>>
    {
        self.inner.change_tenant(change, who)
    }

    fn tenant_history(&self, tenant: Option<&str>) -> Result<Vec<sluice_meta::AuditEntry>> {
        self.inner.tenant_history(tenant)
    }

    fn release_lease(&self, name: &str, holder: &str) -> Result<()> {
        self.inner.release_lease(name, holder)
    }

    fn lease_holder(&self, name: &str) -> Result<Option<String>> {
        self.inner.lease_holder(name)
    }
}
