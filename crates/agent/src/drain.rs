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
//! scan; a transfer asks it for each part (or small object) before sending it.
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
//! behind a fault injector; `model` checks it and the journal against a reference model.
//!
//! # Cancellation
//!
//! Stopping the worker drops transfers in flight; they are not acknowledged anywhere, so the
//! next start redoes them from the journal.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use futures::TryStreamExt;
use md5::{Digest, Md5};
use object_store::PutPayload;
use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};
use sluice_config::{Retention, Tenant};
use sluice_md5::Md5Stream;
use sluice_meta::MetaError;
use sluice_s3::BlobStore;
use tokio::sync::{Notify, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::journal::{self, DonePart, Journal, Op, OpKind, UploadProgress};
use crate::pacer::{IntervalEstimator, Policy, TokenBucket};
use crate::upstream::{UpstreamError, UpstreamStore};
use sluice_store::Crc;

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

/// What an op is called in a log line.
fn op_name(kind: &OpKind) -> &'static str {
    match kind {
        OpKind::Put { .. } => "upload",
        OpKind::Delete => "delete",
        OpKind::CreateBucket => "bucket creation",
        OpKind::DeleteBucket => "bucket deletion",
    }
}

/// Logs a failed op where it is handled: throttling at debug; a transient failure at WARN,
/// once per attempt; a refusal (at WARN) and a loss of local data (at ERROR, the one thing a
/// human must act on) once per change of the tenant's error, at debug while it lasts.
fn log_failure(op: &Op, e: &DrainError, changed: bool, retry_in: Duration) {
    let (tenant, bucket, key, what) = (&op.tenant, &op.bucket, &op.key, op_name(&op.kind));
    match e {
        DrainError::Upstream(UpstreamError::SlowDown(m)) => tracing::debug!(
            tenant,
            bucket,
            key,
            op = what,
            "upstream asks the {what} to slow down ({m}); retrying in {retry_in:?}"
        ),
        DrainError::Upstream(UpstreamError::Refused { status, message }) if changed => {
            tracing::warn!(
                tenant,
                bucket,
                key,
                op = what,
                "upstream refused the {what}: {message} ({status}); the data stays on this \
                 node, retried every {PERMANENT_BACKOFF:?}"
            );
        }
        DrainError::Local { .. } if changed => tracing::error!(
            tenant, bucket, key, op = what, error = %e,
            "the local copy cannot be uploaded; it stays on this node, retried every \
             {PERMANENT_BACKOFF:?}"
        ),
        DrainError::Upstream(UpstreamError::Refused { .. }) | DrainError::Local { .. } => {
            tracing::debug!(tenant, bucket, key, op = what, error = %e, "still failing");
        }
        DrainError::Journal(_) | DrainError::Task(_) => tracing::error!(
            tenant, bucket, key, op = what, error = %e,
            "the drain journal failed; retrying in {retry_in:?}"
        ),
        DrainError::Upstream(_) | DrainError::Mismatch { .. } => tracing::warn!(
            tenant,
            bucket,
            key,
            op = what,
            "the {what} failed: {e}; retrying in {retry_in:?}"
        ),
    }
}

/// A tenant's last error, for status.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ErrorInfo {
    pub message: String,
    pub permanent: bool,
    pub at_ms: i64,
    pub key: String,
}

/// Runtime state of one tenant's drain.
#[derive(Debug)]
pub struct TenantDrain {
    pub policy: Policy,
    pub retention: Retention,
    pub local_capacity: u64,
    bucket: TokenBucket,
    estimator: IntervalEstimator,
    last_seen_seq: u64,
    in_flight: usize,
    backoff_until: Option<Instant>,
    failures: u32,
    /// When `last_error` was recorded: only a transfer that began after it clears it.
    failed_at: Option<Instant>,
    window: VecDeque<(Instant, u64)>,
    pub target_rate: f64,
    pub drained_bytes_total: u64,
    pub drained_objects_total: u64,
    pub errors_total: u64,
    pub evicted_bytes_total: u64,
    pub last_error: Option<ErrorInfo>,
}

