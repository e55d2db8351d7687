//! Inline objects' checksums at the front (issue #30): kept with the record at write, checked
//! on every read that uses the body, and what a PutObject answers. A byte flipped inside the
//! catalog's file is not reachable from an S3 client, so a record whose body disagrees with
//! its checksums is committed through the catalog directly.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::memory::InMemory;
use s3s::dto::{self, StreamingBlob};
use sluice_meta::{Catalog, ObjectRecord};

use super::super::{Front, FrontConfig};
use crate::blob::integrity::{self, is_corrupt};
use crate::blob::{BlobStore, DEFAULT_GRAIN};
use crate::checksum::{Algorithm, Digest, Expected};
use crate::error::ApiError;

const T: &str = "tenant";
const B: &str = "bkt";

fn front() -> (tempfile::TempDir, Front) {
    let dir = tempfile::tempdir().expect("tempdir");
    let (catalog, _) = Catalog::open(&dir.path().join("meta.redb")).expect("catalog");
    catalog.ledger().set_quota(T, 1 << 30);
    catalog.create_bucket(T, B, 0).expect("bucket");
    let blobs = BlobStore::new(Arc::new(InMemory::new()), DEFAULT_GRAIN, DEFAULT_GRAIN);
    let config = FrontConfig {
        region: "us-east-1".into(),
        max_object_size: 1 << 30,
    };
    (dir, Front::new(Arc::new(catalog), Arc::new(blobs), config))
}

fn put_input(key: &str, body: &Bytes) -> dto::PutObjectInput {
    dto::PutObjectInput {
        bucket: B.into(),
        key: key.into(),
        body: Some(StreamingBlob::wrap(futures::stream::iter([Ok::<
            _,
            std::io::Error,
        >(
            body.clone()
        )]))),
        content_length: Some(body.len() as i64),
        ..Default::default()
    }
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
        .expect("read");
    Ok(chunks.concat().into())
}

async fn head(f: &Front, key: &str, mode: bool) -> Result<dto::HeadObjectOutput, ApiError> {
    let input = dto::HeadObjectInput {
        bucket: B.into(),
        key: key.into(),
        checksum_mode: mode.then(|| dto::ChecksumMode::from_static(dto::ChecksumMode::ENABLED)),
        ..Default::default()
    };
    f.head_object_op(T, input).await
}

async fn copy(f: &Front, from: &str, to: &str) -> Result<dto::CopyObjectOutput, ApiError> {
    let input = dto::CopyObjectInput::builder()
        .bucket(B.into())
        .key(to.into())
        .copy_source(dto::CopySource::Bucket {
            bucket: B.into(),
            key: from.into(),
            version_id: None,
        })
        .build()
        .expect("input");
    f.copy_object_op(T, input).await
}

/// Commits `rec` with `body` at `key` through the catalog, as a damaged store would hold it.
fn commit(f: &Front, key: &str, rec: &ObjectRecord, body: &[u8]) {
    let r = f
        .catalog()
        .ledger()
        .reserve(T, body.len() as u64)
        .expect("reserve");
    f.catalog()
        .put_object(T, B, key, rec, Some(body), r)
        .expect("commit");
}

fn counters(f: &Front) -> (u64, u64) {
    let m = f.metrics().tenant(T);
    (
        m.integrity_errors.load(Ordering::Relaxed),
        m.unverified_reads.load(Ordering::Relaxed),
    )
}

fn refused(r: Result<impl std::fmt::Debug, ApiError>) {
    match r {
        Err(ApiError::Backend(e)) if is_corrupt(&e) => {}
        other => panic!("expected an integrity failure, got {other:?}"),
    }
}

