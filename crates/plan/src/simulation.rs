//! Monte Carlo over random phases: a cross-check of the exact distribution that shares none of
//! its machinery. Each sample draws an instant and a phase for every random-phase tenant copy,
//! and adds up the peaks of those whose burst window contains the instant — from the
//! timetable, not from the duty cycle. Seeded; the seed is part of the result so any run can be
//! replayed.
//!
//! For a threshold `x` the fraction of samples above `x` estimates P(D > x) with standard
//! error `sqrt(p (1 - p) / N)`; the result says how many standard errors it lies from the
//! exact figure (or from the exact bracket when the grid is not exact).

use serde::Serialize;

use crate::alignment::Alignment;
use crate::demand::Demand;
use crate::fleet::{Fleet, Phase};

/// SplitMix64 (Steele, Lea, Flood 2014): tiny, fast, and good enough for sampling phases.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1_u64 << 53) as f64)
    }
}

/// The Monte Carlo estimate at one threshold, against the exact figure.
#[derive(Debug, Clone, Serialize)]
pub struct Agreement {
    pub label: String,
    /// bytes/s; samples strictly above it count.
    pub threshold: f64,
    /// Exact P(D > threshold); with `exact_lower`, the bracket when the grid is coarse.
    pub exact: f64,
    pub exact_lower: f64,
    pub estimate: f64,
    pub standard_error: f64,
    /// Standard errors between the estimate and the exact bracket (0 inside it).
    pub sigmas: f64,
}

/// The result of `--simulate`.
#[derive(Debug, Clone, Serialize)]
pub struct Simulation {
    pub samples: u64,
    pub seed: u64,
    /// Sample quantiles at the same percentiles as the exact ones, bytes/s.
    pub quantiles: Vec<(f64, f64)>,
    pub agreement: Vec<Agreement>,
}

impl Simulation {
    /// The largest disagreement, in standard errors.
    pub fn worst_sigmas(&self) -> f64 {
        self.agreement.iter().map(|a| a.sigmas).fold(0.0, f64::max)
    }
}

/// Draws `samples` instants. `thresholds`: (label, bytes/s) where estimates are compared;
/// `percentiles`: fractions at which sample quantiles are reported.
pub(crate) fn simulate(
    fleet: &Fleet,
    alignment: &Alignment,
    demand: &Demand,
    thresholds: &[(String, f64)],
    percentiles: &[f64],
    samples: u64,
    seed: u64,
) -> Simulation {
    let mut rng = SplitMix64::new(seed);
    let reads: f64 = fleet
        .tenants
        .iter()
        .map(|t| f64::from(t.count) * t.reads())
        .sum();
    let mut values: Vec<f64> = Vec::with_capacity(usize::try_from(samples).unwrap_or(0));
    for _ in 0..samples {
        let instant = rng.unit() * alignment.period_seconds;
        let mut total = reads;
        for t in &fleet.tenants {
            let interval = t.interval_seconds();
            let burst = t.burst_seconds();
            let peak = t.peak() as f64;
            match t.phase {
                Phase::Fixed(offset) => {
                    if (instant - offset.as_secs_f64()).rem_euclid(interval) < burst {
                        total += f64::from(t.count) * peak;
                    }
                }
                Phase::Random => {
                    for _ in 0..t.count {
                        let phase = rng.unit() * interval;
                        if (instant - phase).rem_euclid(interval) < burst {
                            total += peak;
                        }
                    }
                }
            }
        }
        values.push(total);
    }
    values.sort_by(f64::total_cmp);

    let n = samples.max(1) as f64;
    // Half a grid step above the threshold: no possible demand lies between, so rounding in
    // the sums cannot move a sample across it.
    let margin = demand.step() as f64 / 2.0;
    let agreement = thresholds
        .iter()
        .map(|(label, x)| {
            let threshold = x + margin;
            let (exact_lower, exact) = demand.exceedance_bounds(threshold);
            let above = values.len() - values.partition_point(|&v| v <= threshold);
            let estimate = above as f64 / n;
            let p = f64::midpoint(exact, exact_lower);
            let standard_error = (p * (1.0 - p) / n).sqrt();
            let gap = if estimate > exact {
                estimate - exact
            } else if estimate < exact_lower {
                exact_lower - estimate
            } else {
                0.0
            };
            let sigmas = if gap == 0.0 {
                0.0
            } else if standard_error > 0.0 {
                gap / standard_error
            } else {
                f64::INFINITY
            };
            Agreement {
                label: label.clone(),
                threshold,
                exact,
                exact_lower,
                estimate,
                standard_error,
                sigmas,
            }
        })
        .collect();
    let quantiles = percentiles
        .iter()
        .map(|&p| {
            let rank = ((p * values.len() as f64).ceil() as usize).clamp(1, values.len().max(1));
            (p, values.get(rank - 1).copied().unwrap_or(reads))
        })
        .collect();
    Simulation {
        samples,
        seed,
        quantiles,
        agreement,
    }
}
