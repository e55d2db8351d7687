//! The shared-tier gateway benchmark: large-object throughput and small-object operations
//! through the gateway, plain and over TLS (a second gateway with a throwaway private CA's
//! certificate: GET bodies then take the ordinary body path, not sendfile), against the same
//! work on the local filesystem directly and against SeaweedFS, in one run; and the gateway's
//! memory while it moves the data.
//!
//! Where PostgreSQL is installed (see `postgres`), a third gateway runs beside them on a
//! shared PostgreSQL catalog instead of its embedded redb one, over the same kind of backend
//! (the local filesystem, on the same disk), so that only the catalog differs; the report
//! gives its figures over the redb gateway's, from the same rounds (`pg_vs_redb`). After the
//! rounds, the aggregate run (see `aggregate`) puts 1, 2 and 3 gateways on one PostgreSQL
//! catalog and one backend.
//!
//! The filesystem baseline does what the gateway must do for durability: write each object's
//! bytes and fsync them (the gateway also fsyncs the directory and commits its catalog). The
//! page cache is dropped before each read phase (as root), so reads are disk reads for every
//! target, as on a tier that holds more than memory.
//!
//! A shared virtual disk drifts by tens of percent within minutes, and reads right after a
//! target's own writes can still be served by the host's cache under the virtual disk. So
//! the measurement runs in `rounds` rounds; each round writes (or overwrites) the objects on
//! every target, then reads them back; every figure is the median of a target's rounds:
//! ratios compare work done side by side, not minutes apart. The large writes and reads of a
//! round are both interleaved finely, in the same slices: every target writes a slice of the
//! objects in turn, slice after slice; then the page cache is dropped once, and every target
//! reads a slice in turn, slice after slice. So every slice a target reads was written at the
//! same point of the round as the other targets' same slice, with as much written after it:
//! whatever the host still caches of a round's writes, it caches of every target alike.
//! Written target after target (as before), the last target written had gigabytes fewer
//! written after its objects than the first, and its reads came from the host's cache more
//! often: the full run's first slices read at up to three times the speed of its middle
//! ones, and which target they favoured moved with the order of the writes.
//! Whole phases of one target after another put the gateway anywhere from 61% to 138% of the
//! filesystem on this machine, because the cost of the guest's memory changes within a
//! phase (the first gigabytes of page cache after a drop come cheap, then every new page
//! costs the host a fault): whichever target read during the cheap part looked fast. A
//! server's memory is sampled from its start to the end.
//!
//! With `SLUICE_BENCH_BASELINE` set to another `sluice` binary, a gateway of that build runs
//! beside the plain one as one more target ([`BASELINE_TARGET`]), in the same rounds and
//! slices: a change to the gateway is measured against the code before it in one run, on a
//! machine whose speed drifts between runs.

use std::ops::Range;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use serde::Serialize;

use crate::BenchError;
use crate::client::S3Client;
use crate::procs::{self, ACCESS_KEY, RssSampler, SECRET_KEY, Scratch};
use crate::stats::{Latencies, median, quantile};

#[derive(Debug, Clone, Serialize)]
pub struct Config {
    pub large_objects: usize,
    pub large_size: usize,
    pub large_concurrency: usize,
    /// Large objects read on one target before the next target reads as many (see
    /// `read_large_interleaved`).
    pub large_slice: usize,
    pub small_objects: usize,
    pub small_size: usize,
    pub small_concurrency: usize,
    /// Interleaved rounds of the whole measurement (see the module doc).
    pub rounds: usize,
    #[serde(skip)]
    pub workdir: PathBuf,
    #[serde(skip)]
    pub sluice: PathBuf,
    #[serde(skip)]
    pub weed: Option<PathBuf>,
    /// The directory of PostgreSQL's `initdb` and `postgres`, for the shared-catalog target
    /// and the aggregate run; `None` skips both.
    #[serde(skip)]
    pub postgres: Option<PathBuf>,
}

impl Config {
    pub fn full(workdir: PathBuf, sluice: PathBuf, weed: Option<PathBuf>) -> Self {
        Self::with_postgres(workdir, sluice, weed, None)
    }

    pub fn with_postgres(
        workdir: PathBuf,
        sluice: PathBuf,
        weed: Option<PathBuf>,
        postgres: Option<PathBuf>,
    ) -> Self {
        Self {
            large_objects: 80,
            large_size: 64 << 20,
            large_concurrency: 4,
            large_slice: 8,
            small_objects: 4000,
            small_size: 4096,
            small_concurrency: 16,
            rounds: 3,
            workdir,
            sluice,
            weed,
            postgres,
        }
    }

