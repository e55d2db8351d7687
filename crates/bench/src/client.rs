//! An S3 client for load generation, on `object_store`'s S3 implementation.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::aws::AmazonS3Builder;
use object_store::path::Path;
use object_store::{
    Certificate, ClientOptions, ObjectStore, ObjectStoreExt, PutPayload, RetryConfig,
};

use crate::BenchError;

/// How long an idle pooled connection may be reused. Shorter than the gateway's keep-alive
/// (its header read timeout, 30 s, `sluice_serve::listener::HEADER_READ_TIMEOUT`), after which
/// it closes an idle connection: a client that keeps connections longer (reqwest's default is
/// 90 s) may send a request on one just as the gateway closes it, and that request fails with
/// "error sending request" (seen once in the aggregate run's large PUTs, a phase that follows
/// the idle ones).
pub const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(20);

/// One tenant's view of one bucket at an endpoint.
#[derive(Clone)]
pub struct S3Client {
    store: Arc<dyn ObjectStore>,
    /// Requests sent a second time, shared by the clones (see [`S3Client::retries`]).
    retries: Arc<AtomicU64>,
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
            .with_pool_max_idle_per_host(64)
            .with_pool_idle_timeout(POOL_IDLE_TIMEOUT);
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
            retries: Arc::default(),
        })
    }

    /// Requests this client (and its clones) sent a second time because the first attempt
    /// never got an answer (see [`S3Client::put`]). A benchmark reports them.
    pub fn retries(&self) -> u64 {
        self.retries.load(Ordering::Relaxed)
    }

    /// Writes `body` as `key`. A PUT whose request could not be sent (the connection closed
    /// under it, before any answer) is sent once more, as S3 clients retry idempotent
    /// requests, and counted in [`S3Client::retries`]; any other error, or a second failure,
    /// fails.
    pub async fn put(&self, key: &str, body: Bytes) -> Result<(), BenchError> {
        let path = Path::from(key);
        match self.store.put(&path, PutPayload::from(body.clone())).await {
            Err(e) if unsent(&e) => {
                self.retries.fetch_add(1, Ordering::Relaxed);
                self.store.put(&path, PutPayload::from(body)).await?;
            }
            r => {
                r?;
            }
        }
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

/// Whether a request failed before any answer came: reqwest's "error sending request" (the
/// connection refused, reset or closed while the request went out), as `object_store` passes
/// it on.
fn unsent(e: &object_store::Error) -> bool {
    let mut source: Option<&dyn std::error::Error> = Some(e);
    while let Some(err) = source {
        if err.to_string().contains("error sending request") {
            return true;
        }
        source = err.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A PUT to a port where nothing listens fails before any answer: it is sent twice, the
    /// second attempt counted, and the error (not a success) comes back.
    #[tokio::test]
    async fn an_unsent_put_is_retried_once_and_counted() {
        let port = crate::procs::free_port().expect("port");
        let client =
            S3Client::new(&format!("http://127.0.0.1:{port}"), "b", "k", "s").expect("client");
        let err = client
            .put("key", Bytes::from_static(b"x"))
            .await
            .expect_err("nothing listens");
        assert_eq!(client.retries(), 1, "{err}");
        assert_eq!(client.clone().retries(), 1);
    }

    #[test]
    fn only_unsent_requests_count_as_unsent() {
        let other = object_store::Error::NotFound {
            path: "k".into(),
            source: "404".into(),
        };
        assert!(!unsent(&other));
        let sent = object_store::Error::Generic {
            store: "S3",
            source: "error sending request for url (http://127.0.0.1:1/b/k)".into(),
        };
        assert!(unsent(&sent));
    }
}
