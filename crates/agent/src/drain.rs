//! The drain worker: carries the journal's ops to the shared tier, paced per tenant, commit
//! markers last, and evicts local copies that are durable upstream.
//!
//! # Ordering
//!
//! The worker scans the live ops in sequence order and starts those that
//! [`journal::eligible`] allows (one op per key at a time; deletes after everything before
//! them; markers after their checkpoint), at most [`PER_TENANT`] transfers per tenant and
//! [`TOTAL`] overall. A scan notes the keys in flight before it reads the journal, so an op
//! whose transfer completes during the scan is not started a second time. See the journal's
//! module doc for the invariants and the crash model.
//!
//! # Transfers and verification
//!
//! A put reads the object back from local disk (its blobs, or for an inline object its body
//! in the catalog), recomputes its CRC-64/NVME and refuses to upload on a mismatch with the
//! checksum computed on the way in. Objects up to
//! [`SINGLE_PUT_MAX`] go up in one PUT; larger ones as a multipart upload whose id and
//! completed parts (ETag = MD5 of what was sent, checked against the upstream's answer) are
//! journalled, so a restart resends only the parts not recorded. An op is durable only after
//! a HEAD upstream shows the expected size and ETag (MD5, or MD5-of-part-MD5s `-N`).
//!
//! # Pacing
//!
//! Each tenant has a [`TokenBucket`] whose rate [`Policy::target_rate`] recomputes on every
//! scan; a transfer asks it for each part (or small object) before sending it, then waits
//! for the part's turn on the uplink when `[agent.capacity] uplink` is set (shared by
//! `local_weight`: [`crate::admission`]). Its local reads are admitted on the node's device
//! as the tenant's (when `[agent.capacity]` is set). Of the ops that may start, the scan
//! starts them in weighted order across tenants ([`share`]): the next transfer slot goes to
//! the tenant with the fewest transfers in flight per unit of `local_weight`.
//!
//! # Retries
//!
//! A failed op leaves its tenant in backoff (exponential with jitter, at most
//! [`MAX_BACKOFF`], or [`PERMANENT_BACKOFF`] for refusals such as `QuotaExceeded` and for a
//! local copy that cannot be read back intact); it is retried for ever and its data never
//! dropped. The last error is kept for status. Failures are classified by their typed
//! [`UpstreamError`] and logged where they are handled, in the drain's words: throttling at
//! debug, a transient failure at WARN (one line per attempt), a refusal at WARN and a local
//! copy that fails its checksum at ERROR, each once per change of the tenant's error.
//!
//! # The upstream
//!
//! The drain works through [`UpstreamStore`], so its tests run it against the in-memory twin
//! behind a fault injector; `model` checks it and the journal against a reference model,
//! also through a pool of two gateways one of which dies and comes back. In production the
//! store is a [`Pool`](crate::upstream::Pool) of the configured gateways: it fails a step
//! over to another gateway inside the one call, so the order of the steps here (a marker
//! after its checkpoint) is the order the shared tier sees, however many gateways die.
//!
//! # Cancellation
//!
//! Stopping the worker drops transfers in flight; they are not acknowledged anywhere, so the
//! next start redoes them from the journal.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};
use sluice_config::Tenant;
use sluice_meta::MetaError;
use sluice_s3::BlobStore;
use tokio::sync::{Notify, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::admission::Admission;
use crate::journal::{self, Journal, Op, OpKind};
use crate::upstream::{UpstreamError, UpstreamStore};

/// Objects up to this size go up in one PUT.
pub const SINGLE_PUT_MAX: u64 = 16 * 1024 * 1024;
/// Smallest upstream part of a multipart drain.
pub const PART_SIZE: u64 = 16 * 1024 * 1024;

/// How objects are cut for the upstream: [`SINGLE_PUT_MAX`] and [`PART_SIZE`] unless a test
/// wants many parts of small objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransferSizes {
    /// Objects up to this size go up in one PUT; larger ones as multipart uploads.
    pub single_put_max: u64,
    /// The smallest part (an object over 10,000 parts of it gets larger parts).
    pub part_size: u64,
}

