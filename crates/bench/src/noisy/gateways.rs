//! The noisy neighbour across two gateways: one tier, two gateways on one PostgreSQL catalog,
//! the victim reading through gateway 1 while the aggressor checkpoints through gateway 2.
//!
//! The tier is one emulated device the two gateway processes share (`[backend.emulate]
//! shared`: the device's FIFO lives in a state file both occupy), over one backend directory
//! (each gateway's `data_dir/objects` is a link to it) and one catalog, so that a shard the
//! victim wrote through gateway 1 and a checkpoint written through gateway 2 queue on the same
//! device. Both gateways run dmClock with the tier's capacity as `[gateway.capacity]` and the
//! same tenants as `dmclock` (the victim with a reservation and weight 20, the aggressor with
//! weight 1 and no limit, so that its checkpoint alone can fill the tier, as a real
//! neighbour's burst would); behind the emulated device each gateway reads every grain
//! through it, so the victim's reads and the aggressor's writes queue on the one device. The
//! scenarios differ only in whether they share it:
//!
//! - `two_gateways_uncoordinated` (`coordinate = false` on both): each gateway paces its own
//!   traffic to the whole capacity, so together they admit up to twice what the tier serves,
//!   and the queue the victim's reads wait in is the device's;
//! - `two_gateways` (coordination on, the default): the gateways split the capacity and the
//!   tenants' reservations and limits between them by demand.
//!
//! `tier_utilization` is the two gateways' body bytes over the tier's capacity × time. After
//! `two_gateways`' victim run a third, short phase measures `reconverge_s`: the aggressor
//! writes closed-loop through both gateways, gateway 2 is killed, and the figure is the time
//! from the kill until gateway 1 alone moves at least [`RECONVERGED`] of the capacity
//! (half a second's bytes at a time).
//!
//! Without PostgreSQL the scenarios are skipped, saying why; with a sluice whose gateway has
//! no `[gateway.capacity] coordinate` key, `two_gateways` is reported as not measurable
//! ([`Report::skipped`](super::Report)), never with another scenario's figures.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use super::{Config, Scenario, Skipped, VICTIM_KEY, VICTIM_SECRET, aggressor, victim};
use crate::BenchError;
use crate::client::S3Client;
use crate::gateway::payload;
use crate::procs::{self, ACCESS_KEY, Proc, SECRET_KEY};

/// Each gateway paces to the whole tier on its own.
pub const UNCOORDINATED: &str = "two_gateways_uncoordinated";
/// The gateways share the tier's capacity.
pub const COORDINATED: &str = "two_gateways";
/// The share of the tier gateway 1 must move alone for the split to count as re-converged.
pub const RECONVERGED: f64 = 0.85;
/// The window `reconverge_s` measures gateway 1's rate over.
const WINDOW: Duration = Duration::from_millis(500);
/// How long after the kill `reconverge_s` waits before giving up (it is then `null`).
pub const RECONVERGE_WAIT: Duration = Duration::from_secs(10);
/// The third phase's warm-up with both gateways, and its writers' objects.
const WARMUP: Duration = Duration::from_secs(3);
const WRITER_OBJECT: u64 = 4 << 20;
const WRITERS_PER_GATEWAY: usize = 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Uncoordinated,
    Coordinated,
}

impl Kind {
    pub const ALL: [Kind; 2] = [Self::Uncoordinated, Self::Coordinated];

    pub fn name(self) -> &'static str {
        match self {
            Self::Uncoordinated => UNCOORDINATED,
            Self::Coordinated => COORDINATED,
        }
    }
}

/// Whether this build's gateways know `[gateway.capacity] coordinate` (the cluster-wide
/// split of the tier's capacity).
pub fn coordination_available() -> bool {
    sluice_config::Config::parse(
        "[gateway]\n[gateway.capacity]\nbandwidth = \"100MiB/s\"\ncoordinate = true\n",
        Path::new("/"),
    )
    .is_ok()
}

