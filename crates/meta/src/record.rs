//! Records stored in the catalog tables, and how an object's value is laid out.
//!
//! Every record is JSON. An object's value is its record's JSON alone when its body is in
//! blobs — exactly as before inline objects existed, so every catalog written earlier reads
//! unchanged. An inline object's value is an envelope carrying the body after the record:
//!
//! ```text
//! 0x01 | record JSON length (u32, little-endian) | record JSON | body bytes
//! ```
//!
//! JSON never starts with 0x01, so the first byte tells the two apart, and code older than
//! inline objects refuses such a value as corrupt rather than reading it as an object with
//! no bytes. The body is raw (no base64), and readers that only need the record (HEAD,
//! listings, eviction) skip it without copying.
//!
//! Segments and parts carry their blob's checksums (`checksums`, issue #30: per-chunk
//! CRC-64/NVME and the client's checksum) as an optional field: a record written before they
//! existed reads as one without (its bytes are served unverified, and counted, by the
//! reader), and a record with them is plain JSON older code also reads, ignoring the field.
//!
//! An inline object's record carries its body's checksums the same way (`inline_checksums`:
//! the CRC-64/NVME of the body, one chunk, and the client's checksum if it sent one), inside
//! the envelope's record JSON, so every engine that stores the record keeps them (the
//! embedded envelope, PostgreSQL's `record` column, the recovery record). Optional too: an
//! envelope written before it existed reads unchanged, its body served unverified. A record
//! whose inline checksums do not cover its body is refused at decode, never half-verified;
//! the bytes themselves are checked by the reader (`sluice_s3::blob::integrity`), which
//! counts and logs a mismatch where it serves the request.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{MetaError, Result};

/// One immutable blob in the backend, part of an object's body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Segment {
    /// Blob name under the tenant's backend prefix.
    pub blob: String,
    pub size: u64,
    /// The blob's checksums, taken as it was written (see [`SegmentChecksums`]). `None` in
    /// records written before they existed: such a segment is served unverified.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksums: Option<SegmentChecksums>,
}

/// The checksums of one blob, computed on the way in and verified on every read.
///
/// The blob is cut into chunks of `chunk_size` bytes (the last one shorter) and each chunk
/// has its CRC-64/NVME. The same JSON is the `checksums` of a segment in a recovery record
/// (`docs/design/blob-record.md`), so a catalog rebuilt from the store keeps them. Added
/// within the record's format: a record without them reads as before (no checksums), and a
/// record with an algorithm this code does not know is refused, never half-verified.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentChecksums {
    pub algorithm: ChunkAlgorithm,
    /// Bytes per checksummed chunk; the last chunk may be shorter.
    pub chunk_size: u64,
    /// One CRC per chunk, in order (lower-case hex, 16 digits, in JSON).
    #[serde(with = "hex_u64s")]
    pub values: Vec<u64>,
    /// The checksum the client declared for this blob's bytes (a PutObject's body or an
    /// UploadPart's), verified on arrival; returned to clients that ask for checksums.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<ClientChecksum>,
}

/// The algorithm of a segment's chunk checksums.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChunkAlgorithm {
    /// CRC-64/NVME (the checksum S3 keeps by default; hardware-accelerated by carry-less
    /// multiplication on x86-64 and aarch64).
    Crc64nvme,
}

/// A checksum a client sent with a body: S3's algorithm name (`CRC32`, `CRC32C`,
/// `CRC64NVME`, `SHA1`, `SHA256`) and the base64 value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientChecksum {
    pub algorithm: String,
    pub value: String,
}

impl SegmentChecksums {
    /// How many chunks a blob of `size` bytes has at this chunk size.
    pub fn chunks_for(&self, size: u64) -> u64 {
        size.div_ceil(self.chunk_size.max(1))
    }

    /// Whether these checksums can describe a blob of `size` bytes: a chunk size, and one
    /// value per chunk.
    pub fn fits(&self, size: u64) -> bool {
        self.chunk_size > 0 && self.values.len() as u64 == self.chunks_for(size)
    }
}

