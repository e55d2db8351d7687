//! The exact distribution against cases worked by hand and against brute-force enumeration.

use super::{GIB, Shape, brute_exceedance, brute_force, brute_quantile, close, fleet};
use crate::demand::{Burster, Demand, MAX_CELLS};
use crate::simulation::SplitMix64;
use crate::{Options, plan};

const P: u64 = GIB;

/// The hand-worked case: ten identical tenants, duty 1/30 (60 s bursts every 30 min),
/// peak P, no reads. Binomial(10, 1/30): P(≤1) = 0.958, P(≤2) = 0.9963, P(≤3) = 0.99978,
/// P(≤4) = 0.999991.
#[test]
fn ten_identical_tenants_match_the_binomial_worked_by_hand() {
    let fleet = fleet(&[Shape::new("t", P, 60, 1800).count(10)]);
    let plan = plan(&fleet, &Options::default());
    let p = P as f64;
    assert_eq!(plan.percentiles.p50, 0.0);
    assert_eq!(plan.percentiles.p99, 2.0 * p);
    assert_eq!(plan.percentiles.p99_9, 3.0 * p);
    assert_eq!(plan.percentiles.p99_99, 4.0 * p);
    assert_eq!(plan.target.bandwidth, 3.0 * p, "default target is p99.9");
    assert!(close(plan.sum_of_averages, p / 3.0, 1e-12));
    assert_eq!(plan.sum_of_peaks, 10.0 * p);
    assert!(plan.distribution.exact);
    assert_eq!(plan.distribution.grid_step, p);
    // P(D > 2P) = 1 - P(≤2) from the binomial formula.
    let q: f64 = 1.0 / 30.0;
    let at_most_two: f64 = (0..=2)
        .map(|k| binomial(10, k) * q.powi(k as i32) * (1.0 - q).powi(10 - k as i32))
        .sum();
    assert!(close(
        plan.demand().exceedance(2.0 * p),
        1.0 - at_most_two,
        1e-12
    ));
}

fn binomial(n: u64, k: u64) -> f64 {
    (0..k).fold(1.0, |acc, i| acc * (n - i) as f64 / (i + 1) as f64)
}

#[test]
fn reads_shift_every_percentile_by_their_sum() {
    let base = plan(
        &fleet(&[Shape::new("t", P, 60, 1800).count(10)]),
        &Options::default(),
    );
    let with_reads = plan(
        &fleet(&[Shape::new("t", P, 60, 1800).count(10).reads(GIB / 4)]),
        &Options::default(),
    );
    let reads = 10.0 * (GIB / 4) as f64;
    for ((_, a), (_, b)) in base
        .percentiles
        .labelled()
        .iter()
        .zip(with_reads.percentiles.labelled())
    {
        assert_eq!(a + reads, b);
    }
    assert_eq!(with_reads.sum_of_peaks, base.sum_of_peaks + reads);
}

/// Small heterogeneous fleets whose peaks share a divisor (so the grid is exact): every
/// percentile and every exceedance probability equals the enumeration of all 2^n states.
#[test]
fn heterogeneous_fleets_match_brute_force_enumeration() {
    let mut rng = SplitMix64::new(0x5EED_0001);
    for case in 0..60 {
        let shapes = random_shapes(&mut rng, case, 256 << 20);
        let fleet = fleet(&shapes);
        let plan = plan(&fleet, &Options::default());
        let atoms = brute_force(&fleet);
        assert!(plan.distribution.exact, "case {case}: {shapes:?}");
        for p in [0.1, 0.5, 0.9, 0.99, 0.999, 0.9999] {
            let exact = plan.demand().quantile(p);
            let brute = brute_quantile(&atoms, p);
            assert!(
                close(exact, brute, 1e-12),
                "case {case} p{p}: {exact} vs {brute}; {shapes:?}"
            );
        }
        for &(demand, _) in &atoms {
            let exact = plan.demand().exceedance(demand);
            let brute = brute_exceedance(&atoms, demand);
            assert!(
                (exact - brute).abs() < 1e-12,
                "case {case} at {demand}: {exact} vs {brute}"
            );
        }
        assert!((plan.demand().total_probability() - 1.0).abs() < 1e-12);
    }
}

/// Peaks with no useful common divisor force the bracketed grid: the truth (brute force)
/// lies inside the reported bracket, and the bracket is within the documented bound.
#[test]
fn a_coarse_grid_brackets_the_truth() {
    let mut rng = SplitMix64::new(0x5EED_0002);
    let mut bracketed = 0;
    for case in 0..40 {
        let shapes = random_shapes(&mut rng, case, 1);
        let fleet = fleet(&shapes);
        let plan = plan(&fleet, &Options::default());
        let atoms = brute_force(&fleet);
        if plan.distribution.exact {
            continue;
        }
        bracketed += 1;
        for p in [0.5, 0.9, 0.99, 0.999, 0.9999] {
            let (low, high) = plan.demand().quantile_bounds(p);
            let brute = brute_quantile(&atoms, p);
            assert!(
                low <= brute * (1.0 + 1e-12) && brute <= high * (1.0 + 1e-12),
                "case {case} p{p}: {brute} outside [{low}, {high}]"
            );
            assert!(high - low <= plan.distribution.error_bound);
        }
        for &(demand, _) in &atoms {
            let (low, high) = plan.demand().exceedance_bounds(demand);
            let brute = brute_exceedance(&atoms, demand);
            assert!(low - 1e-12 <= brute && brute <= high + 1e-12, "case {case}");
        }
    }
    assert!(
        bracketed >= 30,
        "only {bracketed} cases exercised the bracket"
    );
}

