use std::collections::BTreeMap;

use md5::{Digest, Md5};
use object_store::memory::InMemory;
use sluice_meta::{Catalog, ObjectRecord};
use sluice_store::Crc;

use super::transfer::{check_crc, hex};
use super::*;
use crate::journal::JournalHook;
use crate::upstream::memory::InMemoryUpstream;

/// A drain over a fresh catalog (with the journal hook), an in-memory blob store and an
/// in-memory upstream.
fn drain(dir: &std::path::Path) -> Drain {
    let sums = Arc::new(sluice_store::Checksums::default());
    let wake = Arc::new(Notify::new());
    let hook = JournalHook::new(BTreeMap::new(), sums, Arc::clone(&wake));
    let (catalog, _) = Catalog::open(&dir.join("meta.redb")).expect("open");
    let catalog = Arc::new(catalog.with_hook(Arc::new(hook)));
    catalog.ledger().set_quota("t", 1 << 20);
    catalog.create_bucket("t", "b", 0).expect("bucket");
    let journal = Arc::new(Journal::open(catalog).expect("journal"));
    let blobs = Arc::new(BlobStore::new(Arc::new(InMemory::new()), 1 << 20, 1 << 20));
    let upstream = Arc::new(InMemoryUpstream::new());
    Drain::new(journal, blobs, upstream, wake, &[])
}

fn put_inline(d: &Drain, key: &str, body: &[u8]) {
    let rec = ObjectRecord {
        size: body.len() as u64,
        etag: hex(&Md5::digest(body)),
        inline: true,
        ..ObjectRecord::default()
    };
    let catalog = d.journal.catalog();
    let r = catalog.ledger().reserve("t", rec.size).expect("reserve");
    catalog
        .put_object("t", "b", key, &rec, Some(body), r)
        .expect("put");
}

/// The live put op on `key` and its record.
fn op_on(d: &Drain, key: &str) -> (Op, ObjectRecord, Option<Crc>) {
    let op = d
        .journal
        .pending()
        .expect("pending")
        .into_iter()
        .rfind(|o| o.key == key)
        .expect("an op");
    let OpKind::Put { object, crc } = op.kind.clone() else {
        panic!("a put")
    };
    (op, object, crc)
}

#[tokio::test]
async fn an_inline_object_is_read_back_from_the_catalog_with_the_checksum_of_its_bytes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = drain(dir.path());
    let body: Vec<u8> = (0..5000u32).map(|i| (i % 253) as u8).collect();
    put_inline(&d, "k", &body);
    let (op, object, crc) = op_on(&d, "k");
    assert!(object.inline);
    // The journal took the checksum of the committed bytes (there is no blob to take it from).
    assert_eq!(crc, Some(Crc::of(&body)));
    let (chunks, got, md5) = d
        .read_local(&op, &object, 0..object.size)
        .await
        .expect("read")
        .expect("live");
    assert_eq!(chunks.concat(), body);
    check_crc(&op, crc, got).expect("the read-back checksum matches");
    assert_eq!(hex(&md5), object.etag);
    let (part, _, _) = d
        .read_local(&op, &object, 100..4100)
        .await
        .expect("read")
        .expect("live");
    assert_eq!(part.concat(), &body[100..4100]);
}

#[tokio::test]
async fn a_superseded_inline_op_is_skipped_and_a_lost_inline_body_is_an_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = drain(dir.path());
    put_inline(&d, "k", b"first");
    let (first, first_object, _) = op_on(&d, "k");
    put_inline(&d, "k", b"second");
    // The overwrite superseded the first op: its successor carries the key on.
    assert!(
        d.read_local(&first, &first_object, 0..5)
            .await
            .expect("read")
            .is_none()
    );
    // The live op's object vanishing without a client's delete (nothing here does that but
    // eviction of a durable copy) is a local loss: an error, never an empty upload.
    let (live, object, _) = op_on(&d, "k");
    let catalog = d.journal.catalog();
    assert!(catalog.evict_object("t", "b", "k", &object).expect("evict"));
    let err = d
        .read_local(&live, &object, 0..object.size)
        .await
        .expect_err("lost");
    assert!(matches!(err, DrainError::Local { .. }), "{err}");
}

/// A refusal stayed on status only until a neighbour's upload, sent before the quota ran out,
/// completed: `sluice_agent_upstream_refused` read 0 while the refused upload waited for its
/// retry (seen in e2e `test_an_upstream_refusal_is_reported_and_nothing_is_dropped`).
#[test]
fn only_a_transfer_begun_after_a_failure_clears_it() {
    let tenant = sluice_config::Tenant {
        id: "t".into(),
        access_key: "AKT".into(),
        secret_key: "secret".into(),
        capacity: u64::MAX,
        max_objects: u64::MAX,
        max_buckets: 10,
        qos: sluice_config::Qos {
            reservation: 0.0,
            weight: 1.0,
            limit: None,
        },
        local: sluice_config::LocalSpec {
            local_capacity: 1 << 30,
            drain_rate: None,
            interval: None,
            retention: sluice_config::Retention::Checkpoints(2),
            commit_markers: Vec::new(),
            local_qos: sluice_config::Qos::default(),
        },
    };
    let t0 = Instant::now();
    let mut t = TenantDrain::new(&tenant, t0);
    let refused = ErrorInfo {
        message: "QuotaExceeded (403)".into(),
        permanent: true,
        at_ms: 0,
        key: "b/k9".into(),
    };
    let (retry_in, changed) = t.failed(t0 + Duration::from_secs(1), 1.0, refused.clone());
    assert!(changed);
    assert_eq!(retry_in, Duration::from_millis(200));
    // A neighbour begun before the refusal completes: the refusal stands, and so does its
    // backoff.
    t.succeeded(t0);
    assert!(t.last_error.as_ref().is_some_and(|e| e.permanent));
    assert!(t.backoff_until.is_some());
    assert_eq!(t.drained_objects_total, 1);
    // The same refusal again is no news; the backoff grows.
    let (again, changed) = t.failed(t0 + Duration::from_secs(2), 1.0, refused);
    assert!(!changed);
    assert_eq!(again, Duration::from_millis(400));
    // A transfer begun after it succeeds: the tenant drains again.
    t.succeeded(t0 + Duration::from_secs(3));
    assert!(t.last_error.is_none() && t.backoff_until.is_none() && t.failures == 0);
    assert_eq!(t.drained_objects_total, 2);
}
