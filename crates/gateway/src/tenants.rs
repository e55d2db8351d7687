//! Tenants from a shared catalog: at start and on reload the file's `[[tenant]]` entries are
//! seeded into the catalog (inserted where it lacks them), a tenant the catalog holds with
//! other settings or keys is reported and the catalog's kept, and the gateway serves the
//! catalog's tenants; [`refresh_loop`] picks up the tenants other gateways seed. With the
//! embedded catalog the file's tenants are served as they are.

use std::sync::Arc;
use std::time::Duration;

use sluice_config::{Config, DEFAULT_COMMIT_MARKERS, LocalSpec, Qos, Retention, Tenant};
use sluice_meta::{Catalog, TenantKeySpec, TenantSpec};
use sluice_s3::TenantKey;
use tokio::sync::watch;

use crate::{Control, GatewayError};

/// How often a gateway on a shared catalog reads its tenants again.
pub const TENANT_REFRESH: Duration = Duration::from_secs(1);

/// A `[[tenant]]` entry as the catalog stores it.
pub(crate) fn spec_of(t: &Tenant) -> TenantSpec {
    TenantSpec {
        id: t.id.clone(),
        capacity: t.capacity,
        max_objects: t.max_objects,
        max_buckets: t.max_buckets,
        reservation: t.qos.reservation,
        weight: t.qos.weight,
        limit: t.qos.limit,
        keys: vec![TenantKeySpec {
            access_key: t.access_key.clone(),
            secret_key: t.secret_key.clone(),
        }],
    }
}

/// `config` serving the catalog's tenants: the gateway's settings from the catalog, the node
/// agent's (`local`) from the file where it names the tenant, the defaults otherwise.
pub(crate) fn adopt(config: &Config, specs: &[TenantSpec]) -> Config {
    let mut out = config.clone();
    out.tenants = specs
        .iter()
        .map(|s| {
            let local = config.tenant(&s.id).map_or_else(
                || LocalSpec {
                    local_capacity: u64::MAX,
                    drain_rate: None,
                    interval: None,
                    retention: Retention::Checkpoints(2),
                    commit_markers: DEFAULT_COMMIT_MARKERS
                        .iter()
                        .map(|m| (*m).to_owned())
                        .collect(),
                },
                |t| t.local.clone(),
            );
            let first = s.keys.first();
            Tenant {
                id: s.id.clone(),
                    local_qos: Qos::default(),
                access_key: first.map(|k| k.access_key.clone()).unwrap_or_default(),
                secret_key: first.map(|k| k.secret_key.clone()).unwrap_or_default(),
                capacity: s.capacity,
                max_objects: s.max_objects,
                max_buckets: s.max_buckets,
                qos: Qos {
                    reservation: s.reservation,
                    weight: s.weight,
                    limit: s.limit,
                },
                local,
            }
        })
        .collect();
    out
}

/// Every access key of the catalog's tenants.
pub(crate) fn keys_of(specs: &[TenantSpec]) -> Vec<TenantKey> {
    specs
        .iter()
        .flat_map(|s| {
            s.keys.iter().map(|k| TenantKey {
                tenant: Arc::from(s.id.as_str()),
                access_key: k.access_key.clone(),
                secret_key: k.secret_key.clone(),
            })
        })
        .collect()
}

/// Seeds `config`'s tenants into the catalog, reports conflicts, and returns the catalog's
/// tenants; `None` with the embedded catalog (the file's tenants are served).
pub(crate) async fn seed(
    catalog: &Catalog,
    config: &Config,
) -> Result<Option<Vec<TenantSpec>>, GatewayError> {
    if !catalog.is_shared() {
        return Ok(None);
    }
    let specs: Vec<TenantSpec> = config.tenants.iter().map(spec_of).collect();
    let catalog = catalog.clone();
    let (report, tenants) = tokio::task::spawn_blocking(move || {
        let report = catalog.seed_tenants(&specs)?;
        catalog.tenants().map(|t| (report, t))
    })
    .await
    .map_err(|e| GatewayError::Join(e.to_string()))??;
    for tenant in &report.inserted {
        tracing::info!(tenant, "tenant seeded into the shared catalog");
    }
    for (tenant, fields) in &report.conflicts {
        tracing::warn!(
            tenant,
            fields = %fields.join(","),
            "the configuration file's tenant differs from the shared catalog's: the catalog's \
             is served"
        );
    }
    Ok(tenants)
}

/// Reads the catalog's tenants every [`TENANT_REFRESH`] and serves them when they changed,
/// until `stop` changes.
pub(crate) async fn refresh_loop(control: Control, mut stop: watch::Receiver<bool>) {
    let mut last: Option<Vec<TenantSpec>> = None;
    loop {
        tokio::select! {
            () = tokio::time::sleep(TENANT_REFRESH) => {}
            _ = stop.changed() => return,
        }
        let catalog = Arc::clone(&control.catalog);
        let read = tokio::task::spawn_blocking(move || catalog.tenants()).await;
        let specs = match read {
            Ok(Ok(Some(specs))) => specs,
            Ok(Ok(None)) => return,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "reading the shared catalog's tenants failed");
                continue;
            }
            Err(e) => {
                tracing::warn!(error = %e, "reading the shared catalog's tenants failed");
                continue;
            }
        };
        if last.as_ref() == Some(&specs) {
            continue;
        }
        if let Err(e) = control.serve_tenants(&specs).await {
            tracing::warn!(error = %e, "the shared catalog's tenants were not applied");
            continue;
        }
        last = Some(specs);
    }
}
