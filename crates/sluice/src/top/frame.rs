//! What `sluice top` shows, computed from two samples of the deployment one interval apart:
//! measured rates (counter differences over the interval), never lifetime averages. Pure:
//! the samples carry their own time, and the tests build them by hand.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use sluice_gateway::cluster::View;

use super::prom::Exposition;

/// Every gateway's and agent's answers at one instant.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    /// Seconds on a monotonic clock.
    pub at: f64,
    pub gateways: Vec<GatewaySample>,
    pub agents: Vec<AgentSample>,
}

/// One gateway's control listener.
#[derive(Debug, Clone)]
pub struct GatewaySample {
    /// `host:port` of its control listener.
    pub control: String,
    /// Its `/metrics`, or why it did not answer.
    pub metrics: Result<Exposition, String>,
    /// Its `GET /qos/cluster`, when it shares the tier and the token was accepted.
    pub cluster: Option<View>,
}

/// One agent's status listener.
#[derive(Debug, Clone)]
pub struct AgentSample {
    /// `host:port` of its status listener.
    pub status: String,
    /// Its `/status`, or why it did not answer.
    pub report: Result<AgentStatus, String>,
    /// Its `/metrics` (the node front's per-tenant counters).
    pub metrics: Option<Exposition>,
}

/// The part of the agent's `/status` document `top` reads.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct AgentStatus {
    pub tenants: Vec<AgentTenantStatus>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct AgentTenantStatus {
    pub tenant: String,
    pub pending_bytes: u64,
    pub pending_ops: u64,
    pub drain_rate_bytes_per_second: f64,
    pub oldest_pending_age_seconds: Option<f64>,
}

/// Why a tenant gets less than it asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HeldBack {
    /// Its served rate is at (≥ 90% of) its limit.
    AtLimit,
    /// The gateways together serve ≥ 90% of the tier's capacity.
    TierFull,
    /// It waits in a scheduler although neither is the case (a gateway's share, the ops rate).
    Queued,
}

impl HeldBack {
    pub fn text(self) -> &'static str {
        match self {
            Self::AtLimit => "at its limit",
            Self::TierFull => "tier full",
            Self::Queued => "queued",
        }
    }
}

/// One frame: the `--once --json` document.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Frame {
    /// The interval the rates are measured over (0: one sample only, no rates yet).
    pub interval_seconds: f64,
    /// The tier's capacity (`[gateway.capacity] bandwidth`), when a gateway paces to one.
    pub tier_capacity_bps: Option<f64>,
    /// Bytes per second the gateways moved together.
    pub tier_bytes_per_second: f64,
    pub tenants: Vec<TenantRow>,
    pub gateways: Vec<GatewayRow>,
    pub agents: Vec<AgentRow>,
}

/// One tenant over every gateway (and its durability lag over every agent).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TenantRow {
    pub tenant: String,
    /// Body bytes received and sent by the gateways, per second.
    pub bytes_per_second: f64,
    pub write_bytes_per_second: f64,
    pub read_bytes_per_second: f64,
    /// S3 operations answered per second.
    pub ops_per_second: f64,
    /// Cost units the gateways' schedulers granted per second (bytes plus the per-op cost).
    pub served_cost_per_second: f64,
    pub reservation_bps: Option<f64>,
    pub weight: Option<f64>,
    /// What its weight gives it of the tier among the tenants active now.
    pub weight_share_bps: Option<f64>,
    pub limit_bps: Option<f64>,
    /// Requests waiting for their first admission now.
    pub queued: u64,
    /// Requests answered SlowDown in the interval.
    pub slowdowns: u64,
    /// The mean wait of an admission in the scheduler over the interval.
    pub queue_wait_ms: Option<f64>,
    pub held_back: Option<HeldBack>,
    pub gateways: Vec<TenantAtGateway>,
    /// Not yet durable upstream, over every agent; `None` without agents.
    pub lag: Option<Lag>,
}

