//! The aggregate run of the gateway benchmark: 1, 2 and 3 gateways over one shared PostgreSQL
//! catalog and one shared backend directory (the local filesystem backend: every gateway's
//! `data_dir/objects` is the same directory), the client spreading its requests over them.
//!
//! Each gateway gets the in-flight requests one gateway gets in the main rounds (n gateways:
//! n × the large and n × the small concurrency) and n × the small objects; the large objects
//! are the same number whatever n (their bytes, not their count, load the disk, and n × 5 GiB
//! would not fit every machine's scratch space). Object `i` is written through gateway
//! `i mod n` and read back through gateway `i + 1 mod n`: with two gateways or more, every read
//! crosses gateways. The page cache is dropped before each read phase, as in the main rounds.
//!
//! Gateways start one after another on the populated catalog and backend (the first round runs
//! 1, then 2, then 3): the backend's blobs are counted before and after each start, and a start
//! that deleted any fails the run (a gateway on a shared catalog deletes nothing at start-up).
//! Later rounds rotate the order of the gateway counts; the figures are medians of the rounds.

use std::path::Path;
use std::time::Duration;

use serde::Serialize;

use crate::BenchError;
use crate::client::S3Client;
use crate::gateway::{Config, drop_page_cache, payload, run_ops};
use crate::procs::{self, ACCESS_KEY, Proc, SECRET_KEY};
use crate::stats::{Latencies, median};

/// The gateway counts of the aggregate run.
pub const GATEWAY_COUNTS: [usize; 3] = [1, 2, 3];

/// The figures of one gateway count: medians of the rounds.
#[derive(Debug, Clone, Serialize)]
pub struct Step {
    pub gateways: usize,
    pub large_objects: usize,
    pub large_in_flight: usize,
    pub small_objects: usize,
    pub small_in_flight: usize,
    pub put_mib_s: f64,
    pub get_mib_s: f64,
    pub small_put_ops_s: f64,
    pub small_get_ops_s: f64,
    pub small_put_p99_s: f64,
    pub small_get_p99_s: f64,
    /// This count's figures over one gateway's, in the order of `put_mib_s`, `get_mib_s`,
    /// `small_put_ops_s`, `small_get_ops_s`.
    pub vs_one_gateway: [f64; 4],
    /// `[put_mib_s, get_mib_s, small_put_ops_s, small_get_ops_s]` of each round.
    pub rounds: Vec<[f64; 4]>,
}

/// A gateway's start on the populated catalog and backend.
#[derive(Debug, Clone, Serialize)]
pub struct Start {
    /// The gateway's number (2: the second one).
    pub gateway: usize,
    pub blobs_before: usize,
    pub blobs_after: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub steps: Vec<Step>,
    pub starts: Vec<Start>,
    pub rounds: usize,
    /// The page cache was dropped before every read phase.
    pub cold_reads: bool,
}

/// What one measurement of a gateway count gave.
struct Measured {
    rates: [f64; 4],
    small_put: Latencies,
    small_get: Latencies,
    cold: bool,
}

/// Files under `dir`, recursively, by path: the local backend's blobs (nothing is staged
/// between phases).
pub fn list_files(dir: &Path) -> std::io::Result<std::collections::BTreeSet<std::path::PathBuf>> {
    let mut out = std::collections::BTreeSet::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d)? {
            let entry = entry?;
            if entry.file_type()?.is_dir() {
                dirs.push(entry.path());
            } else {
                out.insert(entry.path());
            }
        }
    }
    Ok(out)
}

