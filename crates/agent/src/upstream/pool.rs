//! [`Pool`]: the shared tier over several gateways (`[agent] upstream = [...]`), one client
//! per gateway, as one [`UpstreamStore`] and the node's reads.
//!
//! # Spreading
//!
//! Every call is placed by what it is about: a hash of (tenant, bucket, key) picks the
//! gateway it goes to first, so a checkpoint's objects spread over the gateways while the
//! steps of one object (a multipart upload's create, parts and complete, and the HEAD that
//! verifies it) go to the same gateway as long as it lives.
//!
//! # Failover
//!
//! A call that fails with [`UpstreamError::Unavailable`] (connection refused, a timeout, a
//! 5xx other than 503) is tried again, at once, on the next gateway, live ones first, then
//! those resting in order of when their rest ends; the caller sees the last failure only when
//! every gateway failed. The gateway that failed rests for a backoff (exponential from
//! [`FIRST_REST`] to [`MAX_REST`]): calls skip it until the rest is over, and the first call
//! placed on it then probes it (a success makes it live again, a failure a longer rest).
//! Every other answer is the shared tier's, not the gateway's, and goes back to the caller
//! untried elsewhere: `Refused` (`QuotaExceeded`, `AccessDenied`) and `NotFound` would be the
//! same on every gateway of one catalog, and `SlowDown` (503, 429) asks the caller (the
//! drain, with its own backoff) to slow down, which another gateway over the same backend
//! would only ask again.
//!
//! Failover happens inside one call: the drain's order of steps, and so a commit marker after
//! its checkpoint, is untouched. Retrying a step elsewhere is safe because each step is
//! idempotent on a shared catalog: a PUT or a part sent again replaces the first with the
//! same bytes, a bucket already ours is fine, a complete of an upload already completed
//! answers `NotFound` and the drain's HEAD then finds the object whole. A multipart upload
//! begun on one gateway continues on another: its id is a row of the shared catalog
//! (PostgreSQL's `uploads` table), valid on every gateway. (Gateways that do not share a
//! catalog are not one shared tier; pointing one agent at several of them is a
//! misconfiguration.) A create of an upload whose answer was lost leaves an upload nobody
//! completes, which the gateways' garbage collection removes.
//!
//! # dmClock's δ and ρ
//!
//! The pools [`Pool::connect`] and [`Pool::connect_as`] build share one `Ledger` among their
//! gateways' clients: each request carries what the other gateways served its tenant since
//! its previous request to this one (`x-sluice-dmclock-delta`), and what of it they served
//! in their reservation phase, as their answers said (`x-sluice-dmclock-rho`, at most δ), so
//! that uncoordinated gateways charge the tenant for its whole drain, not only for their
//! part, and owe it its reservation once over them all (see `ledger`).
//!
//! One known limit: a gateway that is cut off rather than dead may still carry out a request
//! the pool gave up on (after its timeout) and tried elsewhere, late; a kill -9 or a crash
//! cannot.

use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use object_store::{GetOptions, GetResult, ObjectMeta, PutPayload};
use serde::Serialize;
use sluice_meta::ObjectRecord;
use tokio::time::Instant;

use super::ledger::Ledger;
use super::{Credentials, Head, Upstream, UpstreamBucket, UpstreamError, UpstreamStore};

/// A gateway's first rest after a failure.
pub const FIRST_REST: Duration = Duration::from_secs(1);
/// The longest rest: a dead gateway is probed at least this often.
pub const MAX_REST: Duration = Duration::from_secs(30);

/// One gateway as status shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GatewayState {
    pub endpoint: String,
    /// Not resting: calls are placed on it.
    pub up: bool,
    /// Failures since its last success.
    pub consecutive_failures: u32,
    pub failures_total: u64,
    /// While resting: how long until it is probed again.
    pub retry_in_seconds: Option<f64>,
    pub last_error: Option<String>,
    pub last_error_at_ms: Option<i64>,
}

#[derive(Debug, Default)]
struct Health {
    rest_until: Option<Instant>,
    consecutive: u32,
    total: u64,
    last_error: Option<(String, i64)>,
}

struct Member<U> {
    endpoint: String,
    store: Arc<U>,
    health: Mutex<Health>,
}

impl<U> Member<U> {
    fn health(&self) -> MutexGuard<'_, Health> {
        self.health.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn resting(&self, now: Instant) -> Option<Instant> {
        self.health().rest_until.filter(|&until| until > now)
    }

    fn answered(&self) {
        let mut h = self.health();
        if h.consecutive > 0 || h.rest_until.is_some() {
            tracing::info!(gateway = self.endpoint, "gateway answers again");
        }
        h.consecutive = 0;
        h.rest_until = None;
    }

