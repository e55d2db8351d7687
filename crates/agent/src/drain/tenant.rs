//! One tenant's drain state: its pacer, backoff, counters and last error, and how a failed
//! op is logged.

use std::collections::VecDeque;
use std::time::Duration;

use sluice_config::{Retention, Tenant};
use tokio::time::Instant;

use super::{DrainError, MAX_BACKOFF, PART_SIZE, PERMANENT_BACKOFF, QUIET, RATE_WINDOW};
use crate::journal::{Op, OpKind};
use crate::pacer::{IntervalEstimator, Policy, TokenBucket};
use crate::upstream::UpstreamError;

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
pub(super) fn log_failure(op: &Op, e: &DrainError, changed: bool, retry_in: Duration) {
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
    /// The tenant's `local_weight`: its share of the drain's transfer slots and uplink.
    pub local_weight: f64,
    pub(super) bucket: TokenBucket,
    pub(super) estimator: IntervalEstimator,
    pub(super) last_seen_seq: u64,
    pub(super) in_flight: usize,
    pub(super) backoff_until: Option<Instant>,
    pub(super) failures: u32,
    /// When `last_error` was recorded: only a transfer that began after it clears it.
    pub(super) failed_at: Option<Instant>,
    pub(super) window: VecDeque<(Instant, u64)>,
    pub target_rate: f64,
    pub drained_bytes_total: u64,
    pub drained_objects_total: u64,
    pub errors_total: u64,
    pub evicted_bytes_total: u64,
    pub last_error: Option<ErrorInfo>,
}

impl TenantDrain {
    pub(super) fn new(t: &Tenant, now: Instant) -> Self {
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
            local_weight: t.local.local_qos.weight,
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
    pub(super) fn succeeded(&mut self, started: Instant) {
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
    pub(super) fn failed(
        &mut self,
        now: Instant,
        jitter: f64,
        error: ErrorInfo,
    ) -> (Duration, bool) {
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
pub(super) fn burst(rate: f64) -> f64 {
    if rate.is_finite() {
        (rate / 10.0).clamp(64.0 * 1024.0, PART_SIZE as f64)
    } else {
        PART_SIZE as f64
    }
}
