//! Confidential bodies through the front's handlers, with a fixed test key and 16-byte
//! segments (so small bodies cross many boundaries): what is stored is ciphertext, what is
//! read back is the exact plaintext, whole and ranged, here and from a tier after the local
//! copy is gone, and every tampering of the stored bytes fails the read.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use futures::{StreamExt as _, TryStreamExt as _};
use object_store::ObjectStoreExt as _;
use object_store::memory::InMemory;
use s3s::S3ErrorCode;
use s3s::dto::{self, StreamingBlob};
use sluice_meta::{Catalog, ObjectRecord};

use crate::blob::{BlobStore, DEFAULT_GRAIN, Pacer, ReadStream};
use crate::checksum::Expected;
use crate::confidential::{Confidential, ENTRY, TenantKey};
use crate::error::{ApiError, ApiResult};
use crate::front::{Front, FrontConfig, Tier, TierBucket, TierRead};

pub(super) const T: &str = "tenant";
pub(super) const B: &str = "bkt";
const SEGMENT: u32 = 16;

/// One answer for every tenant: a key, none, or a refusal.
struct Keys(Result<Option<Arc<TenantKey>>, String>);

impl Confidential for Keys {
    fn tenant_key(&self, _: &str) -> Result<Option<Arc<TenantKey>>, String> {
        self.0.clone()
    }
}

pub(super) fn key(byte: u8) -> Arc<TenantKey> {
    Arc::new(TenantKey::from_bytes(&[byte; 32]).expect("key"))
}

fn keyed(answer: Result<Option<Arc<TenantKey>>, String>) -> Arc<dyn Confidential> {
    Arc::new(Keys(answer))
}

fn front(keys: Arc<dyn Confidential>, tier: Option<Arc<dyn Tier>>) -> (tempfile::TempDir, Front) {
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
        .with_confidential(keys)
        .with_segment_size(SEGMENT);
    if let Some(tier) = tier {
        f = f.with_tier(tier);
    }
    (dir, f)
}

/// A pattern that does not repeat within the bodies used here.
fn data(len: usize, seed: u64) -> Bytes {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.to_le_bytes()[3]
        })
        .collect::<Vec<u8>>()
        .into()
}

async fn put(f: &Front, key: &str, body: &Bytes) -> ApiResult<dto::PutObjectOutput> {
    let chunks: Vec<Result<Bytes, std::io::Error>> =
        body.chunks(700).map(|c| Ok(body.slice_ref(c))).collect();
    let input = dto::PutObjectInput {
        bucket: B.into(),
        key: key.into(),
        body: Some(StreamingBlob::wrap(futures::stream::iter(chunks))),
        content_length: Some(body.len() as i64),
        metadata: Some(
            [("mine".to_owned(), "kept".to_owned())]
                .into_iter()
                .collect(),
        ),
        ..Default::default()
    };
    f.put_object_op(T, input, Expected::None).await
}

/// The body of a GET, or its error: before the status line (`Err` from the handler) or in
/// place of the rest of the body.
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
    let chunks: Vec<Bytes> = body
        .try_collect()
        .await
        .map_err(|e| ApiError::Body(e.to_string()))?;
    Ok((chunks.concat().into(), out))
}

async fn head(f: &Front, key: &str) -> ApiResult<dto::HeadObjectOutput> {
    let input = dto::HeadObjectInput {
        bucket: B.into(),
        key: key.into(),
        ..Default::default()
    };
    f.head_object_op(T, input).await
}

async fn list(f: &Front) -> Vec<(String, i64)> {
    let input = dto::ListObjectsV2Input {
        bucket: B.into(),
        ..Default::default()
    };
    let out = f.list_objects_v2_op(T, input).await.expect("list");
    out.contents
        .unwrap_or_default()
        .into_iter()
        .map(|o| (o.key.unwrap_or_default(), o.size.unwrap_or(-1)))
        .collect()
}

/// The stored body of `key` and its record, as the drain reads them.
async fn stored(f: &Front, key: &str) -> (ObjectRecord, Bytes) {
    let (rec, inline) = f
        .catalog()
        .get_object_with_body(T, B, key)
        .expect("catalog")
        .expect("object");
    if let Some(body) = inline {
        return (rec, body.into());
    }
    let chunks: Vec<Bytes> = f
        .blobs()
        .read(&Pacer::unthrottled(T), &rec.segments, 0..rec.size, None)
        .try_collect()
        .await
        .expect("read");
    (rec, chunks.concat().into())
}

