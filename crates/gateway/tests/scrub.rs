//! The continuous scrub of a real gateway (`[gateway.scrub]`): a byte flipped in a blob on
//! the local backend is found by the next pass and named, through the throughput scheduler's
//! background class; the clean objects are not reported; a gateway that does not get the
//! catalog's scrub lease reads nothing.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use object_store::{ClientOptions, ObjectStoreExt, PutPayload, path::Path as Key};
use sluice_config::Config;
use sluice_gateway::Gateway;

const KEY: &str = "AKIDALICE000000SCRB";
const SECRET: &str = "alice-secret-0123456789";

fn config(dir: &Path, scrub: &str) -> Config {
    let text = format!(
        "[gateway]\nlisten = \"127.0.0.1:0\"\ndata_dir = \"{}\"\n\
         [gateway.capacity]\nbandwidth = \"256MiB/s\"\n{scrub}\
         [[tenant]]\nid = \"alice\"\naccess_key = \"{KEY}\"\nsecret_key = \"{SECRET}\"\n",
        dir.join("data").display()
    );
    Config::parse(&text, &dir.join("sluice.toml")).expect("config")
}

/// The value of the first `/metrics` line starting with `name` (labels included).
fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in\n{text}"))
}

/// A counter or integer gauge of `/metrics`.
fn count(text: &str, name: &str) -> u64 {
    metric(text, name) as u64
}

/// Every blob file under `root` (recovery records, under `<bucket>/rec/`, are not blobs).
fn blobs(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![root.to_owned()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).expect("read_dir").flatten() {
            let p = e.path();
            if p.is_dir() {
                if p.file_name().is_some_and(|n| n != "rec") {
                    dirs.push(p);
                }
            } else {
                out.push(p);
            }
        }
    }
    out
}

/// Polls `render` until `done` holds of its text, for at most `within`.
async fn until(
    control: &sluice_gateway::Control,
    within: Duration,
    what: &str,
    done: impl Fn(&str) -> bool,
) -> String {
    let deadline = Instant::now() + within;
    loop {
        let text = control.render();
        if done(&text) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "{what} within {within:?}:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flipped_byte_is_found_by_the_next_pass_and_clean_objects_are_not_reported() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = config(
        dir.path(),
        "[gateway.scrub]\nrate = \"64MiB/s\"\ninterval = \"1s\"\n",
    );
    let gateway = Gateway::open(&cfg).await.expect("open");
    gateway
        .front()
        .catalog()
        .create_bucket("alice", "data", 0)
        .expect("bucket");
    let running = gateway.start().await.expect("start");
    let s3 = common::client(
        &format!("http://{}", running.addr),
        "data",
        KEY,
        SECRET,
        ClientOptions::new(),
    );
    // Three objects above the inline limit.
    for (i, len) in [(0, 100_000usize), (1, 3 << 20), (2, 200_000)] {
        let body: Vec<u8> = (0..len).map(|b| (b * 7 + i) as u8).collect();
        s3.put(&Key::from(format!("obj-{i}")), PutPayload::from(body))
            .await
            .expect("put");
    }
    // A clean pass first: three objects, no findings.
    let text = until(
        &running.control,
        Duration::from_secs(30),
        "a clean pass",
        |t| {
            metric(t, "sluice_scrub_passes_total") >= 1.0
                && count(t, "sluice_scrub_last_pass_objects") == 3
        },
    )
    .await;
    assert_eq!(count(&text, "sluice_scrub_last_pass_findings"), 0);
    assert_eq!(
        count(&text, "sluice_scrub_findings_total{kind=\"corrupt\"}"),
        0
    );
    assert!(metric(&text, "sluice_scrub_bytes_total") >= f64::from((3u32 << 20) + 300_000));
    assert!(metric(&text, "sluice_scrub_last_pass_end_timestamp_seconds") > 1.6e9);
    // Flip one byte in the middle of the largest blob.
    let mut files = blobs(&dir.path().join("data").join("objects"));
    files.sort_by_key(|p| std::fs::metadata(p).map_or(0, |m| m.len()));
    let big = files.last().expect("a blob");
    let mut bytes = std::fs::read(big).expect("read blob");
    assert_eq!(bytes.len(), 3 << 20, "the largest blob is obj-1's");
    bytes[3 << 19] ^= 0x20;
    std::fs::write(big, &bytes).expect("write blob");
    let passes = metric(&text, "sluice_scrub_passes_total");
    let text = until(
        &running.control,
        Duration::from_secs(30),
        "a pass after the flip",
        |t| metric(t, "sluice_scrub_passes_total") >= passes + 2.0,
    )
    .await;
    // Exactly the corrupt blob, on every pass since; the clean ones never.
    assert_eq!(count(&text, "sluice_scrub_last_pass_findings"), 1);
    assert!(metric(&text, "sluice_scrub_findings_total{kind=\"corrupt\"}") >= 1.0);
    assert_eq!(
        count(&text, "sluice_scrub_findings_total{kind=\"missing\"}"),
        0
    );
    // A reload may change the rate (and keeps the scrub running).
    let slower = config(
        dir.path(),
        "[gateway.scrub]\nrate = \"1MiB/s\"\ninterval = \"1s\"\n",
    );
    running.control.reload(slower).await.expect("reload");
    // The data was never changed: the flipped blob still holds exactly our bytes.
    assert_eq!(std::fs::read(big).expect("read blob"), bytes);
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_lease_a_gateway_reads_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = config(
        dir.path(),
        "[gateway.scrub]\nrate = \"64MiB/s\"\ninterval = \"1s\"\n",
    );
    let gateway = Gateway::open(&cfg).await.expect("open");
    assert!(
        gateway
            .front()
            .catalog()
            .try_lease("scrub", "another gateway", Duration::from_secs(600))
            .expect("lease")
    );
    let running = gateway.start().await.expect("start");
    let text = until(
        &running.control,
        Duration::from_secs(10),
        "a refused lease",
        |t| metric(t, "sluice_scrub_lease_refusals_total") >= 1.0,
    )
    .await;
    assert_eq!(count(&text, "sluice_scrub_passes_total"), 0);
    assert_eq!(count(&text, "sluice_scrub_bytes_total"), 0);
    assert_eq!(count(&text, "sluice_scrub_running"), 0);
    running.shutdown().await;
}