#[tokio::test]
async fn an_inline_put_keeps_its_crc_and_its_clients_checksum_with_the_record() {
    let (_d, f) = front();
    let body = Bytes::from_static(b"a small config file");
    let crc32 = Digest::of(Algorithm::Crc32, &body);
    f.put_object_op(T, put_input("k", &body), Expected::Header(crc32.clone()))
        .await
        .expect("put");
    let rec = f
        .catalog()
        .get_object(T, B, "k")
        .expect("get")
        .expect("present");
    let sums = rec.inline_checksums.as_deref().expect("inline checksums");
    assert_eq!(sums.values, integrity::of_body(&body).values);
    assert_eq!(sums.client, Some(crc32.stored()));
    // HEAD and GET with checksums answer the client's CRC32, not the CRC-64/NVME.
    let h = head(&f, "k", true).await.expect("head");
    assert_eq!(h.checksum_crc32, Some(crc32.value.clone()));
    assert_eq!(h.checksum_crc64nvme, None);
    // A copy stays inline with the same checksums.
    copy(&f, "k", "c").await.expect("copy");
    let c = f
        .catalog()
        .get_object(T, B, "c")
        .expect("get")
        .expect("present");
    assert!(c.inline);
    assert_eq!(c.inline_checksums, rec.inline_checksums);
    assert_eq!(get(&f, "c").await.expect("get copy"), body);
    assert_eq!(counters(&f), (0, 0));
}

#[tokio::test]
async fn an_inline_body_that_disagrees_with_its_crc_is_refused_on_every_read() {
    let (_d, f) = front();
    let body = b"hello, inline";
    let mut rotten = body.to_vec();
    rotten[3] ^= 0x20;
    let rec = ObjectRecord {
        size: body.len() as u64,
        etag: "e".into(),
        inline: true,
        inline_checksums: Some(Box::new(integrity::of_body(body))),
        ..ObjectRecord::default()
    };
    commit(&f, "k", &rec, &rotten);
    refused(get(&f, "k").await);
    refused(head(&f, "k", true).await);
    refused(copy(&f, "k", "c").await);
    assert!(f.catalog().get_object(T, B, "c").expect("get").is_none());
    assert_eq!(counters(&f), (3, 0));
    // A HEAD without checksums reads no body: it answers from the record alone.
    head(&f, "k", false).await.expect("plain head");
    // The same bytes under their true checksums read back.
    let good = ObjectRecord {
        inline_checksums: Some(Box::new(integrity::of_body(&rotten))),
        ..rec
    };
    commit(&f, "k", &good, &rotten);
    assert_eq!(get(&f, "k").await.expect("get"), &rotten[..]);
}

#[tokio::test]
async fn an_inline_record_from_before_its_crc_is_served_unverified_and_counted() {
    let (_d, f) = front();
    let body = b"written by older code";
    let rec = ObjectRecord {
        size: body.len() as u64,
        etag: "e".into(),
        inline: true,
        ..ObjectRecord::default()
    };
    commit(&f, "old", &rec, body);
    assert_eq!(get(&f, "old").await.expect("get"), &body[..]);
    assert_eq!(counters(&f), (0, 1));
    // Its stored checksum is the CRC-64/NVME of its bytes, as before.
    let h = head(&f, "old", true).await.expect("head");
    assert_eq!(
        h.checksum_crc64nvme,
        Some(Digest::of(Algorithm::Crc64Nvme, body).value)
    );
}

#[tokio::test]
async fn a_put_without_a_client_checksum_answers_its_crc64nvme_as_s3_does() {
    let (_d, f) = front();
    // Inline, in one blob, and in several chunks of a blob: the combined CRC is the body's.
    for len in [100usize, 300_000, 2 * 1024 * 1024 + 5] {
        let body: Bytes = (0..len)
            .map(|i| (i % 253) as u8)
            .collect::<Vec<u8>>()
            .into();
        let out = f
            .put_object_op(T, put_input("k", &body), Expected::None)
            .await
            .expect("put");
        assert_eq!(
            out.checksum_crc64nvme,
            Some(Digest::of(Algorithm::Crc64Nvme, &body).value),
            "{len}"
        );
        assert_eq!(
            out.checksum_type.as_ref().map(dto::ChecksumType::as_str),
            Some(dto::ChecksumType::FULL_OBJECT)
        );
        assert_eq!(out.checksum_crc32, None);
    }
    // With a client checksum, that one alone is answered.
    let body = Bytes::from_static(b"x");
    let sha = Digest::of(Algorithm::Sha256, &body);
    let out = f
        .put_object_op(T, put_input("s", &body), Expected::Header(sha.clone()))
        .await
        .expect("put");
    assert_eq!(
        (out.checksum_sha256, out.checksum_crc64nvme),
        (Some(sha.value), None)
    );
}
