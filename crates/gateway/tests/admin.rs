//! The admin endpoint of a real gateway on its embedded catalog: refused without the admin
//! token or with a tenant's credentials; a tenant added through it authenticates at once, a
//! second key beside the first, a revoked key no more; the catalog keeps every secret sealed.

mod common;

use object_store::path::Path;
use object_store::{ClientOptions, ObjectStoreExt, PutPayload};
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
access_key = "AKIDALICE000000ADMN"
secret_key = "alice-secret-0123456789"
"#;

/// The status code and JSON body of `POST /admin` with `auth` as the Authorization header.
async fn post(
    addr: std::net::SocketAddr,
    auth: Option<&str>,
    body: &str,
) -> (u16, serde_json::Value) {
    let mut conn = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let auth = auth
        .map(|a| format!("Authorization: {a}\r\n"))
        .unwrap_or_default();
    let req = format!(
        "POST /admin HTTP/1.1\r\nHost: x\r\n{auth}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(req.as_bytes()).await.expect("write");
    let mut text = String::new();
    conn.read_to_string(&mut text).await.expect("read");
    let (head, body) = text.split_once("\r\n\r\n").expect("a response");
    let status = head
        .split_whitespace()
        .nth(1)
        .expect("status")
        .parse()
        .expect("number");
    (status, serde_json::from_str(body.trim()).expect("JSON"))
}

/// What the S3 listener says to a PUT signed with `key` into a bucket that does not exist:
/// `NoSuchBucket` once the key authenticates, `InvalidAccessKeyId` while it does not.
async fn put_as(endpoint: &str, key: &str, secret: &str) -> String {
    let client = common::client(endpoint, "missing", key, secret, ClientOptions::new());
    let err = client
        .put(&Path::from("k"), PutPayload::from_static(b"x"))
        .await
        .expect_err("no such bucket");
    err.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_changes_through_the_control_listener_are_served_at_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let text = CONFIG.replace("DATA", &data.display().to_string());
    let config = Config::parse(&text, &dir.path().join("sluice.toml")).expect("config");
    let running = Gateway::open(&config)
        .await
        .expect("open")
        .start()
        .await
        .expect("start");
    let control = running.metrics_addr.expect("metrics listener");
    let endpoint = format!("http://{}", running.addr);
    let token = std::fs::read_to_string(data.join("admin.token")).expect("token");
    let bearer = format!("Bearer {}", token.trim());
    let add = r#"{"op": "add", "id": "dave", "settings": {"capacity": 1048576}}"#;

    let (status, _) = post(control, None, add).await;
    assert_eq!(status, 401);
    let (status, _) = post(control, Some("Bearer alice-secret-0123456789"), add).await;
    assert_eq!(status, 403, "a tenant's secret is no admin credential");
    let sigv4 = "AWS4-HMAC-SHA256 Credential=AKIDALICE000000ADMN/20260101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=00";
    let (status, _) = post(control, Some(sigv4), add).await;
    assert_eq!(status, 403, "nor is a tenant's signature");

    let (status, first) = post(control, Some(&bearer), add).await;
    assert_eq!(status, 200, "{first}");
    let (ak1, sk1) = (
        first["access_key"].as_str().expect("ak"),
        first["secret_key"].as_str().expect("sk"),
    );
    assert!(
        put_as(&endpoint, ak1, sk1).await.contains("NoSuchBucket"),
        "served before the answer"
    );
    let (status, again) = post(control, Some(&bearer), add).await;
    assert_eq!(status, 409, "{again}");

    let (_, second) = post(control, Some(&bearer), r#"{"op": "key-add", "id": "dave"}"#).await;
    let (ak2, sk2) = (
        second["access_key"].as_str().expect("ak"),
        second["secret_key"].as_str().expect("sk"),
    );
    assert!(put_as(&endpoint, ak2, sk2).await.contains("NoSuchBucket"));
    assert!(
        put_as(&endpoint, ak1, sk1).await.contains("NoSuchBucket"),
        "the first still works"
    );
    let revoke = format!(r#"{{"op": "key-revoke", "id": "dave", "access_key": "{ak1}"}}"#);
    let (status, _) = post(control, Some(&bearer), &revoke).await;
    assert_eq!(status, 200);
    assert!(
        put_as(&endpoint, ak1, sk1)
            .await
            .contains("InvalidAccessKeyId")
    );
    assert!(put_as(&endpoint, ak2, sk2).await.contains("NoSuchBucket"));

    let (status, list) = post(control, Some(&bearer), r#"{"op": "list"}"#).await;
    assert_eq!(status, 200);
    assert!(!list.to_string().contains(sk2), "a listing holds no secret");
    let (_, bad) = post(control, Some(&bearer), r#"{"op": "set", "id": "nobody"}"#).await;
    assert!(
        bad["error"].as_str().expect("error").contains("nobody"),
        "{bad}"
    );
    running.shutdown().await;

    // At rest: no secret in the catalog file.
    let raw = std::fs::read(data.join("meta.redb")).expect("catalog");
    let holds = |s: &str| raw.windows(s.len()).any(|w| w == s.as_bytes());
    assert!(
        !holds(sk2) && !holds("alice-secret-0123456789"),
        "secrets are sealed at rest"
    );
    assert!(holds(ak2), "access keys are not secret");
}
