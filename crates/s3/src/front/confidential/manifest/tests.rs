//! Rollback manifests through the front's handlers: a writer's objects and manifests drained
//! to a tier a test may then roll back, and readers with no local copy (a fresh node, or one
//! that has read the directory before and keeps its mark).

use std::sync::{Arc, PoisonError};

use bytes::Bytes;
use futures::TryStreamExt as _;
use object_store::memory::InMemory;
use s3s::S3ErrorCode;
use s3s::dto::{self, StreamingBlob};
use sluice_meta::Catalog;

use crate::blob::{BlobStore, DEFAULT_GRAIN};
use crate::checksum::Expected;
use crate::confidential::manifest::{
    HighWater, MANIFEST_NAME, Manifest, MemoryHighWater, Scope, Slot,
};
use crate::confidential::{Confidential, ENTRY, Entry, TenantKey};
use crate::error::{ApiError, ApiResult};
use crate::front::{Front, FrontConfig, Tier};

use super::super::tests::{B, T, key};

struct Keys(Arc<TenantKey>);

impl Confidential for Keys {
    fn tenant_key(&self, _: &str) -> Result<Option<Arc<TenantKey>>, String> {
        Ok(Some(Arc::clone(&self.0)))
    }
}

/// A node: its own catalog and blobs, the tenant's key, `marks` and, for a reader, `tier`.
fn node(marks: Arc<dyn HighWater>, tier: Option<Arc<dyn Tier>>) -> (tempfile::TempDir, Front) {
    let dir = tempfile::tempdir().expect("tempdir");
    let (catalog, _) = Catalog::open(&dir.path().join("meta.redb")).expect("catalog");
    catalog.ledger().set_quota(T, 1 << 30);
    catalog.create_bucket(T, B, 0).expect("bucket");
    let blobs = BlobStore::new(Arc::new(InMemory::new()), DEFAULT_GRAIN, DEFAULT_GRAIN);
    let config = FrontConfig {
        region: "us-east-1".into(),
        max_object_size: 1 << 30,
    };
    let mut f = Front::new(Arc::new(catalog), Arc::new(blobs), config)
        .with_confidential(Arc::new(Keys(key(1))))
        .with_segment_size(16)
        .with_rollback_marks(marks);
    if let Some(tier) = tier {
        f = f.with_tier(tier);
    }
    (dir, f)
}

fn marks() -> Arc<dyn HighWater> {
    Arc::new(MemoryHighWater::default())
}

async fn put(f: &Front, k: &str, body: &'static [u8]) -> ApiResult<dto::PutObjectOutput> {
    let input = dto::PutObjectInput {
        bucket: B.into(),
        key: k.into(),
        body: Some(StreamingBlob::wrap(futures::stream::once(async move {
            Ok::<_, std::io::Error>(Bytes::from_static(body))
        }))),
        content_length: Some(body.len() as i64),
        ..Default::default()
    };
    f.put_object_guarded(T, input, Expected::None, None).await
}

async fn get(f: &Front, k: &str) -> ApiResult<Bytes> {
    let input = dto::GetObjectInput {
        bucket: B.into(),
        key: k.into(),
        ..Default::default()
    };
    let mut out = f.get_object_guarded(T, input, None).await?;
    let chunks: Vec<Bytes> = out
        .body
        .take()
        .expect("body")
        .try_collect()
        .await
        .map_err(|e| ApiError::Body(e.to_string()))?;
    Ok(chunks.concat().into())
}

async fn head(f: &Front, k: &str) -> ApiResult<dto::HeadObjectOutput> {
    let input = dto::HeadObjectInput {
        bucket: B.into(),
        key: k.into(),
        ..Default::default()
    };
    f.head_object_guarded(T, input).await
}

/// The S3 error a refused read answers: 500 InternalError naming the object and "rollback".
fn assert_rollback(e: ApiError, k: &str, why: &str) {
    let s3 = crate::error::to_s3(e);
    assert_eq!(s3.code(), &S3ErrorCode::InternalError, "{k}");
    let msg = s3.message().unwrap_or_default();
    assert!(msg.contains(&format!("{B}/{k}")), "{msg}");
    assert!(msg.contains("rollback"), "{msg}");
    assert!(msg.contains(why), "{why} in {msg}");
}

/// The shared tier as the drain leaves it: the confidential tests' own.
use super::super::tests::DrainedTier as Shelf;

const MANIFEST: &str = "step-1/.sluice-manifest";

