use std::collections::HashSet;

use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{
    Attribute, AttributeValue, Attributes, GetRange, ObjectMeta, ObjectStoreExt as _, PutPayload,
};
use s3s::S3ErrorCode;
use s3s::dto;
use sluice_meta::MetaError;
use sluice_s3::error::{ApiError, TierError, to_s3};

use super::{buckets_seen, exactly, get_range, record, tier_error, visible};
use crate::upstream::{UpstreamBucket, UpstreamError};

/// An object's metadata as `object_store` reports it, with this key, size and (quoted) ETag.
async fn meta(key: &str, size: u64) -> ObjectMeta {
    let store = InMemory::new();
    let path = Path::from(key);
    store
        .put(&path, PutPayload::from(vec![0; 1]))
        .await
        .expect("put");
    let meta = store.head(&path).await.expect("head");
    ObjectMeta {
        size,
        e_tag: Some(format!("\"etag-{key}\"")),
        ..meta
    }
}

#[test]
fn each_upstream_failure_becomes_the_front_error_its_status_means() {
    let cases = [
        (UpstreamError::NotFound, S3ErrorCode::NoSuchKey, 404),
        (
            UpstreamError::RangeNotSatisfiable,
            S3ErrorCode::InvalidRange,
            416,
        ),
        (
            UpstreamError::SlowDown("SlowDown".into()),
            S3ErrorCode::SlowDown,
            503,
        ),
        (
            UpstreamError::Unavailable("connection refused".into()),
            S3ErrorCode::ServiceUnavailable,
            503,
        ),
        (
            UpstreamError::Refused {
                status: 403,
                message: "AccessDenied".into(),
            },
            S3ErrorCode::ServiceUnavailable,
            503,
        ),
    ];
    for (upstream, code, status) in cases {
        let e = to_s3(tier_error(upstream.clone(), ApiError::NoSuchKey));
        assert_eq!(e.code(), &code, "{upstream:?}");
        let got = e.status_code().map_or_else(
            || code.status_code().map(|s| s.as_u16()),
            |s| Some(s.as_u16()),
        );
        assert_eq!(got, Some(status), "{upstream:?}");
    }
    assert!(matches!(
        tier_error(
            UpstreamError::Refused {
                status: 403,
                message: "AccessDenied".into()
            },
            ApiError::NoSuchKey
        ),
        ApiError::Tier(TierError::Refused { status: 403, .. })
    ));
    // What a 404 means is the call's: no such bucket, for a listing.
    assert!(matches!(
        tier_error(UpstreamError::NotFound, MetaError::NoSuchBucket.into()),
        ApiError::Meta(MetaError::NoSuchBucket)
    ));
}

#[tokio::test]
async fn upstream_listings_hide_deletes_on_their_way_up_and_keys_up_to_the_marker() {
    let mut listed = Vec::new();
    for (key, size) in [("a", 1), ("b", 2), ("c", 3), ("d", 4)] {
        listed.push(meta(key, size).await);
    }
    let modified = listed[1].last_modified.timestamp_millis();
    let deleted: HashSet<String> = ["c".to_owned()].into();
    let seen = visible(listed, &deleted, Some("a"));
    let keys: Vec<_> = seen.iter().map(|(k, r)| (k.as_str(), r.size)).collect();
    assert_eq!(keys, [("b", 2), ("d", 4)]);
    assert_eq!(seen[0].1.etag, "etag-b");
    assert_eq!(seen[0].1.last_modified_ms, modified);
}

#[tokio::test]
async fn an_upstream_object_reads_as_a_record_with_its_headers_and_metadata() {
    let mut attributes = Attributes::new();
    for (k, v) in [
        (Attribute::ContentType, "text/plain"),
        (Attribute::CacheControl, "no-cache"),
        (Attribute::ContentDisposition, "inline"),
        (Attribute::ContentEncoding, "gzip"),
        (Attribute::ContentLanguage, "fr"),
        (Attribute::Metadata("step".into()), "42"),
    ] {
        attributes.insert(k, AttributeValue::from(v));
    }
    let rec = record(&meta("k", 10).await, &attributes);
    assert_eq!(rec.size, 10);
    assert_eq!(rec.etag, "etag-k", "the ETag without its quotes");
    assert_eq!(rec.content_type.as_deref(), Some("text/plain"));
    let headers: Vec<_> = rec
        .headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(
        headers,
        [
            ("cache-control", "no-cache"),
            ("content-disposition", "inline"),
            ("content-encoding", "gzip"),
            ("content-language", "fr"),
        ]
    );
    assert_eq!(rec.metadata.get("step").map(String::as_str), Some("42"));
    assert!(rec.segments.is_empty() && !rec.inline);
}

#[test]
fn s3_ranges_ask_upstream_for_the_same_bytes() {
    let int = |first, last| dto::Range::Int { first, last };
    assert_eq!(get_range(int(10, Some(19))), GetRange::Bounded(10..20));
    assert_eq!(get_range(int(10, None)), GetRange::Offset(10));
    assert_eq!(
        get_range(dto::Range::Suffix { length: 5 }),
        GetRange::Suffix(5)
    );
    assert_eq!(
        get_range(int(0, Some(u64::MAX))),
        GetRange::Bounded(0..u64::MAX)
    );
}

#[test]
fn upstream_buckets_less_deletions_on_their_way_up_keep_their_creation_dates() {
    let upstream = |name: &str| UpstreamBucket {
        name: name.to_owned(),
        creation_date: Some("2026-01-02T03:04:05.000Z".to_owned()),
    };
    let deleting: HashSet<String> = ["old".to_owned()].into();
    let seen = buckets_seen(vec![upstream("ckpt"), upstream("old")], &deleting);
    let names: Vec<_> = seen.iter().map(|b| b.name.as_str()).collect();
    assert_eq!(names, ["ckpt"]);
    let expected =
        dto::Timestamp::parse(dto::TimestampFormat::DateTime, "2026-01-02T03:04:05.000Z")
            .expect("parses");
    assert_eq!(seen[0].created, Some(expected));
}

/// Issue #30: a gateway that ends a body early (its connection closed without an error) must
/// not make the node end its own answer cleanly with short bytes; nor may a long one pass.
#[tokio::test]
async fn an_upstream_body_is_held_to_its_declared_length() {
    use futures::StreamExt as _;
    let body = |pieces: &[&'static [u8]]| {
        let items: Vec<object_store::Result<bytes::Bytes>> = pieces
            .iter()
            .map(|p| Ok(bytes::Bytes::from_static(p)))
            .collect();
        futures::stream::iter(items).boxed()
    };
    let read = |s: futures::stream::BoxStream<'static, object_store::Result<bytes::Bytes>>| async move {
        s.collect::<Vec<_>>().await
    };
    let whole = read(exactly(body(&[b"abc", b"de"]), 5)).await;
    assert!(whole.iter().all(Result::is_ok) && whole.len() == 2);
    let short = read(exactly(body(&[b"abc"]), 5)).await;
    assert!(short[0].is_ok(), "the bytes that came are passed on");
    let e = short[1].as_ref().expect_err("an early end is an error");
    assert!(
        e.to_string().contains("ended early: 3 bytes of the 5"),
        "{e}"
    );
    let long = read(exactly(body(&[b"abc", b"def"]), 5)).await;
    assert_eq!(long.len(), 2);
    assert!(
        long[1]
            .as_ref()
            .is_err_and(|e| e.to_string().contains("ran long"))
    );
    assert!(read(exactly(body(&[]), 0)).await.is_empty());
}
