//! Recovery end to end below the protocol: what the front writes beside each object, a
//! catalog rebuilt from it, start-up cleanup that spares what another catalog wrote, garbage
//! collection that spares what the catalog cannot vouch for, and a GET of a lost blob.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::ObjectStore;
use object_store::memory::InMemory;
use s3s::dto::{self, StreamingBlob};
use sluice_meta::Catalog;

use crate::blob::{BlobStore, DEFAULT_GRAIN};
use crate::checksum::Expected;
use crate::error::ApiError;
use crate::front::{Front, FrontConfig};
use crate::reconcile;
use crate::recovery::{self, Finding, GcOptions, inventory};

const T: &str = "tenant";
const B: &str = "bkt";

struct Site {
    _dir: tempfile::TempDir,
    front: Front,
}

fn catalog(dir: &tempfile::TempDir) -> Catalog {
    let (catalog, _) = Catalog::open(&dir.path().join("meta.redb")).expect("catalog");
    catalog.ledger().set_quota(T, 1 << 30);
    catalog
}

/// A front over a fresh catalog and `backend`, reconciled as a gateway starts.
async fn site(backend: &Arc<InMemory>) -> Site {
    let dir = tempfile::tempdir().expect("tempdir");
    let catalog = catalog(&dir);
    let blobs = BlobStore::new(Arc::clone(backend) as _, DEFAULT_GRAIN, DEFAULT_GRAIN);
    reconcile(&catalog, &blobs, None).await.expect("reconcile");
    let config = FrontConfig {
        region: "us-east-1".into(),
        max_object_size: 1 << 30,
    };
    let front = Front::new(Arc::new(catalog), Arc::new(blobs), config);
    Site { _dir: dir, front }
}

async fn put(f: &Front, key: &str, body: &[u8]) {
    let input = dto::PutObjectInput {
        bucket: B.into(),
        key: key.into(),
        body: Some(StreamingBlob::wrap(futures::stream::iter([Ok::<
            _,
            std::io::Error,
        >(
            Bytes::copy_from_slice(body),
        )]))),
        content_length: Some(body.len() as i64),
        content_type: Some("application/x-test".into()),
        cache_control: Some("max-age=60".into()),
        metadata: Some([("owner".to_owned(), key.to_owned())].into_iter().collect()),
        ..Default::default()
    };
    f.put_object_op(T, input, Expected::None)
        .await
        .expect("put");
}

async fn get(f: &Front, key: &str) -> Result<Bytes, ApiError> {
    let input = dto::GetObjectInput {
        bucket: B.into(),
        key: key.into(),
        ..Default::default()
    };
    let mut out = f.get_object_op(T, input, None).await?;
    let chunks: Vec<Bytes> = out
        .body
        .take()
        .expect("body")
        .try_collect()
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    Ok(chunks.concat().into())
}

async fn listing(backend: &InMemory) -> BTreeSet<String> {
    backend
        .list(None)
        .map_ok(|m| m.location.to_string())
        .try_collect()
        .await
        .expect("list")
}

/// A populated site: a bucket, inline and blob objects, an overwrite, a copy, a delete.
async fn populated(backend: &Arc<InMemory>) -> Site {
    let s = site(backend).await;
    let f = &s.front;
    f.create_bucket_op(
        T,
        dto::CreateBucketInput {
            bucket: B.into(),
            ..Default::default()
        },
    )
    .await
    .expect("bucket");
    put(f, "small", b"tiny body").await;
    put(f, "big", &vec![7u8; 100_000]).await;
    put(f, "big", &vec![8u8; 120_000]).await;
    put(f, "gone", &vec![9u8; 50_000]).await;
    f.delete_object_op(
        T,
        dto::DeleteObjectInput {
            bucket: B.into(),
            key: "gone".into(),
            ..Default::default()
        },
    )
    .await
    .expect("delete");
    let copy = dto::CopyObjectInput::builder()
        .bucket(B.into())
        .key("copy".into())
        .copy_source(dto::CopySource::Bucket {
            bucket: B.into(),
            key: "big".into(),
            version_id: None,
        })
        .build()
        .expect("input");
    f.copy_object_op(T, copy).await.expect("copy");
    s
}

