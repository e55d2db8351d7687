//! The noisy neighbour on one GPU node: two tenants sharing one node agent, whose local device
//! the aggressor's checkpoint bursts saturate.
//!
//! The agent's local store sits behind an emulated device (`[agent.emulate]`: a FIFO server
//! of bounded bandwidth and operations, as the tier is emulated for the other scenarios), so
//! the contention is real on any machine. The victim's shards are written through the agent
//! and drained before the clock starts; it then reads them from the node at a fixed rate
//! (open loop, as in the other scenarios) while the aggressor writes its checkpoints through
//! the same agent, which absorbs them on the same device and drains them to a gateway (the
//! drain's local reads are the aggressor's too). Three scenarios:
//!
//! - `node_solo`: the victim alone, the node scheduled (the baseline of the ratios);
//! - `node_fifo`: no `[agent.capacity]`: every local transfer is issued at once, the device's
//!   one queue;
//! - `node_dmclock`: `[agent.capacity]` at the device's capacity, the victim with a
//!   `local_reservation` and a `local_weight`.
//!
//! `local_utilization` is the bytes the local device moved (the front's body bytes in and out
//! on the node, plus the drain's reads) over its bandwidth × the run's time.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::{Config, MIB, Scenario, VICTIM_KEY, VICTIM_SECRET, aggressor, victim};
use crate::BenchError;
use crate::client::S3Client;
use crate::gateway::payload;
use crate::procs::{self, ACCESS_KEY, Proc, SECRET_KEY};

/// The node's settings: its emulated local device.
#[derive(Debug, Clone, Serialize)]
pub struct NodeConfig {
    /// The emulated local device and `[agent.capacity] bandwidth` in `node_dmclock`.
    pub local_bandwidth_bps: f64,
    pub local_ops: f64,
}

