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
//!   burst on local disk and drains it to the tier paced to its checkpoint interval;
//! - `dmclock_scrub`: dmClock with the gateway's continuous scrub over a pre-filled store
//!   ([`scrub`]: a background class of the scheduler that wants the whole idle tier);
//! - `solo_scrub`: the victim alone beside the same scrub, which then has most of the tier.
//!
//! Then the same two tenants on one node agent whose local device the burst saturates
//! ([`node`]: `node_solo`, `node_fifo`, `node_dmclock`), and on two gateways over one shared
//! tier and one PostgreSQL catalog ([`gateways`]: `two_gateways_uncoordinated`,
//! `two_gateways`).
//!
//! The victim is open-loop: its GETs are issued on a fixed schedule, not after the previous
//! reply, and each latency is measured from the scheduled time, so coordinated omission cannot
//! hide queueing. It runs on its own thread and runtime, so the aggressor's load generation in
//! this process does not delay its clock. The aggressor writes a DCP-shaped checkpoint every
//! `aggressor_interval_s` (or as soon as the previous one is acknowledged, if later):
//! `streams` concurrent PUTs of `object_size`, then a `.metadata` marker.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::BenchError;
use crate::client::S3Client;
use crate::gateway::payload;
use crate::procs::{self, ACCESS_KEY, SECRET_KEY};
use crate::stats::Latencies;

pub mod gateways;
pub mod node;
pub mod scrub;

const MIB: f64 = 1024.0 * 1024.0;
const VICTIM_KEY: &str = "AKIDVICTIM00000TEST";
const VICTIM_SECRET: &str = "victim-secret-0123456789";

#[derive(Debug, Clone, Serialize)]
pub struct Config {
    pub seed: u64,
    /// How long the victim reads, per scenario.
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
    /// A checkpoint starts every this many seconds (or when the previous one is done).
    pub aggressor_interval_s: f64,
    /// The aggressor's static cap under `rate_limit` (the victim's is its reservation).
    pub aggressor_limit_bps: f64,
    /// The node agent's drain rate for the aggressor (`dmclock_agent`); its checkpoint
    /// interval is `aggressor_interval_s`, so it drains faster if a deadline needs it.
    pub agent_drain_rate_bps: f64,
    /// How long `dmclock_agent` waits, after the victim's run, for the first checkpoint to
    /// finish draining.
    pub drain_wait_s: f64,
    /// The gateway's scheduling grain (`[gateway.capacity] grain`), also the node agent's.
    pub grain_bytes: u64,
    /// The node scenarios' local device.
    pub node: node::NodeConfig,
    /// The scenarios to run (`solo`, the baseline, always runs); `None`, every one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub only: Option<Vec<String>>,
    /// The directory of PostgreSQL's binaries for the two-gateway scenarios; `None`, they are
    /// skipped.
    #[serde(skip)]
    pub postgres: Option<PathBuf>,
    #[serde(skip)]
    pub workdir: PathBuf,
    #[serde(skip)]
    pub sluice: PathBuf,
}

impl Config {
    /// The default experiment: a 100 MiB/s tier; a data loader reading 16 MiB shards at 2/s
    /// (32 MiB/s, inside a 40 MiB/s reservation); a trainer checkpointing 1 GiB (8 × 128 MiB)
    /// every 12 s, more than the tier has left, so the tier is saturated whenever it writes.
    pub fn default_run(seed: u64, workdir: PathBuf, sluice: PathBuf) -> Self {
        Self {
            seed,
            seconds: 24.0,
            tier_bandwidth_bps: 100.0 * MIB,
            tier_ops: 8000.0,
            victim_shard_bytes: 16 << 20,
            victim_shards: 8,
            victim_rate_per_s: 2.0,
            victim_reservation_bps: 40.0 * MIB,
            victim_weight: 20.0,
            aggressor_streams: 8,
            aggressor_object_bytes: 128 << 20,
            aggressor_interval_s: 12.0,
            aggressor_limit_bps: 60.0 * MIB,
            agent_drain_rate_bps: 60.0 * MIB,
            drain_wait_s: 30.0,
            grain_bytes: 256 << 10,
            node: node::NodeConfig::default_run(),
            only: None,
            postgres: None,
            workdir,
            sluice,
        }
    }

