//! `sluice bench agent`: how long a checkpoint burst takes to be acknowledged through the node
//! agent, against writing and fsyncing the same bytes straight to the same filesystem.
//!
//! Each of `--rounds` rounds measures three things, in an order that rotates from round to
//! round: N concurrent files of SIZE written and fsynced directly (threads, 1 MiB writes,
//! `fsync` per file: the baseline); the same written around the page cache (`O_DIRECT`, from
//! an aligned buffer, 1 MiB writes), which is how the agent writes large bodies and so the
//! device's ceiling for it; and N concurrent PUTs of SIZE to a node agent (one in-process S3
//! client, unsigned payload) until every one is acknowledged. The agent's drain runs meanwhile
//! at `--drain-rate` to a gateway, as it would on a node; both run in this process, fresh for
//! each agent measurement (under `--dir`, which must be new or empty), and are stopped as soon as the burst is
//! acknowledged, so that no drain competes with a later measurement. Before each
//! measurement dirty pages are written back and, as root, the page cache is dropped: each
//! starts with the disk idle, which is what a direct baseline measured right after another
//! 4 GiB of writes does not get. Prints each measurement with the CPU time
//! it cost this process (client, agent, drain and gateway included), then, for the medians
//! and again for each kind's fastest round, the ratio agent / direct (the target) and the
//! ratio agent / `O_DIRECT` (how far the agent is from the device's ceiling for the way it
//! writes). The fastest rounds compare each kind in the memory state that suits it best: on
//! a virtual machine the buffered baseline's time follows the host's memory more than the
//! disk. `--json` writes every measurement and the ratios.
//!
//! With `--local-capacity RATE`, each round also measures the agent with its local scheduler
//! on (`[agent.capacity] bandwidth = RATE`, dmClock, the one tenant alone on the node) and
//! reports scheduled / unscheduled: what scheduling the node's device costs a quiet node.
//!
//! With `--encrypt`, each round also measures the agent with the tenant's bodies encrypted
//! (`[tenant.encryption] key_file`, 32 random bytes written into `--dir`) and reports
//! encrypted / unencrypted (held to <= 1.05), and the encryption's throughput per core: the
//! burst's bytes per CPU-second the encrypted burst took over the unencrypted one, against
//! AES-256-GCM sealing the same 64 KiB segments alone on one thread for about a second in the
//! same round (held to >= 90%; see [`encryption`] for why a difference). It is an option, not
//! always on, because it is a whole extra burst per round (a third more time and writes).

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use object_store::ObjectStoreExt;
use object_store::aws::AmazonS3Builder;
use object_store::path::Path as ObjPath;
use sluice_config::Config;
use sluice_units::{ByteSize, Rate};

mod encryption;

#[derive(clap::Args)]
pub struct AgentArgs {
    /// Working directory (its filesystem is the "local disk" measured): created if absent,
    /// or an existing empty one. A directory that holds anything is refused (the benchmark
    /// deletes what it writes there); after the run it is removed, or emptied if it was there.
    #[arg(long, default_value = "./data/bench")]
    pub dir: PathBuf,
    /// Concurrent objects in the burst.
    #[arg(long, default_value_t = 16)]
    pub objects: usize,
    /// Size of each object.
    #[arg(long, default_value = "256MiB")]
    pub size: ByteSize,
    /// The tenant's drain rate while the burst lands.
    #[arg(long, default_value = "64MiB/s")]
    pub drain_rate: Rate,
    /// Rounds of (direct, `O_DIRECT`, agent); medians and fastest rounds are reported. Five
    /// by default: on a shared machine a median of fewer moves with one odd round.
    #[arg(long, default_value_t = 5)]
    pub rounds: usize,
    /// Also write every measurement and the ratios as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Also measure, in each round, the agent with `[agent.capacity] bandwidth` at this rate
    /// (the node's device scheduled), e.g. what `sluice calibrate --agent` measured.
    #[arg(long)]
    pub local_capacity: Option<Rate>,
    /// Also measure, in each round, the agent with the tenant's bodies encrypted
    /// (`[tenant.encryption]`), and AES-256-GCM alone on one thread.
    #[arg(long)]
    pub encrypt: bool,
}

