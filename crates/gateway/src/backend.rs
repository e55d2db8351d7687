//! The backend behind the gateway: the local filesystem (default) or any S3-compatible store.

use std::sync::Arc;

use object_store::ObjectStore;
use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use sluice_config::{Backend, Config};

use crate::{GatewayError, gateway_section};

/// Opens the configured backend. The local filesystem lives in `data_dir/objects` with fsync
/// on, so a blob is durable before the catalog references it.
pub fn open_backend(config: &Config) -> Result<Arc<dyn ObjectStore>, GatewayError> {
    match &config.backend {
        Backend::Local => {
            let dir = gateway_section(config)?.data_dir.join("objects");
            std::fs::create_dir_all(&dir).map_err(|source| GatewayError::DataDir {
                path: dir.clone(),
                source,
            })?;
            Ok(Arc::new(
                LocalFileSystem::new_with_prefix(&dir)?
                    .with_fsync(true)
                    .with_automatic_cleanup(true),
            ))
        }
        Backend::S3(s3) => {
            let mut b = AmazonS3Builder::new()
                .with_bucket_name(&s3.bucket)
                .with_region(&s3.region)
                .with_access_key_id(&s3.access_key)
                .with_secret_access_key(&s3.secret_key)
                .with_virtual_hosted_style_request(false);
            if let Some(endpoint) = &s3.endpoint {
                b = b
                    .with_endpoint(endpoint)
                    .with_allow_http(endpoint.starts_with("http://"));
            }
            Ok(Arc::new(b.build()?))
        }
    }
}
