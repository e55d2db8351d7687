//! Confidential bodies (issue #29): the seam through which the node agent tells the front
//! which tenants' bodies it encrypts, and with what key; the record entry that lets a reader
//! find an encrypted body's identity and shape; the streams that encrypt a body on its way to
//! the disk and decrypt it on its way out (`stream`); the rollback manifests that refuse an
//! older version put back in place of a newer one (`manifest`).
//!
//! The gateway never sets a [`Confidential`], so it stores and serves whatever bodies it is
//! given (on the node agent's drain, ciphertext) as opaque bytes.
//!
//! # What a reader needs, and where it is
//!
//! An encrypted body is `sluice-crypt`'s format (`docs/design/confidential-format.md`); to
//! open it a reader needs the object's [`Identity`] — tenant, bucket, key (all known from the
//! request), a *generation* and a part number — and the segment size. The generation is drawn
//! at random when the body is encrypted (the record's `version` is set at commit, too late),
//! and kept with the object as the user-metadata entry [`ENTRY`]
//! (`x-amz-meta-sluice-confidential: v1 s=<segment size> g=<generation, 16 hex> n=<plaintext
//! length>`, the length added once the body is in), because
//! user metadata is what survives every hop: the local record keeps it, the drain sends it
//! upstream with the body, and the shared tier returns it on every GET and HEAD, so an object
//! evicted here is read back from the tier like a local one. A multipart object adds
//! `p=<plaintext part sizes>` (run-length: `size*count,...`), from which each part's header
//! and segments are found. The entry is not secret (it is in the clear at the gateway, like
//! the sizes it implies); changing it only makes the object fail to open. Clients never see
//! it: the agent strips it from GET, HEAD and listings, and refuses it on writes.
//!
//! The record's `size` and `etag` stay the stored (ciphertext) body's, so quotas, the drain's
//! checks and the gateway all count and compare what is stored; the front reports the
//! plaintext length from the entry.

use std::collections::BTreeMap;
use std::sync::Arc;

pub use buffers::SealBuffers;
pub use sluice_crypt::TenantKey;
use sluice_crypt::{Identity, Layout};

mod buffers;
pub mod manifest;
pub mod stream;

/// Where a tenant's confidential-object key comes from (the node agent implements it; the
/// gateway never sets one, so it stores and serves ciphertext as opaque bytes).
pub trait Confidential: Send + Sync + 'static {
    /// `Ok(None)`: this tenant has no `[tenant.encryption]`: bodies go in clear as today.
    /// `Ok(Some(key))`: encrypt/decrypt this tenant's bodies with it.
    /// `Err(reason)`: the tenant is configured for encryption but its key is not available
    /// (broker refused, unreachable, ...): the front refuses the request with a clear S3
    /// error (503 ServiceUnavailable-style, message naming the reason) — it never writes or
    /// serves plaintext in its place.
    fn tenant_key(&self, tenant: &str) -> Result<Option<Arc<TenantKey>>, String>;
}

/// The user-metadata name of an encrypted object's entry (see the module doc).
pub const ENTRY: &str = "sluice-confidential";

/// An encrypted object's entry: how to open its body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub segment_size: u32,
    pub generation: u64,
    /// A single-PUT object's plaintext length, once known (written with the record, so a
    /// body cut short by whole segments is refused before any byte is sent).
    pub plaintext: Option<u64>,
    /// A multipart object's parts' plaintext sizes, in order; `None` for a single PUT.
    pub parts: Option<Vec<u64>>,
}

/// Why an entry or the body it describes cannot be opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EntryError {
    #[error(
        "the object is not encrypted (no {ENTRY} entry): written before encryption was on for this tenant, or replaced"
    )]
    Missing,
    #[error("the object's {ENTRY} entry is malformed: {0}")]
    Malformed(String),
    #[error("the stored body does not have the length its {ENTRY} entry implies: {0}")]
    Length(sluice_crypt::Error),
}

