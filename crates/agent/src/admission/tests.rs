//! The node's admission in paused tokio time, configured from the file's keys: how the local
//! device and the uplink are shared between tenants, as their transfers see it.

use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use sluice_config::Config;
use tokio::time::Instant;

use super::Admission;
use crate::pacer::TokenBucket;

const MIB: f64 = 1024.0 * 1024.0;

fn config(capacity: &str, tenants: &[(&str, &str)]) -> Config {
    let mut text = format!("[agent]\n[agent.capacity]\n{capacity}\n");
    for (id, extra) in tenants {
        let _ = writeln!(
            text,
            "[[tenant]]\nid = \"{id}\"\naccess_key = \"AK{id}\"\nsecret_key = \"{id}-secret-key\"\n{extra}"
        );
    }
    Config::parse(&text, Path::new("/etc/sluice/sluice.toml")).expect("valid configuration")
}

/// `streams` clients per tenant admitting 1 MiB transfers on the local device back to back
/// for `secs` of virtual time; the MiB each tenant was granted.
async fn saturate(a: &Arc<Admission>, tenants: &[&str], streams: usize, secs: u64) -> Vec<f64> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut handles = Vec::new();
    for (i, name) in tenants.iter().enumerate() {
        for _ in 0..streams {
            let a = Arc::clone(a);
            let name = (*name).to_owned();
            handles.push(tokio::spawn(async move {
                let throttle = a.local().expect("[agent.capacity] is set");
                let mut granted = 0.0;
                while Instant::now() < deadline {
                    throttle.admit_bytes(&name, 1 << 20).await;
                    granted += 1.0;
                }
                (i, granted)
            }));
        }
    }
    let mut out = vec![0.0; tenants.len()];
    for h in handles {
        let (i, g) = h.await.expect("client task");
        out[i] += g;
    }
    out
}

fn near(got: f64, want: f64, tolerance: f64) -> bool {
    (got - want).abs() <= want * tolerance
}

#[tokio::test(start_paused = true)]
async fn local_weights_split_a_saturated_device_and_use_all_of_it() {
    let c = config(
        "bandwidth = \"64MiB/s\"",
        &[("a", "local_weight = 1"), ("b", "local_weight = 3")],
    );
    let a = Arc::new(Admission::start(&c).expect("start"));
    let got = saturate(&a, &["a", "b"], 4, 20).await;
    assert!(near(got[1] / got[0], 3.0, 0.1), "shares {got:?}");
    assert!(near(got[0] + got[1], 64.0 * 20.0, 0.05), "total {got:?}");
}

#[tokio::test(start_paused = true)]
async fn a_local_limit_caps_its_tenant_and_the_neighbour_gets_the_rest() {
    let c = config(
        "bandwidth = \"64MiB/s\"",
        &[
            ("a", "local_limit = \"16MiB/s\"\nlocal_weight = 10"),
            ("b", ""),
        ],
    );
    let a = Arc::new(Admission::start(&c).expect("start"));
    let got = saturate(&a, &["a", "b"], 4, 20).await;
    assert!(
        got[0] <= 16.0 * 20.0 * 1.05,
        "the limited tenant got {} MiB",
        got[0]
    );
    assert!(near(got[0] + got[1], 64.0 * 20.0, 0.05), "total {got:?}");
}

#[tokio::test(start_paused = true)]
async fn a_local_reservation_holds_against_a_much_heavier_neighbour() {
    let c = config(
        "bandwidth = \"64MiB/s\"",
        &[
            ("victim", "local_reservation = \"24MiB/s\""),
            ("noisy", "local_weight = 100"),
        ],
    );
    let a = Arc::new(Admission::start(&c).expect("start"));
    let got = saturate(&a, &["victim", "noisy"], 4, 20).await;
    // Weights alone would give the victim 64/101 MiB/s; its reservation gives it 24.
    assert!(
        got[0] >= 24.0 * 20.0 * 0.95,
        "the reserved tenant got {got:?}"
    );
    assert!(near(got[0] + got[1], 64.0 * 20.0, 0.05), "total {got:?}");
}

#[tokio::test(start_paused = true)]
async fn a_reload_changes_the_shares_of_tenants_already_scheduled() {
    let c = config(
        "bandwidth = \"64MiB/s\"",
        &[("a", "local_weight = 1"), ("b", "local_weight = 3")],
    );
    let a = Arc::new(Admission::start(&c).expect("start"));
    let reloaded = config(
        "bandwidth = \"64MiB/s\"",
        &[("a", "local_weight = 1"), ("b", "local_weight = 1")],
    );
    a.update(&reloaded.tenants).await.expect("update");
    let got = saturate(&a, &["a", "b"], 4, 20).await;
    assert!(near(got[1] / got[0], 1.0, 0.1), "shares {got:?}");
}