impl TenantDrain {
    fn new(t: &Tenant, now: Instant) -> Self {
        let policy = Policy {
            drain_rate: t.local.drain_rate,
            limit: t.qos.limit,
            interval: t.local.interval,
        };
        let rate = policy.target_rate(0, Duration::ZERO, None);
        Self {
            policy,
            retention: t.local.retention,
            local_capacity: t.local.local_capacity,
            bucket: TokenBucket::new(rate, burst(rate), now),
            estimator: IntervalEstimator::new(QUIET),
            last_seen_seq: 0,
            in_flight: 0,
            backoff_until: None,
            failures: 0,
            failed_at: None,
            window: VecDeque::new(),
            target_rate: rate,
            drained_bytes_total: 0,
            drained_objects_total: 0,
            errors_total: 0,
            evicted_bytes_total: 0,
            last_error: None,
        }
    }

    /// A transfer that began at `started` succeeded. It clears the tenant's error and backoff
    /// only if it began after that error: a transfer already under way when another failed
    /// says nothing of the failure (an upload refused for quota stays refused while the ones
    /// sent before the quota ran out complete).
    fn succeeded(&mut self, started: Instant) {
        if self.failed_at.is_none_or(|at| started >= at) {
            self.failures = 0;
            self.backoff_until = None;
            self.last_error = None;
            self.failed_at = None;
        }
        self.drained_objects_total += 1;
    }

    /// A transfer failed at `now` with `error`: backs the tenant off exponentially (slowly for
    /// a refusal), scaled by `jitter` (in 0.5..1). Returns how long until the next attempt and
    /// whether the error differs from the last one (what is worth a log line).
    fn failed(&mut self, now: Instant, jitter: f64, error: ErrorInfo) -> (Duration, bool) {
        self.failures = self.failures.saturating_add(1);
        self.errors_total += 1;
        let cap = if error.permanent {
            PERMANENT_BACKOFF
        } else {
            MAX_BACKOFF
        };
        let exp = Duration::from_millis(100).saturating_mul(1 << self.failures.min(10));
        let retry_in = exp.min(cap).mul_f64(jitter);
        self.backoff_until = Some(now + retry_in);
        self.failed_at = Some(now);
        let changed = self
            .last_error
            .as_ref()
            .is_none_or(|l| l.message != error.message);
        self.last_error = Some(error);
        (retry_in, changed)
    }

    /// Bytes per second drained over the last `RATE_WINDOW` (10 s).
    pub fn measured_rate(&self, now: Instant) -> f64 {
        let total: u64 = self
            .window
            .iter()
            .filter(|(t, _)| now.saturating_duration_since(*t) <= RATE_WINDOW)
            .map(|(_, b)| b)
            .sum();
        total as f64 / RATE_WINDOW.as_secs_f64()
    }

    pub fn learned_interval(&self) -> Option<Duration> {
        self.estimator.estimate()
    }
}

