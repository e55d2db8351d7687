//! Recovery records: what the catalog knows of each object, kept in the backend beside its
//! bytes, so a lost catalog can be rebuilt from the store alone (`docs/design/blob-record.md`
//! is the format's reference; this module is its one implementation).
//!
//! # Names (under the tenant's prefix, `tenants/<id>/`)
//!
//! - `<bucket>/rec/bucket.json`: the bucket exists (written at CreateBucket).
//! - `<bucket>/rec/<64 hex>/<20 digits>.json`: the object at the key whose SHA-256 is the
//!   hex, at that record version (zero-padded, so a listing sorts versions).
//!
//! Blobs are `<bucket>/<2 hex>/...`: a two-character directory never equals `rec`, so a
//! name is a blob or a record by its second component alone ([`Name::parse`]).
//!
//! # Ordering (the front keeps it)
//!
//! Write: blob(s) durable → catalog commit (which returns the version) → record written →
//! the catalog read again: if the key no longer holds this version (a racing overwrite or
//! delete committed in between), the record just written is deleted → acknowledgement.
//! Delete or overwrite: catalog commit → the old record and the old blobs deleted →
//! acknowledgement. A crash between steps leaves only what `sluice catalog check` reports
//! and `sluice catalog gc` collects; an acknowledged object always has its record.

mod inventory;
pub mod rebuild;
pub mod scrub;

pub use inventory::{CatalogView, Finding, Report, inventory};
pub use rebuild::{GcOptions, GcSummary, RebuildSummary, RecoveryError, check, gc, rebuild};

use std::collections::BTreeMap;

use base64::Engine as _;
use bytes::Bytes;
use s3s::crypto::{Checksum as _, Sha256};
use serde::{Deserialize, Serialize};
use sluice_meta::{ObjectRecord, Segment, SegmentChecksums};

/// The `format` of every record this code writes; a reader refuses any other.
pub const FORMAT: &str = "sluice.recovery/1";

/// The directory of a bucket's recovery records.
const DIR: &str = "rec";

/// The hex SHA-256 of an object key: the directory of its records.
pub fn key_hash(key: &str) -> String {
    crate::blob::hex(Sha256::checksum(key.as_bytes()).as_ref())
}

/// The name of the record of `key` at `version`.
pub fn object_record_name(bucket: &str, key: &str, version: u64) -> String {
    format!("{bucket}/{DIR}/{}/{version:020}.json", key_hash(key))
}

/// The name of a bucket's record.
pub fn bucket_record_name(bucket: &str) -> String {
    format!("{bucket}/{DIR}/bucket.json")
}

/// What a name under a tenant's prefix is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Name<'a> {
    Blob,
    Bucket {
        bucket: &'a str,
    },
    Object {
        bucket: &'a str,
        key_hash: &'a str,
        version: u64,
    },
    /// Under `rec/` but not a name this code writes.
    Unknown,
}

impl<'a> Name<'a> {
    pub fn parse(name: &'a str) -> Self {
        let mut parts = name.split('/');
        let (Some(bucket), Some(dir)) = (parts.next(), parts.next()) else {
            return Self::Blob;
        };
        if dir != DIR {
            return Self::Blob;
        }
        let rest: Vec<&str> = parts.collect();
        match rest.as_slice() {
            ["bucket.json"] => Self::Bucket { bucket },
            [hash, file] if hash.len() == 64 => match file
                .strip_suffix(".json")
                .and_then(|v| v.parse::<u64>().ok())
            {
                Some(version) => Self::Object {
                    bucket,
                    key_hash: hash,
                    version,
                },
                None => Self::Unknown,
            },
            _ => Self::Unknown,
        }
    }
}

/// A bucket's record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BucketRecord {
    pub format: String,
    pub tenant: String,
    pub bucket: String,
    pub created_ms: i64,
}

impl BucketRecord {
    pub fn new(tenant: &str, bucket: &str, created_ms: i64) -> Self {
        Self {
            format: FORMAT.to_owned(),
            tenant: tenant.to_owned(),
            bucket: bucket.to_owned(),
            created_ms,
        }
    }
}

/// One segment of an object's body as its record lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordSegment {
    pub blob: String,
    pub size: u64,
    /// Per-chunk CRC-64/NVME of the segment, as the catalog record holds them (absent in
    /// records of objects written before checksums existed). A record whose checksums do not
    /// fit its segment's size is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksums: Option<SegmentChecksums>,
}

