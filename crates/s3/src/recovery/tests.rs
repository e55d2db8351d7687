//! The record format: names, round trips, and what a reader refuses.

use std::collections::BTreeMap;

use sluice_meta::{ObjectRecord, Segment};

use super::*;

fn blob_object() -> ObjectRecord {
    ObjectRecord {
        size: 30,
        etag: "abc-2".into(),
        last_modified_ms: 1_700_000_000_000,
        content_type: Some("application/x-test".into()),
        headers: BTreeMap::from([("cache-control".into(), "no-cache".into())]),
        metadata: BTreeMap::from([("owner".into(), "me".into())]),
        segments: vec![
            Segment {
                blob: "b/aa/one".into(),
                size: 10,
                checksums: None,
            },
            Segment {
                blob: "b/bb/two".into(),
                size: 20,
                checksums: Some(sluice_meta::SegmentChecksums {
                    algorithm: sluice_meta::ChunkAlgorithm::Crc64nvme,
                    chunk_size: 16,
                    values: vec![0x0123_4567_89ab_cdef, 7],
                    client: None,
                }),
            },
        ],
        inline: false,
        inline_checksums: None,
        parts: 2,
        version: 1_700_000_000_000_123,
    }
}

#[test]
fn a_blob_objects_record_round_trips_to_the_same_catalog_record() {
    let rec = blob_object();
    let r = ObjectRecovery::new("t", "b", "dir/k", &rec, None);
    let back = ObjectRecovery::from_json(&r.to_json()).expect("parse");
    assert_eq!(back, r);
    assert_eq!(back.to_object(), rec);
    assert_eq!(back.body().expect("body"), None);
    assert_eq!(
        r.name(),
        format!("b/rec/{}/{:020}.json", key_hash("dir/k"), rec.version)
    );
}

#[test]
fn an_inline_objects_record_carries_its_body() {
    let body = b"hello inline".to_vec();
    let rec = ObjectRecord {
        size: body.len() as u64,
        inline: true,
        segments: Vec::new(),
        parts: 0,
        ..blob_object()
    };
    let r = ObjectRecovery::new("t", "b", "k", &rec, Some(&body));
    let back = ObjectRecovery::from_json(&r.to_json()).expect("parse");
    assert_eq!(back.body().expect("body"), Some(body));
    assert_eq!(back.to_object(), rec);
}

#[test]
fn a_reader_refuses_another_format_and_a_record_whose_body_does_not_add_up() {
    let r = ObjectRecovery::new("t", "b", "k", &blob_object(), None);
    let mut other = r.clone();
    other.format = "sluice.recovery/2".into();
    assert!(matches!(
        ObjectRecovery::from_json(&other.to_json()),
        Err(RecordError::Format(_))
    ));
    let mut short = r;
    short.size += 1;
    assert!(matches!(
        ObjectRecovery::from_json(&short.to_json()),
        Err(RecordError::Inconsistent(_))
    ));
}

#[test]
fn names_tell_blobs_from_records() {
    let hash = key_hash("k");
    assert_eq!(Name::parse("b/ab/0123"), Name::Blob);
    assert_eq!(
        Name::parse("b/rec/bucket.json"),
        Name::Bucket { bucket: "b" }
    );
    assert_eq!(
        Name::parse(&object_record_name("b", "k", 42)),
        Name::Object {
            bucket: "b",
            key_hash: &hash,
            version: 42
        }
    );
    assert_eq!(Name::parse("b/rec/short/1.json"), Name::Unknown);
    // Versions sort as numbers do, so a listing of a key's records is in version order.
    assert!(object_record_name("b", "k", 9) < object_record_name("b", "k", 10));
}