    #[must_use]
    pub fn quick(mut self) -> Self {
        self.large_objects = 8;
        self.large_slice = 4;
        self.small_objects = 400;
        self.rounds = 1;
        self
    }
}

/// One target's figures.
#[derive(Debug, Clone, Serialize)]
pub struct TargetResult {
    pub name: String,
    /// Medians over the rounds; each round's figures are in `rounds`.
    pub put_mib_s: f64,
    pub get_mib_s: f64,
    pub small_put_ops_s: f64,
    pub small_get_ops_s: f64,
    pub small_put_p50_s: f64,
    pub small_put_p99_s: f64,
    pub small_put_p999_s: f64,
    pub small_get_p99_s: f64,
    /// Resident memory of the server process: at start, peak while moving data, at the end.
    pub rss_start_bytes: Option<u64>,
    pub rss_peak_bytes: Option<u64>,
    pub rss_end_bytes: Option<u64>,
    /// Reads came from the disk (the page cache was dropped before each read phase).
    pub cold_reads: bool,
    /// `[put_mib_s, get_mib_s, small_put_ops_s, small_get_ops_s]` of each round.
    pub rounds: Vec<[f64; 4]>,
    /// Seconds each slice of the large reads took, per round (see `read_large_interleaved`).
    pub large_get_slices_s: Vec<Vec<f64>>,
    /// Seconds each slice of the large writes took, per round (see
    /// `write_large_interleaved`).
    pub large_put_slices_s: Vec<Vec<f64>>,
    /// Requests its client sent a second time, their first attempt unanswered (see
    /// [`S3Client::put`]).
    pub client_retries: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub config: Config,
    pub bytes_moved_per_target: u64,
    pub targets: Vec<TargetResult>,
    /// `postgres --version` of the server the shared-catalog targets ran on; `None`: skipped.
    pub postgres: Option<String>,
    /// The gateway on the PostgreSQL catalog over the gateway on the embedded (redb) one, in
    /// this run.
    pub pg_vs_redb: Option<Ratios>,
    /// 1, 2 and 3 gateways on one PostgreSQL catalog (see `aggregate`).
    pub aggregate: Option<crate::aggregate::Report>,
}

/// One target's figures over another's, measured in the same run.
#[derive(Debug, Clone, Serialize)]
pub struct Ratios {
    /// Of the medians.
    pub put_mib_s: f64,
    pub get_mib_s: f64,
    pub small_put_ops_s: f64,
    pub small_get_ops_s: f64,
    /// Each round's, `[put_mib_s, get_mib_s, small_put_ops_s, small_get_ops_s]`: the two
    /// targets ran side by side in every round.
    pub rounds: Vec<[f64; 4]>,
}

impl Ratios {
    pub fn of(t: &TargetResult, base: &TargetResult) -> Self {
        Self {
            put_mib_s: t.put_mib_s / base.put_mib_s,
            get_mib_s: t.get_mib_s / base.get_mib_s,
            small_put_ops_s: t.small_put_ops_s / base.small_put_ops_s,
            small_get_ops_s: t.small_get_ops_s / base.small_get_ops_s,
            rounds: t
                .rounds
                .iter()
                .zip(&base.rounds)
                .map(|(a, b)| std::array::from_fn(|i| a[i] / b[i]))
                .collect(),
        }
    }
}

/// The work, against some place that stores objects.
trait Target: Send + Sync {
    async fn put(&self, key: String, body: Bytes) -> Result<(), BenchError>;
    async fn get(&self, key: String) -> Result<u64, BenchError>;
}

struct Fs(PathBuf);

impl Target for Fs {
    async fn put(&self, key: String, body: Bytes) -> Result<(), BenchError> {
        let path = self.0.join(key);
        tokio::task::spawn_blocking(move || -> std::io::Result<()> {
            use std::io::Write;
            let mut f = std::fs::File::create(&path)?;
            f.write_all(&body)?;
            f.sync_all()
        })
        .await
        .map_err(|e| BenchError::Setup(e.to_string()))??;
        Ok(())
    }

    async fn get(&self, key: String) -> Result<u64, BenchError> {
        let path = self.0.join(key);
        let n = tokio::task::spawn_blocking(move || -> std::io::Result<u64> {
            use std::io::Read;
            // One buffer per reading thread, as a reader of many files would keep: a fresh
            // zeroed 4 MiB per file held the filesystem's 4 KiB GETs to a tenth of their rate.
            thread_local! {
                static BUF: std::cell::RefCell<Vec<u8>> =
                    std::cell::RefCell::new(vec![0u8; 4 << 20]);
            }
            let mut f = std::fs::File::open(&path)?;
            BUF.with_borrow_mut(|buf| {
                let mut n = 0;
                loop {
                    let r = f.read(buf)?;
                    if r == 0 {
                        return Ok(n);
                    }
                    n += r as u64;
                }
            })
        })
        .await
        .map_err(|e| BenchError::Setup(e.to_string()))??;
        Ok(n)
    }
}

