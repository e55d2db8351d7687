//! The tenants' confidential-object keys ([`sluice_agent::keys`]) against a stand-in key
//! broker: released only with the expected evidence, refused (and the reason given)
//! otherwise; released later without restarting the agent; withdrawn by the broker
//! (crypto-shred); a bad `key_file` fails the start; reload picks up a changed table; and the
//! key reaches neither the data directory nor the status.

mod broker;

use std::path::Path;
use std::time::Duration;

use broker::Broker;
use sluice_agent::Agent;
use sluice_agent::keys::Keys;
use sluice_config::Config;
use sluice_crypt::TenantKey;

const KEY: [u8; 32] = [
    0x9c, 0xba, 0xda, 0xc6, 0x73, 0xc3, 0x30, 0x50, 0xc6, 0x74, 0x50, 0xac, 0xb3, 0xbb, 0xd7, 0xb5,
    0x58, 0x05, 0xb9, 0x78, 0x90, 0xaf, 0x52, 0x99, 0x81, 0xc5, 0xdd, 0xc0, 0x72, 0x74, 0x38, 0xc8,
];
const OTHER: [u8; 32] = [0x5a; 32];
const RESOURCE: &str = "default/sluice/alice";

const AGENT: &str = r#"
[agent]
listen = "127.0.0.1:0"
status_listen = "127.0.0.1:0"
data_dir = "DATA"
upstream = "http://127.0.0.1:9"
"#;

fn tenant(id: &str, encryption: &str) -> String {
    format!(
        "[[tenant]]\nid = \"{id}\"\naccess_key = \"AKID{id}0000000KEYS\"\n\
         secret_key = \"{id}-secret-0123456789\"\n{encryption}"
    )
}

fn url_table(url: &str, evidence: Option<&str>) -> String {
    let evidence = evidence.map_or(String::new(), |e| format!("evidence_file = \"{e}\"\n"));
    format!("[tenant.encryption]\nkey_url = \"{url}\"\n{evidence}")
}

fn parse(dir: &Path, text: &str) -> Config {
    let text = format!(
        "{}{text}",
        AGENT.replace("DATA", &dir.join("data").display().to_string())
    );
    Config::parse(&text, &dir.join("agent.toml")).expect("config")
}

/// `host:port` of a URL.
fn url_host(url: &str) -> &str {
    url.trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap_or_default()
}

fn id_of(bytes: &[u8]) -> String {
    TenantKey::from_bytes(bytes).expect("a key").id()
}

/// The operator's status document.
async fn status(addr: std::net::SocketAddr) -> serde_json::Value {
    let text = reqwest::get(format!("http://{addr}/status"))
        .await
        .expect("status")
        .text()
        .await
        .expect("status body");
    serde_json::from_str(&text).expect("status JSON")
}

fn encryption_of<'a>(status: &'a serde_json::Value, tenant: &str) -> &'a serde_json::Value {
    status["tenants"]
        .as_array()
        .expect("tenants")
        .iter()
        .find(|t| t["tenant"] == tenant)
        .map(|t| &t["encryption"])
        .expect("the tenant's row")
}