const CHUNK: usize = 1024 * 1024;
const KEY: &str = "AKIDBENCH0000000001";
const SECRET: &str = "bench-secret-key-0123456789";

fn payload(size: u64) -> Vec<Bytes> {
    let mut block = vec![0u8; CHUNK];
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for b in &mut block {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    let block = Bytes::from(block);
    let mut out = Vec::new();
    let mut left = size;
    while left > 0 {
        let n = left.min(CHUNK as u64);
        out.push(block.slice(..usize::try_from(n).unwrap_or(CHUNK)));
        left -= n;
    }
    out
}

/// What a round measures.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Direct,
    AroundCache,
    Agent,
    /// The agent with `[agent.capacity]` (`--local-capacity`).
    Scheduled,
    /// The agent with the tenant's bodies encrypted (`--encrypt`).
    Encrypted,
}

impl Kind {
    const ALL: [Self; 5] = [
        Self::Direct,
        Self::AroundCache,
        Self::Agent,
        Self::Scheduled,
        Self::Encrypted,
    ];

    fn label(self) -> &'static str {
        match self {
            Self::Direct => "direct write+fsync ",
            Self::AroundCache => "direct, O_DIRECT   ",
            Self::Agent => "through the agent  ",
            Self::Scheduled => "agent, scheduled   ",
            Self::Encrypted => "agent, encrypted   ",
        }
    }
}

/// Writes `objects` files `dir/obj-<i>` at once, one thread each (`write` writes and fsyncs
/// one), then fsyncs `dir`; the time it all took.
fn write_files<W>(dir: &Path, objects: usize, write: W) -> anyhow::Result<Duration>
where
    W: Fn(&Path) -> std::io::Result<()> + Send + Sync + 'static,
{
    std::fs::create_dir_all(dir)?;
    let write = Arc::new(write);
    let start = Instant::now();
    let handles: Vec<_> = (0..objects)
        .map(|i| {
            let path = dir.join(format!("obj-{i}"));
            let write = Arc::clone(&write);
            std::thread::spawn(move || write(&path))
        })
        .collect();
    for h in handles {
        h.join()
            .map_err(|_| anyhow::anyhow!("writer thread panicked"))??;
    }
    std::fs::File::open(dir)?.sync_all()?;
    Ok(start.elapsed())
}

fn direct(dir: &Path, objects: usize, body: &Arc<Vec<Bytes>>) -> anyhow::Result<Duration> {
    let body = Arc::clone(body);
    write_files(dir, objects, move |path| {
        let mut f = std::fs::File::create(path)?;
        for c in body.iter() {
            f.write_all(c)?;
        }
        f.sync_all()
    })
}

/// `objects` files of `size` bytes written around the page cache (`O_DIRECT`, 1 MiB writes
/// from one aligned buffer holding the payload's repeated block) and fsynced, as the agent
/// writes large bodies; `None` if `size` is not a whole number of 4 KiB blocks or the
/// filesystem refuses `O_DIRECT`.
fn around_cache(
    dir: &Path,
    objects: usize,
    size: u64,
    block: &Bytes,
) -> anyhow::Result<Option<Duration>> {
    use std::os::unix::fs::{FileExt as _, OpenOptionsExt as _};
    const ALIGN: usize = 4096;
    if !size.is_multiple_of(ALIGN as u64) || !block.len().is_multiple_of(ALIGN) {
        return Ok(None);
    }
    std::fs::create_dir_all(dir)?;
    let mut raw = vec![0u8; block.len() + ALIGN];
    let start = (ALIGN - raw.as_ptr().addr() % ALIGN) % ALIGN;
    raw[start..start + block.len()].copy_from_slice(block);
    let buf = Arc::new((raw, start, block.len()));
    let open = |path: &Path| {
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .custom_flags(libc::O_DIRECT)
            .open(path)
    };
    match open(&dir.join("probe")) {
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => return Ok(None),
        r => drop(r?),
    }
    std::fs::remove_file(dir.join("probe"))?;
    let took = write_files(dir, objects, move |path| {
        let (raw, at, len) = &*buf;
        let f = open(path)?;
        let mut offset = 0;
        while offset < size {
            let n = (size - offset).min(*len as u64) as usize;
            f.write_all_at(&raw[*at..*at + n], offset)?;
            offset += n as u64;
        }
        f.sync_all()
    })?;
    Ok(Some(took))
}

