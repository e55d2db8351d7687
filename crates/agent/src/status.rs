//! What the agent reports: per tenant bytes on the node, bytes waiting to drain, drain rate,
//! oldest pending age, ETA, the newest checkpoint durable upstream and the last error; as
//! JSON and as Prometheus text (base units, one `tenant` label). Every tenant's, to the
//! operator, on `status_listen`; a tenant's own, as JSON, on the S3 listener (see `server`).
//! The operator's also shows each upstream gateway's state (up or resting after a failure,
//! its failures and last error; `gateway` label in Prometheus). A tenant with
//! `[tenant.encryption]` shows whether its key is loaded and the key's id (never the key),
//! or why it is unavailable (`sluice_agent_tenant_key_loaded` in Prometheus).

use std::fmt::Write as _;
use std::sync::Arc;

use serde::Serialize;
use tokio::time::Instant;

use crate::drain::{Drain, ErrorInfo, pending_bytes};
use crate::journal::{Journal, OpKind};
use crate::upstream::GatewayState;

#[derive(Debug, Clone, Serialize)]
pub struct Status {
    /// Every upstream gateway, comma-separated.
    pub upstream: String,
    /// Each gateway's state, in configuration order (the operator's status only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub gateways: Vec<GatewayState>,
    pub tenants: Vec<TenantStatus>,
}

#[derive(Debug, Clone, Serialize)]
pub struct DurableUpTo {
    pub bucket: String,
    pub prefix: String,
    pub marker: String,
    pub durable_at_ms: i64,
}

#[derive(Debug, Clone, Serialize)]
pub struct TenantStatus {
    pub tenant: String,
    /// Bytes of objects on this node (pending or retained), counted against the local quota.
    pub local_bytes: u64,
    /// `None`: no local quota configured.
    pub local_capacity_bytes: Option<u64>,
    /// Bytes not yet durable upstream.
    pub pending_bytes: u64,
    /// Journal entries not yet applied upstream (puts, deletes, bucket changes).
    pub pending_ops: u64,
    /// Measured over the last 10 s.
    pub drain_rate_bytes_per_second: f64,
    /// What the pacer allows now (`None`: unpaced).
    pub target_rate_bytes_per_second: Option<f64>,
    pub learned_interval_seconds: Option<f64>,
    pub oldest_pending_age_seconds: Option<f64>,
    pub eta_seconds: Option<f64>,
    /// The newest checkpoint whose commit marker is durable upstream.
    pub durable_up_to: Option<DurableUpTo>,
    pub drained_bytes_total: u64,
    pub drained_objects_total: u64,
    pub drain_errors_total: u64,
    pub evicted_bytes_total: u64,
    /// Stored chunks of this node's copies that failed their checksum when read (a GET, a
    /// copy or the drain's read-back; each read refused): `sluice_integrity_errors_total`.
    pub integrity_errors_total: u64,
    pub last_error: Option<ErrorInfo>,
    /// The tenant's confidential-object key, with `[tenant.encryption]` (absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub encryption: Option<crate::keys::KeyStatus>,
}

impl Status {
    /// Each tenant's key state from `keys`.
    #[must_use]
    pub fn with_keys(mut self, keys: &crate::keys::Keys) -> Self {
        for t in &mut self.tenants {
            t.encryption = keys.status(&t.tenant);
        }
        self
    }
}

use sluice_meta::now_ms;

/// A status snapshot (blocking journal reads: call from a blocking thread).
pub fn snapshot(
    drain: &Arc<Drain>,
    journal: &Journal,
    only: Option<&str>,
) -> Result<Status, sluice_meta::MetaError> {
    let ops = journal.pending()?;
    let wall = now_ms();
    let now = Instant::now();
    let mut ids: Vec<String> = drain.with_tenants(|t| {
        t.keys()
            .filter(|id| only.is_none_or(|o| o == id.as_str()))
            .cloned()
            .collect()
    });
    ids.sort();
    let mut tenants = Vec::with_capacity(ids.len());
    for id in ids {
        let mine: Vec<_> = ops.iter().filter(|o| o.tenant == id).collect();
        let pending: u64 = mine.iter().map(|o| pending_bytes(o)).sum();
        let oldest = mine
            .iter()
            .filter(|o| matches!(o.kind, OpKind::Put { .. } | OpKind::Delete))
            .map(|o| o.enqueued_ms)
            .min();
        let markers = journal.markers(&id)?;
        let local = journal.catalog().ledger().usage(&id);
        let integrity_errors = drain
            .admission()
            .metrics()
            .tenant(&id)
            .integrity_errors
            .load(std::sync::atomic::Ordering::Relaxed);
        let row = drain.with_tenants(|all| {
            let t = all.get(&id)?;
            let measured = t.measured_rate(now);
            let target = t.target_rate.is_finite().then_some(t.target_rate);
            let eta_rate = target.unwrap_or(measured);
            Some(TenantStatus {
                tenant: id.clone(),
                local_bytes: local.map_or(0, |u| u.0),
                local_capacity_bytes: local.map(|u| u.2).filter(|&q| q != u64::MAX),
                pending_bytes: pending,
                pending_ops: mine.len() as u64,
                drain_rate_bytes_per_second: measured,
                target_rate_bytes_per_second: target,
                learned_interval_seconds: t.learned_interval().map(|d| d.as_secs_f64()),
                oldest_pending_age_seconds: oldest
                    .map(|o| u64::try_from(wall - o).unwrap_or(0) as f64 / 1000.0),
                eta_seconds: if pending == 0 {
                    Some(0.0)
                } else if eta_rate > 0.0 {
                    Some(pending as f64 / eta_rate)
                } else {
                    None
                },
                durable_up_to: markers.last().map(|m| DurableUpTo {
                    bucket: m.bucket.clone(),
                    prefix: m.prefix.clone(),
                    marker: m.key.clone(),
                    durable_at_ms: m.durable_ms,
                }),
                drained_bytes_total: t.drained_bytes_total,
                drained_objects_total: t.drained_objects_total,
                drain_errors_total: t.errors_total,
                evicted_bytes_total: t.evicted_bytes_total,
                integrity_errors_total: integrity_errors,
                last_error: t.last_error.clone(),
                encryption: None,
            })
        });
        if let Some(r) = row {
            tenants.push(r);
        }
    }
    Ok(Status {
        upstream: drain.upstream.endpoint().to_owned(),
        gateways: if only.is_none() {
            drain.upstream.gateways()
        } else {
            Vec::new()
        },
        tenants,
    })
}