    /// A shorter run: 7 s per scenario, 256 MiB checkpoints every 4 s.
    #[must_use]
    pub fn quick(mut self) -> Self {
        self.seconds = 7.0;
        self.aggressor_object_bytes = 32 << 20;
        self.aggressor_interval_s = 4.0;
        self.drain_wait_s = 15.0;
        self
    }

    fn victim_target_bps(&self) -> f64 {
        self.victim_rate_per_s * self.victim_shard_bytes as f64
    }

    fn checkpoint_bytes(&self) -> u64 {
        self.aggressor_object_bytes * self.aggressor_streams as u64
    }

    /// Whether scenario `name` is to run.
    fn runs(&self, name: &str) -> bool {
        name == "solo"
            || self
                .only
                .as_ref()
                .is_none_or(|only| only.iter().any(|n| n == name))
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
    /// Time until every PUT of the aggressor's first checkpoint (and its marker) was
    /// acknowledged: how long the trainer is stalled writing it.
    pub aggressor_stall_s: Option<f64>,
    pub aggressor_bytes: u64,
    /// Bytes the tier moved over the run, as a fraction of what it could have.
    pub tier_utilization: f64,
    /// Time until the first checkpoint was complete on the shared tier (its marker visible
    /// there): the stall when writing directly, the drain when writing through the agent.
    pub drain_completion_s: Option<f64>,
    /// Node scenarios: bytes the node's local device moved over its capacity × time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub local_utilization: Option<f64>,
    /// `dmclock_scrub`: bytes per second the gateway's scrub read over the run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scrub_bps: Option<f64>,
    /// `two_gateways`: seconds from killing gateway 2 under load until gateway 1 alone moves
    /// [`gateways::RECONVERGED`] of the tier (`null` if it did not within 10 s).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reconverge_s: Option<Option<f64>>,
    #[serde(skip)]
    pub latencies: Latencies,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub seed: u64,
    pub config: Config,
    pub scenarios: Vec<Scenario>,
    /// Scenarios that could not be measured here, and why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<Skipped>,
}

/// A scenario this run could not measure (never reported with figures from elsewhere).
#[derive(Debug, Clone, Serialize)]
pub struct Skipped {
    pub name: String,
    pub reason: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Solo,
    Fifo,
    RateLimit,
    DmClock,
    DmClockAgent,
    DmClockScrub,
    SoloScrub,
}

impl Kind {
    pub const ALL: [Kind; 7] = [
        Self::Solo,
        Self::Fifo,
        Self::RateLimit,
        Self::DmClock,
        Self::DmClockAgent,
        Self::DmClockScrub,
        Self::SoloScrub,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Self::Solo => "solo",
            Self::Fifo => "fifo",
            Self::RateLimit => "rate_limit",
            Self::DmClock => "dmclock",
            Self::DmClockAgent => "dmclock_agent",
            Self::DmClockScrub => scrub::NAME,
            Self::SoloScrub => scrub::SOLO_NAME,
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
        Kind::Solo | Kind::DmClock | Kind::DmClockAgent | Kind::DmClockScrub | Kind::SoloScrub => {
            format!(
                "[gateway.capacity]\nbandwidth = {}\nops = {}\npolicy = \"dmclock\"\nqueue_depth = 1024\ngrain = {}\n",
                mib(cfg.tier_bandwidth_bps),
                cfg.tier_ops,
                cfg.grain_bytes
            )
        }
    };
    let mut extra = format!(
        "{capacity}[backend.emulate]\nbandwidth = {}\nops = {}\n",
        mib(cfg.tier_bandwidth_bps),
        cfg.tier_ops
    );
    if matches!(kind, Kind::DmClockScrub | Kind::SoloScrub) {
        extra.push_str(&scrub::gateway_toml(cfg));
    }
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
    metric_total(
        metrics_port,
        &["sluice_received_bytes_total", "sluice_sent_bytes_total"],
    )
    .await
}

/// The sum of every sample of the metrics `names` (any labels) on the Prometheus `/metrics`
/// of the process listening on `port`; 0 if it cannot be read.
pub(crate) async fn metric_total(port: u16, names: &[&str]) -> u64 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut stream) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else {
        return 0;
    };
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
    sum_samples(&text, names)
}

