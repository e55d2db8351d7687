//! One suite for every [`UpstreamStore`]: [`UpstreamStore`]'s contract, checked on the
//! in-memory twin the drain's model test relies on and on [`Upstream`] against the gateway's
//! own S3 front end (`sluice_s3::Front` over a catalog and in-memory blobs, served on
//! loopback, signing for a region that is not the default), so the twin cannot drift from
//! what the drain meets in production.

use std::collections::HashMap;
use std::sync::Arc;

use md5::{Digest, Md5};
use object_store::PutPayload;
use object_store::memory::InMemory;
use sluice_meta::{Catalog, ObjectRecord};
use sluice_s3::{BlobStore, Front, FrontConfig, TenantKey, Tenants};
use tokio::sync::watch;

use super::memory::InMemoryUpstream;
use super::{Credentials, Head, Pool, Upstream, UpstreamError, UpstreamStore};
use crate::server::{self, Listener};

const T: &str = "t";

fn md5_hex(bytes: &[u8]) -> String {
    sluice_s3::blob::hex(&Md5::digest(bytes))
}

fn payload(bytes: &[u8]) -> PutPayload {
    PutPayload::from(bytes.to_vec())
}

async fn put(
    u: &dyn UpstreamStore,
    bucket: &str,
    key: &str,
    body: &[u8],
) -> Result<Option<String>, UpstreamError> {
    u.put(T, bucket, key, payload(body), &ObjectRecord::default())
        .await
}

async fn writes_into_a_missing_bucket_are_not_found(u: &dyn UpstreamStore) {
    let b = "missing";
    assert_eq!(put(u, b, "k", b"x").await, Err(UpstreamError::NotFound));
    let created = u
        .create_multipart(T, b, "k", &ObjectRecord::default())
        .await;
    assert_eq!(created, Err(UpstreamError::NotFound));
    assert_eq!(u.head(T, b, "k").await, Ok(None));
    assert_eq!(u.delete(T, b, "k").await, Ok(()));
    assert_eq!(u.delete_bucket(T, b).await, Ok(()));
}

async fn objects_are_replaced_whole_and_deletes_are_idempotent(u: &dyn UpstreamStore) {
    let b = "objects";
    u.create_bucket(T, b).await.expect("create");
    u.create_bucket(T, b).await.expect("a bucket already ours");
    assert_eq!(u.head(T, b, "dir/k").await, Ok(None));
    let first = b"first body".as_slice();
    assert_eq!(put(u, b, "dir/k", first).await, Ok(Some(md5_hex(first))));
    let second = vec![7u8; 3000];
    assert_eq!(
        put(u, b, "dir/k", &second).await,
        Ok(Some(md5_hex(&second)))
    );
    assert_eq!(
        u.head(T, b, "dir/k").await,
        Ok(Some(Head {
            size: 3000,
            etag: md5_hex(&second)
        }))
    );
    assert_eq!(u.delete(T, b, "dir/k").await, Ok(()));
    assert_eq!(u.head(T, b, "dir/k").await, Ok(None));
    assert_eq!(u.delete(T, b, "dir/k").await, Ok(()));
}

async fn a_bucket_with_objects_is_left_in_place(u: &dyn UpstreamStore) {
    let b = "kept";
    u.create_bucket(T, b).await.expect("create");
    put(u, b, "k", b"x").await.expect("put");
    assert_eq!(u.delete_bucket(T, b).await, Ok(()));
    assert!(u.head(T, b, "k").await.expect("head").is_some());
    u.delete(T, b, "k").await.expect("delete");
    assert_eq!(u.delete_bucket(T, b).await, Ok(()));
    assert_eq!(put(u, b, "k", b"x").await, Err(UpstreamError::NotFound));
}

async fn a_multipart_upload_appears_whole_once_completed(u: &dyn UpstreamStore) {
    let b = "multipart";
    u.create_bucket(T, b).await.expect("create");
    let record = ObjectRecord::default();
    let id = u
        .create_multipart(T, b, "big", &record)
        .await
        .expect("create");
    // The gateway's smallest part but the last.
    let part0: Vec<u8> = (0..5u32 << 20).map(|i| (i % 251) as u8).collect();
    let e0 = u
        .put_part(T, b, "big", &id, 0, payload(&part0))
        .await
        .expect("part 0");
    assert_eq!(e0, md5_hex(&part0));
    u.put_part(T, b, "big", &id, 1, payload(b"replaced"))
        .await
        .expect("part 1");
    let e1 = u
        .put_part(T, b, "big", &id, 1, payload(b"tail"))
        .await
        .expect("part 1 again");
    assert_eq!(
        u.head(T, b, "big").await,
        Ok(None),
        "nothing shows before completion"
    );
    u.complete_multipart(T, b, "big", &id, vec![e0.clone(), e1.clone()])
        .await
        .expect("complete");
    let mut md5 = Md5::new();
    md5.update(Md5::digest(&part0));
    md5.update(Md5::digest(b"tail"));
    let expected = Head {
        size: part0.len() as u64 + 4,
        etag: format!("{}-2", sluice_s3::blob::hex(&md5.finalize())),
    };
    assert_eq!(u.head(T, b, "big").await, Ok(Some(expected)));
    // Completed: the upload is gone, as after a crash that lost the completion's answer.
    let again = u.complete_multipart(T, b, "big", &id, vec![e0, e1]).await;
    assert_eq!(again, Err(UpstreamError::NotFound));
    let late = u.put_part(T, b, "big", &id, 2, payload(b"late")).await;
    assert_eq!(late, Err(UpstreamError::NotFound));
    assert_eq!(u.abort_multipart(T, b, "big", &id).await, Ok(()));
    // An aborted upload cannot be completed.
    let id = u
        .create_multipart(T, b, "gone", &record)
        .await
        .expect("create");
    let e = u
        .put_part(T, b, "gone", &id, 0, payload(b"x"))
        .await
        .expect("part");
    u.abort_multipart(T, b, "gone", &id).await.expect("abort");
    let completed = u.complete_multipart(T, b, "gone", &id, vec![e]).await;
    assert_eq!(completed, Err(UpstreamError::NotFound));
    assert_eq!(u.head(T, b, "gone").await, Ok(None));
}