impl Target for S3Client {
    async fn put(&self, key: String, body: Bytes) -> Result<(), BenchError> {
        S3Client::put(self, &key, body).await
    }

    async fn get(&self, key: String) -> Result<u64, BenchError> {
        S3Client::get(self, &key).await
    }
}

/// Deterministic incompressible-looking bytes (xorshift), so no layer can shortcut them.
pub fn payload(len: usize, seed: u64) -> Bytes {
    let mut x = seed | 1;
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(len);
    Bytes::from(v)
}

/// The name of the gateway over TLS in the report.
pub const TLS_TARGET: &str = "sluice gateway (TLS)";
/// The gateway on the embedded (redb) catalog.
pub const REDB_TARGET: &str = "sluice gateway";
/// The gateway on the shared PostgreSQL catalog.
pub const PG_TARGET: &str = "sluice gateway (PostgreSQL catalog)";
/// The gateway of another build (`SLUICE_BENCH_BASELINE`), beside the plain one.
pub const BASELINE_TARGET: &str = "sluice gateway (baseline build)";
/// The width of a target's name in the terminal's tables.
const NAME_WIDTH: usize = 36;

/// Writes a throwaway CA's certificate for `127.0.0.1` (`cert.pem`, `key.pem`) into `dir`, for
/// the TLS target; returns the CA's certificate (PEM), which its client trusts.
fn throwaway_certificate(dir: &std::path::Path) -> Result<String, BenchError> {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let failed = |e: rcgen::Error| BenchError::Setup(format!("a throwaway certificate: {e}"));
    std::fs::create_dir_all(dir)?;
    let ca_key = KeyPair::generate().map_err(failed)?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(failed)?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).map_err(failed)?;
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().map_err(failed)?;
    let cert = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
        .map_err(failed)?
        .signed_by(&key, &issuer)
        .map_err(failed)?;
    std::fs::write(dir.join("cert.pem"), cert.pem())?;
    std::fs::write(dir.join("key.pem"), key.serialize_pem())?;
    Ok(ca.pem())
}

/// Runs `n` operations with `concurrency` in flight; returns the wall time and latencies.
pub(crate) async fn run_ops<F, Fut>(
    n: usize,
    concurrency: usize,
    op: F,
) -> Result<(Duration, Latencies), BenchError>
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = Result<(), BenchError>>,
{
    let started = Instant::now();
    let mut lat = Latencies::default();
    let mut ops = futures::stream::iter(0..n)
        .map(|i| {
            let f = op(i);
            async move {
                let t = Instant::now();
                f.await.map(|()| t.elapsed())
            }
        })
        .buffer_unordered(concurrency);
    while let Some(r) = ops.next().await {
        lat.record(r?);
    }
    Ok((started.elapsed(), lat))
}

/// Reads the large objects `objects` back (checking their lengths); returns the time it took.
async fn read_large<T: Target>(
    name: &str,
    target: &T,
    cfg: &Config,
    objects: Range<usize>,
) -> Result<Duration, BenchError> {
    let first = objects.start;
    let (get_time, _) = run_ops(objects.len(), cfg.large_concurrency, |i| async move {
        let i = first + i;
        let n = target.get(format!("large-{i}")).await?;
        if n != cfg.large_size as u64 {
            return Err(BenchError::Setup(format!(
                "{name}: large-{i} read {n} bytes"
            )));
        }
        Ok(())
    })
    .await?;
    Ok(get_time)
}

/// What a round's write phase measured.
struct Writes {
    put_mib_s: f64,
    /// Seconds each slice of the large writes took.
    slices_s: Vec<f64>,
    small_put_ops_s: f64,
    small_put: Latencies,
}

/// What a round's large reads measured on one target.
struct LargeReads {
    get_mib_s: f64,
    /// Seconds each slice took.
    slices_s: Vec<f64>,
    /// The page cache was dropped first.
    cold: bool,
}

/// What a round's small reads measured on one target.
struct Reads {
    small_get_ops_s: f64,
    small_get: Latencies,
}

/// Writes (or overwrites) the large objects `objects`; returns the time it took.
async fn write_large<T: Target>(
    target: &T,
    cfg: &Config,
    objects: Range<usize>,
) -> Result<Duration, BenchError> {
    let large = payload(cfg.large_size, 42);
    let first = objects.start;
    let (put_time, _) = run_ops(objects.len(), cfg.large_concurrency, |i| {
        target.put(format!("large-{}", first + i), large.clone())
    })
    .await?;
    Ok(put_time)
}

