//! The catalog conformance suite: what every [`Engine`](crate::Engine) must do, as functions
//! over a [`Harness`] that opens the engine under test. [`catalog_conformance!`] turns them
//! into `#[test]`s; `sluice-meta` runs them on redb, `sluice-catalog-pg` on PostgreSQL.
//!
//! Each test starts from an empty catalog. Tenants `a` and `b` have a 1 GiB quota.

use std::collections::HashSet;
use std::time::Duration;

use crate::{
    Catalog, Entry, EscrowGrant, ListPage, ListQuery, MIN_PART_SIZE, MetaError, ObjectRecord,
    PartRecord, PartSpec, Precondition, Result, Segment, UploadRecord,
};

mod tenants;
pub use tenants::*;

/// Opens the engine under test on one store (a fresh one per test).
pub trait Harness {
    /// Opens the store, or opens it again after the previous handle was dropped (the
    /// ledger's usage and object counts recovered from it, quotas unset).
    fn open(&self) -> Catalog;
}

/// Every conformance test, as `#[test]`s over the harness `$harness` evaluates to
/// (`Option<impl Harness>`: `None` skips, its reason already printed).
#[macro_export]
macro_rules! catalog_conformance {
    ($harness:expr) => {
        $crate::catalog_conformance!(@each $harness; same_bucket_name_in_two_tenants_is_two_buckets,
            usage_follows_puts_overwrites_and_deletes,
            usage_survives_reopen_and_is_recomputed,
            listing_rolls_up_prefixes_and_pages,
            multipart_complete_checks_parts_and_frees_unused,
            delete_bucket_refuses_objects_and_aborts_uploads,
            an_inline_object_keeps_its_body_in_the_catalog_and_no_blob,
            overwrites_between_inline_and_blob_objects_hand_back_only_real_blobs,
            an_inline_object_is_evicted_like_any_other,
            a_record_and_body_that_disagree_are_refused_and_change_nothing,
            an_inline_bodys_checksums_are_kept_with_its_record,
            the_object_count_holds_objects_and_uploads_to_the_tenants_maximum,
            a_tenant_owns_at_most_its_maximum_of_buckets,
            create_only_puts_racing_for_one_key_have_exactly_one_winner,
            compare_and_swap_replaces_only_the_named_etag,
            a_failed_condition_leaves_a_multipart_upload_to_complete_later,
            a_completion_with_its_own_metadata_records_it_in_the_same_transaction,
            every_commit_of_a_key_gets_a_greater_version,
            a_restore_keeps_the_greater_version_and_is_idempotent,
            a_lease_has_one_holder_until_released_or_lapsed,
            the_lease_holder_is_the_live_holder_as_it_named_itself,
            an_agents_escrow_holds_quota_others_cannot_take,
            an_upload_from_the_holder_spends_its_escrow_exactly,
            a_lapsed_escrow_returns_and_a_live_one_survives_reopen,
            tenants_are_seeded_changed_online_with_several_keys_and_audited,
            a_file_contradicting_a_tenant_changed_online_is_reported_and_the_catalog_kept,
            an_access_key_belongs_to_one_tenant,
            a_tenants_node_local_settings_are_held_changed_cleared_and_audited);
    };
    (@each $harness:expr; $($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                if let Some(h) = $harness {
                    $crate::conformance::$name(&h);
                }
            }
        )*
    };
}

fn open(h: &dyn Harness) -> Catalog {
    let c = h.open();
    c.ledger().set_quota("a", 1 << 30);
    c.ledger().set_quota("b", 1 << 30);
    c
}

pub fn obj(size: u64, blob: &str) -> ObjectRecord {
    ObjectRecord {
        size,
        etag: "d41d8cd98f00b204e9800998ecf8427e".into(),
        last_modified_ms: 1,
        segments: vec![Segment {
            blob: blob.into(),
            size,
            checksums: None,
        }],
        ..ObjectRecord::default()
    }
}

pub fn put(c: &Catalog, tenant: &str, key: &str, size: u64) -> Option<ObjectRecord> {
    let r = c.ledger().reserve(tenant, size).expect("reserve");
    c.put_object(tenant, "bkt", key, &obj(size, key), None, r)
        .expect("put")
        .1
}

pub fn names(page: &ListPage) -> Vec<&str> {
    page.entries.iter().map(Entry::name).collect()
}

pub fn inline_obj(body: &[u8]) -> ObjectRecord {
    ObjectRecord {
        size: body.len() as u64,
        etag: "00".into(),
        last_modified_ms: 1,
        inline: true,
        ..ObjectRecord::default()
    }
}

pub fn put_inline(c: &Catalog, tenant: &str, key: &str, body: &[u8]) -> Option<ObjectRecord> {
    let r = c
        .ledger()
        .reserve(tenant, body.len() as u64)
        .expect("reserve");
    c.put_object(tenant, "bkt", key, &inline_obj(body), Some(body), r)
        .expect("put inline")
        .1
}

pub fn put_if(c: &Catalog, key: &str, rec: &ObjectRecord, cond: &Precondition) -> Result<()> {
    let r = c.ledger().reserve("a", rec.size).expect("reserve");
    c.put_object_if("a", "bkt", key, rec, None, r, cond)
        .map(drop)
}