#[test]
fn a_blob_name_carries_its_writers_run() {
    let blobs = crate::BlobStore::new(
        std::sync::Arc::new(object_store::memory::InMemory::new()),
        1 << 20,
        1 << 20,
    );
    assert_eq!(crate::reconcile::writer_of(&blobs.blob_name("b")), None);
    blobs.set_writer("00112233aabbccdd".into());
    let name = blobs.blob_name("b");
    assert_eq!(crate::reconcile::writer_of(&name), Some("00112233aabbccdd"));
    assert_eq!(Name::parse(&name), Name::Blob);
}

#[test]
fn segment_checksums_are_kept_in_the_documented_form_and_checked_against_the_size() {
    let rec = blob_object();
    let json = ObjectRecovery::new("t", "b", "k", &rec, None).to_json();
    let value: serde_json::Value = serde_json::from_slice(&json).expect("json");
    let sums = &value["segments"][1]["checksums"];
    assert_eq!(sums["algorithm"], "crc64nvme");
    assert_eq!(sums["chunk_size"], 16);
    assert_eq!(sums["values"][0], "0123456789abcdef");
    assert_eq!(sums["values"][1], "0000000000000007");
    assert!(value["segments"][0].get("checksums").is_none());

    // 20 bytes in 16-byte chunks is two values: one value is a record that lies.
    let mut short = value.clone();
    short["segments"][1]["checksums"]["values"] = serde_json::json!(["0000000000000007"]);
    let bytes = serde_json::to_vec(&short).expect("json");
    assert!(matches!(
        ObjectRecovery::from_json(&bytes),
        Err(RecordError::Inconsistent(_))
    ));
    // An algorithm this code cannot verify is refused, never read as unverified.
    let mut other = value;
    other["segments"][1]["checksums"]["algorithm"] = serde_json::json!("xxh3");
    let bytes = serde_json::to_vec(&other).expect("json");
    assert!(matches!(
        ObjectRecovery::from_json(&bytes),
        Err(RecordError::Json(_))
    ));
}

#[test]
fn an_inline_bodys_checksums_are_kept_in_its_record_and_checked_against_the_body() {
    let body = b"hello inline".to_vec();
    let mut sums = crate::blob::integrity::of_body(&body);
    sums.client = Some(sluice_meta::ClientChecksum {
        algorithm: "CRC32".into(),
        value: "AAAAAA==".into(),
    });
    let rec = ObjectRecord {
        size: body.len() as u64,
        inline: true,
        inline_checksums: Some(Box::new(sums)),
        segments: Vec::new(),
        parts: 0,
        ..blob_object()
    };
    let r = ObjectRecovery::new("t", "b", "k", &rec, Some(&body));
    let json = r.to_json();
    let back = ObjectRecovery::from_json(&json).expect("parse");
    // A rebuild gets the record back with its checksums, so the body stays verified.
    assert_eq!(back.to_object(), rec);
    let value: serde_json::Value = serde_json::from_slice(&json).expect("json");
    assert_eq!(value["inline_checksums"]["algorithm"], "crc64nvme");
    assert_eq!(value["inline_checksums"]["client"]["algorithm"], "CRC32");
    // A record from before inline checksums existed reads as one without them.
    let mut old = value.clone();
    old.as_object_mut()
        .expect("object")
        .remove("inline_checksums");
    let old = ObjectRecovery::from_json(&serde_json::to_vec(&old).expect("json")).expect("old");
    assert_eq!(old.to_object().inline_checksums, None);
    // Checksums that do not cover the body, or with no inline body at all, are refused.
    let mut two = value.clone();
    two["inline_checksums"]["values"] = serde_json::json!(["0000000000000001", "0000000000000002"]);
    let mut blob = value;
    blob.as_object_mut().expect("object").remove("inline");
    blob["segments"] = serde_json::json!([{"blob": "b/aa/x", "size": body.len()}]);
    for bad in [two, blob] {
        assert!(matches!(
            ObjectRecovery::from_json(&serde_json::to_vec(&bad).expect("json")),
            Err(RecordError::Inconsistent(_))
        ));
    }
}