/// Every byte of the backend and of the catalog's inline bodies.
async fn everything_stored(f: &Front, keys: &[&str]) -> Vec<Bytes> {
    let store = f.blobs().root();
    let mut out = Vec::new();
    let listed: Vec<object_store::ObjectMeta> = store.list(None).try_collect().await.expect("list");
    for m in listed {
        out.push(
            store
                .get(&m.location)
                .await
                .expect("get")
                .bytes()
                .await
                .expect("bytes"),
        );
    }
    for k in keys {
        if let Some((_, Some(body))) = f.catalog().get_object_with_body(T, B, k).expect("catalog") {
            out.push(body.into());
        }
    }
    out
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

const SIZES: [usize; 8] = [0, 1, 15, 16, 17, 100, 4_000, 70_000];

fn ranges(len: u64) -> Vec<String> {
    let mut out = vec![format!("bytes=-{}", len.min(21))];
    for (a, b) in [
        (0, 0),
        (15, 16),
        (16, 31),
        (5, 40),
        (17, 17),
        (len / 3, len - 1),
        (len - 1, len - 1),
    ] {
        if a <= b && b < len {
            out.push(format!("bytes={a}-{b}"));
        }
    }
    out
}

#[tokio::test]
async fn bodies_read_back_exactly_whole_and_in_ranges_across_segment_boundaries() {
    let (_d, f) = front(keyed(Ok(Some(key(1)))), None);
    for (i, &len) in SIZES.iter().enumerate() {
        let name = format!("obj-{len}");
        let body = data(len, i as u64);
        let out = put(&f, &name, &body).await.expect("put");
        let (rec, ciphertext) = stored(&f, &name).await;
        let layout = sluice_crypt::Layout::new(SEGMENT, len as u64).expect("layout");
        assert_eq!(
            rec.size,
            layout.ciphertext_len(),
            "stored bytes are the ciphertext's"
        );
        assert_eq!(out.e_tag, Some(dto::ETag::Strong(rec.etag.clone())));
        assert_eq!(ciphertext.len() as u64, rec.size);

        let (got, out) = get(&f, &name, None).await.expect("get");
        assert_eq!(got, body, "{len} bytes");
        assert_eq!(out.content_length, Some(len as i64));
        let meta = out.metadata.expect("metadata");
        assert_eq!(meta.get("mine").map(String::as_str), Some("kept"));
        assert!(
            !meta.contains_key(ENTRY),
            "the entry is the node's, not the client's"
        );
        assert_eq!(
            head(&f, &name).await.expect("head").content_length,
            Some(len as i64)
        );
        let attributes = dto::GetObjectAttributesInput::builder()
            .bucket(B.into())
            .key(name.clone())
            .object_attributes(vec![
                dto::ObjectAttributes::from_static(dto::ObjectAttributes::OBJECT_SIZE),
                dto::ObjectAttributes::from_static(dto::ObjectAttributes::CHECKSUM),
            ])
            .build()
            .expect("input");
        let attributes = f
            .get_object_attributes_op(T, attributes)
            .await
            .expect("attrs");
        assert_eq!(attributes.object_size, Some(len as i64));
        assert!(
            attributes.checksum.is_none(),
            "a ciphertext checksum was answered"
        );
        if len == 0 {
            continue;
        }
        for r in ranges(len as u64) {
            let (got, out) = get(&f, &name, Some(&r)).await.expect("range");
            let want = dto::Range::parse(&r)
                .expect("range")
                .check(len as u64)
                .expect("in");
            #[allow(clippy::cast_possible_truncation)]
            let want_bytes = body.slice(want.start as usize..want.end as usize);
            assert_eq!(got, want_bytes, "{len} bytes, {r}");
            assert_eq!(
                out.content_range,
                Some(format!("bytes {}-{}/{len}", want.start, want.end - 1))
            );
        }
        assert!(matches!(
            get(&f, &name, Some(&format!("bytes={len}-"))).await,
            Err(ApiError::InvalidRange)
        ));
    }
    let listed = list(&f).await;
    let mut want: Vec<(String, i64)> = SIZES
        .iter()
        .map(|&l| (format!("obj-{l}"), l as i64))
        .collect();
    want.sort();
    assert_eq!(listed, want, "listings show plaintext lengths");
}

#[tokio::test]
async fn neither_the_blobs_nor_the_catalog_hold_any_plaintext() {
    let (_d, f) = front(keyed(Ok(Some(key(1)))), None);
    let small = data(3_000, 7); // inline in the catalog
    let large = data(200_000, 8); // a blob
    put(&f, "small", &small).await.expect("put");
    put(&f, "large", &large).await.expect("put");
    assert!(stored(&f, "small").await.0.inline);
    assert!(!stored(&f, "large").await.0.inline);
    let (used, _, _) = f.catalog().ledger().usage(T).expect("tenant");
    let ct = |n| {
        sluice_crypt::Layout::new(SEGMENT, n)
            .expect("l")
            .ciphertext_len()
    };
    assert_eq!(used, ct(3_000) + ct(200_000), "the quota counts ciphertext");
    let all = everything_stored(&f, &["small", "large"]).await;
    assert!(all.len() >= 2);
    for body in [&small, &large] {
        for probe in body.chunks(32).step_by(17) {
            for stored in &all {
                assert!(
                    !contains(stored, probe),
                    "plaintext found on the node's disk"
                );
            }
        }
    }
}

#[tokio::test]
async fn a_tenant_whose_key_is_unavailable_is_refused_and_nothing_is_written() {
    let (_d, f) = front(keyed(Err("the broker refused the evidence".into())), None);
    let e = put(&f, "k", &data(100_000, 1)).await.expect_err("refused");
    assert!(matches!(&e, ApiError::KeyUnavailable(m) if m.contains("broker refused")));
    let s3 = crate::error::to_s3(e);
    assert_eq!(s3.code(), &S3ErrorCode::ServiceUnavailable);
    assert!(
        s3.message()
            .unwrap_or_default()
            .contains("nothing was written")
    );
    assert!(
        f.catalog()
            .get_object(T, B, "k")
            .expect("catalog")
            .is_none()
    );
    assert!(
        everything_stored(&f, &["k"]).await.is_empty(),
        "a body was stored"
    );
    assert!(matches!(
        get(&f, "k", None).await,
        Err(ApiError::KeyUnavailable(_))
    ));
    assert!(matches!(
        head(&f, "k").await,
        Err(ApiError::KeyUnavailable(_))
    ));
}

/// A client's Content-MD5 is of the plaintext it sent: checked against that, not the
/// ciphertext; a wrong one stores nothing.
#[tokio::test]
async fn content_md5_is_checked_against_the_plaintext() {
    use base64::Engine as _;
    use md5::{Digest as _, Md5};
    let (_d, f) = front(keyed(Ok(Some(key(1)))), None);
    let body = data(5_000, 9);
    let digest = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(Md5::digest(b));
    let with_md5 = |key: &str, md5: String| {
        let chunks: Vec<Result<Bytes, std::io::Error>> =
            body.chunks(700).map(|c| Ok(body.slice_ref(c))).collect();
        dto::PutObjectInput {
            bucket: B.into(),
            key: key.into(),
            body: Some(StreamingBlob::wrap(futures::stream::iter(chunks))),
            content_length: Some(body.len() as i64),
            content_md5: Some(md5),
            ..Default::default()
        }
    };
    f.put_object_op(T, with_md5("right", digest(&body)), Expected::None)
        .await
        .expect("the plaintext's MD5 is accepted");
    assert_eq!(get(&f, "right", None).await.expect("get").0, body);
    let err = f
        .put_object_op(T, with_md5("wrong", digest(b"other")), Expected::None)
        .await
        .expect_err("another MD5 is refused");
    assert!(matches!(err, ApiError::BadDigest), "{err}");
    assert!(
        head(&f, "wrong").await.is_err(),
        "nothing stored under the refused key"
    );
}

#[tokio::test]
async fn a_tenant_without_a_key_stores_bodies_as_they_come() {
    let (_d, f) = front(keyed(Ok(None)), None);
    let body = data(50_000, 3);
    put(&f, "plain", &body).await.expect("put");
    let (rec, stored_body) = stored(&f, "plain").await;
    assert_eq!(stored_body, body);
    assert!(!rec.metadata.contains_key(ENTRY));
    assert_eq!(get(&f, "plain", None).await.expect("get").0, body);
}

#[tokio::test]
async fn a_client_may_not_set_the_entry() {
    let (_d, f) = front(keyed(Ok(Some(key(1)))), None);
    let input = dto::PutObjectInput {
        bucket: B.into(),
        key: "k".into(),
        metadata: Some(
            [(ENTRY.to_owned(), "v1 s=16 g=0".to_owned())]
                .into_iter()
                .collect(),
        ),
        ..Default::default()
    };
    assert!(matches!(
        f.put_object_op(T, input, Expected::None).await,
        Err(ApiError::InvalidArgument(_))
    ));
    let input = dto::CreateMultipartUploadInput {
        bucket: B.into(),
        key: "k".into(),
        metadata: Some(
            [(ENTRY.to_owned(), "v1 s=16 g=0".to_owned())]
                .into_iter()
                .collect(),
        ),
        ..Default::default()
    };
    assert!(matches!(
        f.create_multipart_upload_op(T, input).await,
        Err(ApiError::InvalidArgument(_))
    ));
}

// Multipart uploads and copies. With 16-byte segments a stored part is about twice its
// plaintext, so a part of 2.7 MB plaintext is over the 5 MiB minimum.
const PART: usize = 2_700_000;

async fn create(f: &Front, key: &str) -> String {
    let input = dto::CreateMultipartUploadInput {
        bucket: B.into(),
        key: key.into(),
        ..Default::default()
    };
    f.create_multipart_upload_op(T, input)
        .await
        .expect("create")
        .upload_id
        .expect("id")
}

async fn upload_part(f: &Front, key: &str, id: &str, n: i32, body: &Bytes) -> String {
    let chunks: Vec<Result<Bytes, std::io::Error>> =
        body.chunks(65_536).map(|c| Ok(body.slice_ref(c))).collect();
    let input = dto::UploadPartInput {
        bucket: B.into(),
        key: key.into(),
        upload_id: id.into(),
        part_number: n,
        body: Some(StreamingBlob::wrap(futures::stream::iter(chunks))),
        content_length: Some(body.len() as i64),
        ..Default::default()
    };
    f.upload_part_op(T, input, Expected::None, None)
        .await
        .expect("part")
        .e_tag
        .expect("etag")
        .into_value()
}

async fn complete(f: &Front, key: &str, id: &str, etags: &[String]) -> ApiResult<()> {
    let parts = etags
        .iter()
        .enumerate()
        .map(|(i, e)| dto::CompletedPart {
            part_number: Some(i as i32 + 1),
            e_tag: Some(dto::ETag::Strong(e.clone())),
            ..Default::default()
        })
        .collect();
    let input = dto::CompleteMultipartUploadInput {
        bucket: B.into(),
        key: key.into(),
        upload_id: id.into(),
        multipart_upload: Some(dto::CompletedMultipartUpload { parts: Some(parts) }),
        ..Default::default()
    };
    f.complete_multipart_upload_op(T, input).await.map(|_| ())
}

/// A multipart object of `parts` (plaintext bodies), and its plaintext.
async fn multipart(f: &Front, key: &str, parts: &[Bytes]) -> Bytes {
    let id = create(f, key).await;
    let mut etags = Vec::new();
    for (i, p) in parts.iter().enumerate() {
        etags.push(upload_part(f, key, &id, i as i32 + 1, p).await);
    }
    complete(f, key, &id, &etags).await.expect("complete");
    parts.concat().into()
}

/// Ranges across the part boundaries of `parts` and the segment boundaries near them.
fn part_ranges(parts: &[usize]) -> Vec<(u64, u64)> {
    let total: usize = parts.iter().sum();
    let mut out = vec![(0, 0), (15, 16), (0, total as u64 - 1)];
    let mut at = 0;
    for p in &parts[..parts.len() - 1] {
        at += p;
        let a = at as u64;
        out.extend([(a - 1, a), (a - 20, a + 20), (a, a), (a - 1, a + 16)]);
    }
    out.push((total as u64 - 17, total as u64 - 1));
    out
}

async fn read_ranges(f: &Front, key: &str, body: &Bytes, ranges: &[(u64, u64)]) {
    for &(a, b) in ranges {
        let r = format!("bytes={a}-{b}");
        let (got, out) = get(f, key, Some(&r)).await.expect("range");
        #[allow(clippy::cast_possible_truncation)]
        let want = body.slice(a as usize..=b as usize);
        assert_eq!(got, want, "{key} {r}");
        assert_eq!(out.content_length, Some((b - a + 1) as i64));
    }
}

#[tokio::test]
async fn multipart_objects_read_back_exactly_across_part_and_segment_boundaries() {
    let (_d, f) = front(keyed(Ok(Some(key(1)))), None);
    let bodies = [data(PART, 1), data(PART + 13, 2), data(1_000, 3)];
    let id = create(&f, "mp").await;
    let mut etags = Vec::new();
    for (i, p) in bodies.iter().enumerate() {
        let etag = upload_part(&f, "mp", &id, i as i32 + 1, p).await;
        // A part's ETag is its ciphertext's, not the plaintext's MD5.
        assert_ne!(etag, hex::encode(<md5::Md5 as md5::Digest>::digest(p)));
        etags.push(etag);
    }
    complete(&f, "mp", &id, &etags).await.expect("complete");
    let body: Bytes = bodies.concat().into();
    let len = body.len() as i64;
    let (rec, stored_body) = stored(&f, "mp").await;
    assert!(rec.size > body.len() as u64);
    assert!(rec.metadata[ENTRY].contains(" p=2700000*1,2700013*1,1000*1"));
    for b in &bodies {
        assert!(!contains(&stored_body, &b[100..164]), "plaintext stored");
    }
    for blob in everything_stored(&f, &["mp"]).await {
        assert!(!contains(&blob, &bodies[1][500..564]), "plaintext stored");
    }
    let (got, out) = get(&f, "mp", None).await.expect("get");
    assert_eq!(got, body);
    assert_eq!(out.content_length, Some(len));
    assert!(!out.metadata.unwrap_or_default().contains_key(ENTRY));
    assert_eq!(
        head(&f, "mp").await.expect("head").content_length,
        Some(len)
    );
    assert_eq!(list(&f).await, vec![("mp".to_owned(), len)]);
    let ranges = part_ranges(&[PART, PART + 13, 1_000]);
    read_ranges(&f, "mp", &body, &ranges).await;
    // From the tier once the local copy is gone.
    let tier = Arc::new(DrainedTier::default());
    tier.drain(&f, "mp").await;
    let (_d2, reader) = front(
        keyed(Ok(Some(key(1)))),
        Some(Arc::clone(&tier) as Arc<dyn Tier>),
    );
    assert_eq!(get(&reader, "mp", None).await.expect("tier").0, body);
    assert_eq!(
        head(&reader, "mp").await.expect("head").content_length,
        Some(len)
    );
    read_ranges(&reader, "mp", &body, &ranges).await;
}

#[tokio::test]
async fn an_encrypted_upload_must_list_its_parts_from_one_without_gaps() {
    let (_d, f) = front(keyed(Ok(Some(key(1)))), None);
    let id = create(&f, "gap").await;
    let e1 = upload_part(&f, "gap", &id, 1, &data(PART, 1)).await;
    let e3 = upload_part(&f, "gap", &id, 3, &data(10, 3)).await;
    let parts = vec![
        dto::CompletedPart {
            part_number: Some(1),
            e_tag: Some(dto::ETag::Strong(e1)),
            ..Default::default()
        },
        dto::CompletedPart {
            part_number: Some(3),
            e_tag: Some(dto::ETag::Strong(e3)),
            ..Default::default()
        },
    ];
    let input = dto::CompleteMultipartUploadInput {
        bucket: B.into(),
        key: "gap".into(),
        upload_id: id,
        multipart_upload: Some(dto::CompletedMultipartUpload { parts: Some(parts) }),
        ..Default::default()
    };
    assert!(matches!(
        f.complete_multipart_upload_op(T, input).await,
        Err(ApiError::InvalidArgument(_))
    ));
}

#[tokio::test]
async fn a_part_swapped_or_taken_from_another_upload_fails_the_read() {
    let (_d, f) = front(keyed(Ok(Some(key(1)))), None);
    let bodies = [data(PART, 1), data(PART, 2), data(100, 3)];
    let body = multipart(&f, "mp", &bodies).await;
    let other = multipart(&f, "other", &[data(PART, 4), data(PART, 5), data(100, 6)]).await;
    let tier = Arc::new(DrainedTier::default());
    tier.drain(&f, "mp").await;
    tier.drain(&f, "other").await;
    let (_, other_body) = tier.object("other").expect("other");
    let stride = {
        let l = sluice_crypt::Layout::new(SEGMENT, PART as u64).expect("layout");
        #[allow(clippy::cast_possible_truncation)]
        let c = l.ciphertext_len() as usize;
        c
    };
    for name in ["swapped", "foreign"] {
        let (rec, b) = tier.object("mp").expect("mp");
        tier.lock().insert(name.into(), (rec, b));
    }
    tier.tamper("swapped", |b| {
        let first: Vec<u8> = b[..stride].to_vec();
        b.copy_within(stride..2 * stride, 0);
        b[stride..2 * stride].copy_from_slice(&first);
    });
    tier.tamper("foreign", |b| {
        b[stride..2 * stride].copy_from_slice(&other_body[stride..2 * stride]);
    });
    let (_d2, reader) = front(
        keyed(Ok(Some(key(1)))),
        Some(Arc::clone(&tier) as Arc<dyn Tier>),
    );
    for name in ["swapped", "foreign"] {
        for r in [None, Some(format!("bytes={}-{}", PART - 5, PART + 5))] {
            match get(&reader, name, r.as_deref()).await {
                Err(e) => {
                    let msg = crate::error::to_s3(e)
                        .message()
                        .unwrap_or_default()
                        .to_owned();
                    assert!(msg.contains("does not authenticate"), "{name}: {msg}");
                }
                Ok((got, _)) => panic!("{name} {r:?}: read {} bytes", got.len()),
            }
        }
    }
    assert_eq!(get(&reader, "mp", None).await.expect("clean").0, body);
    assert_eq!(get(&reader, "other", None).await.expect("clean").0, other);
}

fn copy_source(key: &str) -> dto::CopySource {
    dto::CopySource::Bucket {
        bucket: B.into(),
        key: key.into(),
        version_id: None,
    }
}

async fn copy(f: &Front, from: &str, to: &str) -> ApiResult<dto::CopyObjectOutput> {
    let input = dto::CopyObjectInput::builder()
        .bucket(B.into())
        .key(to.into())
        .copy_source(copy_source(from))
        .build()
        .expect("input");
    f.copy_object_if_op(T, input, Ok(sluice_meta::Precondition::None))
        .await
}

#[tokio::test]
async fn a_copy_is_encrypted_again_for_its_own_name_and_reads_back_exactly() {
    let (_d, f) = front(keyed(Ok(Some(key(1)))), None);
    let small = data(4_000, 7);
    put(&f, "small", &small).await.expect("put");
    let big = multipart(&f, "mp", &[data(PART, 8), data(500, 9)]).await;
    for (src, dst, body) in [("small", "small-copy", &small), ("mp", "mp-copy", &big)] {
        copy(&f, src, dst).await.expect("copy");
        let (got, out) = get(&f, dst, None).await.expect("get");
        assert_eq!(&got, body, "{dst}");
        assert_eq!(out.content_length, Some(body.len() as i64));
        // The source's user metadata is kept, the entry is the copy's own.
        assert_eq!(
            head(&f, dst)
                .await
                .expect("head")
                .metadata
                .unwrap_or_default()
                .get("mine")
                .map(String::as_str),
            (src == "small").then_some("kept")
        );
        let (src_rec, src_stored) = stored(&f, src).await;
        let (dst_rec, dst_stored) = stored(&f, dst).await;
        assert_ne!(src_rec.metadata[ENTRY], dst_rec.metadata[ENTRY]);
        assert!(!contains(&dst_stored, &body[100..164]), "plaintext stored");
        assert_ne!(src_stored.slice(..80), dst_stored.slice(..80));
        let (a, b) = (body.len() as u64 / 3, body.len() as u64 - 2);
        read_ranges(&f, dst, body, &[(a, b), (15, 16)]).await;
    }
    // A copy read from the tier, the source only there.
    let tier = Arc::new(DrainedTier::default());
    tier.drain(&f, "mp").await;
    let (_d2, other) = front(
        keyed(Ok(Some(key(1)))),
        Some(Arc::clone(&tier) as Arc<dyn Tier>),
    );
    copy(&other, "mp", "from-tier").await.expect("copy");
    assert_eq!(get(&other, "from-tier", None).await.expect("get").0, big);
}

#[tokio::test]
async fn a_ranged_upload_part_copy_takes_plaintext_bytes() {
    let (_d, f) = front(keyed(Ok(Some(key(1)))), None);
    let src = data(PART + 1_000, 11);
    put(&f, "src", &src).await.expect("put");
    let id = create(&f, "dst").await;
    let (a, b) = (333u64, PART as u64 + 332);
    let input = dto::UploadPartCopyInput::builder()
        .bucket(B.into())
        .key("dst".into())
        .upload_id(id.clone())
        .part_number(1)
        .copy_source(copy_source("src"))
        .copy_source_range(Some(format!("bytes={a}-{b}")))
        .build()
        .expect("input");
    let e1 = f
        .upload_part_copy_op(T, input)
        .await
        .expect("part copy")
        .copy_part_result
        .and_then(|r| r.e_tag)
        .expect("etag")
        .into_value();
    let tail = data(77, 12);
    let e2 = upload_part(&f, "dst", &id, 2, &tail).await;
    complete(&f, "dst", &id, &[e1, e2]).await.expect("complete");
    #[allow(clippy::cast_possible_truncation)]
    let want: Bytes = [src.slice(a as usize..=b as usize), tail].concat().into();
    assert_eq!(get(&f, "dst", None).await.expect("get").0, want);
    read_ranges(&f, "dst", &want, &part_ranges(&[PART, 77])).await;
    // A range past the plaintext's end is refused.
    let input = dto::UploadPartCopyInput::builder()
        .bucket(B.into())
        .key("dst2".into())
        .upload_id(create(&f, "dst2").await)
        .part_number(1)
        .copy_source(copy_source("src"))
        .copy_source_range(Some(format!("bytes=0-{}", src.len())))
        .build()
        .expect("input");
    assert!(matches!(
        f.upload_part_copy_op(T, input).await,
        Err(ApiError::InvalidRange)
    ));
}

/// The shared tier as the drain leaves it: each object's stored bytes with its record's
/// size, ETag and metadata (the entry among them), which a test may then tamper with, take
/// aside and put back (the rollback tests, `manifest/tests.rs`, use it too).
#[derive(Default)]
pub(super) struct DrainedTier(Mutex<BTreeMap<String, (ObjectRecord, Bytes)>>);

impl DrainedTier {
    pub(super) fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, BTreeMap<String, (ObjectRecord, Bytes)>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Drains `key` from `from` as it is now (a key it no longer holds is deleted here).
    pub(super) async fn drain(&self, from: &Front, key: &str) {
        if from
            .catalog()
            .get_object(T, B, key)
            .expect("catalog")
            .is_none()
        {
            self.lock().remove(key);
            return;
        }
        let (rec, body) = stored(from, key).await;
        let rec = ObjectRecord {
            size: rec.size,
            etag: rec.etag,
            last_modified_ms: rec.last_modified_ms,
            metadata: rec.metadata,
            ..ObjectRecord::default()
        };
        self.lock().insert(key.to_owned(), (rec, body));
    }

    /// Replaces the stored bytes of `key` (its size follows).
    fn tamper(&self, key: &str, f: impl FnOnce(&mut Vec<u8>)) {
        let mut all = self.lock();
        let (rec, body) = all.get_mut(key).expect("drained");
        let mut bytes = body.to_vec();
        f(&mut bytes);
        rec.size = bytes.len() as u64;
        *body = bytes.into();
    }

    fn object(&self, key: &str) -> ApiResult<(ObjectRecord, Bytes)> {
        self.lock().get(key).cloned().ok_or(ApiError::NoSuchKey)
    }

    /// A copy of what the tier holds of `key`, to put back later.
    pub(super) fn take(&self, key: &str) -> (ObjectRecord, Bytes) {
        self.object(key).expect("drained")
    }

    pub(super) fn put_back(&self, key: &str, copy: (ObjectRecord, Bytes)) {
        self.lock().insert(key.to_owned(), copy);
    }
}

#[async_trait::async_trait]
impl Tier for DrainedTier {
    async fn head(&self, _: &str, _: &str, key: &str) -> ApiResult<ObjectRecord> {
        Ok(self.object(key)?.0)
    }

    async fn get(
        &self,
        _: &str,
        _: &str,
        key: &str,
        range: Option<dto::Range>,
    ) -> ApiResult<TierRead> {
        let (record, body) = self.object(key)?;
        let range = match range {
            None => 0..record.size,
            Some(r) => r.check(record.size).map_err(|_| ApiError::InvalidRange)?,
        };
        #[allow(clippy::cast_possible_truncation)]
        let bytes = body.slice(range.start as usize..range.end as usize);
        // In small pieces, as a network delivers them.
        let pieces: Vec<object_store::Result<Bytes>> =
            bytes.chunks(7).map(|c| Ok(bytes.slice_ref(c))).collect();
        Ok(TierRead {
            record,
            range,
            body: ReadStream::new(futures::stream::iter(pieces).boxed()),
        })
    }

    async fn list(
        &self,
        _: &str,
        _: &str,
        prefix: &str,
        after: Option<&str>,
    ) -> ApiResult<Vec<(String, ObjectRecord)>> {
        // As an S3 listing: sizes, no metadata.
        Ok(self
            .lock()
            .iter()
            .filter(|(k, _)| k.starts_with(prefix) && after.is_none_or(|a| k.as_str() > a))
            .map(|(k, (rec, _))| {
                let listed = ObjectRecord {
                    size: rec.size,
                    etag: rec.etag.clone(),
                    ..ObjectRecord::default()
                };
                (k.clone(), listed)
            })
            .collect())
    }

    async fn buckets(&self, _: &str) -> ApiResult<Vec<TierBucket>> {
        Ok(vec![TierBucket {
            name: B.into(),
            created: None,
        }])
    }

    async fn has_bucket(&self, _: &str, bucket: &str) -> ApiResult<bool> {
        Ok(bucket == B)
    }

    fn stalled(&self, _: &str) -> Option<String> {
        None
    }
}

/// A writer's objects drained to a tier, and a reader that has no local copy of them.
async fn drained(
    sizes: &[(&str, usize)],
) -> (Vec<tempfile::TempDir>, Arc<DrainedTier>, Front, Vec<Bytes>) {
    let (d1, writer) = front(keyed(Ok(Some(key(1)))), None);
    let tier = Arc::new(DrainedTier::default());
    let mut bodies = Vec::new();
    for (i, (name, len)) in sizes.iter().enumerate() {
        let body = data(*len, 100 + i as u64);
        put(&writer, name, &body).await.expect("put");
        tier.drain(&writer, name).await;
        bodies.push(body);
    }
    let (d2, reader) = front(
        keyed(Ok(Some(key(1)))),
        Some(Arc::clone(&tier) as Arc<dyn Tier>),
    );
    (vec![d1, d2], tier, reader, bodies)
}

#[tokio::test]
async fn objects_read_from_the_tier_after_eviction_decrypt_whole_and_in_ranges() {
    let sizes: Vec<(String, usize)> = SIZES.iter().map(|&l| (format!("obj-{l}"), l)).collect();
    let named: Vec<(&str, usize)> = sizes.iter().map(|(n, l)| (n.as_str(), *l)).collect();
    let (_d, tier, reader, bodies) = drained(&named).await;
    for ((name, len), body) in named.iter().zip(&bodies) {
        assert!(
            reader
                .catalog()
                .get_object(T, B, name)
                .expect("catalog")
                .is_none()
        );
        let (got, out) = get(&reader, name, None).await.expect("get");
        assert_eq!(&got, body, "{name}");
        assert_eq!(out.content_length, Some(*len as i64));
        assert!(!out.metadata.unwrap_or_default().contains_key(ENTRY));
        assert_eq!(
            head(&reader, name).await.expect("head").content_length,
            Some(*len as i64)
        );
        if *len == 0 {
            continue;
        }
        for r in ranges(*len as u64) {
            let (got, _) = get(&reader, name, Some(&r)).await.expect("range");
            let want = dto::Range::parse(&r)
                .expect("range")
                .check(*len as u64)
                .expect("in");
            #[allow(clippy::cast_possible_truncation)]
            let want_bytes = body.slice(want.start as usize..want.end as usize);
            assert_eq!(got, want_bytes, "{name} {r}");
        }
    }
    let mut want: Vec<(String, i64)> = named
        .iter()
        .map(|(n, l)| ((*n).to_owned(), *l as i64))
        .collect();
    want.sort();
    assert_eq!(
        list(&reader).await,
        want,
        "tier-only objects listed at plaintext length"
    );
    drop(tier);
}

/// Every read of a tampered object fails; none returns a byte that differs from the
/// plaintext.
async fn refused(reader: &Front, name: &str, body: &Bytes, what: &str) {
    let mut reads = vec![None];
    reads.extend(ranges(body.len() as u64).into_iter().map(Some));
    let mut failures = 0;
    for r in &reads {
        match get(reader, name, r.as_deref()).await {
            Err(e) => {
                failures += 1;
                let s3 = crate::error::to_s3(e);
                let msg = s3.message().unwrap_or_default().to_owned();
                // A truncated body looks shorter: a range past its new end is refused as such.
                let past_end = r.is_some() && msg.contains("range is not satisfiable");
                assert!(
                    msg.contains("does not authenticate")
                        || msg.contains("does not have the length")
                        || msg.contains("not encrypted")
                        || past_end,
                    "{what}: {msg}"
                );
            }
            Ok((got, _)) => {
                let want = match r {
                    None => 0..body.len() as u64,
                    Some(r) => dto::Range::parse(r)
                        .expect("r")
                        .check(body.len() as u64)
                        .expect("in"),
                };
                #[allow(clippy::cast_possible_truncation)]
                let want = body.slice(want.start as usize..want.end as usize);
                assert_eq!(got, want, "{what}: a read returned wrong bytes");
            }
        }
    }
    assert!(failures > 0, "{what}: no read failed");
    // The whole object never reads.
    assert!(
        get(reader, name, None).await.is_err(),
        "{what}: the whole object read"
    );
}

#[tokio::test]
async fn every_tampering_of_the_stored_ciphertext_fails_the_read() {
    let len = 200usize;
    let names = [
        "flip-header",
        "flip-segment",
        "flip-tag",
        "cut-mid",
        "cut-segment",
        "swap",
        "extend",
        "moved",
        "entry",
    ];
    let mut sized: Vec<(&str, usize)> = names.iter().map(|n| (*n, len)).collect();
    sized.push(("clean", len));
    let (_d, tier, reader, bodies) = drained(&sized).await;
    let stride = SEGMENT as usize + 16;
    let h = sluice_crypt::HEADER_LEN;
    tier.tamper("flip-header", |b| b[40] ^= 1);
    tier.tamper("flip-segment", |b| b[h + stride + 3] ^= 0x80);
    tier.tamper("flip-tag", |b| *b.last_mut().expect("byte") ^= 1);
    tier.tamper("cut-mid", |b| b.truncate(b.len() - 5));
    // The whole last segment (200 = 12×16 + 8: a last segment of 8 + 16 bytes).
    tier.tamper("cut-segment", |b| b.truncate(b.len() - 24));
    tier.tamper("swap", |b| {
        let (x, y) = (h + stride, h + 2 * stride);
        let first: Vec<u8> = b[x..x + stride].to_vec();
        b.copy_within(y..y + stride, x);
        b[y..y + stride].copy_from_slice(&first);
    });
    tier.tamper("extend", |b| b.extend_from_slice(&[0; 32]));
    // Another object's ciphertext and entry, copied under this key.
    let (src_rec, src_body) = tier.object("entry").expect("o");
    tier.lock()
        .insert("moved".into(), (src_rec.clone(), src_body.clone()));
    // Its entry rewritten (another generation).
    {
        let mut all = tier.lock();
        let (rec, _) = all.get_mut("entry").expect("o");
        let e = crate::confidential::Entry::of(&rec.metadata).expect("entry");
        let changed = crate::confidential::Entry {
            generation: e.generation ^ 1,
            ..e
        };
        rec.metadata.insert(ENTRY.into(), changed.encode());
    }
    for (name, body) in names.iter().zip(&bodies) {
        refused(&reader, name, body, name).await;
    }
    // Its entry removed: not encrypted, refused rather than served as it is.
    {
        let mut all = tier.lock();
        all.get_mut("moved").expect("o").0.metadata.remove(ENTRY);
    }
    let e = get(&reader, "moved", None).await.expect_err("refused");
    assert!(
        crate::error::to_s3(e)
            .message()
            .unwrap_or_default()
            .contains("not encrypted")
    );
    // The same object under another tenant key.
    let (_d3, stranger) = front(
        keyed(Ok(Some(key(2)))),
        Some(Arc::clone(&tier) as Arc<dyn Tier>),
    );
    let e = get(&stranger, "clean", None)
        .await
        .expect_err("another key");
    assert!(
        crate::error::to_s3(e)
            .message()
            .unwrap_or_default()
            .contains("another tenant key")
    );
    assert_eq!(
        get(&reader, "clean", None).await.expect("clean").0,
        bodies[names.len()]
    );
}
