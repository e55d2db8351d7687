//! A virtual-time model of a backend in front of the scheduler, shared by the property tests.
//!
//! The backend serves one request at a time at `capacity` cost units per second: a request of
//! cost `c` dispatched at `t` occupies it until `t + c/capacity`, when the next decision is
//! taken. When the scheduler answers `NextAt`, the clock jumps there (or to the next arrival,
//! whichever is first). No real time passes anywhere.

#![allow(dead_code)] // each test binary uses its own subset

use std::time::Duration;

use sluice_qos::{Decision, Phase, Request, Scheduler, TenantId, TenantQos};

pub const MIB: u64 = 1 << 20;

/// splitmix64 (Steele, Lea, Flood 2014): small, seeded, good enough for test scenarios.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
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
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [low, high).
    pub fn range(&mut self, low: f64, high: f64) -> f64 {
        low + (high - low) * self.unit()
    }

    /// Uniform in [low, high], integers.
    pub fn between(&mut self, low: u64, high: u64) -> u64 {
        low + self.next_u64() % (high - low + 1)
    }

    pub fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }
}

/// The seed for a randomized test: `SLUICE_QOS_SEED` (decimal or 0x-hex) if set, otherwise a
/// fresh one. Printed either way, so a failure can be replayed.
pub fn seed(test: &str) -> u64 {
    let seed = match std::env::var("SLUICE_QOS_SEED") {
        Ok(value) => {
            let value = value.trim();
            let parsed = match value.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => value.parse(),
            };
            parsed.unwrap_or_else(|_| panic!("SLUICE_QOS_SEED={value:?} is not a u64"))
        }
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0x5eed, |d| d.as_nanos() as u64),
    };
    eprintln!("{test}: SLUICE_QOS_SEED={seed:#x}");
    seed
}

/// How a tenant offers work.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Pattern {
    /// Keeps `depth` requests queued from `start` to `stop`: it always has demand.
    Saturating,
    /// Saturating for `on` seconds, then idle for `off` seconds, repeating.
    OnOff { on: f64, off: f64 },
    /// Open loop: requests arrive at exponentially distributed intervals, `rate` cost units
    /// per second on average.
    Poisson { rate: f64 },
}

/// Request sizes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Costs {
    Fixed(u64),
    Uniform { min: u64, max: u64 },
}

impl Costs {
    pub fn max(self) -> u64 {
        match self {
            Costs::Fixed(c) => c,
            Costs::Uniform { max, .. } => max,
        }
    }

    fn mean(self) -> f64 {
        match self {
            Costs::Fixed(c) => c as f64,
            Costs::Uniform { min, max } => (min + max) as f64 / 2.0,
        }
    }