/// The writer's manifest of `step-1/`, as its catalog holds it.
async fn manifest_of(f: &Front) -> Manifest {
    let input = dto::GetObjectInput {
        bucket: B.into(),
        key: MANIFEST.into(),
        ..Default::default()
    };
    let (_, _, body) = f
        .get_sealed(T, key(1), &input, &super::ReadConditions::default())
        .await
        .expect("manifest");
    let body: Vec<Bytes> = body.try_collect().await.expect("body");
    let scope = Scope {
        tenant: T,
        bucket: B,
        directory: "step-1/",
    };
    Manifest::open(&body.concat(), &key(1), scope).expect("opens")
}

#[tokio::test]
async fn an_older_generation_put_back_in_the_tier_is_refused_and_the_newest_reads() {
    let shelf = Arc::new(Shelf::default());
    let (_w, writer) = node(marks(), None);
    put(&writer, "step-1/shard-0", b"version one of shard zero")
        .await
        .expect("v1");
    shelf.drain(&writer, "step-1/shard-0").await;
    shelf.drain(&writer, MANIFEST).await;
    let v1 = shelf.take("step-1/shard-0");
    put(&writer, "step-1/shard-0", b"version two of shard zero")
        .await
        .expect("v2");
    shelf.drain(&writer, "step-1/shard-0").await;
    shelf.drain(&writer, MANIFEST).await;

    let (_r, reader) = node(marks(), Some(Arc::clone(&shelf) as Arc<dyn Tier>));
    assert_eq!(
        get(&reader, "step-1/shard-0").await.expect("v2 reads"),
        &b"version two of shard zero"[..]
    );
    shelf.put_back("step-1/shard-0", v1.clone());
    let e = get(&reader, "step-1/shard-0").await.expect_err("refused");
    assert_rollback(e, "step-1/shard-0", "is not the newest written");
    let e = head(&reader, "step-1/shard-0").await.expect_err("HEAD too");
    assert_rollback(e, "step-1/shard-0", "is not the newest written");
    // A node that never read the directory refuses it just the same: the manifest says so.
    let (_f, fresh) = node(marks(), Some(Arc::clone(&shelf) as Arc<dyn Tier>));
    let e = get(&fresh, "step-1/shard-0").await.expect_err("refused");
    assert_rollback(e, "step-1/shard-0", "is not the newest written");
    // The writer's own copy (local) is the newest, and reads.
    assert_eq!(
        get(&writer, "step-1/shard-0").await.expect("local"),
        &b"version two of shard zero"[..]
    );
}

#[tokio::test]
async fn a_manifest_rolled_back_with_its_objects_is_refused_by_a_node_that_saw_a_newer_one() {
    let shelf = Arc::new(Shelf::default());
    let (_w, writer) = node(marks(), None);
    put(&writer, "step-1/shard-0", b"old").await.expect("v1");
    shelf.drain(&writer, "step-1/shard-0").await;
    shelf.drain(&writer, MANIFEST).await;
    let (old_object, old_manifest) = (shelf.take("step-1/shard-0"), shelf.take(MANIFEST));
    put(&writer, "step-1/shard-0", b"new").await.expect("v2");
    shelf.drain(&writer, "step-1/shard-0").await;
    shelf.drain(&writer, MANIFEST).await;
    assert_eq!(manifest_of(&writer).await.counter, 2);

    let reader_marks = marks();
    let (_r, reader) = node(
        Arc::clone(&reader_marks),
        Some(Arc::clone(&shelf) as Arc<dyn Tier>),
    );
    assert_eq!(
        get(&reader, "step-1/shard-0").await.expect("new"),
        &b"new"[..]
    );
    let scope = Scope {
        tenant: T,
        bucket: B,
        directory: "step-1/",
    };
    assert_eq!(reader_marks.get(scope), Ok(2), "the reader keeps the mark");

    shelf.put_back("step-1/shard-0", old_object);
    shelf.put_back(MANIFEST, old_manifest);
    // Another node with this one's marks (a restart keeps them: `RedbHighWater`).
    let (_s, restarted) = node(reader_marks, Some(Arc::clone(&shelf) as Arc<dyn Tier>));
    let e = get(&restarted, "step-1/shard-0")
        .await
        .expect_err("refused");
    assert_rollback(e, "step-1/shard-0", "has counter 1, below the 2");
    // A node that never saw the newer manifest cannot tell (docs/confidential.md says so).
    let (_f, fresh) = node(marks(), Some(Arc::clone(&shelf) as Arc<dyn Tier>));
    assert_eq!(
        get(&fresh, "step-1/shard-0").await.expect("old"),
        &b"old"[..]
    );
    // The manifest removed outright: refused where the node has a mark.
    shelf.lock().remove(MANIFEST);
    let e = get(&restarted, "step-1/shard-0")
        .await
        .expect_err("refused");
    assert_rollback(e, "step-1/shard-0", "is missing");
}