/// Writes (or overwrites) every small object; returns their rate and latencies.
async fn write_small<T: Target>(target: &T, cfg: &Config) -> Result<(f64, Latencies), BenchError> {
    let small = payload(cfg.small_size, 7);
    let (sput_time, small_put) = run_ops(cfg.small_objects, cfg.small_concurrency, |i| {
        target.put(format!("small-{i}"), small.clone())
    })
    .await?;
    Ok((
        cfg.small_objects as f64 / sput_time.as_secs_f64(),
        small_put,
    ))
}

/// The slices of the large objects: [`Config::large_slice`] objects each.
fn slices_of(cfg: &Config) -> impl Iterator<Item = Range<usize>> {
    let step = cfg.large_slice.max(1);
    let n = cfg.large_objects;
    (0..n)
        .step_by(step)
        .map(move |first| first..(first + step).min(n))
}

/// Every target's large writes of a round, interleaved as the reads are (see
/// [`read_large_interleaved`]): each slice on every target in turn, the order rotating from
/// slice to slice, so that every target's slice has the same writes after it. Returns the
/// seconds each target's slices took, in `live`'s order.
async fn write_large_interleaved(
    live: &[(&str, Live)],
    order: &[usize],
    cfg: &Config,
) -> Result<Vec<Vec<f64>>, BenchError> {
    let mut took = vec![Vec::new(); live.len()];
    for (s, objects) in slices_of(cfg).enumerate() {
        for k in 0..order.len() {
            let i = order[(k + s) % order.len()];
            let t = live[i].1.write_large(cfg, objects.clone()).await?;
            took[i].push(t.as_secs_f64());
        }
    }
    Ok(took)
}

/// Reads every small object, from a dropped page cache.
async fn read_small<T: Target>(target: &T, cfg: &Config) -> Result<Reads, BenchError> {
    drop_page_cache();
    let (sget_time, small_get) =
        run_ops(cfg.small_objects, cfg.small_concurrency, |i| async move {
            target.get(format!("small-{i}")).await.map(|_| ())
        })
        .await?;
    Ok(Reads {
        small_get_ops_s: cfg.small_objects as f64 / sget_time.as_secs_f64(),
        small_get,
    })
}

/// Every target's large reads of a round, interleaved: the page cache is dropped once, then
/// the objects are read in slices of [`Config::large_slice`], each slice on every target in
/// turn (the order rotating from slice to slice), so that a drift of the disk or of the
/// machine's memory weighs on every target alike. Returns each target's reads, in `live`'s
/// order.
async fn read_large_interleaved(
    live: &[(&str, Live)],
    order: &[usize],
    cfg: &Config,
) -> Result<Vec<LargeReads>, BenchError> {
    let cold = drop_page_cache();
    let mut slices = vec![Vec::new(); live.len()];
    for (s, objects) in slices_of(cfg).enumerate() {
        for k in 0..order.len() {
            let i = order[(k + s) % order.len()];
            let (name, target) = &live[i];
            let took = target.read_large(name, cfg, objects.clone()).await?;
            slices[i].push(took.as_secs_f64());
        }
    }
    let mib = (cfg.large_objects * cfg.large_size) as f64 / (1024.0 * 1024.0);
    Ok(slices
        .into_iter()
        .map(|s| LargeReads {
            get_mib_s: mib / s.iter().sum::<f64>(),
            slices_s: s,
            cold,
        })
        .collect())
}

/// Writes back dirty pages and empties the page cache, so that every target's reads come
/// from the disk, as they do when a tier holds more than memory, and every target's writes
/// start with no earlier writeback in progress. Needs root for the drop; returns whether it
/// worked (if not, reads are warm for every target alike).
pub fn drop_page_cache() -> bool {
    let synced = std::process::Command::new("sync")
        .status()
        .is_ok_and(|s| s.success());
    synced && std::fs::write("/proc/sys/vm/drop_caches", "3\n").is_ok()
}

/// A target, alive for all the rounds; a server's memory is sampled from its start to the end.
enum Live {
    Fs(Fs),
    S3 {
        client: S3Client,
        rss_start: Option<u64>,
        sampler: RssSampler,
        /// Killed on drop, after the sampler.
        server: procs::Proc,
        /// The server's log.
        log: PathBuf,
    },
}

impl Live {
    fn server(client: S3Client, server: procs::Proc, log: PathBuf) -> Self {
        let pid = server.child.id();
        Self::S3 {
            client,
            rss_start: procs::rss_bytes(pid),
            sampler: RssSampler::start(pid),
            server,
            log,
        }
    }