/// The status as Prometheus text exposition.
pub fn prometheus(s: &Status) -> String {
    let mut out = String::new();
    let mut family =
        |name: &str, kind: &str, help: &str, value: &dyn Fn(&TenantStatus) -> Option<f64>| {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} {kind}");
            for t in &s.tenants {
                if let Some(v) = value(t) {
                    let _ = writeln!(out, "{name}{{tenant=\"{}\"}} {v}", t.tenant);
                }
            }
        };
    family(
        "sluice_agent_local_bytes",
        "gauge",
        "Bytes of objects held on this node.",
        &|t| Some(t.local_bytes as f64),
    );
    family(
        "sluice_agent_local_capacity_bytes",
        "gauge",
        "The tenant's local quota.",
        &|t| t.local_capacity_bytes.map(|v| v as f64),
    );
    family(
        "sluice_agent_pending_bytes",
        "gauge",
        "Bytes not yet durable upstream.",
        &|t| Some(t.pending_bytes as f64),
    );
    family(
        "sluice_agent_pending_ops",
        "gauge",
        "Journal entries not yet applied upstream.",
        &|t| Some(t.pending_ops as f64),
    );
    family(
        "sluice_agent_drain_rate_bytes_per_second",
        "gauge",
        "Drain rate measured over the last 10 s.",
        &|t| Some(t.drain_rate_bytes_per_second),
    );
    family(
        "sluice_agent_drain_target_bytes_per_second",
        "gauge",
        "Rate the pacer allows now (absent: unpaced).",
        &|t| t.target_rate_bytes_per_second,
    );
    family(
        "sluice_agent_oldest_pending_age_seconds",
        "gauge",
        "Age of the oldest write not yet durable upstream.",
        &|t| t.oldest_pending_age_seconds,
    );
    family(
        "sluice_agent_drain_eta_seconds",
        "gauge",
        "Time to drain the backlog at the current rate.",
        &|t| t.eta_seconds,
    );
    family(
        "sluice_agent_durable_up_to_timestamp_seconds",
        "gauge",
        "When the newest checkpoint durable upstream became so.",
        &|t| {
            t.durable_up_to
                .as_ref()
                .map(|d| d.durable_at_ms as f64 / 1000.0)
        },
    );
    family(
        "sluice_agent_drained_bytes_total",
        "counter",
        "Bytes sent upstream.",
        &|t| Some(t.drained_bytes_total as f64),
    );
    family(
        "sluice_agent_drained_objects_total",
        "counter",
        "Journal entries applied upstream.",
        &|t| Some(t.drained_objects_total as f64),
    );
    family(
        "sluice_agent_drain_errors_total",
        "counter",
        "Failed upstream transfers (each retried).",
        &|t| Some(t.drain_errors_total as f64),
    );
    family(
        "sluice_agent_evicted_bytes_total",
        "counter",
        "Bytes of durable local copies evicted.",
        &|t| Some(t.evicted_bytes_total as f64),
    );
    family(
        "sluice_agent_upstream_refused",
        "gauge",
        "1 while the last drain error is a refusal (e.g. QuotaExceeded).",
        &|t| {
            Some(if t.last_error.as_ref().is_some_and(|e| e.permanent) {
                1.0
            } else {
                0.0
            })
        },
    );
    family(
        "sluice_agent_tenant_key_loaded",
        "gauge",
        "1 while the tenant's confidential-object key is loaded, 0 while it is unavailable \
         (tenants with [tenant.encryption] only).",
        &|t| {
            t.encryption
                .as_ref()
                .map(|k| if k.loaded { 1.0 } else { 0.0 })
        },
    );
    gateway_families(&mut out, &s.gateways);
    out
}

/// A metric family of gateways: name, kind, help and the value of one gateway.
type Family = (
    &'static str,
    &'static str,
    &'static str,
    fn(&GatewayState) -> f64,
);

/// Each gateway's state as Prometheus families with a `gateway` label.
fn gateway_families(out: &mut String, gateways: &[GatewayState]) {
    let families: [Family; 3] = [
        (
            "sluice_agent_upstream_up",
            "gauge",
            "1 while the gateway takes calls, 0 while it rests after a failure.",
            |g| if g.up { 1.0 } else { 0.0 },
        ),
        (
            "sluice_agent_upstream_consecutive_failures",
            "gauge",
            "The gateway's failures since its last answer.",
            |g| f64::from(g.consecutive_failures),
        ),
        (
            "sluice_agent_upstream_failures_total",
            "counter",
            "Calls that failed on the gateway (each tried on the next).",
            |g| g.failures_total as f64,
        ),
    ];
    for (name, kind, help, value) in families {
        if gateways.is_empty() {
            continue;
        }
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for g in gateways {
            let _ = writeln!(out, "{name}{{gateway=\"{}\"}} {}", g.endpoint, value(g));
        }
    }
}