/// CPU seconds (user + system) this process has used so far (Linux `/proc/self/stat`, in
/// clock ticks of 1/100 s); `None` elsewhere.
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / 100.0)
}

fn cpu_since(start: Option<f64>) -> f64 {
    match (start, cpu_seconds()) {
        (Some(a), Some(b)) => b - a,
        _ => f64::NAN,
    }
}

/// One measurement of one kind.
#[derive(serde::Serialize)]
struct Measured {
    round: usize,
    seconds: f64,
    /// CPU time this process used, per GiB of the burst.
    cpu_s_per_gib: f64,
}

/// A kind's measurements over the rounds.
#[derive(serde::Serialize, Default)]
struct Series {
    rounds: Vec<Measured>,
    median_s: f64,
    fastest_s: f64,
}

impl Series {
    fn push(&mut self, m: Measured) {
        self.rounds.push(m);
        let s: Vec<f64> = self.rounds.iter().map(|m| m.seconds).collect();
        self.median_s = sluice_bench::stats::median(&s);
        self.fastest_s = s.iter().copied().fold(f64::INFINITY, f64::min);
    }
}

/// What `--json` writes.
#[derive(serde::Serialize)]
struct Report {
    objects: usize,
    size_bytes: u64,
    drain_rate_bytes_per_s: f64,
    page_cache_dropped: bool,
    direct: Series,
    /// Absent where the filesystem refuses `O_DIRECT` or the size is not 4 KiB-aligned.
    o_direct: Option<Series>,
    agent: Series,
    /// `--local-capacity`: the scheduled agent's rate and measurements.
    #[serde(skip_serializing_if = "Option::is_none")]
    local_capacity_bytes_per_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    scheduled: Option<Series>,
    /// Scheduled over unscheduled agent, of the medians and of the fastest rounds.
    #[serde(skip_serializing_if = "Option::is_none")]
    ratio_median_scheduled: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ratio_fastest_scheduled: Option<f64>,
    /// `--encrypt`: the agent with the tenant encrypted, encrypted over unencrypted of the
    /// medians and of the fastest rounds, and the encryption's throughput per core.
    #[serde(skip_serializing_if = "Option::is_none")]
    encrypted: Option<Series>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ratio_median_encrypted: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ratio_fastest_encrypted: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    encryption: Option<encryption::Encryption>,
    /// Agent over direct, of the medians (the target) and of each kind's fastest round.
    ratio_median: f64,
    ratio_fastest: f64,
    ratio_median_o_direct: Option<f64>,
    ratio_fastest_o_direct: Option<f64>,
}

