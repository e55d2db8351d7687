//! Bucket operations. A bucket name is unique within a tenant only. With a tier behind the
//! front, ListBuckets lists the tier's buckets too, and a bucket only the tier has is created
//! here when an operation needs it ([`Front::require_bucket`]).

use std::collections::BTreeMap;

use s3s::dto;
use sluice_meta::MetaError;

use super::tier::TierBucket;
use super::{Front, now_ms, timestamp};
use crate::error::{ApiError, ApiResult};

impl Front {
    pub(super) async fn list_buckets_op(&self, tenant: &str) -> ApiResult<dto::ListBucketsOutput> {
        let t = tenant.to_owned();
        let here = self.meta(move |c| c.list_buckets(&t)).await?;
        let there = match &self.inner.tier {
            None => Vec::new(),
            Some(tier) => match tier.buckets(tenant).await {
                Ok(buckets) => buckets,
                Err(ApiError::Tier(e)) => {
                    sluice_serve::request::upstream_failure(format_args!(
                        "listing this node's buckets only: {e}"
                    ));
                    Vec::new()
                }
                Err(e) => return Err(e),
            },
        };
        Ok(dto::ListBucketsOutput {
            buckets: Some(
                union(here, there)
                    .into_iter()
                    .map(|(name, created)| dto::Bucket {
                        name: Some(name),
                        creation_date: created,
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
        let (t, bucket) = (tenant.to_owned(), input.bucket.clone());
        if self.meta(move |c| c.bucket_exists(&t, &bucket)).await? {
            return Err(MetaError::BucketExists.into());
        }
        // The record first: a bucket the backend cannot record is not created (a record
        // without its bucket is harmless, and removed if the creation is refused).
        let created = now_ms();
        self.record_bucket(tenant, &input.bucket, created).await?;
        let (t, bucket) = (tenant.to_owned(), input.bucket.clone());
        if let Err(e) = self
            .meta(move |c| c.create_bucket(&t, &bucket, created))
            .await
        {
            if !matches!(e, ApiError::Meta(MetaError::BucketExists)) {
                self.drop_bucket_record(tenant, &input.bucket).await;
            }
            return Err(e);
        }
        Ok(dto::CreateBucketOutput {
            location: Some(format!("/{}", input.bucket)),
        })
    }

    pub(super) async fn delete_bucket_op(
        &self,
        tenant: &str,
        input: dto::DeleteBucketInput,
    ) -> ApiResult<dto::DeleteBucketOutput> {
        let (t, b) = (tenant.to_owned(), input.bucket.clone());
        let blobs = self.meta(move |c| c.delete_bucket(&t, &b)).await?;
        self.drop_bucket_record(tenant, &input.bucket).await;
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

    /// The bucket exists here, or `NoSuchBucket`. A bucket that only the tier behind has is
    /// created here first, so that writes into it can be absorbed (the tier failing to answer
    /// counts as its not having the bucket).
    pub(super) async fn require_bucket(&self, tenant: &str, bucket: &str) -> ApiResult<()> {
        let (t, b) = (tenant.to_owned(), bucket.to_owned());
        if self.meta(move |c| c.bucket_exists(&t, &b)).await? {
            return Ok(());
        }
        let Some(tier) = &self.inner.tier else {
            return Err(MetaError::NoSuchBucket.into());
        };
        match tier.has_bucket(tenant, bucket).await {
            Ok(true) => {}
            Ok(false) => return Err(MetaError::NoSuchBucket.into()),
            Err(ApiError::Tier(e)) => {
                sluice_serve::request::upstream_failure(format_args!(
                    "bucket {bucket} taken as absent: {e}"
                ));
                return Err(MetaError::NoSuchBucket.into());
            }
            Err(e) => return Err(e),
        }
        let (t, b) = (tenant.to_owned(), bucket.to_owned());
        match self.meta(move |c| c.create_bucket(&t, &b, now_ms())).await {
            Ok(()) | Err(ApiError::Meta(MetaError::BucketExists)) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

/// This store's buckets and the tier's, each once (with this store's creation time), by name.
fn union(
    here: Vec<(String, i64)>,
    there: Vec<TierBucket>,
) -> BTreeMap<String, Option<dto::Timestamp>> {
    let mut all: BTreeMap<String, Option<dto::Timestamp>> = here
        .into_iter()
        .map(|(name, created)| (name, Some(timestamp(created))))
        .collect();
    for b in there {
        all.entry(b.name).or_insert(b.created);
    }
    all
}

/// The owner S3 reports for a tenant's buckets and objects (ListBuckets, fetch-owner).
pub fn owner(tenant: &str) -> dto::Owner {
    dto::Owner {
        display_name: Some(tenant.to_owned()),
        id: Some(tenant.to_owned()),
    }
}