pub fn same_bucket_name_in_two_tenants_is_two_buckets(h: &dyn Harness) {
    let c = open(h);
    c.create_bucket("a", "bkt", 1).expect("a");
    c.create_bucket("b", "bkt", 1).expect("b");
    put(&c, "a", "k", 10);
    assert!(c.get_object("b", "bkt", "k").expect("get").is_none());
    assert_eq!(c.list_buckets("b").expect("list").len(), 1);
    assert!(matches!(
        c.create_bucket("a", "bkt", 2),
        Err(MetaError::BucketExists)
    ));
}

pub fn usage_follows_puts_overwrites_and_deletes(h: &dyn Harness) {
    let c = open(h);
    c.create_bucket("a", "bkt", 1).expect("create");
    assert!(put(&c, "a", "k", 100).is_none());
    let replaced = put(&c, "a", "k", 40).expect("replaced");
    assert_eq!(replaced.size, 100);
    put(&c, "a", "j", 5);
    assert_eq!(c.ledger().usage("a").map(|u| u.0), Some(45));
    c.delete_object("a", "bkt", "k").expect("delete");
    assert_eq!(c.ledger().usage("a").map(|u| u.0), Some(5));
    assert!(c.delete_object("a", "bkt", "k").expect("again").is_none());
}

pub fn usage_survives_reopen_and_is_recomputed(h: &dyn Harness) {
    {
        let c = h.open();
        c.ledger().set_quota("a", 1000);
        c.create_bucket("a", "bkt", 1).expect("create");
        put(&c, "a", "x", 300);
    }
    let c = h.open();
    assert_eq!(c.ledger().usage("a").map(|u| u.0), Some(300));
}

pub fn listing_rolls_up_prefixes_and_pages(h: &dyn Harness) {
    let c = open(h);
    c.create_bucket("a", "bkt", 1).expect("create");
    for k in ["a/1", "a/2", "b", "c/x/1", "c/y", "d"] {
        put(&c, "a", k, 1);
    }
    let q = ListQuery {
        prefix: "",
        delimiter: Some("/"),
        after: None,
        max: 1000,
    };
    let page = c.list_objects("a", "bkt", &q).expect("list");
    assert_eq!(names(&page), ["a/", "b", "c/", "d"]);
    assert!(!page.truncated);

    // Page through two at a time, resuming after the last name, prefixes included.
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let q = ListQuery {
            prefix: "",
            delimiter: Some("/"),
            after: after.as_deref(),
            max: 2,
        };
        let page = c.list_objects("a", "bkt", &q).expect("list");
        seen.extend(names(&page).into_iter().map(str::to_owned));
        if !page.truncated {
            break;
        }
        after = page.entries.last().map(|e| e.name().to_owned());
    }
    assert_eq!(seen, ["a/", "b", "c/", "d"]);

    let q = ListQuery {
        prefix: "c/",
        delimiter: Some("/"),
        after: None,
        max: 1000,
    };
    assert_eq!(
        names(&c.list_objects("a", "bkt", &q).expect("list")),
        ["c/x/", "c/y"]
    );
    let q = ListQuery {
        prefix: "a",
        delimiter: None,
        after: Some("a/1"),
        max: 1000,
    };
    assert_eq!(
        names(&c.list_objects("a", "bkt", &q).expect("list")),
        ["a/2"]
    );
}

pub fn multipart_complete_checks_parts_and_frees_unused(h: &dyn Harness) {
    let c = open(h);
    c.create_bucket("a", "bkt", 1).expect("create");
    let up = UploadRecord {
        key: "big".into(),
        ..UploadRecord::default()
    };
    c.create_upload("a", "bkt", "u1", &up)
        .expect("create upload");
    let etag = "0cc175b9c0f1b6a831c399e269772661"; // md5("a")
    for (n, size) in [(1u32, MIN_PART_SIZE), (2, 10), (3, 7)] {
        let r = c.ledger().reserve("a", size).expect("reserve");
        let part = PartRecord {
            blob: format!("p{n}"),
            size,
            etag: etag.into(),
            last_modified_ms: 1,
            checksums: None,
        };
        c.put_part("a", "bkt", "u1", "big", n, part, r)
            .expect("part");
    }
    assert_eq!(c.ledger().usage("a").map(|u| u.0), Some(MIN_PART_SIZE + 17));
    let spec = |n: u32| PartSpec {
        number: n,
        etag: format!("\"{etag}\""),
    };
    assert!(matches!(
        c.complete_upload("a", "bkt", "u1", "big", &[spec(2), spec(1)], 2),
        Err(MetaError::InvalidPartOrder)
    ));
    assert!(matches!(
        c.complete_upload("a", "bkt", "u1", "big", &[spec(2), spec(3)], 2),
        Err(MetaError::EntityTooSmall(2))
    ));
    assert!(matches!(
        c.complete_upload("a", "bkt", "u1", "other", &[spec(1)], 2),
        Err(MetaError::NoSuchUpload)
    ));
    let (o, replaced, unused) = c
        .complete_upload("a", "bkt", "u1", "big", &[spec(1), spec(3)], 2)
        .expect("complete");
    assert!(replaced.is_none());
    assert_eq!(unused, ["p2"]);
    assert_eq!(o.size, MIN_PART_SIZE + 7);
    assert!(o.etag.ends_with("-2"), "{}", o.etag);
    assert_eq!(c.ledger().usage("a").map(|u| u.0), Some(MIN_PART_SIZE + 7));
    assert!(matches!(
        c.get_upload("a", "bkt", "u1", "big"),
        Err(MetaError::NoSuchUpload)
    ));
    let refs = c.referenced_blobs().expect("refs");
    assert_eq!(refs["a"], HashSet::from(["p1".to_owned(), "p3".to_owned()]));
}

