//! The shared-tier gateway process: it turns a validated [`Config`] into a running S3
//! endpoint.
//!
//! Start-up order (each step finishes before the next begins):
//! 1. open the catalog (`data_dir/meta.redb`), which recomputes every tenant's usage from
//!    the objects and parts it references;
//! 2. reconcile with the backend: blobs that no catalog entry references are the remains of
//!    writes interrupted by a crash and are deleted, as are the local filesystem's staged
//!    uploads; referenced blobs that are missing are reported;
//! 3. bind the listener and serve.
//!
//! Shutdown: on SIGINT/SIGTERM the listener closes, requests in flight are given a grace
//! period, then the process exits. A kill -9 at any point is safe by the catalog's crash
//! model (see `sluice-meta`): the next start reconciles.

mod control;
mod server;

pub use control::{Control, set_tenant_limits, tenant_specs};
pub use server::{Gateway, Running};

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
    #[error("catalog: {0}")]
    Catalog(#[from] sluice_meta::MetaError),
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
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: String,
        source: std::io::Error,
    },
}

/// Convenience: the gateway section or an error.
pub fn gateway_section(config: &Config) -> Result<&sluice_config::GatewayConfig, GatewayError> {
    config.gateway.as_ref().ok_or(GatewayError::NotConfigured)
}