/// `Vec<u64>` as JSON strings of 16 lower-case hex digits.
mod hex_u64s {
    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(values: &[u64], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(values.iter().map(|v| format!("{v:016x}")))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u64>, D::Error> {
        let strings = Vec::<String>::deserialize(d)?;
        strings
            .iter()
            .map(|h| {
                u64::from_str_radix(h, 16)
                    .map_err(|_| D::Error::custom(format!("checksum {h:?} is not hex")))
            })
            .collect()
    }
}

/// A visible object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct ObjectRecord {
    pub size: u64,
    /// The S3 ETag without quotes: hex MD5, or hex MD5-of-MD5s `-N` for multipart.
    pub etag: String,
    /// Milliseconds since the Unix epoch.
    pub last_modified_ms: i64,
    pub content_type: Option<String>,
    /// Other representation headers (Cache-Control, Content-Encoding, ...), by lower-case name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// User metadata (`x-amz-meta-*`), keys without the prefix.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
    /// The body, in order. Empty for an inline object (zero-length PUTs are inline too).
    pub segments: Vec<Segment>,
    /// The body is kept in the catalog with this record (a small object) instead of in
    /// blobs; `segments` is then empty. The bytes are not a field: the catalog hands them
    /// out beside the record (`Catalog::get_object_with_body`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub inline: bool,
    /// The checksums of an inline body, taken as it arrived: its CRC-64/NVME (one chunk, as
    /// a segment's) and the client's checksum when it sent one. `None` for a blob object,
    /// and for inline records written before they existed (served unverified). Only an
    /// inline record may carry them, and they must cover its `size` (see [`encode_object`]).
    /// Boxed: most records have none, and listings hold records by the thousand.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inline_checksums: Option<Box<SegmentChecksums>>,
    /// Number of parts for a multipart object (for `x-amz-mp-parts-count`), else 0.
    #[serde(default)]
    pub parts: u32,
    /// The record's version at its key, set by the catalog in the transaction that commits
    /// it: `max(previous.version + 1, now in microseconds)`, so monotonic per key with no
    /// global counter (see [`next_version`]). Records written before versions existed read
    /// as 0. What a caller sets before a commit is ignored.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub version: u64,
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference
fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// The version a commit gives a key whose current record has version `previous` (`None`: no
/// record): `max(previous + 1, now in microseconds since the Unix epoch)`.
pub fn next_version(previous: Option<u64>) -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
    previous.map_or(now, |p| now.max(p.saturating_add(1)))
}

impl ObjectRecord {
    pub fn blobs(&self) -> impl Iterator<Item = &str> {
        self.segments.iter().map(|s| s.blob.as_str())
    }
}

/// First byte of an inline object's value (see the module doc).
const INLINE_TAG: u8 = 0x01;
/// Bytes before an inline value's record JSON: the tag and the JSON's length.
const ENVELOPE: usize = 1 + 4;

pub(crate) fn to_json<T: Serialize>(v: &T) -> Vec<u8> {
    // Serializing plain records of strings and integers to JSON cannot fail.
    serde_json::to_vec(v).unwrap_or_default()
}

/// The stored value of an object: its record, and its body if it is inline. `body` must be
/// present exactly when `rec.inline` is set, with `rec.size` bytes and no segments.
pub fn encode_object(rec: &ObjectRecord, body: Option<&[u8]>) -> Result<Vec<u8>> {
    let Some(body) = body else {
        if rec.inline {
            return Err(MetaError::Inconsistent("an inline object without its body"));
        }
        if rec.inline_checksums.is_some() {
            return Err(MetaError::Inconsistent(
                "inline checksums on an object whose body is in blobs",
            ));
        }
        return Ok(to_json(rec));
    };
    if !rec.inline || !rec.segments.is_empty() || rec.size != body.len() as u64 {
        return Err(MetaError::Inconsistent(
            "an inline body must come with an inline record of its size and no segments",
        ));
    }
    if !inline_checksums_fit(rec) {
        return Err(MetaError::Inconsistent(
            "an inline body's checksums must cover its size",
        ));
    }
    let json = to_json(rec);
    let len = u32::try_from(json.len())
        .map_err(|_| MetaError::Inconsistent("object record too large"))?;
    let mut value = Vec::with_capacity(ENVELOPE + json.len() + body.len());
    value.push(INLINE_TAG);
    value.extend_from_slice(&len.to_le_bytes());
    value.extend_from_slice(&json);
    value.extend_from_slice(body);
    Ok(value)
}