/// An object's record: everything its catalog record needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectRecovery {
    pub format: String,
    pub tenant: String,
    pub bucket: String,
    pub key: String,
    /// The catalog record's version at its key (monotonic per key).
    pub version: u64,
    pub size: u64,
    pub etag: String,
    pub last_modified_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    /// Cache-Control, Content-Disposition, Content-Encoding, Content-Language, Expires, by
    /// lower-case name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// User metadata, keys without `x-amz-meta-`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
    /// Parts of a multipart object (0 for any other).
    #[serde(default)]
    pub parts: u32,
    /// The body's blobs in order; empty when the body is inline.
    #[serde(default)]
    pub segments: Vec<RecordSegment>,
    /// The body (base64) of an object the catalog keeps inline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inline: Option<String>,
    /// The inline body's checksums as its catalog record keeps them (its CRC-64/NVME and the
    /// client's checksum); absent for blob objects and for inline objects written before
    /// they existed. A record whose checksums do not cover its inline body is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inline_checksums: Option<SegmentChecksums>,
}

/// Why a record could not be read.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("not JSON of a recovery record: {0}")]
    Json(#[from] serde_json::Error),
    #[error("format {0:?}, not {FORMAT:?}")]
    Format(String),
    #[error("the inline body is not base64: {0}")]
    Base64(#[from] base64::DecodeError),
    #[error("the record contradicts itself: {0}")]
    Inconsistent(&'static str),
}

impl ObjectRecovery {
    /// The record of `rec` (committed at `key`, its `version` set), with its inline body.
    pub fn new(
        tenant: &str,
        bucket: &str,
        key: &str,
        rec: &ObjectRecord,
        inline: Option<&[u8]>,
    ) -> Self {
        Self {
            format: FORMAT.to_owned(),
            tenant: tenant.to_owned(),
            bucket: bucket.to_owned(),
            key: key.to_owned(),
            version: rec.version,
            size: rec.size,
            etag: rec.etag.clone(),
            last_modified_ms: rec.last_modified_ms,
            content_type: rec.content_type.clone(),
            headers: rec.headers.clone(),
            metadata: rec.metadata.clone(),
            parts: rec.parts,
            segments: rec
                .segments
                .iter()
                .map(|s| RecordSegment {
                    blob: s.blob.clone(),
                    size: s.size,
                    checksums: s.checksums.clone(),
                })
                .collect(),
            inline: inline.map(|b| base64::engine::general_purpose::STANDARD.encode(b)),
            inline_checksums: rec.inline_checksums.as_deref().cloned(),
        }
    }

    pub fn to_json(&self) -> Bytes {
        // Plain strings, integers and maps of strings: serializing cannot fail.
        Bytes::from(serde_json::to_vec(self).unwrap_or_default())
    }

    /// Parses and checks a record: its format, and that its body adds up to its size.
    pub fn from_json(bytes: &[u8]) -> Result<Self, RecordError> {
        let r: Self = serde_json::from_slice(bytes)?;
        if r.format != FORMAT {
            return Err(RecordError::Format(r.format));
        }
        let body = r.body()?;
        let stored = match &body {
            Some(b) if r.segments.is_empty() => b.len() as u64,
            Some(_) => return Err(RecordError::Inconsistent("an inline body and segments")),
            None => r.segments.iter().map(|s| s.size).sum(),
        };
        if stored != r.size {
            return Err(RecordError::Inconsistent(
                "the body's size is not the record's",
            ));
        }
        if r.segments
            .iter()
            .any(|s| s.checksums.as_ref().is_some_and(|c| !c.fits(s.size)))
        {
            return Err(RecordError::Inconsistent(
                "a segment's checksums do not cover its size",
            ));
        }
        if let Some(sums) = &r.inline_checksums
            && (body.is_none() || !sums.fits(r.size))
        {
            return Err(RecordError::Inconsistent(
                "the inline checksums do not cover an inline body",
            ));
        }
        Ok(r)
    }

    /// The inline body, decoded.
    pub fn body(&self) -> Result<Option<Vec<u8>>, RecordError> {
        self.inline
            .as_deref()
            .map(|b| base64::engine::general_purpose::STANDARD.decode(b))
            .transpose()
            .map_err(RecordError::from)
    }

    /// The catalog record this stands for (the version kept).
    pub fn to_object(&self) -> ObjectRecord {
        ObjectRecord {
            size: self.size,
            etag: self.etag.clone(),
            last_modified_ms: self.last_modified_ms,
            content_type: self.content_type.clone(),
            headers: self.headers.clone(),
            metadata: self.metadata.clone(),
            segments: self
                .segments
                .iter()
                .map(|s| Segment {
                    blob: s.blob.clone(),
                    size: s.size,
                    checksums: s.checksums.clone(),
                })
                .collect(),
            inline: self.inline.is_some(),
            inline_checksums: self.inline_checksums.clone().map(Box::new),
            parts: self.parts,
            version: self.version,
        }
    }

    /// Its name in the backend.
    pub fn name(&self) -> String {
        object_record_name(&self.bucket, &self.key, self.version)
    }
}

#[cfg(test)]
mod tests;
