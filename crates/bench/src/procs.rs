//! Child processes on loopback for benchmarks: a sluice gateway, a node agent and SeaweedFS.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::BenchError;

/// A benchmark's working directory: emptied when created, removed when dropped. Declared
/// before the servers that use it, it is dropped after them, so an error anywhere still stops
/// them and then removes their data.
pub struct Scratch(PathBuf);

impl Scratch {
    pub fn create(dir: &Path) -> Result<Self, BenchError> {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir)?;
        Ok(Self(dir.to_path_buf()))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn free_port() -> Result<u16, BenchError> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

pub fn wait_for_port(port: u16, child: &mut Child, timeout: Duration) -> Result<(), BenchError> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait()? {
            return Err(BenchError::Setup(format!(
                "process exited ({status}) before listening on {port}"
            )));
        }
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(BenchError::Setup(format!(
        "nothing listened on {port} within {timeout:?}"
    )))
}

/// A child process killed on drop.
pub struct Proc {
    pub child: Child,
    pub port: u16,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Samples a process's resident memory (VmRSS) every 100 ms until dropped.
pub struct RssSampler {
    stop: Arc<AtomicBool>,
    peak: Arc<AtomicU64>,
    last: Arc<AtomicU64>,
    handle: Option<std::thread::JoinHandle<()>>,
}

pub fn rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

impl RssSampler {
    pub fn start(pid: u32) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let peak = Arc::new(AtomicU64::new(0));
        let last = Arc::new(AtomicU64::new(0));
        let (s, p, l) = (Arc::clone(&stop), Arc::clone(&peak), Arc::clone(&last));
        let handle = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                if let Some(rss) = rss_bytes(pid) {
                    p.fetch_max(rss, Ordering::Relaxed);
                    l.store(rss, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        Self {
            stop,
            peak,
            last,
            handle: Some(handle),
        }
    }

    pub fn peak(&self) -> u64 {
        self.peak.load(Ordering::Relaxed)
    }

    pub fn last(&self) -> u64 {
        self.last.load(Ordering::Relaxed)
    }
}

impl Drop for RssSampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// Credentials the benchmark's tenant uses.
pub const ACCESS_KEY: &str = "AKIDBENCH000000TEST";
pub const SECRET_KEY: &str = "bench-secret-0123456789";

/// Starts `sluice gateway` on a free port with one tenant `bench` owning `bucket`. `extra`
/// is appended to the `[gateway]` table (e.g. a `[gateway.capacity]` section).
pub fn start_gateway(
    sluice: &Path,
    dir: &Path,
    bucket: &str,
    extra: &str,
    tenants_toml: &str,
) -> Result<Proc, BenchError> {
    std::fs::create_dir_all(dir)?;
    let port = free_port()?;
    let config = dir.join("sluice.toml");
    std::fs::write(
        &config,
        format!(
            "[gateway]\nlisten = \"127.0.0.1:{port}\"\ndata_dir = \"{}\"\n{extra}\n\
             [[tenant]]\nid = \"bench\"\naccess_key = \"{ACCESS_KEY}\"\nsecret_key = \"{SECRET_KEY}\"\n{tenants_toml}",
            dir.join("data").display()
        ),
    )?;
    // The bucket is made in the catalog before the gateway opens it (and locks the file).
    {
        let data = dir.join("data");
        std::fs::create_dir_all(&data)?;
        let (catalog, _) = sluice_meta::Catalog::open(&data.join("meta.redb"))
            .map_err(|e| BenchError::Setup(e.to_string()))?;
        for b in bucket.split(',') {
            for tenant in tenant_ids(tenants_toml) {
                let _ = catalog.create_bucket(&tenant, b, 0);
            }
        }
    }
    serve(Command::new(sluice), "gateway", &config, dir, port)
}

/// Runs `cmd <role> --config <config>` with its log in `dir/<role>.log` until it listens on
/// `port`.
fn serve(
    mut cmd: Command,
    role: &str,
    config: &Path,
    dir: &Path,
    port: u16,
) -> Result<Proc, BenchError> {
    let log = std::fs::File::create(dir.join(format!("{role}.log")))?;
    let mut child = cmd
        .args([role, "--config"])
        .arg(config)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()?;
    wait_for_port(port, &mut child, Duration::from_secs(30))?;
    Ok(Proc { child, port })
}

/// Starts `sluice agent` on a free port, draining to `upstream`, with `tenants_toml` (its
/// `[[tenant]]` entries, keys included).
pub fn start_agent(
    sluice: &Path,
    dir: &Path,
    upstream: &str,
    tenants_toml: &str,
) -> Result<Proc, BenchError> {
    std::fs::create_dir_all(dir)?;
    let port = free_port()?;
    let config = dir.join("agent.toml");
    std::fs::write(
        &config,
        format!(
            "[agent]\nlisten = \"127.0.0.1:{port}\"\ndata_dir = \"{}\"\nupstream = \"{upstream}\"\n\n{tenants_toml}",
            dir.join("data").display()
        ),
    )?;
    // At the lowest CPU priority: on a cluster the agent runs on the trainer's node, not on
    // the machine that serves the shared tier; here they share two cores.
    let mut nice = Command::new("nice");
    nice.args(["-n", "19"]).arg(sluice);
    serve(nice, "agent", &config, dir, port)
}

fn tenant_ids(tenants_toml: &str) -> Vec<String> {
    let mut ids = vec!["bench".to_owned()];
    for line in tenants_toml.lines() {
        if let Some(v) = line.trim().strip_prefix("id = ") {
            ids.push(v.trim_matches('"').to_owned());
        }
    }
    ids
}

/// Finds the `weed` binary: `$SLUICE_WEED`, `PATH`, or `./.venv/bin/weed`.
pub fn find_weed() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("SLUICE_WEED") {
        return Some(PathBuf::from(p));
    }
    let in_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join("weed"))
            .find(|p| p.exists())
    });
    in_path.or_else(|| PathBuf::from(".venv/bin/weed").canonicalize().ok())
}