#[tokio::test]
async fn a_manifest_whose_mac_does_not_verify_refuses_the_directory() {
    let shelf = Arc::new(Shelf::default());
    let (_w, writer) = node(marks(), None);
    put(&writer, "step-1/shard-0", b"body").await.expect("put");
    shelf.drain(&writer, "step-1/shard-0").await;
    // A manifest encrypted under the tenant key (as if by an agent holding it) but signed
    // with another key's MAC key, naming another generation: its MAC fails.
    let mut forged = manifest_of(&writer).await;
    forged.counter += 10;
    forged.objects.insert(
        "step-1/shard-0".into(),
        Slot::Live {
            generation: 1,
            plaintext: None,
        },
    );
    let scope = Scope {
        tenant: T,
        bucket: B,
        directory: "step-1/",
    };
    let body = Bytes::from(forged.seal(&key(2), scope));
    let input = dto::PutObjectInput {
        bucket: B.into(),
        key: MANIFEST.into(),
        body: Some(StreamingBlob::wrap(futures::stream::once(async move {
            Ok::<_, std::io::Error>(body)
        }))),
        ..Default::default()
    };
    writer
        .put_object_from(T, input, Expected::None, None)
        .await
        .expect("forged manifest");
    shelf.drain(&writer, MANIFEST).await;
    let (_r, reader) = node(marks(), Some(Arc::clone(&shelf) as Arc<dyn Tier>));
    let e = get(&reader, "step-1/shard-0").await.expect_err("refused");
    assert_rollback(e, "step-1/shard-0", "MAC does not verify");
    // A manifest whose ciphertext was altered does not even decrypt: refused too.
    let (rec, body) = shelf.take(MANIFEST);
    let mut bytes = body.to_vec();
    bytes[100] ^= 1;
    shelf.put_back(MANIFEST, (rec, bytes.into()));
    let (_s, other) = node(marks(), Some(Arc::clone(&shelf) as Arc<dyn Tier>));
    let e = get(&other, "step-1/shard-0").await.expect_err("refused");
    assert_rollback(e, "step-1/shard-0", "does not authenticate");
}

#[tokio::test]
async fn concurrent_puts_in_one_directory_all_land_in_its_manifest() {
    let (_w, writer) = node(marks(), None);
    let names: Vec<String> = (0..24).map(|i| format!("step-1/shard-{i}")).collect();
    let puts = names.iter().map(|n| put(&writer, n, b"shard bytes"));
    for r in futures::future::join_all(puts).await {
        r.expect("put");
    }
    let m = manifest_of(&writer).await;
    assert_eq!(m.objects.len(), names.len(), "an entry was lost");
    assert!(m.counter >= 1 && m.counter <= 24, "{}", m.counter);
    for n in &names {
        let rec = writer.catalog().get_object(T, B, n).expect("c").expect("o");
        let g = Entry::of(&rec.metadata).expect("entry").generation;
        assert!(
            matches!(m.objects.get(n), Some(Slot::Live { generation, plaintext: Some(11) }) if *generation == g),
            "{n}: {:?}",
            m.objects.get(n)
        );
    }
}

#[tokio::test]
async fn a_deleted_object_put_back_is_refused_and_objects_from_before_any_manifest_read() {
    let shelf = Arc::new(Shelf::default());
    let (_w, writer) = node(marks(), None);
    put(&writer, "step-1/gone", b"doomed").await.expect("put");
    shelf.drain(&writer, "step-1/gone").await;
    let doomed = shelf.take("step-1/gone");
    let input = dto::DeleteObjectInput {
        bucket: B.into(),
        key: "step-1/gone".into(),
        ..Default::default()
    };
    writer
        .delete_object_guarded(T, input)
        .await
        .expect("delete");
    assert_eq!(
        manifest_of(&writer).await.objects.get("step-1/gone"),
        Some(&Slot::Deleted)
    );
    shelf.drain(&writer, "step-1/gone").await;
    shelf.drain(&writer, MANIFEST).await;
    shelf.put_back("step-1/gone", doomed);
    let (_r, reader) = node(marks(), Some(Arc::clone(&shelf) as Arc<dyn Tier>));
    let e = get(&reader, "step-1/gone").await.expect_err("refused");
    assert_rollback(e, "step-1/gone", "records it deleted");

    // Written before its directory had a manifest (here: stored without the guarded path,
    // as an older agent did): served, since nothing says a newer one exists.
    let input = dto::PutObjectInput {
        bucket: B.into(),
        key: "legacy/shard".into(),
        body: Some(StreamingBlob::wrap(futures::stream::once(async {
            Ok::<_, std::io::Error>(Bytes::from_static(b"from before"))
        }))),
        ..Default::default()
    };
    writer
        .put_object_from(T, input, Expected::None, None)
        .await
        .expect("put");
    shelf.drain(&writer, "legacy/shard").await;
    assert_eq!(
        get(&reader, "legacy/shard").await.expect("legacy"),
        &b"from before"[..]
    );
}

