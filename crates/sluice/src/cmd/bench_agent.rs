//! `sluice bench agent`: how long a checkpoint burst takes to be acknowledged through the node
//! agent, against writing and fsyncing the same bytes straight to the same filesystem.
//!
//! One run starts a gateway and an agent in-process on loopback (data under `--dir`), then
//! for `--rounds` rounds: N concurrent files of SIZE written and fsynced directly (threads,
//! 1 MiB writes, `fsync` per file), then N concurrent PUTs of SIZE to the agent (one S3 client,
//! unsigned payload) until every one is acknowledged. The agent's drain runs meanwhile at
//! `--drain-rate`, as it would on a node. Prints the configuration, each measurement with the
//! CPU time it cost this process (the S3 client runs in-process too), the medians and the
//! ratio agent / direct.

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

#[derive(clap::Args)]
pub struct AgentArgs {
    /// Working directory (its filesystem is the "local disk" measured); emptied first.
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
    /// Rounds of (direct, agent); medians are reported.
    #[arg(long, default_value_t = 1)]
    pub rounds: usize,
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

fn direct(dir: &Path, objects: usize, body: &Arc<Vec<Bytes>>) -> anyhow::Result<Duration> {
    std::fs::create_dir_all(dir)?;
    let start = Instant::now();
    let handles: Vec<_> = (0..objects)
        .map(|i| {
            let path = dir.join(format!("obj-{i}"));
            let body = Arc::clone(body);
            std::thread::spawn(move || -> std::io::Result<()> {
                let mut f = std::fs::File::create(&path)?;
                for c in body.iter() {
                    f.write_all(c)?;
                }
                f.sync_all()
            })
        })
        .collect();
    for h in handles {
        h.join()
            .map_err(|_| anyhow::anyhow!("writer thread panicked"))??;
    }
    std::fs::File::open(dir)?.sync_all()?;
    Ok(start.elapsed())
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

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn config_text(dir: &Path, upstream: &str, capacity: u64, drain_rate: f64) -> String {
    format!(
        r#"
[gateway]
listen = "127.0.0.1:0"
data_dir = "{gw}"

[agent]
listen = "127.0.0.1:0"
data_dir = "{ag}"
upstream = "{upstream}"

[[tenant]]
id = "bench"
access_key = "{KEY}"
secret_key = "{SECRET}"
local_capacity = "{capacity}B"
drain_rate = "{drain_rate}B/s"
"#,
        gw = dir.join("gateway").display(),
        ag = dir.join("agent").display(),
    )
}

pub fn agent(args: &AgentArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.objects > 0 && args.size.0 > 0 && args.rounds > 0,
        "nothing to do"
    );
    if args.dir.exists() {
        std::fs::remove_dir_all(&args.dir)
            .with_context(|| format!("emptying {}", args.dir.display()))?;
    }
    std::fs::create_dir_all(&args.dir)?;
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
    let capacity = total * (args.rounds as u64 + 1);
    let drain_rate = args.drain_rate.0;
    let dir = args.dir.clone();
    super::runtime()?.block_on(async move {
        // The gateway first (its port is the agent's upstream).
        let gw_config = Config::parse(
            &config_text(&dir, "http://127.0.0.1:1", capacity, drain_rate),
            &dir.join("bench.toml"),
        )?;
        let gateway = super::gateway::start(&gw_config).await?;
        let upstream = format!("http://{}", gateway.addr);
        let config = Config::parse(
            &config_text(&dir, &upstream, capacity, drain_rate),
            &dir.join("bench.toml"),
        )?;
        let agent = super::agent::start(&config).await?;
        let endpoint = format!("http://{}", agent.addr);
        let client = |bucket: &str| {
            AmazonS3Builder::new()
                .with_endpoint(&endpoint)
                .with_allow_http(true)
                .with_virtual_hosted_style_request(false)
                .with_bucket_name(bucket)
                .with_region("us-east-1")
                .with_access_key_id(KEY)
                .with_secret_access_key(SECRET)
                .with_unsigned_payload(true)
                .with_client_options(
                    object_store::ClientOptions::new()
                        .with_allow_http(true)
                        .with_timeout(Duration::from_secs(600)),
                )
                .build()
        };
        let mut directs = Vec::new();
        let mut agents = Vec::new();
        for round in 0..args.rounds {
            let cpu = cpu_seconds();
            let d = {
                let dir = dir.join(format!("direct-{round}"));
                let body = Arc::clone(&body);
                let n = args.objects;
                tokio::task::spawn_blocking(move || direct(&dir, n, &body)).await??
            };
            println!(
                "round {round}: direct write+fsync {:>8.3} s  ({:>5.0} MiB/s, {:.2} CPU-s/GiB)",
                d.as_secs_f64(),
                total as f64 / d.as_secs_f64() / 1_048_576.0,
                cpu_since(cpu) / (total as f64 / 1_073_741_824.0)
            );
            directs.push(d);
            let bucket = format!("burst-{round}");
            create_bucket(&endpoint, &bucket).await?;
            let store = Arc::new(client(&bucket)?);
            let cpu = cpu_seconds();
            let start = Instant::now();
            let mut puts = tokio::task::JoinSet::new();
            for i in 0..args.objects {
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
            let a = start.elapsed();
            println!(
                "round {round}: through the agent    {:>8.3} s  ({:>5.0} MiB/s, {:.2} CPU-s/GiB incl. client and drain)",
                a.as_secs_f64(),
                total as f64 / a.as_secs_f64() / 1_048_576.0,
                cpu_since(cpu) / (total as f64 / 1_073_741_824.0)
            );
            agents.push(a);
        }
        let (d, a) = (median(&mut directs), median(&mut agents));
        println!(
            "median: direct {:.3} s, agent {:.3} s, ratio agent/direct = {:.3} (target <= 1.15)",
            d.as_secs_f64(),
            a.as_secs_f64(),
            a.as_secs_f64() / d.as_secs_f64()
        );
        agent.shutdown().await;
        let _ = gateway.stopper().send(true);
        gateway.wait().await;
        anyhow::Ok(())
    })?;
    Ok(())
}

/// CreateBucket through the agent: `object_store` has no call for it, so a signed raw PUT.
async fn create_bucket(endpoint: &str, bucket: &str) -> anyhow::Result<()> {
    use object_store::aws::{AwsAuthorizer, AwsCredential};
    use object_store::client::{HttpConnector, HttpRequestBody, ReqwestConnector};
    let cred = AwsCredential {
        key_id: KEY.to_owned(),
        secret_key: SECRET.to_owned(),
        token: None,
    };
    let mut req = http::Request::builder()
        .method(http::Method::PUT)
        .uri(format!("{endpoint}/{bucket}"))
        .body(HttpRequestBody::from(Bytes::new()))?;
    AwsAuthorizer::new(&cred, "s3", "us-east-1").try_authorize(&mut req, None)?;
    let http = ReqwestConnector::default()
        .connect(&object_store::ClientOptions::new().with_allow_http(true))?;
    let resp = http.execute(req).await?;
    anyhow::ensure!(
        resp.status().is_success(),
        "CreateBucket: {}",
        resp.status()
    );
    Ok(())
}
