//! The front end with a tier behind it: an in-memory tier (one tenant's buckets, a switch
//! that makes every call fail) and a real catalog, through the front's handlers.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::memory::InMemory;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use s3s::S3ErrorCode;
use s3s::dto::{self, StreamingBlob};
use sluice_meta::{Catalog, MetaError, ObjectRecord};

use super::{Tier, TierBucket, TierRead};
use crate::blob::{BlobStore, DEFAULT_GRAIN, ReadStream};
use crate::checksum::Expected;
use crate::error::{ApiError, ApiResult, TierError};
use crate::front::{Front, FrontConfig, INLINE_MAX};

const T: &str = "tenant";
/// The bucket both sides have.
const B: &str = "bkt";

/// Each bucket's objects: their records and bytes.
type Buckets = BTreeMap<String, BTreeMap<String, (ObjectRecord, Bytes)>>;

/// One tenant's buckets on the tier.
#[derive(Default)]
struct MemoryTier {
    buckets: Mutex<Buckets>,
    failing: AtomicBool,
    stalled: Option<String>,
}

impl MemoryTier {
    fn put(&self, bucket: &str, key: &str, body: &[u8]) {
        let rec = ObjectRecord {
            size: body.len() as u64,
            etag: format!("tier-{key}"),
            last_modified_ms: 1_000,
            content_type: Some("text/tier".into()),
            headers: [("cache-control".to_owned(), "no-cache".to_owned())].into(),
            metadata: [("origin".to_owned(), "tier".to_owned())].into(),
            ..ObjectRecord::default()
        };
        self.lock()
            .entry(bucket.to_owned())
            .or_default()
            .insert(key.to_owned(), (rec, Bytes::copy_from_slice(body)));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Buckets> {
        self.buckets.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn check(&self) -> ApiResult<()> {
        if self.failing.load(Ordering::Relaxed) {
            return Err(TierError::Unavailable("connection refused".into()).into());
        }
        Ok(())
    }

    fn object(&self, bucket: &str, key: &str) -> ApiResult<(ObjectRecord, Bytes)> {
        self.check()?;
        self.lock()
            .get(bucket)
            .and_then(|b| b.get(key))
            .cloned()
            .ok_or(ApiError::NoSuchKey)
    }
}

#[async_trait::async_trait]
impl Tier for MemoryTier {
    async fn head(&self, _: &str, bucket: &str, key: &str) -> ApiResult<ObjectRecord> {
        Ok(self.object(bucket, key)?.0)
    }

    async fn get(
        &self,
        _: &str,
        bucket: &str,
        key: &str,
        range: Option<dto::Range>,
    ) -> ApiResult<TierRead> {
        let (record, body) = self.object(bucket, key)?;
        let range = match range {
            None => 0..record.size,
            Some(r) => r.check(record.size).map_err(|_| ApiError::InvalidRange)?,
        };
        #[allow(clippy::cast_possible_truncation)]
        let bytes = body.slice(range.start as usize..range.end as usize);
        let body = ReadStream::new(futures::stream::once(async move { Ok(bytes) }).boxed());
        Ok(TierRead {
            record,
            range,
            body,
        })
    }

    async fn list(
        &self,
        _: &str,
        bucket: &str,
        prefix: &str,
        after: Option<&str>,
    ) -> ApiResult<Vec<(String, ObjectRecord)>> {
        self.check()?;
        let buckets = self.lock();
        let objects = buckets.get(bucket).ok_or(MetaError::NoSuchBucket)?;
        // In reverse: the trait promises no order.
        Ok(objects
            .iter()
            .rev()
            .filter(|(k, _)| k.starts_with(prefix) && after.is_none_or(|a| k.as_str() > a))
            .map(|(k, (rec, _))| (k.clone(), rec.clone()))
            .collect())
    }

    async fn buckets(&self, _: &str) -> ApiResult<Vec<TierBucket>> {
        self.check()?;
        Ok(self
            .lock()
            .keys()
            .map(|name| TierBucket {
                name: name.clone(),
                created: None,
            })
            .collect())
    }

    async fn has_bucket(&self, _: &str, bucket: &str) -> ApiResult<bool> {
        self.check()?;
        Ok(self.lock().contains_key(bucket))
    }

    fn stalled(&self, _: &str) -> Option<String> {
        self.stalled.clone()
    }
}

struct Fixture {
    _dir: tempfile::TempDir,
    front: Front,
    tier: Arc<MemoryTier>,
}

fn catalog(dir: &tempfile::TempDir, quota: u64) -> Arc<Catalog> {
    let (catalog, _) = Catalog::open(&dir.path().join("meta.redb")).expect("catalog");
    catalog.ledger().set_quota(T, quota);
    catalog.create_bucket(T, B, 0).expect("bucket");
    Arc::new(catalog)
}

fn plain_front(catalog: Arc<Catalog>) -> Front {
    let blobs = BlobStore::new(Arc::new(InMemory::new()), DEFAULT_GRAIN, DEFAULT_GRAIN);
    let config = FrontConfig {
        region: "eu-west-3".into(),
        max_object_size: 1 << 30,
    };
    Front::new(catalog, Arc::new(blobs), config)
}

fn fixture_with(quota: u64, tier: MemoryTier) -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let tier = Arc::new(tier);
    let front = plain_front(catalog(&dir, quota)).with_tier(Arc::clone(&tier) as Arc<dyn Tier>);
    tier.lock().entry(B.to_owned()).or_default();
    Fixture {
        _dir: dir,
        front,
        tier,
    }
}

fn fixture() -> Fixture {
    fixture_with(1 << 30, MemoryTier::default())
}

async fn put(f: &Front, bucket: &str, key: &str, body: &[u8]) -> ApiResult<dto::PutObjectOutput> {
    let body = Bytes::copy_from_slice(body);
    let input = dto::PutObjectInput {
        bucket: bucket.into(),
        key: key.into(),
        content_length: Some(body.len() as i64),
        body: Some(StreamingBlob::wrap(futures::stream::once(async move {
            Ok::<_, std::io::Error>(body)
        }))),
        ..Default::default()
    };
    f.put_object_op(T, input, Expected::None).await
}

async fn get(
    f: &Front,
    bucket: &str,
    key: &str,
    range: Option<&str>,
) -> ApiResult<(Bytes, dto::GetObjectOutput)> {
    let input = dto::GetObjectInput {
        bucket: bucket.into(),
        key: key.into(),
        range: range.map(|r| dto::Range::parse(r).expect("range")),
        ..Default::default()
    };
    let mut out = f.get_object_op(T, input, None).await?;
    let body = out.body.take().expect("body");
    let chunks: Vec<Bytes> = body.try_collect().await.expect("read");
    Ok((chunks.concat().into(), out))
}

/// One ListObjectsV2 request.
async fn v2(
    f: &Front,
    bucket: &str,
    prefix: &str,
    delimiter: Option<&str>,
    max: i32,
    token: Option<String>,
) -> ApiResult<dto::ListObjectsV2Output> {
    let input = dto::ListObjectsV2Input {
        bucket: bucket.into(),
        prefix: Some(prefix.into()),
        delimiter: delimiter.map(Into::into),
        max_keys: Some(max),
        continuation_token: token,
        ..Default::default()
    };
    f.list_objects_v2_op(T, input).await
}

/// A page's names: objects as `key:size`, common prefixes as they are.
fn names(page: &dto::ListObjectsV2Output) -> Vec<String> {
    let mut out: Vec<String> = page
        .contents
        .iter()
        .flatten()
        .map(|o| {
            format!(
                "{}:{}",
                o.key.as_deref().unwrap_or(""),
                o.size.unwrap_or(-1)
            )
        })
        .collect();
    out.extend(
        page.common_prefixes
            .iter()
            .flatten()
            .filter_map(|p| p.prefix.clone()),
    );
    out.sort();
    out
}

/// Every page of a ListObjectsV2 walk, by continuation token.
async fn walk(
    f: &Front,
    bucket: &str,
    prefix: &str,
    delimiter: Option<&str>,
    max: i32,
) -> ApiResult<Vec<Vec<String>>> {
    let mut pages = Vec::new();
    let mut token = None;
    loop {
        let page = v2(f, bucket, prefix, delimiter, max, token).await?;
        pages.push(names(&page));
        if page.is_truncated != Some(true) {
            return Ok(pages);
        }
        token = page.next_continuation_token;
        assert!(token.is_some(), "a truncated page without a token");
        assert!(pages.len() < 10_000, "the walk does not end");
    }
}

#[tokio::test]
async fn a_key_on_both_sides_is_listed_once_as_it_is_here() {
    let f = fixture();
    put(&f.front, B, "a", b"new").await.expect("put");
    f.tier.put(B, "a", &[0; 1000]);
    f.tier.put(B, "b", &[0; 10]);
    let page = v2(&f.front, B, "", None, 1000, None).await.expect("list");
    assert_eq!(names(&page), ["a:3", "b:10"]);
    assert_eq!(page.key_count, Some(2));
    let (body, _) = get(&f.front, B, "a", None).await.expect("get");
    assert_eq!(body.as_ref(), b"new");
}

#[tokio::test]
async fn pages_continue_across_both_sides_in_every_listing() {
    let f = fixture();
    for k in ["a", "c", "e"] {
        put(&f.front, B, k, b"here").await.expect("put");
    }
    for k in ["b", "d", "f"] {
        f.tier.put(B, k, b"there!");
    }
    let pages = walk(&f.front, B, "", None, 2).await.expect("walk");
    assert_eq!(
        pages,
        [["a:4", "b:6"], ["c:4", "d:6"], ["e:4", "f:6"]],
        "ListObjectsV2"
    );

    let mut v1 = Vec::new();
    let mut marker = None;
    loop {
        let input = dto::ListObjectsInput {
            bucket: B.into(),
            max_keys: Some(4),
            marker: marker.clone(),
            ..Default::default()
        };
        let page = f.front.list_objects_op(T, input).await.expect("v1");
        let keys: Vec<String> = page
            .contents
            .iter()
            .flatten()
            .filter_map(|o| o.key.clone())
            .collect();
        assert!(
            page.contents.iter().flatten().all(|o| o.owner.is_some()),
            "ListObjects names the owner"
        );
        v1.push(keys);
        if page.is_truncated != Some(true) {
            break;
        }
        marker = page.next_marker;
    }
    assert_eq!(
        v1,
        [vec!["a", "b", "c", "d"], vec!["e", "f"]],
        "ListObjects"
    );

    let input = dto::ListObjectVersionsInput {
        bucket: B.into(),
        max_keys: Some(5),
        ..Default::default()
    };
    let page = f
        .front
        .list_object_versions_op(T, input)
        .await
        .expect("versions");
    let seen: Vec<_> = page
        .versions
        .iter()
        .flatten()
        .map(|v| (v.key.clone().unwrap_or_default(), v.version_id.clone()))
        .collect();
    assert_eq!(seen.len(), 5);
    assert!(seen.iter().all(|(_, v)| v.as_deref() == Some("null")));
    assert_eq!(page.next_key_marker.as_deref(), Some("e"));
    let input = dto::ListObjectVersionsInput {
        bucket: B.into(),
        key_marker: page.next_key_marker,
        ..Default::default()
    };
    let rest = f
        .front
        .list_object_versions_op(T, input)
        .await
        .expect("versions");
    let keys: Vec<_> = rest
        .versions
        .iter()
        .flatten()
        .filter_map(|v| v.key.clone())
        .collect();
    assert_eq!(keys, ["f"]);
    assert_eq!(rest.is_truncated, Some(false));
}

#[tokio::test]
async fn common_prefixes_of_both_sides_are_merged_once_and_paged_past() {
    let f = fixture();
    put(&f.front, B, "x/1", b"1").await.expect("put");
    put(&f.front, B, "z", b"1").await.expect("put");
    f.tier.put(B, "x/2", b"22");
    f.tier.put(B, "y/1", b"22");
    f.tier.put(B, "y/2", b"22");
    let page = v2(&f.front, B, "", Some("/"), 1000, None)
        .await
        .expect("list");
    assert_eq!(names(&page), ["x/", "y/", "z:1"]);
    let pages = walk(&f.front, B, "", Some("/"), 1).await.expect("walk");
    assert_eq!(pages, [["x/"], ["y/"], ["z:1"]]);
    let page = v2(&f.front, B, "x/", Some("/"), 1000, None)
        .await
        .expect("list");
    assert_eq!(names(&page), ["x/1:1", "x/2:2"]);
}

/// Keys made of `a`, `b` and `/`, up to four long: dense in shared prefixes and delimiters.
fn random_key(rng: &mut StdRng) -> String {
    let len = rng.random_range(1..=4);
    (0..len)
        .map(|_| ['a', 'b', '/'][rng.random_range(0..3)])
        .collect()
}

#[tokio::test]
async fn merged_listings_page_exactly_as_one_catalog_holding_every_key() {
    for seed in 0..40u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let f = fixture();
        let dir = tempfile::tempdir().expect("tempdir");
        let all = plain_front(catalog(&dir, 1 << 30));
        let mut keys = std::collections::HashSet::new();
        for _ in 0..rng.random_range(0..30) {
            let key = random_key(&mut rng);
            if crate::name::check_key(&key).is_err() || !keys.insert(key.clone()) {
                continue;
            }
            let body = vec![0u8; rng.random_range(0..4)];
            put(&all, B, &key, &body).await.expect("put");
            // Here, there, or both (the same object: drained and still here).
            match rng.random_range(0..3) {
                0 => {
                    put(&f.front, B, &key, &body).await.expect("put");
                }
                1 => f.tier.put(B, &key, &body),
                _ => {
                    put(&f.front, B, &key, &body).await.expect("put");
                    f.tier.put(B, &key, &body);
                }
            }
        }
        for _ in 0..6 {
            let prefix = ["", "a", "a/", "b/", "/"][rng.random_range(0..5)];
            let delimiter = [None, Some("/"), Some("b"), Some("a/")][rng.random_range(0..4)];
            let max = rng.random_range(1..5);
            let expected = walk(&all, B, prefix, delimiter, max).await.expect("walk");
            let merged = walk(&f.front, B, prefix, delimiter, max)
                .await
                .expect("walk");
            assert_eq!(
                merged, expected,
                "seed {seed}: prefix {prefix:?}, delimiter {delimiter:?}, max-keys {max}"
            );
        }
    }
}