async fn suite(u: &dyn UpstreamStore) {
    writes_into_a_missing_bucket_are_not_found(u).await;
    objects_are_replaced_whole_and_deletes_are_idempotent(u).await;
    a_bucket_with_objects_is_left_in_place(u).await;
    a_multipart_upload_appears_whole_once_completed(u).await;
}

#[tokio::test]
async fn the_in_memory_twin_keeps_the_upstream_contract() {
    suite(&InMemoryUpstream::new()).await;
}

/// The gateway's S3 front end on loopback, with `quota` bytes for the tenant, and an
/// [`Upstream`] signed with the tenant's keys.
struct Gateway {
    _dir: tempfile::TempDir,
    stop: watch::Sender<bool>,
    served: tokio::task::JoinHandle<()>,
    upstream: Upstream,
    endpoint: String,
}

fn creds() -> HashMap<String, Credentials> {
    HashMap::from([(
        T.to_owned(),
        Credentials {
            access_key: "AKTENANT".into(),
            secret_key: "tenant-secret".into(),
        },
    )])
}

impl Gateway {
    async fn start(quota: u64) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let (catalog, _) = Catalog::open(&dir.path().join("meta.redb")).expect("catalog");
        catalog.ledger().set_quota(T, quota);
        catalog.ledger().set_max_buckets(T, 100);
        let blobs = BlobStore::new(
            Arc::new(InMemory::new()),
            sluice_s3::blob::DEFAULT_GRAIN,
            sluice_s3::blob::DEFAULT_GRAIN,
        );
        let config = FrontConfig {
            region: "eu-west-3".into(),
            max_object_size: 1 << 30,
        };
        let front = Front::new(Arc::new(catalog), Arc::new(blobs), config);
        let tenants = Arc::new(Tenants::new(vec![TenantKey {
            tenant: Arc::from(T),
            access_key: "AKTENANT".into(),
            secret_key: "tenant-secret".into(),
        }]));
        let (listener, addr) = server::bind("127.0.0.1:0").await.expect("bind");
        let (stop, stopped) = watch::channel(false);
        let served = tokio::spawn(server::serve(
            listener,
            Listener::S3(sluice_s3::service(front, &tenants)),
            stopped,
        ));
        let endpoint = format!("http://{addr}");
        let upstream = Upstream::new(&endpoint, "eu-west-3", creds()).expect("client");
        Self {
            _dir: dir,
            stop,
            served,
            upstream,
            endpoint,
        }
    }

    async fn stop(self) {
        let _ = self.stop.send(true);
        self.served.await.expect("server");
    }
}

#[tokio::test]
async fn upstream_against_the_gateway_front_end_keeps_the_upstream_contract() {
    let gateway = Gateway::start(1 << 30).await;
    suite(&gateway.upstream).await;
    gateway.stop().await;
}

/// A pool whose first gateway is a closed port (every call refused, as a killed gateway's)
/// and whose second is the front end: the contract holds through the live one, and the dead
/// one's failures are what status shows.
#[tokio::test]
async fn a_pool_with_a_dead_gateway_keeps_the_upstream_contract() {
    let gateway = Gateway::start(1 << 30).await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let dead = format!("http://{}", closed.local_addr().expect("addr"));
    drop(closed);
    let client = |e: &str| Arc::new(Upstream::new(e, "eu-west-3", creds()).expect("client"));
    let pool = Pool::new(vec![client(&dead), client(&gateway.endpoint)]);
    suite(&pool).await;
    let states = pool.states();
    assert_eq!(states[0].endpoint, dead);
    assert!(states[0].failures_total >= 1, "{states:?}");
    assert!(
        states[0]
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("onnect")),
        "{states:?}"
    );
    assert!(states[1].up && states[1].failures_total == 0, "{states:?}");
    gateway.stop().await;
}

#[tokio::test]
async fn a_pool_over_one_twin_keeps_the_upstream_contract() {
    let twin = Arc::new(InMemoryUpstream::new());
    suite(&Pool::new(vec![Arc::clone(&twin), twin])).await;
}

#[tokio::test]
async fn the_gateway_refusing_a_put_past_the_quota_is_a_permanent_quota_exceeded() {
    let gateway = Gateway::start(1000).await;
    let u = &gateway.upstream;
    u.create_bucket(T, "full").await.expect("create");
    let refused = put(u, "full", "k", &[1u8; 4000]).await;
    match refused {
        Err(UpstreamError::Refused {
            status: 403,
            ref message,
        }) if message.starts_with("QuotaExceeded") => {}
        other => panic!("{other:?}"),
    }
    assert!(refused.is_err_and(|e| e.is_permanent()));
    gateway.stop().await;
}