pub fn delete_bucket_refuses_objects_and_aborts_uploads(h: &dyn Harness) {
    let c = open(h);
    c.create_bucket("a", "bkt", 1).expect("create");
    put(&c, "a", "k", 3);
    assert!(matches!(
        c.delete_bucket("a", "bkt"),
        Err(MetaError::BucketNotEmpty)
    ));
    c.delete_object("a", "bkt", "k").expect("delete");
    c.create_upload(
        "a",
        "bkt",
        "u",
        &UploadRecord {
            key: "x".into(),
            ..UploadRecord::default()
        },
    )
    .expect("upload");
    let r = c.ledger().reserve("a", 9).expect("reserve");
    let part = PartRecord {
        blob: "p".into(),
        size: 9,
        etag: "00".into(),
        last_modified_ms: 0,
        checksums: None,
    };
    c.put_part("a", "bkt", "u", "x", 1, part, r).expect("part");
    assert_eq!(c.delete_bucket("a", "bkt").expect("delete bucket"), ["p"]);
    assert_eq!(c.ledger().usage("a").map(|u| u.0), Some(0));
    assert!(matches!(c.list_buckets("a").map(|b| b.len()), Ok(0)));
    assert!(matches!(
        c.get_object("a", "bkt", "k"),
        Err(MetaError::NoSuchBucket)
    ));
}

pub fn an_inline_object_keeps_its_body_in_the_catalog_and_no_blob(h: &dyn Harness) {
    let c = open(h);
    c.create_bucket("a", "bkt", 1).expect("create");
    put_inline(&c, "a", "small", b"hello");
    put(&c, "a", "large", 100);
    let (rec, body) = c
        .get_object_with_body("a", "bkt", "small")
        .expect("get")
        .expect("present");
    assert!(rec.inline && rec.segments.is_empty());
    assert_eq!(body.as_deref(), Some(&b"hello"[..]));
    assert_eq!(c.get_object("a", "bkt", "small").expect("get"), Some(rec));
    let (_, body) = c
        .get_object_with_body("a", "bkt", "large")
        .expect("get")
        .expect("present");
    assert_eq!(body, None, "a blob object has no inline body");
    // Inline bytes are usage like any other; the reservation is settled, not leaked.
    assert_eq!(c.ledger().usage("a"), Some((105, 0, 1 << 30)));
    // Reconciliation must neither expect a blob for it nor count its bytes as an orphan's.
    assert_eq!(
        c.referenced_blobs().expect("refs")["a"],
        HashSet::from(["large".to_owned()])
    );
    let q = ListQuery {
        max: 1000,
        ..ListQuery::default()
    };
    let page = c.list_objects("a", "bkt", &q).expect("list");
    let Entry::Object(name, listed) = &page.entries[1] else {
        panic!("an object")
    };
    assert_eq!(
        (name.as_str(), listed.size, listed.inline),
        ("small", 5, true)
    );
}

pub fn overwrites_between_inline_and_blob_objects_hand_back_only_real_blobs(h: &dyn Harness) {
    let c = open(h);
    c.create_bucket("a", "bkt", 1).expect("create");
    put(&c, "a", "k", 100);
    // blob → inline: the old blob is the caller's to delete.
    let old = put_inline(&c, "a", "k", b"abc").expect("replaced");
    assert_eq!(old.blobs().collect::<Vec<_>>(), ["k"]);
    assert_eq!(c.ledger().usage("a").map(|u| u.0), Some(3));
    // inline → blob: the replaced object names no blob, and its body is gone.
    let old = put(&c, "a", "k", 50).expect("replaced");
    assert!(old.inline);
    assert_eq!(old.blobs().count(), 0);
    let (_, body) = c
        .get_object_with_body("a", "bkt", "k")
        .expect("get")
        .expect("present");
    assert_eq!(body, None);
    assert_eq!(c.ledger().usage("a").map(|u| u.0), Some(50));
    // inline → inline, then delete.
    put_inline(&c, "a", "k", b"x");
    let old = put_inline(&c, "a", "k", b"yz").expect("replaced");
    assert_eq!((old.inline, old.size), (true, 1));
    let gone = c
        .delete_object("a", "bkt", "k")
        .expect("delete")
        .expect("old");
    assert!(gone.inline && gone.blobs().count() == 0);
    assert_eq!(c.ledger().usage("a").map(|u| u.0), Some(0));
    assert!(c.referenced_blobs().expect("refs").is_empty());
}

pub fn an_inline_object_is_evicted_like_any_other(h: &dyn Harness) {
    let c = open(h);
    c.create_bucket("a", "bkt", 1).expect("create");
    put_inline(&c, "a", "k", b"body");
    let rec = c
        .get_object("a", "bkt", "k")
        .expect("get")
        .expect("present");
    assert!(c.evict_object("a", "bkt", "k", &rec).expect("evict"));
    assert!(c.get_object("a", "bkt", "k").expect("get").is_none());
    assert_eq!(c.ledger().usage("a").map(|u| u.0), Some(0));
}