    fn failed(&self, e: &UpstreamError, now: Instant) {
        let mut h = self.health();
        h.consecutive = h.consecutive.saturating_add(1);
        h.total += 1;
        let rest = FIRST_REST
            .saturating_mul(1 << (h.consecutive - 1).min(10))
            .min(MAX_REST);
        if h.consecutive == 1 {
            tracing::warn!(gateway = self.endpoint, error = %e, "gateway failed; its calls go to the others for {rest:?}");
        } else {
            tracing::debug!(gateway = self.endpoint, error = %e, "gateway still failing; resting {rest:?}");
        }
        h.rest_until = Some(now + rest);
        h.last_error = Some((e.to_string(), now_ms()));
    }
}

use sluice_meta::now_ms;

/// Does this failure say the gateway (not the shared tier) is down?
fn gateway_down(e: &UpstreamError) -> bool {
    matches!(e, UpstreamError::Unavailable(_))
}

/// The gateways (see the module doc).
pub struct Pool<U> {
    members: Vec<Member<U>>,
    /// Every endpoint, comma-separated (what `endpoint()` answers).
    endpoints: String,
}

impl<U: UpstreamStore> Pool<U> {
    /// A pool over `stores`, one per gateway, in configuration order. `stores` is not empty
    /// (the configuration refuses an empty list).
    pub fn new(stores: Vec<Arc<U>>) -> Self {
        let members: Vec<Member<U>> = stores
            .into_iter()
            .map(|store| Member {
                endpoint: store.endpoint().to_owned(),
                store,
                health: Mutex::default(),
            })
            .collect();
        let endpoints = members
            .iter()
            .map(|m| m.endpoint.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        Self { members, endpoints }
    }

    /// Every gateway's state, in configuration order.
    pub fn states(&self) -> Vec<GatewayState> {
        let now = Instant::now();
        self.members
            .iter()
            .map(|m| {
                let h = m.health();
                let resting = h.rest_until.filter(|&u| u > now);
                GatewayState {
                    endpoint: m.endpoint.clone(),
                    up: resting.is_none(),
                    consecutive_failures: h.consecutive,
                    failures_total: h.total,
                    retry_in_seconds: resting.map(|u| (u - now).as_secs_f64()),
                    last_error: h.last_error.as_ref().map(|(e, _)| e.clone()),
                    last_error_at_ms: h.last_error.as_ref().map(|&(_, at)| at),
                }
            })
            .collect()
    }

    /// The gateways to try for a call about `place`, in order: from the one its hash picks
    /// round the ring, live ones first, then resting ones by the end of their rest.
    fn order(&self, place: (&str, &str, &str), now: Instant) -> Vec<usize> {
        let n = self.members.len();
        let mut h = std::hash::DefaultHasher::new();
        place.hash(&mut h);
        let first = usize::try_from(h.finish() % n.max(1) as u64).unwrap_or(0);
        let ring = (0..n).map(|i| (first + i) % n);
        let (mut live, mut resting): (Vec<usize>, Vec<(Instant, usize)>) = (Vec::new(), Vec::new());
        for i in ring {
            match self.members[i].resting(now) {
                None => live.push(i),
                Some(until) => resting.push((until, i)),
            }
        }
        resting.sort_by_key(|&(until, _)| until);
        live.extend(resting.into_iter().map(|(_, i)| i));
        live
    }

    /// Runs `call` on the gateways in [`Pool::order`] until one answers (see the module doc).
    async fn call<'a, T, F, Fut>(
        &'a self,
        place: (&str, &str, &str),
        call: F,
    ) -> Result<T, UpstreamError>
    where
        F: Fn(&'a U) -> Fut,
        Fut: Future<Output = Result<T, UpstreamError>>,
    {
        let mut last = UpstreamError::Unavailable("no upstream gateway configured".into());
        for i in self.order(place, Instant::now()) {
            let m = &self.members[i];
            match call(&m.store).await {
                Err(e) if gateway_down(&e) => {
                    m.failed(&e, Instant::now());
                    last =
                        UpstreamError::Unavailable(format!("{}: {}", m.endpoint, unavailable(&e)));
                }
                other => {
                    m.answered();
                    return other;
                }
            }
        }
        Err(last)
    }
}

/// What an `Unavailable` says.
fn unavailable(e: &UpstreamError) -> &str {
    match e {
        UpstreamError::Unavailable(m) => m,
        _ => "",
    }
}

/// The node's reads and the reload of keys, on real gateways.
impl Pool<Upstream> {
    /// One [`Upstream`] per endpoint, each trusting `roots` besides the system's.
    pub fn connect(
        endpoints: &[String],
        region: &str,
        creds: &std::collections::HashMap<String, Credentials>,
        roots: &[object_store::Certificate],
    ) -> Result<Self, UpstreamError> {
        let ledger = Arc::new(Ledger::new(endpoints.len()));
        let stores = endpoints
            .iter()
            .enumerate()
            .map(|(i, e)| {
                Upstream::with_roots(e, region, creds.clone(), roots)
                    .and_then(|u| u.with_dmclock(Arc::clone(&ledger), i))
                    .map(Arc::new)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self::new(stores))
    }

    /// [`Pool::connect`], every client's uploads naming `holder` (see
    /// [`Upstream::with_escrow_holder`]).
    pub fn connect_as(
        endpoints: &[String],
        region: &str,
        creds: &std::collections::HashMap<String, Credentials>,
        roots: &[object_store::Certificate],
        holder: &str,
    ) -> Result<Self, UpstreamError> {
        let ledger = Arc::new(Ledger::new(endpoints.len()));
        let stores = endpoints
            .iter()
            .enumerate()
            .map(|(i, e)| {
                Upstream::with_roots(e, region, creds.clone(), roots)
                    .and_then(|u| u.with_escrow_holder(holder))
                    .and_then(|u| u.with_dmclock(Arc::clone(&ledger), i))
                    .map(Arc::new)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self::new(stores))
    }

    /// The node's escrow request (see [`Upstream::escrow`]), to whichever gateway answers:
    /// they share the catalog the escrow lives in.
    pub async fn escrow(
        &self,
        tenant: &str,
        holder: &str,
        bytes: u64,
        ttl: std::time::Duration,
    ) -> Result<super::EscrowAnswer, UpstreamError> {
        self.call((tenant, "", ""), |u| u.escrow(tenant, holder, bytes, ttl))
            .await
    }

    /// A configuration reload of the tenants' keys, on every gateway's client.
    pub fn set_credentials(&self, creds: &std::collections::HashMap<String, Credentials>) {
        for m in &self.members {
            m.store.set_credentials(creds.clone());
        }
    }

    pub async fn bucket_exists(&self, tenant: &str, bucket: &str) -> Result<bool, UpstreamError> {
        self.call((tenant, bucket, ""), |u| u.bucket_exists(tenant, bucket))
            .await
    }

    pub async fn list_buckets(&self, tenant: &str) -> Result<Vec<UpstreamBucket>, UpstreamError> {
        self.call((tenant, "", ""), |u| u.list_buckets(tenant))
            .await
    }

    pub async fn get(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
        options: GetOptions,
    ) -> Result<GetResult, UpstreamError> {
        self.call((tenant, bucket, key), |u| {
            u.get(tenant, bucket, key, options.clone())
        })
        .await
    }

    pub async fn list(
        &self,
        tenant: &str,
        bucket: &str,
        prefix: &str,
    ) -> Result<Vec<ObjectMeta>, UpstreamError> {
        self.call((tenant, bucket, prefix), |u| u.list(tenant, bucket, prefix))
            .await
    }
}

#[async_trait::async_trait]
impl<U: UpstreamStore> UpstreamStore for Pool<U> {
    fn endpoint(&self) -> &str {
        &self.endpoints
    }

    fn gateways(&self) -> Vec<GatewayState> {
        self.states()
    }

    async fn create_bucket(&self, tenant: &str, bucket: &str) -> Result<(), UpstreamError> {
        self.call((tenant, bucket, ""), |u| u.create_bucket(tenant, bucket))
            .await
    }

    async fn delete_bucket(&self, tenant: &str, bucket: &str) -> Result<(), UpstreamError> {
        self.call((tenant, bucket, ""), |u| u.delete_bucket(tenant, bucket))
            .await
    }

    async fn put(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
        payload: PutPayload,
        object: &ObjectRecord,
    ) -> Result<Option<String>, UpstreamError> {
        // A payload is a list of shared buffers: a clone per attempt copies no bytes.
        self.call((tenant, bucket, key), |u| {
            u.put(tenant, bucket, key, payload.clone(), object)
        })
        .await
    }

    async fn create_multipart(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
        object: &ObjectRecord,
    ) -> Result<String, UpstreamError> {
        self.call((tenant, bucket, key), |u| {
            u.create_multipart(tenant, bucket, key, object)
        })
        .await
    }

    async fn put_part(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
        upload_id: &str,
        index: usize,
        payload: PutPayload,
    ) -> Result<String, UpstreamError> {
        self.call((tenant, bucket, key), |u| {
            u.put_part(tenant, bucket, key, upload_id, index, payload.clone())
        })
        .await
    }

    async fn complete_multipart(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
        upload_id: &str,
        etags: Vec<String>,
    ) -> Result<(), UpstreamError> {
        self.call((tenant, bucket, key), |u| {
            u.complete_multipart(tenant, bucket, key, upload_id, etags.clone())
        })
        .await
    }

    async fn abort_multipart(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
        upload_id: &str,
    ) -> Result<(), UpstreamError> {
        self.call((tenant, bucket, key), |u| {
            u.abort_multipart(tenant, bucket, key, upload_id)
        })
        .await
    }

    async fn head(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
    ) -> Result<Option<Head>, UpstreamError> {
        self.call((tenant, bucket, key), |u| u.head(tenant, bucket, key))
            .await
    }

    async fn delete(&self, tenant: &str, bucket: &str, key: &str) -> Result<(), UpstreamError> {
        self.call((tenant, bucket, key), |u| u.delete(tenant, bucket, key))
            .await
    }
}

#[cfg(test)]
mod tests;
