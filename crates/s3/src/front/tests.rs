//! The front end's handlers over a real catalog and an in-memory backend, for what only
//! shows inside: which bodies are kept inline, which blobs exist, what the ledger holds and
//! what the pacer admitted. (The HTTP protocol is tested against the gateway and agent.)

use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::memory::InMemory;
use s3s::dto::{self, StreamingBlob};
use sluice_meta::{Catalog, MetaError, ObjectRecord};

use super::{Front, FrontConfig, INLINE_MAX};
use crate::blob::{BlobStore, DEFAULT_GRAIN, hex};
use crate::checksum::{Algorithm, Digest, Expected};
use crate::error::{ApiError, ApiResult};

const T: &str = "tenant";
const B: &str = "bkt";

fn front(quota: u64) -> (tempfile::TempDir, Front) {
    let dir = tempfile::tempdir().expect("tempdir");
    let (catalog, _) = Catalog::open(&dir.path().join("meta.redb")).expect("catalog");
    catalog.ledger().set_quota(T, quota);
    catalog.create_bucket(T, B, 0).expect("bucket");
    let blobs = BlobStore::new(Arc::new(InMemory::new()), DEFAULT_GRAIN, DEFAULT_GRAIN);
    let config = FrontConfig {
        region: "us-east-1".into(),
        max_object_size: 1 << 30,
    };
    (dir, Front::new(Arc::new(catalog), Arc::new(blobs), config))
}

fn data(len: u64, seed: u8) -> Bytes {
    (0..len)
        .map(|i| (i % 251) as u8 ^ seed)
        .collect::<Vec<u8>>()
        .into()
}

fn md5_hex(b: &[u8]) -> String {
    use md5::Digest as _;
    hex(&md5::Md5::digest(b))
}

/// A PutObject of `body` sent in 1000-byte chunks, with its length declared
/// (Content-Length) or not (a stream of unknown length).
fn put_input(key: &str, body: &Bytes, declared: bool) -> dto::PutObjectInput {
    let chunks: Vec<Result<Bytes, std::io::Error>> =
        body.chunks(1000).map(|c| Ok(body.slice_ref(c))).collect();
    dto::PutObjectInput {
        bucket: B.into(),
        key: key.into(),
        body: Some(StreamingBlob::wrap(futures::stream::iter(chunks))),
        content_length: declared.then(|| body.len() as i64),
        ..Default::default()
    }
}

async fn put(
    f: &Front,
    key: &str,
    body: &Bytes,
    declared: bool,
) -> ApiResult<dto::PutObjectOutput> {
    f.put_object_op(T, put_input(key, body, declared), Expected::None)
        .await
}

async fn get(
    f: &Front,
    key: &str,
    range: Option<&str>,
) -> ApiResult<(Bytes, dto::GetObjectOutput)> {
    let input = dto::GetObjectInput {
        bucket: B.into(),
        key: key.into(),
        range: range.map(|r| dto::Range::parse(r).expect("range")),
        ..Default::default()
    };
    let mut out = f.get_object_op(T, input, None).await?;
    let body = out.body.take().expect("body");
    let chunks: Vec<Bytes> = body.try_collect().await.expect("read");
    Ok((chunks.concat().into(), out))
}

fn record(f: &Front, key: &str) -> Option<ObjectRecord> {
    f.catalog().get_object(T, B, key).expect("catalog")
}

async fn blobs(f: &Front) -> Vec<String> {
    let mut names: Vec<String> = f
        .blobs()
        .list_all()
        .await
        .expect("list")
        .into_iter()
        .map(|(_, name)| name)
        .filter(|n| crate::recovery::Name::parse(n) == crate::recovery::Name::Blob)
        .collect();
    names.sort();
    names
}

fn usage(f: &Front) -> (u64, u64) {
    let (used, reserved, _) = f.catalog().ledger().usage(T).expect("tenant");
    (used, reserved)
}

