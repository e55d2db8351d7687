//! Records stored as JSON values in the catalog tables.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One immutable blob in the backend, part of an object's body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Segment {
    /// Blob name under the tenant's backend prefix.
    pub blob: String,
    pub size: u64,
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
    /// The body, in order. Empty for a zero-length object.
    pub segments: Vec<Segment>,
    /// Number of parts for a multipart object (for `x-amz-mp-parts-count`), else 0.
    #[serde(default)]
    pub parts: u32,
}

impl ObjectRecord {
    pub fn blobs(&self) -> impl Iterator<Item = &str> {
        self.segments.iter().map(|s| s.blob.as_str())
    }
}

/// An uploaded part of a multipart upload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartRecord {
    pub blob: String,
    pub size: u64,
    /// Hex MD5 of the part.
    pub etag: String,
    pub last_modified_ms: i64,
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