impl NodeConfig {
    /// A local device as fast as the default tier (100 MiB/s, 8,000 ops/s), so that the
    /// node's figures read beside the tier's.
    pub fn default_run() -> Self {
        Self {
            local_bandwidth_bps: 100.0 * MIB,
            local_ops: 8000.0,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Solo,
    Fifo,
    DmClock,
}

impl Kind {
    pub const ALL: [Kind; 3] = [Self::Solo, Self::Fifo, Self::DmClock];

    pub fn name(self) -> &'static str {
        match self {
            Self::Solo => "node_solo",
            Self::Fifo => "node_fifo",
            Self::DmClock => "node_dmclock",
        }
    }
}

/// The agent's `[agent]` keys after `upstream`, its subtables and its two tenants.
fn agent_toml(cfg: &Config, kind: Kind, status_port: u16) -> String {
    let n = &cfg.node;
    let mib = |b: f64| format!("\"{}MiB/s\"", (b / MIB).round());
    let capacity = match kind {
        Kind::Fifo => String::new(),
        Kind::Solo | Kind::DmClock => format!(
            "[agent.capacity]\nbandwidth = {}\nops = {}\npolicy = \"dmclock\"\nqueue_depth = 1024\ngrain = {}\n",
            mib(n.local_bandwidth_bps),
            n.local_ops,
            cfg.grain_bytes
        ),
    };
    let victim_share = match kind {
        Kind::Fifo => String::new(),
        Kind::Solo | Kind::DmClock => format!(
            "local_reservation = {}\nlocal_weight = {}\n",
            mib(cfg.victim_reservation_bps),
            cfg.victim_weight
        ),
    };
    format!(
        "status_listen = \"127.0.0.1:{status_port}\"\n{capacity}\
         [agent.emulate]\nbandwidth = {}\nops = {}\n\n{}\
         [[tenant]]\nid = \"victim\"\naccess_key = \"{VICTIM_KEY}\"\nsecret_key = \"{VICTIM_SECRET}\"\n{victim_share}",
        mib(n.local_bandwidth_bps),
        n.local_ops,
        super::agent_tenants_toml(cfg),
    )
}

/// Starts `sluice agent` on a free port (at normal priority: here the agent is what is
/// measured), draining to `upstream`.
fn start_agent(sluice: &Path, dir: &Path, upstream: &str, rest: &str) -> Result<Proc, BenchError> {
    std::fs::create_dir_all(dir)?;
    let port = procs::free_port()?;
    let config = dir.join("agent.toml");
    std::fs::write(
        &config,
        format!(
            "[agent]\nlisten = \"127.0.0.1:{port}\"\ndata_dir = \"{}\"\nupstream = \"{upstream}\"\n{rest}",
            dir.join("data").display()
        ),
    )?;
    let log = std::fs::File::create(dir.join("agent.log"))?;
    let mut child = Command::new(sluice)
        .args(["agent", "--config"])
        .arg(&config)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()?;
    procs::wait_for_port(port, &mut child, Duration::from_secs(30))?;
    Ok(Proc { child, port })
}

/// The bytes the node's local device moved so far, from the agent's `/metrics`: body bytes
/// received and sent by its S3 front, plus what its drain read and uploaded.
async fn local_bytes(status_port: u16) -> u64 {
    super::metric_total(
        status_port,
        &[
            "sluice_received_bytes_total",
            "sluice_sent_bytes_total",
            "sluice_agent_drained_bytes_total",
        ],
    )
    .await
}

/// Waits until every victim shard is on the shared tier (the victim's drain is done and
/// reads nothing more from the device), for at most `within`.
async fn drained(tier: &S3Client, shards: usize, within: Duration) -> Result<(), BenchError> {
    let until = Instant::now() + within;
    for i in 0..shards {
        while !tier.exists(&format!("shard-{i}")).await {
            if Instant::now() > until {
                return Err(BenchError::Setup(format!(
                    "the victim's shard-{i} did not drain within {within:?}"
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    Ok(())
}

/// Runs one node scenario.
pub async fn scenario(
    cfg: &Config,
    kind: Kind,
    solo_p99: Option<f64>,
    progress: &(dyn Fn(&str, f64) + Sync),
) -> Result<Scenario, BenchError> {
    let dir = cfg.workdir.join(kind.name());
    let scratch = procs::Scratch::create(&dir)?;
    let (_, gateway_tenants) = super::gateway_toml(cfg, super::Kind::Fifo);
    let gw = procs::start_gateway(&cfg.sluice, &dir, "data", "", &gateway_tenants)?;
    let upstream = format!("http://127.0.0.1:{}", gw.port);
    let status_port = procs::free_port()?;
    let agent = start_agent(
        &cfg.sluice,
        &dir.join("agent"),
        &upstream,
        &agent_toml(cfg, kind, status_port),
    )?;
    let node = format!("http://127.0.0.1:{}", agent.port);
    let victim_client = S3Client::new(&node, "data", VICTIM_KEY, VICTIM_SECRET)?;
    let victim_upstream = S3Client::new(&upstream, "data", VICTIM_KEY, VICTIM_SECRET)?;
    let aggressor_client = S3Client::new(&node, "data", ACCESS_KEY, SECRET_KEY)?;
    let shard = payload(cfg.victim_shard_bytes as usize, cfg.seed);
    for i in 0..cfg.victim_shards {
        victim_client
            .put(&format!("shard-{i}"), shard.clone())
            .await?;
    }
    drained(
        &victim_upstream,
        cfg.victim_shards,
        Duration::from_secs(120),
    )
    .await?;
    let body = payload(cfg.aggressor_object_bytes as usize, cfg.seed ^ 0xA66);

    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(cfg.seconds);
    let bytes_before = local_bytes(status_port).await;
    let aggressor_bytes = Arc::new(AtomicU64::new(0));
    let first_stall = Arc::new(std::sync::Mutex::new(None::<f64>));
    let aggressor_task = (kind != Kind::Solo).then(|| {
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
    let bytes_after = local_bytes(status_port).await;
    if let Some(t) = aggressor_task {
        t.abort();
    }
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
        // No shared tier is contended here (serialized as null).
        tier_utilization: f64::NAN,
        drain_completion_s: None,
        local_utilization: Some(
            bytes_after.saturating_sub(bytes_before) as f64
                / (cfg.node.local_bandwidth_bps * elapsed),
        ),
        scrub_bps: None,
        reconverge_s: None,
        latencies,
    })
}

/// The three node scenarios in order, each ratio against `node_solo`.
pub async fn run(
    cfg: &Config,
    progress: &(dyn Fn(&str, f64) + Sync),
) -> Result<Vec<Scenario>, BenchError> {
    let mut out: Vec<Scenario> = Vec::new();
    for kind in Kind::ALL.into_iter().filter(|k| cfg.runs(k.name())) {
        let solo = out.first().map(|s| s.victim_p99_s);
        out.push(scenario(cfg, kind, solo, progress).await?);
    }
    Ok(out)
}
