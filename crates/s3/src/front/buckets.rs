//! Bucket operations. A bucket name is unique within a tenant only.

use s3s::dto;

use super::{Front, now_ms, timestamp};
use crate::error::ApiResult;

impl Front {
    pub(super) async fn list_buckets_op(&self, tenant: &str) -> ApiResult<dto::ListBucketsOutput> {
        let t = tenant.to_owned();
        let buckets = self.meta(move |c| c.list_buckets(&t)).await?;
        Ok(dto::ListBucketsOutput {
            buckets: Some(
                buckets
                    .into_iter()
                    .map(|(name, created)| dto::Bucket {
                        name: Some(name),
                        creation_date: Some(timestamp(created)),
                        bucket_region: Some(self.config().region.clone()),
                    })
                    .collect(),
            ),
            owner: Some(owner(tenant)),
            ..Default::default()
        })
    }

    pub(super) async fn create_bucket_op(
        &self,
        tenant: &str,
        input: dto::CreateBucketInput,
    ) -> ApiResult<dto::CreateBucketOutput> {
        let t = tenant.to_owned();
        let bucket = input.bucket.clone();
        self.meta(move |c| c.create_bucket(&t, &bucket, now_ms()))
            .await?;
        Ok(dto::CreateBucketOutput {
            location: Some(format!("/{}", input.bucket)),
        })
    }

    pub(super) async fn delete_bucket_op(
        &self,
        tenant: &str,
        input: dto::DeleteBucketInput,
    ) -> ApiResult<dto::DeleteBucketOutput> {
        let t = tenant.to_owned();
        let blobs = self
            .meta(move |c| c.delete_bucket(&t, &input.bucket))
            .await?;
        self.blobs().delete(tenant, blobs).await;
        Ok(dto::DeleteBucketOutput::default())
    }

    pub(super) async fn head_bucket_op(
        &self,
        tenant: &str,
        input: dto::HeadBucketInput,
    ) -> ApiResult<dto::HeadBucketOutput> {
        self.require_bucket(tenant, &input.bucket).await?;
        Ok(dto::HeadBucketOutput {
            bucket_region: Some(self.config().region.clone()),
            ..Default::default()
        })
    }

    pub(super) async fn get_bucket_location_op(
        &self,
        tenant: &str,
        input: dto::GetBucketLocationInput,
    ) -> ApiResult<dto::GetBucketLocationOutput> {
        self.require_bucket(tenant, &input.bucket).await?;
        let region = &self.config().region;
        Ok(dto::GetBucketLocationOutput {
            // S3 reports us-east-1 as an empty location constraint.
            location_constraint: (region != "us-east-1")
                .then(|| dto::BucketLocationConstraint::from(region.clone())),
        })
    }

    pub(super) async fn get_bucket_versioning_op(
        &self,
        tenant: &str,
        input: dto::GetBucketVersioningInput,
    ) -> ApiResult<dto::GetBucketVersioningOutput> {
        self.require_bucket(tenant, &input.bucket).await?;
        Ok(dto::GetBucketVersioningOutput::default())
    }

    pub(super) async fn require_bucket(&self, tenant: &str, bucket: &str) -> ApiResult<()> {
        let (t, b) = (tenant.to_owned(), bucket.to_owned());
        if self.meta(move |c| c.bucket_exists(&t, &b)).await? {
            Ok(())
        } else {
            Err(sluice_meta::MetaError::NoSuchBucket.into())
        }
    }
}

/// The owner S3 reports for a tenant's buckets and objects (ListBuckets, fetch-owner).
pub fn owner(tenant: &str) -> dto::Owner {
    dto::Owner {
        display_name: Some(tenant.to_owned()),
        id: Some(tenant.to_owned()),
    }
}