impl Entry {
    /// A fresh entry for a body about to be encrypted.
    pub fn fresh(segment_size: u32) -> Self {
        Self {
            segment_size,
            generation: rand::random(),
            plaintext: None,
            parts: None,
        }
    }

    pub fn encode(&self) -> String {
        let mut s = format!("v1 s={} g={:016x}", self.segment_size, self.generation);
        if let Some(n) = self.plaintext {
            s.push_str(" n=");
            s.push_str(&n.to_string());
        }
        if let Some(parts) = &self.parts {
            s.push_str(" p=");
            let mut runs: Vec<(u64, u64)> = Vec::new();
            for &p in parts {
                match runs.last_mut() {
                    Some((size, n)) if *size == p => *n += 1,
                    _ => runs.push((p, 1)),
                }
            }
            let runs: Vec<String> = runs.iter().map(|(s, n)| format!("{s}*{n}")).collect();
            s.push_str(&runs.join(","));
        }
        s
    }

    pub fn parse(s: &str) -> Result<Self, EntryError> {
        let bad = |what: &str| EntryError::Malformed(what.to_owned());
        let mut fields = s.split(' ');
        if fields.next() != Some("v1") {
            return Err(bad("not version v1"));
        }
        let (mut size, mut generation, mut plaintext, mut parts) = (None, None, None, None);
        for f in fields {
            let (name, value) = f.split_once('=').ok_or_else(|| bad(f))?;
            match name {
                "s" => size = Some(value.parse::<u32>().map_err(|_| bad("segment size"))?),
                "g" => {
                    generation =
                        Some(u64::from_str_radix(value, 16).map_err(|_| bad("generation"))?);
                }
                "n" => plaintext = Some(value.parse::<u64>().map_err(|_| bad("length"))?),
                "p" => {
                    let mut out = Vec::new();
                    for run in value.split(',') {
                        let (size, n) = run.split_once('*').ok_or_else(|| bad("parts"))?;
                        let size: u64 = size.parse().map_err(|_| bad("part size"))?;
                        let n: usize = n.parse().map_err(|_| bad("part count"))?;
                        if n == 0 || out.len() + n > 10_000 {
                            return Err(bad("part count"));
                        }
                        out.extend(std::iter::repeat_n(size, n));
                    }
                    parts = Some(out);
                }
                _ => return Err(bad(name)),
            }
        }
        Ok(Self {
            segment_size: size.ok_or_else(|| bad("no segment size"))?,
            generation: generation.ok_or_else(|| bad("no generation"))?,
            plaintext,
            parts,
        })
    }

    /// The entry in `metadata`, if there is one.
    pub fn of(metadata: &BTreeMap<String, String>) -> Result<Self, EntryError> {
        Self::parse(metadata.get(ENTRY).ok_or(EntryError::Missing)?)
    }

    /// The object's identity for part `part` (0 for a single PUT).
    pub fn identity<'a>(
        &self,
        tenant: &'a str,
        bucket: &'a str,
        key: &'a str,
        part: u32,
    ) -> Identity<'a> {
        Identity {
            tenant,
            bucket,
            key,
            generation: self.generation,
            part,
        }
    }

    /// The pieces of the stored body, in order: each part's number (0 for a single PUT),
    /// layout and offset in the stored body, checked against its length `stored`.
    pub fn pieces(&self, stored: u64) -> Result<Vec<Piece>, EntryError> {
        let Some(parts) = &self.parts else {
            let layout = Layout::from_ciphertext_len(self.segment_size, stored)
                .map_err(EntryError::Length)?;
            if self.plaintext.is_some_and(|n| n != layout.plaintext_len()) {
                return Err(EntryError::Length(sluice_crypt::Error::Length {
                    len: stored,
                    segment_size: self.segment_size,
                }));
            }
            return Ok(vec![Piece {
                part: 0,
                layout,
                offset: 0,
                plain_offset: 0,
            }]);
        };
        let (mut offset, mut plain_offset, mut out) = (0u64, 0u64, Vec::new());
        for (i, &p) in parts.iter().enumerate() {
            let layout = Layout::new(self.segment_size, p).map_err(EntryError::Length)?;
            out.push(Piece {
                part: u32::try_from(i + 1).unwrap_or(u32::MAX),
                layout,
                offset,
                plain_offset,
            });
            offset += layout.ciphertext_len();
            plain_offset += p;
        }
        if offset != stored {
            return Err(EntryError::Length(sluice_crypt::Error::Length {
                len: stored,
                segment_size: self.segment_size,
            }));
        }
        Ok(out)
    }

    /// The plaintext length of a stored body of `stored` bytes.
    pub fn plaintext_len(&self, stored: u64) -> Result<u64, EntryError> {
        Ok(self
            .pieces(stored)?
            .iter()
            .map(|p| p.layout.plaintext_len())
            .sum())
    }
}

