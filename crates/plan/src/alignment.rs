//! Tenants with fixed phases: their bursts are not independent, they are a timetable. Over one
//! common period (the least common multiple of their intervals) the timetable is swept exactly,
//! giving how long the fixed-phase tenants together write at each level of demand, and where
//! their bursts overlap the most — the aligned case, where demand is the sum of the coinciding
//! peaks ("everyone checkpoints on the hour").
//!
//! Copies of one `[[tenant]]` shape share its phase, so they burst together.

use std::collections::HashMap;
use std::time::Duration;

use serde::Serialize;

use crate::fleet::{Phase, Tenant};

/// The sweep visits every burst in the common period; beyond this many the file is refused.
pub const MAX_SWEEP_BURSTS: u128 = 1_000_000;

/// The common period of fixed-phase intervals and how many bursts it holds, built up one
/// interval at a time.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CommonPeriod {
    nanos: u128,
    bursts: u128,
}

impl CommonPeriod {
    /// Adds one burst series of period `interval`; `None` once the period holds more than
    /// [`MAX_SWEEP_BURSTS`] bursts.
    pub(crate) fn with(self, interval: Duration) -> Option<Self> {
        let t = interval.as_nanos().max(1);
        if self.nanos == 0 {
            return Some(Self {
                nanos: t,
                bursts: 1,
            });
        }
        let nanos = (self.nanos / gcd(self.nanos, t)).checked_mul(t)?;
        let bursts = self
            .bursts
            .checked_mul(nanos / self.nanos)?
            .checked_add(nanos / t)?;
        (bursts <= MAX_SWEEP_BURSTS).then_some(Self { nanos, bursts })
    }
}

fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// The fixed-phase tenants' joint demand over their common period.
#[derive(Debug, Clone)]
pub struct Alignment {
    /// Seconds; zero when no tenant has a fixed phase.
    pub(crate) period_seconds: f64,
    /// Demand of the fixed-phase tenants (bytes/s, without reads) and the fraction of the
    /// period spent at it, ascending by demand; fractions sum to one.
    pub(crate) levels: Vec<(u64, f64)>,
    /// Where the most fixed-phase demand coincides, if any tenant has a fixed phase.
    pub(crate) worst: Option<Overlap>,
}

/// The instant of the period when the most fixed-phase bursts coincide.
#[derive(Debug, Clone, Serialize)]
pub struct Overlap {
    /// Sum of the coinciding peaks, bytes/s.
    pub bandwidth: f64,
    /// Seconds from the common epoch.
    pub at_seconds: f64,
    /// Seconds per common period spent at this demand.
    pub seconds_per_period: f64,
    /// Indices into the fleet's tenant shapes.
    #[serde(skip)]
    pub members: Vec<usize>,
    /// Tenants bursting together, counting copies.
    pub tenants: u64,
}

/// Sweeps the fixed-phase tenants' timetable over their common period.
pub(crate) fn sweep(tenants: &[Tenant]) -> Alignment {
    let fixed: Vec<(usize, &Tenant, Duration)> = tenants
        .iter()
        .enumerate()
        .filter_map(|(i, t)| match t.phase {
            Phase::Fixed(offset) => Some((i, t, offset)),
            Phase::Random => None,
        })
        .collect();
    let mut period = CommonPeriod::default();
    for (_, t, _) in &fixed {
        // Validation refused files whose period is too long; an unchecked fleet stays usable.
        period = period.with(t.interval).unwrap_or(period);
    }
    if fixed.is_empty() {
        return Alignment {
            period_seconds: 0.0,
            levels: vec![(0, 1.0)],
            worst: None,
        };
    }
    let period_seconds = period.nanos as f64 / 1e9;

    // (time, shape, +1 start / -1 end)
    let mut events: Vec<(f64, usize, i32)> = Vec::new();
    for (slot, (_, t, offset)) in fixed.iter().enumerate() {
        let interval = t.interval_seconds();
        let burst = t.burst_seconds();
        let repeats = period.nanos / t.interval.as_nanos().max(1);
        for m in 0..repeats {
            let start = offset.as_secs_f64() + m as f64 * interval;
            let end = start + burst;
            events.push((start, slot, 1));
            if end <= period_seconds {
                events.push((end, slot, -1));
            } else {
                // The burst wraps past the end of the period into its start.
                events.push((period_seconds, slot, -1));
                events.push((0.0, slot, 1));
                events.push((end - period_seconds, slot, -1));
            }
        }
    }
    events.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.2.cmp(&b.2)));

    let peaks: Vec<u64> = fixed
        .iter()
        .map(|(_, t, _)| u64::from(t.count) * t.peak())
        .collect();
    let mut active = vec![0_i32; fixed.len()];
    let mut level: u64 = 0;
    let mut at_level: HashMap<u64, f64> = HashMap::new();
    let mut worst: Option<Overlap> = None;
    let mut worst_level: Option<u64> = None;
    // Overlaps shorter than this are rounding, not alignment.
    let negligible = period_seconds * 1e-12;
    let mut previous = 0.0;
    let mut i = 0;
    while i <= events.len() {
        let now = events.get(i).map_or(period_seconds, |e| e.0);
        let span = now - previous;
        if span > negligible {
            *at_level.entry(level).or_default() += span;
            if worst_level.is_none_or(|w| level > w) {
                worst_level = Some(level);
                let members: Vec<usize> = (0..fixed.len()).filter(|&s| active[s] > 0).collect();
                worst = Some(Overlap {
                    bandwidth: level as f64,
                    at_seconds: previous,
                    seconds_per_period: 0.0,
                    tenants: members.iter().map(|&s| u64::from(fixed[s].1.count)).sum(),
                    members: members.iter().map(|&s| fixed[s].0).collect(),
                });
            }
        }
        if i == events.len() {
            break;
        }
        // Apply every event at this instant before measuring the next span.
        while let Some(&(time, slot, delta)) = events.get(i) {
            if time.total_cmp(&now).is_ne() {
                break;
            }
            let was = active[slot] > 0;
            active[slot] += delta;
            match (was, active[slot] > 0) {
                (false, true) => level += peaks[slot],
                (true, false) => level -= peaks[slot],
                _ => {}
            }
            i += 1;
        }
        previous = now;
    }

    let mut levels: Vec<(u64, f64)> = at_level
        .into_iter()
        .map(|(demand, seconds)| (demand, seconds / period_seconds))
        .collect();
    levels.sort_by_key(|&(demand, _)| demand);
    if let (Some(w), Some(at)) = (worst.as_mut(), worst_level) {
        w.seconds_per_period = levels
            .iter()
            .find(|&&(demand, _)| demand == at)
            .map_or(0.0, |&(_, fraction)| fraction * period_seconds);
    }
    Alignment {
        period_seconds,
        levels,
        worst,
    }
}
