//! `sluice bench noisy-neighbor`: a victim's training reads against an aggressor's checkpoint
//! bursts, on a shared tier of finite capacity, scenario by scenario, in one run.
//!
//! The shared tier is a sluice gateway whose backend is behind an emulated device
//! (`[backend.emulate]`: a FIFO server of bounded bandwidth and operations, so queueing under
//! load produces latency as on a real device). Scenarios differ only in what arbitrates it:
//!
//! - `solo`: the victim alone (the baseline every ratio is against);
//! - `fifo`: no scheduler, the device's one queue;
//! - `rate_limit`: static per-tenant caps only (like Ceph RGW or Lustre TBF);
//! - `dmclock`: sluice's scheduler, victim with a reservation;
//! - `dmclock_agent`: dmClock, and the aggressor writes through a node agent that absorbs the
//!   burst and drains it paced (when the agent is available).
//!
//! The victim is open-loop: its GETs are issued on a fixed schedule, not after the previous
//! reply, and each latency is measured from the scheduled time, so coordinated omission cannot
//! hide queueing. The aggressor runs `streams` concurrent PUTs of `object_size`, repeated.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::BenchError;
use crate::client::S3Client;
use crate::gateway::payload;
use crate::procs::{self, ACCESS_KEY, SECRET_KEY};
use crate::stats::Latencies;

const MIB: f64 = 1024.0 * 1024.0;
const VICTIM_KEY: &str = "AKIDVICTIM00000TEST";
const VICTIM_SECRET: &str = "victim-secret-0123456789";

#[derive(Debug, Clone, Serialize)]
pub struct Config {
    pub seed: u64,
    pub seconds: f64,
    pub tier_bandwidth_bps: f64,
    pub tier_ops: f64,
    pub victim_shard_bytes: u64,
    pub victim_shards: usize,
    pub victim_rate_per_s: f64,
    pub victim_reservation_bps: f64,
    /// The victim's dmClock weight against the aggressor's 1: a latency-sensitive tenant
    /// with little average demand gets a large weight, which costs the aggressor nothing
    /// while the victim is idle.
    pub victim_weight: f64,
    pub aggressor_streams: usize,
    pub aggressor_object_bytes: u64,
    pub aggressor_limit_bps: f64,
    pub grain_bytes: u64,
    #[serde(skip)]
    pub workdir: PathBuf,
    #[serde(skip)]
    pub sluice: PathBuf,
}

impl Config {
    pub fn default_run(seed: u64, workdir: PathBuf, sluice: PathBuf) -> Self {
        Self {
            seed,
            seconds: 24.0,
            tier_bandwidth_bps: 100.0 * MIB,
            tier_ops: 2000.0,
            victim_shard_bytes: 4 << 20,
            victim_shards: 8,
            victim_rate_per_s: 5.0,
            victim_reservation_bps: 40.0 * MIB,
            victim_weight: 20.0,
            aggressor_streams: 12,
            aggressor_object_bytes: 256 << 20,
            aggressor_limit_bps: 60.0 * MIB,
            grain_bytes: 1 << 20,
            workdir,
            sluice,
        }
    }

    #[must_use]
    pub fn quick(mut self) -> Self {
        self.seconds = 7.0;
        self.aggressor_streams = 8;
        self.aggressor_object_bytes = 64 << 20;
        self
    }

    fn victim_target_bps(&self) -> f64 {
        self.victim_rate_per_s * self.victim_shard_bytes as f64
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Scenario {
    pub name: String,
    pub victim_p50_s: f64,
    pub victim_p99_s: f64,
    pub victim_p999_s: f64,
    pub victim_p99_vs_solo: f64,
    pub victim_requests: usize,
    pub victim_errors: usize,
    pub victim_throughput_bps: f64,
    pub victim_target_bps: f64,
    /// Time until every PUT of the aggressor's first checkpoint was acknowledged.
    pub aggressor_stall_s: Option<f64>,
    pub aggressor_bytes: u64,
    /// Bytes the tier moved over the run, as a fraction of what it could have.
    pub tier_utilization: f64,
    /// When the agent finished draining the first checkpoint (dmclock_agent only).
    pub drain_completion_s: Option<f64>,
    #[serde(skip)]
    pub latencies: Latencies,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub seed: u64,
    pub config: Config,
    pub scenarios: Vec<Scenario>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Solo,
    Fifo,
    RateLimit,
    DmClock,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Self::Solo => "solo",
            Self::Fifo => "fifo",
            Self::RateLimit => "rate_limit",
            Self::DmClock => "dmclock",
        }
    }
}

