//! Per-tenant metrics for sluice, rendered in the Prometheus text exposition format.
//!
//! Conventions (Prometheus naming): base units (`_bytes`, `_seconds`), counters end in
//! `_total`, every series carries a `tenant` label and otherwise only labels from small fixed
//! sets (an S3 operation name, a direction). Tenants are the configured ones, so label
//! cardinality is bounded by configuration, never by requests.
//!
//! Recording takes no global lock: each tenant has its own atomics, and the tenant map is
//! only written when a tenant is first seen. Histograms have fixed bounds chosen for storage
//! latencies (100 µs to 60 s).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

/// Upper bounds (seconds) of the latency histograms.
pub const LATENCY_BOUNDS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0, 60.0,
];

/// A histogram with fixed bucket bounds.
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    buckets: Vec<AtomicU64>,
    count: AtomicU64,
    sum_nanos: AtomicU64,
}

impl Histogram {
    pub fn new(bounds: &'static [f64]) -> Self {
        Self {
            bounds,
            buckets: bounds.iter().map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
            sum_nanos: AtomicU64::new(0),
        }
    }

    pub fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        if let Some(i) = self.bounds.iter().position(|&b| secs <= b) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_nanos.fetch_add(
            u64::try_from(d.as_nanos()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let mut cumulative = 0;
        for (bound, bucket) in self.bounds.iter().zip(&self.buckets) {
            cumulative += bucket.load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{bound}\"}} {cumulative}");
        }
        let count = self.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {count}");
        let sum = self.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9;
        let _ = writeln!(out, "{name}_sum{{{labels}}} {sum}");
        let _ = writeln!(out, "{name}_count{{{labels}}} {count}");
    }
}

/// What is recorded for one tenant.
#[derive(Debug)]
pub struct TenantMetrics {
    /// Body bytes received from clients (PUT, UploadPart).
    pub bytes_in: AtomicU64,
    /// Body bytes sent to clients (GET).
    pub bytes_out: AtomicU64,
    /// Requests answered `SlowDown` because the tenant's queue was full.
    pub throttled: AtomicU64,
    /// Requests refused with `QuotaExceeded`.
    pub quota_refused: AtomicU64,
    /// Stored bytes that failed their checksum when read (one per bad chunk found).
    pub integrity_errors: AtomicU64,
    /// Blob segments read without checksums to verify (written before checksums existed).
    pub unverified_reads: AtomicU64,
    /// Time from arrival to the end of the response headers, all operations.
    pub request_seconds: Histogram,
    /// Time spent waiting in the throughput scheduler (per admission).
    pub queue_wait_seconds: Histogram,
    ops: Mutex<BTreeMap<(&'static str, &'static str), u64>>,
}

impl Default for TenantMetrics {
    fn default() -> Self {
        Self {
            bytes_in: AtomicU64::new(0),
            bytes_out: AtomicU64::new(0),
            throttled: AtomicU64::new(0),
            quota_refused: AtomicU64::new(0),
            integrity_errors: AtomicU64::new(0),
            unverified_reads: AtomicU64::new(0),
            request_seconds: Histogram::new(LATENCY_BOUNDS),
            queue_wait_seconds: Histogram::new(LATENCY_BOUNDS),
            ops: Mutex::default(),
        }
    }
}

impl TenantMetrics {
    /// Counts one finished operation (`op` from the fixed set of S3 operation names,
    /// `outcome` "ok" or "error").
    pub fn op(&self, op: &'static str, outcome: &'static str, elapsed: Duration) {
        *self
            .ops
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry((op, outcome))
            .or_default() += 1;
        self.request_seconds.observe(elapsed);
    }

    pub fn add_bytes_in(&self, n: u64) {
        self.bytes_in.fetch_add(n, Ordering::Relaxed);
    }

    pub fn add_bytes_out(&self, n: u64) {
        self.bytes_out.fetch_add(n, Ordering::Relaxed);
    }
}

/// Every tenant's metrics.
#[derive(Debug, Default)]
pub struct Metrics {
    tenants: RwLock<BTreeMap<String, Arc<TenantMetrics>>>,
}

/// A gauge value per tenant, supplied by the owner of the state at render time.
pub struct Gauge<'a> {
    pub name: &'a str,
    pub help: &'a str,
    pub values: Vec<(String, f64)>,
}

impl Metrics {
    pub fn tenant(&self, tenant: &str) -> Arc<TenantMetrics> {
        if let Some(t) = self
            .tenants
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(tenant)
        {
            return Arc::clone(t);
        }
        Arc::clone(
            self.tenants
                .write()
                .unwrap_or_else(PoisonError::into_inner)
                .entry(tenant.to_owned())
                .or_default(),
        )
    }

