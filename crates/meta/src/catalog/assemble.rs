//! CompleteMultipartUpload's arithmetic, shared by every engine: which parts make the object,
//! and its ETag.

use md5::{Digest, Md5};

use super::{MIN_PART_SIZE, PartSpec};
use crate::{MetaError, ObjectRecord, Result, Segment, UploadRecord};

/// Builds the object from the listed parts (removing them from `upload`), checking order,
/// ETags and the minimum part size. Its ETag is the MD5 of the parts' binary MD5s, `-N`.
/// Its `version` is 0: the engine sets it in the completing transaction.
pub fn assemble_upload(
    upload: &mut UploadRecord,
    parts: &[PartSpec],
    now_ms: i64,
) -> Result<ObjectRecord> {
    if parts.is_empty() {
        return Err(MetaError::InvalidPart(0));
    }
    if parts.windows(2).any(|w| w[1].number <= w[0].number) {
        return Err(MetaError::InvalidPartOrder);
    }
    for (i, p) in parts.iter().enumerate() {
        let stored = upload
            .parts
            .get(&p.number)
            .ok_or(MetaError::InvalidPart(p.number))?;
        if p.etag.trim_matches('"') != stored.etag {
            return Err(MetaError::InvalidPart(p.number));
        }
        if i + 1 < parts.len() && stored.size < MIN_PART_SIZE {
            return Err(MetaError::EntityTooSmall(p.number));
        }
    }
    let mut md5 = Md5::new();
    let mut segments = Vec::with_capacity(parts.len());
    let mut size = 0;
    for p in parts {
        let part = upload
            .parts
            .remove(&p.number)
            .ok_or(MetaError::InvalidPart(p.number))?;
        let digest = hex::decode(&part.etag)
            .ok()
            .ok_or_else(|| MetaError::Corrupt("part etag".into()))?;
        md5.update(&digest);
        size += part.size;
        if part.size > 0 {
            segments.push(Segment {
                blob: part.blob,
                size: part.size,
                checksums: part.checksums,
            });
        } else {
            // An empty part has no bytes to serve; keep its blob for deletion.
            upload.parts.insert(p.number, part);
        }
    }
    let etag = format!("{}-{}", hex::encode(md5.finalize()), parts.len());
    Ok(ObjectRecord {
        size,
        etag,
        last_modified_ms: now_ms,
        content_type: upload.content_type.clone(),
        headers: upload.headers.clone(),
        metadata: upload.metadata.clone(),
        segments,
        inline: false,
        inline_checksums: None,
        parts: u32::try_from(parts.len()).unwrap_or(u32::MAX),
        version: 0,
    })
}
