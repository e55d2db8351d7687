//! The tenants' confidential-object keys (`[tenant.encryption]`), held in memory only.
//!
//! Each tenant with `[tenant.encryption]` has one 32-byte key, from `key_file` (development:
//! the file's raw bytes) or `key_url` (the key broker's resource: in Confidential Containers
//! the pod's Confidential Data Hub, `http://127.0.0.1:8006/cdh/resource/<repository>/<type>/<tag>`,
//! which attests to the Trustee KBS and answers the resource's raw bytes). With
//! `evidence_file` its contents go in the `sluice-evidence` header of every request: the
//! stand-in for TEE evidence a test broker checks (the real CDH attests itself and needs
//! nothing from the caller).
//!
//! The key never leaves memory: it is not written to the data directory or anywhere else, and
//! only its id ([`TenantKey::id`], derived one-way) is logged or reported.
//!
//! Start ([`Keys::open`]): a `key_file` that cannot be read or is not exactly 32 bytes fails
//! the start, naming the tenant and the file. A `key_url` is asked once; a broker that
//! refuses (any non-2xx answer), does not answer within [`TIMEOUT`] or answers something that
//! is not 32 bytes does not stop the agent: that tenant's key is unavailable,
//! [`Keys::tenant_key`] answers `Err` with the reason (the S3 front then refuses the tenant's
//! requests rather than writing or serving plaintext), and [`Keys::run`] asks again every
//! [`RETRY`], off the request path, until the broker releases it.
//!
//! A loaded `key_url` key is asked for again every [`RECHECK`]: a refusal naming the resource
//! (403, 404 or 410: the broker no longer releases it, e.g. the tenant's key was removed —
//! crypto-shred) drops it from memory and the tenant's requests are refused from then on; a
//! broker that does not answer or fails (5xx) leaves the loaded key in place, so a broker
//! outage does not take the tenant down. A different 32-byte key from the broker replaces the
//! loaded one (logged with both ids).
//!
//! Reload ([`Keys::prepare`], then [`Keys::install`]): a tenant whose `[tenant.encryption]` is
//! unchanged keeps its key; a changed or new one is read anew (`key_file`, and a bad file
//! refuses the whole reload before anything changes) or fetched by the background task at
//! once (`key_url`, unavailable until then); a tenant whose table is gone has no key.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde::Serialize;
use sluice_config::{Config, EVIDENCE_HEADER, Encryption, KeySource};
use sluice_crypt::TenantKey;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

/// How often an unavailable `key_url` key is asked for again.
pub const RETRY: Duration = Duration::from_secs(2);
/// How often a loaded `key_url` key is asked for again (a broker's refusal drops it).
pub const RECHECK: Duration = Duration::from_secs(10);
/// How long one request to the broker may take.
pub const TIMEOUT: Duration = Duration::from_secs(5);
/// The largest answer read from a broker (a key is 32 bytes).
const MAX_ANSWER: usize = 4096;

/// A `key_file` that cannot be used, or a client that cannot be built: fatal at start,
/// refuses a reload.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("tenant {tenant:?}: [tenant.encryption] key_file {}: {source}", path.display())]
    Read {
        tenant: String,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "tenant {tenant:?}: [tenant.encryption] key_file {}: {len} bytes, but a tenant key is \
         exactly {} raw bytes (e.g. `head -c 32 /dev/urandom > FILE`)",
        path.display(),
        sluice_crypt::KEY_LEN
    )]
    Length {
        tenant: String,
        path: PathBuf,
        len: usize,
    },
    #[error("the key broker's HTTP client: {0}")]
    Client(String),
}

/// Why a `key_url` request gave no key.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Failure {
    /// The broker answered with a non-2xx status.
    Refused { status: u16, reason: String },
    /// No answer, a broken one, or one that is not a key.
    Failed(String),
}

impl Failure {
    /// Whether the broker said it does not release this resource (a loaded key is dropped).
    fn withdraws(&self) -> bool {
        matches!(self, Self::Refused { status, .. } if matches!(status, 403 | 404 | 410))
    }

    fn reason(&self) -> &str {
        match self {
            Self::Refused { reason, .. } | Self::Failed(reason) => reason,
        }
    }
}

#[derive(Debug, Clone)]
enum State {
    Loaded(Arc<TenantKey>),
    Unavailable(String),
}

struct Slot {
    source: Encryption,
    state: State,
    /// When the key was last asked for (`None`: not yet).
    asked: Option<Instant>,
}

/// What [`Keys::status`] reports of a tenant's key: never the key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KeyStatus {
    /// `"key_url"` or `"key_file"`.
    pub source: &'static str,
    pub loaded: bool,
    /// The loaded key's public id (as written in every object header it wraps).
    pub key_id: Option<String>,
    /// Why the key is unavailable.
    pub error: Option<String>,
}

/// A reload's keys, read and checked, not yet served ([`Keys::prepare`]).
pub struct Prepared(HashMap<String, Slot>);

/// The tenants' keys (cheap to clone: one shared table).
#[derive(Clone)]
pub struct Keys {
    inner: Arc<Inner>,
}

