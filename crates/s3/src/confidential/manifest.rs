//! Rollback manifests (issue #29): per checkpoint directory of a confidential tenant, a list
//! signed with the tenant's key of the newest generation of every object written through the
//! agent, with a counter that only goes up; and the high-water mark of that counter the node
//! keeps, so that an older manifest put back is refused too.
//!
//! Every encrypted object is a valid ciphertext of its own (random) generation, so an older
//! version of a key put back in the shared tier in place of a newer one decrypts; the AEAD
//! alone cannot tell. The manifest of the object's *directory* (its key up to and including
//! the last `/`; the bucket's root for a key without one) can: it names the generation the
//! newest write of each key got, and a read whose object has another generation is refused.
//! The manifest itself could be rolled back with its objects, so it carries a counter raised
//! on every write, and the node remembers the highest counter it has written or verified for
//! each directory ([`HighWater`]); a manifest below that is refused, and so is a missing one
//! where the node has seen one.
//!
//! # Format
//!
//! The manifest is the object `<directory>.sluice-manifest` ([`MANIFEST_NAME`]) in the same
//! bucket, written through the agent like any object of the tenant (so it is encrypted, drained
//! and evicted like one), reserved: clients may not write, read, delete or list it through
//! the agent. Its plaintext is JSON, `docs/design/confidential-format.md` gives it field by
//! field; its `mac` is HMAC-SHA256 under [`sluice_crypt::TenantKey::manifest_mac`]'s key of
//! [`Manifest::signed_bytes`], which binds tenant, bucket, directory, counter and every entry.
//!
//! The high-water mark is the node's (the agent keeps it in its catalog file, table
//! `confidential_high_water`; [`RedbHighWater`]): a fresh node, or one whose data directory
//! was lost, has none, and cannot tell a manifest rolled back together with its objects from
//! the real one. The docs say so (`docs/confidential.md`).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Serialize};
use sluice_meta::Catalog;
use sluice_meta::redb::{self, ReadableDatabase, ReadableTable, TableDefinition};

use super::{Entry, TenantKey};

/// The last path component of a directory's manifest.
pub const MANIFEST_NAME: &str = ".sluice-manifest";

/// The `format` of every manifest this build writes and reads.
pub const FORMAT: &str = "sluice.manifest/1";

const MAC_LABEL: &[u8] = b"sluice manifest v1\0";

/// Whether `key` names a manifest (reserved on an agent with confidential tenants).
pub fn is_manifest(key: &str) -> bool {
    key.rsplit('/').next() == Some(MANIFEST_NAME)
}

/// The directory of `key`: up to and including its last `/`, or `""`.
pub fn directory(key: &str) -> &str {
    key.rfind('/').map_or("", |i| &key[..=i])
}

/// The key of the manifest of `directory`.
pub fn manifest_key(directory: &str) -> String {
    format!("{directory}{MANIFEST_NAME}")
}

/// What a manifest says of one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    /// Its newest write: the generation its entry drew and, when known, its plaintext length.
    Live {
        generation: u64,
        plaintext: Option<u64>,
    },
    /// Deleted through the agent: any body under this key is older than the deletion.
    Deleted,
}

/// A directory's manifest: which tenant, bucket and directory it is for is not stored in
/// it apart from the signed copy; the caller names them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Manifest {
    pub counter: u64,
    pub objects: BTreeMap<String, Slot>,
}

/// The directory a manifest belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scope<'a> {
    pub tenant: &'a str,
    pub bucket: &'a str,
    pub directory: &'a str,
}

