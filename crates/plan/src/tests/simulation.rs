//! Monte Carlo over random phases agrees with the exact distribution within its sampling
//! error — and notices when the exact figures are wrong.

use super::{GIB, Shape, fleet};
use crate::alignment;
use crate::demand::{Burster, Demand};
use crate::simulation::{SplitMix64, simulate};
use crate::{Options, SimulateOptions, plan};

fn shapes() -> Vec<Shape> {
    vec![
        Shape::new("a", 8 * GIB, 13, 900).count(6).reads(GIB),
        Shape::new("b", 16 * GIB, 57, 1800).count(3).reads(4 * GIB),
        Shape::new("c", 32 * GIB, 165, 3600).reads(8 * GIB),
        Shape::new("d", 4 * GIB, 23, 600).count(4).phase(0),
        Shape::new("e", 12 * GIB, 35, 1200).count(2).phase(30),
    ]
}

/// Pinned seed: replays the same samples on every run.
#[test]
fn monte_carlo_agrees_within_sampling_error() {
    let fleet = fleet(&shapes());
    let options = Options {
        capacity: Some(sluice_units::Rate(100.0 * GIB as f64)),
        simulate: Some(SimulateOptions {
            samples: 200_000,
            seed: 42,
        }),
    };
    let plan = plan(&fleet, &options);
    let s = plan.simulation.as_ref().expect("simulated");
    assert_eq!(s.seed, 42);
    assert_eq!(
        s.agreement.len(),
        6,
        "four percentiles, the target and the capacity"
    );
    for a in &s.agreement {
        assert!(
            a.sigmas < 4.0,
            "{} off by {} standard errors",
            a.label,
            a.sigmas
        );
        assert!(a.standard_error > 0.0 || a.exact == 0.0);
    }
}

/// The same Monte Carlo against a distribution built with every duty cycle doubled must
/// disagree: the cross-check has teeth.
#[test]
fn monte_carlo_catches_a_wrong_distribution() {
    let fleet = fleet(&shapes()[..3]);
    let wrong: Vec<Burster> = fleet
        .tenants
        .iter()
        .map(|t| Burster {
            peak: t.peak(),
            duty: 2.0 * t.duty_cycle(),
            count: t.count,
        })
        .collect();
    let reads: f64 = fleet
        .tenants
        .iter()
        .map(|t| f64::from(t.count) * t.reads())
        .sum();
    let demand = Demand::new(reads, &wrong, &[(0, 1.0)]);
    let thresholds = vec![("p99".to_owned(), demand.quantile(0.99))];
    let alignment = alignment::sweep(&fleet.tenants);
    let s = simulate(
        &fleet,
        &alignment,
        &demand,
        &thresholds,
        &[0.99],
        100_000,
        7,
    );
    assert!(s.worst_sigmas() > 4.0, "{s:?}");
}

#[test]
fn the_generator_is_seeded_and_uniform() {
    let draw = |seed| {
        let mut rng = SplitMix64::new(seed);
        (0..5).map(|_| rng.next_u64()).collect::<Vec<_>>()
    };
    assert_eq!(draw(1), draw(1));
    assert_ne!(draw(1), draw(2));
    let mut rng = SplitMix64::new(3);
    let n = 100_000;
    let mean = (0..n).map(|_| rng.unit()).sum::<f64>() / f64::from(n);
    // Standard error of the mean of U(0,1): sqrt(1/12/n) ≈ 0.0009.
    assert!((mean - 0.5).abs() < 0.004, "{mean}");
}