/// Starts SeaweedFS (`weed mini`, telemetry off, loopback only) with `bucket` created.
pub fn start_seaweedfs(weed: &Path, dir: &Path, bucket: &str) -> Result<Proc, BenchError> {
    let weed = &weed.canonicalize()?;
    std::fs::create_dir_all(dir.join("data"))?;
    let conf = dir.join("s3.json");
    std::fs::write(
        &conf,
        format!(
            "{{\"identities\":[{{\"name\":\"bench\",\"credentials\":[{{\"accessKey\":\"{ACCESS_KEY}\",\"secretKey\":\"{SECRET_KEY}\"}}],\"actions\":[\"Admin\",\"Read\",\"List\",\"Tagging\",\"Write\"]}}]}}"
        ),
    )?;
    let s3 = free_port()?;
    let master = free_port()?;
    let log = std::fs::File::create(dir.join("weed.log"))?;
    let mut child = Command::new(weed)
        .arg("mini")
        .arg(format!("-dir={}", dir.join("data").display()))
        .args([
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            "-master.telemetry=false",
            "-webdav=false",
            "-admin.ui=false",
        ])
        .arg(format!("-s3.config={}", conf.display()))
        .arg(format!("-s3.port={s3}"))
        .arg(format!("-master.port={master}"))
        .arg(format!("-volume.port={}", free_port()?))
        .arg(format!("-filer.port={}", free_port()?))
        .arg(format!("-s3.port.iceberg={}", free_port()?))
        .arg(format!("-debug.port={}", free_port()?))
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()?;
    wait_for_port(s3, &mut child, Duration::from_secs(60))?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = Command::new(weed)
            .args(["shell", &format!("-master=127.0.0.1:{master}")])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .and_then(|mut c| {
                use std::io::Write;
                if let Some(stdin) = c.stdin.as_mut() {
                    stdin
                        .write_all(format!("s3.bucket.create -name {bucket}\nexit\n").as_bytes())?;
                }
                c.wait_with_output()
            })?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        if out.status.success() && !text.contains("error") || text.contains("already exist") {
            break;
        }
        if Instant::now() > deadline {
            return Err(BenchError::Setup(format!(
                "creating the SeaweedFS bucket: {text}"
            )));
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    Ok(Proc { child, port: s3 })
}
