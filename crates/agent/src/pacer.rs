//! Drain pacing: how fast a tenant's backlog may leave the node, as pure logic with time as
//! an input (no clock is read here; tests drive it in paused tokio time or with explicit
//! instants).
//!
//! The target rate of a tenant is `min(limit, max(drain_rate, backlog / time_left))`:
//! - no faster than its configured `drain_rate` while the deadline allows;
//! - faster when the backlog would not be empty by the deadline, which is the oldest pending
//!   write's arrival plus the checkpoint `interval` (configured, or learned from arrivals by
//!   [`IntervalEstimator`]); once the deadline has passed, as fast as allowed;
//! - never above its shared-tier `limit`.
//!
//! A tenant with neither a drain rate nor a limit drains as fast as upstream takes it.
//! [`TokenBucket`] turns the rate into waits: a transfer may send once the bucket is out of
//! debt, and its bytes become the debt the next transfer waits off at whatever the rate is
//! by then. So a rate change applies to every transfer not yet sent, transfers leave in the
//! order they asked, and over any interval `t` at most `burst + rate·t + one transfer` goes.

use std::time::Duration;

use tokio::time::Instant;

/// The pacing parameters of one tenant, bytes per second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Policy {
    pub drain_rate: Option<f64>,
    pub limit: Option<f64>,
    pub interval: Option<Duration>,
}

impl Policy {
    /// The rate to drain at now, given the backlog and how long its oldest byte has waited.
    /// `f64::INFINITY` means unpaced.
    pub fn target_rate(
        &self,
        backlog: u64,
        oldest_age: Duration,
        learned_interval: Option<Duration>,
    ) -> f64 {
        let base = self.drain_rate.unwrap_or(f64::INFINITY);
        let needed = match self.interval.or(learned_interval) {
            None => 0.0,
            Some(interval) => {
                let left = interval.saturating_sub(oldest_age);
                if left.is_zero() {
                    f64::INFINITY
                } else {
                    backlog as f64 / left.as_secs_f64()
                }
            }
        };
        base.max(needed).min(self.limit.unwrap_or(f64::INFINITY))
    }
}

/// A token bucket whose rate may change at any time. Tokens may go negative (a debt the
/// caller waits off), so a transfer larger than the burst is still paced exactly.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket of `burst` bytes refilling at `rate` bytes per second.
    pub fn new(rate: f64, burst: f64, now: Instant) -> Self {
        Self {
            rate,
            burst,
            tokens: burst,
            last: now,
        }
    }

    pub fn rate(&self) -> f64 {
        self.rate
    }

    fn refill(&mut self, now: Instant) {
        let dt = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = self.last.max(now);
        if self.rate.is_finite() {
            self.tokens = (self.tokens + self.rate * dt).min(self.burst);
        } else {
            self.tokens = self.burst;
        }
    }

    /// Changes the rate from `now` on (tokens earned so far at the old rate are kept).
    pub fn set_rate(&mut self, rate: f64, now: Instant) {
        self.refill(now);
        self.rate = rate;
        if !rate.is_finite() {
            self.tokens = self.tokens.max(0.0);
        }
    }

    /// Takes `bytes` if the bucket is out of debt (the caller sends them now); otherwise
    /// returns how long the debt takes to pay off at the current rate (the caller waits, at
    /// most that long, and asks again).
    pub fn try_take(&mut self, bytes: u64, now: Instant) -> Result<(), Duration> {
        self.refill(now);
        if !self.rate.is_finite() {
            return Ok(());
        }
        if self.tokens >= 0.0 {
            self.tokens -= bytes as f64;
            Ok(())
        } else if self.rate <= 0.0 {
            Err(Duration::MAX)
        } else {
            Err(Duration::from_secs_f64(-self.tokens / self.rate))
        }
    }
}

/// Learns a tenant's checkpoint interval from write arrivals: a burst starts with the first
/// write after a quiet gap; the interval is a moving average of the gaps between burst starts.
#[derive(Debug, Clone)]
pub struct IntervalEstimator {
    quiet: Duration,
    last_arrival: Option<Instant>,
    burst_start: Option<Instant>,
    estimate: Option<Duration>,
}

impl IntervalEstimator {
    pub fn new(quiet: Duration) -> Self {
        Self {
            quiet,
            last_arrival: None,
            burst_start: None,
            estimate: None,
        }
    }

    pub fn observe(&mut self, at: Instant) {
        let new_burst = self
            .last_arrival
            .is_none_or(|last| at.saturating_duration_since(last) >= self.quiet);
        if new_burst {
            if let Some(start) = self.burst_start {
                let sample = at.saturating_duration_since(start);
                self.estimate = Some(match self.estimate {
                    None => sample,
                    Some(e) => (e + sample) / 2,
                });
            }
            self.burst_start = Some(at);
        }
        self.last_arrival = Some(self.last_arrival.map_or(at, |l| l.max(at)));
    }