    async fn write_large(
        &self,
        cfg: &Config,
        objects: Range<usize>,
    ) -> Result<Duration, BenchError> {
        match self {
            Self::Fs(fs) => write_large(fs, cfg, objects).await,
            Self::S3 { client, .. } => write_large(client, cfg, objects).await,
        }
    }

    async fn write_small(&self, cfg: &Config) -> Result<(f64, Latencies), BenchError> {
        match self {
            Self::Fs(fs) => write_small(fs, cfg).await,
            Self::S3 { client, .. } => write_small(client, cfg).await,
        }
    }

    fn retries(&self) -> u64 {
        match self {
            Self::Fs(_) => 0,
            Self::S3 { client, .. } => client.retries(),
        }
    }

    /// The server and its log.
    fn process(&mut self) -> Option<(&mut procs::Proc, PathBuf)> {
        match self {
            Self::Fs(_) => None,
            Self::S3 { server, log, .. } => Some((server, log.clone())),
        }
    }

    async fn read_large(
        &self,
        name: &str,
        cfg: &Config,
        objects: Range<usize>,
    ) -> Result<Duration, BenchError> {
        match self {
            Self::Fs(fs) => read_large(name, fs, cfg, objects).await,
            Self::S3 { client, .. } => read_large(name, client, cfg, objects).await,
        }
    }

    async fn read_small(&self, cfg: &Config) -> Result<Reads, BenchError> {
        match self {
            Self::Fs(fs) => read_small(fs, cfg).await,
            Self::S3 { client, .. } => read_small(client, cfg).await,
        }
    }

    fn rss(&self) -> (Option<u64>, Option<u64>, Option<u64>) {
        match self {
            Self::Fs(_) => (None, None, None),
            Self::S3 {
                rss_start, sampler, ..
            } => (*rss_start, Some(sampler.peak()), Some(sampler.last())),
        }
    }
}