/// Splits an object's stored value into its record and, for an inline object, its body.
fn split_object(value: &[u8]) -> Result<(ObjectRecord, Option<&[u8]>)> {
    let corrupt = |what: &str| MetaError::Corrupt(format!("object value: {what}"));
    if value.first() != Some(&INLINE_TAG) {
        let rec: ObjectRecord =
            serde_json::from_slice(value).map_err(|e| MetaError::Corrupt(e.to_string()))?;
        if rec.inline {
            return Err(corrupt("an inline record without its body"));
        }
        return Ok((rec, None));
    }
    let len = value
        .get(1..ENVELOPE)
        .and_then(|b| <[u8; 4]>::try_from(b).ok())
        .map(u32::from_le_bytes)
        .ok_or_else(|| corrupt("truncated envelope"))?;
    let end = ENVELOPE + len as usize;
    let json = value
        .get(ENVELOPE..end)
        .ok_or_else(|| corrupt("truncated record"))?;
    let rec: ObjectRecord =
        serde_json::from_slice(json).map_err(|e| MetaError::Corrupt(e.to_string()))?;
    let body = &value[end..];
    if !rec.inline || !rec.segments.is_empty() || rec.size != body.len() as u64 {
        return Err(corrupt("the inline body does not match its record"));
    }
    if !inline_checksums_fit(&rec) {
        return Err(corrupt("the inline body's checksums do not cover it"));
    }
    Ok((rec, Some(body)))
}

/// Whether an inline record's checksums (if any) describe a body of its size.
pub(crate) fn inline_checksums_fit(rec: &ObjectRecord) -> bool {
    rec.inline_checksums
        .as_ref()
        .is_none_or(|sums| rec.inline && sums.fits(rec.size))
}

/// An object's record from its stored value, without copying an inline body.
pub fn decode_object(value: &[u8]) -> Result<ObjectRecord> {
    split_object(value).map(|(rec, _)| rec)
}

/// An object's record and, if it is inline, a copy of its body.
pub fn decode_object_with_body(value: &[u8]) -> Result<(ObjectRecord, Option<Vec<u8>>)> {
    split_object(value).map(|(rec, body)| (rec, body.map(<[u8]>::to_vec)))
}

/// An uploaded part of a multipart upload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartRecord {
    pub blob: String,
    pub size: u64,
    /// Hex MD5 of the part.
    pub etag: String,
    pub last_modified_ms: i64,
    /// The part's blob's checksums (see [`Segment::checksums`]); the completed object's
    /// segment takes them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksums: Option<SegmentChecksums>,
}

/// A multipart upload in progress.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct UploadRecord {
    pub key: String,
    pub initiated_ms: i64,
    pub content_type: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
    #[serde(default)]
    pub parts: BTreeMap<u32, PartRecord>,
}

impl UploadRecord {
    pub fn bytes(&self) -> u64 {
        self.parts.values().map(|p| p.size).sum()
    }
}

/// What a conditional write requires of the object it replaces (S3's `If-None-Match: *` and
/// `If-Match` on PutObject, CompleteMultipartUpload and CopyObject), checked by the catalog
/// in the write transaction that commits the new object.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Precondition {
    /// Unconditional.
    #[default]
    None,
    /// Create-only: no object may be at the key.
    IfAbsent,
    /// Replace-only (`If-Match: *`): some object must be at the key.
    IfPresent,
    /// Compare-and-swap: an object must be at the key, with this ETag (without quotes).
    IfEtag(String),
}