fn gateway_toml(cfg: &Config, kind: Kind) -> (String, String) {
    let mib = |b: f64| format!("\"{}MiB/s\"", (b / MIB).round());
    let capacity = match kind {
        Kind::Fifo => String::new(),
        Kind::RateLimit => format!(
            "[gateway.capacity]\nbandwidth = {}\nops = {}\npolicy = \"rate_limit\"\nqueue_depth = 1024\ngrain = {}\n",
            mib(cfg.tier_bandwidth_bps),
            cfg.tier_ops,
            cfg.grain_bytes
        ),
        Kind::Solo | Kind::DmClock => format!(
            "[gateway.capacity]\nbandwidth = {}\nops = {}\npolicy = \"dmclock\"\nqueue_depth = 1024\ngrain = {}\n",
            mib(cfg.tier_bandwidth_bps),
            cfg.tier_ops,
            cfg.grain_bytes
        ),
    };
    let extra = format!(
        "{capacity}[backend.emulate]\nbandwidth = {}\nops = {}\n",
        mib(cfg.tier_bandwidth_bps),
        cfg.tier_ops
    );
    // The benchmark tenant `bench` is the aggressor; `victim` reads.
    let (victim_qos, aggressor_qos) = match kind {
        Kind::RateLimit => (
            format!("limit = {}\n", mib(cfg.victim_reservation_bps)),
            format!("limit = {}\n", mib(cfg.aggressor_limit_bps)),
        ),
        _ => (
            format!(
                "reservation = {}\nweight = {}\n",
                mib(cfg.victim_reservation_bps),
                cfg.victim_weight
            ),
            "weight = 1\n".to_owned(),
        ),
    };
    let tenants = format!(
        "{aggressor_qos}[[tenant]]\nid = \"victim\"\naccess_key = \"{VICTIM_KEY}\"\nsecret_key = \"{VICTIM_SECRET}\"\n{victim_qos}"
    );
    (extra, tenants)
}