/// A tenant's part at one gateway.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TenantAtGateway {
    pub gateway: String,
    pub bytes_per_second: f64,
    pub ops_per_second: f64,
    pub queued: u64,
    /// Its share of the tenant's reservation and limit there (cluster-wide QoS).
    pub reservation_bps: Option<f64>,
    pub limit_bps: Option<f64>,
}

/// Bytes and age not yet upstream.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Lag {
    pub pending_bytes: u64,
    pub pending_ops: u64,
    pub oldest_pending_age_seconds: Option<f64>,
    pub drain_bytes_per_second: f64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct GatewayRow {
    pub control: String,
    pub error: Option<String>,
    pub coordinator: bool,
    pub fallback: bool,
    /// The part of the tier it paces to now.
    pub capacity_bps: Option<f64>,
    pub bytes_per_second: f64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct AgentRow {
    pub status: String,
    pub error: Option<String>,
    pub tenants: Vec<AgentTenantRow>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct AgentTenantRow {
    pub tenant: String,
    /// Body bytes in and out of the node's store, per second.
    pub bytes_per_second: f64,
    pub pending_bytes: u64,
    pub oldest_pending_age_seconds: Option<f64>,
    pub drain_bytes_per_second: f64,
}

/// The gateway metrics `top` reads (see `crates/gateway/src/control.rs`, `crates/metrics`).
pub mod series {
    pub const RECEIVED: &str = "sluice_received_bytes_total";
    pub const SENT: &str = "sluice_sent_bytes_total";
    pub const REQUESTS: &str = "sluice_requests_total";
    pub const THROTTLED: &str = "sluice_throttled_requests_total";
    pub const WAIT_SUM: &str = "sluice_queue_wait_seconds_sum";
    pub const WAIT_COUNT: &str = "sluice_queue_wait_seconds_count";
    pub const SERVED_COST: &str = "sluice_qos_served_cost_total";
    pub const QUEUED: &str = "sluice_qos_queued_requests";
    pub const RESERVATION: &str = "sluice_qos_reservation_bytes_per_second";
    pub const WEIGHT: &str = "sluice_qos_weight";
    pub const LIMIT: &str = "sluice_qos_limit_bytes_per_second";
    pub const TIER: &str = "sluice_qos_tier_capacity_bytes_per_second";
    pub const CAPACITY: &str = "sluice_qos_capacity_bytes_per_second";
    pub const CLUSTER_CAPACITY: &str = "sluice_qos_cluster_capacity_bytes_per_second";
    pub const FALLBACK: &str = "sluice_qos_cluster_fallback";
    pub const COORDINATOR: &str = "sluice_qos_cluster_coordinator";
}

/// A held-back tenant's rate at this fraction of its limit is at its limit; the tier at
/// this fraction of its capacity is full.
const NEAR: f64 = 0.9;
/// A mean scheduler wait at least this long holds a tenant back.
const WAIT_HELD_MS: f64 = 5.0;

/// The frame of `cur`, its rates measured since `prev` (the same endpoints' earlier sample).
pub fn frame(prev: Option<&Sample>, cur: &Sample) -> Frame {
    let dt = prev.map_or(0.0, |p| cur.at - p.at);
    let rate = |now: f64, before: Option<f64>| -> f64 {
        match before {
            // A counter that went down was reset (a restart): no rate this interval.
            Some(b) if dt > 0.0 && now >= b => (now - b) / dt,
            _ => 0.0,
        }
    };
    let before = |control: &str| -> Option<&Exposition> {
        prev?
            .gateways
            .iter()
            .find(|g| g.control == control)?
            .metrics
            .as_ref()
            .ok()
    };
    let mut rows: BTreeMap<String, TenantRow> = BTreeMap::new();
    let mut wait: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    let mut gateways = Vec::new();
    let mut tier = None::<f64>;
    for g in &cur.gateways {
        let m = match &g.metrics {
            Ok(m) => m,
            Err(e) => {
                gateways.push(GatewayRow {
                    control: g.control.clone(),
                    error: Some(e.clone()),
                    ..GatewayRow::default()
                });
                continue;
            }
        };
        let p = before(&g.control);
        let delta = |name: &str, t: &str| {
            rate(
                m.tenant(name, t).unwrap_or(0.0),
                p.map(|p| p.tenant(name, t).unwrap_or(0.0)),
            )
        };
        if let Some(c) = m.scalar(series::TIER) {
            tier = Some(tier.map_or(c, |t: f64| t.max(c)));
        }
        let local = g.cluster.as_ref().and_then(|v| {
            v.gateways
                .iter()
                .find(|gv| control_of(&gv.control) == g.control)
        });
        let mut names: BTreeSet<String> = BTreeSet::new();
        for s in [
            series::RECEIVED,
            series::SENT,
            series::QUEUED,
            series::WEIGHT,
        ] {
            names.extend(m.per_tenant(s).into_keys());
        }
        let mut moved = 0.0;
        for t in names {
            let write = delta(series::RECEIVED, &t);
            let read = delta(series::SENT, &t);
            let ops = delta(series::REQUESTS, &t);
            let queued = m.tenant(series::QUEUED, &t).unwrap_or(0.0) as u64;
            moved += write + read;
            let row = rows.entry(t.clone()).or_insert_with(|| TenantRow {
                tenant: t.clone(),
                ..TenantRow::default()
            });
            row.write_bytes_per_second += write;
            row.read_bytes_per_second += read;
            row.bytes_per_second += write + read;
            row.ops_per_second += ops;
            row.served_cost_per_second += delta(series::SERVED_COST, &t);
            row.queued += queued;
            row.slowdowns += (delta(series::THROTTLED, &t) * dt).round() as u64;
            let w = wait.entry(t.clone()).or_default();
            w.0 += delta(series::WAIT_SUM, &t) * dt;
            w.1 += delta(series::WAIT_COUNT, &t) * dt;
            // The configured parameters are the same on every gateway (one catalog).
            row.reservation_bps = row
                .reservation_bps
                .or_else(|| m.tenant(series::RESERVATION, &t));
            row.weight = row.weight.or_else(|| m.tenant(series::WEIGHT, &t));
            row.limit_bps = row.limit_bps.or_else(|| {
                m.tenant(series::LIMIT, &t)
                    .filter(|l| l.is_finite() && *l > 0.0)
            });
            let here = local.and_then(|l| l.tenants.get(&t));
            row.gateways.push(TenantAtGateway {
                gateway: g.control.clone(),
                bytes_per_second: write + read,
                ops_per_second: ops,
                queued,
                reservation_bps: here.map(|h| h.reservation_bps),
                limit_bps: here.and_then(|h| h.limit_bps),
            });
        }
        gateways.push(GatewayRow {
            control: g.control.clone(),
            error: None,
            coordinator: m.scalar(series::COORDINATOR) == Some(1.0),
            fallback: m.scalar(series::FALLBACK) == Some(1.0),
            capacity_bps: m
                .scalar(series::CLUSTER_CAPACITY)
                .or_else(|| m.scalar(series::CAPACITY)),
            bytes_per_second: moved,
        });
    }
    let moved: f64 = rows.values().map(|r| r.bytes_per_second).sum();
    let cost: f64 = rows.values().map(|r| r.served_cost_per_second).sum();
    let active_weight: f64 = rows
        .values()
        .filter(|r| active(r))
        .filter_map(|r| r.weight)
        .sum();
    for r in rows.values_mut() {
        if let Some((sum, count)) = wait.get(&r.tenant)
            && *count > 0.0
        {
            r.queue_wait_ms = Some(sum / count * 1e3);
        }
        if let (Some(c), Some(w)) = (tier, r.weight) {
            let total = if active(r) {
                active_weight
            } else {
                active_weight + w
            };
            r.weight_share_bps = (total > 0.0).then(|| c * w / total);
        }
        r.held_back = held_back(r, tier, cost.max(moved));
    }
    let (agents, lags) = agents(prev, cur, dt);
    for (t, lag) in lags {
        rows.entry(t.clone())
            .or_insert_with(|| TenantRow {
                tenant: t,
                ..TenantRow::default()
            })
            .lag = Some(lag);
    }
    Frame {
        interval_seconds: dt.max(0.0),
        tier_capacity_bps: tier,
        tier_bytes_per_second: moved,
        tenants: rows.into_values().collect(),
        gateways,
        agents,
    }
}

fn active(r: &TenantRow) -> bool {
    r.bytes_per_second > 0.0 || r.ops_per_second > 0.0 || r.queued > 0
}

/// Why `r` is held back, if it is: it waits (queued now, SlowDowns, or a mean scheduler wait
/// of [`WAIT_HELD_MS`]) and is at its limit, or the tier is full, or neither.
fn held_back(r: &TenantRow, tier: Option<f64>, tier_served: f64) -> Option<HeldBack> {
    let waits =
        r.queued > 0 || r.slowdowns > 0 || r.queue_wait_ms.is_some_and(|w| w >= WAIT_HELD_MS);
    if !waits {
        return None;
    }
    let served = r.served_cost_per_second.max(r.bytes_per_second);
    if r.limit_bps.is_some_and(|l| served >= NEAR * l) {
        Some(HeldBack::AtLimit)
    } else if tier.is_some_and(|c| tier_served >= NEAR * c) {
        Some(HeldBack::TierFull)
    } else {
        Some(HeldBack::Queued)
    }
}

/// The agents' rows, and each tenant's lag summed over them (oldest age: the largest).
fn agents(prev: Option<&Sample>, cur: &Sample, dt: f64) -> (Vec<AgentRow>, BTreeMap<String, Lag>) {
    let mut rows = Vec::new();
    let mut lags: BTreeMap<String, Lag> = BTreeMap::new();
    for a in &cur.agents {
        let status = match &a.report {
            Ok(s) => s,
            Err(e) => {
                rows.push(AgentRow {
                    status: a.status.clone(),
                    error: Some(e.clone()),
                    tenants: Vec::new(),
                });
                continue;
            }
        };
        let p = prev
            .and_then(|p| p.agents.iter().find(|x| x.status == a.status))
            .and_then(|x| x.metrics.as_ref());
        let bytes = |t: &str| -> f64 {
            let Some(m) = &a.metrics else { return 0.0 };
            let now = m.tenant(series::RECEIVED, t).unwrap_or(0.0)
                + m.tenant(series::SENT, t).unwrap_or(0.0);
            match p {
                Some(p) if dt > 0.0 => {
                    let before = p.tenant(series::RECEIVED, t).unwrap_or(0.0)
                        + p.tenant(series::SENT, t).unwrap_or(0.0);
                    if now >= before {
                        (now - before) / dt
                    } else {
                        0.0
                    }
                }
                _ => 0.0,
            }
        };
        let mut tenants = Vec::new();
        for t in &status.tenants {
            let lag = lags.entry(t.tenant.clone()).or_default();
            lag.pending_bytes += t.pending_bytes;
            lag.pending_ops += t.pending_ops;
            lag.drain_bytes_per_second += t.drain_rate_bytes_per_second;
            lag.oldest_pending_age_seconds =
                match (lag.oldest_pending_age_seconds, t.oldest_pending_age_seconds) {
                    (Some(a), Some(b)) => Some(a.max(b)),
                    (a, b) => a.or(b),
                };
            tenants.push(AgentTenantRow {
                tenant: t.tenant.clone(),
                bytes_per_second: bytes(&t.tenant),
                pending_bytes: t.pending_bytes,
                oldest_pending_age_seconds: t.oldest_pending_age_seconds,
                drain_bytes_per_second: t.drain_rate_bytes_per_second,
            });
        }
        rows.push(AgentRow {
            status: a.status.clone(),
            error: None,
            tenants,
        });
    }
    (rows, lags)
}

/// `host:port` of a control URL (`http://host:port`).
pub fn control_of(url: &str) -> String {
    url.trim_start_matches("http://")
        .trim_start_matches("https://")
        .trim_end_matches('/')
        .to_owned()
}

#[cfg(test)]
mod tests;
