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
    c.put_object(tenant, "bkt", key, &obj(size, key), r)
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
    assert!(c.put_object("a", "bkt", "refuse", &obj(5, "x"), r).is_err());
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
