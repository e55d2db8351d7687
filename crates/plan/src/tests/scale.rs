//! A thousand heterogeneous tenants plan (the grid is bracketed, not exact); the figures stay
//! consistent. Wall time is measured by hand in release, not asserted here.

use super::{GIB, Shape, fleet};
use crate::simulation::SplitMix64;
use crate::{Options, plan};

pub(crate) fn thousand_tenants() -> Vec<Shape> {
    let mut rng = SplitMix64::new(1000);
    (0..1000)
        .map(|i| {
            let peak = GIB + rng.next_u64() % (31 * GIB);
            let interval = 60 * (10 + rng.next_u64() % 170);
            let burst = 5 + rng.next_u64() % (interval / 10);
            let reads = rng.next_u64() % (4 * GIB);
            Shape::new(&format!("job-{i}"), peak, burst, interval).reads(reads)
        })
        .collect()
}

#[test]
fn a_thousand_tenants_plan_consistently() {
    let fleet = fleet(&thousand_tenants());
    assert_eq!(fleet.tenant_count(), 1000);
    let plan = plan(&fleet, &Options::default());
    assert!(!plan.distribution.exact);
    assert!((plan.demand().total_probability() - 1.0).abs() < 1e-9);
    let p = &plan.percentiles;
    assert!(plan.reads <= p.p50 && p.p50 <= p.p99 && p.p99 <= p.p99_9 && p.p99_9 <= p.p99_99);
    assert!(plan.sum_of_averages < p.p99_9 && p.p99_99 < plan.sum_of_peaks);
    // The bracket is tight: under 1% of the percentile.
    let low = &plan.distribution.percentiles_lower;
    assert!(p.p99_99 - low.p99_99 < 0.01 * p.p99_99);
    assert_eq!(plan.tenants.len(), 1000);
    assert_eq!(plan.gateway_toml().matches("[[tenant]]").count(), 1000);
}
