//! The file schema: what operators write, field for field. No rule beyond types lives here.

use serde::Deserialize;
use sluice_units::{ByteSize, HumanDuration, Rate};

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub gateway: Option<FileGateway>,
    pub backend: Option<FileBackend>,
    pub agent: Option<FileAgent>,
    pub catalog: Option<crate::catalog::FileCatalog>,
    pub admin: Option<crate::admin::FileAdmin>,
    #[serde(default, rename = "tenant")]
    pub tenants: Vec<FileTenant>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileGateway {
    pub listen: Option<String>,
    pub data_dir: Option<String>,
    pub region: Option<String>,
    pub metrics_listen: Option<String>,
    /// `[gateway] advertise`: where the other gateways reach this one's control listener.
    pub advertise: Option<String>,
    pub max_object_size: Option<ByteSize>,
    pub capacity: Option<FileCapacity>,
    pub scrub: Option<crate::scrub::FileScrub>,
    pub tls_cert: Option<String>,
    pub tls_key: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileCapacity {
    pub bandwidth: Option<Rate>,
    pub ops: Option<f64>,
    pub policy: Option<String>,
    pub queue_depth: Option<usize>,
    pub grain: Option<ByteSize>,
    /// `[gateway.capacity] coordinate`: whether the gateways on one shared catalog share
    /// this capacity (default true).
    pub coordinate: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileBackend {
    pub emulate: Option<FileDevice>,
    pub url: Option<String>,
    pub endpoint: Option<String>,
    pub region: Option<String>,
    pub access_key: Option<String>,
    pub secret_key: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileDevice {
    pub bandwidth: Rate,
    pub ops: f64,
    /// `[backend.emulate] shared`: the state file of one device every process naming it
    /// occupies.
    pub shared: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileAgent {
    pub listen: Option<String>,
    pub data_dir: Option<String>,
    pub upstream: Option<OneOrMany>,
    pub upstream_region: Option<String>,
    pub status_listen: Option<String>,
    pub tls_cert: Option<String>,
    pub tls_key: Option<String>,
    pub upstream_ca: Option<String>,
    pub escrow_lease: Option<HumanDuration>,
    pub capacity: Option<FileAgentCapacity>,
    pub emulate: Option<FileDevice>,
    pub node_credential_file: Option<String>,
    pub gateway_control: Option<OneOrMany>,
}

/// `[agent.capacity]`: the node's local device as the agent's scheduler sees it, and the
/// drain's uplink.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileAgentCapacity {
    pub bandwidth: Option<Rate>,
    pub ops: Option<f64>,
    pub policy: Option<String>,
    pub queue_depth: Option<usize>,
    pub grain: Option<ByteSize>,
    pub uplink: Option<Rate>,
}

/// A string or a list of strings (`upstream = "http://gw:9000"` or `upstream = [...]`).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    pub fn into_vec(self) -> Vec<String> {
        match self {
            Self::One(s) => vec![s],
            Self::Many(v) => v,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileTenant {
    pub id: String,
    pub access_key: String,
    pub secret_key: String,
    pub capacity: Option<ByteSize>,
    pub max_objects: Option<u64>,
    pub max_buckets: Option<u64>,
    pub reservation: Option<Rate>,
    pub weight: Option<f64>,
    pub limit: Option<Rate>,
    pub local_capacity: Option<ByteSize>,
    pub local_reservation: Option<Rate>,
    pub local_weight: Option<f64>,
    pub local_limit: Option<Rate>,
    pub drain_rate: Option<Rate>,
    pub interval: Option<HumanDuration>,
    pub retention: Option<FileRetention>,
    pub commit_markers: Option<Vec<String>>,
    /// `[tenant.encryption]`: the tenant's confidential-object key (see `encryption`).
    pub encryption: Option<crate::encryption::FileEncryption>,
}

/// `retention = 2` (checkpoints) or `retention = "500GiB"` (bytes).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum FileRetention {
    Checkpoints(u32),
    Bytes(ByteSize),
}