impl Default for TransferSizes {
    fn default() -> Self {
        Self {
            single_put_max: SINGLE_PUT_MAX,
            part_size: PART_SIZE,
        }
    }
}
/// Transfers in flight per tenant and overall.
pub const PER_TENANT: usize = 2;
pub const TOTAL: usize = 6;
pub const MAX_BACKOFF: Duration = Duration::from_secs(2);
pub const PERMANENT_BACKOFF: Duration = Duration::from_secs(15);
/// How often the worker rescans without being woken.
const TICK: Duration = Duration::from_millis(200);
/// A burst starts with the first write after this much quiet (for learned intervals).
const QUIET: Duration = Duration::from_secs(10);
/// Window of the measured drain rate.
const RATE_WINDOW: Duration = Duration::from_secs(10);
/// Local usage above this fraction of the tenant's local capacity evicts durable copies.
const HIGH_WATER: f64 = 0.9;
const LOW_WATER: f64 = 0.8;

/// Why one transfer failed.
#[derive(Debug, thiserror::Error)]
pub enum DrainError {
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
    #[error("journal: {0}")]
    Journal(#[from] MetaError),
    #[error("local copy of {key}: {message}")]
    Local { key: String, message: String },
    #[error("upstream copy of {key} does not match: {message}")]
    Mismatch { key: String, message: String },
    #[error("task: {0}")]
    Task(String),
}

impl DrainError {
    fn permanent(&self) -> bool {
        match self {
            Self::Upstream(u) => u.is_permanent(),
            Self::Local { .. } => true,
            _ => false,
        }
    }
}

mod evict;
pub mod share;
mod tenant;
mod transfer;

use tenant::log_failure;
pub use tenant::{ErrorInfo, TenantDrain};

/// Everything the worker and status share.
pub struct Drain {
    pub journal: Arc<Journal>,
    pub blobs: Arc<BlobStore>,
    pub upstream: Arc<dyn UpstreamStore>,
    pub wake: Arc<Notify>,
    tenants: Mutex<HashMap<String, TenantDrain>>,
    busy: Mutex<HashSet<(String, String, String)>>,
    sizes: TransferSizes,
    /// Draws the backoffs' jitter.
    jitter: Mutex<Xoshiro256PlusPlus>,
    /// The node's local device and uplink (see [`crate::admission`]).
    admission: Arc<Admission>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

use sluice_meta::now_ms;

enum Outcome {
    Done { bytes: u64 },
    Superseded,
}

impl Drain {
    pub fn new(
        journal: Arc<Journal>,
        blobs: Arc<BlobStore>,
        upstream: Arc<dyn UpstreamStore>,
        wake: Arc<Notify>,
        tenants: &[Tenant],
    ) -> Self {
        let now = Instant::now();
        Self {
            journal,
            blobs,
            upstream,
            wake,
            tenants: Mutex::new(
                tenants
                    .iter()
                    .map(|t| (t.id.clone(), TenantDrain::new(t, now)))
                    .collect(),
            ),
            busy: Mutex::default(),
            sizes: TransferSizes::default(),
            jitter: Mutex::new(Xoshiro256PlusPlus::seed_from_u64(rand::random())),
            admission: Arc::new(Admission::unscheduled()),
        }
    }

    /// Reads the local copies through `admission`'s local device and sends through its
    /// uplink.
    #[must_use]
    pub fn with_admission(mut self, admission: Arc<Admission>) -> Self {
        self.admission = admission;
        self
    }

    /// The node's local device and uplink schedulers.
    pub fn admission(&self) -> &Arc<Admission> {
        &self.admission
    }

    /// Cuts objects for the upstream by `sizes` instead of the defaults.
    #[must_use]
    pub fn with_transfer_sizes(mut self, sizes: TransferSizes) -> Self {
        self.sizes = sizes;
        self
    }

    /// Draws the backoffs' jitter from an RNG seeded with `seed` (a replayable run).
    #[must_use]
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.jitter = Mutex::new(Xoshiro256PlusPlus::seed_from_u64(seed));
        self
    }

    /// A configuration reload: each tenant's policy (drain rate, limit, interval), retention
    /// and local capacity replaced, new tenants added. Counters, backoff and the learned
    /// interval are kept; a tenant no longer named keeps draining what it buffered.
    pub fn set_tenants(&self, tenants: &[Tenant]) {
        let now = Instant::now();
        let mut state = lock(&self.tenants);
        for t in tenants {
            match state.get_mut(&t.id) {
                Some(d) => {
                    let fresh = TenantDrain::new(t, now);
                    d.policy = fresh.policy;
                    d.retention = fresh.retention;
                    d.local_capacity = fresh.local_capacity;
                    d.local_weight = fresh.local_weight;
                }
                None => {
                    state.insert(t.id.clone(), TenantDrain::new(t, now));
                }
            }
        }
        drop(state);
        self.wake.notify_one();
    }

