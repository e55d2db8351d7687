//! The conformance suite on the embedded engine, and what only the embedded engine does:
//! hooks, recovery after a kill, the on-disk layout of old records.

use std::sync::Arc;

use md5::{Digest, Md5};

use super::*;
use crate::conformance::{Harness, inline_obj, obj, put, put_inline};
use crate::record::{decode_object, decode_object_with_body, encode_object};
use crate::{Change, CommitHook, MetaError, PartRecord, Result, UploadRecord, keys};

/// A redb file in a temporary directory, reopened at the same path.
struct Redb(tempfile::TempDir);

impl Harness for Redb {
    fn open(&self) -> Catalog {
        Catalog::open(&self.0.path().join("meta.redb"))
            .expect("open")
            .0
    }
}

crate::catalog_conformance!(Some(Redb(tempfile::tempdir().expect("tempdir"))));

#[test]
fn the_embedded_catalog_is_not_shared() {
    let h = Redb(tempfile::tempdir().expect("tempdir"));
    assert!(!h.open().is_shared());
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
                checksums: None,
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
    let o = assemble_upload(&mut up, &spec, 0).expect("assemble");
    let mut m = Md5::new();
    m.update(
        hex_decode("0cc175b9c0f1b6a831c399e2697726610cc175b9c0f1b6a831c399e269772661")
            .expect("hex"),
    );
    assert_eq!(o.etag, format!("{}-2", hex(&m.finalize())));
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
    let hook = Arc::new(Recorder::default());
    let (c, _) = RedbCatalog::open(&dir.path().join("meta.redb")).expect("open");
    let c = Catalog::from(c.with_hook(hook.clone()));
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
        let (c, _) = RedbCatalog::open(&path).expect("open");
        c.create_bucket("a", "bkt", 1).expect("create");
        let txn = c.database().begin_write().expect("txn");
        txn.open_table(redb::TableDefinition::<&[u8], &[u8]>::new("objects"))
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
    let hook = Arc::new(Bodies::default());
    let (c, _) = RedbCatalog::open(&dir.path().join("meta.redb")).expect("open");
    let c = Catalog::from(c.with_hook(hook.clone()));
    c.ledger().set_quota("a", 1 << 20);
    c.create_bucket("a", "bkt", 1).expect("create");
    put_inline(&c, "a", "k", b"inline bytes");
    put(&c, "a", "j", 4);
    assert_eq!(
        *hook.0.lock().expect("lock"),
        vec![Some(b"inline bytes".to_vec()), None]
    );
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

fn hex_decode(s: &str) -> Option<Vec<u8>> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}
