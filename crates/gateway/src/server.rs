//! Binding and serving.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use sluice_config::{Config, Policy};
use sluice_meta::Catalog;
use sluice_metrics::Metrics;
use sluice_s3::{BlobStore, Front, FrontConfig, ReconcileSummary, Tenants, reconcile};
use sluice_serve::tls::ServerTls;
use sluice_serve::{HEADER_READ_TIMEOUT, serve};
use sluice_store::{open_backend, part_size};
use sluice_throttle::{Throttle, ThrottleConfig};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::{Control, GatewayError, gateway_section, tenant_specs};

/// The gateway's listeners, bound before anything else starts (see the crate doc).
pub struct Listeners {
    s3: (TcpListener, SocketAddr),
    metrics: Option<(TcpListener, SocketAddr)>,
    /// The S3 listener's certificate (`tls_cert`, `tls_key`), read and checked with the binds.
    tls: Option<ServerTls>,
}

/// Binds `addr`, which the configuration names under `key`.
pub(crate) async fn bind(
    key: &'static str,
    addr: &str,
) -> Result<(TcpListener, SocketAddr), GatewayError> {
    let failed = |source| GatewayError::Listen {
        key,
        addr: addr.to_owned(),
        source,
    };
    let listener = TcpListener::bind(addr).await.map_err(failed)?;
    let local = listener.local_addr().map_err(failed)?;
    Ok((listener, local))
}

impl Listeners {
    /// Binds `[gateway] listen` and, if set, `[gateway] metrics_listen` (port 0 picks a free
    /// one), and reads the S3 listener's certificate if `tls_cert` and `tls_key` are set.
    pub async fn bind(config: &Config) -> Result<Self, GatewayError> {
        let g = gateway_section(config)?;
        let tls = match &g.tls {
            Some(files) => Some(ServerTls::load("[gateway]", &files.cert, &files.key)?),
            None => None,
        };
        let s3 = bind("[gateway] listen", &g.listen).await?;
        let metrics = match &g.metrics_listen {
            Some(m) => Some(bind("[gateway] metrics_listen", m).await?),
            None => None,
        };
        Ok(Self { s3, metrics, tls })
    }

    /// Whether the S3 listener speaks TLS.
    pub fn tls(&self) -> bool {
        self.tls.is_some()
    }

    /// Where S3 will be served.
    pub fn s3_addr(&self) -> SocketAddr {
        self.s3.1
    }

    /// Where `/metrics`, `/healthz` and `/readyz` will be served.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().map(|m| m.1)
    }
}

/// An opened (reconciled, not yet serving) gateway.
pub struct Gateway {
    front: Front,
    control: Control,
    config: Config,
    pub summary: ReconcileSummary,
}

/// A gateway serving in the background.
pub struct Running {
    pub addr: SocketAddr,
    /// Where `/metrics` is served, if `metrics_listen` is set.
    pub metrics_addr: Option<SocketAddr>,
    pub control: Control,
    shutdown: watch::Sender<bool>,
    task: JoinHandle<()>,
    /// The background tasks that hold the catalog (the tenants' refresh, the scrub): awaited
    /// on shutdown, so that the catalog is released when it returns (a restart in the same
    /// process then opens it).
    background: Vec<JoinHandle<()>>,
}