/// The sum of the samples of `names` in Prometheus text (comments and other metrics skipped,
/// a metric whose name only starts with one of `names` too).
fn sum_samples(text: &str, names: &[&str]) -> u64 {
    text.lines()
        .filter(|l| {
            let name = l.split(['{', ' ']).next().unwrap_or_default();
            names.contains(&name)
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// The node agent's configuration for the aggressor: room for every checkpoint of the run,
/// the drain rate and the checkpoint interval (its deadline).
fn agent_tenants_toml(cfg: &Config) -> String {
    let checkpoints = (cfg.seconds / cfg.aggressor_interval_s).ceil() as u64 + 2;
    format!(
        "[[tenant]]\nid = \"bench\"\naccess_key = \"{ACCESS_KEY}\"\nsecret_key = \"{SECRET_KEY}\"\n\
         local_capacity = \"{}B\"\ndrain_rate = \"{}B/s\"\ninterval = \"{}ms\"\n",
        cfg.checkpoint_bytes() * checkpoints + (64 << 20),
        cfg.agent_drain_rate_bps.round(),
        (cfg.aggressor_interval_s * 1e3).round()
    )
}

/// The aggressor: a checkpoint (`streams` concurrent PUTs, then `.metadata`) every interval,
/// or as soon as the previous one is acknowledged if that is later, until `deadline`.
/// Returns the first checkpoint's stall (start to last acknowledgement).
async fn aggressor(
    client: S3Client,
    body: bytes::Bytes,
    cfg: Config,
    start: Instant,
    deadline: Instant,
    bytes: Arc<AtomicU64>,
    first_stall: Arc<std::sync::Mutex<Option<f64>>>,
) {
    let interval = Duration::from_secs_f64(cfg.aggressor_interval_s);
    let mut burst: u32 = 0;
    loop {
        let due = start + interval * burst;
        if due >= deadline {
            return;
        }
        tokio::time::sleep_until(due.into()).await;
        let burst_start = Instant::now();
        let puts = (0..cfg.aggressor_streams).map(|s| {
            let (c, b) = (client.clone(), body.clone());
            async move { c.put(&format!("ckpt-{burst}/shard-{s}"), b).await }
        });
        let results = futures::future::join_all(puts).await;
        let failed = results.iter().find_map(|r| r.as_ref().err());
        if let Some(e) = failed {
            eprintln!("\naggressor PUT failed: {e}");
        } else {
            bytes.fetch_add(cfg.checkpoint_bytes(), Ordering::Relaxed);
            let marker = bytes::Bytes::from(format!("{{\"checkpoint\":{burst}}}"));
            match client.put(&format!("ckpt-{burst}/.metadata"), marker).await {
                Ok(()) if burst == 0 => {
                    *first_stall.lock().unwrap_or_else(PoisonError::into_inner) =
                        Some(burst_start.elapsed().as_secs_f64());
                }
                Ok(()) => {}
                Err(e) => eprintln!("\naggressor marker PUT failed: {e}"),
            }
        }
        burst += 1;
    }
}

/// The victim: a GET every `1/rate` seconds on schedule until `seconds` have passed, each
/// latency measured from its scheduled time. Runs on the calling thread.
fn victim(client: &S3Client, cfg: &Config, start: Instant) -> (Latencies, usize, u64) {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("\nvictim runtime: {e}");
            return (Latencies::default(), 1, 0);
        }
    };
    rt.block_on(async {
        let interval = Duration::from_secs_f64(1.0 / cfg.victim_rate_per_s);
        let deadline = start + Duration::from_secs_f64(cfg.seconds);
        let mut handles = Vec::new();
        for k in 0u32.. {
            let scheduled = start + interval * k;
            if scheduled >= deadline {
                break;
            }
            tokio::time::sleep_until(scheduled.into()).await;
            let v = client.clone();
            let key = format!(
                "shard-{}",
                (k as usize + cfg.seed as usize) % cfg.victim_shards
            );
            handles.push(tokio::spawn(async move {
                let r = v.get(&key).await;
                (scheduled.elapsed(), r)
            }));
        }
        let mut latencies = Latencies::default();
        let (mut errors, mut victim_bytes) = (0, 0);
        for h in handles {
            match h.await {
                Ok((lat, Ok(n))) => {
                    latencies.record(lat);
                    victim_bytes += n;
                }
                Ok((_, Err(e))) => {
                    eprintln!("\nvictim GET failed: {e}");
                    errors += 1;
                }
                Err(_) => errors += 1,
            }
        }
        (latencies, errors, victim_bytes)
    })
}

/// Polls the shared tier until `key` exists; returns when it first did, from `since`.
async fn visible_at(client: &S3Client, key: &str, since: Instant, until: Instant) -> Option<f64> {
    while Instant::now() < until {
        if client.exists(key).await {
            return Some(since.elapsed().as_secs_f64());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}

/// Runs one scenario.
pub async fn scenario(
    cfg: &Config,
    kind: Kind,
    solo_p99: Option<f64>,
    progress: &(dyn Fn(&str, f64) + Sync),
) -> Result<Scenario, BenchError> {
    let dir = cfg.workdir.join(kind.name());
    let scratch = procs::Scratch::create(&dir)?;
    let metrics_port = procs::free_port()?;
    let (mut extra, tenants) = gateway_toml(cfg, kind);
    extra = format!("metrics_listen = \"127.0.0.1:{metrics_port}\"\n{extra}");
    let gw = procs::start_gateway(&cfg.sluice, &dir, "data", &extra, &tenants)?;
    let endpoint = format!("http://127.0.0.1:{}", gw.port);
    let agent = match kind {
        Kind::DmClockAgent => Some(procs::start_agent(
            &cfg.sluice,
            &dir.join("agent"),
            &endpoint,
            &agent_tenants_toml(cfg),
        )?),
        _ => None,
    };
    let victim_client = S3Client::new(&endpoint, "data", VICTIM_KEY, VICTIM_SECRET)?;
    let tier_view = S3Client::new(&endpoint, "data", ACCESS_KEY, SECRET_KEY)?;
    let aggressor_client = match &agent {
        Some(a) => S3Client::new(
            &format!("http://127.0.0.1:{}", a.port),
            "data",
            ACCESS_KEY,
            SECRET_KEY,
        )?,
        None => tier_view.clone(),
    };
    let shard = payload(cfg.victim_shard_bytes as usize, cfg.seed);
    for i in 0..cfg.victim_shards {
        victim_client
            .put(&format!("shard-{i}"), shard.clone())
            .await?;
    }
    if matches!(kind, Kind::DmClockScrub | Kind::SoloScrub) {
        scrub::prefill(&tier_view, cfg).await?;
    }
    // Made before the clock starts: generating it is not part of any measurement.
    let body = payload(cfg.aggressor_object_bytes as usize, cfg.seed ^ 0xA66);

    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(cfg.seconds);
    let bytes_before = tier_bytes(metrics_port).await;
    let scrubbed_before = scrub::scrubbed_bytes(metrics_port).await;
    let aggressor_bytes = Arc::new(AtomicU64::new(0));
    let first_stall = Arc::new(std::sync::Mutex::new(None::<f64>));
    let aggressor_task = (!matches!(kind, Kind::Solo | Kind::SoloScrub)).then(|| {
        tokio::spawn(aggressor(
            aggressor_client,
            body,
            cfg.clone(),
            start,
            deadline,
            Arc::clone(&aggressor_bytes),
            Arc::clone(&first_stall),
        ))
    });
    let drain_until = deadline + Duration::from_secs_f64(cfg.drain_wait_s);
    let drain_task = agent.is_some().then(|| {
        let tier = tier_view.clone();
        tokio::spawn(async move { visible_at(&tier, "ckpt-0/.metadata", start, drain_until).await })
    });

    let (done_tx, mut done_rx) = tokio::sync::oneshot::channel();
    let victim_cfg = cfg.clone();
    std::thread::spawn(move || {
        let _ = done_tx.send(victim(&victim_client, &victim_cfg, start));
    });
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    let (latencies, errors, victim_bytes) = loop {
        tokio::select! {
            r = &mut done_rx => break r.map_err(|_| BenchError::Setup("the victim thread died".into()))?,
            _ = tick.tick() => progress(kind.name(), start.elapsed().as_secs_f64().min(cfg.seconds)),
        }
    };
    let elapsed = start.elapsed().as_secs_f64();
    let bytes_after = tier_bytes(metrics_port).await;
    let scrubbed = scrub::scrubbed_bytes(metrics_port)
        .await
        .saturating_sub(scrubbed_before);
    if let Some(t) = aggressor_task {
        t.abort();
    }
    let drain_completion_s = match drain_task {
        Some(t) => {
            progress("draining", cfg.seconds);
            t.await.ok().flatten()
        }
        None => *first_stall.lock().unwrap_or_else(PoisonError::into_inner),
    };
    drop(agent);
    drop(gw);
    drop(scratch);
    let p99 = latencies.quantile(0.99);
    Ok(Scenario {
        name: kind.name().to_owned(),
        victim_p50_s: latencies.quantile(0.5),
        victim_p99_s: p99,
        victim_p999_s: latencies.quantile(0.999),
        victim_p99_vs_solo: solo_p99.map_or(1.0, |s| p99 / s),
        victim_requests: latencies.len(),
        victim_errors: errors,
        victim_throughput_bps: victim_bytes as f64 / elapsed.max(cfg.seconds),
        victim_target_bps: cfg.victim_target_bps(),
        aggressor_stall_s: *first_stall.lock().unwrap_or_else(PoisonError::into_inner),
        aggressor_bytes: aggressor_bytes.load(Ordering::Relaxed),
        tier_utilization: bytes_after.saturating_sub(bytes_before) as f64
            / (cfg.tier_bandwidth_bps * elapsed),
        drain_completion_s: if matches!(kind, Kind::Solo | Kind::SoloScrub) {
            None
        } else {
            drain_completion_s
        },
        local_utilization: None,
        scrub_bps: matches!(kind, Kind::DmClockScrub | Kind::SoloScrub)
            .then(|| scrubbed as f64 / elapsed),
        reconverge_s: None,
        latencies,
    })
}

/// Runs every scenario in order.
pub async fn run(cfg: Config, progress: &(dyn Fn(&str, f64) + Sync)) -> Result<Report, BenchError> {
    std::fs::create_dir_all(&cfg.workdir)?;
    let mut scenarios: Vec<Scenario> = Vec::new();
    for kind in Kind::ALL.into_iter().filter(|k| cfg.runs(k.name())) {
        let solo = scenarios.first().map(|s| s.victim_p99_s);
        scenarios.push(scenario(&cfg, kind, solo, progress).await?);
    }
    scenarios.extend(node::run(&cfg, progress).await?);
    let mut skipped = Vec::new();
    let two: Vec<gateways::Kind> = gateways::Kind::ALL
        .into_iter()
        .filter(|k| cfg.runs(k.name()))
        .collect();
    if !two.is_empty() {
        match &cfg.postgres {
            Some(bin) => {
                let solo = scenarios.first().map(|s| s.victim_p99_s);
                let (measured, not) = gateways::run(&cfg, bin, &two, solo, progress).await?;
                scenarios.extend(measured);
                skipped.extend(not);
            }
            None => skipped.extend(two.iter().map(|k| Skipped {
                name: k.name().to_owned(),
                reason: format!(
                    "no PostgreSQL for the two gateways' shared catalog ({})",
                    crate::postgres::INSTALL_HINT
                ),
            })),
        }
    }
    Ok(Report {
        seed: cfg.seed,
        config: cfg,
        scenarios,
        skipped,
    })
}

/// The report as a table.
pub fn table(r: &Report) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<26} {:>9} {:>9} {:>10} {:>8} {:>15} {:>10} {:>10} {:>8} {:>6}",
        "scenario",
        "p50",
        "p99",
        "p99.9",
        "p99/solo",
        "victim MiB/s",
        "agg stall",
        "on tier",
        "tier/local use",
        "errors"
    );
    for s in &r.scenarios {
        let _ = writeln!(
            out,
            "{:<26} {:>8.1}ms {:>8.1}ms {:>9.1}ms {:>7.2}x {:>7.1} of {:>4.0} {:>10} {:>10} {:>7.0}% {:>6}",
            s.name,
            s.victim_p50_s * 1e3,
            s.victim_p99_s * 1e3,
            s.victim_p999_s * 1e3,
            s.victim_p99_vs_solo,
            s.victim_throughput_bps / MIB,
            s.victim_target_bps / MIB,
            s.aggressor_stall_s
                .map_or("-".to_owned(), |v| format!("{v:.1}s")),
            s.drain_completion_s
                .map_or("-".to_owned(), |v| format!("{v:.1}s")),
            // Node scenarios: the local device's use instead of the tier's.
            s.local_utilization.unwrap_or(s.tier_utilization) * 100.0,
            s.victim_errors
        );
    }
    for s in &r.scenarios {
        if let Some(reconverge) = s.reconverge_s {
            let _ = writeln!(
                out,
                "{}: with gateway 2 killed under load, gateway 1 alone moved {:.0}% of the tier {}",
                s.name,
                gateways::RECONVERGED * 100.0,
                reconverge.map_or("not within 10 s".to_owned(), |v| format!("{v:.2} s after"))
            );
        }
    }
    for k in &r.skipped {
        let _ = writeln!(out, "{}: not measured: {}", k.name, k.reason);
    }
    for s in r.scenarios.iter().filter(|s| s.scrub_bps.is_some()) {
        let _ = writeln!(
            out,
            "{}: the gateway's scrub read {:.1} MiB/s beside the tenants",
            s.name,
            s.scrub_bps.unwrap_or(0.0) / MIB
        );
    }
    out
}