fn view(f: &Front) -> recovery::CatalogView {
    recovery::CatalogView::read(f.catalog(), &BTreeSet::from([T.to_owned()])).expect("view")
}

async fn findings(f: &Front) -> Vec<Finding> {
    let listing = f.blobs().list_all_meta().await.expect("list");
    inventory(&listing, &view(f), 0).findings
}

#[tokio::test]
async fn every_committed_object_has_its_record_and_nothing_else_is_left() {
    let backend = Arc::new(InMemory::new());
    let s = populated(&backend).await;
    assert_eq!(findings(&s.front).await, Vec::new());
    let report = {
        let listing = s.front.blobs().list_all_meta().await.expect("list");
        inventory(&listing, &view(&s.front), 0)
    };
    // small, big, copy: three records; big and copy: two blobs (the overwritten one and the
    // deleted one's are gone, with their records).
    assert_eq!((report.objects, report.records, report.blobs), (3, 3, 2));
}

#[tokio::test]
async fn a_catalog_rebuilt_from_the_records_equals_the_lost_one() {
    let backend = Arc::new(InMemory::new());
    let old = populated(&backend).await;
    let fresh = tempfile::tempdir().expect("tempdir");
    let rebuilt = catalog(&fresh);
    let tenants = BTreeSet::from([T.to_owned()]);
    let summary = recovery::rebuild(&rebuilt, old.front.blobs(), &tenants, false)
        .await
        .expect("rebuild");
    assert_eq!((summary.buckets, summary.objects), (1, 3));
    assert!(summary.skipped.is_empty(), "{:?}", summary.skipped);
    for key in ["small", "big", "copy"] {
        let was = old
            .front
            .catalog()
            .get_object_with_body(T, B, key)
            .expect("old");
        let now = rebuilt.get_object_with_body(T, B, key).expect("new");
        assert_eq!(now, was, "{key}");
    }
    assert_eq!(rebuilt.get_object(T, B, "gone").expect("get"), None);
    assert_eq!(
        rebuilt.ledger().usage(T).map(|u| u.0),
        old.front.catalog().ledger().usage(T).map(|u| u.0)
    );
    assert_eq!(
        rebuilt.list_buckets(T).expect("buckets"),
        old.front.catalog().list_buckets(T).expect("buckets")
    );
    // A second rebuild is refused: the catalog is no longer empty.
    assert!(matches!(
        recovery::rebuild(&rebuilt, old.front.blobs(), &tenants, false).await,
        Err(recovery::rebuild::RecoveryError::NotEmpty(1))
    ));
}

#[tokio::test]
async fn a_fresh_catalog_on_a_populated_backend_deletes_nothing_at_start() {
    let backend = Arc::new(InMemory::new());
    let _a = populated(&backend).await;
    let before = listing(&backend).await;
    let b = site(&backend).await;
    assert_eq!(listing(&backend).await, before);
    // Its own orphan (a blob it wrote and never committed) is removed at its next start.
    let own = b.front.blobs().blob_name(B);
    b.front
        .blobs()
        .put_small(T, &own, Bytes::from_static(b"orphan"))
        .await
        .expect("orphan");
    let summary = reconcile(b.front.catalog(), b.front.blobs(), None)
        .await
        .expect("reconcile");
    assert_eq!(summary.orphans_deleted, 1);
    assert_eq!(summary.orphans_kept, 2);
    assert_eq!(listing(&backend).await, before);
}

