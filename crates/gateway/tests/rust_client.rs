//! The gateway driven over HTTP by a Rust S3 client (`object_store`'s S3 implementation,
//! SigV4): the data path operations it speaks, namespace isolation between two tenants, and
//! quota refusals — against an in-process gateway on a loopback port.

use std::sync::Arc;

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ClientOptions, ObjectStore, ObjectStoreExt, PutPayload, WriteMultipart};
use sluice_config::Config;
use sluice_gateway::Gateway;

mod common;

const CONFIG: &str = r#"
[gateway]
listen = "127.0.0.1:0"
data_dir = "DATA"
[[tenant]]
id = "alice"
access_key = "AKIDALICE000000RUST"
secret_key = "alice-secret-0123456789"
capacity = "64MiB"
[[tenant]]
id = "bob"
access_key = "AKIDBOB00000000RUST"
secret_key = "bob-secret-0123456789"
capacity = "1MiB"
"#;

fn client(endpoint: &str, bucket: &str, key: &str, secret: &str) -> Arc<dyn ObjectStore> {
    common::client(endpoint, bucket, key, secret, ClientOptions::new())
}

fn pattern(len: usize) -> Bytes {
    (0..len)
        .map(|i| (i % 251) as u8)
        .collect::<Vec<u8>>()
        .into()
}