#[tokio::test]
async fn a_bucket_only_the_tier_has_is_listed_and_one_nowhere_is_not() {
    let f = fixture();
    f.tier.put("shared", "k", b"12345");
    let page = v2(&f.front, "shared", "", None, 1000, None)
        .await
        .expect("list");
    assert_eq!(names(&page), ["k:5"]);
    assert!(matches!(
        v2(&f.front, "nowhere", "", None, 1000, None).await,
        Err(ApiError::Meta(MetaError::NoSuchBucket))
    ));
}

#[tokio::test]
async fn reads_that_miss_here_are_answered_by_the_tier() {
    let f = fixture();
    let body: Vec<u8> = (0..100u8).collect();
    f.tier.put(B, "up", &body);
    f.tier.put("shared", "up", &body);
    let (got, out) = get(&f.front, B, "up", None).await.expect("get");
    assert_eq!(got.as_ref(), body.as_slice());
    assert_eq!(out.content_range, None);
    assert_eq!(out.e_tag, Some(dto::ETag::Strong("tier-up".into())));
    assert_eq!(out.content_type.as_deref(), Some("text/tier"));
    assert_eq!(out.cache_control.as_deref(), Some("no-cache"));
    let (got, out) = get(&f.front, "shared", "up", Some("bytes=10-19"))
        .await
        .expect("range in a bucket only the tier has");
    assert_eq!(got.as_ref(), &body[10..20]);
    assert_eq!(out.content_range.as_deref(), Some("bytes 10-19/100"));
    assert_eq!(out.content_length, Some(10));
    assert!(matches!(
        get(&f.front, B, "up", Some("bytes=500-")).await,
        Err(ApiError::InvalidRange)
    ));
    assert!(matches!(
        get(&f.front, B, "missing", None).await,
        Err(ApiError::NoSuchKey)
    ));
    let head = dto::HeadObjectInput {
        bucket: B.into(),
        key: "up".into(),
        ..Default::default()
    };
    let head = f.front.head_object_op(T, head).await.expect("head");
    assert_eq!(head.content_length, Some(100));
    assert_eq!(
        head.metadata
            .and_then(|m| m.get("origin").cloned())
            .as_deref(),
        Some("tier")
    );
}