/// What `two_gateways` is reported as when the gateways cannot coordinate.
pub fn not_available() -> Skipped {
    Skipped {
        name: COORDINATED.to_owned(),
        reason: "coordination not available: this sluice's gateways have no [gateway.capacity] \
                 coordinate key, so two gateways cannot share the tier's capacity"
            .to_owned(),
    }
}

/// One gateway's `[gateway]` keys after `data_dir`, its subtables and its tenants' shares.
fn gateway_toml(
    cfg: &Config,
    kind: Kind,
    metrics_port: u16,
    device: &Path,
    catalog_url: &str,
) -> (String, String) {
    let (base, tenants) = super::gateway_toml(cfg, super::Kind::DmClock);
    let coordinate = match kind {
        Kind::Uncoordinated if coordination_available() => "coordinate = false\n",
        Kind::Uncoordinated | Kind::Coordinated => "",
    };
    let base = base.replacen(
        "[backend.emulate]\n",
        &format!("{coordinate}[backend.emulate]\n"),
        1,
    );
    (
        format!(
            "metrics_listen = \"127.0.0.1:{metrics_port}\"\n{base}shared = \"{}\"\n\
             [catalog]\nurl = \"{catalog_url}\"\n",
            device.display()
        ),
        tenants,
    )
}

/// A gateway and the port of its `/metrics`.
struct Gateway {
    proc: Proc,
    metrics_port: u16,
}

/// Starts gateway `number` in `dir`, its backend the shared `objects`, its device `device`.
fn start(
    cfg: &Config,
    kind: Kind,
    dir: &Path,
    number: usize,
    objects: &Path,
    device: &Path,
    catalog_url: &str,
) -> Result<Gateway, BenchError> {
    let dir = dir.join(format!("gateway-{number}"));
    let data = dir.join("data");
    std::fs::create_dir_all(&data)?;
    std::os::unix::fs::symlink(objects, data.join("objects"))?;
    let metrics_port = procs::free_port()?;
    let (extra, tenants) = gateway_toml(cfg, kind, metrics_port, device, catalog_url);
    let proc = procs::start_gateway(&cfg.sluice, &dir, "data", &extra, &tenants)?;
    Ok(Gateway { proc, metrics_port })
}

/// The body bytes both gateways moved so far.
async fn tier_bytes(gateways: &[Gateway]) -> u64 {
    let mut sum = 0;
    for g in gateways {
        sum += super::tier_bytes(g.metrics_port).await;
    }
    sum
}

/// Runs `kinds` on a PostgreSQL server from `bin`, each ratio against `solo_p99`.
/// Returns the scenarios measured and those that could not be.
pub async fn run(
    cfg: &Config,
    bin: &Path,
    kinds: &[Kind],
    solo_p99: Option<f64>,
    progress: &(dyn Fn(&str, f64) + Sync),
) -> Result<(Vec<Scenario>, Vec<Skipped>), BenchError> {
    let dir = cfg.workdir.join("two_gateways_postgres");
    let scratch = procs::Scratch::create(&dir)?;
    let (bin, pg_dir) = (bin.to_path_buf(), dir.clone());
    let server = tokio::task::spawn_blocking(move || crate::postgres::start(&bin, &pg_dir))
        .await
        .map_err(|e| BenchError::Setup(format!("PostgreSQL: {e}")))??;
    let (mut out, mut skipped) = (Vec::new(), Vec::new());
    for &kind in kinds {
        if kind == Kind::Coordinated && !coordination_available() {
            skipped.push(not_available());
            continue;
        }
        out.push(scenario(cfg, kind, &server, solo_p99, progress).await?);
    }
    // Stopping the server waits for it to exit.
    tokio::task::block_in_place(|| drop(server));
    drop(scratch);
    Ok((out, skipped))
}

