//! sluice's benchmarks. They measure, they do not assert: every figure is reported with the
//! configuration and compared only with baselines measured in the same run.
//!
//! - [`client`]: an S3 load generator over `object_store`'s S3 client (SigV4, unsigned
//!   payloads so the client does not spend the machine's two cores hashing);
//! - [`procs`]: child processes on loopback (a sluice gateway, SeaweedFS) and their memory;
//! - [`gateway`]: the shared-tier gateway benchmark (large-object throughput, small-object
//!   operations, memory) against the filesystem directly and against SeaweedFS, on the
//!   embedded catalog and on a shared PostgreSQL one;
//! - [`aggregate`]: 1, 2 and 3 gateways on one PostgreSQL catalog and one backend;
//! - [`postgres`]: a PostgreSQL server started for the run;
//! - [`stats`]: latency percentiles.

pub mod aggregate;
pub mod calibrate;
pub mod client;
pub mod gateway;
pub mod noisy;
pub mod postgres;
pub mod procs;
pub mod report;
pub mod stats;

/// Why a benchmark could not run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("{0}")]
    Setup(String),
    #[error("object store: {0}")]
    Store(#[from] object_store::Error),
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
}
