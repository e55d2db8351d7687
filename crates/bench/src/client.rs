//! An S3 client for load generation, on `object_store`'s S3 implementation.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::aws::AmazonS3Builder;
use object_store::path::Path;
use object_store::{
    Certificate, ClientOptions, ObjectStore, ObjectStoreExt, PutPayload, RetryConfig,
};

use crate::BenchError;

/// One tenant's view of one bucket at an endpoint.
#[derive(Clone)]
pub struct S3Client {
    store: Arc<dyn ObjectStore>,
}

impl S3Client {
    pub fn new(
        endpoint: &str,
        bucket: &str,
        access_key: &str,
        secret_key: &str,
    ) -> Result<Self, BenchError> {
        Self::trusting(endpoint, bucket, access_key, secret_key, None)
    }

    /// [`S3Client::new`] for an `https://` endpoint whose certificate `ca_pem` (a PEM CA
    /// certificate) signed, besides the system's roots.
    pub fn trusting(
        endpoint: &str,
        bucket: &str,
        access_key: &str,
        secret_key: &str,
        ca_pem: Option<&[u8]>,
    ) -> Result<Self, BenchError> {
        let mut options = ClientOptions::new()
            .with_allow_http(true)
            .with_timeout(Duration::from_secs(600))
            .with_pool_max_idle_per_host(64);
        if let Some(pem) = ca_pem {
            options = options.with_root_certificate(Certificate::from_pem(pem)?);
        }
        let store = AmazonS3Builder::new()
            .with_endpoint(endpoint)
            .with_allow_http(true)
            .with_bucket_name(bucket)
            .with_region("us-east-1")
            .with_access_key_id(access_key)
            .with_secret_access_key(secret_key)
            .with_virtual_hosted_style_request(false)
            .with_unsigned_payload(true)
            .with_retry(RetryConfig {
                max_retries: 0,
                ..RetryConfig::default()
            })
            .with_client_options(options)
            .build()?;
        Ok(Self {
            store: Arc::new(store),
        })
    }

    pub async fn put(&self, key: &str, body: Bytes) -> Result<(), BenchError> {
        self.store
            .put(&Path::from(key), PutPayload::from(body))
            .await?;
        Ok(())
    }

    /// Reads the whole object, discarding it; returns its length.
    pub async fn get(&self, key: &str) -> Result<u64, BenchError> {
        let mut stream = self.store.get(&Path::from(key)).await?.into_stream();
        let mut n = 0;
        while let Some(chunk) = stream.try_next().await? {
            n += chunk.len() as u64;
        }
        Ok(n)
    }

    /// Whether `key` exists (HEAD); any error counts as "not (yet)".
    pub async fn exists(&self, key: &str) -> bool {
        self.store.head(&Path::from(key)).await.is_ok()
    }

    pub async fn delete(&self, key: &str) -> Result<(), BenchError> {
        self.store.delete(&Path::from(key)).await?;
        Ok(())
    }
}