pub fn a_record_and_body_that_disagree_are_refused_and_change_nothing(h: &dyn Harness) {
    let c = open(h);
    c.create_bucket("a", "bkt", 1).expect("create");
    let cases: [(ObjectRecord, Option<&[u8]>); 4] = [
        (inline_obj(b"abc"), None),
        (obj(3, "blob"), Some(b"abc")),
        (inline_obj(b"abcd"), Some(b"abc")),
        (
            ObjectRecord {
                segments: obj(3, "blob").segments,
                ..inline_obj(b"abc")
            },
            Some(b"abc"),
        ),
    ];
    for (rec, body) in cases {
        let r = c.ledger().reserve("a", 3).expect("reserve");
        assert!(matches!(
            c.put_object("a", "bkt", "k", &rec, body, r),
            Err(MetaError::Inconsistent(_))
        ));
    }
    assert!(c.get_object("a", "bkt", "k").expect("get").is_none());
    assert_eq!(c.ledger().usage("a"), Some((0, 0, 1 << 30)));
}

/// Issue #30: an inline body's checksums live in its record, so every engine keeps them
/// through a put, a read, a listing and a restore; ones that do not cover the body are
/// refused before anything changes.
pub fn an_inline_bodys_checksums_are_kept_with_its_record(h: &dyn Harness) {
    let c = open(h);
    c.create_bucket("a", "bkt", 1).expect("create");
    let sums = crate::SegmentChecksums {
        algorithm: crate::ChunkAlgorithm::Crc64nvme,
        chunk_size: 1 << 20,
        values: vec![0xfeed_f00d_dead_beef],
        client: Some(crate::ClientChecksum {
            algorithm: "CRC32".into(),
            value: "NhCmhg==".into(),
        }),
    };
    let rec = ObjectRecord {
        inline_checksums: Some(Box::new(sums.clone())),
        ..inline_obj(b"hello")
    };
    let r = c.ledger().reserve("a", 5).expect("reserve");
    c.put_object("a", "bkt", "k", &rec, Some(b"hello"), r)
        .expect("put");
    let (got, body) = c
        .get_object_with_body("a", "bkt", "k")
        .expect("get")
        .expect("present");
    assert_eq!(got.inline_checksums.as_deref(), Some(&sums));
    assert_eq!(body.as_deref(), Some(&b"hello"[..]));
    let q = ListQuery {
        max: 10,
        ..ListQuery::default()
    };
    let page = c.list_objects("a", "bkt", &q).expect("list");
    assert!(matches!(
        page.entries.first(),
        Some(Entry::Object(_, listed)) if listed.inline_checksums.as_deref() == Some(&sums)
    ));
    assert!(
        c.restore_object_with_body("a", "bkt", "restored", &got, Some(b"hello"))
            .expect("restore")
    );
    let (restored, _) = c
        .get_object_with_body("a", "bkt", "restored")
        .expect("get")
        .expect("present");
    assert_eq!(restored.inline_checksums.as_deref(), Some(&sums));
    let short = ObjectRecord {
        inline_checksums: Some(Box::new(crate::SegmentChecksums {
            values: vec![1, 2],
            ..sums
        })),
        ..inline_obj(b"hello")
    };
    let r = c.ledger().reserve("a", 5).expect("reserve");
    assert!(matches!(
        c.put_object("a", "bkt", "bad", &short, Some(b"hello"), r),
        Err(MetaError::Inconsistent(_))
    ));
    assert!(c.get_object("a", "bkt", "bad").expect("get").is_none());
}

pub fn the_object_count_holds_objects_and_uploads_to_the_tenants_maximum(h: &dyn Harness) {
    let c = h.open();
    c.ledger().set_quota("a", 1 << 30);
    c.ledger().set_max_objects("a", 3);
    c.create_bucket("a", "bkt", 1).expect("create");
    put(&c, "a", "k1", 1);
    put(&c, "a", "k2", 1);
    let up = |key: &str| UploadRecord {
        key: key.into(),
        ..UploadRecord::default()
    };
    c.create_upload("a", "bkt", "u1", &up("big"))
        .expect("upload");
    assert_eq!(c.ledger().objects("a"), Some((3, 3)));
    let full = |r: Result<()>| matches!(r, Err(MetaError::TooManyObjects { max: 3 }));
    // A new key, a new upload: refused, nothing left behind; the reservation comes back.
    let r = c.ledger().reserve("a", 1).expect("reserve");
    assert!(full(
        c.put_object("a", "bkt", "k3", &obj(1, "k3"), None, r)
            .map(|_| ())
    ));
    assert!(c.get_object("a", "bkt", "k3").expect("get").is_none());
    assert!(full(c.create_upload("a", "bkt", "u2", &up("x"))));
    assert_eq!(c.ledger().usage("a").map(|u| (u.0, u.1)), Some((2, 0)));
    // An overwrite is not one more object.
    put(&c, "a", "k1", 5);
    // Aborting an upload or deleting an object makes room; each room is taken once.
    c.abort_upload("a", "bkt", "u1", "big").expect("abort");
    put(&c, "a", "k3", 1);
    assert!(full(c.create_upload("a", "bkt", "u2", &up("x"))));
    c.delete_object("a", "bkt", "k2").expect("delete");
    c.create_upload("a", "bkt", "u2", &up("k1"))
        .expect("upload");
    assert_eq!(c.ledger().objects("a"), Some((3, 3)));
    drop(c);
    // Recounted from the catalog at start.
    let c = h.open();
    c.ledger().set_quota("a", 1 << 30);
    c.ledger().set_max_objects("a", 3);
    assert_eq!(c.ledger().objects("a"), Some((3, 3)));
    // Completing an upload over an existing key: the upload becomes the object, one fewer.
    let etag = "0cc175b9c0f1b6a831c399e269772661";
    let r = c.ledger().reserve("a", 10).expect("reserve");
    let part = PartRecord {
        blob: "p1".into(),
        size: 10,
        etag: etag.into(),
        last_modified_ms: 1,
        checksums: None,
    };
    c.put_part("a", "bkt", "u2", "k1", 1, part, r)
        .expect("part");
    let spec = [PartSpec {
        number: 1,
        etag: format!("\"{etag}\""),
    }];
    let (_, replaced, _) = c
        .complete_upload("a", "bkt", "u2", "k1", &spec, 2)
        .expect("complete");
    assert!(replaced.is_some());
    assert_eq!(c.ledger().objects("a"), Some((2, 3)));
}

