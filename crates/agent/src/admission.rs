//! Throughput isolation on the node: the node's local device and the drain's uplink shared
//! among the node's tenants, as the gateway shares the tier.
//!
//! # Why in the agent
//!
//! One agent process writes and reads every tenant's bytes on the node. The kernel cannot
//! tell them apart: cgroup v2's io controller is a domain controller (every thread of the
//! agent shares one io cgroup), and buffered writeback is charged to whoever dirtied the page,
//! which is the agent. So the agent schedules its own local I/O.
//!
//! # The local device
//!
//! With `[agent.capacity]` set, every transfer between the agent and its local store is
//! admitted through a [`Throttle`] (dmClock, `sluice-throttle`) paced to that capacity, per
//! tenant with its `local_reservation`, `local_weight` and `local_limit`, at a cost of one
//! operation plus its bytes, right before it is issued:
//! - absorbs: every part of a PUT, UploadPart or copy written to the local store (the S3
//!   front's [`Pacer`], as on the gateway);
//! - local reads: GETs served from the node (merged reads that hit here, restores);
//! - the drain's reads of what it uploads ([`Admission::local_pacer`]).
//!
//! The front's own admission of each operation (its per-operation cost) applies too, with
//! `[agent.capacity] queue_depth` bounding a tenant's requests waiting for it (`SlowDown`
//! beyond). Reads from upstream (a GET that misses here) do not touch the local device and
//! are not admitted here. Without `[agent.capacity]` nothing is scheduled: every transfer is
//! issued at once, exactly as before this module existed.
//!
//! # The uplink
//!
//! The drain paces each tenant to its own rate (`pacer`: drain rate, deadline, shared-tier
//! limit). With `[agent.capacity] uplink`, each part that passed its tenant's pace is then
//! admitted through a second dmClock throttle paced to the uplink, by `local_weight` alone
//! (no reservation, no limit: the tenant's pace is its limit), so tenants whose paces add up
//! to more than the uplink share it by weight, and one that needs less than its share leaves
//! the rest to the others. Without `uplink`, the drain's transfer slots are started in
//! weighted order (`drain::share`) and nothing else is shared.
//!
//! # Reload
//!
//! The tenants' shares change on reload (validated as a whole by the configuration first:
//! local reservations sum to at most the capacity); the capacity itself needs a restart.

use std::sync::Arc;
use std::time::Duration;

use sluice_config::{Capacity, Config, Tenant};
use sluice_metrics::Metrics;
use sluice_qos::TenantQos;
use sluice_s3::blob::Pacer;
use sluice_throttle::{TenantSpec, Throttle, ThrottleConfig, ThrottleError};

/// The node's local device and uplink schedulers (either may be absent).
pub struct Admission {
    local: Option<Arc<Throttle>>,
    uplink: Option<Arc<Throttle>>,
    /// The grain of local transfers: `[agent.capacity] grain`, or the blob store's default.
    grain: u64,
    /// The S3 front's per-tenant metrics (bytes in and out of the local store, queue waits).
    metrics: Arc<Metrics>,
}

/// The dispatcher's lookahead for a device of `capacity`: half a grain's service time,
/// within 2–10 ms (as on the gateway).
fn lookahead(c: &Capacity) -> Duration {
    Duration::from_secs_f64(c.grain as f64 / c.bandwidth / 2.0).clamp(
        sluice_throttle::DEFAULT_LOOKAHEAD,
        Duration::from_millis(10),
    )
}

fn policy(p: sluice_config::Policy) -> sluice_throttle::Policy {
    match p {
        sluice_config::Policy::DmClock => sluice_throttle::Policy::DmClock,
        sluice_config::Policy::Fifo => sluice_throttle::Policy::Fifo,
        sluice_config::Policy::RateLimit => sluice_throttle::Policy::RateLimit,
    }
}

