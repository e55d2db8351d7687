//! The gateway's metadata: which buckets each tenant owns, which objects they hold and where
//! their bytes live, multipart uploads in progress, and each tenant's quota ledger.
//!
//! The catalog is a seam ([`Catalog`] over [`Engine`]): this crate's embedded engine
//! ([`RedbCatalog`], one redb file, described below) and `sluice-catalog-pg`'s shared one
//! pass the same conformance suite (`sluice_meta::conformance`, feature `conformance`). What
//! follows is the embedded engine; the shared one is described in its crate.
//!
//! # Design
//!
//! Object *bytes* live in the backend as immutable blobs under a tenant prefix; this crate only
//! records which blobs make up an object (its *segments*). A small object's bytes may instead
//! be *inline*: stored in the catalog in the same value as its record (see `record` for the
//! layout), so that writing it costs no blob and no fsync of its own — only the catalog
//! commit, which concurrent writers share. An object becomes visible in one redb transaction
//! that also moves the tenant's durable usage (inline bytes count exactly as blob bytes), so
//! the ledger equals the bytes the catalog references by construction, and no partially
//! written object is ever visible.
//!
//! # Crash model
//!
//! Every mutation is durable before its call returns: transactions commit in memory and then
//! wait for one fsynced redb commit that covers them (group commit, see `catalog`). Writers store
//! and fsync a blob *before* the catalog references it, and drop the catalog reference
//! *before* deleting a blob. A crash therefore leaves at worst unreferenced blobs (orphans),
//! never references to missing data; `reconcile` at start-up lists them for deletion and
//! recomputes usage from the catalog. An inline body is part of its object's value, so it
//! becomes durable, is replaced and is deleted with the record, in the same transaction: it
//! can be neither orphaned nor missing, and references no blob.
//!
//! # Quota
//!
//! [`Ledger`] holds each tenant's committed usage and in-flight reservations in memory, one
//! mutex per tenant (no global lock). A writer reserves before bytes move
//! (`used + reserved + n <= quota`, checked and taken atomically), and the catalog
//! transaction converts the reservation into usage. Reservations are not persisted: after a
//! crash their blobs are orphans and their bytes were never counted.
//!
//! This crate does no network or backend I/O; its calls block on redb and belong on a
//! blocking thread.

mod catalog;
#[cfg(any(test, feature = "conformance"))]
pub mod conformance;
mod hook;
mod keys;
mod ledger;
mod record;
mod tenants;

pub use catalog::{
    Catalog, Engine, Entry, ListPage, ListQuery, MIN_PART_SIZE, PartSpec, ReconcileReport,
    RedbCatalog, assemble_upload,
};
pub use hook::{Change, CommitHook};
pub use keys::prefix_end;
pub use ledger::{EscrowGrant, Ledger, ObjectSlot, OnEnd, Reservation};
pub use record::{
    ChunkAlgorithm, ClientChecksum, ObjectRecord, PartRecord, Precondition, Segment,
    SegmentChecksums, UploadRecord, decode_object, decode_object_with_body, encode_object,
    next_version,
};
pub use redb;

/// Wall-clock time in milliseconds since the Unix epoch (0 before it), the unit of every
/// stored timestamp and lease expiry.
#[must_use]
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
pub use tenants::{
    Applied, AuditEntry, LocalSettings, SeedReport, TenantChange, TenantKeySpec, TenantPatch,
    TenantRefusal, TenantSpec, apply_change, plan_seed,
};

/// Why a metadata operation failed.
#[derive(Debug, thiserror::Error)]
pub enum MetaError {
    #[error("no such bucket")]
    NoSuchBucket,
    #[error("bucket already exists")]
    BucketExists,
    #[error("bucket is not empty")]
    BucketNotEmpty,
    #[error("no such upload")]
    NoSuchUpload,
    #[error("part {0} was not uploaded or its ETag does not match")]
    InvalidPart(u32),
    #[error("parts must be listed in ascending order")]
    InvalidPartOrder,
    #[error("part {0} is smaller than the 5 MiB minimum for a part that is not the last")]
    EntityTooSmall(u32),
    #[error("quota exceeded: {needed} more bytes requested, {available} available of {quota}")]
    QuotaExceeded {
        needed: u64,
        available: u64,
        quota: u64,
    },
    #[error(
        "object count quota exceeded: the tenant holds its maximum of {max} objects and \
         multipart uploads in progress"
    )]
    TooManyObjects { max: u64 },
    #[error("the tenant owns its maximum of {max} buckets")]
    TooManyBuckets { max: u64 },
    #[error("unknown tenant")]
    UnknownTenant,
    /// A conditional write whose condition the object at its key does not meet.
    #[error("at least one of the preconditions you specified did not hold")]
    PreconditionFailed,
    #[error("metadata store: {0}")]
    Storage(#[from] redb::Error),
    /// A shared catalog's database failed (connection, query, or a transaction still in
    /// conflict after its retries).
    #[error("catalog database: {0}")]
    Database(Box<dyn std::error::Error + Send + Sync>),
    /// The shared catalog's schema was migrated by a newer sluice than this one.
    #[error(
        "the catalog database's schema is version {found}, newer than the {known} this sluice \
         knows: upgrade this gateway (or migrate the database back) before starting it"
    )]
    SchemaTooNew { found: i64, known: i64 },
    #[error("corrupt metadata record: {0}")]
    Corrupt(String),
    /// A caller handed the catalog a record that contradicts itself (a bug, not bad input).
    #[error("inconsistent object record: {0}")]
    Inconsistent(&'static str),
}

macro_rules! storage_from {
    ($($t:ty),*) => {$(
        impl From<$t> for MetaError {
            fn from(e: $t) -> Self {
                Self::Storage(e.into())
            }
        }
    )*};
}
storage_from!(
    redb::DatabaseError,
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError
);

pub type Result<T, E = MetaError> = std::result::Result<T, E>;