/// Runs the benchmark: filesystem, gateway (local filesystem backend), the baseline build's
/// gateway (if `SLUICE_BENCH_BASELINE`), the gateway on a PostgreSQL catalog (if
/// `cfg.postgres`), the gateway over TLS, SeaweedFS if found; then the aggregate over 1, 2
/// and 3 gateways (if `cfg.postgres`). A request that fails names the servers that died, with
/// their logs' last lines.
pub async fn run(cfg: Config, progress: &dyn Fn(&str)) -> Result<Report, BenchError> {
    // Declared before the servers, so dropped after them: an error anywhere still stops them
    // and then removes their data (a full run writes tens of GiB).
    let scratch = Scratch::create(&cfg.workdir)?;
    // Before the gateways, so stopped after them.
    let pg = match &cfg.postgres {
        Some(bin) => Some(start_postgres(bin.clone(), cfg.workdir.join("postgres")).await?),
        None => None,
    };
    let mut live = Vec::new();
    let fs_dir = cfg.workdir.join("fs");
    std::fs::create_dir_all(&fs_dir)?;
    live.push(("filesystem", Live::Fs(Fs(fs_dir))));
    let gw_dir = cfg.workdir.join("gateway");
    let gw = procs::start_gateway(&cfg.sluice, &gw_dir, "bench", "", "")?;
    let client = S3Client::new(
        &format!("http://127.0.0.1:{}", gw.port),
        "bench",
        ACCESS_KEY,
        SECRET_KEY,
    )?;
    live.push((
        REDB_TARGET,
        Live::server(client, gw, procs::log_path(&gw_dir, "gateway")),
    ));
    if let Some(other) = std::env::var_os("SLUICE_BENCH_BASELINE") {
        let dir = cfg.workdir.join("gateway-baseline");
        let gw = procs::start_gateway(std::path::Path::new(&other), &dir, "bench", "", "")?;
        let client = S3Client::new(
            &format!("http://127.0.0.1:{}", gw.port),
            "bench",
            ACCESS_KEY,
            SECRET_KEY,
        )?;
        let log = procs::log_path(&dir, "gateway");
        live.push((BASELINE_TARGET, Live::server(client, gw, log)));
    }
    // The same gateway on a shared PostgreSQL catalog, over the same kind of backend (the
    // local filesystem, on the same disk): only the catalog differs.
    if let Some(pg) = &pg {
        let dir = cfg.workdir.join("gateway-pg");
        let gw = procs::start_shared_gateway(&cfg.sluice, &dir, &pg.url, &dir.join("objects"))?;
        let client = S3Client::new(
            &format!("http://127.0.0.1:{}", gw.port),
            "bench",
            ACCESS_KEY,
            SECRET_KEY,
        )?;
        let log = procs::log_path(&dir, "gateway");
        live.push((PG_TARGET, Live::server(client, gw, log)));
    }
    // The same gateway over TLS (a throwaway private CA), beside the plain one in every round.
    let tls_dir = cfg.workdir.join("gateway-tls");
    let ca = throwaway_certificate(&tls_dir)?;
    let gw = procs::start_gateway(
        &cfg.sluice,
        &tls_dir,
        "bench",
        &format!(
            "tls_cert = \"{}\"\ntls_key = \"{}\"",
            tls_dir.join("cert.pem").display(),
            tls_dir.join("key.pem").display()
        ),
        "",
    )?;
    let client = S3Client::trusting(
        &format!("https://127.0.0.1:{}", gw.port),
        "bench",
        ACCESS_KEY,
        SECRET_KEY,
        Some(ca.as_bytes()),
    )?;
    let log = procs::log_path(&tls_dir, "gateway");
    live.push((TLS_TARGET, Live::server(client, gw, log)));
    if let Some(weed) = &cfg.weed {
        let sw_dir = cfg.workdir.join("seaweedfs");
        let sw = procs::start_seaweedfs(weed, &sw_dir, "bench")?;
        let client = S3Client::new(
            &format!("http://127.0.0.1:{}", sw.port),
            "bench",
            ACCESS_KEY,
            SECRET_KEY,
        )?;
        let log = procs::log_path(&sw_dir, "weed");
        live.push(("SeaweedFS", Live::server(client, sw, log)));
    }

    let (writes, large_reads, reads) = match measure_rounds(&live, &cfg, progress).await {
        Ok(m) => m,
        Err(e) => {
            let servers = live
                .iter_mut()
                .filter_map(|(name, l)| l.process().map(|(p, log)| ((*name).to_owned(), p, log)));
            return Err(procs::with_exits(e, servers));
        }
    };
    let targets: Vec<TargetResult> = live
        .iter()
        .zip(writes.iter().zip(&large_reads).zip(&reads))
        .map(|((name, target), ((w, l), r))| {
            let mut t = combine(name, target.rss(), w, l, r);
            t.client_retries = target.retries();
            t
        })
        .collect();
    drop(live);
    let named = |name: &str| targets.iter().find(|t| t.name == name);
    let pg_vs_redb = named(PG_TARGET)
        .zip(named(REDB_TARGET))
        .map(|(pg, redb)| Ratios::of(pg, redb));
    let aggregate = match &pg {
        Some(pg) => Some(
            crate::aggregate::run(
                &cfg,
                &pg.aggregate_url,
                &cfg.workdir.join("aggregate"),
                progress,
            )
            .await?,
        ),
        None => None,
    };
    let postgres = pg.as_ref().map(|pg| pg.server.version.clone());
    drop(pg);
    drop(scratch);
    Ok(Report {
        bytes_moved_per_target: 2 * (cfg.large_objects * cfg.large_size) as u64,
        config: cfg,
        targets,
        postgres,
        pg_vs_redb,
        aggregate,
    })
}

/// Each round's measurements, per target in `live`'s order.
type Measured = (Vec<Vec<Writes>>, Vec<Vec<LargeReads>>, Vec<Vec<Reads>>);

/// The rounds: in each, the large writes on every target interleaved by slice, the small
/// writes target after target, the large reads interleaved by slice, the small reads; the
/// targets' order rotating from round to round (see the module doc).
async fn measure_rounds(
    live: &[(&str, Live)],
    cfg: &Config,
    progress: &dyn Fn(&str),
) -> Result<Measured, BenchError> {
    let n = live.len();
    let rounds = cfg.rounds.max(1);
    let mib = (cfg.large_objects * cfg.large_size) as f64 / (1024.0 * 1024.0);
    let mut writes: Vec<Vec<Writes>> = (0..n).map(|_| Vec::new()).collect();
    let mut large_reads: Vec<Vec<LargeReads>> = (0..n).map(|_| Vec::new()).collect();
    let mut reads: Vec<Vec<Reads>> = (0..n).map(|_| Vec::new()).collect();
    for round in 0..rounds {
        let order: Vec<usize> = (0..n).map(|k| (k + round) % n).collect();
        progress(&format!(
            "round {} of {rounds}: large writes, every target in slices of {}",
            round + 1,
            cfg.large_slice
        ));
        let mut large = write_large_interleaved(live, &order, cfg).await?;
        for &i in &order {
            progress(&format!(
                "round {} of {rounds}: small writes, {}",
                round + 1,
                live[i].0
            ));
            let (small_put_ops_s, small_put) = live[i].1.write_small(cfg).await?;
            let slices_s = std::mem::take(&mut large[i]);
            writes[i].push(Writes {
                put_mib_s: mib / slices_s.iter().sum::<f64>(),
                slices_s,
                small_put_ops_s,
                small_put,
            });
        }
        progress(&format!(
            "round {} of {rounds}: large reads, every target in slices of {}",
            round + 1,
            cfg.large_slice
        ));
        for (i, large) in read_large_interleaved(live, &order, cfg)
            .await?
            .into_iter()
            .enumerate()
        {
            large_reads[i].push(large);
        }
        for &i in &order {
            progress(&format!(
                "round {} of {rounds}: small reads, {}",
                round + 1,
                live[i].0
            ));
            reads[i].push(live[i].1.read_small(cfg).await?);
        }
    }
    Ok((writes, large_reads, reads))
}

