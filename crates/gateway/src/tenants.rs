//! Tenants from the catalog: at start and on reload the file's `[[tenant]]` entries are
//! seeded into it (see `sluice_meta`'s `tenants`: inserted where it lacks them; on the
//! embedded catalog a tenant only the file wrote follows the file; a tenant changed online,
//! or any tenant of a shared catalog, that the file contradicts is reported and the catalog's
//! kept), and the gateway serves the catalog's tenants with their live keys, secrets opened
//! with the seal key (`admin::seal`). [`refresh_loop`] reads them again every second: what
//! other gateways or the CLI changed in a shared catalog, and keys that expired.

use std::sync::Arc;
use std::time::Duration;

use sluice_config::{Config, DEFAULT_COMMIT_MARKERS, LocalSpec, Qos, Retention, Tenant};
use sluice_meta::{Catalog, TenantKeySpec, TenantSpec, now_ms};
use sluice_s3::TenantKey;
use tokio::sync::watch;

use crate::admin::Sealer;
use crate::{Control, GatewayError};

/// How often a gateway reads its tenants from the catalog again.
pub const TENANT_REFRESH: Duration = Duration::from_secs(1);

/// A `[[tenant]]` entry as the catalog stores it (its secret sealed).
pub(crate) fn spec_of(t: &Tenant, sealer: &Sealer) -> TenantSpec {
    TenantSpec {
        id: t.id.clone(),
        capacity: t.capacity,
        max_objects: t.max_objects,
        max_buckets: t.max_buckets,
        reservation: t.qos.reservation,
        weight: t.qos.weight,
        limit: t.qos.limit,
        keys: vec![TenantKeySpec::new(
            t.access_key.clone(),
            sealer.seal(&t.access_key, &t.secret_key),
            now_ms(),
        )],
        online: false,
        // The file's node-local keys are its agent's: the catalog holds only those set online.
        local: sluice_meta::LocalSettings::default(),
    }
}

/// `config` serving the catalog's tenants: the gateway's settings from the catalog, the node
/// agent's (`local`) from the file where it names the tenant, the defaults otherwise. Each
/// tenant's `access_key` and `secret_key` are its first live key's (`keys`, opened).
pub(crate) fn adopt(config: &Config, specs: &[TenantSpec], keys: &[TenantKey]) -> Config {
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
                    local_qos: Qos::default(),
                },
                |t| t.local.clone(),
            );
            let first = keys.iter().find(|k| &*k.tenant == s.id.as_str());
            Tenant {
                id: s.id.clone(),
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

/// Every live access key of the catalog's tenants, secrets opened; a key that does not open
/// (another seal key sealed it) is logged and not served.
pub(crate) fn keys_of(specs: &[TenantSpec], sealer: &Sealer) -> Vec<TenantKey> {
    let now = now_ms();
    specs
        .iter()
        .flat_map(|s| {
            s.keys.iter().filter(|k| k.live(now)).filter_map(|k| {
                match sealer.open(&k.access_key, &k.secret_key) {
                    Ok(secret) => Some(TenantKey {
                        tenant: Arc::from(s.id.as_str()),
                        access_key: k.access_key.clone(),
                        secret_key: secret,
                    }),
                    Err(e) => {
                        tracing::error!(tenant = %s.id, error = %e, "a tenant's key is not served");
                        None
                    }
                }
            })
        })
        .collect()
}

/// Seeds `config`'s tenants into the catalog, reports what it found, and returns the
/// catalog's tenants.
pub(crate) async fn seed(
    catalog: &Catalog,
    config: &Config,
    sealer: &Sealer,
) -> Result<Vec<TenantSpec>, GatewayError> {
    let specs: Vec<TenantSpec> = config.tenants.iter().map(|t| spec_of(t, sealer)).collect();
    let catalog = catalog.clone();
    let shared = catalog.is_shared();
    let (report, tenants) = tokio::task::spawn_blocking(move || {
        let report = catalog.seed_tenants(&specs)?;
        catalog.tenants().map(|t| (report, t.unwrap_or_default()))
    })
    .await
    .map_err(|e| GatewayError::Join(e.to_string()))??;
    for tenant in &report.inserted {
        tracing::info!(
            tenant,
            "tenant seeded into the catalog from the configuration file"
        );
    }
    for tenant in &report.updated {
        tracing::info!(tenant, "tenant updated from the configuration file");
    }
    for tenant in &report.removed {
        tracing::info!(
            tenant,
            "tenant removed: the configuration file no longer names it"
        );
    }
    for (tenant, fields) in &report.conflicts {
        if shared {
            tracing::warn!(
                tenant,
                fields = %fields.join(","),
                "the configuration file's tenant differs from the shared catalog's: the \
                 catalog's is served"
            );
        } else {
            tracing::warn!(
                tenant,
                fields = %fields.join(","),
                "the configuration file's tenant differs from the catalog's, where it was \
                 changed online: the catalog's is served (`sluice tenant history`)"
            );
        }
    }
    Ok(tenants)
}

/// Reads the catalog's tenants every [`TENANT_REFRESH`] and serves them when they (or the
/// keys live among them) changed, until `stop` changes.
pub(crate) async fn refresh_loop(control: Control, mut stop: watch::Receiver<bool>) {
    let mut last: Option<(Vec<TenantSpec>, Vec<String>)> = None;
    loop {
        tokio::select! {
            () = tokio::time::sleep(TENANT_REFRESH) => {}
            _ = stop.changed() => return,
        }
        let catalog = Arc::clone(&control.catalog);
        let read = tokio::task::spawn_blocking(move || catalog.tenants()).await;
        let specs = match read {
            Ok(Ok(specs)) => specs.unwrap_or_default(),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "reading the catalog's tenants failed");
                continue;
            }
            Err(e) => {
                tracing::warn!(error = %e, "reading the catalog's tenants failed");
                continue;
            }
        };
        let now = now_ms();
        let live: Vec<String> = specs
            .iter()
            .flat_map(|s| {
                s.keys
                    .iter()
                    .filter(|k| k.live(now))
                    .map(|k| k.access_key.clone())
            })
            .collect();
        let seen = (specs, live);
        if last.as_ref() == Some(&seen) {
            continue;
        }
        if let Err(e) = control.serve_tenants(&seen.0).await {
            tracing::warn!(error = %e, "the catalog's tenants were not applied");
            continue;
        }
        last = Some(seen);
    }
}