pub fn a_tenant_owns_at_most_its_maximum_of_buckets(h: &dyn Harness) {
    let c = open(h);
    c.ledger().set_max_buckets("a", 2);
    c.create_bucket("a", "one", 1).expect("one");
    c.create_bucket("a", "two", 1).expect("two");
    assert!(matches!(
        c.create_bucket("a", "three", 1),
        Err(MetaError::TooManyBuckets { max: 2 })
    ));
    // Another tenant's buckets do not count, nor does a name already owned (BucketExists).
    c.create_bucket("b", "three", 1).expect("b's");
    assert!(matches!(
        c.create_bucket("a", "two", 1),
        Err(MetaError::BucketExists)
    ));
    c.delete_bucket("a", "one").expect("delete");
    c.create_bucket("a", "three", 1).expect("room again");
    assert_eq!(c.list_buckets("a").expect("list").len(), 2);
}

pub fn create_only_puts_racing_for_one_key_have_exactly_one_winner(h: &dyn Harness) {
    let c = open(h);
    c.create_bucket("a", "bkt", 1).expect("create");
    let c = std::sync::Arc::new(c);
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(16));
    let threads: Vec<_> = (0..16)
        .map(|i| {
            let (c, barrier) = (c.clone(), barrier.clone());
            std::thread::spawn(move || {
                let rec = obj(10 + i, &format!("blob{i}"));
                barrier.wait();
                put_if(&c, "k", &rec, &Precondition::IfAbsent).map(|()| i)
            })
        })
        .collect();
    let results: Vec<_> = threads
        .into_iter()
        .map(|t| t.join().expect("thread"))
        .collect();
    let winners: Vec<u64> = results
        .iter()
        .filter_map(|r| r.as_ref().ok().copied())
        .collect();
    assert_eq!(winners.len(), 1, "{results:?}");
    assert!(
        results
            .iter()
            .filter(|r| r.is_err())
            .all(|r| matches!(r, Err(MetaError::PreconditionFailed)))
    );
    let stored = c.get_object("a", "bkt", "k").expect("get").expect("object");
    assert_eq!(stored.segments[0].blob, format!("blob{}", winners[0]));
    // Only the winner's bytes are used; every loser's reservation was released.
    assert_eq!(c.ledger().usage("a"), Some((10 + winners[0], 0, 1 << 30)));
}

pub fn compare_and_swap_replaces_only_the_named_etag(h: &dyn Harness) {
    let c = open(h);
    c.create_bucket("a", "bkt", 1).expect("create");
    let cas = |etag: &str| Precondition::IfEtag(etag.into());
    let first = obj(3, "one");
    assert!(matches!(
        put_if(&c, "k", &first, &cas(&first.etag)),
        Err(MetaError::PreconditionFailed)
    ));
    assert!(matches!(
        put_if(&c, "k", &first, &Precondition::IfPresent),
        Err(MetaError::PreconditionFailed)
    ));
    put_if(&c, "k", &first, &Precondition::IfAbsent).expect("create");
    let second = ObjectRecord {
        etag: "0123456789abcdef0123456789abcdef".into(),
        ..obj(5, "two")
    };
    assert!(matches!(
        put_if(&c, "k", &second, &cas(&second.etag)),
        Err(MetaError::PreconditionFailed)
    ));
    assert_eq!(c.ledger().usage("a").map(|u| (u.0, u.1)), Some((3, 0)));
    put_if(&c, "k", &second, &cas(&first.etag)).expect("swap");
    put_if(&c, "k", &second, &Precondition::IfPresent).expect("replace");
    let now = c.get_object("a", "bkt", "k").expect("get").expect("object");
    assert_eq!(now.etag, second.etag);
    assert_eq!(c.ledger().usage("a").map(|u| (u.0, u.1)), Some((5, 0)));
}

/// Starts upload `u` of `up` (at its key) in tenant `a`'s bucket `bkt`
/// and puts its part 1: 4 bytes in blob `p`, ETag `00`.
fn upload_of_one_part(c: &Catalog, up: &UploadRecord) {
    c.create_upload("a", "bkt", "u", up).expect("upload");
    let r = c.ledger().reserve("a", 4).expect("reserve");
    let part = PartRecord {
        blob: "p".into(),
        size: 4,
        etag: "00".into(),
        last_modified_ms: 0,
        checksums: None,
    };
    c.put_part("a", "bkt", "u", &up.key, 1, part, r)
        .expect("part");
}

