use super::*;

fn open() -> (tempfile::TempDir, Catalog) {
    let dir = tempfile::tempdir().expect("tempdir");
    let (c, report) = Catalog::open(&dir.path().join("meta.redb")).expect("open");
    assert!(report.usage_fixed.is_empty());
    c.ledger().set_quota("a", 1 << 30);
    c.ledger().set_quota("b", 1 << 30);
    (dir, c)
}

fn obj(size: u64, blob: &str) -> ObjectRecord {
    ObjectRecord {
        size,
        etag: "d41d8cd98f00b204e9800998ecf8427e".into(),
        last_modified_ms: 1,
        segments: vec![Segment {
            blob: blob.into(),
            size,
        }],
        ..ObjectRecord::default()
    }
}

fn put(c: &Catalog, tenant: &str, key: &str, size: u64) -> Option<ObjectRecord> {
    let r = c.ledger().reserve(tenant, size).expect("reserve");
    c.put_object(tenant, "bkt", key, &obj(size, key), None, r)
        .expect("put")
}

fn names(page: &ListPage) -> Vec<&str> {
    page.entries.iter().map(Entry::name).collect()
}

#[test]
fn same_bucket_name_in_two_tenants_is_two_buckets() {
    let (_d, c) = open();
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

#[test]
fn usage_follows_puts_overwrites_and_deletes() {
    let (_d, c) = open();
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

#[test]
fn usage_survives_reopen_and_is_recomputed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("meta.redb");
    {
        let (c, _) = Catalog::open(&path).expect("open");
        c.ledger().set_quota("a", 1000);
        c.create_bucket("a", "bkt", 1).expect("create");
        put(&c, "a", "x", 300);
    }
    let (c, report) = Catalog::open(&path).expect("reopen");
    assert!(report.usage_fixed.is_empty());
    assert_eq!(c.ledger().usage("a").map(|u| u.0), Some(300));
}

#[test]
fn listing_rolls_up_prefixes_and_pages() {
    let (_d, c) = open();
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

#[test]
fn multipart_complete_checks_parts_and_frees_unused() {
    let (_d, c) = open();
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

#[test]
fn multipart_etag_is_md5_of_part_md5s() {
    // Known value: two parts whose MD5s are md5("a"); S3 computes md5(md5a || md5a)-2.
    let mut up = UploadRecord::default();
    for n in [1, 2] {
        up.parts.insert(
            n,
            PartRecord {
                blob: format!("p{n}"),
                size: MIN_PART_SIZE,
                etag: "0cc175b9c0f1b6a831c399e269772661".into(),
                last_modified_ms: 0,
            },
        );
    }
    let spec: Vec<_> = [1, 2]
        .iter()
        .map(|&n| PartSpec {
            number: n,
            etag: "0cc175b9c0f1b6a831c399e269772661".into(),
        })
        .collect();
    let o = assemble(&mut up, &spec, 0).expect("assemble");
    let mut m = Md5::new();
    m.update(
        hex_decode("0cc175b9c0f1b6a831c399e2697726610cc175b9c0f1b6a831c399e269772661")
            .expect("hex"),
    );
    assert_eq!(o.etag, format!("{}-2", hex(&m.finalize())));
}

#[test]
fn delete_bucket_refuses_objects_and_aborts_uploads() {
    let (_d, c) = open();
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

/// Records every change it hears about; refuses puts of the key "refuse".
#[derive(Default)]
struct Recorder(std::sync::Mutex<Vec<String>>);

impl CommitHook for Recorder {
    fn on_commit(&self, _txn: &redb::WriteTransaction, change: &Change<'_>) -> Result<()> {
        let line = match change {
            Change::Put { key, replaced, .. } => {
                if *key == "refuse" {
                    return Err(MetaError::Corrupt("refused by the hook".into()));
                }
                format!("put {key} replaced={}", replaced.is_some())
            }
            Change::Delete { key, old, .. } => format!("delete {key} existed={}", old.is_some()),
            Change::BucketCreated { bucket, .. } => format!("create {bucket}"),
            Change::BucketDeleted { bucket, .. } => format!("drop {bucket}"),
        };
        self.0.lock().expect("lock").push(line);
        Ok(())
    }
}

#[test]
fn a_hook_sees_every_visible_change_and_its_error_aborts_the_change() {
    let dir = tempfile::tempdir().expect("tempdir");
    let hook = std::sync::Arc::new(Recorder::default());
    let (c, _) = Catalog::open(&dir.path().join("meta.redb")).expect("open");
    let c = c.with_hook(hook.clone());
    c.ledger().set_quota("a", 1 << 30);
    c.create_bucket("a", "bkt", 1).expect("create");
    put(&c, "a", "k", 10);
    put(&c, "a", "k", 20);
    c.delete_object("a", "bkt", "k").expect("delete");
    c.delete_object("a", "bkt", "never")
        .expect("delete of nothing");
    let r = c.ledger().reserve("a", 5).expect("reserve");
    assert!(
        c.put_object("a", "bkt", "refuse", &obj(5, "x"), None, r)
            .is_err()
    );
    assert!(c.get_object("a", "bkt", "refuse").expect("get").is_none());
    assert_eq!(c.ledger().usage("a").map(|u| u.0), Some(0));
    // Eviction is not a client's delete: the hook does not hear of it.
    put(&c, "a", "e", 7);
    let rec = c
        .get_object("a", "bkt", "e")
        .expect("get")
        .expect("present");
    assert!(c.evict_object("a", "bkt", "e", &rec).expect("evict"));
    assert!(!c.evict_object("a", "bkt", "e", &rec).expect("gone"));
    assert_eq!(c.ledger().usage("a").map(|u| u.0), Some(0));
    assert_eq!(
        *hook.0.lock().expect("lock"),
        vec![
            "create bkt",
            "put k replaced=false",
            "put k replaced=true",
            "delete k existed=true",
            "delete never existed=false",
            "put e replaced=false",
        ]
    );
}

fn inline_obj(body: &[u8]) -> ObjectRecord {
    ObjectRecord {
        size: body.len() as u64,
        etag: "00".into(),
        last_modified_ms: 1,
        inline: true,
        ..ObjectRecord::default()
    }
}

fn put_inline(c: &Catalog, tenant: &str, key: &str, body: &[u8]) -> Option<ObjectRecord> {
    let r = c
        .ledger()
        .reserve(tenant, body.len() as u64)
        .expect("reserve");
    c.put_object(tenant, "bkt", key, &inline_obj(body), Some(body), r)
        .expect("put inline")
}

#[test]
fn an_inline_object_keeps_its_body_in_the_catalog_and_no_blob() {
    let (_d, c) = open();
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

#[test]
fn overwrites_between_inline_and_blob_objects_hand_back_only_real_blobs() {
    let (_d, c) = open();
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

#[test]
fn an_inline_object_is_evicted_like_any_other() {
    let (_d, c) = open();
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

#[test]
fn a_record_and_body_that_disagree_are_refused_and_change_nothing() {
    let (_d, c) = open();
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

/// Copies `dir/meta.redb` as it is on disk and opens the copy (redb's recovery path): called
/// while the catalog is still open, this is what a process killed at this instant leaves.
fn open_as_after_a_kill(dir: &std::path::Path) -> Catalog {
    let copy = dir.join("after-kill.redb");
    std::fs::copy(dir.join("meta.redb"), &copy).expect("copy");
    Catalog::open(&copy).expect("reopen").0
}

#[test]
fn an_acknowledged_inline_put_survives_a_kill() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (c, _) = Catalog::open(&dir.path().join("meta.redb")).expect("open");
    c.ledger().set_quota("a", 1 << 20);
    c.create_bucket("a", "bkt", 1).expect("create");
    let body: Vec<u8> = (0..16_384u32).map(|i| (i % 251) as u8).collect();
    put_inline(&c, "a", "k", &body);
    put(&c, "a", "blob", 7);
    let after = open_as_after_a_kill(dir.path());
    drop(c);
    let (rec, got) = after
        .get_object_with_body("a", "bkt", "k")
        .expect("get")
        .expect("an acknowledged put is on disk");
    assert_eq!(rec.size, body.len() as u64);
    assert!(got == Some(body.clone()), "the body came back different");
    // Usage is recomputed from the catalog at open, inline bytes included.
    assert_eq!(
        after.ledger().usage("a").map(|u| u.0),
        Some(body.len() as u64 + 7)
    );
}

/// What the catalog stored for a single-blob object before inline objects existed, byte for
/// byte (`serde_json` of the record as it was then).
const LEGACY_OBJECT: &str = r#"{"size":3,"etag":"900150983cd24fb0d6963f7d28e17f72","last_modified_ms":1700000000000,"content_type":"text/plain","headers":{"cache-control":"no-cache"},"metadata":{"owner":"me"},"segments":[{"blob":"bkt/ab/00112233445566778899aabbccddeeff","size":3}],"parts":0}"#;

#[test]
fn objects_written_before_inline_objects_still_decode_and_encode_identically() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("meta.redb");
    {
        let (c, _) = Catalog::open(&path).expect("open");
        c.create_bucket("a", "bkt", 1).expect("create");
        let txn = c.database().begin_write().expect("txn");
        txn.open_table(OBJECTS)
            .expect("table")
            .insert(
                keys::entry("a", "bkt", "old").as_slice(),
                LEGACY_OBJECT.as_bytes(),
            )
            .expect("insert");
        txn.commit().expect("commit");
    }
    let (c, report) = Catalog::open(&path).expect("reopen");
    // Usage is recomputed from the old record (the stored figure was never moved).
    assert_eq!(report.usage_fixed, [("a".to_owned(), 0, 3)]);
    let (rec, body) = c
        .get_object_with_body("a", "bkt", "old")
        .expect("get")
        .expect("present");
    assert_eq!(body, None);
    assert!(!rec.inline);
    assert_eq!(
        (
            rec.size,
            rec.content_type.as_deref(),
            rec.metadata["owner"].as_str()
        ),
        (3, Some("text/plain"), "me")
    );
    assert_eq!(
        rec.blobs().collect::<Vec<_>>(),
        ["bkt/ab/00112233445566778899aabbccddeeff"]
    );
    // A blob object is still written exactly as before, so older code can read it back.
    assert_eq!(
        encode_object(&rec, None).expect("encode"),
        LEGACY_OBJECT.as_bytes()
    );
}

#[test]
fn an_inline_value_is_refused_by_a_plain_json_reader() {
    // Code older than inline objects decoded values as plain JSON: it must refuse an inline
    // value rather than read it as an object with no bytes.
    let value = encode_object(&inline_obj(b"abc"), Some(b"abc")).expect("encode");
    assert!(serde_json::from_slice::<ObjectRecord>(&value).is_err());
    let (rec, body) = decode_object_with_body(&value).expect("decode");
    assert_eq!((rec, body), (inline_obj(b"abc"), Some(b"abc".to_vec())));
    // A truncated value is corrupt, never a shorter body.
    assert!(matches!(
        decode_object(&value[..value.len() - 1]),
        Err(MetaError::Corrupt(_))
    ));
}

/// Keeps the body of every put it hears about.
#[derive(Default)]
struct Bodies(std::sync::Mutex<Vec<Option<Vec<u8>>>>);

impl CommitHook for Bodies {
    fn on_commit(&self, _txn: &redb::WriteTransaction, change: &Change<'_>) -> Result<()> {
        if let Change::Put { body, .. } = change {
            self.0.lock().expect("lock").push(body.map(<[u8]>::to_vec));
        }
        Ok(())
    }
}

#[test]
fn a_hook_hears_an_inline_body_with_its_put() {
    let dir = tempfile::tempdir().expect("tempdir");
    let hook = std::sync::Arc::new(Bodies::default());
    let (c, _) = Catalog::open(&dir.path().join("meta.redb")).expect("open");
    let c = c.with_hook(hook.clone());
    c.ledger().set_quota("a", 1 << 20);
    c.create_bucket("a", "bkt", 1).expect("create");
    put_inline(&c, "a", "k", b"inline bytes");
    put(&c, "a", "j", 4);
    assert_eq!(
        *hook.0.lock().expect("lock"),
        vec![Some(b"inline bytes".to_vec()), None]
    );
}

#[test]
fn the_object_count_holds_objects_and_uploads_to_the_tenants_maximum() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("meta.redb");
    let (c, _) = Catalog::open(&path).expect("open");
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
    let (c, _) = Catalog::open(&path).expect("reopen");
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

#[test]
fn a_tenant_owns_at_most_its_maximum_of_buckets() {
    let (_d, c) = open();
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

fn put_if(c: &Catalog, key: &str, rec: &ObjectRecord, cond: &Precondition) -> Result<()> {
    let r = c.ledger().reserve("a", rec.size).expect("reserve");
    c.put_object_if("a", "bkt", key, rec, None, r, cond)
        .map(drop)
}

#[test]
fn create_only_puts_racing_for_one_key_have_exactly_one_winner() {
    let (_d, c) = open();
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

#[test]
fn compare_and_swap_replaces_only_the_named_etag() {
    let (_d, c) = open();
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

#[test]
fn a_failed_condition_leaves_a_multipart_upload_to_complete_later() {
    let (_d, c) = open();
    c.create_bucket("a", "bkt", 1).expect("create");
    put(&c, "a", "k", 2);
    let up = UploadRecord {
        key: "k".into(),
        ..UploadRecord::default()
    };
    c.create_upload("a", "bkt", "u", &up).expect("upload");
    let r = c.ledger().reserve("a", 4).expect("reserve");
    let part = PartRecord {
        blob: "p".into(),
        size: 4,
        etag: "00".into(),
        last_modified_ms: 0,
    };
    c.put_part("a", "bkt", "u", "k", 1, part, r).expect("part");
    let spec = [PartSpec {
        number: 1,
        etag: "\"00\"".into(),
    }];
    assert!(matches!(
        c.complete_upload_if("a", "bkt", "u", "k", &spec, 9, &Precondition::IfAbsent),
        Err(MetaError::PreconditionFailed)
    ));
    assert!(c.get_upload("a", "bkt", "u", "k").is_ok());
    let etag = c
        .get_object("a", "bkt", "k")
        .expect("get")
        .expect("obj")
        .etag;
    let (done, replaced, _) = c
        .complete_upload_if("a", "bkt", "u", "k", &spec, 9, &Precondition::IfEtag(etag))
        .expect("complete");
    assert_eq!(done.size, 4);
    assert_eq!(replaced.map(|o| o.size), Some(2));
}