/// A gateway over a fresh data directory (kept alive by the returned `TempDir`) with a
/// `ckpt` bucket for each of `owners`: `object_store` cannot create buckets, so they are made
/// in the catalog directly.
async fn gateway_with_buckets(owners: &[&str]) -> (tempfile::TempDir, Config, Gateway) {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = CONFIG.replace("DATA", &dir.path().join("data").display().to_string());
    let config = Config::parse(&text, &dir.path().join("sluice.toml")).expect("config");
    let gateway = Gateway::open(&config).await.expect("open");
    for owner in owners {
        gateway
            .front()
            .catalog()
            .create_bucket(owner, "ckpt", 0)
            .expect("bucket");
    }
    (dir, config, gateway)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rust_client_round_trips_and_isolation() {
    let (_dir, _config, gateway) = gateway_with_buckets(&["alice", "bob"]).await;
    let running = gateway.start().await.expect("start");
    let endpoint = format!("http://{}", running.addr);
    let alice = client(
        &endpoint,
        "ckpt",
        "AKIDALICE000000RUST",
        "alice-secret-0123456789",
    );
    let bob = client(
        &endpoint,
        "ckpt",
        "AKIDBOB00000000RUST",
        "bob-secret-0123456789",
    );

    // PUT, GET, ranged GET, HEAD.
    let body = pattern(3 * 1024 * 1024 + 5);
    alice
        .put(
            &Path::from("run/step-1/shard-0"),
            PutPayload::from(body.clone()),
        )
        .await
        .expect("put");
    let got = alice
        .get(&Path::from("run/step-1/shard-0"))
        .await
        .expect("get")
        .bytes()
        .await
        .expect("body");
    assert_eq!(got, body);
    let part = alice
        .get_range(&Path::from("run/step-1/shard-0"), 1000..2_000_000)
        .await
        .expect("range");
    assert_eq!(part, body.slice(1000..2_000_000));
    let meta = alice
        .head(&Path::from("run/step-1/shard-0"))
        .await
        .expect("head");
    assert_eq!(meta.size, body.len() as u64);

    // Multipart through the S3 API (CreateMultipartUpload, UploadPart, Complete).
    let big = pattern(12 * 1024 * 1024);
    let upload = alice
        .put_multipart(&Path::from("run/step-1/big"))
        .await
        .expect("mpu");
    let mut w = WriteMultipart::new_with_chunk_size(upload, 5 * 1024 * 1024);
    w.write(&big);
    w.finish().await.expect("complete");
    let got = alice
        .get(&Path::from("run/step-1/big"))
        .await
        .expect("get")
        .bytes()
        .await
        .expect("body");
    assert_eq!(got, big);

    // Listing with a delimiter, copy, delete.
    alice
        .copy(&Path::from("run/step-1/shard-0"), &Path::from("run/latest"))
        .await
        .expect("copy");
    let listing = alice
        .list_with_delimiter(Some(&Path::from("run")))
        .await
        .expect("list");
    let objects: Vec<_> = listing
        .objects
        .iter()
        .map(|o| o.location.to_string())
        .collect();
    let prefixes: Vec<_> = listing
        .common_prefixes
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(objects, ["run/latest"]);
    assert_eq!(prefixes, ["run/step-1"]);
    alice
        .delete(&Path::from("run/latest"))
        .await
        .expect("delete");
    let all: Vec<_> = alice
        .list(None)
        .map_ok(|m| m.location.to_string())
        .try_collect()
        .await
        .expect("list");
    assert_eq!(all, ["run/step-1/big", "run/step-1/shard-0"]);

    // Bob's bucket of the same name is another namespace.
    assert!(
        bob.list(None)
            .try_collect::<Vec<_>>()
            .await
            .expect("list")
            .is_empty()
    );
    let err = bob
        .get(&Path::from("run/step-1/shard-0"))
        .await
        .expect_err("not bob's");
    assert!(matches!(err, object_store::Error::NotFound { .. }), "{err}");

    // Over quota: refused, and nothing partial is visible.
    let err = bob
        .put(
            &Path::from("too-big"),
            PutPayload::from(pattern(2 * 1024 * 1024)),
        )
        .await
        .expect_err("over quota");
    assert!(err.to_string().contains("QuotaExceeded"), "{err}");
    assert!(bob.head(&Path::from("too-big")).await.is_err());

    // A wrong secret is refused.
    let forger = client(
        &endpoint,
        "ckpt",
        "AKIDALICE000000RUST",
        "wrong-secret-000000000",
    );
    let err = forger
        .head(&Path::from("run/step-1/big"))
        .await
        .expect_err("bad signature");
    assert!(
        !matches!(err, object_store::Error::NotFound { .. }),
        "{err}"
    );

    running.shutdown().await;
}

/// Small objects are kept inline in the catalog: through a real client they behave as any
/// other object, and after a restart they are still served while reconciliation, which
/// knows only blobs, neither misses them nor deletes a blob for them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_objects_round_trip_and_survive_a_restart() {
    let (_dir, config, gateway) = gateway_with_buckets(&["alice"]).await;
    let running = gateway.start().await.expect("start");
    let alice = client(
        &format!("http://{}", running.addr),
        "ckpt",
        "AKIDALICE000000RUST",
        "alice-secret-0123456789",
    );
    let small = pattern(4096);
    let large = pattern(sluice_s3::front::INLINE_MAX as usize + 1);
    alice
        .put(&Path::from("small"), PutPayload::from(small.clone()))
        .await
        .expect("put small");
    alice
        .put(&Path::from("large"), PutPayload::from(large.clone()))
        .await
        .expect("put large");
    let got = alice.get(&Path::from("small")).await.expect("get");
    assert_eq!(got.meta.size, 4096);
    assert_eq!(got.bytes().await.expect("body"), small);
    let part = alice
        .get_range(&Path::from("small"), 10..4000)
        .await
        .expect("range");
    assert_eq!(part, small.slice(10..4000));
    alice
        .copy(&Path::from("small"), &Path::from("copy"))
        .await
        .expect("copy");
    let listed: Vec<(String, u64)> = alice
        .list(None)
        .map_ok(|m| (m.location.to_string(), m.size))
        .try_collect()
        .await
        .expect("list");
    assert_eq!(
        listed,
        [
            ("copy".to_owned(), 4096),
            ("large".to_owned(), large.len() as u64),
            ("small".to_owned(), 4096),
        ]
    );
    running.shutdown().await;

    let gateway = Gateway::open(&config).await.expect("reopen");
    assert_eq!(gateway.summary.orphans_deleted, 0);
    assert!(gateway.summary.missing.is_empty());
    assert!(gateway.summary.usage_fixed.is_empty());
    let running = gateway.start().await.expect("restart");
    let alice = client(
        &format!("http://{}", running.addr),
        "ckpt",
        "AKIDALICE000000RUST",
        "alice-secret-0123456789",
    );
    for (key, body) in [("small", &small), ("copy", &small), ("large", &large)] {
        let got = alice
            .get(&Path::from(key))
            .await
            .expect("get after restart");
        assert_eq!(&got.bytes().await.expect("body"), body, "{key}");
    }
    running.shutdown().await;
}