/// Victim latency distributions as an SVG: exceedance P(latency > x) on log axes, one line
/// per scenario (dashed once the colours come round again), and in the legend after them the
/// scenarios skipped (each reason in its `<title>`) and `two_gateways`' `reconverge_s`.
pub fn svg(r: &Report) -> String {
    use std::fmt::Write;
    const W: f64 = 1100.0;
    const H: f64 = 520.0;
    const L: f64 = 115.0;
    const R: f64 = 335.0;
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
        let dash = if (i / colors.len()) % 2 == 1 {
            " stroke-dasharray=\"7,4\""
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "<polyline fill=\"none\" stroke=\"{color}\"{dash} stroke-width=\"2\" points=\"{pts}\"/>"
        );
        let ly = T + 20.0 + i as f64 * 22.0;
        let _ = writeln!(
            out,
            "<line x1=\"{}\" y1=\"{ly}\" x2=\"{}\" y2=\"{ly}\" stroke=\"{color}\"{dash} stroke-width=\"3\"/><text x=\"{}\" y=\"{}\">{} (p99 {:.0}ms)</text>",
            W - R + 10.0,
            W - R + 35.0,
            W - R + 40.0,
            ly + 4.0,
            s.name,
            s.victim_p99_s * 1e3
        );
    }
    // After the scenarios' entries: what was skipped and `reconverge_s`, the why and the
    // what in a tooltip.
    let notes = r
        .skipped
        .iter()
        .map(|k| (format!("{}: skipped", k.name), k.reason.clone()))
        .chain(r.scenarios.iter().filter_map(|s| {
            let text = match s.reconverge_s? {
                Some(v) => format!("re-converged in {v:.2} s"),
                None => format!(
                    "no re-convergence in {} s",
                    gateways::RECONVERGE_WAIT.as_secs()
                ),
            };
            let title = format!(
                "reconverge_s: from killing gateway 2 under load until gateway 1 alone moved \
                 {:.0}% of the tier",
                gateways::RECONVERGED * 100.0
            );
            Some((format!("{}: {text}", s.name), title))
        }));
    for (i, (text, title)) in notes.enumerate() {
        let ly = T + 20.0 + (r.scenarios.len() + i) as f64 * 22.0;
        let _ = writeln!(
            out,
            "<text x=\"{}\" y=\"{}\" fill=\"#555\">{}<title>{}</title></text>",
            W - R + 10.0,
            ly + 4.0,
            xml(&text),
            xml(&title),
        );
    }
    out.push_str("</svg>\n");
    out
}

/// `text` with XML's special characters escaped.
fn xml(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod metric_tests {
    #[test]
    fn samples_of_the_named_metrics_are_summed_whatever_their_labels() {
        let text = "# TYPE sluice_sent_bytes_total counter\n\
                    sluice_sent_bytes_total{tenant=\"a\"} 10\n\
                    sluice_sent_bytes_total{tenant=\"b\"} 5\n\
                    sluice_sent_bytes_total_other{tenant=\"a\"} 1000\n\
                    sluice_scrub_bytes_total 7\n";
        assert_eq!(super::sum_samples(text, &["sluice_sent_bytes_total"]), 15);
        assert_eq!(super::sum_samples(text, &["sluice_scrub_bytes_total"]), 7);
        assert_eq!(
            super::sum_samples(
                text,
                &["sluice_sent_bytes_total", "sluice_scrub_bytes_total"]
            ),
            22
        );
        assert_eq!(
            super::sum_samples(text, &["sluice_received_bytes_total"]),
            0
        );
    }
}

#[cfg(test)]
mod svg_tests;
