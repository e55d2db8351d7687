//! The distribution of aggregate demand on the shared tier at a uniformly random instant.
//!
//! Demand is the tenants' steady reads (a constant) plus, for every random-phase tenant, its
//! peak with probability equal to its duty cycle, independently of the others, plus the
//! fixed-phase tenants' joint demand from [`crate::alignment`] (independent of the random
//! ones, since a random phase is uniform whatever the instant).
//!
//! # The grid
//!
//! Peaks are whole bytes per second. The distribution lives on a grid of step `g` bytes/s and
//! is built by convolving in one tenant at a time (`pmf'[k] = (1 - q) pmf[k] + q pmf[k - s]`),
//! so the cost is `O(tenants × cells)`, with at most about [`MAX_CELLS`] cells.
//!
//! - **Exact**: when `g` = the greatest common divisor of all peaks keeps the grid within
//!   [`MAX_CELLS`] (e.g. every peak a whole number of GiB/s, or identical tenants), every
//!   possible demand is a grid point and the distribution is exact up to floating-point
//!   rounding.
//! - **Bracketed** otherwise: `g` = ⌈sum of peaks / [`MAX_CELLS`]⌉ and the distribution is
//!   built twice, once with every peak rounded down to the grid and once rounded up. For every
//!   outcome the rounded-down demand ≤ the true demand ≤ the rounded-up demand, so every
//!   percentile and every exceedance probability of the truth lies between the two; the
//!   planner reports the rounded-up (conservative) figure and the bracket. At any outcome the
//!   two roundings differ by at most one step per tenant bursting (plus one for the
//!   fixed-phase timetable), so the bracket is about `g ×` (tenants bursting at that
//!   percentile) wide and never wider than `g × (tenants + 1)`. For 1,000 heterogeneous
//!   tenants that is about 0.15% of the p99.9 (`MAX_CELLS` = 2^18; the whole plan takes
//!   about 0.1 s in release).
//!
//! Probabilities below 1e-280 are flushed to zero (to keep subnormal arithmetic out of the
//! inner loop); the mass dropped is far below anything reported.

/// The grid is coarsened beyond this many cells.
pub const MAX_CELLS: u64 = 1 << 18;

/// Probabilities below this are set to zero.
const NEGLIGIBLE: f64 = 1e-280;

/// Two probabilities this close count as equal when reading percentiles off the tail.
const TIE: f64 = 1e-12;

/// One random-phase tenant shape: `count` independent copies, each on at `peak` bytes/s with
/// probability `duty`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Burster {
    pub(crate) peak: u64,
    pub(crate) duty: f64,
    pub(crate) count: u32,
}

/// A probability distribution on the grid `reads + k × step`.
#[derive(Debug, Clone)]
struct Grid {
    pmf: Vec<f64>,
    /// `tail[k]` = P(cell > k).
    tail: Vec<f64>,
}

impl Grid {
    fn build(step: u64, random: &[Burster], fixed: &[(u64, f64)], round_up: bool) -> Self {
        let cells = |v: u64| -> usize {
            let c = if round_up { v.div_ceil(step) } else { v / step };
            usize::try_from(c).unwrap_or(usize::MAX)
        };
        let fixed_top = fixed.iter().map(|&(v, _)| cells(v)).max().unwrap_or(0);
        let mut pmf = vec![0.0; fixed_top + 1];
        for &(v, p) in fixed {
            pmf[cells(v)] += p;
        }
        let mut scratch = Vec::with_capacity(pmf.len());
        for b in random {
            let shift = cells(b.peak);
            for _ in 0..b.count {
                add_bernoulli(&mut pmf, &mut scratch, shift, b.duty);
            }
        }
        while pmf.len() > 1 && pmf.last() == Some(&0.0) {
            pmf.pop();
        }
        let mut tail = vec![0.0; pmf.len()];
        for k in (0..pmf.len().saturating_sub(1)).rev() {
            tail[k] = tail[k + 1] + pmf[k + 1];
        }
        Self { pmf, tail }
    }

    /// The smallest cell `k` with P(cell ≤ k) ≥ `p`.
    fn quantile(&self, p: f64) -> usize {
        let allowed = (1.0 - p) + TIE;
        self.tail
            .partition_point(|&t| t > allowed)
            .min(self.tail.len() - 1)
    }

    /// P(cell > `k`), for a fractional cell position.
    fn exceedance(&self, position: f64) -> f64 {
        if position < 0.0 {
            return 1.0;
        }
        let k = (position + 1e-9).floor();
        if k >= self.tail.len() as f64 {
            0.0
        } else {
            self.tail[k as usize]
        }
    }
}

