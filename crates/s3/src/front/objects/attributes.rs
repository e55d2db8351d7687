//! GetObjectAttributes: an object's ETag, stored checksum, part count, size and storage class
//! in one call, as S3 answers it (what boto3's `get_object_attributes` and the AWS CLI's
//! `s3api get-object-attributes` ask for). The checksum is the one a GET with
//! `x-amz-checksum-mode: ENABLED` returns ([`checksum::of_object`]); an inline object's body
//! is verified against its record before its checksum is answered. With a tier behind the
//! front, an object only the tier has answers what its HEAD tells (no checksum). A
//! confidential tenant's object answers its plaintext size and no checksum.

use s3s::dto;

use super::super::{Front, timestamp};
use crate::checksum::{self, Algorithm};
use crate::error::{ApiError, ApiResult};

/// The attributes S3 defines; any other name is refused, as S3 does.
const KNOWN: [&str; 5] = [
    dto::ObjectAttributes::CHECKSUM,
    dto::ObjectAttributes::ETAG,
    dto::ObjectAttributes::OBJECT_PARTS,
    dto::ObjectAttributes::OBJECT_SIZE,
    dto::ObjectAttributes::STORAGE_CLASS,
];

impl Front {
    pub(in crate::front) async fn get_object_attributes_op(
        &self,
        tenant: &str,
        input: dto::GetObjectAttributesInput,
    ) -> ApiResult<dto::GetObjectAttributesOutput> {
        if input.version_id.as_deref().is_some_and(|v| v != "null") {
            return Err(ApiError::InvalidArgument(
                "versioning is not enabled".into(),
            ));
        }
        // One header, its values comma-separated (s3s hands it over as one value).
        let asked: Vec<&str> = input
            .object_attributes
            .iter()
            .flat_map(|a| a.as_str().split(','))
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .collect();
        if asked.is_empty() {
            return Err(ApiError::InvalidArgument(
                "x-amz-object-attributes must name at least one attribute".into(),
            ));
        }
        if let Some(bad) = asked.iter().find(|a| !KNOWN.contains(a)) {
            return Err(ApiError::InvalidArgument(format!(
                "Invalid attribute name specified: {bad}"
            )));
        }
        let wants = |a: &str| asked.contains(&a);
        let here = if wants(dto::ObjectAttributes::CHECKSUM) {
            self.object_with_body(tenant, &input.bucket, &input.key)
                .await
                .map(|src| {
                    let sum = checksum::of_object(&src.rec, src.inline.as_deref());
                    (src.rec, sum)
                })
        } else {
            self.object(tenant, &input.bucket, &input.key)
                .await
                .map(|rec| (rec, None))
        };
        let (mut rec, mut stored) = match here {
            Ok(found) => found,
            Err(e) => match self.tier_after(&e) {
                Some(tier) => (tier.head(tenant, &input.bucket, &input.key).await?, None),
                None => return Err(e),
            },
        };
        if let Some(key) = self.tenant_key(tenant)? {
            // An encrypted body: its plaintext length, and no checksum (the stored chunks'
            // are of the ciphertext).
            rec = Self::head_sealed(key, tenant, &input.bucket, &input.key, &rec)?;
            stored = None;
        }
        let field = |a: Algorithm| checksum::value(stored.as_ref().map(|(d, _)| d), a);
        Ok(dto::GetObjectAttributesOutput {
            e_tag: wants(dto::ObjectAttributes::ETAG).then(|| dto::ETag::Strong(rec.etag.clone())),
            last_modified: Some(timestamp(rec.last_modified_ms)),
            object_size: wants(dto::ObjectAttributes::OBJECT_SIZE)
                .then(|| i64::try_from(rec.size).unwrap_or(i64::MAX)),
            storage_class: wants(dto::ObjectAttributes::STORAGE_CLASS)
                .then(|| dto::StorageClass::from_static(dto::StorageClass::STANDARD)),
            checksum: stored.as_ref().map(|(_, kind)| dto::Checksum {
                checksum_crc32: field(Algorithm::Crc32),
                checksum_crc32c: field(Algorithm::Crc32c),
                checksum_crc64nvme: field(Algorithm::Crc64Nvme),
                checksum_sha1: field(Algorithm::Sha1),
                checksum_sha256: field(Algorithm::Sha256),
                checksum_type: Some(kind.dto()),
            }),
            object_parts: (wants(dto::ObjectAttributes::OBJECT_PARTS) && rec.parts > 0).then(
                || dto::GetObjectAttributesParts {
                    total_parts_count: Some(i32::try_from(rec.parts).unwrap_or(i32::MAX)),
                    ..Default::default()
                },
            ),
            ..Default::default()
        })
    }
}