/// Runs the aggregate over the shared catalog at `catalog_url` (its bucket `bench` made).
pub async fn run(
    cfg: &Config,
    catalog_url: &str,
    dir: &Path,
    progress: &dyn Fn(&str),
) -> Result<Report, BenchError> {
    let objects = dir.join("objects");
    std::fs::create_dir_all(&objects)?;
    let most = GATEWAY_COUNTS.iter().copied().max().unwrap_or(1);
    let mut gateways: Vec<(S3Client, Proc)> = Vec::new();
    let mut starts = Vec::new();
    let rounds = cfg.rounds.max(1);
    let mut measured: Vec<Vec<Measured>> = GATEWAY_COUNTS.iter().map(|_| Vec::new()).collect();
    for round in 0..rounds {
        for k in 0..GATEWAY_COUNTS.len() {
            let step = (k + round) % GATEWAY_COUNTS.len();
            let n = GATEWAY_COUNTS[step];
            while gateways.len() < n {
                let number = gateways.len() + 1;
                let before = list_files(&objects)?;
                let gw = procs::start_shared_gateway(
                    &cfg.sluice,
                    &dir.join(format!("gateway-{number}")),
                    catalog_url,
                    &objects,
                )?;
                let after = list_files(&objects)?;
                let (blobs_before, blobs_after) = (before.len(), after.len());
                if after != before {
                    let names = |a: &std::collections::BTreeSet<_>, b| {
                        a.difference(b)
                            .take(5)
                            .map(|p: &std::path::PathBuf| p.display().to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    };
                    return Err(BenchError::Setup(format!(
                        "gateway {number} started on the shared catalog and the backend held \
                         {blobs_before} blobs before, {blobs_after} after: its start-up \
                         changed the backend (new: [{}]; gone: [{}])",
                        names(&after, &before),
                        names(&before, &after),
                    )));
                }
                starts.push(Start {
                    gateway: number,
                    blobs_before,
                    blobs_after,
                });
                let client = S3Client::new(
                    &format!("http://127.0.0.1:{}", gw.port),
                    "bench",
                    ACCESS_KEY,
                    SECRET_KEY,
                )?;
                gateways.push((client, gw));
            }
            progress(&format!(
                "aggregate round {} of {rounds}: {n} of {most} gateways on one PostgreSQL catalog",
                round + 1
            ));
            let clients: Vec<S3Client> = gateways[..n].iter().map(|(c, _)| c.clone()).collect();
            let m = measure(cfg, &clients).await.map_err(|e| {
                let procs = gateways.iter_mut().enumerate().map(|(i, (_, p))| {
                    let log = dir.join(format!("gateway-{}", i + 1));
                    (
                        format!("gateway {}", i + 1),
                        p,
                        procs::log_path(&log, "gateway"),
                    )
                });
                procs::with_exits(e, procs)
            })?;
            measured[step].push(m);
        }
    }
    drop(gateways);
    let one = measured.first().map(|m| summarize(1, cfg, m));
    let steps: Vec<Step> = GATEWAY_COUNTS
        .iter()
        .zip(&measured)
        .map(|(&n, m)| {
            let mut s = summarize(n, cfg, m);
            if let Some(one) = &one {
                let base = [
                    one.put_mib_s,
                    one.get_mib_s,
                    one.small_put_ops_s,
                    one.small_get_ops_s,
                ];
                let own = [
                    s.put_mib_s,
                    s.get_mib_s,
                    s.small_put_ops_s,
                    s.small_get_ops_s,
                ];
                s.vs_one_gateway = std::array::from_fn(|i| own[i] / base[i]);
            }
            s
        })
        .collect();
    Ok(Report {
        steps,
        starts,
        rounds,
        cold_reads: measured.iter().flatten().all(|m| m.cold),
    })
}

fn summarize(n: usize, cfg: &Config, m: &[Measured]) -> Step {
    let med = |i: usize| median(&m.iter().map(|x| x.rates[i]).collect::<Vec<_>>());
    let q = |f: fn(&Measured) -> &Latencies| {
        median(&m.iter().map(|x| f(x).quantile(0.99)).collect::<Vec<_>>())
    };
    Step {
        gateways: n,
        large_objects: cfg.large_objects,
        large_in_flight: n * cfg.large_concurrency,
        small_objects: n * cfg.small_objects,
        small_in_flight: n * cfg.small_concurrency,
        put_mib_s: med(0),
        get_mib_s: med(1),
        small_put_ops_s: med(2),
        small_get_ops_s: med(3),
        small_put_p99_s: q(|x| &x.small_put),
        small_get_p99_s: q(|x| &x.small_get),
        vs_one_gateway: [f64::NAN; 4],
        rounds: m.iter().map(|x| x.rates).collect(),
    }
}

/// One measurement over `clients` (one per gateway): large writes, small writes, then the
/// large and the small reads, each from a dropped page cache, through the next gateway.
async fn measure(cfg: &Config, clients: &[S3Client]) -> Result<Measured, BenchError> {
    let n = clients.len();
    let through = |i: usize| &clients[i % n];
    let large = payload(cfg.large_size, 42);
    let (put_time, _) = run_ops(cfg.large_objects, n * cfg.large_concurrency, |i| {
        let (client, body) = (through(i), large.clone());
        async move { client.put(&format!("large-{i}"), body).await }
    })
    .await
    .map_err(|e| failed("large PUT", n, &e))?;
    let small_n = n * cfg.small_objects;
    let small = payload(cfg.small_size, 7);
    let (sput_time, small_put) = run_ops(small_n, n * cfg.small_concurrency, |i| {
        let (client, body) = (through(i), small.clone());
        async move { client.put(&format!("small-{i}"), body).await }
    })
    .await
    .map_err(|e| failed("4 KiB PUT", n, &e))?;
    let cold = drop_page_cache();
    let (get_time, _) = run_ops(cfg.large_objects, n * cfg.large_concurrency, |i| {
        let client = through(i + 1);
        async move {
            let got = client.get(&format!("large-{i}")).await?;
            if got != cfg.large_size as u64 {
                return Err(BenchError::Setup(format!("large-{i} read {got} bytes")));
            }
            Ok(())
        }
    })
    .await
    .map_err(|e| failed("large GET", n, &e))?;
    let cold = drop_page_cache() && cold;
    let (sget_time, small_get) = run_ops(small_n, n * cfg.small_concurrency, |i| {
        let client = through(i + 1);
        async move {
            let got = client.get(&format!("small-{i}")).await?;
            if got != cfg.small_size as u64 {
                return Err(BenchError::Setup(format!("small-{i} read {got} bytes")));
            }
            Ok(())
        }
    })
    .await
    .map_err(|e| failed("4 KiB GET", n, &e))?;
    let mib = (cfg.large_objects * cfg.large_size) as f64 / (1024.0 * 1024.0);
    let per_s = |count: usize, t: Duration| count as f64 / t.as_secs_f64();
    Ok(Measured {
        rates: [
            mib / put_time.as_secs_f64(),
            mib / get_time.as_secs_f64(),
            per_s(small_n, sput_time),
            per_s(small_n, sget_time),
        ],
        small_put,
        small_get,
        cold,
    })
}

fn failed(what: &str, n: usize, e: &BenchError) -> BenchError {
    BenchError::Setup(format!("aggregate, {n} gateways, {what}: {e}"))
}

/// The aggregate's table, for the terminal.
pub fn table(r: &Report) -> String {
    use std::fmt::Write;
    let mut out = format!(
        "Aggregate over one PostgreSQL catalog and one backend, medians of {} rounds:\n",
        r.rounds
    );
    let _ = writeln!(
        out,
        "{:<9} {:>10} {:>10} {:>10} {:>10} {:>9} {:>22}",
        "gateways",
        "PUT MiB/s",
        "GET MiB/s",
        "4K PUT/s",
        "4K GET/s",
        "PUT p99",
        "vs 1 (4K PUT, 4K GET)"
    );
    for s in &r.steps {
        let _ = writeln!(
            out,
            "{:<9} {:>10.0} {:>10.0} {:>10.0} {:>10.0} {:>7.2}ms {:>10.2} {:>10.2}",
            s.gateways,
            s.put_mib_s,
            s.get_mib_s,
            s.small_put_ops_s,
            s.small_get_ops_s,
            s.small_put_p99_s * 1e3,
            s.vs_one_gateway[2],
            s.vs_one_gateway[3],
        );
    }
    for s in &r.starts {
        let _ = writeln!(
            out,
            "  gateway {} started on {} blobs, left {}",
            s.gateway, s.blobs_before, s.blobs_after
        );
    }
    out
}
