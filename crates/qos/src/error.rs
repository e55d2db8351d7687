//! Why the scheduler refused a configuration or an operation.

use crate::tenant::TenantId;

/// Every way a call into this crate can be refused.
///
/// Configuration errors (`Invalid*`, `ReservationAboveLimit`, `Overbooked`) are the config
/// layer's to report with the tenant's name; `UnknownTenant` is a bug in the caller's name → id
/// map; `QueueFull` is the gateway's cue to answer `SlowDown` to that tenant only.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum QosError {
    #[error("reservation must be a finite number ≥ 0 cost units per second, got {0}")]
    InvalidReservation(f64),
    #[error("weight must be a finite number > 0, got {0}")]
    InvalidWeight(f64),
    #[error("limit must be a finite number > 0 cost units per second, got {0}")]
    InvalidLimit(f64),
    #[error("reservation {reservation} is above limit {limit} (cost units per second)")]
    ReservationAboveLimit { reservation: f64, limit: f64 },
    #[error("capacity must be a finite number > 0 cost units per second, got {0}")]
    InvalidCapacity(f64),
    #[error("ops capacity must be > 0 operations per second")]
    InvalidOps,
    #[error(
        "reservations sum to {reserved} cost units per second, above the capacity of {capacity}"
    )]
    Overbooked { reserved: f64, capacity: f64 },
    #[error("no tenant {0} (removed, or never added to this scheduler)")]
    UnknownTenant(TenantId),
    #[error(
        "tenant {tenant} has {queued_requests} requests ({queued_cost} cost units) queued, \
         at its bound"
    )]
    QueueFull {
        tenant: TenantId,
        queued_requests: usize,
        queued_cost: u64,
    },
}
