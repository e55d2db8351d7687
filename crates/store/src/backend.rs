//! Opening the configured backend: the local filesystem (default) or any S3-compatible store.

use std::sync::Arc;
use std::time::Duration;

use object_store::aws::AmazonS3Builder;
use object_store::{ObjectStore, RetryConfig};
use sluice_config::{Backend, Config};

use crate::StoreError;
use crate::device::EmulatedDevice;
use crate::local::LocalDisk;

/// The part size of multipart writes on S3 backends: S3's 5 MiB minimum, rounded up to 8 MiB.
pub const S3_PART_SIZE: u64 = 8 * 1024 * 1024;

/// How long after its first attempt a request to an S3 backend may still be retried.
/// `object_store`'s default (3 minutes, 10 retries of up to 30 s each) holds a client's
/// request for minutes when the backend cannot write (a SeaweedFS with a replica down answers
/// each write after its own 30 s): past this, the failure reaches the client as a 503.
pub const S3_RETRY_TIMEOUT: Duration = Duration::from_secs(15);

/// Opens the configured backend (behind an emulated device if `[backend.emulate]` is set, one
/// shared with every process naming its `shared` state file if that is set).
/// The local filesystem lives in `data_dir/objects` with fsync on, so a blob is durable before
/// the catalog references it; large blobs are written around the page cache ([`LocalDisk`]).
pub fn open_backend(config: &Config) -> Result<Arc<dyn ObjectStore>, StoreError> {
    let store = open_raw(config)?;
    Ok(match (config.emulate, &config.emulate_shared) {
        (None, _) => store,
        (Some(d), None) => Arc::new(EmulatedDevice::new(store, d.bandwidth, d.ops)),
        (Some(d), Some(path)) => Arc::new(EmulatedDevice::shared(store, d.bandwidth, d.ops, path)?),
    })
}

/// The part size for multipart writes: a grain where the backend takes small parts (the local
/// filesystem), [`S3_PART_SIZE`] elsewhere.
pub fn part_size(config: &Config, grain: u64) -> u64 {
    match config.backend {
        Backend::Local => grain,
        Backend::S3(_) => S3_PART_SIZE.max(grain),
    }
}

fn open_raw(config: &Config) -> Result<Arc<dyn ObjectStore>, StoreError> {
    match &config.backend {
        Backend::Local => {
            let data_dir = &config
                .gateway
                .as_ref()
                .ok_or(StoreError::NoDataDir)?
                .data_dir;
            let dir = data_dir.join("objects");
            std::fs::create_dir_all(&dir).map_err(|source| StoreError::Dir {
                path: dir.clone(),
                source,
            })?;
            Ok(Arc::new(LocalDisk::open(&dir)?))
        }
        Backend::S3(s3) => {
            let mut b = AmazonS3Builder::new()
                .with_bucket_name(&s3.bucket)
                .with_region(&s3.region)
                .with_access_key_id(&s3.access_key)
                .with_secret_access_key(&s3.secret_key)
                .with_virtual_hosted_style_request(false)
                .with_retry(RetryConfig {
                    retry_timeout: S3_RETRY_TIMEOUT,
                    ..RetryConfig::default()
                });
            if let Some(endpoint) = &s3.endpoint {
                b = b
                    .with_endpoint(endpoint)
                    .with_allow_http(endpoint.starts_with("http://"));
            }
            Ok(Arc::new(b.build()?))
        }
    }
}