/// `pmf` ← `pmf` convolved with "0 with probability 1 - q, `shift` cells with probability q".
fn add_bernoulli(pmf: &mut Vec<f64>, scratch: &mut Vec<f64>, shift: usize, q: f64) {
    let flush = |x: f64| if x < NEGLIGIBLE { 0.0 } else { x };
    let keep = 1.0 - q;
    let len = pmf.len();
    scratch.clear();
    scratch.resize(len + shift, 0.0);
    let both = shift.min(len);
    // Cells below the shift: only the "off" outcome reaches them.
    for (out, &p) in scratch[..both].iter_mut().zip(&pmf[..both]) {
        *out = flush(keep * p);
    }
    // Cells both outcomes reach.
    if shift < len {
        for (out, (&p, &q_from)) in scratch[shift..len]
            .iter_mut()
            .zip(pmf[shift..].iter().zip(&pmf[..len - shift]))
        {
            *out = flush(keep * p + q * q_from);
        }
    }
    // Cells above the old top: only the "on" outcome reaches them.
    let from = len.max(shift);
    for (out, &p) in scratch[from..].iter_mut().zip(&pmf[from - shift..]) {
        *out = flush(q * p);
    }
    while scratch.len() > 1 && scratch.last() == Some(&0.0) {
        scratch.pop();
    }
    std::mem::swap(pmf, scratch);
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// The distribution of aggregate demand, bytes per second.
#[derive(Debug, Clone)]
pub struct Demand {
    reads: f64,
    step: u64,
    instances: u64,
    upper: Grid,
    /// `None` when the grid is exact (then it equals `upper`).
    lower: Option<Grid>,
}

impl Demand {
    /// `reads`: the constant part; `random`: independent bursters; `fixed`: the fixed-phase
    /// tenants' joint demand levels and their probabilities (summing to one).
    pub(crate) fn new(reads: f64, random: &[Burster], fixed: &[(u64, f64)]) -> Self {
        let instances: u64 = random.iter().map(|b| u64::from(b.count)).sum();
        let total: u128 = random
            .iter()
            .map(|b| u128::from(b.count) * u128::from(b.peak))
            .sum::<u128>()
            + u128::from(fixed.iter().map(|&(v, _)| v).max().unwrap_or(0));
        let common = random
            .iter()
            .map(|b| b.peak)
            .chain(fixed.iter().map(|&(v, _)| v))
            .fold(0, gcd)
            .max(1);
        let exact = total / u128::from(common) < u128::from(MAX_CELLS);
        let step = if exact {
            common
        } else {
            u64::try_from(total.div_ceil(u128::from(MAX_CELLS))).unwrap_or(u64::MAX)
        };
        let upper = Grid::build(step, random, fixed, true);
        let lower = (!exact).then(|| Grid::build(step, random, fixed, false));
        Self {
            reads,
            step,
            instances,
            upper,
            lower,
        }
    }

    /// Grid step, bytes/s.
    pub fn step(&self) -> u64 {
        self.step
    }

    /// Whether every possible demand lies on the grid.
    pub fn is_exact(&self) -> bool {
        self.lower.is_none()
    }

    /// The largest possible gap between the reported figure and the truth, bytes/s.
    pub fn error_bound(&self) -> f64 {
        if self.is_exact() {
            0.0
        } else {
            self.step as f64 * (self.instances + 1) as f64
        }
    }

    fn lower(&self) -> &Grid {
        self.lower.as_ref().unwrap_or(&self.upper)
    }

    fn at(&self, cell: usize) -> f64 {
        self.reads + cell as f64 * self.step as f64
    }

    /// The `p`-quantile (smallest demand d with P(D ≤ d) ≥ p), rounded up when bracketed.
    pub fn quantile(&self, p: f64) -> f64 {
        self.at(self.upper.quantile(p))
    }

    /// (lower, upper) bounds on the `p`-quantile; equal when exact.
    pub fn quantile_bounds(&self, p: f64) -> (f64, f64) {
        (self.at(self.lower().quantile(p)), self.quantile(p))
    }

    /// P(D > `demand`), an upper bound when bracketed.
    pub fn exceedance(&self, demand: f64) -> f64 {
        self.upper.exceedance(self.position(demand))
    }

    /// (lower, upper) bounds on P(D > `demand`); equal when exact.
    pub fn exceedance_bounds(&self, demand: f64) -> (f64, f64) {
        let position = self.position(demand);
        (
            self.lower().exceedance(position),
            self.upper.exceedance(position),
        )
    }

    fn position(&self, demand: f64) -> f64 {
        (demand - self.reads) / self.step as f64
    }

    /// The demand values with positive probability and P(D > value) at each, ascending
    /// (rounded up when bracketed): the exceedance curve's corners.
    pub fn exceedance_curve(&self) -> impl Iterator<Item = (f64, f64)> + '_ {
        self.upper
            .pmf
            .iter()
            .zip(&self.upper.tail)
            .enumerate()
            .filter(|(_, (p, _))| **p > 0.0)
            .map(|(k, (_, tail))| (self.at(k), *tail))
    }

    /// Total probability, one up to rounding; exposed for tests.
    pub fn total_probability(&self) -> f64 {
        self.upper.pmf.iter().sum()
    }
}
