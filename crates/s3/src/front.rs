//! The S3 operations, each confined to the caller's namespace.
//!
//! Every handler takes the tenant from [`Caller`] (attached by the access check) and passes it
//! to every catalog and blob call; there is no code path that takes a tenant from the request
//! itself. Another tenant's bucket is simply absent from the caller's namespace, so errors
//! about it are the same as for a bucket that does not exist.
//!
//! Write ordering: blob written and fsynced → catalog transaction (object visible, usage
//! settled) → old blobs deleted. Delete ordering: catalog first, blobs after.

mod buckets;
mod listing;
mod multipart;
mod objects;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use s3s::dto::{self, Timestamp};
use s3s::{S3, S3Request, S3Response, S3Result};
use sluice_meta::{Catalog, MetaError};

use crate::auth::Caller;
use crate::blob::BlobStore;
use crate::error::{ApiError, ApiResult};

/// Settings of the front end.
#[derive(Debug, Clone)]
pub struct FrontConfig {
    pub region: String,
    /// Largest object body accepted by PutObject (and per part by UploadPart).
    pub max_object_size: u64,
}

/// The S3 service implementation. Cheap to clone.
#[derive(Clone)]
pub struct Front {
    inner: Arc<Inner>,
}

struct Inner {
    catalog: Arc<Catalog>,
    blobs: Arc<BlobStore>,
    config: FrontConfig,
}

impl Front {
    pub fn new(catalog: Arc<Catalog>, blobs: Arc<BlobStore>, config: FrontConfig) -> Self {
        Self {
            inner: Arc::new(Inner {
                catalog,
                blobs,
                config,
            }),
        }
    }

    pub fn catalog(&self) -> &Arc<Catalog> {
        &self.inner.catalog
    }

    pub fn blobs(&self) -> &Arc<BlobStore> {
        &self.inner.blobs
    }

    fn config(&self) -> &FrontConfig {
        &self.inner.config
    }

    /// Runs a (blocking) catalog call on the blocking pool.
    async fn meta<T, F>(&self, f: F) -> ApiResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Catalog) -> Result<T, MetaError> + Send + 'static,
    {
        let catalog = Arc::clone(&self.inner.catalog);
        tokio::task::spawn_blocking(move || f(&catalog))
            .await
            .map_err(|e| ApiError::Internal(format!("catalog task: {e}")))?
            .map_err(ApiError::from)
    }
}

