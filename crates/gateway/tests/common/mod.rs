//! What the gateway's integration tests share: a Rust S3 client (`object_store`'s, SigV4).

use std::sync::Arc;

use object_store::aws::AmazonS3Builder;
use object_store::{ClientOptions, ObjectStore, RetryConfig};

/// A path-style client of `bucket` at `endpoint` (plain HTTP allowed), signing as `key`, that
/// never retries (a refusal must reach the test as it was).
pub fn client(
    endpoint: &str,
    bucket: &str,
    key: &str,
    secret: &str,
    options: ClientOptions,
) -> Arc<dyn ObjectStore> {
    Arc::new(
        AmazonS3Builder::new()
            .with_endpoint(endpoint)
            .with_client_options(options.with_allow_http(true))
            .with_bucket_name(bucket)
            .with_region("us-east-1")
            .with_access_key_id(key)
            .with_secret_access_key(secret)
            .with_virtual_hosted_style_request(false)
            .with_retry(RetryConfig {
                max_retries: 0,
                ..RetryConfig::default()
            })
            .build()
            .expect("client"),
    )
}
