//! The validated runtime description of what is being planned: the shared tier's target, the
//! GPU nodes' local disks and every tenant's checkpoint profile.
//!
//! Values of these types only come out of [`crate::config::parse`], which checks every field,
//! so the arithmetic downstream never meets a zero interval, a duty cycle above one or a phase
//! outside its interval.

use std::time::Duration;

use sluice_units::{ByteSize, Rate};

/// Everything the planner needs, validated.
#[derive(Debug, Clone)]
pub struct Fleet {
    pub(crate) shared_tier: SharedTier,
    pub(crate) node: Node,
    pub(crate) tenants: Vec<Tenant>,
}

impl Fleet {
    /// Tenant shapes in file order.
    pub fn tenants(&self) -> &[Tenant] {
        &self.tenants
    }

    /// The number of tenants counting every `count` copy.
    pub fn tenant_count(&self) -> u64 {
        self.tenants.iter().map(|t| u64::from(t.count)).sum()
    }

    /// The percentile the shared tier is provisioned for, as a fraction (0.999).
    pub fn target_percentile(&self) -> f64 {
        self.shared_tier.percentile
    }

    /// The shared tier's bandwidth from the file, if given.
    pub fn capacity(&self) -> Option<Rate> {
        self.shared_tier.capacity
    }
}

/// `[shared_tier]`.
#[derive(Debug, Clone)]
pub(crate) struct SharedTier {
    /// In (0, 1).
    pub(crate) percentile: f64,
    pub(crate) capacity: Option<Rate>,
}

/// `[node]`: one GPU node's local disk, the same on every node.
#[derive(Debug, Clone)]
pub(crate) struct Node {
    pub(crate) local_capacity: ByteSize,
    /// The fraction of the interval a drain may take, in (0, 1].
    pub(crate) drain_window: f64,
    /// How many checkpoints' shards a node keeps room for, at least 1.
    pub(crate) buffer_checkpoints: u32,
}

/// When a tenant's bursts start.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Phase {
    /// Independent of every other tenant and uniform over the interval.
    Random,
    /// A fixed offset from a common epoch ("on the hour"), less than the interval.
    Fixed(Duration),
}

/// One `[[tenant]]` shape: `count` identical tenants, each a job on its own `nodes`.
#[derive(Debug, Clone)]
pub struct Tenant {
    pub(crate) name: String,
    /// At least 1.
    pub(crate) count: u32,
    /// At least 1.
    pub(crate) nodes: u32,
    /// Positive.
    pub(crate) checkpoint_size: ByteSize,
    /// Positive.
    pub(crate) interval: Duration,
    /// Positive, and fast enough that a checkpoint fits in the interval.
    pub(crate) burst_bandwidth: Rate,
    pub(crate) read_bandwidth: Rate,
    pub(crate) phase: Phase,
    /// Per node, positive: the tenant's override or `[node] local_write_bandwidth`.
    pub(crate) local_write_bandwidth: Rate,
}

impl Tenant {
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn count(&self) -> u32 {
        self.count
    }

    pub fn phase(&self) -> Phase {
        self.phase
    }

    pub(crate) fn interval_seconds(&self) -> f64 {
        self.interval.as_secs_f64()
    }

    pub(crate) fn size(&self) -> f64 {
        self.checkpoint_size.bytes() as f64
    }

    /// The peak write rate on the grid the demand distribution uses: whole bytes per second.
    pub(crate) fn peak(&self) -> u64 {
        self.burst_bandwidth.bytes_per_sec().round() as u64
    }

    /// Seconds a checkpoint takes at the burst bandwidth.
    pub(crate) fn burst_seconds(&self) -> f64 {
        self.size() / self.peak() as f64
    }

    /// The fraction of time the tenant writes at its peak; in (0, 1].
    pub(crate) fn duty_cycle(&self) -> f64 {
        (self.burst_seconds() / self.interval_seconds()).min(1.0)
    }

    /// Bytes per second averaged over the interval.
    pub(crate) fn average_write(&self) -> f64 {
        self.size() / self.interval_seconds()
    }

    pub(crate) fn reads(&self) -> f64 {
        self.read_bandwidth.bytes_per_sec()
    }
}