/// The tenant the access check attached to this request.
fn caller<T>(req: &S3Request<T>) -> ApiResult<Arc<str>> {
    req.extensions
        .get::<Caller>()
        .map(|c| Arc::clone(&c.0))
        .ok_or(ApiError::AccessDenied)
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn timestamp(ms: i64) -> Timestamp {
    let ms = u64::try_from(ms).unwrap_or(0);
    Timestamp::from(UNIX_EPOCH + Duration::from_millis(ms))
}

fn etag(hex: &str) -> dto::ETag {
    dto::ETag::Strong(hex.to_owned())
}

fn ok<T>(output: T) -> S3Result<S3Response<T>> {
    Ok(S3Response::new(output))
}

#[async_trait::async_trait]
impl S3 for Front {
    async fn list_buckets(
        &self,
        req: S3Request<dto::ListBucketsInput>,
    ) -> S3Result<S3Response<dto::ListBucketsOutput>> {
        ok(self.list_buckets_op(&caller(&req)?).await?)
    }

    async fn create_bucket(
        &self,
        req: S3Request<dto::CreateBucketInput>,
    ) -> S3Result<S3Response<dto::CreateBucketOutput>> {
        ok(self.create_bucket_op(&caller(&req)?, req.input).await?)
    }

    async fn delete_bucket(
        &self,
        req: S3Request<dto::DeleteBucketInput>,
    ) -> S3Result<S3Response<dto::DeleteBucketOutput>> {
        ok(self.delete_bucket_op(&caller(&req)?, req.input).await?)
    }

    async fn head_bucket(
        &self,
        req: S3Request<dto::HeadBucketInput>,
    ) -> S3Result<S3Response<dto::HeadBucketOutput>> {
        ok(self.head_bucket_op(&caller(&req)?, req.input).await?)
    }

    async fn get_bucket_location(
        &self,
        req: S3Request<dto::GetBucketLocationInput>,
    ) -> S3Result<S3Response<dto::GetBucketLocationOutput>> {
        ok(self
            .get_bucket_location_op(&caller(&req)?, req.input)
            .await?)
    }

    async fn get_bucket_versioning(
        &self,
        req: S3Request<dto::GetBucketVersioningInput>,
    ) -> S3Result<S3Response<dto::GetBucketVersioningOutput>> {
        ok(self
            .get_bucket_versioning_op(&caller(&req)?, req.input)
            .await?)
    }

    async fn put_object(
        &self,
        req: S3Request<dto::PutObjectInput>,
    ) -> S3Result<S3Response<dto::PutObjectOutput>> {
        ok(self.put_object_op(&caller(&req)?, req.input).await?)
    }

    async fn get_object(
        &self,
        req: S3Request<dto::GetObjectInput>,
    ) -> S3Result<S3Response<dto::GetObjectOutput>> {
        ok(self.get_object_op(&caller(&req)?, req.input).await?)
    }

    async fn head_object(
        &self,
        req: S3Request<dto::HeadObjectInput>,
    ) -> S3Result<S3Response<dto::HeadObjectOutput>> {
        ok(self.head_object_op(&caller(&req)?, req.input).await?)
    }

    async fn delete_object(
        &self,
        req: S3Request<dto::DeleteObjectInput>,
    ) -> S3Result<S3Response<dto::DeleteObjectOutput>> {
        ok(self.delete_object_op(&caller(&req)?, req.input).await?)
    }

    async fn delete_objects(
        &self,
        req: S3Request<dto::DeleteObjectsInput>,
    ) -> S3Result<S3Response<dto::DeleteObjectsOutput>> {
        ok(self.delete_objects_op(&caller(&req)?, req.input).await?)
    }

    async fn copy_object(
        &self,
        req: S3Request<dto::CopyObjectInput>,
    ) -> S3Result<S3Response<dto::CopyObjectOutput>> {
        ok(self.copy_object_op(&caller(&req)?, req.input).await?)
    }

    async fn list_objects(
        &self,
        req: S3Request<dto::ListObjectsInput>,
    ) -> S3Result<S3Response<dto::ListObjectsOutput>> {
        ok(self.list_objects_op(&caller(&req)?, req.input).await?)
    }

    async fn list_objects_v2(
        &self,
        req: S3Request<dto::ListObjectsV2Input>,
    ) -> S3Result<S3Response<dto::ListObjectsV2Output>> {
        ok(self.list_objects_v2_op(&caller(&req)?, req.input).await?)
    }

    async fn list_object_versions(
        &self,
        req: S3Request<dto::ListObjectVersionsInput>,
    ) -> S3Result<S3Response<dto::ListObjectVersionsOutput>> {
        ok(self
            .list_object_versions_op(&caller(&req)?, req.input)
            .await?)
    }

    async fn create_multipart_upload(
        &self,
        req: S3Request<dto::CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<dto::CreateMultipartUploadOutput>> {
        ok(self
            .create_multipart_upload_op(&caller(&req)?, req.input)
            .await?)
    }

    async fn upload_part(
        &self,
        req: S3Request<dto::UploadPartInput>,
    ) -> S3Result<S3Response<dto::UploadPartOutput>> {
        ok(self.upload_part_op(&caller(&req)?, req.input).await?)
    }

    async fn upload_part_copy(
        &self,
        req: S3Request<dto::UploadPartCopyInput>,
    ) -> S3Result<S3Response<dto::UploadPartCopyOutput>> {
        ok(self.upload_part_copy_op(&caller(&req)?, req.input).await?)
    }

    async fn complete_multipart_upload(
        &self,
        req: S3Request<dto::CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<dto::CompleteMultipartUploadOutput>> {
        ok(self
            .complete_multipart_upload_op(&caller(&req)?, req.input)
            .await?)
    }

    async fn abort_multipart_upload(
        &self,
        req: S3Request<dto::AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<dto::AbortMultipartUploadOutput>> {
        ok(self
            .abort_multipart_upload_op(&caller(&req)?, req.input)
            .await?)
    }

    async fn list_parts(
        &self,
        req: S3Request<dto::ListPartsInput>,
    ) -> S3Result<S3Response<dto::ListPartsOutput>> {
        ok(self.list_parts_op(&caller(&req)?, req.input).await?)
    }

    async fn list_multipart_uploads(
        &self,
        req: S3Request<dto::ListMultipartUploadsInput>,
    ) -> S3Result<S3Response<dto::ListMultipartUploadsOutput>> {
        ok(self
            .list_multipart_uploads_op(&caller(&req)?, req.input)
            .await?)
    }
}
