//! Percentiles: of recorded latencies, and of plain samples (medians and quartiles of rounds).

use std::time::Duration;

/// Latencies of one series, kept exactly (benchmarks record at most a few hundred thousand).
#[derive(Debug, Default, Clone)]
pub struct Latencies(Vec<Duration>);

impl Latencies {
    pub fn record(&mut self, d: Duration) {
        self.0.push(d);
    }

    pub fn extend(&mut self, other: Latencies) {
        self.0.extend(other.0);
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The `q`-quantile (0..=1) by the nearest-rank method, in seconds.
    pub fn quantile(&self, q: f64) -> f64 {
        if self.0.is_empty() {
            return f64::NAN;
        }
        let mut v = self.0.clone();
        v.sort_unstable();
        let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
        v[rank - 1].as_secs_f64()
    }
}

/// The median of `v` (the mean of the middle two when their number is even); NaN when empty.
pub fn median(v: &[f64]) -> f64 {
    quantile(v, 0.5)
}

/// The `p`-quantile of `v` by linear interpolation between closest ranks.
pub fn quantile(v: &[f64], p: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n => {
            let at = p.clamp(0.0, 1.0) * (n - 1) as f64;
            let (lo, hi) = (at.floor() as usize, at.ceil() as usize);
            v[lo] + (v[hi] - v[lo]) * (at - lo as f64)
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Equal up to rounding (the benchmarks' tests compare computed ratios and quantiles).
    pub(crate) fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn nearest_rank_quantiles() {
        let mut l = Latencies::default();
        for ms in 1..=1000 {
            l.record(Duration::from_millis(ms));
        }
        assert!((l.quantile(0.5) - 0.5).abs() < 1e-9);
        assert!((l.quantile(0.99) - 0.99).abs() < 1e-9);
        assert!((l.quantile(0.999) - 0.999).abs() < 1e-9);
        assert!((l.quantile(1.0) - 1.0).abs() < 1e-9);
        assert!(Latencies::default().quantile(0.5).is_nan());
    }

    #[test]
    fn quantiles_interpolate_and_median_is_the_middle() {
        let v = [4.0, 1.0, 3.0, 2.0];
        assert!(close(quantile(&v, 0.0), 1.0));
        assert!(close(quantile(&v, 1.0), 4.0));
        assert!(close(quantile(&v, 0.5), 2.5));
        assert!(close(quantile(&v, 0.25), 1.75));
        assert!(close(median(&[3.0, 1.0, 2.0]), 2.0));
        assert!(close(median(&v), 2.5));
        assert!(median(&[]).is_nan());
    }
}