/// The burst of a tenant's bucket: one part's worth at most, a tenth of a second at least.
fn burst(rate: f64) -> f64 {
    if rate.is_finite() {
        (rate / 10.0).clamp(64.0 * 1024.0, PART_SIZE as f64)
    } else {
        PART_SIZE as f64
    }
}

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
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn hex(bytes: &[u8]) -> String {
    sluice_s3::blob::hex(bytes)
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

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
        }
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
        let ready: Vec<Op> = journal::eligible(&ops, &busy)
            .into_iter()
            .cloned()
            .collect();
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
    /// so a rate change applies to a transfer already waiting).
    async fn pace(&self, tenant: &str, bytes: u64) {
        loop {
            let r = lock(&self.tenants)
                .get_mut(tenant)
                .map_or(Ok(()), |t| t.bucket.try_take(bytes, Instant::now()));
            match r {
                Ok(()) => return,
                Err(wait) => tokio::time::sleep(wait.min(Duration::from_millis(100))).await,
            }
        }
    }

    fn sent(&self, tenant: &str, bytes: u64) {
        if let Some(t) = lock(&self.tenants).get_mut(tenant) {
            let now = Instant::now();
            t.drained_bytes_total += bytes;
            t.window.push_back((now, bytes));
            while t
                .window
                .front()
                .is_some_and(|(at, _)| now.saturating_duration_since(*at) > RATE_WINDOW)
            {
                t.window.pop_front();
            }
        }
    }

    /// Reads `range` of the op's local copy: its bytes, checksum and MD5. `None`: the op was
    /// superseded meanwhile (its local copy is gone or replaced).
    async fn read_local(
        &self,
        op: &Op,
        object: &sluice_meta::ObjectRecord,
        range: std::ops::Range<u64>,
    ) -> Result<Option<(Vec<Bytes>, Crc, [u8; 16])>, DrainError> {
        let chunks: Result<Vec<Bytes>, String> = if object.inline {
            self.read_inline(op, object, range).await?
        } else {
            let stream = self.blobs.read(
                &sluice_s3::blob::Pacer::unthrottled(&op.tenant),
                &object.segments,
                range,
                None,
            );
            stream.try_collect().await.map_err(|e| e.to_string())
        };
        match chunks {
            Ok(chunks) => {
                let mut md5 = Md5Stream::new();
                for c in &chunks {
                    md5.update(c.clone()).await;
                }
                let crc = Crc::of_chunks(chunks.iter().map(|c| &c[..]));
                Ok(Some((chunks, crc, md5.finish().await)))
            }
            Err(e) => {
                let seq = op.seq;
                if self.blocking(move |j| j.op(seq)).await?.is_none() {
                    // Overwritten or deleted locally meanwhile: its successor carries on.
                    return Ok(None);
                }
                Err(DrainError::Local {
                    key: op.key.clone(),
                    message: e,
                })
            }
        }
    }

    /// Reads `range` of an inline object's body from the catalog. While its op is live the
    /// object at its key is exactly `object` (a newer write supersedes the op in the same
    /// transaction); anything else there is an error, unless the op was superseded meanwhile.
    async fn read_inline(
        &self,
        op: &Op,
        object: &sluice_meta::ObjectRecord,
        range: std::ops::Range<u64>,
    ) -> Result<Result<Vec<Bytes>, String>, DrainError> {
        let (t, b, k) = (op.tenant.clone(), op.bucket.clone(), op.key.clone());
        let found = self
            .blocking(move |j| j.catalog().get_object_with_body(&t, &b, &k))
            .await;
        let found = match found {
            // The bucket is gone: so is the object (the op is superseded; checked below).
            Err(DrainError::Journal(MetaError::NoSuchBucket)) => None,
            other => other?,
        };
        Ok(match found {
            Some((current, Some(body))) if current == *object => {
                let body = Bytes::from(body);
                let to = usize::try_from(range.end)
                    .unwrap_or(usize::MAX)
                    .min(body.len());
                let from = usize::try_from(range.start).unwrap_or(usize::MAX).min(to);
                Ok(vec![body.slice(from..to)])
            }
            _ => Err("the inline object is no longer in the catalog".to_owned()),
        })
    }

    async fn put(&self, op: &Op) -> Result<Outcome, DrainError> {
        let OpKind::Put { object, crc } = &op.kind else {
            return Err(DrainError::Task("not a put".into()));
        };
        let expected_etag = if object.size <= self.sizes.single_put_max {
            let Some((chunks, got, md5)) = self.read_local(op, object, 0..object.size).await?
            else {
                return Ok(Outcome::Superseded);
            };
            check_crc(op, *crc, got)?;
            self.pace(&op.tenant, object.size).await;
            let payload: PutPayload = chunks.into_iter().collect();
            let etag = self
                .upstream
                .put(&op.tenant, &op.bucket, &op.key, payload, object)
                .await?;
            let md5 = hex(&md5);
            if let Some(e) = etag
                && e != md5
            {
                return Err(DrainError::Mismatch {
                    key: op.key.clone(),
                    message: format!("upstream ETag {e}, sent MD5 {md5}"),
                });
            }
            self.sent(&op.tenant, object.size);
            md5
        } else {
            match self.multipart(op, object, *crc).await? {
                Some(etag) => etag,
                None => return Ok(Outcome::Superseded),
            }
        };
        let head = self
            .upstream
            .head(&op.tenant, &op.bucket, &op.key)
            .await?
            .ok_or_else(|| DrainError::Mismatch {
                key: op.key.clone(),
                message: "absent after upload".into(),
            })?;
        let etag = head.etag;
        if head.size != object.size || etag != expected_etag {
            return Err(DrainError::Mismatch {
                key: op.key.clone(),
                message: format!(
                    "upstream has {} bytes with ETag {etag}, expected {} bytes with ETag {expected_etag}",
                    head.size, object.size
                ),
            });
        }
        let o = op.clone();
        Ok(if self.blocking(move |j| j.complete(&o)).await? {
            Outcome::Done { bytes: object.size }
        } else {
            Outcome::Superseded
        })
    }

    /// A resumable multipart upload; returns the expected upstream ETag, or `None` if the op
    /// was superseded meanwhile.
    async fn multipart(
        &self,
        op: &Op,
        object: &sluice_meta::ObjectRecord,
        crc: Option<Crc>,
    ) -> Result<Option<String>, DrainError> {
        let part_size = self.sizes.part_size.max(object.size.div_ceil(10_000));
        let mut progress = if let Some(p) = &op.upload {
            p.clone()
        } else {
            let upload_id = self
                .upstream
                .create_multipart(&op.tenant, &op.bucket, &op.key, object)
                .await?;
            let p = UploadProgress {
                upload_id,
                part_size,
                parts: std::collections::BTreeMap::new(),
            };
            if !self.record(op.seq, Some(p.clone())).await? {
                let _ = self
                    .upstream
                    .abort_multipart(&op.tenant, &op.bucket, &op.key, &p.upload_id)
                    .await;
                return Ok(None);
            }
            p
        };
        let part_size = progress.part_size;
        let n = object.size.div_ceil(part_size);
        for i in 0..n {
            let idx = u32::try_from(i).unwrap_or(u32::MAX);
            if progress.parts.contains_key(&idx) {
                continue;
            }
            let range = i * part_size..object.size.min((i + 1) * part_size);
            let len = range.end - range.start;
            let Some((chunks, got, md5)) = self.read_local(op, object, range).await? else {
                return Ok(None);
            };
            self.pace(&op.tenant, len).await;
            let payload: PutPayload = chunks.into_iter().collect();
            let etag = self
                .upstream
                .put_part(
                    &op.tenant,
                    &op.bucket,
                    &op.key,
                    &progress.upload_id,
                    usize::try_from(i).unwrap_or(usize::MAX),
                    payload,
                )
                .await?;
            let md5 = hex(&md5);
            if etag != md5 {
                return Err(DrainError::Mismatch {
                    key: op.key.clone(),
                    message: format!("part {i}: upstream ETag {etag}, sent MD5 {md5}"),
                });
            }
            self.sent(&op.tenant, len);
            progress.parts.insert(idx, DonePart { etag, crc: got });
            if !self.record(op.seq, Some(progress.clone())).await? {
                return Ok(None);
            }
        }
        let whole = progress
            .parts
            .values()
            .fold(Crc::default(), |acc, p| acc.then(p.crc));
        check_crc(op, crc, whole)?;
        let mut md5 = Md5::new();
        for p in progress.parts.values() {
            md5.update(unhex(&p.etag).unwrap_or_default());
        }
        let expected = format!("{}-{}", hex(&md5.finalize()), progress.parts.len());
        let etags: Vec<String> = progress.parts.values().map(|p| p.etag.clone()).collect();
        if let Err(e) = self
            .upstream
            .complete_multipart(&op.tenant, &op.bucket, &op.key, &progress.upload_id, etags)
            .await
        {
            // Already completed before a crash? The HEAD after this decides; an upload that
            // vanished otherwise starts again from scratch.
            let head = self.upstream.head(&op.tenant, &op.bucket, &op.key).await?;
            let done = head.is_some_and(|h| h.size == object.size && h.etag == expected);
            if !done {
                if e == UpstreamError::NotFound {
                    self.record(op.seq, None).await?;
                }
                return Err(e.into());
            }
        }
        Ok(Some(expected))
    }

    async fn record(&self, seq: u64, p: Option<UploadProgress>) -> Result<bool, DrainError> {
        self.blocking(move |j| j.set_upload(seq, p)).await
    }

    /// Deletes local copies durable upstream when retention or space says so.
    async fn evict(&self) -> Result<(), DrainError> {
        let copies = self.blocking(Journal::durable_copies).await?;
        if copies.is_empty() {
            return Ok(());
        }
        let mut by_tenant: HashMap<String, Vec<(String, String, journal::DurableCopy)>> =
            HashMap::new();
        for (t, b, k, c) in copies {
            by_tenant.entry(t).or_default().push((b, k, c));
        }
        for (tenant, mut copies) in by_tenant {
            let (retention, capacity) = match lock(&self.tenants).get(&tenant) {
                Some(t) => (t.retention, t.local_capacity),
                None => continue,
            };
            let t = tenant.clone();
            let markers = self.blocking(move |j| j.markers(&t)).await?;
            let used = self
                .journal
                .catalog()
                .ledger()
                .usage(&tenant)
                .map_or(0, |u| u.0);
            // Oldest first.
            copies.sort_by_key(|c| c.2.durable_ms);
            let mut victims: Vec<usize> = Vec::new();
            match retention {
                Retention::Checkpoints(n) => {
                    let mut kept: Vec<(&str, &str)> = Vec::new();
                    for m in markers.iter().rev() {
                        if kept.len() as u32 >= n {
                            break;
                        }
                        if !kept.contains(&(m.bucket.as_str(), m.prefix.as_str())) {
                            kept.push((&m.bucket, &m.prefix));
                        }
                    }
                    for (i, (b, k, _)) in copies.iter().enumerate() {
                        let in_checkpoint = markers
                            .iter()
                            .any(|m| &m.bucket == b && k.starts_with(&m.prefix));
                        let retained = kept.iter().any(|(mb, mp)| mb == b && k.starts_with(mp));
                        if in_checkpoint && !retained {
                            victims.push(i);
                        }
                    }
                }
                Retention::Bytes(limit) => {
                    let mut keep = 0u64;
                    for (i, (_, _, c)) in copies.iter().enumerate().rev() {
                        keep += c.object.size;
                        if keep > limit {
                            victims.push(i);
                        }
                    }
                }
            }
            // Space: above the high-water mark, evict oldest durable copies down to low water.
            let high = capacity as f64 * HIGH_WATER;
            if capacity != u64::MAX && used as f64 > high {
                let mut freed: u64 = victims.iter().map(|&i| copies[i].2.object.size).sum();
                let target = used as f64 - capacity as f64 * LOW_WATER;
                for (i, copy) in copies.iter().enumerate() {
                    if freed as f64 >= target {
                        break;
                    }
                    if !victims.contains(&i) {
                        victims.push(i);
                        freed += copy.2.object.size;
                    }
                }
            }
            for i in victims {
                let (b, k, c) = copies[i].clone();
                let (t2, b2, k2, c2) = (tenant.clone(), b.clone(), k.clone(), c.clone());
                let evicted = self
                    .blocking(move |j| {
                        let removed = j.catalog().evict_object(&t2, &b2, &k2, &c2.object)?;
                        j.forget_durable(&t2, &b2, &k2)?;
                        Ok(removed)
                    })
                    .await?;
                if evicted {
                    let names: Vec<String> =
                        c.object.segments.iter().map(|s| s.blob.clone()).collect();
                    self.blobs.delete(&tenant, names).await;
                    if let Some(t) = lock(&self.tenants).get_mut(&tenant) {
                        t.evicted_bytes_total += c.object.size;
                    }
                    tracing::debug!(tenant, bucket = b, key = k, "evicted a durable local copy");
                }
            }
        }
        Ok(())
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

fn check_crc(op: &Op, expected: Option<Crc>, got: Crc) -> Result<(), DrainError> {
    match expected {
        Some(e) if e != got => Err(DrainError::Local {
            key: op.key.clone(),
            message: format!(
                "checksum mismatch: written {} ({} bytes), read back {} ({} bytes)",
                e.hex(),
                e.len,
                got.hex(),
                got.len
            ),
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod model;
#[cfg(test)]
mod tests;