#[tokio::test]
async fn a_small_put_is_kept_inline_and_read_back_like_a_blob_object() {
    let (_d, f) = front(1 << 30);
    let body = data(4096, 1);
    let out = put(&f, "small", &body, true).await.expect("put");
    assert_eq!(out.e_tag, Some(dto::ETag::Strong(md5_hex(&body))));
    let rec = record(&f, "small").expect("visible");
    assert!(rec.inline && rec.segments.is_empty(), "{rec:?}");
    assert!(blobs(&f).await.is_empty(), "an inline PUT wrote a blob");
    assert_eq!(usage(&f), (4096, 0));

    let (got, out) = get(&f, "small", None).await.expect("get");
    assert_eq!(got, body);
    assert_eq!(out.content_length, Some(4096));
    let (got, out) = get(&f, "small", Some("bytes=100-199"))
        .await
        .expect("range");
    assert_eq!(got, body.slice(100..200));
    assert_eq!(out.content_range.as_deref(), Some("bytes 100-199/4096"));
    let (got, _) = get(&f, "small", Some("bytes=-10")).await.expect("suffix");
    assert_eq!(got, body.slice(4086..));
    assert!(matches!(
        get(&f, "small", Some("bytes=5000-")).await,
        Err(ApiError::InvalidRange)
    ));
    // The pacer admitted the bytes in and out as it does for blobs (what dmClock charges).
    let m = f.metrics().tenant(T);
    assert_eq!(m.bytes_in.load(Ordering::Relaxed), 4096);
    assert_eq!(m.bytes_out.load(Ordering::Relaxed), 4096 + 100 + 10);

    let head = f
        .head_object_op(
            T,
            dto::HeadObjectInput {
                bucket: B.into(),
                key: "small".into(),
                ..Default::default()
            },
        )
        .await
        .expect("head");
    assert_eq!(head.content_length, Some(4096));
    assert_eq!(head.e_tag, Some(dto::ETag::Strong(md5_hex(&body))));
    let list = f
        .list_objects_v2_op(
            T,
            dto::ListObjectsV2Input {
                bucket: B.into(),
                ..Default::default()
            },
        )
        .await
        .expect("list");
    let listed = &list.contents.expect("contents")[0];
    assert_eq!(
        (listed.key.as_deref(), listed.size),
        (Some("small"), Some(4096))
    );
}

#[tokio::test]
async fn bodies_spill_to_a_blob_just_past_the_inline_limit_whether_or_not_declared() {
    let (_d, f) = front(1 << 30);
    let mut total = 0;
    for declared in [false, true] {
        for (len, inline) in [
            (0, true),
            (INLINE_MAX - 1, true),
            (INLINE_MAX, true),
            (INLINE_MAX + 1, false),
        ] {
            let key = format!("{len}-{declared}");
            let body = data(len, 7);
            put(&f, &key, &body, declared).await.expect("put");
            let rec = record(&f, &key).expect("visible");
            assert_eq!(rec.inline, inline, "{len} bytes, declared {declared}");
            assert_eq!(rec.segments.len(), usize::from(!inline));
            assert_eq!(get(&f, &key, None).await.expect("get").0, body);
            total += len;
            // Reservations grown chunk by chunk are settled exactly, whatever the storage.
            assert_eq!(usage(&f), (total, 0));
        }
    }
    assert_eq!(blobs(&f).await.len(), 2, "one blob per body past the limit");
}

