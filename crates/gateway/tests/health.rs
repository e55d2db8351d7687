//! The health endpoints on the metrics listener of a real gateway: `/healthz` and `/readyz`
//! answer 200 when the catalog and the backend answer.

use sluice_config::Config;
use sluice_gateway::Gateway;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const CONFIG: &str = r#"
[gateway]
listen = "127.0.0.1:0"
metrics_listen = "127.0.0.1:0"
data_dir = "DATA"
[[tenant]]
id = "alice"
access_key = "AKIDALICE000000HLTH"
secret_key = "alice-secret-0123456789"
"#;

/// The status line and body of `GET path` (HTTP/1.0: the server closes after the answer).
async fn get(addr: std::net::SocketAddr, path: &str) -> (String, String) {
    let mut conn = tokio::net::TcpStream::connect(addr).await.expect("connect");
    conn.write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .expect("write");
    let mut text = String::new();
    conn.read_to_string(&mut text).await.expect("read");
    let (head, body) = text.split_once("\r\n\r\n").expect("a response");
    let status = head.lines().next().expect("status line").to_owned();
    (status, body.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_and_readyz_answer_200_on_the_metrics_listener() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = CONFIG.replace("DATA", &dir.path().join("data").display().to_string());
    let config = Config::parse(&text, &dir.path().join("sluice.toml")).expect("config");
    let running = Gateway::open(&config)
        .await
        .expect("open")
        .start()
        .await
        .expect("start");
    let metrics = running.metrics_addr.expect("metrics listener");
    let (status, body) = get(metrics, "/healthz").await;
    assert!(status.contains(" 200 "), "{status}");
    assert_eq!(body, "ok\n");
    let (status, body) = get(metrics, "/readyz").await;
    assert!(status.contains(" 200 "), "{status}: {body}");
    assert_eq!(running.control.unready().await, None);
    let (status, _) = get(metrics, "/nothing").await;
    assert!(status.contains(" 404 "), "{status}");
    running.shutdown().await;
}
