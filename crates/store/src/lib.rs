//! sluice's object stores: everything below the S3 front end that holds or moves blob bytes.
//!
//! Every store is an [`object_store::ObjectStore`], and every policy a decorator around one
//! that forwards every trait method (the impls deny clippy's `missing_trait_methods`, so a
//! method `object_store` adds cannot silently fall back to a default that skips the policy):
//! - [`local`]: [`LocalDisk`], the local filesystem of the gateway and of the node agent
//!   (fsync on; multipart bodies written around the page cache);
//! - [`device`]: [`EmulatedDevice`], a backend behind a device of bounded bandwidth and
//!   operation rate, for benchmarks;
//! - [`checksum`]: [`ChecksumStore`], the node agent's CRC-64/NVME of every blob as it is
//!   written, and the [`BlobCrcSlot`] through which a writer hands over the checksum it
//!   computed on arrival;
//! - [`backend`]: opening the configured backend, and the part size it takes.
//!
//! It does not own blob naming, tenant prefixes or pacing (`sluice-s3`'s `blob`), nor the
//! catalog (`sluice-meta`). `tests/conformance.rs` runs one suite against `InMemory`,
//! `LocalDisk` (direct and buffered) and every decorator stack.

pub mod backend;
pub mod checksum;
pub mod device;
pub mod local;

pub use backend::{S3_PART_SIZE, open_backend, part_size};
pub use checksum::{BlobCrc, BlobCrcSlot, ChecksumStore, Checksums, Crc};
pub use device::{DeviceError, EmulatedDevice};
pub use local::LocalDisk;

/// Why a store could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("the local filesystem backend needs [gateway] data_dir")]
    NoDataDir,
    #[error("directory {path}: {source}")]
    Dir {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    ObjectStore(#[from] object_store::Error),
    #[error(transparent)]
    Device(#[from] crate::device::DeviceError),
}
