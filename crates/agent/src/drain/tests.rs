use std::collections::BTreeMap;

use object_store::memory::InMemory;
use sluice_meta::{Catalog, ObjectRecord};

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
