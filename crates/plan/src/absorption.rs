//! Node-local absorption: a checkpoint lands on the job's own nodes at local write bandwidth,
//! and the node agent drains it to the shared tier at a paced rate that empties it within
//! `drain_window` of the interval. The shared tier then carries drains and reads — a constant,
//! whatever the phases — instead of bursts.
//!
//! A job's nodes are its own (one tenant per node), so bursts of different tenants never
//! share a local disk. Each node holds `checkpoint_size / nodes` per checkpoint and keeps room
//! for `buffer_checkpoints` of them: by default two, the one landing and the previous one, in
//! case its drain ran late (a slow or failed shared tier) or it is kept for a local restore.

use serde::Serialize;

use crate::fleet::{Node, Tenant};

/// One tenant's figures with node-local absorption (one copy of the shape).
#[derive(Debug, Clone, Serialize)]
pub struct Absorbed {
    /// Bytes of local disk each of the tenant's nodes needs.
    pub local_buffer_per_node: u64,
    /// Seconds for a checkpoint to land on local disk (how long training pauses).
    pub landing_seconds: f64,
    /// The whole job's drain rate to the shared tier, bytes/s.
    pub drain_rate: f64,
    /// The drain rate of each node, bytes/s (the agent's `drain_rate`).
    pub drain_rate_per_node: f64,
    /// Seconds from the start of a checkpoint until it is all on the shared tier, when the
    /// drain starts after the landing.
    pub drain_seconds: f64,
    /// What the tenant needs from the shared tier: drain plus reads, bytes/s.
    pub shared_bandwidth: f64,
}

pub(crate) fn absorb(tenant: &Tenant, node: &Node) -> Absorbed {
    let nodes = f64::from(tenant.nodes);
    let shard = tenant
        .checkpoint_size
        .bytes()
        .div_ceil(u64::from(tenant.nodes));
    let landing_seconds = shard as f64 / tenant.local_write_bandwidth.bytes_per_sec();
    let drain_rate = tenant.size() / (tenant.interval_seconds() * node.drain_window);
    Absorbed {
        local_buffer_per_node: shard.saturating_mul(u64::from(node.buffer_checkpoints)),
        landing_seconds,
        drain_rate,
        drain_rate_per_node: drain_rate / nodes,
        drain_seconds: landing_seconds + tenant.size() / drain_rate,
        shared_bandwidth: drain_rate + tenant.reads(),
    }
}
