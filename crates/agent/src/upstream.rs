//! The shared tier as the agent sees it: an S3 client per (tenant, bucket) with the tenant's
//! own keys, through `object_store`'s `AmazonS3`, plus the few bucket calls `object_store`
//! has no API for (signed with its SigV4 authorizer).
//!
//! `object_store`'s own retries are kept short: the drain owns retrying (with backoff and
//! jitter, forever for transient errors) so that every failure is visible in status.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::aws::{AmazonS3, AmazonS3Builder, AwsAuthorizer, AwsCredential};
use object_store::client::{HttpClient, HttpConnector, HttpRequestBody, ReqwestConnector};
use object_store::multipart::{MultipartStore, PartId};
use object_store::path::Path;
use object_store::{
    Attribute, AttributeValue, Attributes, BackoffConfig, ClientOptions, GetOptions, GetResult,
    ObjectMeta, ObjectStore, ObjectStoreExt, PutMultipartOptions, PutOptions, PutPayload,
    RetryConfig,
};
use sluice_meta::ObjectRecord;

/// Why an upstream call failed, classified for retrying.
#[derive(Debug, Clone, thiserror::Error)]
pub enum UpstreamError {
    /// Retry with backoff (network errors, 5xx, timeouts).
    #[error("upstream unavailable: {0}")]
    Transient(String),
    /// Throttled (`SlowDown`, 503): back off with jitter.
    #[error("upstream asked to slow down: {0}")]
    SlowDown(String),
    /// Will not succeed by retrying soon (`QuotaExceeded`, access denied, a bad key): shown in
    /// status; still retried, slowly, so the data drains once an operator fixes the cause.
    #[error("upstream refused: {0}")]
    Permanent(String),
    #[error("not found upstream")]
    NotFound,
}

impl UpstreamError {
    pub fn is_permanent(&self) -> bool {
        matches!(self, Self::Permanent(_))
    }
}

impl From<object_store::Error> for UpstreamError {
    fn from(e: object_store::Error) -> Self {
        use object_store::Error as E;
        let text = e.to_string();
        match e {
            E::NotFound { .. } => Self::NotFound,
            E::PermissionDenied { .. } | E::Unauthenticated { .. } | E::InvalidPath { .. } => {
                Self::Permanent(text)
            }
            _ if text.contains("SlowDown") || text.contains("503") => Self::SlowDown(text),
            _ => Self::Transient(text),
        }
    }
}

/// One tenant's credentials upstream.
#[derive(Debug, Clone)]
pub struct Credentials {
    pub access_key: String,
    pub secret_key: String,
}

pub struct Upstream {
    endpoint: String,
    region: String,
    creds: HashMap<String, Credentials>,
    stores: Mutex<HashMap<(String, String), Arc<AmazonS3>>>,
    http: HttpClient,
}

fn options() -> ClientOptions {
    ClientOptions::new()
        .with_allow_http(true)
        .with_connect_timeout(Duration::from_secs(5))
        .with_timeout(Duration::from_secs(300))
}

/// An object key as an `object_store` path (keys were validated by the front end).
pub fn path(key: &str) -> Result<Path, UpstreamError> {
    Path::parse(key).map_err(|e| UpstreamError::Permanent(format!("key {key:?}: {e}")))
}

impl Upstream {
    pub fn new(endpoint: &str, creds: HashMap<String, Credentials>) -> Result<Self, UpstreamError> {
        let http = ReqwestConnector::default()
            .connect(&options())
            .map_err(|e| UpstreamError::Permanent(e.to_string()))?;
        Ok(Self {
            endpoint: endpoint.trim_end_matches('/').to_owned(),
            region: "us-east-1".to_owned(),
            creds,
            stores: Mutex::default(),
            http,
        })
    }

    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    fn creds(&self, tenant: &str) -> Result<&Credentials, UpstreamError> {
        self.creds
            .get(tenant)
            .ok_or_else(|| UpstreamError::Permanent(format!("no credentials for tenant {tenant}")))
    }

