//! sluice configuration, parsed at the edge in two layers.
//!
//! [`file`] is the serde schema of the TOML file exactly as operators write it (every table
//! denies unknown fields: a typo in a limit must not become a silent SLA breach). [`Config`]
//! and friends are the validated runtime types the rest of sluice consumes: sizes are bytes,
//! rates are bytes per second, enums are enums, and every cross-field rule (unique tenant ids
//! and access keys, reservations that fit the capacity) has been checked. Errors name the
//! field, e.g. `tenant[1] "bob": capacity: unknown unit "GiBs"`.
//!
//! This crate owns no I/O beyond reading the file it is pointed at.

mod admin;
mod catalog;
mod encryption;
mod file;
mod node;
mod scrub;
mod validate;

use std::path::{Path, PathBuf};
use std::time::Duration;

pub use admin::AdminConfig;
pub use catalog::CatalogConfig;
pub use encryption::{EVIDENCE_HEADER, Encryption, KeySource};
pub use file::FileConfig;
pub use scrub::ScrubConfig;
pub use validate::validate;

/// Why a configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("{field}: {problem}")]
    Invalid { field: String, problem: String },
}

impl ConfigError {
    pub(crate) fn invalid(field: impl Into<String>, problem: impl Into<String>) -> Self {
        Self::Invalid {
            field: field.into(),
            problem: problem.into(),
        }
    }
}

/// A whole sluice configuration: a gateway, an agent, or both, and the tenants.
#[derive(Debug, Clone)]
pub struct Config {
    pub gateway: Option<GatewayConfig>,
    pub backend: Backend,
    /// An emulated device in front of the backend (benchmarks): bounded bandwidth and ops.
    pub emulate: Option<Device>,
    /// `[backend.emulate] shared`: the device's state file, shared by every process that names
    /// it (they occupy one emulated device together); `None`, the device is this process's.
    pub emulate_shared: Option<PathBuf>,
    pub agent: Option<AgentConfig>,
    pub tenants: Vec<Tenant>,
    /// `[catalog]`: a shared catalog database; `None`, the embedded one under `data_dir`.
    pub catalog: Option<CatalogConfig>,
    /// `[admin]`: the administration's credentials and the seal key of tenants' secrets.
    pub admin: AdminConfig,
    /// Each `[[tenant]]`'s `[tenant.encryption]`, by tenant id (only tenants that have one).
    /// Kept beside `tenants`, not in [`Tenant`]: the served tenants may come from the catalog
    /// (the gateways' answer), while where a tenant's key comes from is always this file's.
    pub encryption: std::collections::BTreeMap<String, Encryption>,
}

#[derive(Debug, Clone)]
pub struct GatewayConfig {
    pub listen: String,
    pub data_dir: PathBuf,
    pub region: String,
    pub metrics_listen: Option<String>,
    /// `advertise`: the control listener's URL as the other gateways reach it
    /// (`http(s)://host:port`; a bare `host:port` is `http://`). `None`: its bound address.
    pub advertise: Option<String>,
    /// `None`: no `[gateway.capacity]`, nothing is throttled.
    pub throttle: Option<Capacity>,
    /// Largest single object body accepted by PutObject or UploadPart.
    pub max_object_size: u64,
    /// `tls_cert` and `tls_key`: the S3 listener speaks TLS with this certificate.
    pub tls: Option<TlsFiles>,
    /// `[gateway.scrub]`: the continuous scrub; `None`, off.
    pub scrub: Option<ScrubConfig>,
}

/// A listener's certificate chain and private key, PEM files (`tls_cert`, `tls_key`); read
/// and checked when the listener starts and on every reload, not here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// What the shared tier can serve, handed out by the throughput scheduler.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Capacity {
    /// Bytes per second.
    pub bandwidth: f64,
    /// Operations per second.
    pub ops: f64,
    pub policy: Policy,
    /// Requests a tenant may have waiting for admission before it gets `SlowDown`.
    pub queue_depth: usize,
    /// The scheduling unit of bodies, in bytes (1–4 MiB).
    pub grain: u64,
    /// `coordinate` (default true): with a shared catalog, the gateways on it share this
    /// capacity, split among them by demand (see docs/cluster-qos.md); false: each paces to
    /// all of it on its own. Nothing changes with the embedded catalog (one gateway).
    pub coordinate: bool,
}

/// How the gateway arbitrates the shared tier between tenants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// dmClock: per-tenant reservation, weight and limit, paced to the capacity (default).
    DmClock,
    /// One queue for every tenant, paced to the capacity: no isolation (for comparison).
    Fifo,
    /// Each tenant capped at its limit, nothing else (static caps, for comparison).
    RateLimit,
}

/// Where object data lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backend {
    /// The local filesystem under `data_dir/objects` (fsync on).
    Local,
    /// Any S3-compatible store, through `object_store`'s S3 client.
    S3(S3Backend),
}

/// A backend slowed to a device's bandwidth and operation rate, with a FIFO queue.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Device {
    /// Bytes per second.
    pub bandwidth: f64,
    /// Operations per second.
    pub ops: f64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Backend {
    pub bucket: String,
    pub endpoint: Option<String>,
    pub region: String,
    pub access_key: String,
    pub secret_key: String,
}