/// Polls `done` every 100 ms until it holds or `within` passes.
async fn eventually<F: std::future::Future<Output = bool>>(
    within: Duration,
    mut done: impl FnMut() -> F,
) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    while tokio::time::Instant::now() < deadline {
        if done().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

/// Alice's key at a broker that releases it for the evidence `attested`, and her config
/// naming it with an evidence file holding `evidence`.
async fn brokered(evidence: &str) -> (tempfile::TempDir, Broker, Config) {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = Broker::start("attested").await;
    broker.put(RESOURCE, &KEY);
    std::fs::write(dir.path().join("evidence"), evidence).expect("evidence");
    let config = parse(
        dir.path(),
        &tenant("alice", &url_table(&broker.url(RESOURCE), Some("evidence"))),
    );
    (dir, broker, config)
}

/// The agent of `config`, started, and its status listener.
async fn started(config: &Config) -> (sluice_agent::Running, std::net::SocketAddr) {
    let running = Agent::open(config)
        .await
        .expect("open")
        .start()
        .await
        .expect("start");
    let addr = running.status_addr.expect("status listener");
    (running, addr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_broker_releases_the_key_only_with_the_expected_evidence() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = Broker::start("good-evidence").await;
    broker.put(RESOURCE, &KEY);
    std::fs::write(dir.path().join("good"), "good-evidence\n").expect("evidence");
    std::fs::write(dir.path().join("bad"), "forged").expect("evidence");
    let url = broker.url(RESOURCE);
    let config = parse(
        dir.path(),
        &[
            tenant("alice", &url_table(&url, Some("good"))),
            tenant("bob", &url_table(&url, Some("bad"))),
            tenant("carol", &url_table(&url, None)),
            tenant(
                "dave",
                &url_table(&broker.url("default/sluice/dave"), Some("good")),
            ),
            tenant("erin", ""),
        ]
        .concat(),
    );
    let keys = Keys::open(&config).await.expect("a refusal is not fatal");

    let alice = keys.tenant_key("alice").expect("released").expect("a key");
    assert_eq!(alice.id(), id_of(&KEY));
    for (tenant, says) in [
        (
            "bob",
            "refused (403 Forbidden): the evidence does not satisfy the policy",
        ),
        ("carol", "refused (403 Forbidden)"),
        (
            "dave",
            "refused (404 Not Found): no resource default/sluice/dave",
        ),
    ] {
        let err = keys.tenant_key(tenant).expect_err(tenant);
        assert!(
            err.starts_with(&format!(
                "tenant {tenant:?}'s confidential-object key is unavailable"
            )) && err.contains(says)
                && err.contains(&format!("the key broker http://{}", url_host(&url))),
            "{tenant}: {err}"
        );
        let s = keys.status(tenant).expect("encrypted");
        assert!(!s.loaded && s.key_id.is_none(), "{s:?}");
        assert!(
            s.error.as_deref().is_some_and(|e| e.contains(says)),
            "{s:?}"
        );
    }
    assert!(
        matches!(keys.tenant_key("erin"), Ok(None)),
        "no [tenant.encryption]"
    );
    assert_eq!(keys.status("erin"), None);
    assert_eq!(broker.answered(200), 1);
    assert_eq!(broker.answered(403), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_broker_is_not_fatal_and_names_why() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A port nothing listens on: bound, then released.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let config = parse(
        dir.path(),
        &tenant(
            "alice",
            &url_table(
                &format!("http://127.0.0.1:{port}/cdh/resource/{RESOURCE}"),
                None,
            ),
        ),
    );
    let keys = Keys::open(&config).await.expect("not fatal");
    let err = keys.tenant_key("alice").expect_err("no broker");
    assert!(
        err.contains("did not answer") && err.contains(&port.to_string()),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_key_becomes_available_once_the_broker_releases_it_without_a_restart() {
    let (_dir, broker, config) = brokered("not-yet").await;
    let (running, addr) = started(&config).await;
    let s = status(addr).await;
    let e = encryption_of(&s, "alice");
    assert_eq!(e["loaded"], false, "{e}");
    assert_eq!(e["source"], "key_url", "{e}");
    assert!(
        e["error"].as_str().is_some_and(|m| m.contains("403")),
        "{e}"
    );

    // The broker's policy now accepts what the pod presents.
    broker.expect_evidence("not-yet");
    let loaded = eventually(Duration::from_secs(20), || async {
        encryption_of(&status(addr).await, "alice")["loaded"] == true
    })
    .await;
    assert!(loaded, "the key was not retried: {}", status(addr).await);
    let s = status(addr).await;
    let e = encryption_of(&s, "alice");
    assert_eq!(e["key_id"], id_of(&KEY), "{e}");
    assert!(e["error"].is_null(), "{e}");
    let metrics = reqwest::get(format!("http://{addr}/metrics"))
        .await
        .expect("metrics")
        .text()
        .await
        .expect("metrics body");
    assert!(
        metrics.contains("sluice_agent_tenant_key_loaded{tenant=\"alice\"} 1"),
        "{metrics}"
    );
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_the_broker_withdraws_is_dropped_from_memory() {
    let (_dir, broker, config) = brokered("attested").await;
    let keys = Keys::open(&config).await.expect("open");
    assert!(keys.tenant_key("alice").is_ok_and(|k| k.is_some()));
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(keys.clone().run(stopped));

    broker.remove(RESOURCE);
    let within = sluice_agent::keys::RECHECK + Duration::from_secs(10);
    let dropped = eventually(within, || async { keys.tenant_key("alice").is_err() }).await;
    assert!(dropped, "the withdrawn key is still served");
    let err = keys.tenant_key("alice").expect_err("withdrawn");
    assert!(err.contains("withdrew") && err.contains("404"), "{err}");
    let _ = stop.send(true);
    task.await.expect("the key task");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_file_of_the_wrong_length_fails_the_start_naming_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("alice.key");
    std::fs::write(&file, &KEY[..31]).expect("key file");
    let config = parse(
        dir.path(),
        &tenant("alice", "[tenant.encryption]\nkey_file = \"alice.key\"\n"),
    );
    let Err(err) = Agent::open(&config).await else {
        panic!("a 31-byte key file was accepted");
    };
    let err = err.to_string();
    assert!(
        err.contains("tenant \"alice\"")
            && err.contains(&file.display().to_string())
            && err.contains("31 bytes")
            && err.contains("exactly 32 raw bytes"),
        "{err}"
    );
    std::fs::remove_file(&file).expect("remove");
    let Err(err) = Keys::open(&config).await else {
        panic!("a missing key file was accepted");
    };
    assert!(
        err.to_string().contains(&file.display().to_string()),
        "{err}"
    );
    std::fs::write(&file, KEY).expect("key file");
    let keys = Keys::open(&config).await.expect("32 bytes");
    assert_eq!(
        keys.tenant_key("alice").expect("loaded").map(|k| k.id()),
        Some(id_of(&KEY))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_picks_up_a_changed_key_and_refuses_a_bad_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("one.key"), KEY).expect("key");
    std::fs::write(dir.path().join("two.key"), OTHER).expect("key");
    std::fs::write(dir.path().join("short.key"), b"short").expect("key");
    let with = |file: &str| {
        parse(
            dir.path(),
            &format!(
                "{}{}",
                tenant(
                    "alice",
                    &format!("[tenant.encryption]\nkey_file = \"{file}\"\n")
                ),
                tenant("bob", "")
            ),
        )
    };
    let running = Agent::open(&with("one.key"))
        .await
        .expect("open")
        .start()
        .await
        .expect("start");
    let addr = running.status_addr.expect("status listener");
    let key_id = |s: serde_json::Value| encryption_of(&s, "alice")["key_id"].clone();
    assert_eq!(key_id(status(addr).await), id_of(&KEY));
    assert!(
        encryption_of(&status(addr).await, "bob").is_null(),
        "bob has no table"
    );

    let err = running
        .control
        .reload(&with("short.key"))
        .expect_err("a 5-byte key file")
        .to_string();
    assert!(
        err.contains("short.key") && err.contains("5 bytes"),
        "{err}"
    );
    assert_eq!(key_id(status(addr).await), id_of(&KEY), "nothing changed");

    running.control.reload(&with("two.key")).expect("reload");
    assert_eq!(key_id(status(addr).await), id_of(&OTHER));
    let plain = parse(
        dir.path(),
        &format!("{}{}", tenant("alice", ""), tenant("bob", "")),
    );
    running.control.reload(&plain).expect("reload");
    assert!(encryption_of(&status(addr).await, "alice").is_null());
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_key_never_reaches_the_data_directory_nor_the_status() {
    let (dir, _broker, config) = brokered("attested").await;
    let (running, addr) = started(&config).await;
    let text = status(addr).await.to_string();
    assert!(text.contains(&id_of(&KEY)), "{text}");
    running.control.reload(&config).expect("reload");
    running.shutdown().await;

    let hex = KEY.iter().fold(String::new(), |mut s, b| {
        use std::fmt::Write as _;
        let _ = write!(s, "{b:02x}");
        s
    });
    assert!(!text.contains(&hex), "the status shows the key: {text}");
    let mut files = 0;
    let mut stack = vec![dir.path().join("data")];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("read_dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let bytes = std::fs::read(&path).expect("read");
            files += 1;
            assert!(
                !bytes.windows(KEY.len()).any(|w| w == KEY)
                    && !bytes.windows(hex.len()).any(|w| w == hex.as_bytes()),
                "{} holds the key",
                path.display()
            );
        }
    }
    assert!(
        files >= 2,
        "the agent wrote its catalog and node id: {files} files"
    );
}
