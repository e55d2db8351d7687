//! The shared-tier gateway process: it turns a validated [`Config`] into a running S3
//! endpoint.
//!
//! Start-up order (each step finishes before the next begins):
//! 1. read the S3 listener's certificate if `tls_cert` and `tls_key` are set, and bind every
//!    listener ([`Listeners::bind`]: S3, and metrics if configured), so that a bad certificate
//!    or an address in use fails the start before anything is created, naming the config key;
//! 2. open the catalog (`data_dir/meta.redb`), which recomputes every tenant's usage from
//!    the objects and parts it references (a catalog another process holds is refused as
//!    [`GatewayError::CatalogLocked`]);
//!    With a shared catalog (`[catalog]`), the file's tenants are seeded into it and the
//!    catalog's tenants are served (see `tenants`: conflicts are logged, the catalog wins);
//! 3. reconcile with the backend: blobs that no catalog entry references are the remains of
//!    writes interrupted by a crash and are deleted, as are the local filesystem's staged
//!    uploads; referenced blobs that are missing are reported;
//! 4. serve on the listeners bound in step 1, and start the continuous scrub if
//!    `[gateway.scrub]` is on (`scrub`: a background class of the throughput scheduler).
//!
//! Shutdown: on SIGINT/SIGTERM the listener closes, requests in flight are given a grace
//! period, then the process exits. A kill -9 at any point is safe by the catalog's crash
//! model (see `sluice-meta`): the next start reconciles.

pub mod admin;
pub mod cluster;
mod control;
pub mod scrub;
mod server;
mod tenants;

pub use control::{Control, set_tenant_limits, tenant_specs};
pub use server::{Gateway, Listeners, Running};
pub use tenants::TENANT_REFRESH;

use sluice_config::Config;

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error("the configuration has no [gateway] section")]
    NotConfigured,
    #[error("data directory {path}: {source}")]
    DataDir {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    /// Not a `source`: the catalog's error already ends with its cause's text, and a chain
    /// would print it once per layer.
    #[error("catalog: {0}")]
    Catalog(sluice_meta::MetaError),
    #[error(
        "{} is held by another sluice process (a `sluice up`, `sluice gateway` or `sluice \
         agent` already running with this data_dir): stop it, or give this one another data_dir",
        path.display()
    )]
    CatalogLocked { path: std::path::PathBuf },
    #[error("backend: {0}")]
    Backend(#[from] sluice_store::StoreError),
    #[error("reconciling with the backend: {0}")]
    Reconcile(#[from] sluice_s3::ReconcileError),
    #[error("a start-up task failed: {0}")]
    Join(String),
    #[error("reload refused: {0}")]
    Reload(String),
    #[error("throughput scheduler: {0}")]
    Throttle(#[from] sluice_throttle::ThrottleError),
    /// The S3 listener's certificate or key (`tls_cert`, `tls_key`) could not be used.
    #[error("TLS: {0}")]
    Tls(#[from] sluice_serve::tls::TlsError),
    /// The seal key of tenants' secrets could not be read (`[admin] seal_key_file`).
    #[error("{0}")]
    Seal(#[from] admin::SealError),
    /// `key` is the configuration key that named the address (`[gateway] listen`).
    #[error("cannot listen on {addr} (`{key}`): {source}")]
    Listen {
        key: &'static str,
        addr: String,
        source: std::io::Error,
    },
}

impl From<sluice_meta::MetaError> for GatewayError {
    fn from(e: sluice_meta::MetaError) -> Self {
        Self::Catalog(e)
    }
}

/// Opens the shared catalog at `url` (`[catalog] url`): migrates its schema and loads usage,
/// the connections running on this runtime.
pub async fn open_shared_catalog(
    url: &str,
) -> Result<(sluice_meta::Catalog, sluice_meta::ReconcileReport), GatewayError> {
    let (url, handle) = (url.to_owned(), tokio::runtime::Handle::current());
    let engine = tokio::task::spawn_blocking(move || {
        sluice_catalog_pg::PgCatalog::open(&url, handle, &sluice_catalog_pg::PgOptions::default())
    })
    .await
    .map_err(|e| GatewayError::Join(e.to_string()))??;
    tracing::info!(
        holder = engine.holder(),
        "shared catalog open: start-up deletes no backend blob"
    );
    Ok((
        sluice_meta::Catalog::new(std::sync::Arc::new(engine)),
        sluice_meta::ReconcileReport::default(),
    ))
}

/// Whether a catalog could not be opened because another process holds its file's lock.
pub fn catalog_locked(e: &sluice_meta::MetaError) -> bool {
    matches!(
        e,
        sluice_meta::MetaError::Storage(sluice_meta::redb::Error::DatabaseAlreadyOpen)
    )
}

/// Convenience: the gateway section or an error.
pub fn gateway_section(config: &Config) -> Result<&sluice_config::GatewayConfig, GatewayError> {
    config.gateway.as_ref().ok_or(GatewayError::NotConfigured)
}