/// Completes upload `u` of key `k` (started as [`upload_of_one_part`] starts it) at 9 ms.
fn complete_the_upload(
    c: &Catalog,
    parts: &[PartSpec],
    cond: &Precondition,
    metadata: Option<&std::collections::BTreeMap<String, String>>,
) -> Result<(ObjectRecord, Option<ObjectRecord>, Vec<String>)> {
    c.complete_upload_if("a", "bkt", "u", "k", parts, 9, cond, metadata)
}

pub fn a_failed_condition_leaves_a_multipart_upload_to_complete_later(h: &dyn Harness) {
    let c = open(h);
    c.create_bucket("a", "bkt", 1).expect("create");
    put(&c, "a", "k", 2);
    let up = UploadRecord {
        key: "k".into(),
        ..UploadRecord::default()
    };
    upload_of_one_part(&c, &up);
    let spec = [PartSpec {
        number: 1,
        etag: "\"00\"".into(),
    }];
    assert!(matches!(
        complete_the_upload(&c, &spec, &Precondition::IfAbsent, None),
        Err(MetaError::PreconditionFailed)
    ));
    assert!(c.get_upload("a", "bkt", "u", "k").is_ok());
    let etag = c
        .get_object("a", "bkt", "k")
        .expect("get")
        .expect("obj")
        .etag;
    let (done, replaced, _) =
        complete_the_upload(&c, &spec, &Precondition::IfEtag(etag), None).expect("complete");
    assert_eq!(done.size, 4);
    assert_eq!(replaced.map(|o| o.size), Some(2));
}

pub fn a_completion_with_its_own_metadata_records_it_in_the_same_transaction(h: &dyn Harness) {
    let c = open(h);
    c.create_bucket("a", "bkt", 1).expect("create");
    let up = UploadRecord {
        key: "k".into(),
        metadata: [("kept".to_owned(), "upload".to_owned())]
            .into_iter()
            .collect(),
        ..UploadRecord::default()
    };
    upload_of_one_part(&c, &up);
    let mine: std::collections::BTreeMap<String, String> =
        [("entry".to_owned(), "p=4*1".to_owned())]
            .into_iter()
            .collect();
    // A part listed with another ETag: refused, nothing changed, the upload stays.
    let wrong = [PartSpec {
        number: 1,
        etag: "01".into(),
    }];
    assert!(matches!(
        complete_the_upload(&c, &wrong, &Precondition::None, Some(&mine)),
        Err(MetaError::InvalidPart(1))
    ));
    assert!(c.get_object("a", "bkt", "k").expect("get").is_none());
    let spec = [PartSpec {
        number: 1,
        etag: "00".into(),
    }];
    let (done, _, _) =
        complete_the_upload(&c, &spec, &Precondition::None, Some(&mine)).expect("complete");
    assert_eq!(done.metadata, mine);
    let stored = c.get_object("a", "bkt", "k").expect("get").expect("obj");
    assert_eq!(stored.metadata, mine, "the upload's metadata replaced");
    assert_eq!(stored.size, 4);
}

pub fn every_commit_of_a_key_gets_a_greater_version(h: &dyn Harness) {
    let c = open(h);
    c.create_bucket("a", "bkt", 1).expect("create");
    let r = c.ledger().reserve("a", 3).expect("reserve");
    let (v1, _) = c
        .put_object("a", "bkt", "k", &obj(3, "one"), None, r)
        .expect("put");
    assert!(v1 > 0);
    let stored = c.get_object("a", "bkt", "k").expect("get").expect("object");
    assert_eq!(
        stored.version, v1,
        "the record carries the version returned"
    );
    // What the caller sets is ignored.
    let r = c.ledger().reserve("a", 3).expect("reserve");
    let stale = ObjectRecord {
        version: 1,
        ..obj(3, "two")
    };
    let (v2, replaced) = c.put_object("a", "bkt", "k", &stale, None, r).expect("put");
    assert!(v2 > v1);
    assert_eq!(replaced.map(|o| o.version), Some(v1));
    // A record restored from the future: the next commit still goes past it.
    let future = u64::MAX / 2;
    let rec = ObjectRecord {
        version: future,
        ..obj(3, "three")
    };
    assert!(c.restore_object("a", "bkt", "k", &rec).expect("restore"));
    put(&c, "a", "k", 3);
    let now = c.get_object("a", "bkt", "k").expect("get").expect("object");
    assert_eq!(now.version, future + 1);
    // A completed upload is versioned in its completing transaction too.
    upload_of_one_part(
        &c,
        &UploadRecord {
            key: "k".into(),
            ..UploadRecord::default()
        },
    );
    let spec = [PartSpec {
        number: 1,
        etag: "00".into(),
    }];
    let (done, _, _) = c
        .complete_upload("a", "bkt", "u", "k", &spec, 2)
        .expect("complete");
    assert_eq!(done.version, future + 2);
    let listed = c
        .list_objects(
            "a",
            "bkt",
            &ListQuery {
                max: 10,
                ..ListQuery::default()
            },
        )
        .expect("list");
    let Entry::Object(_, rec) = &listed.entries[0] else {
        panic!("an object")
    };
    assert_eq!(rec.version, future + 2);
}