/// Each tenant's share of the local device: `local_reservation`, `local_weight`,
/// `local_limit`.
pub fn local_specs(tenants: &[Tenant]) -> Result<Vec<TenantSpec>, ThrottleError> {
    tenants
        .iter()
        .map(|t| {
            let q = t.local.local_qos;
            Ok(TenantSpec {
                name: t.id.clone(),
                qos: TenantQos::new(q.reservation, q.weight, q.limit)?,
            })
        })
        .collect()
}

/// Each tenant's share of the uplink: its `local_weight` only.
pub fn uplink_specs(tenants: &[Tenant]) -> Result<Vec<TenantSpec>, ThrottleError> {
    tenants
        .iter()
        .map(|t| {
            Ok(TenantSpec {
                name: t.id.clone(),
                qos: TenantQos::new(0.0, t.local.local_qos.weight, None)?,
            })
        })
        .collect()
}

impl Admission {
    /// Starts the schedulers `config` asks for on the current tokio runtime.
    pub fn start(config: &Config) -> Result<Self, ThrottleError> {
        let agent = config.agent.as_ref();
        let capacity = agent.and_then(|a| a.capacity);
        let local = match capacity {
            None => None,
            Some(c) => Some(Throttle::start(
                ThrottleConfig {
                    policy: policy(c.policy),
                    bandwidth: c.bandwidth,
                    ops: c.ops,
                    queue_depth: c.queue_depth,
                    lookahead: lookahead(&c),
                },
                local_specs(&config.tenants)?,
            )?),
        };
        let uplink = match agent.and_then(|a| a.uplink) {
            None => None,
            Some(bandwidth) => Some(Throttle::start(
                ThrottleConfig {
                    policy: sluice_throttle::Policy::DmClock,
                    bandwidth,
                    ops: 1e9,
                    queue_depth: usize::MAX,
                    lookahead: sluice_throttle::DEFAULT_LOOKAHEAD,
                },
                uplink_specs(&config.tenants)?,
            )?),
        };
        let metrics = Arc::new(Metrics::default());
        for t in &config.tenants {
            metrics.tenant(&t.id);
        }
        Ok(Self {
            local,
            uplink,
            grain: capacity.map_or(sluice_s3::blob::DEFAULT_GRAIN, |c| c.grain),
            metrics,
        })
    }

    /// Nothing scheduled (tests and tools that open no configuration).
    pub fn unscheduled() -> Self {
        Self {
            local: None,
            uplink: None,
            grain: sluice_s3::blob::DEFAULT_GRAIN,
            metrics: Arc::default(),
        }
    }

    /// The local device's scheduler, if `[agent.capacity]` is set.
    pub fn local(&self) -> Option<&Arc<Throttle>> {
        self.local.as_ref()
    }

    /// The unit of local transfers (reads and written parts).
    pub fn grain(&self) -> u64 {
        self.grain
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The pacer of the drain's local reads for `tenant`: admitted on the local device like
    /// the tenant's own reads, recorded in metrics of their own (they are not sent to a
    /// client; the drain counts what it uploads).
    pub fn local_pacer(&self, tenant: &str) -> Pacer {
        Pacer {
            tenant: Arc::from(tenant),
            throttle: self.local.clone(),
            metrics: Arc::default(),
        }
    }

    /// Waits for `bytes` of `tenant`'s drain to have their turn on the uplink (at once
    /// without `[agent.capacity] uplink`).
    pub async fn uplink(&self, tenant: &str, bytes: u64) {
        if let Some(u) = &self.uplink {
            u.admit_bytes(tenant, bytes).await;
        }
    }

    /// A reload: every tenant's shares replaced (already validated with the file).
    pub async fn update(&self, tenants: &[Tenant]) -> Result<(), ThrottleError> {
        if let Some(l) = &self.local {
            l.update(local_specs(tenants)?).await?;
        }
        if let Some(u) = &self.uplink {
            u.update(uplink_specs(tenants)?).await?;
        }
        for t in tenants {
            self.metrics.tenant(&t.id);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