    fn draw(self, rng: &mut Rng) -> u64 {
        match self {
            Costs::Fixed(c) => c,
            Costs::Uniform { min, max } => rng.between(min, max),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Load {
    pub qos: TenantQos,
    pub pattern: Pattern,
    pub costs: Costs,
    pub start: f64,
    pub stop: f64,
}

impl Load {
    pub fn saturating(qos: TenantQos, cost: u64) -> Self {
        Self {
            qos,
            pattern: Pattern::Saturating,
            costs: Costs::Fixed(cost),
            start: 0.0,
            stop: f64::INFINITY,
        }
    }

    pub fn between(self, start: f64, stop: f64) -> Self {
        Self {
            start,
            stop,
            ..self
        }
    }

    /// Whether a saturating or on/off tenant wants work at `t`, and since when.
    fn active_since(&self, t: f64) -> Option<f64> {
        if t < self.start || t >= self.stop {
            return None;
        }
        match self.pattern {
            Pattern::Saturating => Some(self.start),
            Pattern::OnOff { on, .. } => {
                let began = self.cycle_start(t);
                (t < began + on).then_some(began)
            }
            Pattern::Poisson { .. } => None,
        }
    }

    /// The start of the on/off cycle containing `t` (≥ `start`): at most `t`, and the next
    /// cycle starts after `t`, whatever the rounding of the division.
    fn cycle_start(&self, t: f64) -> f64 {
        let Pattern::OnOff { on, off } = self.pattern else {
            return self.start;
        };
        let period = on + off;
        let mut began = self.start + ((t - self.start) / period).floor() * period;
        if began > t {
            began -= period;
        }
        if began + period <= t {
            began += period;
        }
        began
    }

    /// The next time after `t` at which this tenant starts wanting work.
    fn next_activation(&self, t: f64) -> f64 {
        if t < self.start {
            return self.start;
        }
        match self.pattern {
            Pattern::OnOff { on, off } => {
                let next = self.cycle_start(t) + (on + off);
                if next < self.stop {
                    next
                } else {
                    f64::INFINITY
                }
            }
            _ => f64::INFINITY,
        }
    }
}

/// One dispatch, as the backend saw it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Served {
    pub tenant: usize,
    pub at: f64,
    pub cost: u64,
    pub phase: Phase,
}

/// What a simulation did.
#[derive(Debug, Clone, Default)]
pub struct Run {
    pub capacity: f64,
    pub duration: f64,
    pub served: Vec<Served>,
    /// Per tenant, the intervals `[from, to)` during which it had a request queued.
    pub backlogged: Vec<Vec<(f64, f64)>>,
    /// Per tenant, the times at which it went from idle to backlogged.
    pub arrivals: Vec<Vec<f64>>,
    /// Per tenant, prefix sums of cost served, by dispatch time.
    pub(crate) times: Vec<Vec<f64>>,
    pub(crate) sums: Vec<Vec<u64>>,
}

/// Queue depth of a saturating tenant.
const DEPTH: usize = 8;

/// Runs `loads` against a backend of `capacity` cost units per second for `duration`
/// seconds of virtual time.
pub fn simulate(capacity: f64, loads: &[Load], duration: f64, rng: &mut Rng) -> Run {
    let mut scheduler: Scheduler<usize> = Scheduler::new();
    let ids: Vec<TenantId> = loads.iter().map(|l| scheduler.add_tenant(l.qos)).collect();
    let n = loads.len();
    let mut next_poisson: Vec<f64> = loads
        .iter()
        .map(|l| match l.pattern {
            Pattern::Poisson { rate } => l.start + exponential(rng, rate / l.costs.mean()),
            _ => f64::INFINITY,
        })
        .collect();
    let mut backlogged_since: Vec<Option<f64>> = vec![None; n];
    let mut last_offer: Vec<f64> = vec![f64::NEG_INFINITY; n];
    let mut run = Run {
        capacity,
        duration,
        backlogged: vec![Vec::new(); n],
        arrivals: vec![Vec::new(); n],
        ..Run::default()
    };
    let at = |t: f64| Duration::from_secs_f64(t);
    let mut t = 0.0;
    while t < duration {
        // Offer the work that has arrived by t.
        for (i, load) in loads.iter().enumerate() {
            let mut offer = |scheduler: &mut Scheduler<usize>, arrival: f64, rng: &mut Rng| {
                let cost = load.costs.draw(rng);
                scheduler
                    .enqueue(ids[i], Request::new(i, cost), at(arrival))
                    .expect("tenant is known");
                if backlogged_since[i].is_none() {
                    backlogged_since[i] = Some(arrival);
                    run.arrivals[i].push(arrival);
                }
            };
            match load.pattern {
                Pattern::Saturating | Pattern::OnOff { .. } => {
                    if let Some(since) = load.active_since(t) {
                        // A tenant that became active while the backend was busy arrived then.
                        let arrival = if last_offer[i] < since { since } else { t };
                        last_offer[i] = arrival;
                        while scheduler.queue_len(ids[i]).expect("known") < DEPTH {
                            offer(&mut scheduler, arrival, rng);
                        }
                    }
                }
                Pattern::Poisson { rate } => {
                    while next_poisson[i] <= t && next_poisson[i] < load.stop {
                        offer(&mut scheduler, next_poisson[i], rng);
                        next_poisson[i] += exponential(rng, rate / load.costs.mean());
                    }
                }
            }
        }
        match scheduler.dequeue(at(t)) {
            Decision::Dispatch(dispatch) => {
                let i = dispatch.payload;
                run.served.push(Served {
                    tenant: i,
                    at: t,
                    cost: dispatch.cost,
                    phase: dispatch.phase,
                });
                if scheduler.queue_len(ids[i]).expect("known") == 0
                    && let Some(since) = backlogged_since[i].take()
                {
                    run.backlogged[i].push((since, t));
                }
                t += dispatch.cost as f64 / capacity;
            }
            decision => {
                let mut next = loads
                    .iter()
                    .enumerate()
                    .map(|(i, l)| next_poisson[i].min(l.next_activation(t)))
                    .fold(duration, f64::min);
                if let Decision::NextAt(when) = decision {
                    assert!(
                        when.as_secs_f64() > t,
                        "NextAt({when:?}) is not after now ({t})"
                    );
                    next = next.min(when.as_secs_f64());
                }
                assert!(
                    next > t || next >= duration,
                    "the clock must move: {t} → {next}"
                );
                t = next;
            }
        }
    }
    for (i, since) in backlogged_since.iter().enumerate() {
        if let Some(since) = since {
            run.backlogged[i].push((*since, duration));
        }
    }
    run.index(n);
    run
}

fn exponential(rng: &mut Rng, per_second: f64) -> f64 {
    -(1.0 - rng.unit()).ln() / per_second
}

impl Run {
    fn index(&mut self, n: usize) {
        self.times = vec![Vec::new(); n];
        self.sums = vec![vec![0]; n];
        for s in &self.served {
            self.times[s.tenant].push(s.at);
            let last = *self.sums[s.tenant].last().unwrap_or(&0);
            self.sums[s.tenant].push(last + s.cost);
        }
    }

    /// Cost served to `tenant` by dispatches at times in `[from, to)`.
    pub fn served(&self, tenant: usize, from: f64, to: f64) -> u64 {
        let times = &self.times[tenant];
        let a = times.partition_point(|&x| x < from);
        let b = times.partition_point(|&x| x < to);
        self.sums[tenant][b] - self.sums[tenant][a]
    }

    /// Average rate served to `tenant` over `[from, to)`, cost units per second.
    pub fn rate(&self, tenant: usize, from: f64, to: f64) -> f64 {
        self.served(tenant, from, to) as f64 / (to - from)
    }

    /// The most served to `tenant` in any window `[s, s + window)`. Windows starting at a
    /// dispatch are the worst ones, so only those are tried.
    pub fn max_in_window(&self, tenant: usize, window: f64) -> (u64, f64) {
        self.times[tenant]
            .iter()
            .map(|&s| (self.served(tenant, s, s + window), s))
            .fold((0, 0.0), |best, x| if x.0 > best.0 { x } else { best })
    }

    /// The least served to `tenant` in any window `[s, s + window)` lying inside one of its
    /// backlogged intervals and inside `[from, to)`. Windows starting just after a dispatch
    /// (and at the start of an interval) are the worst ones.
    pub fn min_in_backlogged_window(
        &self,
        tenant: usize,
        window: f64,
        from: f64,
        to: f64,
    ) -> Option<(u64, f64)> {
        let mut worst: Option<(u64, f64)> = None;
        for &(begin, end) in &self.backlogged[tenant] {
            let (begin, end) = (begin.max(from), end.min(to));
            let starts = std::iter::once(begin).chain(
                self.times[tenant]
                    .iter()
                    .map(|&d| d + 1e-9)
                    .filter(|&s| s > begin),
            );
            for s in starts {
                if s + window > end {
                    break;
                }
                let got = self.served(tenant, s, s + window);
                if worst.is_none_or(|(w, _)| got < w) {
                    worst = Some((got, s));
                }
            }
        }
        worst
    }

    /// When `tenant` was first served at or after `t`.
    pub fn first_dispatch_after(&self, tenant: usize, t: f64) -> Option<f64> {
        let times = &self.times[tenant];
        times.get(times.partition_point(|&x| x < t)).copied()
    }

    pub fn dispatch_times(&self, tenant: usize) -> &[f64] {
        &self.times[tenant]
    }
}

/// What each of `tenants`, all saturating a backend of `capacity`, should receive:
/// `min(R + λ·W, L)` with λ chosen so the total is the capacity (or every limit, if the limits
/// add up to less). Solved by bisection on λ.
pub fn allocation(capacity: f64, tenants: &[TenantQos]) -> Vec<f64> {
    let share = |lambda: f64| -> Vec<f64> {
        tenants
            .iter()
            .map(|q| {
                let want = q.reservation() + lambda * q.weight();
                q.limit().map_or(want, |l| want.min(l))
            })
            .collect()
    };
    let total = |lambda: f64| share(lambda).iter().sum::<f64>();
    let mut high = 1.0;
    while total(high) < capacity {
        high *= 2.0;
        if high > 1e30 {
            return share(high); // every tenant is at its limit
        }
    }
    let mut low = 0.0;
    for _ in 0..200 {
        let mid = f64::midpoint(low, high);
        if total(mid) < capacity {
            low = mid;
        } else {
            high = mid;
        }
    }
    share(high)
}