    /// The text exposition of every recorded series, plus `gauges`.
    pub fn render(&self, prefix: &str, gauges: &[Gauge<'_>]) -> String {
        let tenants = self
            .tenants
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let mut out = String::new();
        let counter =
            |out: &mut String, name: &str, help: &str, get: &dyn Fn(&TenantMetrics) -> u64| {
                let _ = writeln!(out, "# HELP {prefix}_{name} {help}");
                let _ = writeln!(out, "# TYPE {prefix}_{name} counter");
                for (t, m) in &tenants {
                    let _ = writeln!(
                        out,
                        "{prefix}_{name}{{tenant=\"{}\"}} {}",
                        escape(t),
                        get(m)
                    );
                }
            };
        counter(
            &mut out,
            "received_bytes_total",
            "Body bytes received from clients.",
            &|m| m.bytes_in.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "sent_bytes_total",
            "Body bytes sent to clients.",
            &|m| m.bytes_out.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "throttled_requests_total",
            "Requests answered SlowDown because the tenant's queue was full.",
            &|m| m.throttled.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "quota_refused_requests_total",
            "Requests refused with QuotaExceeded.",
            &|m| m.quota_refused.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "integrity_errors_total",
            "Stored chunks whose bytes failed their checksum when read (the read failed).",
            &|m| m.integrity_errors.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "unverified_reads_total",
            "Blob segments read without stored checksums (written before checksums existed).",
            &|m| m.unverified_reads.load(Ordering::Relaxed),
        );
        let _ = writeln!(
            out,
            "# HELP {prefix}_requests_total S3 operations served, by operation and outcome."
        );
        let _ = writeln!(out, "# TYPE {prefix}_requests_total counter");
        for (t, m) in &tenants {
            let ops = m.ops.lock().unwrap_or_else(PoisonError::into_inner).clone();
            for ((op, outcome), n) in ops {
                let _ = writeln!(
                    out,
                    "{prefix}_requests_total{{tenant=\"{}\",op=\"{op}\",outcome=\"{outcome}\"}} {n}",
                    escape(t)
                );
            }
        }
        for (name, help, get) in [
            (
                "request_duration_seconds",
                "Time from a request's arrival to its response, by tenant.",
                (|m: &TenantMetrics| &m.request_seconds) as fn(&TenantMetrics) -> &Histogram,
            ),
            (
                "queue_wait_seconds",
                "Time a request or body grain waited in the throughput scheduler.",
                |m: &TenantMetrics| &m.queue_wait_seconds,
            ),
        ] {
            let _ = writeln!(out, "# HELP {prefix}_{name} {help}");
            let _ = writeln!(out, "# TYPE {prefix}_{name} histogram");
            for (t, m) in &tenants {
                get(m).render(
                    &mut out,
                    &format!("{prefix}_{name}"),
                    &format!("tenant=\"{}\"", escape(t)),
                );
            }
        }
        for g in gauges {
            let _ = writeln!(out, "# HELP {prefix}_{} {}", g.name, g.help);
            let _ = writeln!(out, "# TYPE {prefix}_{} gauge", g.name);
            for (t, v) in &g.values {
                let _ = writeln!(out, "{prefix}_{}{{tenant=\"{}\"}} {v}", g.name, escape(t));
            }
        }
        out
    }
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_histograms_and_gauges_per_tenant() {
        let m = Metrics::default();
        let a = m.tenant("alice");
        a.add_bytes_in(10);
        a.op("PutObject", "ok", Duration::from_millis(3));
        a.op("PutObject", "ok", Duration::from_secs(100));
        m.tenant("bob").throttled.fetch_add(2, Ordering::Relaxed);
        let text = m.render(
            "sluice",
            &[Gauge {
                name: "quota_limit_bytes",
                help: "Quota.",
                values: vec![("alice".into(), 5.0)],
            }],
        );
        assert!(
            text.contains("sluice_received_bytes_total{tenant=\"alice\"} 10"),
            "{text}"
        );
        assert!(text.contains("sluice_throttled_requests_total{tenant=\"bob\"} 2"));
        assert!(
            text.contains(
                "sluice_requests_total{tenant=\"alice\",op=\"PutObject\",outcome=\"ok\"} 2"
            )
        );
        assert!(
            text.contains(
                "sluice_request_duration_seconds_bucket{tenant=\"alice\",le=\"0.005\"} 1"
            )
        );
        // The 100 s observation is above every bound: only +Inf counts it.
        assert!(
            text.contains("sluice_request_duration_seconds_bucket{tenant=\"alice\",le=\"60\"} 1")
        );
        assert!(
            text.contains("sluice_request_duration_seconds_bucket{tenant=\"alice\",le=\"+Inf\"} 2")
        );
        assert!(text.contains("sluice_quota_limit_bytes{tenant=\"alice\"} 5"));
        assert!(text.contains("# TYPE sluice_queue_wait_seconds histogram"));
    }
}