#[tokio::test]
async fn clients_may_not_write_read_delete_or_list_a_manifest() {
    let (_w, writer) = node(marks(), None);
    put(&writer, "step-1/shard-0", b"x").await.expect("put");
    for k in [MANIFEST, MANIFEST_NAME, "a/b/.sluice-manifest"] {
        assert!(
            matches!(put(&writer, k, b"{}").await, Err(ApiError::InvalidArgument(m)) if m.contains("reserved")),
            "{k}"
        );
        let input = dto::DeleteObjectInput {
            bucket: B.into(),
            key: k.into(),
            ..Default::default()
        };
        assert!(matches!(
            writer.delete_object_guarded(T, input).await,
            Err(ApiError::InvalidArgument(_))
        ));
    }
    assert!(matches!(
        get(&writer, MANIFEST).await,
        Err(ApiError::NoSuchKey)
    ));
    assert!(matches!(
        head(&writer, MANIFEST).await,
        Err(ApiError::NoSuchKey)
    ));
    let input = dto::ListObjectsV2Input {
        bucket: B.into(),
        ..Default::default()
    };
    let listed: Vec<String> = writer
        .list_objects_v2_op(T, input)
        .await
        .expect("list")
        .contents
        .unwrap_or_default()
        .into_iter()
        .filter_map(|o| o.key)
        .collect();
    assert_eq!(listed, vec!["step-1/shard-0".to_owned()]);
    // The entry is the node's, not the client's: the manifest's own metadata carries one.
    let rec = writer
        .catalog()
        .get_object(T, B, MANIFEST)
        .expect("c")
        .expect("manifest stored");
    assert!(
        rec.metadata.contains_key(ENTRY),
        "the manifest is encrypted too"
    );
}

#[tokio::test]
async fn one_delete_objects_request_rewrites_its_directory_manifest_once() {
    let (_w, writer) = node(marks(), None);
    let names: Vec<String> = (0..5).map(|i| format!("step-1/shard-{i}")).collect();
    for n in &names {
        put(&writer, n, b"bytes").await.expect("put");
    }
    let before = manifest_of(&writer).await.counter;
    let delete = dto::Delete {
        objects: names
            .iter()
            .map(|n| dto::ObjectIdentifier {
                key: n.clone(),
                ..Default::default()
            })
            .collect(),
        quiet: None,
    };
    let input = dto::DeleteObjectsInput::builder()
        .bucket(B.into())
        .delete(delete)
        .build()
        .expect("input");
    writer
        .delete_objects_guarded(T, input)
        .await
        .expect("delete");
    let m = manifest_of(&writer).await;
    assert_eq!(m.counter, before + 1);
    assert!(m.objects.values().all(|s| *s == Slot::Deleted), "{m:?}");
}

/// The per-directory cache is bounded; a directory forgotten is read again, and still
/// refuses what it refused.
#[tokio::test]
async fn a_directory_forgotten_by_the_cache_is_checked_just_the_same() {
    let shelf = Arc::new(Shelf::default());
    let (_w, writer) = node(marks(), None);
    put(&writer, "step-1/shard-0", b"old").await.expect("v1");
    shelf.drain(&writer, "step-1/shard-0").await;
    let old = shelf.take("step-1/shard-0");
    put(&writer, "step-1/shard-0", b"new").await.expect("v2");
    shelf.drain(&writer, "step-1/shard-0").await;
    shelf.drain(&writer, MANIFEST).await;
    let (_r, reader) = node(marks(), Some(Arc::clone(&shelf) as Arc<dyn Tier>));
    assert_eq!(
        get(&reader, "step-1/shard-0").await.expect("new"),
        &b"new"[..]
    );
    for i in 0..super::DIRS_KEPT + 8 {
        let k = format!("other-{i}/x");
        put(&writer, &k, b"x").await.expect("put");
        shelf.drain(&writer, &k).await;
        shelf
            .drain(&writer, &format!("other-{i}/{MANIFEST_NAME}"))
            .await;
        get(&reader, &k).await.expect("read");
    }
    let kept = reader
        .inner
        .manifests
        .dirs
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .len();
    assert!(kept <= super::DIRS_KEPT, "{kept} directories kept");
    shelf.put_back("step-1/shard-0", old);
    let e = get(&reader, "step-1/shard-0").await.expect_err("refused");
    assert_rollback(e, "step-1/shard-0", "is not the newest written");
}