pub fn a_restore_keeps_the_greater_version_and_is_idempotent(h: &dyn Harness) {
    let c = h.open();
    // No quota at all: a rebuild moves usage without checking it.
    c.ledger().set_quota("a", 0);
    c.ledger().set_max_objects("a", 0);
    c.ledger().set_max_buckets("a", 0);
    c.restore_bucket("a", "bkt", 7).expect("restore bucket");
    c.restore_bucket("a", "bkt", 9).expect("again");
    assert_eq!(c.list_buckets("a").expect("list"), [("bkt".to_owned(), 7)]);
    assert!(matches!(
        c.restore_object("a", "nope", "k", &obj(1, "x")),
        Err(MetaError::NoSuchBucket)
    ));
    let v10 = ObjectRecord {
        version: 10,
        ..obj(100, "ten")
    };
    assert!(c.restore_object("a", "bkt", "k", &v10).expect("restore"));
    assert!(!c.restore_object("a", "bkt", "k", &v10).expect("again"));
    let v5 = ObjectRecord {
        version: 5,
        ..obj(1, "five")
    };
    assert!(!c.restore_object("a", "bkt", "k", &v5).expect("older"));
    assert_eq!(c.ledger().usage("a").map(|u| u.0), Some(100));
    assert_eq!(c.ledger().objects("a").map(|o| o.0), Some(1));
    let v20 = ObjectRecord {
        version: 20,
        ..obj(30, "twenty")
    };
    assert!(c.restore_object("a", "bkt", "k", &v20).expect("newer"));
    let body = b"inline";
    let inline = ObjectRecord {
        version: 3,
        ..inline_obj(body)
    };
    assert!(
        c.restore_object_with_body("a", "bkt", "small", &inline, Some(body))
            .expect("inline")
    );
    assert_eq!(c.ledger().usage("a").map(|u| u.0), Some(36));
    assert_eq!(c.ledger().objects("a").map(|o| o.0), Some(2));
    let now = c.get_object("a", "bkt", "k").expect("get").expect("object");
    assert_eq!((now.version, now.size), (20, 30));
    assert_eq!(
        c.referenced_blobs().expect("refs")["a"],
        HashSet::from(["twenty".to_owned()])
    );
    drop(c);
    let c = h.open();
    assert_eq!(c.ledger().usage("a").map(|u| u.0), Some(36));
    let (_, got) = c
        .get_object_with_body("a", "bkt", "small")
        .expect("get")
        .expect("object");
    assert_eq!(got.as_deref(), Some(&body[..]));
}

pub fn a_lease_has_one_holder_until_released_or_lapsed(h: &dyn Harness) {
    let c = h.open();
    let minute = Duration::from_secs(60);
    assert!(c.try_lease("gc", "g1", minute).expect("take"));
    assert!(!c.try_lease("gc", "g2", minute).expect("held"));
    assert!(c.try_lease("gc", "g1", minute).expect("renew"));
    // Another holder's release changes nothing; the holder's frees it.
    c.release_lease("gc", "g2").expect("not theirs");
    assert!(!c.try_lease("gc", "g2", minute).expect("still held"));
    c.release_lease("gc", "g1").expect("release");
    assert!(c.try_lease("gc", "g2", minute).expect("free again"));
    // Leases are independent by name; a lease of no duration has lapsed at once.
    assert!(c.try_lease("other", "g1", Duration::ZERO).expect("take"));
    assert!(c.try_lease("other", "g3", minute).expect("lapsed"));
    assert!(!c.try_lease("gc", "g1", minute).expect("g2's"));
}

/// What `lease_holder` reports: the live holder's name exactly as it took the lease (the
/// gateways advertise `"<id> <control url>"` in it), nobody once it is released or lapsed,
/// then the next taker. The engines read their own clock (redb the process's, PostgreSQL the
/// server's), so a lease taken for no duration stands for one that lapsed.
pub fn the_lease_holder_is_the_live_holder_as_it_named_itself(h: &dyn Harness) {
    let minute = Duration::from_secs(60);
    let (g1, g2, g3) = (
        "g1 http://127.0.0.1:9101",
        "g2 http://127.0.0.1:9102",
        "g3 http://[::1]:9103",
    );
    let c = h.open();
    let holder = |c: &Catalog, name: &str| c.lease_holder(name).expect("lease_holder");
    assert_eq!(holder(&c, "coordinator"), None, "never taken");
    assert!(c.try_lease("coordinator", g1, minute).expect("take"));
    assert_eq!(holder(&c, "coordinator").as_deref(), Some(g1));
    // A refused taker does not displace it, a renewal keeps it, another name is apart.
    assert!(!c.try_lease("coordinator", g2, minute).expect("held"));
    assert!(c.try_lease("coordinator", g1, minute).expect("renew"));
    assert_eq!(holder(&c, "coordinator").as_deref(), Some(g1));
    assert_eq!(holder(&c, "gc"), None);
    // Only the holder's release frees it; then nobody holds it until the next taker.
    c.release_lease("coordinator", g2).expect("not theirs");
    assert_eq!(holder(&c, "coordinator").as_deref(), Some(g1));
    c.release_lease("coordinator", g1).expect("release");
    assert_eq!(holder(&c, "coordinator"), None, "released");
    assert!(c.try_lease("coordinator", g2, minute).expect("free again"));
    assert_eq!(holder(&c, "coordinator").as_deref(), Some(g2));
    // A lapsed lease has no holder although it was never released; the next taker has it.
    assert!(c.try_lease("lapsing", g1, Duration::ZERO).expect("take"));
    assert_eq!(holder(&c, "lapsing"), None, "lapsed");
    assert!(c.try_lease("lapsing", g3, minute).expect("lapsed"));
    assert_eq!(holder(&c, "lapsing").as_deref(), Some(g3));
    // The leases are the catalog's: a reopened handle (a restarted gateway) sees them.
    drop(c);
    let c = h.open();
    assert_eq!(holder(&c, "coordinator").as_deref(), Some(g2));
    assert_eq!(holder(&c, "lapsing").as_deref(), Some(g3));
}