#[tokio::test]
async fn overwrites_and_deletes_remove_exactly_the_blobs_they_replace() {
    let (_d, f) = front(1 << 30);
    let big = data(INLINE_MAX + 1, 2);
    let small = data(10, 3);
    put(&f, "k", &big, true).await.expect("blob");
    assert_eq!(blobs(&f).await.len(), 1);
    // blob → inline: the old blob goes.
    put(&f, "k", &small, true).await.expect("inline");
    assert!(blobs(&f).await.is_empty());
    assert_eq!(get(&f, "k", None).await.expect("get").0, small);
    // inline → blob: only the new blob exists.
    put(&f, "k", &big, false).await.expect("blob again");
    let rec = record(&f, "k").expect("visible");
    assert_eq!(blobs(&f).await, [rec.segments[0].blob.clone()]);
    // inline → inline, then delete: nothing left anywhere.
    put(&f, "k", &small, true).await.expect("inline");
    put(&f, "k", &data(20, 4), true)
        .await
        .expect("inline again");
    f.delete_object_op(
        T,
        dto::DeleteObjectInput {
            bucket: B.into(),
            key: "k".into(),
            ..Default::default()
        },
    )
    .await
    .expect("delete");
    assert!(matches!(get(&f, "k", None).await, Err(ApiError::NoSuchKey)));
    assert!(blobs(&f).await.is_empty());
    assert_eq!(usage(&f), (0, 0));
}

#[tokio::test]
async fn a_small_body_failing_its_checksum_or_md5_leaves_nothing() {
    let (_d, f) = front(1 << 30);
    let body = data(3000, 5);
    let good = Expected::Header(Digest::of(Algorithm::Crc32, &body));
    let out = f
        .put_object_op(T, put_input("k", &body, true), good)
        .await
        .expect("put");
    assert_eq!(
        out.checksum_crc32,
        Some(Digest::of(Algorithm::Crc32, &body).value)
    );
    let bad = Expected::Header(Digest::of(Algorithm::Crc32, b"other"));
    let err = f
        .put_object_op(T, put_input("bad", &body, true), bad)
        .await
        .expect_err("mismatch");
    assert!(matches!(err, ApiError::ChecksumMismatch("CRC32")), "{err}");
    let mut input = put_input("bad", &body, true);
    input.content_md5 = Some("1B2M2Y8AsgTpgAmY7PhCfg==".into()); // MD5 of nothing
    let err = f
        .put_object_op(T, input, Expected::None)
        .await
        .expect_err("md5");
    assert!(matches!(err, ApiError::BadDigest), "{err}");
    assert!(record(&f, "bad").is_none());
    assert!(blobs(&f).await.is_empty());
    assert_eq!(usage(&f), (3000, 0));
}

#[tokio::test]
async fn the_quota_counts_inline_bytes_exactly() {
    let (_d, f) = front(10_000);
    put(&f, "a", &data(6000, 1), true).await.expect("declared");
    put(&f, "b", &data(4000, 1), false)
        .await
        .expect("unknown length");
    assert_eq!(usage(&f), (10_000, 0));
    for declared in [true, false] {
        let err = put(&f, "c", &data(1, 1), declared).await.expect_err("full");
        assert!(
            matches!(err, ApiError::Meta(MetaError::QuotaExceeded { .. })),
            "{err}"
        );
    }
    assert!(record(&f, "c").is_none());
    assert_eq!(usage(&f), (10_000, 0));
}

fn copy_source(key: &str) -> dto::CopySource {
    dto::CopySource::Bucket {
        bucket: B.into(),
        key: key.into(),
        version_id: None,
    }
}

