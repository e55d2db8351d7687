//! The tenants and their keys read from the gateways (`[agent] node_credential_file` and
//! `gateway_control`), so that no node's file holds a tenant's secret.
//!
//! Every [`POLL`] the agent asks the gateways' control listeners in turn, `GET
//! /admin/tenants` with `Authorization: Bearer <node credential>`, until one answers. An
//! answer that differs from the last is written to `data_dir/tenants.cache` (mode 0600,
//! written aside and renamed: a crash leaves the old cache or the new one) and served: the
//! gateways' live keys for every tenant they name, so a key revoked online stops working
//! here within about a second. When no gateway answers, the last answer stays served; at
//! start the cache is served before the first answer, so a node restarted during a gateway
//! outage serves its tenants as before.
//!
//! The file's `[[tenant]]` entries still count: they give a tenant's node-local settings
//! (`local_capacity`, drain, retention, local shares) and, for a tenant the gateways do not
//! name, its key. For a tenant the gateways name, their keys replace the file's. A tenant
//! the gateways name and the file does not gets the node-local defaults.
//!
//! The catalog may hold a tenant's `local_capacity`, `local_reservation`, `local_weight`
//! and `local_limit` too (set online: `sluice tenant add|set --local-capacity ...`).
//! Precedence, key by key: one the catalog holds is served, over the file's; one it does not
//! hold (`null` in the answer, and every answer of an older gateway) is the file's, or the
//! default. Where the file sets a key to another value than the catalog's, the catalog's is
//! served and the conflict is reported (a warning naming the tenant, the key and both
//! values, each time the tenants are served anew), never resolved silently. Local shares
//! that would not make a valid share with the file's (a local limit below a local
//! reservation) are reported and the file's shares kept.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sluice_config::{DEFAULT_COMMIT_MARKERS, LocalSpec, Qos, Retention, Tenant};
use sluice_s3::TenantKey;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

/// How often the gateways are asked.
pub const POLL: Duration = Duration::from_secs(1);

/// How long one gateway may take to answer.
pub const TIMEOUT: Duration = Duration::from_secs(2);

/// The cache's file name in the data directory.
pub const CACHE_FILE: &str = "tenants.cache";

/// The gateways' path (`sluice_gateway::admin::node::NODE_PATH`).
const PATH: &str = "/admin/tenants";

/// The largest answer read.
const MAX_ANSWER: u64 = 64 << 20;

/// One gateway's answer: every tenant with its live keys.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Fetched {
    pub tenants: Vec<FetchedTenant>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FetchedTenant {
    pub id: String,
    pub capacity: u64,
    pub max_objects: u64,
    pub max_buckets: u64,
    pub keys: Vec<FetchedKey>,
    /// The node-local settings the catalog holds (`None`: the file's; see the module doc).
    #[serde(default)]
    pub local_capacity: Option<u64>,
    #[serde(default)]
    pub local_reservation: Option<f64>,
    #[serde(default)]
    pub local_weight: Option<f64>,
    #[serde(default)]
    pub local_limit: Option<f64>,
}

/// A node-local key the file and the catalog set differently: the catalog's is served.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalConflict {
    pub tenant: String,
    pub key: &'static str,
    pub file: String,
    pub catalog: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FetchedKey {
    pub access_key: String,
    pub secret_key: String,
}