impl Gateway {
    /// Opens the catalog and backend and reconciles them.
    pub async fn open(config: &Config) -> Result<Self, GatewayError> {
        let g = gateway_section(config)?;
        std::fs::create_dir_all(&g.data_dir).map_err(|source| GatewayError::DataDir {
            path: g.data_dir.clone(),
            source,
        })?;
        let (catalog, report) = if let Some(shared) = &config.catalog {
            crate::open_shared_catalog(&shared.url).await?
        } else {
            let path = g.data_dir.join("meta.redb");
            let opening = path.clone();
            tokio::task::spawn_blocking(move || Catalog::open(&opening))
                .await
                .map_err(|e| GatewayError::Join(e.to_string()))?
                .map_err(|e| {
                    if crate::catalog_locked(&e) {
                        GatewayError::CatalogLocked { path }
                    } else {
                        GatewayError::Catalog(e)
                    }
                })?
        };
        // The catalog's tenants are served (the file's seeded into it first), their secrets
        // sealed at rest with the seal key (see `admin::seal`).
        let sealer = Arc::new(crate::admin::sealer(config, true)?);
        let admin_token = if g.metrics_listen.is_some() {
            Some(Arc::<str>::from(crate::admin::admin_token(config, true)?))
        } else {
            None
        };
        let specs = crate::tenants::seed(&catalog, config, &sealer).await?;
        let keys = crate::tenants::keys_of(&specs, &sealer);
        let config = &crate::tenants::adopt(config, &specs, &keys);
        crate::set_tenant_limits(catalog.ledger(), config);
        let grain = g
            .throttle
            .map_or(sluice_s3::blob::DEFAULT_GRAIN, |c| c.grain);
        let local = matches!(config.backend, sluice_config::Backend::Local);
        let backend = open_backend(config)?;
        let blobs = BlobStore::new(Arc::clone(&backend), grain, part_size(config, grain));
        // Behind an emulated device every read must go through the store, grain by grain: a
        // GET on local files opens the blob once (one grain charged to the device) and reads
        // or sends the rest from the file itself, which the device never sees, so a tier
        // shared by several gateways would not carry their reads.
        let blobs = Arc::new(if local && config.emulate.is_none() {
            blobs.with_local_files()
        } else {
            blobs
        });
        let local_root = local.then(|| g.data_dir.join("objects"));
        // Against a shared catalog an unreferenced blob may be another gateway's write in
        // progress: start-up deletes nothing (the garbage collector's grace period decides).
        let mut summary = if catalog.is_shared() {
            ReconcileSummary::default()
        } else {
            reconcile(&catalog, &blobs, local_root.as_deref()).await?
        };
        summary.usage_fixed = report.usage_fixed;
        for (tenant, was, now) in &summary.usage_fixed {
            tracing::warn!(tenant, was, now, "usage recomputed from the catalog");
        }
        for (tenant, blob) in &summary.missing {
            tracing::error!(
                tenant,
                blob,
                "the backend has lost a blob the catalog references"
            );
        }
        if summary.orphans_deleted + summary.staged_deleted > 0 {
            tracing::info!(
                orphans = summary.orphans_deleted,
                staged = summary.staged_deleted,
                "removed the remains of interrupted writes"
            );
        }
        let throttle = match g.throttle {
            None => None,
            Some(c) => Some(Throttle::start(
                ThrottleConfig {
                    policy: match c.policy {
                        Policy::DmClock => sluice_throttle::Policy::DmClock,
                        Policy::Fifo => sluice_throttle::Policy::Fifo,
                        Policy::RateLimit => sluice_throttle::Policy::RateLimit,
                    },
                    bandwidth: c.bandwidth,
                    ops: c.ops,
                    queue_depth: c.queue_depth,
                    // Half a grain's service time, within 2–10 ms (see sluice-throttle).
                    lookahead: Duration::from_secs_f64(c.grain as f64 / c.bandwidth / 2.0).clamp(
                        sluice_throttle::DEFAULT_LOOKAHEAD,
                        Duration::from_millis(10),
                    ),
                },
                tenant_specs(config)?,
            )?),
        };
        let catalog = Arc::new(catalog);
        let metrics = Arc::new(Metrics::default());
        for t in &config.tenants {
            metrics.tenant(&t.id);
        }
        let front = Front::with_throttle(
            Arc::clone(&catalog),
            blobs,
            FrontConfig {
                region: g.region.clone(),
                max_object_size: g.max_object_size,
            },
            throttle.clone(),
            Arc::clone(&metrics),
        );
        let control = Control {
            catalog,
            backend,
            tenants: Arc::new(Tenants::new(keys)),
            throttle,
            metrics,
            config: Arc::new(std::sync::Mutex::new(config.clone())),
            applying: Arc::default(),
            tls: None,
            scrub: crate::scrub::Scrub::new(g.scrub),
            sealer,
            admin_token,
            cluster: None,
        };
        Ok(Self {
            front,
            control,
            config: config.clone(),
            summary,
        })
    }