#[tokio::test]
async fn gc_takes_only_old_orphans_and_never_what_a_record_names() {
    let backend = Arc::new(InMemory::new());
    let s = populated(&backend).await;
    let orphan = s.front.blobs().blob_name(B);
    s.front
        .blobs()
        .put_small(T, &orphan, Bytes::from_static(b"orphan"))
        .await
        .expect("orphan");
    let tenants = BTreeSet::from([T.to_owned()]);
    let opts = |grace: Duration, dry_run: bool| GcOptions {
        grace,
        rate: 1000.0,
        dry_run,
        forget_absent: false,
        holder: "test".into(),
    };
    let young = recovery::gc(
        s.front.catalog(),
        s.front.blobs(),
        &tenants,
        &opts(Duration::from_secs(3600), false),
    )
    .await
    .expect("gc");
    assert_eq!((young.deleted.len(), young.kept_young), (0, 1));
    // Against an empty catalog every blob is unreferenced, but each is named by a record the
    // catalog lacks: nothing is taken but the true orphan.
    let empty_dir = tempfile::tempdir().expect("tempdir");
    let empty = catalog(&empty_dir);
    let blind = recovery::gc(
        &empty,
        s.front.blobs(),
        &tenants,
        &opts(Duration::ZERO, true),
    )
    .await
    .expect("gc");
    assert_eq!(blind.deleted, vec![(T.to_owned(), orphan.clone())]);
    assert_eq!(blind.kept_recorded, 2);
    let before = listing(&backend).await;
    let old = recovery::gc(
        s.front.catalog(),
        s.front.blobs(),
        &tenants,
        &opts(Duration::ZERO, false),
    )
    .await
    .expect("gc");
    assert_eq!(old.deleted, vec![(T.to_owned(), orphan.clone())]);
    let after = listing(&backend).await;
    assert_eq!(before.difference(&after).count(), 1);
    assert_eq!(findings(&s.front).await, Vec::new());
    // One collector at a time.
    assert!(
        s.front
            .catalog()
            .try_lease("gc", "other", Duration::from_secs(60))
            .expect("lease")
    );
    assert!(matches!(
        recovery::gc(
            s.front.catalog(),
            s.front.blobs(),
            &tenants,
            &opts(Duration::ZERO, true)
        )
        .await,
        Err(recovery::rebuild::RecoveryError::LeaseHeld)
    ));
}

#[tokio::test]
async fn a_get_whose_blob_is_gone_fails_before_any_byte() {
    // The bug: a GET of an object whose blob another gateway had deleted answered 200 and a
    // truncated body; it must fail before the status line.
    let backend = Arc::new(InMemory::new());
    let s = populated(&backend).await;
    let rec = s
        .front
        .catalog()
        .get_object(T, B, "big")
        .expect("get")
        .expect("big");
    let blob = rec.segments[0].blob.clone();
    s.front.blobs().delete(T, [blob]).await;
    let input = dto::GetObjectInput {
        bucket: B.into(),
        key: "big".into(),
        ..Default::default()
    };
    let err = s.front.get_object_op(T, input, None).await.err();
    assert!(
        matches!(
            err,
            Some(ApiError::Backend(object_store::Error::NotFound { .. }))
        ),
        "{err:?}"
    );
    assert_eq!(
        get(&s.front, "small").await.expect("small").as_ref(),
        b"tiny body"
    );
}

#[tokio::test]
async fn without_inline_records_only_blob_objects_are_recorded() {
    let backend = Arc::new(InMemory::new());
    let s = site(&backend).await;
    let f = s.front.without_inline_records();
    f.catalog().create_bucket(T, B, 0).expect("bucket");
    put(&f, "small", b"inline").await;
    put(&f, "big", &vec![1u8; 100_000]).await;
    let no_record: Vec<String> = findings(&f)
        .await
        .into_iter()
        .filter_map(|x| match x {
            Finding::NoRecord { key, .. } => Some(key),
            _ => None,
        })
        .collect();
    assert_eq!(no_record, vec!["small".to_owned()]);
}