/// Why no answer came.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("{addr}: {source}")]
    Io {
        addr: String,
        source: std::io::Error,
    },
    #[error("{addr}: no answer within {TIMEOUT:?}")]
    Timeout { addr: String },
    #[error("{addr} refused ({status}): {why}")]
    Refused {
        addr: String,
        status: u16,
        why: String,
    },
    #[error("{addr}: not an answer: {why}")]
    Answer { addr: String, why: String },
    #[error("the node credential {}: {source}", path.display())]
    Credential {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the cache {}: {source}", path.display())]
    Cache {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Where answers come from (the gateways; a script in tests).
#[async_trait::async_trait]
pub trait Source: Send + Sync {
    async fn fetch(&self) -> Result<Fetched, FetchError>;
}

/// The gateways' control listeners, asked in turn.
pub struct Gateways {
    control: Vec<String>,
    credential: String,
}

impl Gateways {
    /// Reads the node's credential from `credential_file`.
    pub fn new(control: Vec<String>, credential_file: &Path) -> Result<Self, FetchError> {
        let credential = std::fs::read_to_string(credential_file)
            .map_err(|source| FetchError::Credential {
                path: credential_file.to_owned(),
                source,
            })?
            .trim()
            .to_owned();
        Ok(Self {
            control,
            credential,
        })
    }
}

#[async_trait::async_trait]
impl Source for Gateways {
    async fn fetch(&self) -> Result<Fetched, FetchError> {
        let mut last = None;
        for addr in &self.control {
            match tokio::time::timeout(TIMEOUT, get(addr, &self.credential)).await {
                Ok(Ok(f)) => return Ok(f),
                Ok(Err(e)) => last = Some(e),
                Err(_) => last = Some(FetchError::Timeout { addr: addr.clone() }),
            }
        }
        Err(last.unwrap_or_else(|| FetchError::Timeout {
            addr: "no gateway_control".into(),
        }))
    }
}

/// One `GET /admin/tenants` (HTTP/1.1, the connection closed after the answer).
async fn get(addr: &str, credential: &str) -> Result<Fetched, FetchError> {
    let io = |source| FetchError::Io {
        addr: addr.to_owned(),
        source,
    };
    let answer = |why: String| FetchError::Answer {
        addr: addr.to_owned(),
        why,
    };
    let mut stream = tokio::net::TcpStream::connect(addr).await.map_err(io)?;
    let head = format!(
        "GET {PATH} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {credential}\r\n\
         Connection: close\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.map_err(io)?;
    let mut raw = Vec::new();
    stream
        .take(MAX_ANSWER)
        .read_to_end(&mut raw)
        .await
        .map_err(io)?;
    let text = std::str::from_utf8(&raw).map_err(|e| answer(e.to_string()))?;
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| answer("no header section".into()))?;
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| answer("no status".into()))?;
    if status != 200 {
        let why = serde_json::from_str::<serde_json::Value>(body.trim())
            .ok()
            .and_then(|v| v["error"].as_str().map(str::to_owned))
            .unwrap_or_else(|| body.trim().to_owned());
        return Err(FetchError::Refused {
            addr: addr.to_owned(),
            status,
            why,
        });
    }
    serde_json::from_str(body.trim()).map_err(|e| answer(e.to_string()))
}

/// The cache's path under `data_dir`.
pub fn cache_path(data_dir: &Path) -> PathBuf {
    data_dir.join(CACHE_FILE)
}

/// The cached answer, if there is a readable one (an unreadable one is logged and ignored).
pub fn load_cache(path: &Path) -> Option<Fetched> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "the tenants' cache is not read");
            return None;
        }
    };
    match serde_json::from_str(&text) {
        Ok(f) => Some(f),
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "the tenants' cache is not an answer");
            None
        }
    }
}

/// Writes `fetched` to `path`: mode 0600, beside it first, then renamed.
pub fn save_cache(path: &Path, fetched: &Fetched) -> Result<(), FetchError> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let err = |source| FetchError::Cache {
        path: path.to_owned(),
        source,
    };
    let aside = path.with_extension("cache.new");
    let _ = std::fs::remove_file(&aside);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&aside)
        .map_err(err)?;
    let text = serde_json::to_vec(fetched).map_err(|e| err(std::io::Error::other(e)))?;
    f.write_all(&text).map_err(err)?;
    f.sync_all().map_err(err)?;
    std::fs::rename(&aside, path).map_err(err)
}

/// The tenants served: the file's, with the gateways' settings and keys for every tenant
/// they name (see the module doc); and every access key served.
pub fn merge(file: &[Tenant], fetched: Option<&Fetched>) -> (Vec<Tenant>, Vec<TenantKey>) {
    let Some(fetched) = fetched else {
        let keys = file.iter().map(file_key).collect();
        return (file.to_vec(), keys);
    };
    let named = |id: &str| fetched.tenants.iter().any(|t| t.id == id);
    let mut tenants: Vec<Tenant> = file.iter().filter(|t| !named(&t.id)).cloned().collect();
    let mut keys: Vec<TenantKey> = tenants.iter().map(file_key).collect();
    for f in &fetched.tenants {
        let Some(first) = f.keys.first() else {
            continue; // no live key: nobody can call for it, nor drain with it
        };
        let mut t = file
            .iter()
            .find(|t| t.id == f.id)
            .cloned()
            .unwrap_or_else(|| node_defaults(&f.id));
        t.capacity = f.capacity;
        t.max_objects = f.max_objects;
        t.max_buckets = f.max_buckets;
        for c in apply_local(&mut t, f) {
            tracing::warn!(
                tenant = %c.tenant,
                key = c.key,
                file = %c.file,
                catalog = %c.catalog,
                "the file's node-local setting differs from the catalog's: the catalog's is \
                 served (`sluice tenant set --clear-local` gives it back to the files)"
            );
        }
        t.access_key.clone_from(&first.access_key);
        t.secret_key.clone_from(&first.secret_key);
        let id: Arc<str> = Arc::from(f.id.as_str());
        keys.extend(f.keys.iter().map(|k| TenantKey {
            tenant: Arc::clone(&id),
            access_key: k.access_key.clone(),
            secret_key: k.secret_key.clone(),
        }));
        tenants.push(t);
    }
    (tenants, keys)
}

