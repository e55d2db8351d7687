//! The cost unit: one number that prices both operations and bytes.
//!
//! A request costs `per_op + bytes`. The unit is "bytes of sequential transfer": `per_op` is
//! what one operation costs the backend, expressed as the bytes it could have moved in the
//! same time. Pick it from the backend's measured capacity,
//!
//! ```text
//! per_op = bandwidth / ops        e.g. 1 GiB/s / 20,000 ops/s ≈ 53,687 bytes
//! ```
//!
//! which is Ceph's `osd_bandwidth_cost_per_io` (`osd_mclock_max_sequential_bandwidth /
//! osd_mclock_max_capacity_iops`). With that choice the time the backend needs for a request is
//! modelled as `1/ops + bytes/bandwidth = (per_op + bytes) / bandwidth`, so
//!
//! - the backend's capacity in cost units per second is its **bandwidth**: a stream of large
//!   bodies and a stream of metadata operations at `ops` per second both consume exactly it;
//! - reservations and limits written as byte rates (`"200MiB/s"`) are cost rates as they stand,
//!   and an operation-heavy tenant pays for its operations out of the same budget.
//!
//! The model is linear, so it is only as good as the two measurements. Measure both on the
//! real backend with the grain size the gateway uses (bandwidth with grain-sized transfers at
//! high concurrency; ops with zero-byte requests such as HEAD); an `ops` measured too high makes
//! metadata storms cheap, too low starves them.

use crate::error::QosError;
use crate::tenant::TenantQos;

/// Prices a request: `per_op + bytes` cost units. See the module documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CostModel {
    per_op: u64,
}

impl CostModel {
    /// A model charging `per_op` cost units for each operation on top of its bytes. A zero
    /// `per_op` is raised to 1, so that every request costs something.
    pub fn new(per_op: u64) -> Self {
        Self {
            per_op: per_op.max(1),
        }
    }

    /// The model for a backend measured at `bandwidth` bytes per second and `ops` operations
    /// per second: `per_op = bandwidth / ops`, rounded.
    pub fn from_capacity(bandwidth: f64, ops: f64) -> Result<Self, QosError> {
        if !(bandwidth.is_finite() && bandwidth > 0.0) {
            return Err(QosError::InvalidCapacity(bandwidth));
        }
        if !(ops.is_finite() && ops > 0.0) {
            return Err(QosError::InvalidOps);
        }
        let per_op = (bandwidth / ops).round();
        // `per_op` is finite and positive; values past u64::MAX saturate in the cast.
        Ok(Self::new(per_op as u64))
    }

    /// Cost units charged per operation.
    pub fn per_op(&self) -> u64 {
        self.per_op
    }

    /// The cost of one operation moving `bytes` (0 for metadata operations).
    pub fn cost(&self, bytes: u64) -> u64 {
        self.per_op.saturating_add(bytes)
    }
}

/// Refuses a set of tenants whose reservations sum above `capacity` (cost units per second).
///
/// The config layer calls this with the whole new tenant set before it swaps it in: reservations
/// are promises, and promising more than the backend can do breaks all of them at once.
/// Admission is against the sum, not a statistical peak — a reservation holds whenever its
/// tenant has demand, whatever the others do.
pub fn check_reservations<'a>(
    capacity: f64,
    tenants: impl IntoIterator<Item = &'a TenantQos>,
) -> Result<(), QosError> {
    if !(capacity.is_finite() && capacity > 0.0) {
        return Err(QosError::InvalidCapacity(capacity));
    }
    let reserved: f64 = tenants.into_iter().map(TenantQos::reservation).sum();
    if reserved > capacity {
        return Err(QosError::Overbooked { reserved, capacity });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_op_is_bandwidth_over_ops() {
        let model =
            CostModel::from_capacity(1024.0 * 1024.0 * 1024.0, 20_000.0).expect("valid capacity");
        assert_eq!(model.per_op(), 53_687);
        assert_eq!(model.cost(0), 53_687);
        assert_eq!(model.cost(4 << 20), 53_687 + (4 << 20));
    }

    #[test]
    fn a_request_always_costs_something() {
        assert_eq!(CostModel::new(0).cost(0), 1);
        assert_eq!(CostModel::new(7).cost(u64::MAX), u64::MAX);
    }

    #[test]
    fn capacity_measurements_are_validated() {
        assert_eq!(
            CostModel::from_capacity(0.0, 10.0),
            Err(QosError::InvalidCapacity(0.0))
        );
        assert_eq!(
            CostModel::from_capacity(1e9, f64::NAN),
            Err(QosError::InvalidOps)
        );
    }

    #[test]
    fn reservations_above_capacity_are_refused() {
        let tenants = [
            TenantQos::new(600.0, 1.0, None).expect("valid qos"),
            TenantQos::new(400.0, 1.0, None).expect("valid qos"),
        ];
        assert_eq!(check_reservations(1000.0, &tenants), Ok(()));
        assert_eq!(
            check_reservations(999.0, &tenants),
            Err(QosError::Overbooked {
                reserved: 1000.0,
                capacity: 999.0
            })
        );
        assert_eq!(
            check_reservations(f64::INFINITY, &tenants),
            Err(QosError::InvalidCapacity(f64::INFINITY))
        );
    }
}