#[tokio::test]
async fn a_copy_of_an_inline_object_stays_inline_and_a_part_copy_becomes_a_blob() {
    let (_d, f) = front(1 << 30);
    let body = data(5000, 9);
    let mut input = put_input("src", &body, true);
    input.content_type = Some("text/plain".into());
    input.metadata = Some([("owner".to_owned(), "me".to_owned())].into());
    f.put_object_op(T, input, Expected::None)
        .await
        .expect("put");

    let copy = dto::CopyObjectInput::builder()
        .bucket(B.into())
        .key("dst".into())
        .copy_source(copy_source("src"))
        .build()
        .expect("input");
    let out = f.copy_object_op(T, copy).await.expect("copy");
    let etag = out.copy_object_result.and_then(|r| r.e_tag);
    assert_eq!(etag, Some(dto::ETag::Strong(md5_hex(&body))));
    let rec = record(&f, "dst").expect("visible");
    assert!(rec.inline);
    assert_eq!(rec.content_type.as_deref(), Some("text/plain"));
    assert_eq!(rec.metadata["owner"], "me");
    assert_eq!(get(&f, "dst", None).await.expect("get").0, body);
    assert!(blobs(&f).await.is_empty());
    assert_eq!(usage(&f), (10_000, 0));
    // The tier moved the copied bytes: admitted like a server-side copy (not counted in).
    assert_eq!(f.metrics().tenant(T).bytes_in.load(Ordering::Relaxed), 5000);

    let upload = f
        .create_multipart_upload_op(
            T,
            dto::CreateMultipartUploadInput {
                bucket: B.into(),
                key: "assembled".into(),
                ..Default::default()
            },
        )
        .await
        .expect("create")
        .upload_id
        .expect("id");
    let part = dto::UploadPartCopyInput::builder()
        .bucket(B.into())
        .key("assembled".into())
        .upload_id(upload.clone())
        .part_number(1)
        .copy_source(copy_source("src"))
        .copy_source_range(Some("bytes=10-109".into()))
        .build()
        .expect("input");
    let part = f.upload_part_copy_op(T, part).await.expect("part copy");
    let part_etag = part.copy_part_result.and_then(|r| r.e_tag);
    assert_eq!(part_etag, Some(dto::ETag::Strong(md5_hex(&body[10..110]))));
    assert_eq!(blobs(&f).await.len(), 1, "a part is always a blob");
    let complete = dto::CompleteMultipartUploadInput {
        bucket: B.into(),
        key: "assembled".into(),
        upload_id: upload,
        multipart_upload: Some(dto::CompletedMultipartUpload {
            parts: Some(vec![dto::CompletedPart {
                part_number: Some(1),
                e_tag: part_etag,
                ..Default::default()
            }]),
        }),
        ..Default::default()
    };
    f.complete_multipart_upload_op(T, complete)
        .await
        .expect("complete");
    assert_eq!(
        get(&f, "assembled", None).await.expect("get").0,
        body.slice(10..110)
    );
    assert_eq!(usage(&f), (10_100, 0));
}

#[tokio::test]
async fn a_failed_create_only_put_keeps_the_object_and_leaves_no_blob_behind() {
    let (_d, f) = front(1 << 30);
    let big = data(INLINE_MAX + 10, 1);
    let create = |body: &Bytes| dto::PutObjectInput {
        if_none_match: Some(dto::ETagCondition::Any),
        ..put_input("k", body, true)
    };
    f.put_object_op(T, create(&big), Expected::None)
        .await
        .expect("create");
    let before = (blobs(&f).await, usage(&f));
    let other = data(INLINE_MAX + 20, 2);
    let refused = f.put_object_op(T, create(&other), Expected::None).await;
    assert!(
        matches!(refused, Err(ApiError::Meta(MetaError::PreconditionFailed))),
        "{refused:?}"
    );
    assert_eq!((blobs(&f).await, usage(&f)), before);
    assert_eq!(get(&f, "k", None).await.expect("get").0, big);
    // Compare-and-swap: a stale ETag is refused, the current one replaces.
    let swap = |tag: &str| dto::PutObjectInput {
        if_match: Some(dto::ETagCondition::ETag(dto::ETag::Strong(tag.into()))),
        ..put_input("k", &other, true)
    };
    let stale = f
        .put_object_op(T, swap(&md5_hex(&other)), Expected::None)
        .await;
    assert!(stale.is_err());
    assert_eq!((blobs(&f).await, usage(&f)), before);
    f.put_object_op(T, swap(&md5_hex(&big)), Expected::None)
        .await
        .expect("swap");
    assert_eq!(get(&f, "k", None).await.expect("get").0, other);
    assert_eq!(blobs(&f).await.len(), 1);
}