    /// Runs `f` with the tenants' runtime state.
    pub fn with_tenants<T>(&self, f: impl FnOnce(&HashMap<String, TenantDrain>) -> T) -> T {
        f(&lock(&self.tenants))
    }

    async fn blocking<T, F>(&self, f: F) -> Result<T, DrainError>
    where
        T: Send + 'static,
        F: FnOnce(&Journal) -> Result<T, MetaError> + Send + 'static,
    {
        let j = Arc::clone(&self.journal);
        tokio::task::spawn_blocking(move || f(&j))
            .await
            .map_err(|e| DrainError::Task(e.to_string()))?
            .map_err(DrainError::from)
    }

    /// The worker loop; returns when `stop` turns true.
    pub async fn run(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        let mut tasks: JoinSet<()> = JoinSet::new();
        let mut last_evict = Instant::now();
        loop {
            if *stop.borrow() {
                break;
            }
            match self.scan(&mut tasks).await {
                Ok(()) => {}
                Err(e) => tracing::error!(error = %e, "drain scan failed"),
            }
            if last_evict.elapsed() >= Duration::from_secs(1) {
                last_evict = Instant::now();
                if let Err(e) = self.evict().await {
                    tracing::error!(error = %e, "eviction pass failed");
                }
            }
            tokio::select! {
                Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
                () = self.wake.notified() => {}
                () = tokio::time::sleep(TICK) => {}
                _ = stop.changed() => break,
            }
        }
        tasks.shutdown().await;
    }

    async fn scan(self: &Arc<Self>, tasks: &mut JoinSet<()>) -> Result<(), DrainError> {
        // The keys in flight, taken before the journal is read: a transfer completes its op in
        // the journal before it leaves `busy`, so an op read below is either still busy here
        // or still live. (Taken after, a transfer finishing during the read would leave its
        // op in `ops` and its key out of `busy`, and the op would go up a second time.)
        let busy_keys = lock(&self.busy).clone();
        let ops = self.blocking(Journal::pending).await?;
        let now = Instant::now();
        let wall = now_ms();
        {
            let mut tenants = lock(&self.tenants);
            // Arrivals feed the learned intervals; backlog and age set each tenant's rate.
            let mut backlog: HashMap<&str, (u64, i64)> = HashMap::new();
            for op in &ops {
                if let Some(t) = tenants.get_mut(&op.tenant)
                    && op.seq > t.last_seen_seq
                {
                    t.last_seen_seq = op.seq;
                    let age =
                        Duration::from_millis(u64::try_from(wall - op.enqueued_ms).unwrap_or(0));
                    t.estimator.observe(now.checked_sub(age).unwrap_or(now));
                }
                let e = backlog
                    .entry(op.tenant.as_str())
                    .or_insert((0, op.enqueued_ms));
                e.0 += pending_bytes(op);
                e.1 = e.1.min(op.enqueued_ms);
            }
            for (id, t) in tenants.iter_mut() {
                let (bytes, oldest) = backlog.get(id.as_str()).copied().unwrap_or((0, wall));
                let age = Duration::from_millis(u64::try_from(wall - oldest).unwrap_or(0));
                let rate = t.policy.target_rate(bytes, age, t.learned_interval());
                if (rate - t.target_rate).abs() > f64::EPSILON {
                    t.target_rate = rate;
                    t.bucket.set_rate(rate, now);
                }
            }
        }
        let busy =
            |op: &Op| busy_keys.contains(&(op.tenant.clone(), op.bucket.clone(), op.key.clone()));
        let ready: Vec<Op> = {
            let tenants = lock(&self.tenants);
            share::order(
                journal::eligible(&ops, &busy)
                    .into_iter()
                    .cloned()
                    .collect(),
                |t| {
                    tenants
                        .get(t)
                        .map_or((0, 1.0), |d| (d.in_flight, d.local_weight))
                },
            )
        };
        let mut total = tasks.len();
        for op in ready {
            if total >= TOTAL {
                break;
            }
            {
                let mut tenants = lock(&self.tenants);
                let Some(t) = tenants.get_mut(&op.tenant) else {
                    continue;
                };
                if t.in_flight >= PER_TENANT || t.backoff_until.is_some_and(|b| b > now) {
                    continue;
                }
                t.in_flight += 1;
            }
            lock(&self.busy).insert((op.tenant.clone(), op.bucket.clone(), op.key.clone()));
            total += 1;
            let me = Arc::clone(self);
            tasks.spawn(async move { me.transfer(op).await });
        }
        let aborts = self.blocking(Journal::aborts).await?;
        for (id, a) in aborts {
            match self
                .upstream
                .abort_multipart(&a.tenant, &a.bucket, &a.key, &a.upload_id)
                .await
            {
                Ok(()) => self.blocking(move |j| j.abort_done(id)).await?,
                Err(e) => tracing::debug!(error = %e, "aborting a superseded upload; will retry"),
            }
        }
        Ok(())
    }