impl Report {
    /// Prints the medians and the fastest rounds with their ratios.
    fn print(&self) {
        let o = self.o_direct.as_ref();
        let lines = [
            (
                "median: ",
                self.direct.median_s,
                self.agent.median_s,
                self.ratio_median,
                o.map(|o| o.median_s).zip(self.ratio_median_o_direct),
            ),
            (
                "fastest:",
                self.direct.fastest_s,
                self.agent.fastest_s,
                self.ratio_fastest,
                o.map(|o| o.fastest_s).zip(self.ratio_fastest_o_direct),
            ),
        ];
        for (label, direct, agent, ratio, o_direct) in lines {
            print!(
                "{label} direct {direct:.3} s, agent {agent:.3} s, ratio agent/direct = \
                 {ratio:.3} (target <= 1.15)"
            );
            match o_direct {
                Some((o, r)) => println!("; O_DIRECT {o:.3} s, ratio agent/O_DIRECT = {r:.3}"),
                None => println!(),
            }
        }
        if let (Some(s), Some(m), Some(f)) = (
            &self.scheduled,
            self.ratio_median_scheduled,
            self.ratio_fastest_scheduled,
        ) {
            println!(
                "scheduled (local capacity {}): median {:.3} s, fastest {:.3} s; ratio \
                 scheduled/unscheduled = {m:.3} (median), {f:.3} (fastest) (target <= 1.05)",
                Rate(self.local_capacity_bytes_per_s.unwrap_or(f64::NAN)),
                s.median_s,
                s.fastest_s,
            );
        }
        if let (Some(s), Some(m), Some(f), Some(e)) = (
            &self.encrypted,
            self.ratio_median_encrypted,
            self.ratio_fastest_encrypted,
            &self.encryption,
        ) {
            encryption::print(s, m, f, e);
        }
    }
}

fn config_text(
    dir: &Path,
    upstream: &str,
    capacity: u64,
    drain_rate: f64,
    local: Option<f64>,
    key_file: Option<&Path>,
) -> String {
    let encryption = key_file.map_or_else(String::new, encryption::config);
    let scheduled = local.map_or_else(String::new, |bw| {
        format!("[agent.capacity]\nbandwidth = \"{}B/s\"\n", bw.round())
    });
    format!(
        r#"
[gateway]
listen = "127.0.0.1:0"
data_dir = "{gw}"

[agent]
listen = "127.0.0.1:0"
data_dir = "{ag}"
upstream = "{upstream}"
{scheduled}

[[tenant]]
id = "bench"
access_key = "{KEY}"
secret_key = "{SECRET}"
local_capacity = "{capacity}B"
drain_rate = "{drain_rate}B/s"
{encryption}"#,
        gw = dir.join("gateway").display(),
        ag = dir.join("agent").display(),
    )
}

