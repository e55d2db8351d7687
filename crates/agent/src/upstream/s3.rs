//! [`Upstream`]: the shared tier over S3, an `AmazonS3` client per (tenant, bucket) with the
//! tenant's own keys, sharing one HTTP client ([`StatusClient`]), plus the bucket calls
//! `object_store` has no API for.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::aws::{AmazonS3, AmazonS3Builder, AwsAuthorizer, AwsCredential};
use object_store::client::HttpRequestBody;
use object_store::multipart::{MultipartStore, PartId};
use object_store::path::Path;
use object_store::{
    Attribute, AttributeValue, Attributes, BackoffConfig, Certificate, ClientOptions, GetOptions,
    GetResult, ObjectMeta, ObjectStore, ObjectStoreExt, PutMultipartOptions, PutOptions,
    PutPayload, RetryConfig,
};
use sluice_meta::ObjectRecord;

use super::answer::{Dmclock, ErrorAnswer, Failure, StatusClient};
use super::ledger::Ledger;
use super::{Head, UpstreamError, UpstreamStore};

/// One tenant's credentials upstream.
#[derive(Debug, Clone)]
pub struct Credentials {
    pub access_key: String,
    pub secret_key: String,
}

pub struct Upstream {
    endpoint: String,
    region: String,
    /// The tenants' keys and the clients built with them, under one lock so that a client
    /// made with keys a reload replaced is never cached after it ([`Upstream::set_credentials`]).
    keyed: Mutex<Keyed>,
    http: StatusClient,
    options: ClientOptions,
    /// The pool's ledger and this gateway's place in it (see [`Upstream::with_dmclock`]).
    dmclock: Option<Dmclock>,
}

struct Keyed {
    creds: HashMap<String, Credentials>,
    stores: HashMap<(String, String), Arc<AmazonS3>>,
}

/// The client options of every store: `roots` are trusted for `https://` besides the
/// system's roots (`[agent] upstream_ca`).
fn options(roots: &[Certificate]) -> ClientOptions {
    roots.iter().fold(
        ClientOptions::new()
            .with_allow_http(true)
            .with_connect_timeout(Duration::from_secs(5))
            .with_timeout(Duration::from_secs(300)),
        |o, c| o.with_root_certificate(c.clone()),
    )
}

/// An object key as an `object_store` path (keys were validated by the front end).
pub fn path(key: &str) -> Result<Path, UpstreamError> {
    Path::parse(key).map_err(|e| UpstreamError::Refused {
        status: 400,
        message: format!("key {key:?} is not a valid path: {e}"),
    })
}

/// Refused as the upstream would refuse a request signed with no key.
fn no_credentials(tenant: &str) -> UpstreamError {
    UpstreamError::Refused {
        status: 403,
        message: format!("no credentials for tenant {tenant} in the agent's configuration"),
    }
}

fn unquoted(etag: &str) -> String {
    etag.trim_matches('"').to_owned()
}

impl Upstream {
    /// A client of the shared tier at `endpoint`, signing for `region` with each tenant's
    /// `creds`.
    pub fn new(
        endpoint: &str,
        region: &str,
        creds: HashMap<String, Credentials>,
    ) -> Result<Self, UpstreamError> {
        Self::with_roots(endpoint, region, creds, &[])
    }

    /// [`Upstream::new`], trusting the CA certificates `roots` besides the system's for an
    /// `https://` endpoint.
    pub fn with_roots(
        endpoint: &str,
        region: &str,
        creds: HashMap<String, Credentials>,
        roots: &[Certificate],
    ) -> Result<Self, UpstreamError> {
        let options = options(roots);
        Ok(Self {
            endpoint: endpoint.trim_end_matches('/').to_owned(),
            region: region.to_owned(),
            keyed: Mutex::new(Keyed {
                creds,
                stores: HashMap::new(),
            }),
            http: StatusClient::new(&options, None)?,
            options,
            dmclock: None,
        })
    }

    /// This client's uploads name `holder` (the node's id) in `x-sluice-escrow-holder`, so the
    /// gateway draws their space from the node's escrow (see [`crate::escrow`]): a default
    /// header of every request.
    pub fn with_escrow_holder(mut self, holder: &str) -> Result<Self, UpstreamError> {
        let value = http::HeaderValue::from_str(holder).map_err(|e| UpstreamError::Refused {
            status: 400,
            message: format!("node id {holder:?}: {e}"),
        })?;
        let mut headers = http::HeaderMap::new();
        headers.insert(sluice_s3::front::escrow::HOLDER_HEADER, value);
        self.options = self.options.with_default_headers(headers);
        self.rebuild()
    }