#[tokio::test]
async fn a_failing_tier_fails_only_what_needs_it() {
    let f = fixture();
    put(&f.front, B, "here", b"1").await.expect("put");
    f.tier.put(B, "there", b"22");
    f.tier.put("shared", "k", b"1");
    f.tier.failing.store(true, Ordering::Relaxed);

    let page = v2(&f.front, B, "", None, 1000, None)
        .await
        .expect("local listing");
    assert_eq!(names(&page), ["here:1"]);
    assert!(matches!(
        v2(&f.front, "shared", "", None, 1000, None).await,
        Err(ApiError::Tier(TierError::Unavailable(_)))
    ));
    assert!(get(&f.front, B, "here", None).await.is_ok());
    assert!(matches!(
        get(&f.front, B, "there", None).await,
        Err(ApiError::Tier(TierError::Unavailable(_)))
    ));
    let buckets = f.front.list_buckets_op(T).await.expect("buckets");
    let names: Vec<_> = buckets
        .buckets
        .iter()
        .flatten()
        .filter_map(|b| b.name.clone())
        .collect();
    assert_eq!(names, [B]);
    // A bucket lookup the tier cannot answer finds no bucket (and makes none).
    assert!(matches!(
        put(&f.front, "shared", "k", b"1").await,
        Err(ApiError::Meta(MetaError::NoSuchBucket))
    ));
    assert!(
        !f.front
            .catalog()
            .bucket_exists(T, "shared")
            .expect("catalog")
    );
}