/// Why a manifest, or an object it names, is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManifestError {
    #[error("the manifest is not a {FORMAT} document: {0}")]
    Malformed(String),
    #[error("the manifest is for {0}, not for this directory")]
    Elsewhere(String),
    #[error("the manifest's MAC does not verify under the tenant key (tampered with or forged)")]
    Mac,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Wire {
    format: String,
    tenant: String,
    bucket: String,
    directory: String,
    counter: u64,
    objects: BTreeMap<String, WireSlot>,
    mac: String,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireSlot {
    /// The generation, 16 lower-case hex digits; absent for a deleted key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    g: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    n: Option<u64>,
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&u32::try_from(s.len()).unwrap_or(u32::MAX).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

impl Manifest {
    /// The bytes the MAC covers: a label, tenant, bucket and directory (each a u32 LE length
    /// and the UTF-8 bytes), the counter (u64 LE), the number of entries (u32 LE), then each
    /// entry in key order: the key as above, a kind byte (1 live, 0 deleted), the generation
    /// and the plaintext length (u64 LE each; `u64::MAX` for an unknown length, 0 and 0 for a
    /// deleted key).
    pub fn signed_bytes(&self, scope: Scope<'_>) -> Vec<u8> {
        let mut out = MAC_LABEL.to_vec();
        put_str(&mut out, scope.tenant);
        put_str(&mut out, scope.bucket);
        put_str(&mut out, scope.directory);
        out.extend_from_slice(&self.counter.to_le_bytes());
        let count = u32::try_from(self.objects.len()).unwrap_or(u32::MAX);
        out.extend_from_slice(&count.to_le_bytes());
        for (key, slot) in &self.objects {
            put_str(&mut out, key);
            let (kind, g, n) = match *slot {
                Slot::Live {
                    generation,
                    plaintext,
                } => (1u8, generation, plaintext.unwrap_or(u64::MAX)),
                Slot::Deleted => (0, 0, 0),
            };
            out.push(kind);
            out.extend_from_slice(&g.to_le_bytes());
            out.extend_from_slice(&n.to_le_bytes());
        }
        out
    }

    /// The manifest as stored: JSON with its MAC.
    pub fn seal(&self, key: &TenantKey, scope: Scope<'_>) -> Vec<u8> {
        let mac = key.manifest_mac(&self.signed_bytes(scope));
        let wire = Wire {
            format: FORMAT.to_owned(),
            tenant: scope.tenant.to_owned(),
            bucket: scope.bucket.to_owned(),
            directory: scope.directory.to_owned(),
            counter: self.counter,
            objects: self
                .objects
                .iter()
                .map(|(k, s)| {
                    let slot = match *s {
                        Slot::Live {
                            generation,
                            plaintext,
                        } => WireSlot {
                            g: Some(format!("{generation:016x}")),
                            n: plaintext,
                        },
                        Slot::Deleted => WireSlot { g: None, n: None },
                    };
                    (k.clone(), slot)
                })
                .collect(),
            mac: hex::encode(mac),
        };
        serde_json::to_vec(&wire).unwrap_or_else(|_| unreachable!("plain data serializes"))
    }

    /// A stored manifest, if it is well formed, for `scope`, and its MAC verifies.
    pub fn open(bytes: &[u8], key: &TenantKey, scope: Scope<'_>) -> Result<Self, ManifestError> {
        let bad = |s: String| ManifestError::Malformed(s);
        let wire: Wire = serde_json::from_slice(bytes).map_err(|e| bad(e.to_string()))?;
        if wire.format != FORMAT {
            return Err(bad(format!("format {:?}", wire.format)));
        }
        if (
            wire.tenant.as_str(),
            wire.bucket.as_str(),
            wire.directory.as_str(),
        ) != (scope.tenant, scope.bucket, scope.directory)
        {
            return Err(ManifestError::Elsewhere(format!(
                "{}/{}/{}",
                wire.tenant, wire.bucket, wire.directory
            )));
        }
        let mut objects = BTreeMap::new();
        for (k, s) in wire.objects {
            let slot = match s.g {
                None => Slot::Deleted,
                Some(g) => Slot::Live {
                    generation: u64::from_str_radix(&g, 16)
                        .map_err(|_| bad(format!("generation of {k}")))?,
                    plaintext: s.n,
                },
            };
            objects.insert(k, slot);
        }
        let manifest = Self {
            counter: wire.counter,
            objects,
        };
        let tag = hex::decode(&wire.mac)
            .ok()
            .ok_or_else(|| bad("mac".into()))?;
        if !key.verify_manifest_mac(&manifest.signed_bytes(scope), &tag) {
            return Err(ManifestError::Mac);
        }
        Ok(manifest)
    }

    /// Whether an object at `key` with `entry` and `stored` bytes is the newest this manifest
    /// names; `Err` says why not. A key the manifest does not name was written before the
    /// directory had a manifest (or through no agent), and passes.
    pub fn check(&self, key: &str, entry: &Entry, stored: u64) -> Result<(), String> {
        match self.objects.get(key) {
            None => Ok(()),
            Some(Slot::Deleted) => Err(format!(
                "the manifest (counter {}) records it deleted, yet a body of generation {:016x} is stored",
                self.counter, entry.generation
            )),
            Some(&Slot::Live {
                generation,
                plaintext,
            }) => {
                if generation != entry.generation {
                    return Err(format!(
                        "its generation {:016x} is not the newest written, {generation:016x} (manifest counter {})",
                        entry.generation, self.counter
                    ));
                }
                let len = entry.plaintext_len(stored).ok();
                if plaintext.is_some() && len.is_some() && plaintext != len {
                    return Err(format!(
                        "its plaintext length is not the {} bytes the manifest records",
                        plaintext.unwrap_or_default()
                    ));
                }
                Ok(())
            }
        }
    }
}

/// An object refused because it, or its directory's manifest, is older than what the node
/// knows was written: the error a read fails with (S3 `InternalError`, 500).
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "{bucket}/{key}: refused as a rollback, no byte of it is served (an older version put back \
     in place of a newer one, or its directory's manifest tampered with or rolled back): {reason}"
)]
pub struct RolledBack {
    pub bucket: String,
    pub key: String,
    pub reason: String,
}