#[tokio::test]
async fn conditional_gets_answer_304_and_412_before_reading_a_byte() {
    let (_d, f) = front(1 << 30);
    let body = data(100, 3);
    put(&f, "k", &body, true).await.expect("put");
    let etag = md5_hex(&body);
    let cond = |m: Option<&str>, n: Option<&str>| {
        let tag = |t: &str| dto::ETagCondition::ETag(dto::ETag::Strong(t.into()));
        dto::GetObjectInput {
            bucket: B.into(),
            key: "k".into(),
            if_match: m.map(tag),
            if_none_match: n.map(tag),
            ..Default::default()
        }
    };
    let status = |r: ApiResult<dto::GetObjectOutput>| match r {
        Ok(_) => "200",
        Err(ApiError::PreconditionFailed) => "412",
        Err(ApiError::NotModified { etag: e, .. }) if e == etag => "304",
        Err(_) => "other",
    };
    assert_eq!(
        status(f.get_object_op(T, cond(Some("stale"), None), None).await),
        "412"
    );
    assert_eq!(
        status(f.get_object_op(T, cond(None, Some(&etag)), None).await),
        "304"
    );
    assert_eq!(
        status(f.get_object_op(T, cond(Some(&etag), None), None).await),
        "200"
    );
    let head = dto::HeadObjectInput {
        bucket: B.into(),
        key: "k".into(),
        if_none_match: Some(dto::ETagCondition::Any),
        ..Default::default()
    };
    assert!(matches!(
        f.head_object_op(T, head).await,
        Err(ApiError::NotModified { .. })
    ));
}

#[tokio::test]
async fn listings_take_s3s_edge_cases_as_s3_defines_them() {
    let (_d, f) = front(1 << 30);
    let odd = "sp ace%+&<\u{e9}";
    for k in ["a/b", "a/c/d", "b", odd] {
        put(&f, k, &Bytes::from_static(b"x"), true)
            .await
            .expect("put");
    }
    let list = |prefix: Option<&str>, delimiter: Option<&str>, max: Option<i32>| {
        let input = dto::ListObjectsV2Input {
            bucket: B.into(),
            prefix: prefix.map(str::to_owned),
            delimiter: delimiter.map(str::to_owned),
            max_keys: max,
            encoding_type: Some(dto::EncodingType::from_static(dto::EncodingType::URL)),
            ..Default::default()
        };
        let f = &f;
        async move { f.list_objects_v2_op(T, input).await.expect("list") }
    };
    let keys = |o: &dto::ListObjectsV2Output| -> Vec<String> {
        let c = o.contents.iter().flatten();
        c.filter_map(|o| o.key.clone()).collect()
    };
    let prefixes = |o: &dto::ListObjectsV2Output| -> Vec<String> {
        let c = o.common_prefixes.iter().flatten();
        c.filter_map(|p| p.prefix.clone()).collect()
    };
    // An empty delimiter is none: every key, no common prefix.
    let all = list(None, Some(""), None).await;
    assert_eq!(keys(&all).len(), 4);
    assert!(prefixes(&all).is_empty());
    // Keys are percent-encoded byte by byte (UTF-8), `/` and unreserved characters kept.
    assert!(keys(&all).contains(&"sp%20ace%25%2B%26%3C%C3%A9".to_owned()));
    // A prefix ending in the delimiter: the keys directly under it, deeper ones rolled up.
    let under = list(Some("a/"), Some("/"), None).await;
    assert_eq!(keys(&under), ["a/b"]);
    assert_eq!(prefixes(&under), ["a/c/"]);
    // max-keys=0: empty and not truncated, in v1 too.
    let none = list(None, None, Some(0)).await;
    assert_eq!((keys(&none).len(), none.is_truncated), (0, Some(false)));
    assert_eq!(none.next_continuation_token, None);
    let v1 = dto::ListObjectsInput {
        bucket: B.into(),
        max_keys: Some(0),
        ..Default::default()
    };
    let v1 = f.list_objects_op(T, v1).await.expect("list v1");
    assert_eq!(v1.is_truncated, Some(false));
    assert!(v1.contents.iter().flatten().next().is_none());
    // One key short of everything is truncated as ever.
    assert_eq!(list(None, None, Some(3)).await.is_truncated, Some(true));
}