const MIB: u64 = 1 << 20;

fn held(g: EscrowGrant) -> u64 {
    match g {
        EscrowGrant::Held { bytes, .. } => bytes,
        EscrowGrant::Unlimited => panic!("a tenant with a quota got no escrow"),
    }
}

/// Tenant `a` with a 10 MiB quota, bucket `bkt` and 6 MiB stored: less than half is free, so
/// a shared engine holds none of it in a gateway's own escrow.
fn near_quota(h: &dyn Harness) -> Catalog {
    let c = open(h);
    c.ledger().set_quota("a", 10 * MIB);
    c.create_bucket("a", "bkt", 1).expect("create");
    put(&c, "a", "stored", 6 * MIB);
    c
}

fn grant(c: &Catalog, holder: &str, bytes: u64, ttl: Duration) -> u64 {
    held(c.grant_escrow("a", holder, bytes, ttl).expect("grant"))
}

pub fn an_agents_escrow_holds_quota_others_cannot_take(h: &dyn Harness) {
    let c = near_quota(h);
    let minute = Duration::from_secs(60);
    // Asking for more than is free gets what is free; asking again keeps it (it is its own).
    assert_eq!(grant(&c, "agent:n1", 8 * MIB, minute), 4 * MIB);
    assert_eq!(grant(&c, "agent:n1", 8 * MIB, minute), 4 * MIB);
    // Nothing is left for another writer or another agent.
    assert!(matches!(
        c.ledger().reserve("a", 1),
        Err(MetaError::QuotaExceeded { .. })
    ));
    assert_eq!(grant(&c, "agent:n2", MIB, minute), 0);
    // Shrinking gives space back to everyone else.
    assert_eq!(grant(&c, "agent:n1", 2 * MIB, minute), 2 * MIB);
    put(&c, "a", "other", 2 * MIB);
    assert!(c.ledger().reserve("a", 1).is_err());
    // A tenant without a quota needs none.
    c.ledger().set_quota("b", u64::MAX);
    assert_eq!(
        c.grant_escrow("b", "agent:n1", MIB, minute).expect("grant"),
        EscrowGrant::Unlimited
    );
    assert!(matches!(
        c.grant_escrow("ghost", "agent:n1", MIB, minute),
        Err(MetaError::UnknownTenant)
    ));
}

pub fn an_upload_from_the_holder_spends_its_escrow_exactly(h: &dyn Harness) {
    let c = near_quota(h);
    let minute = Duration::from_secs(60);
    assert_eq!(grant(&c, "agent:n1", 4 * MIB, minute), 4 * MIB);
    // Puts drawn from the escrow commit although nothing else is free.
    for (key, size) in [("drained", 2 * MIB), ("drained2", MIB)] {
        let r = c
            .ledger()
            .reserve_from_escrow("a", "agent:n1", size)
            .expect("drawn");
        c.put_object("a", "bkt", key, &obj(size, key), None, r)
            .expect("put from escrow");
    }
    // 1 MiB of the escrow is left: a draw of 2 is refused and takes nothing from it.
    assert!(matches!(
        c.ledger().reserve_from_escrow("a", "agent:n1", 2 * MIB),
        Err(MetaError::QuotaExceeded { .. })
    ));
    // A draw that does not commit gives its bytes back to the escrow.
    let r = c
        .ledger()
        .reserve_from_escrow("a", "agent:n1", MIB)
        .expect("the last MiB");
    drop(r);
    let r = c
        .ledger()
        .reserve_from_escrow("a", "agent:n1", MIB)
        .expect("the last MiB again");
    c.put_object("a", "bkt", "last", &obj(MIB, "last"), None, r)
        .expect("put from escrow");
    assert_eq!(c.ledger().usage("a").map(|u| u.0), Some(10 * MIB));
    assert!(c.ledger().reserve("a", 1).is_err());
    // Renewing a spent escrow finds nothing free.
    assert_eq!(grant(&c, "agent:n1", MIB, minute), 0);
}

pub fn a_lapsed_escrow_returns_and_a_live_one_survives_reopen(h: &dyn Harness) {
    {
        let c = near_quota(h);
        // A grant of no duration has lapsed at once: it holds nothing.
        grant(&c, "agent:dead", 4 * MIB, Duration::ZERO);
        assert!(c.ledger().reserve("a", 4 * MIB).is_ok());
        assert_eq!(
            grant(&c, "agent:n1", 3 * MIB, Duration::from_secs(60)),
            3 * MIB
        );
    }
    // Reopened (a restarted gateway), the live grant still holds its bytes.
    let c = h.open();
    c.ledger().set_quota("a", 10 * MIB);
    assert!(matches!(
        c.ledger().reserve("a", 2 * MIB),
        Err(MetaError::QuotaExceeded { .. })
    ));
    assert!(c.ledger().reserve("a", MIB).is_ok());
}