/// The PostgreSQL server of a run and its two catalogs (the shared-catalog target's and the
/// aggregate's), each with the bucket `bench`.
struct Postgres {
    server: crate::postgres::PgServer,
    url: String,
    aggregate_url: String,
}

async fn start_postgres(bin: PathBuf, dir: PathBuf) -> Result<Postgres, BenchError> {
    let handle = tokio::runtime::Handle::current();
    // The server's start and the catalogs' migrations block: off the runtime's workers.
    tokio::task::spawn_blocking(move || {
        let server = crate::postgres::start(&bin, &dir)?;
        let url = crate::postgres::database(&server, "sluice")?;
        crate::postgres::create_bucket(&url, handle.clone(), "bench", &["bench"])?;
        let aggregate_url = crate::postgres::database(&server, "aggregate")?;
        crate::postgres::create_bucket(&aggregate_url, handle, "bench", &["bench"])?;
        Ok(Postgres {
            server,
            url,
            aggregate_url,
        })
    })
    .await
    .map_err(|e| BenchError::Setup(e.to_string()))?
}

/// One target's rounds as one result: medians, and each round's rates.
fn combine(
    name: &str,
    (rss_start, rss_peak, rss_end): (Option<u64>, Option<u64>, Option<u64>),
    writes: &[Writes],
    large: &[LargeReads],
    reads: &[Reads],
) -> TargetResult {
    let w = |f: fn(&Writes) -> f64| median(&writes.iter().map(f).collect::<Vec<_>>());
    let l = |f: fn(&LargeReads) -> f64| median(&large.iter().map(f).collect::<Vec<_>>());
    let r = |f: fn(&Reads) -> f64| median(&reads.iter().map(f).collect::<Vec<_>>());
    TargetResult {
        name: name.to_owned(),
        put_mib_s: w(|x| x.put_mib_s),
        get_mib_s: l(|x| x.get_mib_s),
        small_put_ops_s: w(|x| x.small_put_ops_s),
        small_get_ops_s: r(|x| x.small_get_ops_s),
        small_put_p50_s: w(|x| x.small_put.quantile(0.5)),
        small_put_p99_s: w(|x| x.small_put.quantile(0.99)),
        small_put_p999_s: w(|x| x.small_put.quantile(0.999)),
        small_get_p99_s: r(|x| x.small_get.quantile(0.99)),
        rss_start_bytes: rss_start,
        rss_peak_bytes: rss_peak,
        rss_end_bytes: rss_end,
        cold_reads: large.iter().all(|x| x.cold),
        large_get_slices_s: large.iter().map(|x| x.slices_s.clone()).collect(),
        large_put_slices_s: writes.iter().map(|x| x.slices_s.clone()).collect(),
        client_retries: 0,
        rounds: writes
            .iter()
            .zip(large.iter().zip(reads))
            .map(|(w, (l, r))| {
                [
                    w.put_mib_s,
                    l.get_mib_s,
                    w.small_put_ops_s,
                    r.small_get_ops_s,
                ]
            })
            .collect(),
    }
}