    /// The S3 client for one bucket of one tenant.
    pub fn store(&self, tenant: &str, bucket: &str) -> Result<Arc<AmazonS3>, UpstreamError> {
        let k = (tenant.to_owned(), bucket.to_owned());
        if let Some(s) = self
            .stores
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&k)
        {
            return Ok(Arc::clone(s));
        }
        let c = self.creds(tenant)?;
        let store = AmazonS3Builder::new()
            .with_endpoint(&self.endpoint)
            .with_allow_http(true)
            .with_virtual_hosted_style_request(false)
            .with_bucket_name(bucket)
            .with_region(&self.region)
            .with_access_key_id(&c.access_key)
            .with_secret_access_key(&c.secret_key)
            .with_client_options(options())
            .with_retry(RetryConfig {
                backoff: BackoffConfig {
                    init_backoff: Duration::from_millis(50),
                    max_backoff: Duration::from_millis(500),
                    base: 2.0,
                },
                max_retries: 1,
                retry_timeout: Duration::from_secs(5),
            })
            .build()
            .map_err(|e| UpstreamError::Permanent(e.to_string()))?;
        let store = Arc::new(store);
        self.stores
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(k, Arc::clone(&store));
        Ok(store)
    }

    /// A signed bucket-level request (CreateBucket, HeadBucket, DeleteBucket; ListBuckets
    /// with an empty `bucket`): the status and body.
    async fn bucket_call(
        &self,
        tenant: &str,
        method: http::Method,
        bucket: &str,
    ) -> Result<(http::StatusCode, Bytes), UpstreamError> {
        let c = self.creds(tenant)?;
        let cred = AwsCredential {
            key_id: c.access_key.clone(),
            secret_key: c.secret_key.clone(),
            token: None,
        };
        let mut req = http::Request::builder()
            .method(method)
            .uri(format!("{}/{bucket}", self.endpoint))
            .body(HttpRequestBody::from(Bytes::new()))
            .map_err(|e| UpstreamError::Permanent(e.to_string()))?;
        AwsAuthorizer::new(&cred, "s3", &self.region)
            .try_authorize(&mut req, None)
            .map_err(|e| UpstreamError::Permanent(e.to_string()))?;
        let resp = self
            .http
            .execute(req)
            .await
            .map_err(|e| UpstreamError::Transient(e.to_string()))?;
        let status = resp.status();
        let body = resp
            .into_body()
            .bytes()
            .await
            .map_err(|e| UpstreamError::Transient(e.to_string()))?;
        Ok((status, body))
    }

    fn classify(status: http::StatusCode, body: &[u8]) -> UpstreamError {
        let text = format!("{status}: {}", String::from_utf8_lossy(body));
        if status == http::StatusCode::SERVICE_UNAVAILABLE || text.contains("SlowDown") {
            UpstreamError::SlowDown(text)
        } else if status.is_server_error() {
            UpstreamError::Transient(text)
        } else {
            UpstreamError::Permanent(text)
        }
    }

    /// Creates the bucket upstream; one that is already the tenant's is fine.
    pub async fn create_bucket(&self, tenant: &str, bucket: &str) -> Result<(), UpstreamError> {
        let (status, body) = self.bucket_call(tenant, http::Method::PUT, bucket).await?;
        if status.is_success() || String::from_utf8_lossy(&body).contains("BucketAlreadyOwnedByYou")
        {
            Ok(())
        } else {
            Err(Self::classify(status, &body))
        }
    }

    pub async fn bucket_exists(&self, tenant: &str, bucket: &str) -> Result<bool, UpstreamError> {
        let (status, body) = self.bucket_call(tenant, http::Method::HEAD, bucket).await?;
        match status {
            s if s.is_success() => Ok(true),
            http::StatusCode::NOT_FOUND => Ok(false),
            s => Err(Self::classify(s, &body)),
        }
    }

    /// The tenant's buckets upstream (ListBuckets): names and creation times.
    pub async fn list_buckets(&self, tenant: &str) -> Result<Vec<UpstreamBucket>, UpstreamError> {
        let (status, body) = self.bucket_call(tenant, http::Method::GET, "").await?;
        if !status.is_success() {
            return Err(Self::classify(status, &body));
        }
        let text = std::str::from_utf8(&body)
            .map_err(|e| UpstreamError::Transient(format!("ListBuckets answer: {e}")))?;
        let parsed: ListAllMyBucketsResult = quick_xml::de::from_str(text)
            .map_err(|e| UpstreamError::Transient(format!("ListBuckets answer: {e}")))?;
        Ok(parsed.buckets.bucket)
    }

    /// Deletes the bucket upstream; absent or not empty upstream is reported, not retried.
    pub async fn delete_bucket(&self, tenant: &str, bucket: &str) -> Result<(), UpstreamError> {
        let (status, body) = self
            .bucket_call(tenant, http::Method::DELETE, bucket)
            .await?;
        if status.is_success() || status == http::StatusCode::NOT_FOUND {
            return Ok(());
        }
        if status == http::StatusCode::CONFLICT {
            tracing::warn!(tenant, bucket, "bucket not empty upstream; left in place");
            return Ok(());
        }
        Err(Self::classify(status, &body))
    }

    pub async fn put(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
        payload: PutPayload,
        object: &ObjectRecord,
    ) -> Result<Option<String>, UpstreamError> {
        let store = self.store(tenant, bucket)?;
        let opts = PutOptions {
            attributes: attributes(object),
            ..PutOptions::default()
        };
        let r = store.put_opts(&path(key)?, payload, opts).await?;
        Ok(r.e_tag)
    }

    pub async fn create_multipart(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
        object: &ObjectRecord,
    ) -> Result<String, UpstreamError> {
        let store = self.store(tenant, bucket)?;
        let opts = PutMultipartOptions {
            attributes: attributes(object),
            ..PutMultipartOptions::default()
        };
        Ok(store.create_multipart_opts(&path(key)?, opts).await?)
    }

    pub async fn put_part(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
        upload_id: &str,
        index: usize,
        payload: PutPayload,
    ) -> Result<String, UpstreamError> {
        let store = self.store(tenant, bucket)?;
        let id = upload_id.to_owned();
        let part = store.put_part(&path(key)?, &id, index, payload).await?;
        Ok(part.content_id.trim_matches('"').to_owned())
    }

    pub async fn complete_multipart(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
        upload_id: &str,
        etags: Vec<String>,
    ) -> Result<(), UpstreamError> {
        let store = self.store(tenant, bucket)?;
        let parts = etags
            .into_iter()
            .map(|e| PartId { content_id: e })
            .collect();
        store
            .complete_multipart(&path(key)?, &upload_id.to_owned(), parts)
            .await?;
        Ok(())
    }

    pub async fn abort_multipart(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
        upload_id: &str,
    ) -> Result<(), UpstreamError> {
        let store = self.store(tenant, bucket)?;
        match store
            .abort_multipart(&path(key)?, &upload_id.to_owned())
            .await
        {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    pub async fn head(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
    ) -> Result<Option<ObjectMeta>, UpstreamError> {
        let store = self.store(tenant, bucket)?;
        match store.head(&path(key)?).await {
            Ok(m) => Ok(Some(m)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    pub async fn get(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
        options: GetOptions,
    ) -> Result<GetResult, UpstreamError> {
        let store = self.store(tenant, bucket)?;
        Ok(store.get_opts(&path(key)?, options).await?)
    }

    pub async fn delete(&self, tenant: &str, bucket: &str, key: &str) -> Result<(), UpstreamError> {
        let store = self.store(tenant, bucket)?;
        match store.delete(&path(key)?).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Every object upstream whose key starts with `prefix` (any string prefix).
    pub async fn list(
        &self,
        tenant: &str,
        bucket: &str,
        prefix: &str,
    ) -> Result<Vec<ObjectMeta>, UpstreamError> {
        let store = self.store(tenant, bucket)?;
        let dir = crate::journal::prefix_of(prefix).trim_end_matches('/');
        let dir = if dir.is_empty() {
            None
        } else {
            Some(path(dir)?)
        };
        let all: Vec<ObjectMeta> = store.list(dir.as_ref()).try_collect().await?;
        Ok(all
            .into_iter()
            .filter(|m| m.location.as_ref().starts_with(prefix))
            .collect())
    }
}

/// One bucket of an upstream ListBuckets answer.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct UpstreamBucket {
    pub name: String,
    /// As S3 writes it (ISO 8601).
    pub creation_date: Option<String>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ListAllMyBucketsResult {
    #[serde(default)]
    buckets: BucketList,
}

#[derive(Default, serde::Deserialize)]
struct BucketList {
    #[serde(default, rename = "Bucket")]
    bucket: Vec<UpstreamBucket>,
}

/// The object's representation headers and user metadata, for the upstream copy.
fn attributes(object: &ObjectRecord) -> Attributes {
    let mut a = Attributes::new();
    if let Some(ct) = &object.content_type {
        a.insert(Attribute::ContentType, AttributeValue::from(ct.clone()));
    }
    for (name, v) in &object.headers {
        let attr = match name.as_str() {
            "cache-control" => Attribute::CacheControl,
            "content-disposition" => Attribute::ContentDisposition,
            "content-encoding" => Attribute::ContentEncoding,
            "content-language" => Attribute::ContentLanguage,
            _ => continue,
        };
        a.insert(attr, AttributeValue::from(v.clone()));
    }
    for (k, v) in &object.metadata {
        a.insert(
            Attribute::Metadata(k.clone().into()),
            AttributeValue::from(v.clone()),
        );
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_buckets_answers_parse() {
        let xml = r#"<?xml version="1.0" encoding="UTF-8"?>
<ListAllMyBucketsResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Buckets><Bucket><Name>ckpt</Name><CreationDate>2026-11-29T18:30:29.000Z</CreationDate><BucketRegion>us-east-1</BucketRegion></Bucket><Bucket><Name>data</Name></Bucket></Buckets><Owner><ID>alice</ID><DisplayName>alice</DisplayName></Owner></ListAllMyBucketsResult>"#;
        let parsed: ListAllMyBucketsResult = quick_xml::de::from_str(xml).expect("parses");
        let names: Vec<_> = parsed
            .buckets
            .bucket
            .iter()
            .map(|b| b.name.as_str())
            .collect();
        assert_eq!(names, ["ckpt", "data"]);
        assert_eq!(
            parsed.buckets.bucket[0].creation_date.as_deref(),
            Some("2026-11-29T18:30:29.000Z")
        );
        let empty = r"<ListAllMyBucketsResult><Buckets></Buckets></ListAllMyBucketsResult>";
        let parsed: ListAllMyBucketsResult = quick_xml::de::from_str(empty).expect("parses");
        assert!(parsed.buckets.bucket.is_empty());
    }
}