impl Precondition {
    /// `Ok` when `current` (the object now at the key) satisfies the condition.
    pub fn check(&self, current: Option<&ObjectRecord>) -> Result<()> {
        let holds = match self {
            Self::None => true,
            Self::IfAbsent => current.is_none(),
            Self::IfPresent => current.is_some(),
            Self::IfEtag(etag) => current.is_some_and(|c| c.etag == *etag),
        };
        if holds {
            Ok(())
        } else {
            Err(MetaError::PreconditionFailed)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_written_before_checksums_reads_without_them() {
        let old = br#"{"size":3,"etag":"e","last_modified_ms":1,"content_type":null,
            "segments":[{"blob":"b/00/x","size":3}],"parts":0}"#;
        let rec = decode_object(old).expect("an old record reads");
        assert_eq!(rec.segments[0].checksums, None);
        let part: PartRecord =
            serde_json::from_slice(br#"{"blob":"p","size":1,"etag":"e","last_modified_ms":0}"#)
                .expect("an old part reads");
        assert_eq!(part.checksums, None);
    }

    #[test]
    fn checksums_round_trip_as_hex_and_an_unknown_algorithm_is_refused() {
        let sums = SegmentChecksums {
            algorithm: ChunkAlgorithm::Crc64nvme,
            chunk_size: 4,
            values: vec![u64::MAX, 1],
            client: Some(ClientChecksum {
                algorithm: "CRC32".into(),
                value: "AAAAAA==".into(),
            }),
        };
        assert!(sums.fits(8) && sums.fits(5) && !sums.fits(9) && !sums.fits(4));
        let rec = ObjectRecord {
            size: 8,
            segments: vec![Segment {
                blob: "b/00/x".into(),
                size: 8,
                checksums: Some(sums),
            }],
            ..ObjectRecord::default()
        };
        let value = encode_object(&rec, None).expect("encode");
        let text = String::from_utf8(value.clone()).expect("json");
        assert!(
            text.contains(r#""values":["ffffffffffffffff","0000000000000001"]"#),
            "{text}"
        );
        assert_eq!(decode_object(&value).expect("decode"), rec);
        let other = text.replace("crc64nvme", "md5");
        assert!(decode_object(other.as_bytes()).is_err());
    }

    fn crc_sums(values: Vec<u64>) -> SegmentChecksums {
        SegmentChecksums {
            algorithm: ChunkAlgorithm::Crc64nvme,
            chunk_size: 1024 * 1024,
            values,
            client: None,
        }
    }

    fn inline_rec(size: u64, sums: Option<SegmentChecksums>) -> ObjectRecord {
        ObjectRecord {
            size,
            etag: "e".into(),
            inline: true,
            inline_checksums: sums.map(Box::new),
            ..ObjectRecord::default()
        }
    }

    #[test]
    fn an_inline_envelope_written_before_inline_checksums_reads_unchanged() {
        // The envelope as code before inline checksums wrote it: tag, length, JSON, body.
        let json = br#"{"size":3,"etag":"e","last_modified_ms":1,"content_type":null,"segments":[],"inline":true,"parts":0}"#;
        let mut value = vec![INLINE_TAG];
        value.extend_from_slice(&u32::try_from(json.len()).expect("len").to_le_bytes());
        value.extend_from_slice(json);
        value.extend_from_slice(b"abc");
        let (rec, body) = decode_object_with_body(&value).expect("an old envelope reads");
        assert_eq!(body.as_deref(), Some(&b"abc"[..]));
        assert!(rec.inline && rec.inline_checksums.is_none(), "{rec:?}");
        // And a record without them is written exactly as before (no new field in the JSON).
        let again = encode_object(&rec, Some(b"abc")).expect("encode");
        assert!(!String::from_utf8_lossy(&again).contains("inline_checksums"));
    }

    #[test]
    fn an_inline_bodys_checksums_round_trip_in_the_envelope_with_the_clients() {
        let mut sums = crc_sums(vec![0x0123_4567_89ab_cdef]);
        sums.client = Some(ClientChecksum {
            algorithm: "CRC32".into(),
            value: "NhCmhg==".into(),
        });
        let rec = inline_rec(5, Some(sums));
        let value = encode_object(&rec, Some(b"hello")).expect("encode");
        assert_eq!(value[0], INLINE_TAG);
        let text = String::from_utf8_lossy(&value);
        assert!(
            text.contains(r#""inline_checksums":{"algorithm":"crc64nvme""#),
            "{text}"
        );
        assert!(text.contains("0123456789abcdef"), "{text}");
        let (back, body) = decode_object_with_body(&value).expect("decode");
        assert_eq!((back, body.as_deref()), (rec, Some(&b"hello"[..])));
        // An empty inline body has no chunk, so no value.
        let empty = inline_rec(0, Some(crc_sums(Vec::new())));
        let value = encode_object(&empty, Some(b"")).expect("encode empty");
        assert_eq!(decode_object(&value).expect("decode empty"), empty);
    }

    #[test]
    fn inline_checksums_that_do_not_cover_the_body_are_refused_both_ways() {
        // Two values for a 5-byte body, or none: not a description of this body.
        for values in [vec![1, 2], Vec::new()] {
            let rec = inline_rec(5, Some(crc_sums(values)));
            assert!(matches!(
                encode_object(&rec, Some(b"hello")),
                Err(MetaError::Inconsistent(_))
            ));
            // Written by other code (or damaged on disk): refused when read, not half-read.
            let json = to_json(&rec);
            let mut value = vec![INLINE_TAG];
            value.extend_from_slice(&u32::try_from(json.len()).expect("len").to_le_bytes());
            value.extend_from_slice(&json);
            value.extend_from_slice(b"hello");
            assert!(matches!(
                decode_object_with_body(&value),
                Err(MetaError::Corrupt(_))
            ));
        }
        // Inline checksums on a blob object's record are a contradiction.
        let blob = ObjectRecord {
            inline_checksums: Some(Box::new(crc_sums(vec![1]))),
            ..ObjectRecord::default()
        };
        assert!(matches!(
            encode_object(&blob, None),
            Err(MetaError::Inconsistent(_))
        ));
    }
}