#[tokio::test]
async fn a_copy_from_the_tier_lands_here_as_a_put_of_its_bytes_would() {
    let f = fixture();
    let small: Vec<u8> = vec![7; 100];
    #[allow(clippy::cast_possible_truncation)]
    let large: Vec<u8> = (0..=INLINE_MAX).map(|i| (i % 251) as u8).collect();
    f.tier.put("shared", "small", &small);
    f.tier.put("shared", "large", &large);
    for (key, body) in [("small", &small), ("large", &large)] {
        let input = dto::CopyObjectInput::builder()
            .bucket(B.into())
            .key(format!("copy-{key}"))
            .copy_source(dto::CopySource::Bucket {
                bucket: "shared".into(),
                key: key.into(),
                version_id: None,
            })
            .build()
            .expect("copy input");
        f.front.copy_object_op(T, input).await.expect("copy");
        let rec = f
            .front
            .catalog()
            .get_object(T, B, &format!("copy-{key}"))
            .expect("catalog")
            .expect("copied here");
        assert_eq!(
            rec.inline,
            body.len() as u64 <= INLINE_MAX,
            "{key}: {rec:?}"
        );
        assert_eq!(rec.metadata.get("origin").map(String::as_str), Some("tier"));
        assert_eq!(rec.content_type.as_deref(), Some("text/tier"));
        let (got, _) = get(&f.front, B, &format!("copy-{key}"), None)
            .await
            .expect("get");
        assert_eq!(got.as_ref(), body.as_slice());
    }
    // The source's bucket stayed the tier's: a read does not adopt it.
    assert!(
        !f.front
            .catalog()
            .bucket_exists(T, "shared")
            .expect("catalog")
    );
}