    /// This client is gateway `gateway` of a pool whose clients share `ledger`: each request
    /// carries dmClock's δ, what the pool's other gateways served its tenant since its
    /// previous request here (see `ledger`).
    pub fn with_dmclock(
        mut self,
        ledger: Arc<Ledger>,
        gateway: usize,
    ) -> Result<Self, UpstreamError> {
        self.dmclock = Some(Dmclock { ledger, gateway });
        self.rebuild()
    }

    /// A new HTTP client with the current options, and no store built with the old one.
    fn rebuild(mut self) -> Result<Self, UpstreamError> {
        self.http = StatusClient::new(&self.options, self.dmclock.clone())?;
        self.keyed
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .stores
            .clear();
        Ok(self)
    }

    /// Sets the node `holder`'s escrow of the tenant's shared-tier quota to `bytes` for
    /// `ttl` (a signed `POST /?sluice-escrow`, see `sluice_s3::front::escrow`): what the
    /// gateway granted.
    pub async fn escrow(
        &self,
        tenant: &str,
        holder: &str,
        bytes: u64,
        ttl: Duration,
    ) -> Result<EscrowAnswer, UpstreamError> {
        let query = format!(
            "?{}&holder={holder}&bytes={bytes}&ttl-ms={}",
            sluice_s3::front::escrow::ESCROW_QUERY,
            ttl.as_millis()
        );
        let body = self
            .bucket_call(tenant, http::Method::POST, &query)
            .await??;
        serde_json::from_slice(&body)
            .map_err(|e| UpstreamError::Unavailable(format!("escrow answer: {e}")))
    }

    /// A configuration reload: `creds` replace the keys of the tenants they name and add new
    /// tenants. A tenant no longer named keeps its keys, so that what it buffered on the node
    /// still drains. Clients built with the old keys are dropped; the next call builds anew.
    pub fn set_credentials(&self, creds: HashMap<String, Credentials>) {
        let mut keyed = self.keyed.lock().unwrap_or_else(PoisonError::into_inner);
        keyed.creds.extend(creds);
        keyed.stores.clear();
    }

    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    fn creds(&self, tenant: &str) -> Result<Credentials, UpstreamError> {
        let keyed = self.keyed.lock().unwrap_or_else(PoisonError::into_inner);
        keyed
            .creds
            .get(tenant)
            .cloned()
            .ok_or_else(|| no_credentials(tenant))
    }

    /// The S3 client for one bucket of one tenant (building one does no I/O, so it is built
    /// under the lock).
    pub fn store(&self, tenant: &str, bucket: &str) -> Result<Arc<AmazonS3>, UpstreamError> {
        let k = (tenant.to_owned(), bucket.to_owned());
        let mut keyed = self.keyed.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(s) = keyed.stores.get(&k) {
            return Ok(Arc::clone(s));
        }
        let c = keyed
            .creds
            .get(tenant)
            .ok_or_else(|| no_credentials(tenant))?;
        let store = AmazonS3Builder::new()
            .with_endpoint(&self.endpoint)
            .with_allow_http(true)
            .with_virtual_hosted_style_request(false)
            .with_bucket_name(bucket)
            .with_region(&self.region)
            .with_access_key_id(&c.access_key)
            .with_secret_access_key(&c.secret_key)
            .with_client_options(self.options.clone())
            .with_http_connector(self.http.clone())
            .with_retry(RetryConfig {
                backoff: BackoffConfig {
                    init_backoff: Duration::from_millis(50),
                    max_backoff: Duration::from_millis(500),
                    base: 2.0,
                },
                max_retries: 1,
                retry_timeout: Duration::from_secs(5),
            })
            .build()?;
        let store = Arc::new(store);
        keyed.stores.insert(k, Arc::clone(&store));
        Ok(store)
    }

    /// A signed bucket-level request (CreateBucket, HeadBucket, DeleteBucket; ListBuckets
    /// with an empty `bucket`): the body of a successful answer, or the error answer.
    async fn bucket_call(
        &self,
        tenant: &str,
        method: http::Method,
        bucket: &str,
    ) -> Result<Result<Bytes, ErrorAnswer>, UpstreamError> {
        let c = self.creds(tenant)?;
        let cred = AwsCredential {
            key_id: c.access_key.clone(),
            secret_key: c.secret_key.clone(),
            token: None,
        };
        // `bucket` may also be a query on the root (`?...`, the escrow request).
        let mut req = http::Request::builder()
            .method(method)
            .uri(format!("{}/{bucket}", self.endpoint))
            .body(HttpRequestBody::from(Bytes::new()))
            .map_err(|e| UpstreamError::Refused {
                status: 400,
                message: format!("bucket {bucket:?}: {e}"),
            })?;
        AwsAuthorizer::new(&cred, "s3", &self.region).try_authorize(&mut req, None)?;
        match self.http.execute(req).await {
            Ok(resp) => {
                let body =
                    resp.into_body().bytes().await.map_err(|e| {
                        UpstreamError::Unavailable(format!("reading the answer: {e}"))
                    })?;
                Ok(Ok(body))
            }
            Err(Failure::Answer(a)) => Ok(Err(a)),
            Err(Failure::Upstream(e)) => Err(e),
        }
    }