/// The report as a table.
pub fn table(r: &Report) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let base = r.targets.first().cloned();
    let _ = writeln!(
        out,
        "{:<NAME_WIDTH$} {:>10} {:>7} {:>10} {:>7} {:>10} {:>10} {:>9} {:>9} {:>9} {:>14}",
        "target",
        "PUT MiB/s",
        "vs fs",
        "GET MiB/s",
        "vs fs",
        "4K PUT/s",
        "4K GET/s",
        "PUT p50",
        "PUT p99",
        "PUT p99.9",
        "RSS start/peak"
    );
    for t in &r.targets {
        let ratio =
            |v: f64, b: Option<f64>| b.map_or("-".to_owned(), |b| format!("{:.0}%", 100.0 * v / b));
        let rss = match (t.rss_start_bytes, t.rss_peak_bytes) {
            (Some(s), Some(p)) => format!("{}/{} MiB", s >> 20, p >> 20),
            _ => "-".to_owned(),
        };
        let _ = writeln!(
            out,
            "{:<NAME_WIDTH$} {:>10.0} {:>7} {:>10.0} {:>7} {:>10.0} {:>10.0} {:>8.2}ms {:>8.2}ms {:>8.2}ms {:>14}",
            t.name,
            t.put_mib_s,
            ratio(t.put_mib_s, base.as_ref().map(|b| b.put_mib_s)),
            t.get_mib_s,
            ratio(t.get_mib_s, base.as_ref().map(|b| b.get_mib_s)),
            t.small_put_ops_s,
            t.small_get_ops_s,
            t.small_put_p50_s * 1e3,
            t.small_put_p99_s * 1e3,
            t.small_put_p999_s * 1e3,
            rss
        );
    }
    let _ = writeln!(
        out,
        "Medians of {} rounds, targets interleaved; each round's PUT / GET MiB/s, 4K PUT / GET ops/s:",
        r.config.rounds.max(1)
    );
    for t in &r.targets {
        let rounds: Vec<String> = t
            .rounds
            .iter()
            .map(|[p, g, sp, sg]| format!("{p:.0} / {g:.0}, {sp:.0} / {sg:.0}"))
            .collect();
        let _ = writeln!(out, "  {:<NAME_WIDTH$} {}", t.name, rounds.join("; "));
    }
    let retried: Vec<String> = r
        .targets
        .iter()
        .filter(|t| t.client_retries > 0)
        .map(|t| format!("{} {}", t.name, t.client_retries))
        .collect();
    if !retried.is_empty() {
        let _ = writeln!(
            out,
            "Requests sent twice (the first attempt unanswered): {}",
            retried.join(", ")
        );
    }
    if let Some(x) = &r.pg_vs_redb {
        let _ = writeln!(
            out,
            "PostgreSQL catalog / redb catalog, same run: 4K PUT {:.0}% (target >= 50%), 4K GET \
             {:.0}%, PUT MiB/s {:.0}% (target >= 95%), GET MiB/s {:.0}%",
            100.0 * x.small_put_ops_s,
            100.0 * x.small_get_ops_s,
            100.0 * x.put_mib_s,
            100.0 * x.get_mib_s
        );
    }
    if let Some(a) = &r.aggregate {
        out.push_str(&crate::aggregate::table(a));
    }
    let Some(base) = base else { return out };
    let _ = writeln!(
        out,
        "Large reads by slice, {} time / target time, paired by round and position \
         (p25 / median / p75):",
        base.name
    );
    for t in r.targets.iter().skip(1) {
        let ratios = paired_ratios(&base.large_get_slices_s, &t.large_get_slices_s);
        let q = |p: f64| quantile(&ratios, p);
        let _ = writeln!(
            out,
            "  {:<NAME_WIDTH$} {:.2} / {:.2} / {:.2} ({} slices)",
            t.name,
            q(0.25),
            q(0.5),
            q(0.75),
            ratios.len()
        );
    }
    out
}

/// `base[i][j] / other[i][j]` for every slice both have: how much of the baseline's speed the
/// other target had reading the same position of the same round.
fn paired_ratios(base: &[Vec<f64>], other: &[Vec<f64>]) -> Vec<f64> {
    base.iter()
        .zip(other)
        .flat_map(|(b, o)| b.iter().zip(o))
        .filter(|(b, o)| **b > 0.0 && **o > 0.0)
        .map(|(b, o)| b / o)
        .collect()
}

/// A new directory of this process's own, so a run killed before its cleanup never stands in
/// the next one's way.
pub fn default_workdir() -> PathBuf {
    std::env::temp_dir().join(format!("sluice-bench-gateway-{}", std::process::id()))
}

pub fn exe() -> Result<PathBuf, BenchError> {
    Ok(std::env::current_exe()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::tests::close;

    #[test]
    fn slices_pair_by_round_and_position() {
        let base = vec![vec![0.2, 0.3, 0.6], vec![0.4]];
        // The second round of the other target has a slice more (ignored); a zero never divides.
        let other = vec![vec![0.25, 0.3, 0.0], vec![0.5, 0.9]];
        let r = paired_ratios(&base, &other);
        assert_eq!(r.len(), 3, "{r:?}");
        assert!(
            close(r[0], 0.8) && close(r[1], 1.0) && close(r[2], 0.8),
            "{r:?}"
        );
        assert!(paired_ratios(&base, &[]).is_empty());
    }
}