pub fn agent(args: &AgentArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.objects > 0 && args.size.0 > 0 && args.rounds > 0,
        "nothing to do"
    );
    // Held to the end, whatever happens: what the run wrote goes with it, and nothing else.
    let _scratch = sluice_bench::procs::Scratch::claim("--dir", &args.dir)?;
    let total = args.size.0 * args.objects as u64;
    let body = Arc::new(payload(args.size.0));
    println!(
        "sluice bench agent: {} objects x {} = {} per burst, drain rate {}, {} round(s), dir {}",
        args.objects,
        args.size,
        ByteSize(total),
        args.drain_rate,
        args.rounds,
        args.dir.display()
    );
    let capacity = total * 2;
    let drain_rate = args.drain_rate.0;
    // Absolute: the configurations written under it resolve their paths (data_dir, the
    // tenant's key_file) against their own directory, so a relative --dir would double.
    let dir =
        std::path::absolute(&args.dir).with_context(|| format!("--dir {}", args.dir.display()))?;
    let dropped = sluice_bench::gateway::drop_page_cache();
    println!(
        "before each measurement: dirty pages written back{}",
        if dropped {
            ", page cache dropped"
        } else {
            " (page cache not dropped: not root)"
        }
    );
    let key_file = if args.encrypt {
        Some(encryption::write_key(&dir)?)
    } else {
        None
    };
    let report = super::runtime()?.block_on(async move {
        let (mut directs, mut arounds, mut agents) = (Series::default(), None, Series::default());
        let (mut scheduled, mut encrypted): (Option<Series>, Option<Series>) = (None, None);
        let mut aead = Vec::new();
        let local = args.local_capacity.map(|r| r.0);
        let kinds: Vec<Kind> = Kind::ALL
            .into_iter()
            .filter(|k| *k != Kind::Scheduled || local.is_some())
            .filter(|k| *k != Kind::Encrypted || key_file.is_some())
            .collect();
        for round in 0..args.rounds {
            let round_dir = dir.join(format!("round-{round}"));
            if key_file.is_some() {
                let speed = tokio::task::spawn_blocking(encryption::aead_speed).await??;
                println!(
                    "round {round}: AES-256-GCM alone, one thread: {:.0} MiB per CPU-s",
                    speed / 1_048_576.0
                );
                aead.push(speed);
            }
            // Rotate the order: whichever goes later finds the others' files on disk.
            for k in 0..kinds.len() {
                let kind = kinds[(round + k) % kinds.len()];
                let node = match kind {
                    Kind::Agent => {
                        Some(Node::start(&round_dir, capacity, drain_rate, None, None).await?)
                    }
                    // Its own directory: the unscheduled agent's catalog holds this round's bucket.
                    Kind::Scheduled => Some(
                        Node::start(
                            &round_dir.join("scheduled"),
                            capacity,
                            drain_rate,
                            local,
                            None,
                        )
                        .await?,
                    ),
                    Kind::Encrypted => Some(
                        Node::start(
                            &round_dir.join("encrypted"),
                            capacity,
                            drain_rate,
                            None,
                            key_file.as_deref(),
                        )
                        .await?,
                    ),
                    Kind::Direct | Kind::AroundCache => None,
                };
                sluice_bench::gateway::drop_page_cache();
                let cpu = cpu_seconds();
                let (n, size) = (args.objects, args.size.0);
                let took = match node {
                    Some(node) => {
                        let a = node.burst(round, n, &body).await;
                        let cpu = cpu_since(cpu);
                        // Stopped before anything else is measured: its drain must not compete.
                        node.stop().await;
                        Some((a?, cpu))
                    }
                    None if kind == Kind::AroundCache => {
                        let dir = round_dir.join("around");
                        let block = body[0].clone();
                        tokio::task::spawn_blocking(move || around_cache(&dir, n, size, &block))
                            .await??
                            .map(|d| (d, cpu_since(cpu)))
                    }
                    None => {
                        let dir = round_dir.join("direct");
                        let body = Arc::clone(&body);
                        let d =
                            tokio::task::spawn_blocking(move || direct(&dir, n, &body)).await??;
                        Some((d, cpu_since(cpu)))
                    }
                };
                let Some((took, cpu)) = took else {
                    println!(
                        "round {round}: {} not measured (size not 4 KiB-aligned, or the \
                         filesystem refuses O_DIRECT)",
                        kind.label()
                    );
                    continue;
                };
                let m = Measured {
                    round,
                    seconds: took.as_secs_f64(),
                    cpu_s_per_gib: cpu / (total as f64 / 1_073_741_824.0),
                };
                println!(
                    "round {round}: {} {:>8.3} s  ({:>5.0} MiB/s, {:.2} CPU-s/GiB{})",
                    kind.label(),
                    m.seconds,
                    total as f64 / m.seconds / 1_048_576.0,
                    m.cpu_s_per_gib,
                    if matches!(kind, Kind::Agent | Kind::Scheduled | Kind::Encrypted) {
                        " incl. client, drain and gateway"
                    } else {
                        ""
                    }
                );
                match kind {
                    Kind::Direct => directs.push(m),
                    Kind::AroundCache => arounds.get_or_insert_with(Series::default).push(m),
                    Kind::Agent => agents.push(m),
                    Kind::Scheduled => scheduled.get_or_insert_with(Series::default).push(m),
                    Kind::Encrypted => encrypted.get_or_insert_with(Series::default).push(m),
                }
            }
            std::fs::remove_dir_all(&round_dir)
                .with_context(|| format!("emptying {}", round_dir.display()))?;
        }
        anyhow::Ok(Report {
            objects: args.objects,
            size_bytes: args.size.0,
            drain_rate_bytes_per_s: drain_rate,
            page_cache_dropped: dropped,
            ratio_median: agents.median_s / directs.median_s,
            ratio_fastest: agents.fastest_s / directs.fastest_s,
            ratio_median_o_direct: arounds.as_ref().map(|o| agents.median_s / o.median_s),
            ratio_fastest_o_direct: arounds.as_ref().map(|o| agents.fastest_s / o.fastest_s),
            local_capacity_bytes_per_s: local,
            ratio_median_scheduled: scheduled.as_ref().map(|s| s.median_s / agents.median_s),
            ratio_fastest_scheduled: scheduled.as_ref().map(|s| s.fastest_s / agents.fastest_s),
            scheduled,
            ratio_median_encrypted: encrypted.as_ref().map(|e| e.median_s / agents.median_s),
            ratio_fastest_encrypted: encrypted.as_ref().map(|e| e.fastest_s / agents.fastest_s),
            encryption: encrypted
                .as_ref()
                .map(|e| encryption::Encryption::new(aead, &agents, e, total)),
            encrypted,
            direct: directs,
            o_direct: arounds,
            agent: agents,
        })
    })?;
    report.print();
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// A gateway and a node agent draining to it, in this process.
struct Node {
    gateway: sluice_gateway::Running,
    agent: sluice_agent::Running,
    endpoint: String,
}

