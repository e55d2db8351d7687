//! A multipart drain interrupted by the agent stopping resumes after restart without
//! resending the parts the journal recorded, and the shared tier ends up with the exact body.

use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use md5::{Digest, Md5};
use object_store::aws::AmazonS3Builder;
use object_store::path::Path as ObjPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use sluice_agent::Agent;
use sluice_agent::drain::PART_SIZE;
use sluice_agent::journal::OpKind;
use sluice_agent::upstream::{Credentials, Upstream, UpstreamStore};
use sluice_config::Config;
use sluice_gateway::Gateway;

const KEY: &str = "AKIDRESUME000000001";
const SECRET: &str = "resume-secret-0123456789";

fn config(dir: &Path, gateway_port: u16, drain_rate: &str) -> Config {
    let text = format!(
        r#"
[gateway]
listen = "127.0.0.1:{gateway_port}"
data_dir = "{gw}"

[agent]
listen = "127.0.0.1:0"
data_dir = "{ag}"
upstream = "http://127.0.0.1:{gateway_port}"

[[tenant]]
id = "alice"
access_key = "{KEY}"
secret_key = "{SECRET}"
drain_rate = "{drain_rate}"
"#,
        gw = dir.join("gateway").display(),
        ag = dir.join("agent").display(),
    );
    Config::parse(&text, &dir.join("sluice.toml")).expect("valid config")
}

fn client(endpoint: &str, bucket: &str) -> Arc<dyn ObjectStore> {
    Arc::new(
        AmazonS3Builder::new()
            .with_endpoint(endpoint)
            .with_allow_http(true)
            .with_virtual_hosted_style_request(false)
            .with_bucket_name(bucket)
            .with_region("us-east-1")
            .with_access_key_id(KEY)
            .with_secret_access_key(SECRET)
            .build()
            .expect("client"),
    )
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Polls `f` until it returns `Some`, failing after `limit`.
async fn until<T>(limit: Duration, mut f: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "condition not met within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_multipart_drain_resumes_without_resending_recorded_parts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let slow = config(dir.path(), port, "8MiB/s");
    let gateway = Gateway::open(&slow)
        .await
        .expect("gateway")
        .start()
        .await
        .expect("serve");
    let agent = Agent::open(&slow)
        .await
        .expect("agent")
        .start()
        .await
        .expect("serve");
    let endpoint = format!("http://{}", agent.addr);
    let creds = [(
        "alice".to_owned(),
        Credentials {
            access_key: KEY.into(),
            secret_key: SECRET.into(),
        },
    )]
    .into_iter()
    .collect();
    Upstream::new(&endpoint, "us-east-1", creds)
        .expect("client")
        .create_bucket("alice", "ckpt")
        .await
        .expect("create bucket through the agent");

    // 4 parts of 16 MiB at 8 MiB/s: about 8 s to drain.
    let body: Vec<u8> = (0..4 * PART_SIZE)
        .map(|i| (i * 7 + i / 4096) as u8)
        .collect();
    let body = Bytes::from(body);
    client(&endpoint, "ckpt")
        .put(
            &ObjPath::from("run/model.bin"),
            PutPayload::from(body.clone()),
        )
        .await
        .expect("acknowledged by the agent");

    // Wait until the journal records at least one part, then stop the agent mid-upload.
    let journal = Arc::clone(&agent.drain.journal);
    let recorded = until(Duration::from_secs(30), async || {
        let j = Arc::clone(&journal);
        let ops = tokio::task::spawn_blocking(move || j.pending())
            .await
            .expect("task")
            .expect("journal");
        ops.iter()
            .find(|o| matches!(o.kind, OpKind::Put { .. }))
            .and_then(|o| o.upload.as_ref())
            .map(|u| u.parts.len() as u64)
            .filter(|&n| n >= 1)
    })
    .await;
    drop(journal);
    agent.shutdown().await;
    assert!(
        recorded < 4,
        "the drain finished before it could be interrupted"
    );

    // Restart unpaced: only the parts not recorded are sent.
    let fast = config(dir.path(), port, "10GiB/s");
    let agent = Agent::open(&fast)
        .await
        .expect("reopen")
        .start()
        .await
        .expect("serve");
    let drain = Arc::clone(&agent.drain);
    let journal = Arc::clone(&drain.journal);
    until(Duration::from_secs(60), async || {
        let j = Arc::clone(&journal);
        let ops = tokio::task::spawn_blocking(move || j.pending())
            .await
            .expect("task")
            .expect("journal");
        ops.is_empty().then_some(())
    })
    .await;
    let sent = drain.with_tenants(|t| t["alice"].drained_bytes_total);
    // Parts recorded before the stop were not sent again (a part sent but not yet recorded
    // may be, which is at most one more part per transfer in flight).
    assert!(
        sent <= (4 - recorded) * PART_SIZE,
        "resent recorded parts: {sent} bytes after {recorded} recorded parts"
    );

    let upstream = client(&format!("http://{}", gateway.addr), "ckpt");
    let got = upstream
        .get(&ObjPath::from("run/model.bin"))
        .await
        .expect("upstream has it");
    assert_eq!(got.meta.size, body.len() as u64);
    let etag = got.meta.e_tag.clone().unwrap_or_default();
    let bytes = got.bytes().await.expect("body");
    assert!(bytes == body, "upstream body differs");
    let mut md5 = Md5::new();
    for chunk in body.chunks(usize::try_from(PART_SIZE).expect("fits")) {
        md5.update(Md5::digest(chunk));
    }
    let expected = md5.finalize().iter().fold(String::new(), |mut hex, b| {
        let _ = write!(hex, "{b:02x}");
        hex
    });
    assert_eq!(etag.trim_matches('"'), format!("{expected}-4"));

    drop(journal);
    drop(drain);
    agent.shutdown().await;
    gateway.shutdown().await;
}