/// Runs one scenario on its own database of `server`.
async fn scenario(
    cfg: &Config,
    kind: Kind,
    server: &crate::postgres::PgServer,
    solo_p99: Option<f64>,
    progress: &(dyn Fn(&str, f64) + Sync),
) -> Result<Scenario, BenchError> {
    let dir = cfg.workdir.join(kind.name());
    let scratch = procs::Scratch::create(&dir)?;
    // Creating the database and migrating its schema block (the server's client runs a
    // runtime of its own): off this worker, which the other tasks keep.
    let url = tokio::task::block_in_place(|| -> Result<String, BenchError> {
        let url = crate::postgres::database(server, kind.name())?;
        let handle = tokio::runtime::Handle::current();
        crate::postgres::create_bucket(&url, handle.clone(), "bench", &["data"])?;
        crate::postgres::create_bucket(&url, handle, "victim", &["data"])?;
        Ok(url)
    })?;
    let objects = dir.join("objects");
    std::fs::create_dir_all(&objects)?;
    let device: PathBuf = dir.join("tier.device");
    let mut gateways = Vec::new();
    for number in 1..=2 {
        gateways.push(start(cfg, kind, &dir, number, &objects, &device, &url)?);
    }
    let endpoint = |g: &Gateway| format!("http://127.0.0.1:{}", g.proc.port);
    let victim_client = S3Client::new(&endpoint(&gateways[0]), "data", VICTIM_KEY, VICTIM_SECRET)?;
    let aggressor_client = S3Client::new(&endpoint(&gateways[1]), "data", ACCESS_KEY, SECRET_KEY)?;
    let shard = payload(cfg.victim_shard_bytes as usize, cfg.seed);
    for i in 0..cfg.victim_shards {
        victim_client
            .put(&format!("shard-{i}"), shard.clone())
            .await?;
    }
    let body = payload(cfg.aggressor_object_bytes as usize, cfg.seed ^ 0xA66);

    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(cfg.seconds);
    let bytes_before = tier_bytes(&gateways).await;
    let aggressor_bytes = Arc::new(AtomicU64::new(0));
    let first_stall = Arc::new(std::sync::Mutex::new(None::<f64>));
    let aggressor_task = tokio::spawn(aggressor(
        aggressor_client.clone(),
        body,
        cfg.clone(),
        start,
        deadline,
        Arc::clone(&aggressor_bytes),
        Arc::clone(&first_stall),
    ));
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
    let bytes_after = tier_bytes(&gateways).await;
    aggressor_task.abort();
    let reconverge_s = match kind {
        Kind::Coordinated => {
            progress("reconverge", cfg.seconds);
            Some(reconverge(cfg, &mut gateways).await?)
        }
        Kind::Uncoordinated => None,
    };
    drop(gateways);
    drop(scratch);
    let p99 = latencies.quantile(0.99);
    let first_stall = *first_stall.lock().unwrap_or_else(PoisonError::into_inner);
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
        aggressor_stall_s: first_stall,
        aggressor_bytes: aggressor_bytes.load(Ordering::Relaxed),
        tier_utilization: bytes_after.saturating_sub(bytes_before) as f64
            / (cfg.tier_bandwidth_bps * elapsed),
        drain_completion_s: first_stall,
        local_utilization: None,
        scrub_bps: None,
        reconverge_s,
        latencies,
    })
}