/// `t` (the file's tenant, or the defaults) with the node-local settings `f` holds (see the
/// module doc); the keys in which the file said otherwise.
pub fn apply_local(t: &mut Tenant, f: &FetchedTenant) -> Vec<LocalConflict> {
    let mut conflicts = Vec::new();
    let mut conflict = |key, file: String, catalog: String| {
        conflicts.push(LocalConflict {
            tenant: t.id.clone(),
            key,
            file,
            catalog,
        });
    };
    let file = t.local.local_qos;
    if let Some(c) = f.local_capacity {
        if t.local.local_capacity != u64::MAX && t.local.local_capacity != c {
            conflict(
                "local_capacity",
                sluice_units::ByteSize(t.local.local_capacity).to_string(),
                sluice_units::ByteSize(c).to_string(),
            );
        }
        t.local.local_capacity = c;
    }
    let rate = |r: f64| sluice_units::Rate(r).to_string();
    let mut q = file;
    if let Some(r) = f.local_reservation {
        if file.reservation > 0.0 && file.reservation.to_bits() != r.to_bits() {
            conflict("local_reservation", rate(file.reservation), rate(r));
        }
        q.reservation = r;
    }
    if let Some(w) = f.local_weight {
        if (file.weight - 1.0).abs() > f64::EPSILON && file.weight.to_bits() != w.to_bits() {
            conflict("local_weight", file.weight.to_string(), w.to_string());
        }
        q.weight = w;
    }
    if let Some(l) = f.local_limit {
        if let Some(fl) = file.limit
            && fl.to_bits() != l.to_bits()
        {
            conflict("local_limit", rate(fl), rate(l));
        }
        q.limit = Some(l);
    }
    let valid = q.reservation.is_finite()
        && q.reservation >= 0.0
        && q.weight.is_finite()
        && q.weight > 0.0
        && q.limit
            .is_none_or(|l| l.is_finite() && l > 0.0 && l >= q.reservation);
    if valid {
        t.local.local_qos = q;
    } else {
        tracing::warn!(
            tenant = %t.id,
            reservation = q.reservation,
            weight = q.weight,
            limit = ?q.limit,
            "the catalog's local shares with the file's make no valid share (a local limit \
             below the local reservation): the file's shares are served"
        );
    }
    conflicts
}

fn file_key(t: &Tenant) -> TenantKey {
    TenantKey {
        tenant: Arc::from(t.id.as_str()),
        access_key: t.access_key.clone(),
        secret_key: t.secret_key.clone(),
    }
}

/// A tenant the file does not name: the node-local defaults of a `[[tenant]]` entry.
fn node_defaults(id: &str) -> Tenant {
    Tenant {
        id: id.to_owned(),
        access_key: String::new(),
        secret_key: String::new(),
        capacity: u64::MAX,
        max_objects: u64::MAX,
        max_buckets: sluice_config::DEFAULT_MAX_BUCKETS,
        qos: Qos::default(),
        local: LocalSpec {
            local_capacity: u64::MAX,
            drain_rate: None,
            interval: None,
            retention: Retention::Checkpoints(2),
            commit_markers: DEFAULT_COMMIT_MARKERS
                .iter()
                .map(|s| (*s).to_owned())
                .collect(),
            local_qos: Qos::default(),
        },
    }
}

/// Asks `source` every [`POLL`] until `stop` changes; each answer that differs from the
/// last served (`served`, the cache's at start) is cached at `cache` and given to `apply`.
pub async fn run(
    source: Arc<dyn Source>,
    cache: PathBuf,
    mut served: Option<Fetched>,
    apply: impl Fn(&Fetched) + Send,
    mut stop: watch::Receiver<bool>,
) {
    let mut failing = false;
    loop {
        match source.fetch().await {
            Ok(f) => {
                if failing {
                    tracing::info!("the gateways answer again: tenants and keys are fetched");
                    failing = false;
                }
                if served.as_ref() != Some(&f) {
                    if let Err(e) = save_cache(&cache, &f) {
                        tracing::error!(error = %e, "the tenants are served but not cached");
                    }
                    apply(&f);
                    served = Some(f);
                }
            }
            Err(e) => {
                if !failing {
                    tracing::warn!(error = %e, "no gateway answers: the last tenants and keys fetched are served");
                    failing = true;
                }
            }
        }
        tokio::select! {
            () = tokio::time::sleep(POLL) => {}
            _ = stop.changed() => return,
        }
    }
}

#[cfg(test)]
mod tests;
