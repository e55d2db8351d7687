//! The schema and its versioned migrations, run at open.
//!
//! `sluice_schema` holds one row: the version the database was migrated to. Opening runs, in
//! one SERIALIZABLE transaction, every migration after that version; a database at a version
//! this binary does not know (a newer sluice migrated it) is refused with
//! [`MetaError::SchemaTooNew`] and left untouched. Gateways starting together race on the
//! row and the losers retry; the migrations only create, so a retried one is harmless.
//!
//! Names (tenant, bucket, key, upload id) are stored as `BYTEA`, so that ordering is by
//! bytes, as S3 lists, whatever the database's collation. Usage is in rows per (tenant,
//! holder, slot): each gateway writes only its own rows, and the sum is the tenant's usage.
//! Version 2 adds `escrow` (headroom granted per tenant and gateway) and the leases'
//! `generation` (see `escrow`). Version 3 adds `tenants` and `tenant_keys` (see `tenants`;
//! a limit of `NULL` is none). Version 4 adds `agent_escrow`: node agents' escrow of a
//! tenant's quota, each row its own lease (`expires_ms`; see `escrow`). Version 5 adds
//! several keys per tenant with an expiry and a revocation time, whether a tenant was changed
//! online (`tenants.online`), and `tenant_audit`, the record of every administrative change.
//! Version 6 adds a tenant's node-local settings (`tenants.local_capacity`,
//! `local_reservation`, `local_weight`, `local_limit`; `NULL`: not held, each agent's file
//! governs), so rows written before read as they did.
//!
//! A new version is one more entry at the end of [`MIGRATIONS`] (and a line above): nothing
//! else here changes. A migration only adds (tables, nullable or defaulted columns), so that
//! rows an older gateway wrote read unchanged.

use sluice_meta::MetaError;

use crate::db::{Db, TxError};

/// Migration `i` takes the schema from version `i` to `i + 1`.
const MIGRATIONS: &[&str] = &[
    "
CREATE TABLE buckets (
    tenant BYTEA NOT NULL,
    name BYTEA NOT NULL,
    created_ms BIGINT NOT NULL,
    PRIMARY KEY (tenant, name)
);
CREATE TABLE objects (
    tenant BYTEA NOT NULL,
    bucket BYTEA NOT NULL,
    key BYTEA NOT NULL,
    record BYTEA NOT NULL,
    body BYTEA,
    PRIMARY KEY (tenant, bucket, key)
);
CREATE TABLE uploads (
    tenant BYTEA NOT NULL,
    bucket BYTEA NOT NULL,
    upload_id BYTEA NOT NULL,
    record BYTEA NOT NULL,
    PRIMARY KEY (tenant, bucket, upload_id)
);
CREATE TABLE usage (
    tenant BYTEA NOT NULL,
    holder TEXT NOT NULL,
    slot INT NOT NULL,
    bytes BIGINT NOT NULL,
    objects BIGINT NOT NULL,
    PRIMARY KEY (tenant, holder, slot)
);
CREATE TABLE leases (
    name TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    expires_ms BIGINT NOT NULL
);
",
    "
CREATE TABLE escrow (
    tenant BYTEA NOT NULL,
    holder TEXT NOT NULL,
    bytes BIGINT NOT NULL,
    objects BIGINT NOT NULL,
    PRIMARY KEY (tenant, holder)
);
ALTER TABLE leases ADD COLUMN generation BIGINT NOT NULL DEFAULT 0;
",
    "
CREATE TABLE tenants (
    id BYTEA PRIMARY KEY,
    capacity BIGINT,
    max_objects BIGINT,
    max_buckets BIGINT,
    reservation DOUBLE PRECISION NOT NULL,
    weight DOUBLE PRECISION NOT NULL,
    qos_limit DOUBLE PRECISION,
    created_ms BIGINT NOT NULL
);
CREATE TABLE tenant_keys (
    access_key TEXT PRIMARY KEY,
    tenant BYTEA NOT NULL REFERENCES tenants (id),
    secret TEXT NOT NULL,
    created_ms BIGINT NOT NULL
);
",
    "
CREATE TABLE agent_escrow (
    tenant BYTEA NOT NULL,
    holder TEXT NOT NULL,
    bytes BIGINT NOT NULL,
    expires_ms BIGINT NOT NULL,
    PRIMARY KEY (tenant, holder)
);
",
    "
ALTER TABLE tenants ADD COLUMN online BOOLEAN NOT NULL DEFAULT FALSE;
ALTER TABLE tenant_keys ADD COLUMN expires_ms BIGINT;
ALTER TABLE tenant_keys ADD COLUMN revoked_ms BIGINT;
CREATE TABLE tenant_audit (
    seq BIGSERIAL PRIMARY KEY,
    at_ms BIGINT NOT NULL,
    who TEXT NOT NULL,
    tenant BYTEA NOT NULL,
    action TEXT NOT NULL,
    detail TEXT NOT NULL
);
",
    "
ALTER TABLE tenants ADD COLUMN local_capacity BIGINT;
ALTER TABLE tenants ADD COLUMN local_reservation DOUBLE PRECISION;
ALTER TABLE tenants ADD COLUMN local_weight DOUBLE PRECISION;
ALTER TABLE tenants ADD COLUMN local_limit DOUBLE PRECISION;
",
];

/// The SQL that takes the schema from version `from` to `from + 1`, if this binary knows it
/// (tests build an older schema with it, to migrate from).
#[cfg(feature = "server")]
pub fn migration(from: usize) -> Option<&'static str> {
    MIGRATIONS.get(from).copied()
}

/// The schema version this binary writes and reads.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// Brings the schema to [`SCHEMA_VERSION`], or refuses a newer one.
pub(crate) fn migrate(db: &Db) -> Result<(), MetaError> {
    db.write(|tx| {
        tx.batch(
            "CREATE TABLE IF NOT EXISTS sluice_schema (
                 singleton INT PRIMARY KEY,
                 version BIGINT NOT NULL
             )",
        )?;
        let found: i64 = tx
            .query_opt("SELECT version FROM sluice_schema WHERE singleton = 1", &[])?
            .map_or(0, |r| r.get(0));
        if found > SCHEMA_VERSION {
            return Err(TxError::Meta(MetaError::SchemaTooNew {
                found,
                known: SCHEMA_VERSION,
            }));
        }
        for (from, sql) in MIGRATIONS
            .iter()
            .enumerate()
            .skip(usize::try_from(found).unwrap_or(0))
        {
            tx.batch(sql)?;
            tracing::info!(version = from + 1, "catalog schema migrated");
        }
        tx.execute(
            "INSERT INTO sluice_schema (singleton, version) VALUES (1, $1)
             ON CONFLICT (singleton) DO UPDATE SET version = excluded.version",
            &[&SCHEMA_VERSION],
        )?;
        Ok(())
    })
}