#[tokio::test]
async fn a_bucket_only_the_tier_has_is_made_here_when_needed() {
    let f = fixture();
    f.tier.put("shared", "old", b"1");
    f.tier.put("probed", "old", b"1");
    put(&f.front, "shared", "new", b"abc").await.expect("put");
    assert!(
        f.front
            .catalog()
            .bucket_exists(T, "shared")
            .expect("catalog")
    );
    let head = dto::HeadBucketInput {
        bucket: "probed".into(),
        ..Default::default()
    };
    f.front.head_bucket_op(T, head).await.expect("head bucket");
    assert!(
        f.front
            .catalog()
            .bucket_exists(T, "probed")
            .expect("catalog")
    );
    assert!(matches!(
        put(&f.front, "nowhere", "k", b"1").await,
        Err(ApiError::Meta(MetaError::NoSuchBucket))
    ));
    assert!(
        !f.front
            .catalog()
            .bucket_exists(T, "nowhere")
            .expect("catalog")
    );
    let page = v2(&f.front, "shared", "", None, 1000, None)
        .await
        .expect("list");
    assert_eq!(names(&page), ["new:3", "old:1"]);
}

#[tokio::test]
async fn list_buckets_is_the_union_with_this_stores_creation_times() {
    let f = fixture();
    f.front
        .catalog()
        .create_bucket(T, "zeta", 5_000)
        .expect("bucket");
    f.front
        .catalog()
        .create_bucket(T, "ckpt", 7_000)
        .expect("bucket");
    for b in ["ckpt", "data"] {
        f.tier.put(b, "k", b"1");
    }
    let out = f.front.list_buckets_op(T).await.expect("buckets");
    let buckets = out.buckets.expect("buckets");
    let names: Vec<_> = buckets.iter().filter_map(|b| b.name.as_deref()).collect();
    assert_eq!(names, [B, "ckpt", "data", "zeta"]);
    assert!(
        buckets
            .iter()
            .all(|b| b.bucket_region.as_deref() == Some("eu-west-3"))
    );
    assert_eq!(
        buckets[1].creation_date,
        Some(crate::front::timestamp(7_000))
    );
    assert_eq!(buckets[2].creation_date, None, "the tier gave no date");
}

