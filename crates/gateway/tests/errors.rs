//! Refusals that explain themselves: a wrong secret and a bad bucket name reach a real S3
//! client with S3's message, not an empty one (which the AWS CLI prints as "Unknown").

use object_store::path::Path;
use object_store::{ClientOptions, ObjectStoreExt, PutPayload};
use sluice_config::Config;
use sluice_gateway::Gateway;

mod common;

const CONFIG: &str = r#"
[gateway]
listen = "127.0.0.1:0"
data_dir = "DATA"
[[tenant]]
id = "alice"
access_key = "AKIDALICE000000ERRS"
secret_key = "alice-secret-0123456789"
capacity = "1MiB"
"#;

async fn running() -> (tempfile::TempDir, sluice_gateway::Running) {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = CONFIG.replace("DATA", &dir.path().join("data").display().to_string());
    let config = Config::parse(&text, &dir.path().join("sluice.toml")).expect("config");
    let gateway = Gateway::open(&config).await.expect("open");
    gateway
        .front()
        .catalog()
        .create_bucket("alice", "ckpt", 0)
        .expect("bucket");
    (dir, gateway.start().await.expect("start"))
}

/// The text of a refused PUT as the client reports it (object_store quotes the body).
async fn refusal(endpoint: &str, bucket: &str, secret: &str) -> String {
    let client = common::client(
        endpoint,
        bucket,
        "AKIDALICE000000ERRS",
        secret,
        ClientOptions::new(),
    );
    let err = client
        .put(&Path::from("k"), PutPayload::from_static(b"x"))
        .await
        .expect_err("refused");
    err.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_secret_is_told_to_check_the_key_and_signing_method() {
    let (_dir, gateway) = running().await;
    let endpoint = format!("http://{}", gateway.addr);
    let text = refusal(&endpoint, "ckpt", "not-the-secret-000000").await;
    assert!(text.contains("SignatureDoesNotMatch"), "{text}");
    assert!(
        text.contains(
            "<Message>The request signature we calculated does not match the signature you \
             provided. Check your key and signing method.</Message>"
        ),
        "{text}"
    );
    gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_bucket_name_is_told_the_rule_it_broke() {
    let (_dir, gateway) = running().await;
    let endpoint = format!("http://{}", gateway.addr);
    for (bucket, rule) in [
        ("ab", "between 3 (min) and 63 (max) characters long"),
        (
            "Bad_Bucket",
            "only of lowercase letters, numbers, periods (.), and hyphens (-)",
        ),
        ("-lead", "must begin and end with a letter or number"),
        ("a..b", "must not contain two adjacent periods"),
    ] {
        let text = refusal(&endpoint, bucket, "alice-secret-0123456789").await;
        assert!(text.contains("InvalidBucketName"), "{bucket}: {text}");
        assert!(text.contains(rule), "{bucket}: {text}");
    }
    gateway.shutdown().await;
}