    pub fn estimate(&self) -> Option<Duration> {
        self.estimate
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: f64 = 1024.0 * 1024.0;

    #[test]
    fn the_drain_rate_holds_while_the_deadline_allows() {
        let p = Policy {
            drain_rate: Some(10.0 * MIB),
            limit: Some(100.0 * MIB),
            interval: Some(Duration::from_secs(100)),
        };
        // 500 MiB in the 100 s left needs 5 MiB/s: the drain rate is enough.
        let r = p.target_rate(500 * 1024 * 1024, Duration::ZERO, None);
        assert!((r - 10.0 * MIB).abs() < 1.0, "{r}");
    }

    #[test]
    fn a_short_deadline_speeds_up_but_never_beyond_the_limit() {
        let p = Policy {
            drain_rate: Some(10.0 * MIB),
            limit: Some(40.0 * MIB),
            interval: Some(Duration::from_secs(100)),
        };
        // 3000 MiB with 90 s left needs 33.3 MiB/s.
        let r = p.target_rate(3000 * 1024 * 1024, Duration::from_secs(10), None);
        assert!((r - 3000.0 * MIB / 90.0).abs() < 1.0, "{r}");
        // 10 GiB with 50 s left would need 204 MiB/s: capped at the limit.
        let r = p.target_rate(10 << 30, Duration::from_secs(50), None);
        assert!((r - 40.0 * MIB).abs() < 1.0, "{r}");
        // Past the deadline: as fast as allowed.
        let r = p.target_rate(1, Duration::from_secs(500), None);
        assert!((r - 40.0 * MIB).abs() < 1.0, "{r}");
    }

    #[test]
    fn a_learned_interval_stands_in_for_a_configured_one() {
        let p = Policy {
            drain_rate: Some(MIB),
            limit: None,
            interval: None,
        };
        assert!((p.target_rate(100 << 20, Duration::ZERO, None) - MIB).abs() < 1.0);
        let r = p.target_rate(100 << 20, Duration::ZERO, Some(Duration::from_secs(10)));
        assert!((r - 10.0 * MIB).abs() < 1.0, "{r}");
    }

    /// Waits (in paused time) until the bucket lets `bytes` go, as the drain does.
    async fn send(bucket: &mut TokenBucket, bytes: u64) {
        while let Err(wait) = bucket.try_take(bytes, Instant::now()) {
            tokio::time::sleep(wait).await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_bucket_paces_transfers_at_its_rate_in_paused_time() {
        let start = Instant::now();
        let mut bucket = TokenBucket::new(4.0 * MIB, MIB, start);
        let mut sent_at = Vec::new();
        for _ in 0..41 {
            send(&mut bucket, 1024 * 1024).await;
            sent_at.push(Instant::now() - start);
        }
        // The 1 MiB burst and the first transfer go at once; then one per 0.25 s.
        assert_eq!(sent_at[1], Duration::ZERO);
        let took = sent_at[40].as_secs_f64();
        assert!((took - 9.75).abs() < 0.01, "took {took}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_rate_change_applies_to_the_next_transfer() {
        let start = Instant::now();
        let mut bucket = TokenBucket::new(MIB, 0.0, start);
        for _ in 0..5 {
            send(&mut bucket, 1024 * 1024).await;
        }
        assert!(((Instant::now() - start).as_secs_f64() - 4.0).abs() < 0.01);
        // The debt of the last transfer is paid at the new rate.
        bucket.set_rate(5.0 * MIB, Instant::now());
        let mid = Instant::now();
        for _ in 0..10 {
            send(&mut bucket, 1024 * 1024).await;
        }
        assert!(((Instant::now() - mid).as_secs_f64() - 2.0).abs() < 0.01);
        bucket.set_rate(f64::INFINITY, Instant::now());
        assert_eq!(bucket.try_take(1 << 40, Instant::now()), Ok(()));
    }

    #[tokio::test(start_paused = true)]
    async fn a_bucket_shared_by_concurrent_transfers_holds_the_rate() {
        let start = Instant::now();
        let bucket = std::sync::Arc::new(std::sync::Mutex::new(TokenBucket::new(
            2.0 * MIB,
            0.0,
            start,
        )));
        let mut tasks = Vec::new();
        for _ in 0..4 {
            let bucket = std::sync::Arc::clone(&bucket);
            tasks.push(tokio::spawn(async move {
                for _ in 0..5 {
                    loop {
                        let r = bucket
                            .lock()
                            .expect("lock")
                            .try_take(1024 * 1024, Instant::now());
                        match r {
                            Ok(()) => break,
                            Err(wait) => tokio::time::sleep(wait).await,
                        }
                    }
                }
            }));
        }
        for t in tasks {
            t.await.expect("task");
        }
        // 20 MiB at 2 MiB/s, the first without waiting: the last goes at 9.5 s.
        let took = (Instant::now() - start).as_secs_f64();
        assert!((took - 9.5).abs() < 0.01, "took {took}");
    }

    #[test]
    fn intervals_are_learned_from_burst_starts() {
        let t0 = Instant::now();
        let mut e = IntervalEstimator::new(Duration::from_secs(5));
        let s = Duration::from_secs;
        for burst in 0..3u64 {
            for i in 0..10u64 {
                e.observe(t0 + s(burst * 60) + Duration::from_millis(i * 100));
            }
        }
        assert_eq!(e.estimate(), Some(s(60)));
    }
}
