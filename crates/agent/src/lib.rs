//! The sluice node agent: the GPU node's burst buffer in front of the shared tier.
//!
//! Trainers talk S3 to the agent on the node. It serves the gateway's own S3 front end
//! ([`sluice_s3::Front`]) over a catalog and blob store on the node's disk, with each
//! tenant's `local_capacity` as its hard local quota, so a write is acknowledged once its
//! bytes are fsynced and the catalog transaction that makes it visible has committed — and
//! that same transaction appends the write to the drain [`journal`]. The [`drain`] worker
//! then carries the journal to the gateways (`upstream`, one or several: [`upstream::Pool`]
//! spreads the transfers over them and fails over when one dies) with the tenant's own keys, paced
//! per tenant ([`pacer`]), commit markers after their checkpoint, verified by checksum and
//! HEAD before anything is marked durable; local copies are evicted only once durable.
//! [`node`] is upstream as the front's tier, for the reads it merges; [`status`] reports.
//! [`admission`] shares the node's local device (dmClock paced to `[agent.capacity]`, per
//! tenant `local_reservation`, `local_weight`, `local_limit`) and the drain's uplink among
//! the node's tenants, when configured. [`keys`] holds the confidential-object key of each
//! tenant with `[tenant.encryption]` (from its key broker or `key_file`, in memory only) and
//! hands it to the front, which encrypts that tenant's bodies.
//!
//! Start-up order: read the S3 listener's certificate if `tls_cert` and `tls_key` are set, and
//! bind every listener ([`Listeners::bind`]: a bad certificate or an address in use fails the
//! start before anything is created, naming the config key), open the catalog (usage
//! recomputed; one another process holds is refused as [`AgentError::CatalogLocked`]),
//! reconcile it with the local blobs (orphans of interrupted writes deleted, exactly as on
//! the gateway), open the journal, serve, then start the drain. A kill -9 at any point is safe: see the journal's crash model.
//!
//! Reload ([`Control::reload`], on SIGHUP) is a validated swap, as on the gateway: the new
//! file has been parsed and checked as a whole before anything changes; then the tenants'
//! keys (the S3 listener's and the upstream's), local quotas, bucket limits, drain policies
//! (rate, limit, interval), retention and commit markers are replaced, new tenants
//! added, a changed `[tenant.encryption]` read anew (a `key_file` that does not load refuses
//! the whole reload), and the S3 listener's certificate read anew from `tls_cert` and `tls_key` for new
//! connections (one that does not load refuses the whole reload). A tenant no longer in the file can no longer call the agent, but what it buffered
//! still drains with its last keys. The listen addresses, the data directory, the upstream
//! gateways (and their `upstream_ca`) and turning TLS on or off need a restart: a reload that changes them is refused and nothing changes.
//!
//! With `[agent] node_credential_file` and `gateway_control` the tenants and their keys also
//! come from the gateways ([`tenants_fetch`]): read every second, cached in the data directory
//! for outages (the cache is served from the start), merged with the file's `[[tenant]]`
//! entries, and served through the same swap as a reload ([`Control::apply_fetched`]).
//!
//! The agent owns no S3 semantics of its own: every operation, the read merge included, is the
//! gateway's code.

pub mod admission;
pub mod drain;
pub mod escrow;
pub mod journal;
pub mod keys;
pub mod node;
pub mod pacer;
pub mod server;
pub mod status;
pub mod tenants_fetch;
pub mod upstream;

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use object_store::ObjectStore;
use sluice_config::Config;
use sluice_meta::Catalog;
use sluice_s3::{BlobStore, Front, FrontConfig, ReconcileSummary, TenantKey, Tenants};
use sluice_store::{ChecksumStore, Checksums, EmulatedDevice, LocalDisk};
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

use crate::admission::Admission;
use crate::drain::Drain;
use crate::escrow::SharedQuota;
use crate::journal::{Journal, JournalHook};
use crate::node::SharedTier;
use crate::server::{Listener, StatusRoutes};
use crate::tenants_fetch::Fetched;
use crate::upstream::{Credentials, Pool, Upstream, UpstreamStore};
use sluice_serve::tls::{ServerTls, Staged};