    pub fn front(&self) -> &Front {
        &self.front
    }

    /// Binds the configured addresses (port 0 picks a free one) and serves in the background.
    pub async fn start(self) -> Result<Running, GatewayError> {
        let listeners = Listeners::bind(&self.config).await?;
        Ok(self.start_on(listeners))
    }

    /// Serves in the background on listeners bound beforehand ([`Listeners::bind`]).
    pub fn start_on(self, listeners: Listeners) -> Running {
        let Listeners {
            s3: (listener, addr),
            metrics,
            tls,
        } = listeners;
        let cluster = self.cluster(addr, metrics.as_ref().map(|m| m.1));
        let mut control = self.control;
        control.tls.clone_from(&tls);
        // dmClock's δ/ρ from clients spread over gateways (the node agent) apply only to a
        // gateway pacing on its own: with the coordinator a tenant's shares already sum to
        // its reservation and limit, and δ would count the others' work twice.
        if let Some(t) = &control.throttle {
            t.honour_elsewhere(cluster.is_none());
        }
        control.cluster = cluster;
        let blobs = Arc::clone(self.front.blobs());
        let service = sluice_s3::gateway_service(self.front, &control.tenants);
        let (tx, rx) = watch::channel(false);
        let metrics_addr = metrics.map(|(l, a)| {
            control.clone().serve_metrics(l, rx.clone());
            a
        });
        let refresh = tokio::spawn(crate::tenants::refresh_loop(control.clone(), rx.clone()));
        let scrub = tokio::spawn(crate::scrub::run(
            control.clone(),
            blobs,
            crate::scrub::holder(addr, control.catalog.is_shared()),
            rx.clone(),
        ));
        let mut background = vec![refresh, scrub];
        if let Some(cluster) = &control.cluster {
            background.push(tokio::spawn(crate::cluster::run(
                Arc::clone(cluster),
                Arc::clone(&control.catalog),
                rx.clone(),
            )));
        }
        let task = tokio::spawn(serve(listener, tls, service, HEADER_READ_TIMEOUT, rx));
        Running {
            addr,
            metrics_addr,
            control,
            shutdown: tx,
            task,
            background,
        }
    }

    /// This gateway's part in cluster-wide QoS: with a shared catalog, a dmClock capacity
    /// with `coordinate = true` and a control listener to be reached on (see `cluster`).
    fn cluster(
        &self,
        s3: SocketAddr,
        control: Option<SocketAddr>,
    ) -> Option<Arc<crate::cluster::Cluster>> {
        let g = gateway_section(&self.config).ok()?;
        let capacity = g.throttle?;
        if !self.control.catalog.is_shared()
            || !capacity.coordinate
            || capacity.policy != Policy::DmClock
        {
            return None;
        }
        let Some(control) = control else {
            tracing::warn!(
                "[gateway.capacity] coordinate needs metrics_listen (the gateways report there): \
                 this gateway paces to the whole capacity on its own"
            );
            return None;
        };
        let throttle = self.control.throttle.clone()?;
        match crate::cluster::Cluster::new(&self.config, throttle, s3, control) {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::error!(error = %e, "cluster QoS could not start: pacing to the whole capacity");
                None
            }
        }
    }
}

impl Running {
    /// Stops accepting, lets requests in flight finish (bounded), and returns.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        let _ = self.task.await;
        for t in self.background {
            let _ = t.await;
        }
    }

    /// Serves until the task ends (it only ends on shutdown).
    pub async fn wait(self) {
        let _ = self.task.await;
        for t in self.background {
            let _ = t.await;
        }
    }

    /// A handle that triggers shutdown from elsewhere (e.g. a signal handler).
    pub fn stopper(&self) -> watch::Sender<bool> {
        self.shutdown.clone()
    }
}