impl Node {
    async fn start(
        dir: &Path,
        capacity: u64,
        drain_rate: f64,
        local: Option<f64>,
        key_file: Option<&Path>,
    ) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir)?;
        // The gateway first (its port is the agent's upstream); it stores what it is sent.
        let gw_config = Config::parse(
            &config_text(dir, "http://127.0.0.1:1", capacity, drain_rate, local, None),
            &dir.join("bench.toml"),
        )?;
        let gateway = super::gateway::start(&gw_config).await?;
        let upstream = format!("http://{}", gateway.addr);
        let config = Config::parse(
            &config_text(dir, &upstream, capacity, drain_rate, local, key_file),
            &dir.join("bench.toml"),
        )?;
        let agent = super::agent::start(&config).await?;
        let endpoint = format!("http://{}", agent.addr);
        Ok(Self {
            gateway,
            agent,
            endpoint,
        })
    }

    /// PUTs `objects` copies of `body` at once into a new bucket; the time until the last
    /// is acknowledged.
    async fn burst(
        &self,
        round: usize,
        objects: usize,
        body: &Arc<Vec<Bytes>>,
    ) -> anyhow::Result<Duration> {
        let bucket = format!("burst-{round}");
        create_bucket(&self.endpoint, &bucket).await?;
        let store = Arc::new(
            AmazonS3Builder::new()
                .with_endpoint(&self.endpoint)
                .with_allow_http(true)
                .with_virtual_hosted_style_request(false)
                .with_bucket_name(&bucket)
                .with_region("us-east-1")
                .with_access_key_id(KEY)
                .with_secret_access_key(SECRET)
                .with_unsigned_payload(true)
                .with_client_options(
                    object_store::ClientOptions::new()
                        .with_allow_http(true)
                        .with_timeout(Duration::from_secs(600)),
                )
                .build()?,
        );
        let start = Instant::now();
        let mut puts = tokio::task::JoinSet::new();
        for i in 0..objects {
            let store = Arc::clone(&store);
            let payload: object_store::PutPayload = body.iter().cloned().collect();
            puts.spawn(async move {
                store
                    .put(&ObjPath::from(format!("step/obj-{i}")), payload)
                    .await
            });
        }
        while let Some(r) = puts.join_next().await {
            r??;
        }
        Ok(start.elapsed())
    }

    /// Stops the agent (and its drain, wherever it is: what is left stays journalled) and
    /// the gateway.
    async fn stop(self) {
        self.agent.shutdown().await;
        let _ = self.gateway.stopper().send(true);
        self.gateway.wait().await;
    }
}