/// The drain's step per part, as `Drain::pace` takes it: the tenant's own pace, then the
/// uplink. Returns the MiB each tenant sent in `secs` of virtual time.
async fn drain_parts(a: &Arc<Admission>, paces: &[(&str, f64)], secs: u64) -> Vec<f64> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut handles = Vec::new();
    for (i, (name, rate)) in paces.iter().enumerate() {
        let a = Arc::clone(a);
        let (name, rate) = ((*name).to_owned(), *rate);
        handles.push(tokio::spawn(async move {
            let mut bucket = TokenBucket::new(rate, 1.0 * MIB, Instant::now());
            let mut sent = 0.0;
            while Instant::now() < deadline {
                while let Err(wait) = bucket.try_take(1 << 20, Instant::now()) {
                    tokio::time::sleep(wait).await;
                }
                a.uplink(&name, 1 << 20).await;
                sent += 1.0;
            }
            (i, sent)
        }));
    }
    let mut out = vec![0.0; paces.len()];
    for h in handles {
        let (i, s) = h.await.expect("drain task");
        out[i] += s;
    }
    out
}

#[tokio::test(start_paused = true)]
async fn the_uplink_is_shared_by_weight_within_each_tenants_pace() {
    let c = config(
        "bandwidth = \"1GiB/s\"\nuplink = \"60MiB/s\"",
        &[("a", "local_weight = 2"), ("b", "local_weight = 1")],
    );
    let a = Arc::new(Admission::start(&c).expect("start"));
    // Both paced above the uplink: 2:1.
    let got = drain_parts(&a, &[("a", f64::INFINITY), ("b", f64::INFINITY)], 20).await;
    assert!(near(got[0], 40.0 * 20.0, 0.05), "{got:?}");
    assert!(near(got[1], 20.0 * 20.0, 0.05), "{got:?}");
    // The heavier tenant's own pace below its share: it gets its pace, the other the rest.
    let got = drain_parts(&a, &[("a", 10.0 * MIB), ("b", f64::INFINITY)], 20).await;
    assert!(near(got[0], 10.0 * 20.0, 0.05), "{got:?}");
    assert!(near(got[1], 50.0 * 20.0, 0.05), "{got:?}");
}

#[tokio::test(start_paused = true)]
async fn the_drains_local_reads_wait_their_tenants_turn_on_the_device() {
    use futures::TryStreamExt;
    use object_store::ObjectStoreExt as _;
    use object_store::memory::InMemory;
    let c = config("bandwidth = \"8MiB/s\"\ngrain = \"1MiB\"", &[("t", "")]);
    let a = Admission::start(&c).expect("start");
    let blobs = sluice_s3::BlobStore::new(Arc::new(InMemory::new()), a.grain(), a.grain());
    let body = bytes::Bytes::from(vec![7u8; 16 << 20]);
    let store = blobs.tenant("t");
    store
        .put(
            &object_store::path::Path::from("b/blob"),
            body.clone().into(),
        )
        .await
        .expect("put");
    let segments = [sluice_meta::Segment {
        blob: "b/blob".into(),
        size: body.len() as u64,
        checksums: None,
    }];
    let started = Instant::now();
    let read: Vec<bytes::Bytes> = blobs
        .read(&a.local_pacer("t"), &segments, 0..body.len() as u64, None)
        .try_collect()
        .await
        .expect("read");
    assert_eq!(read.concat().len(), body.len());
    // 16 grains of 1 MiB on an 8 MiB/s device: the last is granted once the first 15 have
    // been served (1.875 s), less the dispatcher's lookahead (10 ms here). Unscheduled, the
    // read takes no virtual time at all.
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(1850), "read in {took:?}");
}

#[tokio::test]
async fn without_the_agents_capacity_nothing_is_scheduled() {
    let c = config("bandwidth = \"8MiB/s\"", &[("t", "")]);
    let mut c = c;
    if let Some(agent) = c.agent.as_mut() {
        agent.capacity = None;
    }
    let a = Admission::start(&c).expect("start");
    assert!(a.local().is_none());
    assert!(a.local_pacer("t").throttle.is_none());
    assert_eq!(a.grain(), sluice_s3::blob::DEFAULT_GRAIN);
}