/// Why the agent could not start.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("the configuration has no [agent] section")]
    NotConfigured,
    #[error("data directory {path}: {source}")]
    DataDir {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Not a `source`: the catalog's error already ends with its cause's text, and a chain
    /// would print it once per layer.
    #[error("catalog: {0}")]
    Catalog(sluice_meta::MetaError),
    #[error(
        "{} is held by another sluice process (a `sluice up` or `sluice agent` already running \
         with this data_dir): stop it, or give this one another data_dir",
        path.display()
    )]
    CatalogLocked { path: PathBuf },
    #[error("local store: {0}")]
    Store(#[from] object_store::Error),
    #[error("reconciling with the local store: {0}")]
    Reconcile(#[from] sluice_s3::ReconcileError),
    #[error("a start-up task failed: {0}")]
    Join(String),
    #[error("upstream: {0}")]
    Upstream(#[from] upstream::UpstreamError),
    /// The S3 listener's certificate or key (`tls_cert`, `tls_key`) could not be used.
    #[error("TLS: {0}")]
    Tls(#[from] sluice_serve::tls::TlsError),
    /// `[agent] upstream_ca` could not be read or holds no certificate.
    #[error("`[agent] upstream_ca` {}: {problem}", path.display())]
    UpstreamCa { path: PathBuf, problem: String },
    /// `key` is the configuration key that named the address (`[agent] listen`).
    #[error("cannot listen on {addr} (`{key}`): {source}")]
    Listen {
        key: &'static str,
        addr: String,
        source: std::io::Error,
    },
    #[error("reload refused: {0}")]
    Reload(String),
    /// The node's schedulers (`[agent.capacity]` and the tenants' local shares).
    #[error("[agent.capacity]: {0}")]
    Admission(#[from] sluice_throttle::ThrottleError),
    /// `[agent] node_credential_file` could not be read.
    #[error("[agent] node_credential_file: {0}")]
    Fetch(#[from] tenants_fetch::FetchError),
    /// A tenant's `[tenant.encryption] key_file` could not be used.
    #[error("{0}")]
    Keys(#[from] keys::KeyError),
}

impl From<sluice_meta::MetaError> for AgentError {
    fn from(e: sluice_meta::MetaError) -> Self {
        Self::Catalog(e)
    }
}

/// The agent's listeners, bound before anything else starts (see the crate doc).
pub struct Listeners {
    s3: (tokio::net::TcpListener, SocketAddr),
    status: Option<(tokio::net::TcpListener, SocketAddr)>,
    /// The S3 listener's certificate (`tls_cert`, `tls_key`), read and checked with the binds.
    tls: Option<ServerTls>,
}

impl Listeners {
    /// Binds `[agent] listen` and, if set, `[agent] status_listen` (port 0: a free one), and
    /// reads the S3 listener's certificate if `tls_cert` and `tls_key` are set.
    pub async fn bind(config: &Config) -> Result<Self, AgentError> {
        let a = config.agent.as_ref().ok_or(AgentError::NotConfigured)?;
        let tls = match &a.tls {
            Some(files) => Some(ServerTls::load("[agent]", &files.cert, &files.key)?),
            None => None,
        };
        let s3 = server::bind_key("[agent] listen", &a.listen).await?;
        let status = match &a.status_listen {
            Some(s) => Some(server::bind_key("[agent] status_listen", s).await?),
            None => None,
        };
        Ok(Self { s3, status, tls })
    }

    /// Whether the S3 listener speaks TLS.
    pub fn tls(&self) -> bool {
        self.tls.is_some()
    }

    /// Where S3 will be served.
    pub fn s3_addr(&self) -> SocketAddr {
        self.s3.1
    }

    /// Where `/status`, `/metrics`, `/healthz` and `/readyz` will be served.
    pub fn status_addr(&self) -> Option<SocketAddr> {
        self.status.as_ref().map(|s| s.1)
    }
}

/// What a running agent exposes for reload (see the module doc).
#[derive(Clone)]
pub struct Control {
    tenants: Arc<Tenants>,
    drain: Arc<Drain>,
    upstream: Arc<Pool<Upstream>>,
    hook: Arc<JournalHook>,
    admission: Arc<Admission>,
    /// The file's configuration (its tenants as the file says: see `served`).
    config: Arc<std::sync::Mutex<Config>>,
    /// The gateways' last answer, when the agent fetches its tenants ([`tenants_fetch`]).
    fetched: Arc<std::sync::Mutex<Option<Fetched>>>,
    /// The S3 listener's certificate, when it speaks TLS (set once serving).
    tls: Option<ServerTls>,
    /// The tenants' confidential-object keys.
    keys: keys::Keys,
}

/// The configuration served: the file's, its tenants merged with the gateways' answer
/// ([`tenants_fetch::merge`]); and every access key served.
fn served(file: &Config, fetched: Option<&Fetched>) -> (Config, Vec<TenantKey>) {
    let (tenants, keys) = tenants_fetch::merge(&file.tenants, fetched);
    let mut config = file.clone();
    config.tenants = tenants;
    (config, keys)
}

fn upstream_credentials(config: &Config) -> HashMap<String, Credentials> {
    config
        .tenants
        .iter()
        .map(|t| {
            (
                t.id.clone(),
                Credentials {
                    access_key: t.access_key.clone(),
                    secret_key: t.secret_key.clone(),
                },
            )
        })
        .collect()
}

fn commit_markers(config: &Config) -> BTreeMap<String, Vec<String>> {
    config
        .tenants
        .iter()
        .map(|t| (t.id.clone(), t.local.commit_markers.clone()))
        .collect()
}

/// The tenants' local limits in the node's ledger: at start and on reload.
fn set_local_limits(catalog: &Catalog, config: &Config) {
    for t in &config.tenants {
        catalog.ledger().set_quota(&t.id, t.local.local_capacity);
        // The gateway's bucket limit: a bucket made here must be one it will accept.
        catalog.ledger().set_max_buckets(&t.id, t.max_buckets);
    }
}

impl Control {
    /// Whether `new` may be applied: `Err` names what would need a restart. Nothing changes.
    pub fn check(&self, new: &Config) -> Result<(), AgentError> {
        let current = self
            .config
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        check_fixed(&current, new)?;
        self.keys.prepare(new)?;
        self.staged_certificate(new).map(drop)
    }

    /// The S3 listener's new certificate read and checked (not yet served), when it speaks TLS.
    fn staged_certificate(&self, new: &Config) -> Result<Option<Staged>, AgentError> {
        let files = new.agent.as_ref().and_then(|a| a.tls.as_ref());
        match (&self.tls, files) {
            (Some(tls), Some(files)) => Ok(Some(tls.check(&files.cert, &files.key)?)),
            _ => Ok(None),
        }
    }

    /// Applies a new configuration (see the module doc for what may change).
    pub fn reload(&self, new: &Config) -> Result<(), AgentError> {
        let mut current = self
            .config
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        check_fixed(&current, new)?;
        let staged = self.staged_certificate(new)?;
        let keys = self.keys.prepare(new)?;
        if let (Some(tls), Some(staged)) = (&self.tls, staged) {
            tls.install(staged);
        }
        self.keys.install(keys);
        let fetched = lock(&self.fetched);
        self.serve(new, fetched.as_ref());
        drop(fetched);
        *current = new.clone();
        tracing::info!(tenants = new.tenants.len(), "configuration reloaded");
        Ok(())
    }

    /// Serves the gateways' new answer with the file's tenants ([`tenants_fetch`]).
    pub fn apply_fetched(&self, answer: &Fetched) {
        let file = lock(&self.config);
        let mut fetched = lock(&self.fetched);
        *fetched = Some(answer.clone());
        self.serve(&file, fetched.as_ref());
        tracing::info!(
            tenants = answer.tenants.len(),
            "the tenants and keys fetched from the gateways are served"
        );
    }

    /// The tenants' keys, local quotas, bucket limits, drain policies, markers and shares
    /// of `file` merged with `fetched`, replaced.
    fn serve(&self, file: &Config, fetched: Option<&Fetched>) {
        let (new, keys) = served(file, fetched);
        self.hook.set_markers(commit_markers(&new));
        set_local_limits(self.drain.journal.catalog(), &new);
        self.drain.set_tenants(&new.tenants);
        self.reshare(&new);
        self.upstream.set_credentials(&upstream_credentials(&new));
        self.tenants.replace(keys);
    }
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Control {
    /// The tenants' new shares of the local device and uplink, applied by the schedulers'
    /// dispatchers (already validated with the file: they cannot overbook).
    fn reshare(&self, new: &Config) {
        let (admission, tenants) = (Arc::clone(&self.admission), new.tenants.clone());
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                if let Err(e) = admission.update(&tenants).await {
                    tracing::error!(error = %e, "the node's schedulers refused the reload");
                }
            });
        } else {
            tracing::error!(
                "reload outside the agent's runtime: the tenants' local shares are unchanged"
            );
        }
    }
}

/// Refuses a reload that changes what needs a restart.
fn check_fixed(current: &Config, new: &Config) -> Result<(), AgentError> {
    let (Some(old), Some(next)) = (current.agent.as_ref(), new.agent.as_ref()) else {
        return Err(AgentError::Reload(
            "the new configuration has no [agent] section".into(),
        ));
    };
    let fixed = [
        ("listen", old.listen != next.listen),
        ("status_listen", old.status_listen != next.status_listen),
        ("data_dir", old.data_dir != next.data_dir),
        ("upstream", old.upstream != next.upstream),
        (
            "upstream_region",
            old.upstream_region != next.upstream_region,
        ),
        ("upstream_ca", old.upstream_ca != next.upstream_ca),
        (
            "capacity",
            old.capacity != next.capacity || old.uplink != next.uplink,
        ),
        ("emulate", old.emulate != next.emulate),
        (
            "node_credential_file, gateway_control",
            old.fetch != next.fetch,
        ),
        (
            "tls_cert, tls_key (TLS on or off)",
            old.tls.is_some() != next.tls.is_some(),
        ),
    ];
    let changed: Vec<&str> = fixed.iter().filter(|f| f.1).map(|f| f.0).collect();
    if !changed.is_empty() {
        return Err(AgentError::Reload(format!(
            "[agent] {} need a restart",
            changed.join(", ")
        )));
    }
    Ok(())
}

/// An opened (reconciled, not yet serving) agent.
pub struct Agent {
    node: Front,
    drain: Arc<Drain>,
    quota: Arc<SharedQuota>,
    tenants: Arc<Tenants>,
    keys: keys::Keys,
    control: Control,
    config: Config,
    /// The gateways to fetch the tenants from, the cache, and its answer read at open.
    fetch: Option<(Arc<dyn tenants_fetch::Source>, PathBuf, Option<Fetched>)>,
    pub summary: ReconcileSummary,
}

/// An agent serving and draining in the background.
pub struct Running {
    pub addr: SocketAddr,
    pub status_addr: Option<SocketAddr>,
    pub drain: Arc<Drain>,
    pub control: Control,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Agent {
    pub async fn open(file: &Config) -> Result<Self, AgentError> {
        let a = file.agent.as_ref().ok_or(AgentError::NotConfigured)?;
        // With a node credential, the tenants the gateways answered last (cached) are
        // served from the start: a node restarted while no gateway answers still serves.
        let fetch = match &a.fetch {
            Some(f) => {
                let source = tenants_fetch::Gateways::new(f.control.clone(), &f.credential_file)?;
                let cache = tenants_fetch::cache_path(&a.data_dir);
                let cached = tenants_fetch::load_cache(&cache);
                Some((
                    Arc::new(source) as Arc<dyn tenants_fetch::Source>,
                    cache,
                    cached,
                ))
            }
            None => None,
        };
        let (effective, keys) = served(file, fetch.as_ref().and_then(|f| f.2.as_ref()));
        let config = &effective;
        // Read before anything is created: a bad file fails the start naming its key.
        let roots = match &a.upstream_ca {
            Some(path) => upstream_roots(path)?,
            None => Vec::new(),
        };
        // A key_file that does not load fails the start; a key broker that refuses does not.
        let confidential = keys::Keys::open(file).await?;
        let objects = a.data_dir.join("objects");
        std::fs::create_dir_all(&objects).map_err(|source| AgentError::DataDir {
            path: objects.clone(),
            source,
        })?;
        let sums = Arc::new(Checksums::default());
        let wake = Arc::new(Notify::new());
        let hook = Arc::new(JournalHook::new(
            commit_markers(config),
            Arc::clone(&sums),
            Arc::clone(&wake),
        ));
        let path = a.data_dir.join("meta.redb");
        let opening = path.clone();
        let (catalog, report) = tokio::task::spawn_blocking(move || Catalog::open(&opening))
            .await
            .map_err(|e| AgentError::Join(e.to_string()))?
            .map_err(|e| match e {
                sluice_meta::MetaError::Storage(sluice_meta::redb::Error::DatabaseAlreadyOpen) => {
                    AgentError::CatalogLocked { path }
                }
                e => AgentError::Catalog(e),
            })?;
        let catalog = catalog.with_hook(Arc::clone(&hook) as _);
        set_local_limits(&catalog, config);
        let admission = Arc::new(Admission::start(config)?);
        let mut local: Arc<dyn ObjectStore> = Arc::new(LocalDisk::open(&objects)?);
        if let Some(d) = a.emulate {
            local = Arc::new(EmulatedDevice::new(local, d.bandwidth, d.ops));
        }
        let blobs = Arc::new(
            BlobStore::new(
                Arc::new(ChecksumStore::new(local, sums)),
                admission.grain(),
                admission.grain(),
            )
            .with_local_files()
            .with_blob_crc(),
        );
        let mut summary = sluice_s3::reconcile(&catalog, &blobs, Some(&objects)).await?;
        summary.usage_fixed = report.usage_fixed;
        for (tenant, blob) in &summary.missing {
            tracing::error!(
                tenant,
                blob,
                "the node's disk has lost a blob the catalog references"
            );
        }
        warn_if_overcommitted(&objects, &catalog, &config.tenants);
        let catalog = Arc::new(catalog);
        let journal = {
            let c = Arc::clone(&catalog);
            Arc::new(
                tokio::task::spawn_blocking(move || Journal::open(c))
                    .await
                    .map_err(|e| AgentError::Join(e.to_string()))??,
            )
        };
        let node_id = escrow::node_id(&a.data_dir).map_err(|source| AgentError::DataDir {
            path: a.data_dir.join("node-id"),
            source,
        })?;
        let upstream = Arc::new(Pool::connect_as(
            &a.upstream,
            &a.upstream_region,
            &upstream_credentials(config),
            &roots,
            &node_id,
        )?);
        let quota = Arc::new(SharedQuota::new(
            node_id,
            a.escrow_lease,
            Arc::clone(&upstream),
            Arc::clone(&journal),
            Arc::clone(&catalog),
        ));
        // The rollback manifests' high-water marks, in the catalog's file: a mark lost is a
        // rollback no longer detected (`sluice_s3::confidential::manifest`).
        let marks = Arc::new(sluice_s3::confidential::manifest::RedbHighWater::new(
            Arc::clone(&catalog),
        ));
        let front = Front::with_throttle(
            catalog,
            Arc::clone(&blobs),
            FrontConfig {
                region: config
                    .gateway
                    .as_ref()
                    .map_or_else(|| "us-east-1".to_owned(), |g| g.region.clone()),
                max_object_size: config
                    .gateway
                    .as_ref()
                    .map_or(5 << 40, |g| g.max_object_size),
            },
            admission.local().cloned(),
            Arc::clone(admission.metrics()),
        );
        let drain = Arc::new(
            Drain::new(
                Arc::clone(&journal),
                blobs,
                Arc::clone(&upstream) as Arc<dyn UpstreamStore>,
                wake,
                &config.tenants,
            )
            .with_admission(Arc::clone(&admission)),
        );
        let node = front
            .with_tier(Arc::new(
                SharedTier::new(journal, Arc::clone(&upstream), Arc::clone(&drain))
                    .with_quota(Arc::clone(&quota)),
            ))
            .with_confidential(Arc::new(confidential.clone()))
            .with_rollback_marks(marks);
        let tenants = Arc::new(Tenants::new(keys));
        let control = Control {
            tenants: Arc::clone(&tenants),
            drain: Arc::clone(&drain),
            upstream,
            hook,
            admission,
            config: Arc::new(std::sync::Mutex::new(file.clone())),
            fetched: Arc::new(std::sync::Mutex::new(
                fetch.as_ref().and_then(|f| f.2.clone()),
            )),
            tls: None,
            keys: confidential.clone(),
        };
        Ok(Self {
            node,
            drain,
            quota,
            tenants,
            keys: confidential,
            control,
            config: file.clone(),
            fetch,
            summary,
        })
    }

    /// Binds (port 0 picks a free one), serves, and starts draining.
    pub async fn start(self) -> Result<Running, AgentError> {
        let listeners = Listeners::bind(&self.config).await?;
        Ok(self.start_on(listeners))
    }

    /// Serves on listeners bound beforehand ([`Listeners::bind`]) and starts draining.
    pub fn start_on(self, listeners: Listeners) -> Running {
        let Listeners {
            s3: (listener, addr),
            status,
            tls,
        } = listeners;
        let mut control = self.control;
        control.tls.clone_from(&tls);
        let (tx, rx) = watch::channel(false);
        let own_status = server::TenantStatusRoute {
            drain: Arc::clone(&self.drain),
            tenants: Arc::clone(&self.tenants),
            keys: self.keys.clone(),
        };
        // Half the gateway's header limit: what a trainer stored here goes upstream with the
        // drain's own signature and headers, and must fit the gateway's limit whatever they add.
        let service = sluice_s3::service_with_route(self.node, &self.tenants, own_status)
            .with_header_limit(sluice_serve::HEADER_SECTION_MAX / 2);
        let mut tasks = vec![tokio::spawn(sluice_serve::serve(
            listener,
            tls,
            service,
            sluice_serve::HEADER_READ_TIMEOUT,
            rx.clone(),
        ))];
        let status_addr = status.as_ref().map(|(_, a)| *a);
        if let Some((l, _)) = status {
            let routes = StatusRoutes {
                drain: Arc::clone(&self.drain),
                metrics: Arc::clone(self.drain.admission().metrics()),
                keys: self.keys.clone(),
            };
            tasks.push(tokio::spawn(server::serve(
                l,
                Listener::Status(routes),
                rx.clone(),
            )));
        }
        if let Some((source, cache, cached)) = self.fetch {
            let c = control.clone();
            tasks.push(tokio::spawn(tenants_fetch::run(
                source,
                cache,
                cached,
                move |f| c.apply_fetched(f),
                rx.clone(),
            )));
        }
        tasks.push(tokio::spawn(self.keys.run(rx.clone())));
        tasks.push(tokio::spawn(Arc::clone(&self.quota).run(rx.clone())));
        tasks.push(tokio::spawn(Arc::clone(&self.drain).run(rx)));
        Running {
            addr,
            status_addr,
            drain: self.drain,
            control,
            shutdown: tx,
            tasks,
        }
    }
}

impl Running {
    /// Stops serving and draining (requests in flight get a grace period).
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
    }

    /// Runs until shut down from elsewhere.
    pub async fn wait(self) {
        for t in self.tasks {
            let _ = t.await;
        }
    }

    pub fn stopper(&self) -> watch::Sender<bool> {
        self.shutdown.clone()
    }
}

/// The CA certificates of `[agent] upstream_ca` (a PEM file of one or more).
fn upstream_roots(path: &std::path::Path) -> Result<Vec<object_store::Certificate>, AgentError> {
    let refused = |problem: String| AgentError::UpstreamCa {
        path: path.to_owned(),
        problem,
    };
    let pem = std::fs::read(path).map_err(|e| refused(format!("cannot read: {e}")))?;
    let roots = object_store::Certificate::from_pem_bundle(&pem)
        .map_err(|e| refused(format!("not a PEM certificate bundle: {e}")))?;
    if roots.is_empty() {
        return Err(refused(
            "no certificate in the file (expected PEM `BEGIN CERTIFICATE` sections)".into(),
        ));
    }
    Ok(roots)
}

/// Logs a warning when the tenants' local quotas add up to more than the node's disk can hold
/// (its free space plus what they already use): a tenant may then meet a full disk (refused
/// with "the storage is out of space") before its quota. Overcommitting is the operator's
/// call, not an error.
fn warn_if_overcommitted(
    dir: &std::path::Path,
    catalog: &Catalog,
    tenants: &[sluice_config::Tenant],
) {
    let quotas = tenants.iter().map(|t| t.local.local_capacity);
    if quotas.clone().any(|q| q == u64::MAX) {
        return; // a tenant without a local quota: the disk is its limit by design
    }
    let promised: u64 = quotas.sum();
    let used: u64 = tenants
        .iter()
        .filter_map(|t| catalog.ledger().usage(&t.id).map(|u| u.0))
        .sum();
    match rustix::fs::statvfs(dir) {
        Ok(fs) => {
            let room = fs.f_bavail.saturating_mul(fs.f_frsize).saturating_add(used);
            if promised > room {
                tracing::warn!(
                    promised = %sluice_units::ByteSize(promised),
                    room = %sluice_units::ByteSize(room),
                    dir = %dir.display(),
                    "the tenants' local quotas add up to more than the disk can hold: a tenant \
                     may find the disk full before its quota"
                );
            }
        }
        Err(e) => tracing::warn!(dir = %dir.display(), error = %e, "cannot read the disk's size"),
    }
}