/// One independently encrypted piece of a stored body: the whole of a single-PUT object, or
/// one part of a multipart object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    pub part: u32,
    pub layout: Layout,
    /// Where its header starts in the stored body.
    pub offset: u64,
    /// Where its plaintext starts in the object's plaintext.
    pub plain_offset: u64,
}

/// A stored body that does not decrypt, named with its object: the error a read fails with
/// (before the status line when it can, else in place of the rest of the body).
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "{bucket}/{key}: the stored ciphertext does not authenticate and no byte of it is served \
     (tampered with, truncated, or written under another key or name): {reason}"
)]
pub struct Undecryptable {
    pub bucket: String,
    pub key: String,
    pub reason: String,
}

impl Undecryptable {
    pub fn into_store_error(self) -> object_store::Error {
        object_store::Error::Generic {
            store: "sluice-crypt",
            source: Box::new(self),
        }
    }
}

/// Whether a read failed because its ciphertext did not decrypt.
pub fn is_undecryptable(e: &object_store::Error) -> bool {
    matches!(e, object_store::Error::Generic { source, .. } if source.is::<Undecryptable>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_reads_back_as_written_and_runs_of_equal_parts_stay_short() {
        let mut e = Entry::fresh(65_536);
        assert_eq!(Entry::parse(&e.encode()), Ok(e.clone()));
        e.plaintext = Some(12_345);
        assert_eq!(Entry::parse(&e.encode()), Ok(e.clone()));
        let stored = Layout::new(65_536, 12_345).expect("l").ciphertext_len();
        assert_eq!(e.plaintext_len(stored), Ok(12_345));
        e.plaintext = Some(12_344);
        assert!(
            e.plaintext_len(stored).is_err(),
            "a length the body does not have"
        );
        e.plaintext = None;
        e.parts = Some(vec![8 << 20; 9_999].into_iter().chain([17]).collect());
        let text = e.encode();
        assert!(text.len() < 64, "{text}");
        assert_eq!(Entry::parse(&text), Ok(e));
        for bad in [
            "",
            "v2 s=1 g=0",
            "v1 s=x g=0",
            "v1 g=0",
            "v1 s=16 g=0 p=5*0",
            "v1 s=16 g=0 q=1",
        ] {
            assert!(Entry::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn pieces_of_a_multipart_body_lie_end_to_end_and_must_fill_it() {
        let e = Entry {
            segment_size: 16,
            generation: 7,
            plaintext: None,
            parts: Some(vec![40, 40, 3]),
        };
        let lens: Vec<u64> = [40, 40, 3]
            .iter()
            .map(|&p| Layout::new(16, p).expect("layout").ciphertext_len())
            .collect();
        let total: u64 = lens.iter().sum();
        let pieces = e.pieces(total).expect("pieces");
        assert_eq!(pieces[1].offset, lens[0]);
        assert_eq!(pieces[2].offset, lens[0] + lens[1]);
        assert_eq!(pieces[2].plain_offset, 80);
        assert_eq!(e.plaintext_len(total), Ok(83));
        assert!(e.pieces(total - 1).is_err());
    }
}