/// Tenants on a fixed timetable are not independent: brute force sweeps every second of
/// their common period. Ten tenants all at phase 0 burst together for 60 s of every 30 min.
#[test]
fn aligned_tenants_demand_the_sum_of_their_peaks() {
    let fleet = fleet(&[Shape::new("t", P, 60, 1800).count(10).phase(0)]);
    let plan = plan(&fleet, &Options::default());
    let p = P as f64;
    // 1/30 of the time all ten write at once; otherwise nothing.
    assert_eq!(plan.percentiles.p50, 0.0);
    assert_eq!(plan.percentiles.p99, 10.0 * p);
    assert!(close(plan.demand().exceedance(0.0), 1.0 / 30.0, 1e-12));
    let worst = plan.aligned.worst.as_ref().expect("fixed phases");
    assert_eq!(worst.tenants, 10);
    assert_eq!(worst.bandwidth, 10.0 * p);
    assert_eq!(worst.at_seconds, 0.0);
    assert!(close(worst.seconds_per_period, 60.0, 1e-12));
}

#[test]
fn mixed_timetables_and_random_phases_match_brute_force() {
    let shapes = [
        Shape::new("hourly", 4 * P, 90, 3600).phase(0),
        Shape::new("half-hourly", 2 * P, 120, 1800)
            .count(3)
            .phase(1740),
        Shape::new("staggered", 3 * P, 60, 1200).phase(300),
        Shape::new("random-a", 5 * P, 45, 900).reads(P / 2),
        Shape::new("random-b", P, 300, 3600).count(4),
    ];
    let fleet = fleet(&shapes);
    let plan = plan(&fleet, &Options::default());
    let atoms = brute_force(&fleet);
    assert!(plan.distribution.exact);
    for &(demand, _) in &atoms {
        let exact = plan.demand().exceedance(demand);
        let brute = brute_exceedance(&atoms, demand);
        assert!(
            (exact - brute).abs() < 1e-12,
            "at {demand}: {exact} vs {brute}"
        );
    }
    for p in [0.5, 0.99, 0.999, 0.9999] {
        assert!(close(
            plan.demand().quantile(p),
            brute_quantile(&atoms, p),
            1e-12
        ));
    }
    // "half-hourly" starts at 29m and runs 2 min, over the hour: it meets "hourly" at 0s.
    let worst = plan.aligned.worst.as_ref().expect("fixed phases");
    assert_eq!(worst.bandwidth, (4 * P + 3 * 2 * P) as f64);
    assert_eq!(worst.tenants, 4);
}

#[test]
fn a_burst_wider_than_the_grid_shifts_past_the_old_top() {
    // One tenant of peak 5 on a distribution that so far only reaches 0: the shift exceeds
    // the length, and the gap cells must stay empty.
    let demand = Demand::new(
        0.0,
        &[
            Burster {
                peak: 5,
                duty: 0.25,
                count: 1,
            },
            Burster {
                peak: 15,
                duty: 0.5,
                count: 1,
            },
        ],
        &[(0, 1.0)],
    );
    assert!(demand.is_exact());
    assert_eq!(demand.step(), 5);
    let curve: Vec<(f64, f64)> = demand.exceedance_curve().collect();
    assert_eq!(
        curve,
        vec![(0.0, 0.625), (5.0, 0.5), (15.0, 0.125), (20.0, 0.0)]
    );
}

#[test]
fn the_grid_stays_within_its_cell_budget() {
    let demand = Demand::new(
        0.0,
        &[
            Burster {
                peak: 1_000_003,
                duty: 0.1,
                count: 300,
            },
            Burster {
                peak: 7_777_777,
                duty: 0.01,
                count: 50,
            },
        ],
        &[(0, 1.0)],
    );
    assert!(!demand.is_exact());
    let cells = (300 * 1_000_003 + 50 * 7_777_777) / demand.step() + 350;
    assert!(cells <= MAX_CELLS + 350, "{cells}");
    assert!((demand.total_probability() - 1.0).abs() < 1e-9);
}

/// Random shapes with peaks that are multiples of `unit` bytes/s (1: arbitrary peaks).
fn random_shapes(rng: &mut SplitMix64, case: usize, unit: u64) -> Vec<Shape> {
    let shapes = 1 + (rng.next_u64() % 5) as usize;
    let mut remaining = 10_u32;
    let mut out = Vec::new();
    for i in 0..shapes {
        let count = (1 + (rng.next_u64() % 3) as u32).min(remaining);
        if count == 0 {
            break;
        }
        remaining -= count;
        let peak = if unit == 1 {
            GIB + rng.next_u64() % (16 * GIB)
        } else {
            unit * (1 + rng.next_u64() % 64)
        };
        let interval = 60 * (5 + rng.next_u64() % 120);
        let burst = 1 + rng.next_u64() % (interval / 3);
        let reads = (rng.next_u64() % 4) * (GIB / 2);
        out.push(
            Shape::new(&format!("c{case}-{i}"), peak, burst, interval)
                .count(count)
                .reads(reads),
        );
    }
    out
}