struct Inner {
    client: reqwest::Client,
    slots: RwLock<HashMap<String, Slot>>,
    /// Wakes [`Keys::run`] for keys a reload left to fetch.
    wake: Notify,
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let slots = read(&self.inner.slots);
        f.debug_map()
            .entries(slots.iter().map(|(t, s)| (t, &s.state)))
            .finish()
    }
}

fn read<T>(l: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn write<T>(l: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Keys {
    /// Reads every `key_file` and asks every `key_url` once (see the module doc).
    pub async fn open(config: &Config) -> Result<Self, KeyError> {
        let client = reqwest::Client::builder()
            .timeout(TIMEOUT)
            // The broker is the pod's own CDH on loopback: never through a proxy.
            .no_proxy()
            .build()
            .map_err(|e| KeyError::Client(chain(&e)))?;
        let keys = Self {
            inner: Arc::new(Inner {
                client,
                slots: RwLock::new(HashMap::new()),
                wake: Notify::new(),
            }),
        };
        let prepared = keys.prepare(config)?;
        keys.install(prepared);
        keys.fetch_due(true).await;
        Ok(keys)
    }

    /// `Ok(None)`: the tenant has no `[tenant.encryption]`; `Err`: it has one but its key is
    /// not available, and why.
    pub fn tenant_key(&self, tenant: &str) -> Result<Option<Arc<TenantKey>>, String> {
        match read(&self.inner.slots).get(tenant).map(|s| &s.state) {
            None => Ok(None),
            Some(State::Loaded(k)) => Ok(Some(Arc::clone(k))),
            Some(State::Unavailable(why)) => Err(format!(
                "tenant {tenant:?}'s confidential-object key is unavailable: {why}"
            )),
        }
    }

    /// The tenant's key as the status shows it; `None` without `[tenant.encryption]`.
    pub fn status(&self, tenant: &str) -> Option<KeyStatus> {
        read(&self.inner.slots).get(tenant).map(|s| KeyStatus {
            source: match s.source.key {
                KeySource::Url(_) => "key_url",
                KeySource::File(_) => "key_file",
            },
            loaded: matches!(s.state, State::Loaded(_)),
            key_id: match &s.state {
                State::Loaded(k) => Some(k.id()),
                State::Unavailable(_) => None,
            },
            error: match &s.state {
                State::Loaded(_) => None,
                State::Unavailable(why) => Some(why.clone()),
            },
        })
    }

    /// `config`'s keys: the unchanged kept, changed `key_file`s read (an error refuses the
    /// whole set), changed `key_url`s left to fetch. Nothing served changes.
    pub fn prepare(&self, config: &Config) -> Result<Prepared, KeyError> {
        let current = read(&self.inner.slots);
        let mut next = HashMap::with_capacity(config.encryption.len());
        for (tenant, source) in &config.encryption {
            if let Some(s) = current.get(tenant).filter(|s| &s.source == source) {
                next.insert(
                    tenant.clone(),
                    Slot {
                        source: source.clone(),
                        state: s.state.clone(),
                        asked: s.asked,
                    },
                );
                continue;
            }
            let state = match &source.key {
                KeySource::File(path) => State::Loaded(Arc::new(key_file(tenant, path)?)),
                KeySource::Url(_) => {
                    State::Unavailable("not fetched from the key broker yet".into())
                }
            };
            next.insert(
                tenant.clone(),
                Slot {
                    source: source.clone(),
                    state,
                    asked: None,
                },
            );
        }
        Ok(Prepared(next))
    }

    /// Serves a prepared set; its new `key_url`s are fetched by [`Keys::run`] at once.
    pub fn install(&self, prepared: Prepared) {
        let mut slots = write(&self.inner.slots);
        for (tenant, slot) in &prepared.0 {
            let new = slots.get(tenant).is_none_or(|s| s.source != slot.source);
            if let (true, State::Loaded(k)) = (new, &slot.state) {
                tracing::info!(tenant, key_id = %k.id(), "tenant key read from key_file");
            }
        }
        *slots = prepared.0;
        drop(slots);
        self.inner.wake.notify_one();
    }

    /// Asks the broker again for the unavailable keys every [`RETRY`] and for the loaded ones
    /// every [`RECHECK`], until `stop` turns true or its sender is dropped.
    pub async fn run(self, mut stop: watch::Receiver<bool>) {
        loop {
            tokio::select! {
                // Stopped, or the sender is gone (nothing can stop it any more): end.
                changed = stop.changed() => if changed.is_err() || *stop.borrow() { return },
                () = tokio::time::sleep(RETRY) => {}
                () = self.inner.wake.notified() => {}
            }
            self.fetch_due(false).await;
        }
    }

    /// Fetches the `key_url` keys that are due (every one with `all`).
    async fn fetch_due(&self, all: bool) {
        let now = Instant::now();
        let due: Vec<(String, Encryption)> = read(&self.inner.slots)
            .iter()
            .filter(|(_, s)| matches!(s.source.key, KeySource::Url(_)))
            .filter(|(_, s)| {
                all || match (&s.state, s.asked) {
                    (_, None) => true,
                    (State::Unavailable(_), Some(at)) => now >= at + RETRY - RETRY / 4,
                    (State::Loaded(_), Some(at)) => now >= at + RECHECK,
                }
            })
            .map(|(t, s)| (t.clone(), s.source.clone()))
            .collect();
        let client = &self.inner.client;
        let answers = futures::future::join_all(due.into_iter().map(|(tenant, source)| async {
            let KeySource::Url(url) = &source.key else {
                unreachable!("only key_url slots are due")
            };
            let answer = fetch(client, url, source.evidence_file.as_deref()).await;
            (tenant, source, answer)
        }))
        .await;
        let mut slots = write(&self.inner.slots);
        for (tenant, source, answer) in answers {
            // A reload may have changed the tenant's table meanwhile: that answer is stale.
            let Some(slot) = slots.get_mut(&tenant).filter(|s| s.source == source) else {
                continue;
            };
            slot.asked = Some(Instant::now());
            slot.state = next_state(&tenant, &slot.state, answer);
        }
    }
}

/// The slot's state after the broker's `answer` (see the module doc), logged on a change.
fn next_state(tenant: &str, state: &State, answer: Result<TenantKey, Failure>) -> State {
    match (state, answer) {
        (State::Loaded(old), Ok(key)) => {
            if old.id() == key.id() {
                State::Loaded(Arc::clone(old))
            } else {
                tracing::warn!(
                    tenant,
                    old_key_id = %old.id(),
                    key_id = %key.id(),
                    "the key broker released another key for the tenant: it replaces the loaded one"
                );
                State::Loaded(Arc::new(key))
            }
        }
        (State::Unavailable(_), Ok(key)) => {
            tracing::info!(tenant, key_id = %key.id(), "tenant key released by the key broker");
            State::Loaded(Arc::new(key))
        }
        (State::Loaded(old), Err(f)) if f.withdraws() => {
            tracing::warn!(
                tenant,
                key_id = %old.id(),
                reason = f.reason(),
                "the key broker no longer releases the tenant's key: dropped, its requests are refused"
            );
            State::Unavailable(format!("the key broker withdrew it: {}", f.reason()))
        }
        (State::Loaded(old), Err(f)) => {
            tracing::warn!(
                tenant,
                key_id = %old.id(),
                reason = f.reason(),
                "the key broker did not confirm the tenant's key: the loaded key is kept"
            );
            State::Loaded(Arc::clone(old))
        }
        (State::Unavailable(before), Err(f)) => {
            if before != f.reason() {
                tracing::warn!(
                    tenant,
                    reason = f.reason(),
                    "the tenant's key is unavailable"
                );
            }
            State::Unavailable(f.reason().to_owned())
        }
    }
}

/// A `key_file`: exactly [`sluice_crypt::KEY_LEN`] raw bytes.
fn key_file(tenant: &str, path: &Path) -> Result<TenantKey, KeyError> {
    let bytes = std::fs::read(path).map_err(|source| KeyError::Read {
        tenant: tenant.to_owned(),
        path: path.to_owned(),
        source,
    })?;
    TenantKey::from_bytes(&bytes).map_err(|_| KeyError::Length {
        tenant: tenant.to_owned(),
        path: path.to_owned(),
        len: bytes.len(),
    })
}

/// One GET of the broker's resource, with the evidence token if configured.
async fn fetch(
    client: &reqwest::Client,
    url: &str,
    evidence: Option<&Path>,
) -> Result<TenantKey, Failure> {
    let mut request = client.get(url);
    if let Some(path) = evidence {
        let token = tokio::fs::read_to_string(path).await.map_err(|e| {
            Failure::Failed(format!(
                "[tenant.encryption] evidence_file {}: {e}",
                path.display()
            ))
        })?;
        request = request.header(EVIDENCE_HEADER, token.trim());
    }
    let mut response = request.send().await.map_err(|e| {
        Failure::Failed(format!(
            "the key broker {url} did not answer: {}",
            chain(&e)
        ))
    })?;
    let status = response.status();
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| {
        Failure::Failed(format!(
            "the key broker {url}'s answer broke: {}",
            chain(&e)
        ))
    })? {
        body.extend_from_slice(&chunk);
        if body.len() > MAX_ANSWER {
            break;
        }
    }
    if !status.is_success() {
        let text = String::from_utf8_lossy(&body[..body.len().min(200)]);
        return Err(Failure::Refused {
            status: status.as_u16(),
            reason: format!("the key broker {url} refused ({status}): {}", text.trim()),
        });
    }
    TenantKey::from_bytes(&body).map_err(|_| {
        Failure::Failed(format!(
            "the key broker {url} answered {}{} bytes, not a {}-byte key",
            body.len(),
            if body.len() > MAX_ANSWER { "+" } else { "" },
            sluice_crypt::KEY_LEN
        ))
    })
}

/// An error and its causes, `: `-separated (reqwest's own text omits the cause).
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cause = c.source();
    }
    out
}

impl sluice_s3::Confidential for Keys {
    fn tenant_key(&self, tenant: &str) -> Result<Option<Arc<TenantKey>>, String> {
        Keys::tenant_key(self, tenant)
    }
}
