//! The gateway's log through the real stack — s3s's signature check, sluice-s3's access
//! check and error mapping, the throughput scheduler, sluice-serve's one line per request —
//! driven by a Rust S3 client: a HEAD of a missing key, a bad signature and requests refused
//! `SlowDown` leave no WARN or ERROR line under the binary's default filter, and at debug
//! each one's line names its request id, code and (once authenticated) tenant and operation.
//!
//! One test in this binary: it installs the process's global subscriber, which the gateway's
//! worker threads log to.

use std::sync::{Arc, Mutex};

use object_store::path::Path;
use object_store::{ClientOptions, ObjectStoreExt as _};
use sluice_config::Config;
use sluice_gateway::Gateway;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt as _;

mod common;

/// One operation a second for the whole tier and one request waiting per tenant: of a burst
/// of concurrent requests, one is admitted, one waits, the rest are refused `SlowDown`.
const CONFIG: &str = r#"
[gateway]
listen = "127.0.0.1:0"
data_dir = "DATA"
[gateway.capacity]
bandwidth = "1GiB/s"
ops = 1.0
queue_depth = 1
[[tenant]]
id = "alice"
access_key = "AKIDALICE000000LOGS"
secret_key = "alice-secret-0123456789"
capacity = "64MiB"
"#;

/// A log in memory.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Log {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("log").extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Log {
    type Writer = Log;

    fn make_writer(&'a self) -> Log {
        self.clone()
    }
}

impl Log {
    fn lines(&self) -> Vec<String> {
        String::from_utf8_lossy(&self.0.lock().expect("log"))
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

fn layer<S>(log: &Log, filter: &str) -> impl tracing_subscriber::Layer<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    use tracing_subscriber::Layer as _;
    tracing_subscriber::fmt::layer()
        .with_ansi(false)
        .with_writer(log.clone())
        .with_filter(EnvFilter::new(filter))
}

/// The `id=` of a log line's request span, if it is 16 hex digits.
fn request_id(line: &str) -> Option<&str> {
    let start = line.find("request{id=")? + "request{id=".len();
    let id = line.get(start..start + 16)?;
    id.bytes().all(|b| b.is_ascii_hexdigit()).then_some(id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_leave_no_warning_and_their_debug_lines_name_request_and_tenant() {
    let default = Log::default();
    let debug = Log::default();
    // Two layers share a span's formatted fields: a field recorded after the span began
    // shows twice in these logs (once in the binary's).
    tracing::subscriber::set_global_default(
        tracing_subscriber::registry()
            .with(layer(&default, sluice_serve::DEFAULT_LOG_FILTER))
            .with(layer(&debug, "debug")),
    )
    .expect("the only subscriber of this binary");

    let dir = tempfile::tempdir().expect("tempdir");
    let text = CONFIG.replace("DATA", &dir.path().join("data").display().to_string());
    let config = Config::parse(&text, &dir.path().join("sluice.toml")).expect("config");
    let gateway = Gateway::open(&config).await.expect("open");
    gateway
        .front()
        .catalog()
        .create_bucket("alice", "ckpt", 0)
        .expect("bucket");
    let running = gateway.start().await.expect("start");
    let endpoint = format!("http://{}", running.addr);
    let client = |secret: &str| {
        common::client(
            &endpoint,
            "ckpt",
            "AKIDALICE000000LOGS",
            secret,
            ClientOptions::new(),
        )
    };
    let alice = client("alice-secret-0123456789");
    let forger = client("wrong-secret-000000000");

    let err = alice
        .head(&Path::from("missing"))
        .await
        .expect_err("no such key");
    assert!(matches!(err, object_store::Error::NotFound { .. }), "{err}");
    let err = forger
        .head(&Path::from("missing"))
        .await
        .expect_err("bad signature");
    assert!(
        !matches!(err, object_store::Error::NotFound { .. }),
        "{err}"
    );
    let burst: Vec<_> = (0..8)
        .map(|_| {
            let alice = Arc::clone(&alice);
            tokio::spawn(async move { alice.head(&Path::from("missing")).await })
        })
        .collect();
    for request in burst {
        assert!(request.await.expect("task").is_err());
    }
    running.shutdown().await;
    // Proof that the default layer writes at all: its silence above is the filter's.
    tracing::info!("the gateway has stopped");

    let kept = default.lines();
    let loud: Vec<_> = kept
        .iter()
        .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
        .collect();
    assert!(loud.is_empty(), "{loud:#?}");
    assert!(
        kept.iter().any(|l| l.contains("the gateway has stopped")),
        "{kept:#?}"
    );

    let all = debug.lines();
    let refused = |code: &str| -> Vec<&String> {
        all.iter()
            .filter(|l| l.contains("request refused") && l.contains(&format!("code=\"{code}\"")))
            .collect()
    };
    let missing = refused("NoSuchKey");
    assert!(!missing.is_empty(), "{all:#?}");
    for line in &missing {
        assert!(line.contains(" DEBUG "), "{line}");
        assert!(request_id(line).is_some(), "{line}");
        assert!(line.contains("tenant=alice"), "{line}");
        assert!(line.contains("op=HeadObject"), "{line}");
        assert!(line.contains("status=404"), "{line}");
    }
    let bad_signature = refused("SignatureDoesNotMatch");
    assert_eq!(bad_signature.len(), 1, "{all:#?}");
    assert!(
        request_id(bad_signature[0]).is_some(),
        "{}",
        bad_signature[0]
    );
    assert!(
        bad_signature[0].contains("status=403"),
        "{}",
        bad_signature[0]
    );
    // Refused before it was authenticated: no tenant is named.
    assert!(
        !bad_signature[0].contains("tenant="),
        "{}",
        bad_signature[0]
    );
    let slowed = refused("SlowDown");
    assert!(
        !slowed.is_empty(),
        "8 requests against one op/s and a queue of 1: {all:#?}"
    );
    for line in &slowed {
        assert!(line.contains(" DEBUG "), "{line}");
        assert!(line.contains("status=503"), "{line}");
        assert!(line.contains("tenant=alice"), "{line}");
        assert!(request_id(line).is_some(), "{line}");
    }
    // One line per request: the ids of the request lines never repeat.
    let mut ids: Vec<_> = all
        .iter()
        .filter(|l| l.contains("request refused") || l.contains("request served"))
        .filter_map(|l| request_id(l))
        .collect();
    let n = ids.len();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), n, "{all:#?}");
}