/// The third phase: closed-loop writers through both gateways, then gateway 2 killed; the
/// time until gateway 1 alone moves [`RECONVERGED`] of the tier over a [`WINDOW`], or `None`
/// if it did not within [`RECONVERGE_WAIT`].
async fn reconverge(cfg: &Config, gateways: &mut Vec<Gateway>) -> Result<Option<f64>, BenchError> {
    let stop = Arc::new(AtomicBool::new(false));
    let body = payload(WRITER_OBJECT as usize, cfg.seed ^ 0x2C0);
    let mut writers = Vec::new();
    for (g, gateway) in gateways.iter().enumerate() {
        let client = S3Client::new(
            &format!("http://127.0.0.1:{}", gateway.proc.port),
            "data",
            ACCESS_KEY,
            SECRET_KEY,
        )?;
        for w in 0..WRITERS_PER_GATEWAY {
            let (client, body, stop) = (client.clone(), body.clone(), Arc::clone(&stop));
            writers.push(tokio::spawn(async move {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    // Gateway 2's writers fail once it is killed, and stop then.
                    if client
                        .put(&format!("reconverge/{g}-{w}-{n}"), body.clone())
                        .await
                        .is_err()
                    {
                        return;
                    }
                    n += 1;
                }
            }));
        }
    }
    tokio::time::sleep(WARMUP).await;
    let survivor = gateways[0].metrics_port;
    if let Some(mut killed) = gateways.pop() {
        let _ = killed.proc.child.kill();
        let _ = killed.proc.child.wait();
    }
    let killed_at = Instant::now();
    let want = RECONVERGED * cfg.tier_bandwidth_bps * WINDOW.as_secs_f64();
    let mut samples: std::collections::VecDeque<(Instant, u64)> = std::collections::VecDeque::new();
    let mut reached = None;
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    while killed_at.elapsed() < RECONVERGE_WAIT {
        tick.tick().await;
        let now = Instant::now();
        let bytes = super::tier_bytes(survivor).await;
        samples.push_back((now, bytes));
        while samples
            .front()
            .is_some_and(|(t, _)| now.duration_since(*t) > WINDOW)
        {
            samples.pop_front();
        }
        let Some(&(t0, b0)) = samples.front() else {
            continue;
        };
        // A window wholly after the kill, half a second long (give or take a tick).
        if t0 >= killed_at
            && now.duration_since(t0) + Duration::from_millis(50) >= WINDOW
            && (bytes.saturating_sub(b0) as f64) * WINDOW.as_secs_f64()
                >= want * now.duration_since(t0).as_secs_f64()
        {
            reached = Some(now.duration_since(killed_at).as_secs_f64());
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.abort();
    }
    Ok(reached)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_gateways_share_the_device_file_and_the_catalog() {
        let cfg = Config::default_run(1, PathBuf::new(), PathBuf::new());
        let (extra, tenants) = gateway_toml(
            &cfg,
            Kind::Coordinated,
            9100,
            Path::new("/w/tier.device"),
            "postgres://x@127.0.0.1:5/db",
        );
        assert!(
            extra.starts_with("metrics_listen = \"127.0.0.1:9100\"\n"),
            "{extra}"
        );
        assert!(
            extra.contains("[backend.emulate]\nbandwidth = \"100MiB/s\"\nops = 8000\nshared = \"/w/tier.device\"\n"),
            "{extra}"
        );
        assert!(
            extra.ends_with("[catalog]\nurl = \"postgres://x@127.0.0.1:5/db\"\n"),
            "{extra}"
        );
        assert!(
            !extra.contains("coordinate"),
            "coordination is the default: {extra}"
        );
        assert!(tenants.contains("reservation = \"40MiB/s\""), "{tenants}");
        // The aggressor (`bench`, whose settings come first) has a weight and no limit: its
        // checkpoint alone can saturate the tier, so uncoordinated gateways overload it.
        let aggressor = tenants.split("[[tenant]]").next().unwrap_or_default();
        assert_eq!(aggressor, "weight = 1\n", "{tenants}");
        assert!(!tenants.contains("limit"), "{tenants}");
        let (uncoordinated, _) = gateway_toml(
            &cfg,
            Kind::Uncoordinated,
            9100,
            Path::new("/w/tier.device"),
            "postgres://x@127.0.0.1:5/db",
        );
        if coordination_available() {
            assert!(
                uncoordinated.contains("grain = 262144\ncoordinate = false\n[backend.emulate]"),
                "{uncoordinated}"
            );
        } else {
            assert_eq!(uncoordinated, extra);
        }
    }
}