impl RolledBack {
    pub fn into_store_error(self) -> object_store::Error {
        object_store::Error::Generic {
            store: "sluice-manifest",
            source: Box::new(self),
        }
    }
}

/// Where a node keeps the highest manifest counter it has written or verified for each
/// directory. It must survive restarts: a mark lost is a rollback no longer detected.
pub trait HighWater: Send + Sync + 'static {
    /// The mark of a directory, 0 if none.
    fn get(&self, scope: Scope<'_>) -> Result<u64, String>;
    /// Raises the mark to `counter` if it is below (durable before it returns).
    fn raise(&self, scope: Scope<'_>, counter: u64) -> Result<(), String>;
}

fn scope_key(scope: Scope<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    put_str(&mut out, scope.tenant);
    put_str(&mut out, scope.bucket);
    put_str(&mut out, scope.directory);
    out
}

/// Marks in memory only (tests, and a front no node set marks for).
#[derive(Default)]
pub struct MemoryHighWater(Mutex<HashMap<Vec<u8>, u64>>);

impl HighWater for MemoryHighWater {
    fn get(&self, scope: Scope<'_>) -> Result<u64, String> {
        let marks = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(marks.get(&scope_key(scope)).copied().unwrap_or(0))
    }

    fn raise(&self, scope: Scope<'_>, counter: u64) -> Result<(), String> {
        let mut marks = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let mark = marks.entry(scope_key(scope)).or_default();
        *mark = (*mark).max(counter);
        Ok(())
    }
}

const MARKS: TableDefinition<&[u8], u64> = TableDefinition::new("confidential_high_water");

/// Marks in a table of the embedded catalog's redb file (the node agent's), each raise its
/// own durable transaction.
pub struct RedbHighWater(Arc<Catalog>);

impl RedbHighWater {
    /// # Panics
    /// Later, on use, if `catalog` is not the embedded engine.
    pub fn new(catalog: Arc<Catalog>) -> Self {
        Self(catalog)
    }
}

fn storage(e: impl std::fmt::Display) -> String {
    format!("the node's rollback marks: {e}")
}

impl HighWater for RedbHighWater {
    fn get(&self, scope: Scope<'_>) -> Result<u64, String> {
        let txn = self.0.database().begin_read().map_err(storage)?;
        let table = match txn.open_table(MARKS) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(0),
            Err(e) => return Err(storage(e)),
        };
        let key = scope_key(scope);
        Ok(table
            .get(key.as_slice())
            .map_err(storage)?
            .map_or(0, |v| v.value()))
    }

    fn raise(&self, scope: Scope<'_>, counter: u64) -> Result<(), String> {
        if self.get(scope)? >= counter {
            return Ok(());
        }
        let txn = self.0.database().begin_write().map_err(storage)?;
        {
            let mut table = txn.open_table(MARKS).map_err(storage)?;
            let key = scope_key(scope);
            let now = table
                .get(key.as_slice())
                .map_err(storage)?
                .map_or(0, |v| v.value());
            if counter > now {
                table.insert(key.as_slice(), counter).map_err(storage)?;
            }
        }
        txn.commit().map_err(storage)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCOPE: Scope<'static> = Scope {
        tenant: "alice",
        bucket: "ckpt",
        directory: "step-1/",
    };

    fn key(byte: u8) -> TenantKey {
        TenantKey::from_bytes(&[byte; 32]).expect("key")
    }

    fn sample() -> Manifest {
        let mut m = Manifest {
            counter: 7,
            ..Manifest::default()
        };
        m.objects.insert(
            "step-1/shard-0".into(),
            Slot::Live {
                generation: 0xabc,
                plaintext: Some(10),
            },
        );
        m.objects.insert("step-1/gone".into(), Slot::Deleted);
        m
    }

    #[test]
    fn a_sealed_manifest_opens_as_written_only_for_its_key_and_directory() {
        let m = sample();
        let sealed = m.seal(&key(1), SCOPE);
        assert_eq!(Manifest::open(&sealed, &key(1), SCOPE), Ok(m));
        assert_eq!(
            Manifest::open(&sealed, &key(2), SCOPE),
            Err(ManifestError::Mac)
        );
        let other = Scope {
            directory: "step-2/",
            ..SCOPE
        };
        assert!(matches!(
            Manifest::open(&sealed, &key(1), other),
            Err(ManifestError::Elsewhere(_))
        ));
    }

    #[test]
    fn a_manifest_with_any_field_changed_fails_its_mac() {
        let sealed = String::from_utf8(sample().seal(&key(1), SCOPE)).expect("utf8");
        for (from, to) in [
            ("\"counter\":7", "\"counter\":9"),
            ("0000000000000abc", "0000000000000abd"),
            ("\"n\":10", "\"n\":11"),
            ("{\"g\":\"0000000000000abc\",\"n\":10}", "{}"),
        ] {
            assert!(sealed.contains(from), "{from} in {sealed}");
            let changed = sealed.replace(from, to);
            assert_eq!(
                Manifest::open(changed.as_bytes(), &key(1), SCOPE),
                Err(ManifestError::Mac),
                "{from} → {to}"
            );
        }
        // An entry dropped: the MAC covers the set of keys too.
        let mut fewer = sample();
        fewer.objects.remove("step-1/gone");
        let mac = sealed.split("\"mac\":").nth(1).expect("mac").to_owned();
        let forged = String::from_utf8(fewer.seal(&key(1), SCOPE)).expect("utf8");
        let forged = format!(
            "{}\"mac\":{mac}",
            forged.split("\"mac\":").next().expect("head")
        );
        assert_eq!(
            Manifest::open(forged.as_bytes(), &key(1), SCOPE),
            Err(ManifestError::Mac)
        );
    }

    #[test]
    fn only_the_newest_generation_of_a_named_key_passes() {
        let m = sample();
        let entry = |g| Entry {
            segment_size: 16,
            generation: g,
            plaintext: Some(10),
            parts: None,
        };
        let stored = sluice_crypt::Layout::new(16, 10)
            .expect("layout")
            .ciphertext_len();
        assert_eq!(m.check("step-1/shard-0", &entry(0xabc), stored), Ok(()));
        assert!(m.check("step-1/shard-0", &entry(0xabb), stored).is_err());
        assert!(m.check("step-1/gone", &entry(1), stored).is_err());
        assert_eq!(
            m.check("step-1/unnamed", &entry(1), stored),
            Ok(()),
            "written before the manifest"
        );
    }

    #[test]
    fn redb_marks_only_rise_and_survive_reopening() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("meta.redb");
        {
            let (catalog, _) = Catalog::open(&path).expect("catalog");
            let marks = RedbHighWater::new(Arc::new(catalog));
            assert_eq!(marks.get(SCOPE), Ok(0));
            marks.raise(SCOPE, 5).expect("raise");
            marks.raise(SCOPE, 3).expect("lower is a no-op");
            assert_eq!(marks.get(SCOPE), Ok(5));
        }
        let (catalog, _) = Catalog::open(&path).expect("reopen");
        let marks = RedbHighWater::new(Arc::new(catalog));
        assert_eq!(marks.get(SCOPE), Ok(5));
        let other = Scope {
            bucket: "other",
            ..SCOPE
        };
        assert_eq!(marks.get(other), Ok(0));
    }
}
