//! The PostgreSQL server of the gateway benchmark's shared-catalog targets: the one
//! `sluice_catalog_pg::server` starts (Debian's binaries from `--postgres DIR`,
//! `$SLUICE_POSTGRES`, `PATH`, or the newest `/usr/lib/postgresql/*/bin`; a fresh cluster in
//! the run's working directory, or as root where `nobody` cannot reach it a temporary one). Its
//! WAL is fsynced (`fsync=on`, `synchronous_commit=on`): the embedded catalog it is compared
//! with fsyncs every commit too.

use std::path::Path;

pub use sluice_catalog_pg::server::{INSTALL_HINT, PgServer, find_bin_dir};

use crate::BenchError;

fn setup(e: impl std::fmt::Display) -> BenchError {
    BenchError::Setup(e.to_string())
}

/// Makes a cluster in `dir` with the binaries of `bin` and starts it, fsyncing.
pub fn start(bin: &Path, dir: &Path) -> Result<PgServer, BenchError> {
    PgServer::start(bin, Some(dir), true).map_err(setup)
}

/// A new empty database on `server`; returns its URL.
pub fn database(server: &PgServer, name: &str) -> Result<String, BenchError> {
    server.database(name).map_err(setup)
}

/// Makes `bucket` for `tenant` in the shared catalog at `url` (migrating its schema first, as
/// a gateway's start does), before the gateways start, as the embedded catalog's targets get
/// theirs. Call from a blocking thread; `handle` runs the connections.
pub fn create_bucket(
    url: &str,
    handle: tokio::runtime::Handle,
    tenant: &str,
    buckets: &[&str],
) -> Result<(), BenchError> {
    let failed = |e: sluice_meta::MetaError| BenchError::Setup(format!("shared catalog: {e}"));
    let engine =
        sluice_catalog_pg::PgCatalog::open(url, handle, &sluice_catalog_pg::PgOptions::default())
            .map_err(failed)?;
    let catalog = sluice_meta::Catalog::new(std::sync::Arc::new(engine));
    for b in buckets {
        catalog.create_bucket(tenant, b, 0).map_err(failed)?;
    }
    Ok(())
}