    pub async fn bucket_exists(&self, tenant: &str, bucket: &str) -> Result<bool, UpstreamError> {
        match self.bucket_call(tenant, http::Method::HEAD, bucket).await? {
            Ok(_) => Ok(true),
            Err(a) if a.status == http::StatusCode::NOT_FOUND => Ok(false),
            Err(a) => Err(a.into()),
        }
    }

    /// The tenant's buckets upstream (ListBuckets): names and creation times.
    pub async fn list_buckets(&self, tenant: &str) -> Result<Vec<UpstreamBucket>, UpstreamError> {
        let body = self.bucket_call(tenant, http::Method::GET, "").await??;
        let text = std::str::from_utf8(&body)
            .map_err(|e| UpstreamError::Unavailable(format!("ListBuckets answer: {e}")))?;
        let parsed: ListAllMyBucketsResult = quick_xml::de::from_str(text)
            .map_err(|e| UpstreamError::Unavailable(format!("ListBuckets answer: {e}")))?;
        Ok(parsed.buckets.bucket)
    }

    /// The object at `key` upstream, or `None`.
    pub async fn head(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
    ) -> Result<Option<ObjectMeta>, UpstreamError> {
        let store = self.store(tenant, bucket)?;
        match store.head(&path(key)?).await.map_err(UpstreamError::from) {
            Ok(m) => Ok(Some(m)),
            Err(UpstreamError::NotFound) => Ok(None),
            Err(e) => Err(e),
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

#[async_trait::async_trait]
impl UpstreamStore for Upstream {
    fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Creates the bucket upstream; one that is already the tenant's is fine.
    async fn create_bucket(&self, tenant: &str, bucket: &str) -> Result<(), UpstreamError> {
        match self.bucket_call(tenant, http::Method::PUT, bucket).await? {
            Ok(_) => Ok(()),
            Err(a) if a.status == http::StatusCode::CONFLICT && a.is("BucketAlreadyOwnedByYou") => {
                Ok(())
            }
            Err(a) => Err(a.into()),
        }
    }

    /// Deletes the bucket upstream; absent or not empty upstream is reported, not retried.
    async fn delete_bucket(&self, tenant: &str, bucket: &str) -> Result<(), UpstreamError> {
        match self
            .bucket_call(tenant, http::Method::DELETE, bucket)
            .await?
        {
            Ok(_) => Ok(()),
            Err(a) if a.status == http::StatusCode::NOT_FOUND => Ok(()),
            Err(a) if a.status == http::StatusCode::CONFLICT => {
                tracing::warn!(tenant, bucket, "bucket not empty upstream; left in place");
                Ok(())
            }
            Err(a) => Err(a.into()),
        }
    }

    async fn put(
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
        Ok(r.e_tag.as_deref().map(unquoted))
    }

    async fn create_multipart(
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

    async fn put_part(
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
        Ok(unquoted(&part.content_id))
    }

    async fn complete_multipart(
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

    async fn abort_multipart(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
        upload_id: &str,
    ) -> Result<(), UpstreamError> {
        let store = self.store(tenant, bucket)?;
        let aborted = store
            .abort_multipart(&path(key)?, &upload_id.to_owned())
            .await;
        match aborted.map_err(UpstreamError::from) {
            Ok(()) | Err(UpstreamError::NotFound) => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn head(
        &self,
        tenant: &str,
        bucket: &str,
        key: &str,
    ) -> Result<Option<Head>, UpstreamError> {
        Ok(Upstream::head(self, tenant, bucket, key)
            .await?
            .map(|m| Head {
                size: m.size,
                etag: m.e_tag.as_deref().map(unquoted).unwrap_or_default(),
            }))
    }

    async fn delete(&self, tenant: &str, bucket: &str, key: &str) -> Result<(), UpstreamError> {
        let store = self.store(tenant, bucket)?;
        match store.delete(&path(key)?).await.map_err(UpstreamError::from) {
            Ok(()) | Err(UpstreamError::NotFound) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

/// One bucket of an upstream ListBuckets answer.
/// The gateway's answer to an escrow request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
pub struct EscrowAnswer {
    /// The tenant has no quota upstream: nothing to hold.
    pub unlimited: bool,
    /// Held now (at most what was asked for).
    #[serde(default)]
    pub bytes: u64,
    /// Until when, in milliseconds since the Unix epoch.
    #[serde(default)]
    pub expires_ms: i64,
    /// The tenant's quota upstream.
    #[serde(default)]
    pub quota: u64,
}

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
mod tests;