/// CreateBucket through the agent: `object_store` has no call for it, so a signed raw PUT.
async fn create_bucket(endpoint: &str, bucket: &str) -> anyhow::Result<()> {
    let url = format!("{endpoint}/{bucket}");
    let (status, body) =
        super::request(http::Method::PUT, &url, Some((KEY, SECRET)), "us-east-1").await?;
    anyhow::ensure!(status.is_success(), "CreateBucket: {status}: {body}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(dir: PathBuf) -> AgentArgs {
        AgentArgs {
            dir,
            objects: 1,
            size: ByteSize(4096),
            drain_rate: Rate(1_048_576.0),
            rounds: 1,
            json: None,
            local_capacity: None,
            encrypt: false,
        }
    }

    fn series(seconds: &[f64], cpu_s_per_gib: f64) -> Series {
        let mut s = Series::default();
        for (round, &seconds) in seconds.iter().enumerate() {
            s.push(Measured {
                round,
                seconds,
                cpu_s_per_gib,
            });
        }
        s
    }

    /// The keys `--json` writes are the ones `sluice bench report` reads: an `--encrypt`
    /// report serialized here renders its encrypted row, ratio and encryption per core.
    #[test]
    fn an_encrypt_report_renders_in_bench_report() {
        use sluice_bench::report::{AGENT, Inputs, Source, figures};
        let total = 1u64 << 30;
        let (direct, agent, encrypted) = (
            series(&[2.0, 2.0], 1.0),
            series(&[2.0, 2.2], 1.0),
            series(&[2.1, 2.3], 1.5),
        );
        let gib = 1_073_741_824.0;
        let report = Report {
            objects: 4,
            size_bytes: total / 4,
            drain_rate_bytes_per_s: 64.0 * 1_048_576.0,
            page_cache_dropped: false,
            ratio_median: agent.median_s / direct.median_s,
            ratio_fastest: agent.fastest_s / direct.fastest_s,
            ratio_median_o_direct: None,
            ratio_fastest_o_direct: None,
            o_direct: None,
            local_capacity_bytes_per_s: None,
            scheduled: None,
            ratio_median_scheduled: None,
            ratio_fastest_scheduled: None,
            ratio_median_encrypted: Some(encrypted.median_s / agent.median_s),
            ratio_fastest_encrypted: Some(encrypted.fastest_s / agent.fastest_s),
            // 0.5 CPU-s more for 1 GiB is 2 GiB/s, half of 4 GiB/s.
            encryption: Some(encryption::Encryption::new(
                vec![4.0 * gib, 4.0 * gib],
                &agent,
                &encrypted,
                total,
            )),
            encrypted: Some(encrypted),
            direct,
            agent,
        };
        let none = |path: &str| Source {
            path: path.to_owned(),
            json: None,
        };
        let inputs = Inputs {
            gateway: none("g.json"),
            agent: Source {
                path: "a.json".to_owned(),
                json: Some(serde_json::to_value(&report).expect("serializes")),
            },
            noisy: none("n.json"),
        };
        let sections = figures(&inputs).expect("renders");
        let md = &sections.iter().find(|(n, _)| *n == AGENT).expect("agent").1;
        for row in [
            "--rounds 2 --encrypt --json a.json`",
            "| through the agent, encrypted | 2.10 / 2.30 | 2.20 s | 2.10 s | 465 | 1.50 |",
            "| agent encrypted (`[tenant.encryption]`) / unencrypted | 1.048 | 1.050 |",
            "(64 KiB segments sealed on one thread, median of the rounds) | 4,096 MiB/s |",
            "(median 0.50 CPU-s more) | 2,048 MiB/s |",
            "| agent / AES-256-GCM alone | 0.500 |",
        ] {
            assert!(md.contains(row), "{row}: {md}");
        }
    }

    #[test]
    fn a_dir_that_holds_an_agents_data_is_refused_and_left_intact() {
        let root = tempfile::tempdir().expect("temp dir");
        let data = root.path().join("sluice");
        std::fs::create_dir_all(data.join("agent/journal")).expect("dirs");
        std::fs::write(data.join("agent/journal/0001"), "acknowledged").expect("file");
        let err = agent(&args(data.clone())).expect_err("refused");
        assert_eq!(
            err.to_string(),
            format!(
                "--dir {} is not empty: pick an empty or new directory; the benchmark deletes \
                 what it writes there",
                data.display()
            )
        );
        assert_eq!(
            std::fs::read_to_string(data.join("agent/journal/0001")).expect("still there"),
            "acknowledged"
        );
    }
}