/// Sums the gateway's received and sent body bytes from its `/metrics`.
async fn tier_bytes(metrics_port: u16) -> u64 {
    let Ok(mut stream) = tokio::net::TcpStream::connect(("127.0.0.1", metrics_port)).await else {
        return 0;
    };
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    if stream
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
        .await
        .is_err()
    {
        return 0;
    }
    let mut text = String::new();
    if stream.read_to_string(&mut text).await.is_err() {
        return 0;
    }
    text.lines()
        .filter(|l| {
            l.starts_with("sluice_received_bytes_total") || l.starts_with("sluice_sent_bytes_total")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// Runs one scenario.
pub async fn scenario(
    cfg: &Config,
    kind: Kind,
    solo_p99: Option<f64>,
    progress: &(dyn Fn(&str, f64) + Sync),
) -> Result<Scenario, BenchError> {
    let dir = cfg.workdir.join(kind.name());
    let _ = std::fs::remove_dir_all(&dir);
    let metrics_port = procs::free_port()?;
    let (mut extra, tenants) = gateway_toml(cfg, kind);
    extra = format!("metrics_listen = \"127.0.0.1:{metrics_port}\"\n{extra}");
    let gw = procs::start_gateway(&cfg.sluice, &dir, "data", &extra, &tenants)?;
    let endpoint = format!("http://127.0.0.1:{}", gw.port);
    let victim = S3Client::new(&endpoint, "data", VICTIM_KEY, VICTIM_SECRET)?;
    let aggressor = S3Client::new(&endpoint, "data", ACCESS_KEY, SECRET_KEY)?;
    let shard = payload(cfg.victim_shard_bytes as usize, cfg.seed);
    for i in 0..cfg.victim_shards {
        victim.put(&format!("shard-{i}"), shard.clone()).await?;
    }

    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(cfg.seconds);
    let bytes_before = tier_bytes(metrics_port).await;

    // Aggressor: bursts of `streams` concurrent PUTs, repeated until the deadline.
    let aggressor_bytes = Arc::new(AtomicU64::new(0));
    let first_stall = Arc::new(std::sync::Mutex::new(None::<f64>));
    let aggressor_task = (kind != Kind::Solo).then(|| {
        let body = payload(cfg.aggressor_object_bytes as usize, cfg.seed ^ 0xA66);
        let (streams, bytes, stall) = (
            cfg.aggressor_streams,
            Arc::clone(&aggressor_bytes),
            Arc::clone(&first_stall),
        );
        let aggressor = aggressor.clone();
        tokio::spawn(async move {
            let mut burst = 0;
            while Instant::now() < deadline {
                let burst_start = Instant::now();
                let puts = (0..streams).map(|s| {
                    let (a, b, bytes) = (aggressor.clone(), body.clone(), Arc::clone(&bytes));
                    let len = b.len() as u64;
                    async move {
                        let r = a.put(&format!("ckpt-{burst}/shard-{s}"), b).await;
                        if r.is_ok() {
                            bytes.fetch_add(len, Ordering::Relaxed);
                        }
                        r
                    }
                });
                let results = futures::future::join_all(puts).await;
                if let Some(Err(e)) = results.iter().find(|r| r.is_err()) {
                    eprintln!("\naggressor PUT failed: {e}");
                }
                if burst == 0 && results.iter().all(Result::is_ok) {
                    *stall
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner) =
                        Some(burst_start.elapsed().as_secs_f64());
                }
                burst += 1;
            }
        })
    });

    // Victim: open loop at a fixed rate.
    let interval = Duration::from_secs_f64(1.0 / cfg.victim_rate_per_s);
    let mut handles = Vec::new();
    let mut k: u32 = 0;
    loop {
        let scheduled = start + interval * k;
        if scheduled >= deadline {
            break;
        }
        tokio::time::sleep_until(scheduled.into()).await;
        progress(kind.name(), scheduled.duration_since(start).as_secs_f64());
        let v = victim.clone();
        let key = format!(
            "shard-{}",
            (k as usize + cfg.seed as usize) % cfg.victim_shards
        );
        handles.push(tokio::spawn(async move {
            let r = v.get(&key).await;
            (scheduled.elapsed(), r)
        }));
        k += 1;
    }
    let mut latencies = Latencies::default();
    let mut errors = 0;
    let mut victim_bytes = 0;
    for h in handles {
        match h.await {
            Ok((lat, Ok(n))) => {
                latencies.record(lat);
                victim_bytes += n;
            }
            _ => errors += 1,
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    let bytes_after = tier_bytes(metrics_port).await;
    if let Some(t) = aggressor_task {
        t.abort();
    }
    drop(gw);
    let _ = std::fs::remove_dir_all(&dir);
    let p99 = latencies.quantile(0.99);
    Ok(Scenario {
        name: kind.name().to_owned(),
        victim_p50_s: latencies.quantile(0.5),
        victim_p99_s: p99,
        victim_p999_s: latencies.quantile(0.999),
        victim_p99_vs_solo: solo_p99.map_or(1.0, |s| p99 / s),
        victim_requests: latencies.len(),
        victim_errors: errors,
        victim_throughput_bps: victim_bytes as f64 / elapsed,
        victim_target_bps: cfg.victim_target_bps(),
        aggressor_stall_s: *first_stall
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
        aggressor_bytes: aggressor_bytes.load(Ordering::Relaxed),
        tier_utilization: bytes_after.saturating_sub(bytes_before) as f64
            / (cfg.tier_bandwidth_bps * elapsed),
        drain_completion_s: None,
        latencies,
    })
}

/// Runs every scenario in order.
pub async fn run(cfg: Config, progress: &(dyn Fn(&str, f64) + Sync)) -> Result<Report, BenchError> {
    std::fs::create_dir_all(&cfg.workdir)?;
    let mut scenarios: Vec<Scenario> = Vec::new();
    for kind in [Kind::Solo, Kind::Fifo, Kind::RateLimit, Kind::DmClock] {
        let solo = scenarios.first().map(|s| s.victim_p99_s);
        scenarios.push(scenario(&cfg, kind, solo, progress).await?);
    }
    Ok(Report {
        seed: cfg.seed,
        config: cfg,
        scenarios,
    })
}

/// The report as a table.
pub fn table(r: &Report) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<14} {:>9} {:>9} {:>10} {:>8} {:>15} {:>10} {:>8} {:>8}",
        "scenario",
        "p50",
        "p99",
        "p99.9",
        "p99/solo",
        "victim MiB/s",
        "agg stall",
        "tier use",
        "errors"
    );
    for s in &r.scenarios {
        let _ = writeln!(
            out,
            "{:<14} {:>8.1}ms {:>8.1}ms {:>9.1}ms {:>7.2}x {:>7.1} of {:>4.0} {:>10} {:>7.0}% {:>8}",
            s.name,
            s.victim_p50_s * 1e3,
            s.victim_p99_s * 1e3,
            s.victim_p999_s * 1e3,
            s.victim_p99_vs_solo,
            s.victim_throughput_bps / MIB,
            s.victim_target_bps / MIB,
            s.aggressor_stall_s
                .map_or("-".to_owned(), |v| format!("{v:.1}s")),
            s.tier_utilization * 100.0,
            s.victim_errors
        );
    }
    out
}

/// Victim latency distributions as an SVG: exceedance P(latency > x) on log axes, one line
/// per scenario.
pub fn svg(r: &Report) -> String {
    use std::fmt::Write;
    const W: f64 = 900.0;
    const H: f64 = 520.0;
    const L: f64 = 80.0;
    const R: f64 = 170.0;
    const T: f64 = 50.0;
    const B: f64 = 60.0;
    let colors = [
        "#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02",
    ];
    let all: Vec<f64> = r
        .scenarios
        .iter()
        .flat_map(|s| [s.latencies.quantile(0.0001), s.latencies.quantile(1.0)])
        .filter(|v| v.is_finite() && *v > 0.0)
        .collect();
    let lo = all.iter().copied().fold(f64::INFINITY, f64::min).max(1e-4);
    let hi = all.iter().copied().fold(0.0, f64::max).max(lo * 10.0);
    let (x0, x1) = (lo.log10().floor(), hi.log10().ceil());
    let y_decades = 4.0;
    let x = |v: f64| L + (v.log10() - x0) / (x1 - x0) * (W - L - R);
    let y = |p: f64| T + (-p.max(10f64.powf(-y_decades)).log10()) / y_decades * (H - T - B);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" font-family=\"sans-serif\" font-size=\"13\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>"
    );
    let _ = writeln!(
        out,
        "<text x=\"{}\" y=\"28\" text-anchor=\"middle\" font-size=\"16\">Victim GET latency under a neighbour's checkpoint bursts (seed {})</text>",
        (W - R + L) / 2.0,
        r.seed
    );
    for d in (x0 as i32)..=(x1 as i32) {
        let v = 10f64.powi(d);
        let px = x(v);
        let label = if v < 1.0 {
            format!("{}ms", v * 1e3)
        } else {
            format!("{v}s")
        };
        let _ = writeln!(
            out,
            "<line x1=\"{px}\" y1=\"{T}\" x2=\"{px}\" y2=\"{}\" stroke=\"#ddd\"/><text x=\"{px}\" y=\"{}\" text-anchor=\"middle\">{label}</text>",
            H - B,
            H - B + 20.0
        );
    }
    for (i, label) in ["1", "0.1", "0.01 (p99)", "0.001 (p99.9)", "0.0001"]
        .iter()
        .enumerate()
    {
        let py = y(10f64.powi(-(i as i32)));
        let _ = writeln!(
            out,
            "<line x1=\"{L}\" y1=\"{py}\" x2=\"{}\" y2=\"{py}\" stroke=\"#ddd\"/><text x=\"{}\" y=\"{}\" text-anchor=\"end\">{label}</text>",
            W - R,
            L - 6.0,
            py + 4.0
        );
    }
    let _ = writeln!(
        out,
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">latency (log scale)</text>",
        (W - R + L) / 2.0,
        H - 15.0
    );
    let _ = writeln!(
        out,
        "<text transform=\"translate(18,{}) rotate(-90)\" text-anchor=\"middle\">P(latency &gt; x)</text>",
        (H - B + T) / 2.0
    );
    for (i, s) in r.scenarios.iter().enumerate() {
        let color = colors[i % colors.len()];
        let n = s.latencies.len();
        if n == 0 {
            continue;
        }
        let mut pts = String::new();
        for k in 0..n {
            let v = s.latencies.quantile((k + 1) as f64 / n as f64);
            let p = 1.0 - (k + 1) as f64 / n as f64;
            let _ = write!(
                pts,
                "{:.1},{:.1} ",
                x(v.max(lo)),
                y(p.max(1.0 / (n as f64 * 10.0)))
            );
        }
        let _ = writeln!(
            out,
            "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"2\" points=\"{pts}\"/>"
        );
        let ly = T + 20.0 + i as f64 * 22.0;
        let _ = writeln!(
            out,
            "<line x1=\"{}\" y1=\"{ly}\" x2=\"{}\" y2=\"{ly}\" stroke=\"{color}\" stroke-width=\"3\"/><text x=\"{}\" y=\"{}\">{} (p99 {:.0}ms)</text>",
            W - R + 10.0,
            W - R + 35.0,
            W - R + 40.0,
            ly + 4.0,
            s.name,
            s.victim_p99_s * 1e3
        );
    }
    out.push_str("</svg>\n");
    out
}
