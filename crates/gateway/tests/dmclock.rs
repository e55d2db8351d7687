//! dmClock's δ on a real gateway (not coordinated: the embedded catalog): a request that says
//! other gateways served its tenant holds the tenant back at its limit for that service too,
//! and a value that is not two numbers is refused with `InvalidArgument`, while a forged
//! huge one is cut to the cap and hurts only its own tenant.

use std::time::{Duration, Instant};

use object_store::path::Path;
use object_store::{ClientOptions, ObjectStore, ObjectStoreExt, PutPayload};
use sluice_config::Config;
use sluice_gateway::Gateway;
use sluice_throttle::elsewhere::DELTA_HEADER;

mod common;

const CONFIG: &str = r#"
[gateway]
listen = "127.0.0.1:0"
data_dir = "DATA"
[gateway.capacity]
bandwidth = "64MiB/s"
ops = 1000
[[tenant]]
id = "alice"
access_key = "AKIDALICE00000DMCLK"
secret_key = "alice-secret-0123456789"
capacity = "1MiB"
limit = "1MiB/s"
[[tenant]]
id = "bob"
access_key = "AKIDBOB0000000DMCLK"
secret_key = "bob-secret-0123456789"
capacity = "1MiB"
limit = "1MiB/s"
"#;

async fn running() -> (tempfile::TempDir, sluice_gateway::Running) {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = CONFIG.replace("DATA", &dir.path().join("data").display().to_string());
    let config = Config::parse(&text, &dir.path().join("sluice.toml")).expect("config");
    let gateway = Gateway::open(&config).await.expect("open");
    for tenant in ["alice", "bob"] {
        gateway
            .front()
            .catalog()
            .create_bucket(tenant, tenant, 0)
            .expect("bucket");
    }
    (dir, gateway.start().await.expect("start"))
}

/// `tenant`'s client, every request carrying `delta` when given.
fn client(
    gateway: &sluice_gateway::Running,
    tenant: &str,
    delta: Option<&str>,
) -> std::sync::Arc<dyn ObjectStore> {
    let mut headers = http::HeaderMap::new();
    if let Some(d) = delta {
        headers.insert(DELTA_HEADER, d.parse().expect("header value"));
    }
    let (key, secret) = match tenant {
        "alice" => ("AKIDALICE00000DMCLK", "alice-secret-0123456789"),
        _ => ("AKIDBOB0000000DMCLK", "bob-secret-0123456789"),
    };
    common::client(
        &format!("http://{}", gateway.addr),
        tenant,
        key,
        secret,
        ClientOptions::new().with_default_headers(headers),
    )
}

async fn put(c: &std::sync::Arc<dyn ObjectStore>, key: &str) -> object_store::Result<()> {
    c.put(&Path::from(key), PutPayload::from_static(b"x"))
        .await
        .map(drop)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_elsewhere_holds_the_tenant_at_its_limit_for_it_too() {
    let (_dir, gateway) = running().await;
    let plain = client(&gateway, "alice", None);
    // Two small PUTs cost about 4 operations (67 KB each at 1000 ops/s over 64 MiB/s): well
    // under a second at 1 MiB/s.
    let started = Instant::now();
    put(&plain, "a").await.expect("put");
    put(&plain, "b").await.expect("put");
    let baseline = started.elapsed();
    // 4 MiB served elsewhere: 4 s more at the limit, before this PUT's body and the next.
    let told = client(&gateway, "alice", Some("0 4194304"));
    let started = Instant::now();
    put(&told, "c").await.expect("put with a delta");
    put(&plain, "d").await.expect("put");
    let held = started.elapsed();
    assert!(
        held >= Duration::from_millis(3800),
        "held {held:?} (baseline {baseline:?})"
    );
    assert!(baseline < Duration::from_secs(2), "baseline {baseline:?}");
    gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_delta_is_refused_or_cut_and_hurts_only_its_tenant() {
    let (_dir, gateway) = running().await;
    for bad in ["-1 0", "1", "1 2 3", "lots 0"] {
        let err = put(&client(&gateway, "bob", Some(bad)), "k")
            .await
            .expect_err(bad)
            .to_string();
        assert!(err.contains("InvalidArgument"), "{bad}: {err}");
        assert!(err.contains(DELTA_HEADER), "{bad}: {err}");
    }
    // Beyond u64 and far beyond the cap: the request itself goes (its own admission is not
    // delayed by what it says), and the dispatcher keeps serving everyone.
    let bob = client(&gateway, "bob", None);
    put(&bob, "k").await.expect("put");
    let huge = client(
        &gateway,
        "bob",
        Some("99999999999999999999999999 99999999999999999999999999"),
    );
    huge.head(&Path::from("k"))
        .await
        .expect("a huge delta is cut, not refused");
    let started = Instant::now();
    put(&client(&gateway, "alice", None), "k")
        .await
        .expect("another tenant is served");
    assert!(started.elapsed() < Duration::from_secs(5));
    gateway.shutdown().await;
}
