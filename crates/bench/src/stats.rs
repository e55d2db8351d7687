//! Percentiles of recorded latencies.

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
