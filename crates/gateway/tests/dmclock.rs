//! dmClock's δ on a real gateway (not coordinated: the embedded catalog): a request that says
//! other gateways served its tenant holds the tenant back at its limit for that service too,
//! and a value that is not two numbers is refused with `InvalidArgument`, while a forged
//! huge one is cut to the cap and hurts only its own tenant. Its answers say what of each
//! request its reservation phase served (`x-sluice-dmclock-reserved`, the agent's ρ).

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
    running_with(CONFIG).await
}

async fn running_with(config: &str) -> (tempfile::TempDir, sluice_gateway::Running) {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = config.replace("DATA", &dir.path().join("data").display().to_string());
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

/// alice reserved 32 MiB/s of 64, bob with no reservation; 65,536 ops/s, so an operation
/// costs 1 KiB.
const RESERVED: &str = r#"
[gateway]
listen = "127.0.0.1:0"
data_dir = "DATA"
[gateway.capacity]
bandwidth = "64MiB/s"
ops = 65536
[[tenant]]
id = "alice"
access_key = "AKIDALICE00000DMCLK"
secret_key = "alice-secret-0123456789"
capacity = "1MiB"
reservation = "32MiB/s"
[[tenant]]
id = "bob"
access_key = "AKIDBOB0000000DMCLK"
secret_key = "bob-secret-0123456789"
capacity = "1MiB"
"#;

/// Sends `method` to a presigned URL of `tenant`'s bucket over plain HTTP/1.1 with `body`:
/// the answer's status and head, lowercased.
async fn presigned(
    gateway: &sluice_gateway::Running,
    tenant: &str,
    method: http::Method,
    key: &str,
    body: &[u8],
) -> (u16, String) {
    use object_store::signer::Signer;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (access, secret) = match tenant {
        "alice" => ("AKIDALICE00000DMCLK", "alice-secret-0123456789"),
        _ => ("AKIDBOB0000000DMCLK", "bob-secret-0123456789"),
    };
    let s3 = object_store::aws::AmazonS3Builder::new()
        .with_endpoint(format!("http://{}", gateway.addr))
        .with_allow_http(true)
        .with_bucket_name(tenant)
        .with_region("us-east-1")
        .with_access_key_id(access)
        .with_secret_access_key(secret)
        .with_virtual_hosted_style_request(false)
        .build()
        .expect("client");
    let url = s3
        .signed_url(method.clone(), &Path::from(key), Duration::from_secs(60))
        .await
        .expect("signed");
    let target = match url.query() {
        Some(q) => format!("{}?{q}", url.path()),
        None => url.path().to_owned(),
    };
    let mut sock = tokio::net::TcpStream::connect(gateway.addr)
        .await
        .expect("connect");
    let head = format!(
        "{method} {target} HTTP/1.1\r\nhost: {}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        gateway.addr,
        body.len()
    );
    sock.write_all(head.as_bytes()).await.expect("head");
    sock.write_all(body).await.expect("body");
    let mut answer = Vec::new();
    sock.read_to_end(&mut answer).await.expect("answer");
    let text = String::from_utf8_lossy(&answer).to_ascii_lowercase();
    let end = text.find("\r\n\r\n").unwrap_or(text.len());
    let status = text[9..12].parse().expect("status");
    (status, text[..end].to_owned())
}

/// `x-sluice-dmclock-reserved` of an answer's head, as (requests, bytes).
fn reserved(head: &str) -> Option<(u64, u64)> {
    let v = head
        .lines()
        .find_map(|l| l.strip_prefix("x-sluice-dmclock-reserved:"))?;
    let mut n = v
        .split_ascii_whitespace()
        .map(|n| n.parse().expect("a number"));
    let pair = (n.next().expect("requests"), n.next().expect("bytes"));
    assert!(n.next().is_none(), "two numbers: {v}");
    Some(pair)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_say_what_the_reservation_phase_served_of_the_request() {
    let (_dir, gateway) = running_with(RESERVED).await;
    let body = vec![7u8; 4096];
    // alice's first request: its operation is due on arrival on her reservation clock; of
    // its body at most the body was served by reservation.
    let (status, head) = presigned(&gateway, "alice", http::Method::PUT, "a", &body).await;
    assert_eq!(status, 200, "{head}");
    let (requests, bytes) = reserved(&head).expect("alice's answer says");
    assert_eq!(requests, 1, "{head}");
    assert!(bytes <= body.len() as u64, "{head}");
    // bob has no reservation: nothing of his by it, whatever alice got.
    let (status, head) = presigned(&gateway, "bob", http::Method::PUT, "b", &body).await;
    assert_eq!(status, 200, "{head}");
    assert_eq!(reserved(&head), Some((0, 0)), "{head}");
    let (status, head) = presigned(&gateway, "bob", http::Method::GET, "b", b"").await;
    assert_eq!(status, 200, "{head}");
    assert_eq!(reserved(&head), Some((0, 0)), "{head}");
    // A GET's count is made when its head is sent: at most one operation and the object.
    let (status, head) = presigned(&gateway, "alice", http::Method::GET, "a", b"").await;
    assert_eq!(status, 200, "{head}");
    let (requests, bytes) = reserved(&head).expect("alice's answer says");
    assert!(requests <= 1 && bytes <= body.len() as u64, "{head}");
    // A refused request (no such key) gets an error answer, without the header.
    let (status, head) = presigned(&gateway, "alice", http::Method::GET, "nothing", b"").await;
    assert_eq!(status, 404, "{head}");
    assert_eq!(reserved(&head), None, "{head}");
    gateway.shutdown().await;
}