/// A PutObject through [`Front::run`], where errors get their scope.
async fn put_through_run(f: &Front, key: &str, body: &[u8]) -> s3s::S3Error {
    let body = body.to_vec();
    let key = key.to_owned();
    let requester = crate::front::Requester {
        tenant: Arc::from(T),
        elsewhere: None,
    };
    f.run("PutObject", requester, |_| async move {
        put(f, B, &key, &body).await
    })
    .await
    .expect_err("refused")
}

#[tokio::test]
async fn a_full_local_buffer_says_why_it_is_not_emptying() {
    let stalled = MemoryTier {
        stalled: Some("upstream unavailable: connection refused".into()),
        ..MemoryTier::default()
    };
    for (tier, why) in [
        (
            stalled,
            "the shared tier is not taking this tenant's data (upstream unavailable: connection refused)",
        ),
        (
            MemoryTier::default(),
            "the drain to the shared tier has not caught up",
        ),
    ] {
        let f = fixture_with(10, tier);
        let e = put_through_run(&f.front, "k", &[0; 11]).await;
        assert_eq!(e.code(), &S3ErrorCode::Custom("QuotaExceeded".into()));
        assert_eq!(e.status_code(), Some(http::StatusCode::FORBIDDEN));
        let msg = e.message().unwrap_or_default();
        assert!(
            msg.starts_with("this node's local buffer for the tenant is full"),
            "{msg}"
        );
        assert!(msg.contains(why), "{msg}");
        assert!(msg.contains("11 more bytes requested"), "{msg}");
    }
    // Without a tier the quota is the tenant's own, and says so.
    let dir = tempfile::tempdir().expect("tempdir");
    let plain = plain_front(catalog(&dir, 10));
    let e = put_through_run(&plain, "k", &[0; 11]).await;
    assert_eq!(e.code(), &S3ErrorCode::Custom("QuotaExceeded".into()));
    assert!(!e.message().unwrap_or_default().contains("local buffer"));
}