    async fn transfer(self: Arc<Self>, op: Op) {
        let started = Instant::now();
        let result = match &op.kind {
            OpKind::Put { .. } => self.put(&op).await,
            OpKind::Delete => {
                self.simple(&op, self.upstream.delete(&op.tenant, &op.bucket, &op.key))
                    .await
            }
            OpKind::CreateBucket => {
                self.simple(&op, self.upstream.create_bucket(&op.tenant, &op.bucket))
                    .await
            }
            OpKind::DeleteBucket => {
                self.simple(&op, self.upstream.delete_bucket(&op.tenant, &op.bucket))
                    .await
            }
        };
        lock(&self.busy).remove(&(op.tenant.clone(), op.bucket.clone(), op.key.clone()));
        let mut tenants = lock(&self.tenants);
        let Some(t) = tenants.get_mut(&op.tenant) else {
            return;
        };
        t.in_flight = t.in_flight.saturating_sub(1);
        match result {
            Ok(Outcome::Done { bytes }) => {
                t.succeeded(started);
                let _ = bytes;
                tracing::debug!(tenant = op.tenant, key = op.key, seq = op.seq, took = ?started.elapsed(), "durable upstream");
            }
            Ok(Outcome::Superseded) => {}
            Err(e) => {
                let jitter: f64 = lock(&self.jitter).random::<f64>() * 0.5 + 0.5;
                let (retry_in, changed) = t.failed(
                    Instant::now(),
                    jitter,
                    ErrorInfo {
                        message: e.to_string(),
                        permanent: e.permanent(),
                        at_ms: now_ms(),
                        key: format!("{}/{}", op.bucket, op.key),
                    },
                );
                log_failure(&op, &e, changed, retry_in);
            }
        }
        drop(tenants);
        self.wake.notify_one();
    }

    async fn simple(
        &self,
        op: &Op,
        call: impl Future<Output = Result<(), UpstreamError>>,
    ) -> Result<Outcome, DrainError> {
        call.await?;
        let o = op.clone();
        Ok(if self.blocking(move |j| j.complete(&o)).await? {
            Outcome::Done { bytes: 0 }
        } else {
            Outcome::Superseded
        })
    }

    /// Waits until the tenant's pacer lets `bytes` go (asking again at least every 100 ms,
    /// so a rate change applies to a transfer already waiting), then for their turn on the
    /// node's uplink.
    async fn pace(&self, tenant: &str, bytes: u64) {
        loop {
            let r = lock(&self.tenants)
                .get_mut(tenant)
                .map_or(Ok(()), |t| t.bucket.try_take(bytes, Instant::now()));
            match r {
                Ok(()) => break,
                Err(wait) => tokio::time::sleep(wait.min(Duration::from_millis(100))).await,
            }
        }
        self.admission.uplink(tenant, bytes).await;
    }
}

/// Bytes of an op still to send.
pub fn pending_bytes(op: &Op) -> u64 {
    match &op.kind {
        OpKind::Put { object, .. } => {
            let done: u64 = op
                .upload
                .as_ref()
                .map_or(0, |u| u.parts.len() as u64 * u.part_size);
            object.size.saturating_sub(done)
        }
        _ => 0,
    }
}

#[cfg(test)]
mod model;
#[cfg(test)]
mod tests;