#[derive(Debug, Clone)]
pub struct AgentConfig {
    pub listen: String,
    pub data_dir: PathBuf,
    /// The gateways of the shared tier (`upstream`, a URL or a list of them): the drain
    /// spreads its transfers over them and fails over when one dies. Never empty, no
    /// duplicates, each `http://` or `https://` host and port without a path.
    pub upstream: Vec<String>,
    /// The region the agent signs its upstream requests for (SigV4).
    pub upstream_region: String,
    pub status_listen: Option<String>,
    /// `tls_cert` and `tls_key`: the S3 listener speaks TLS with this certificate.
    pub tls: Option<TlsFiles>,
    /// `upstream_ca`: a PEM file of CA certificates trusted for every `https://` upstream, in
    /// addition to the system's roots.
    pub upstream_ca: Option<PathBuf>,
    /// `escrow_lease`: how long the shared-tier quota the agent holds for a tenant outlives
    /// its last renewal (renewed every third of it); a dead agent's escrow returns after
    /// this. 1 s to 10 min, default 30 s.
    pub escrow_lease: std::time::Duration,
    /// `[agent.capacity]`: the node's local device, shared among the node's tenants by their
    /// `local_reservation`, `local_weight` and `local_limit`. `None`: no scheduling on the
    /// node (every local transfer is issued at once, in arrival order).
    pub capacity: Option<Capacity>,
    /// `[agent.capacity] uplink`: bytes per second the drain may send upstream, shared among
    /// the node's tenants by `local_weight` within each tenant's own drain pace. `None`: no
    /// shared cap (the drain's transfers are still started in weighted order).
    pub uplink: Option<f64>,
    /// `[agent.emulate]`: the agent's local store behind an emulated device (benchmarks).
    pub emulate: Option<Device>,
    /// `node_credential_file` and `gateway_control`: the agent reads the tenants and their
    /// keys from the gateways' control listeners (`host:port`, `[gateway] metrics_listen`)
    /// with this node's credential (`sluice tenant node-token NODE`), every second.
    pub fetch: Option<TenantFetch>,
}

/// `[agent] node_credential_file` and `gateway_control`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantFetch {
    pub credential_file: PathBuf,
    /// The gateways' control listeners, `host:port`; never empty.
    pub control: Vec<String>,
}

/// Buckets a tenant may own unless `max_buckets` says otherwise (Ceph RGW's default).
pub const DEFAULT_MAX_BUCKETS: u64 = 1000;

/// A tenant: identity, keys, and its share of each isolation boundary.
#[derive(Debug, Clone)]
pub struct Tenant {
    pub id: String,
    pub access_key: String,
    pub secret_key: String,
    /// Hard quota on the shared tier, bytes.
    pub capacity: u64,
    /// How many objects and multipart uploads in progress the tenant may hold on the shared
    /// tier (each costs the catalog a record the byte quota does not count); `u64::MAX`: any.
    pub max_objects: u64,
    /// How many buckets the tenant may own (default [`DEFAULT_MAX_BUCKETS`], as Ceph RGW).
    pub max_buckets: u64,
    pub qos: Qos,
    pub local: LocalSpec,
}

/// dmClock parameters in bytes per second (reservation, limit) and a relative weight.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Qos {
    pub reservation: f64,
    pub weight: f64,
    /// `None`: no cap beyond the tier's capacity.
    pub limit: Option<f64>,
}

impl Default for Qos {
    /// No reservation, weight 1, no limit.
    fn default() -> Self {
        Self {
            reservation: 0.0,
            weight: 1.0,
            limit: None,
        }
    }
}

/// The node agent's per-tenant settings.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalSpec {
    pub local_capacity: u64,
    pub drain_rate: Option<f64>,
    pub interval: Option<Duration>,
    pub retention: Retention,
    pub commit_markers: Vec<String>,
    /// The tenant's share of the node's local device (`local_reservation`, `local_weight`,
    /// `local_limit`), used when `[agent.capacity]` is set; its weight also shares the drain's
    /// uplink.
    pub local_qos: Qos,
}

/// How much durable-upstream data the agent keeps on local disk for fast restores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retention {
    /// Keep the newest N checkpoint prefixes.
    Checkpoints(u32),
    /// Keep up to this many bytes.
    Bytes(u64),
}

/// Commit markers honoured when a tenant names none (DCP, Orbax, Megatron, convention).
pub const DEFAULT_COMMIT_MARKERS: &[&str] = &[
    ".metadata",
    "commit_success.txt",
    "latest_checkpointed_iteration.txt",
    "*.commit",
];

impl Config {
    /// Reads and validates a configuration file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&text, path)
    }

    /// Parses and validates configuration text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &Path) -> Result<Self, ConfigError> {
        let file: FileConfig = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: origin.to_owned(),
            message: e.to_string(),
        })?;
        let base = origin.parent().unwrap_or_else(|| Path::new("."));
        validate(file, base)
    }

    pub fn tenant(&self, id: &str) -> Option<&Tenant> {
        self.tenants.iter().find(|t| t.id == id)
    }

    /// The tenant's `[tenant.encryption]`, if it has one.
    pub fn encryption(&self, tenant: &str) -> Option<&Encryption> {
        self.encryption.get(tenant)
    }
}
