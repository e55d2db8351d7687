//! The planning file, in two layers: a serde schema that mirrors the TOML and denies unknown
//! keys (a misspelt `read_bandwidht` must not silently become zero), then validation into the
//! runtime types of [`crate::fleet`]. Every error names the section, the key and the problem:
//! `tenant[2] "llama-70b": interval: must be longer than zero`.
//!
//! Sections are decoded one at a time from the parsed table so that a decoding error (a bad
//! unit, a wrong type, an unknown key) can say which `[[tenant]]` it is in; tenants are counted
//! from zero in file order.

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use serde::Deserialize;
use serde::de::DeserializeOwned;
use sluice_units::{ByteSize, HumanDuration, Rate};

use crate::alignment::{self, CommonPeriod};
use crate::fleet::{Fleet, Node, Phase, SharedTier, Tenant};

/// The target percentile when `[shared_tier] percentile` is absent.
pub const DEFAULT_PERCENTILE: f64 = 0.999;
/// The fraction of the interval a drain may take when `[node] drain_window` is absent.
pub const DEFAULT_DRAIN_WINDOW: f64 = 0.8;
/// Checkpoints' worth of room per node when `[node] buffer_checkpoints` is absent: the one
/// landing plus the previous one, still draining after a slow or failed drain (or kept for a
/// fast local restore).
pub const DEFAULT_BUFFER_CHECKPOINTS: u32 = 2;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSpec {
    shared_tier: Option<toml::Value>,
    node: Option<toml::Value>,
    #[serde(default)]
    tenant: Vec<toml::Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SharedTierSpec {
    percentile: Option<f64>,
    capacity: Option<Rate>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NodeSpec {
    local_write_bandwidth: Rate,
    local_capacity: ByteSize,
    drain_window: Option<f64>,
    buffer_checkpoints: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TenantSpec {
    name: String,
    count: Option<u32>,
    nodes: u32,
    checkpoint_size: ByteSize,
    interval: HumanDuration,
    burst_bandwidth: Rate,
    read_bandwidth: Option<Rate>,
    phase: Option<String>,
    local_write_bandwidth: Option<Rate>,
}

/// Where in the file a problem is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Section {
    /// The top level.
    File,
    SharedTier,
    Node,
    /// The `index`-th `[[tenant]]`, from zero, with its name when it has one.
    Tenant {
        index: usize,
        name: Option<String>,
    },
}

impl fmt::Display for Section {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::File => f.write_str("file"),
            Self::SharedTier => f.write_str("shared_tier"),
            Self::Node => f.write_str("node"),
            Self::Tenant {
                index,
                name: Some(name),
            } => write!(f, "tenant[{index}] {name:?}"),
            Self::Tenant { index, name: None } => write!(f, "tenant[{index}]"),
        }
    }
}

/// What is wrong with a value.
#[derive(Debug, Clone, PartialEq)]
pub enum Problem {
    /// The decoder's own words: an unknown key, a wrong type, a unit it does not know.
    Decode(String),
    Missing,
    MustBePositive,
    NotAFraction(f64),
    DrainWindow(f64),
    DuplicateName {
        first: usize,
    },
    NoTenants,
    BadPhase(String),
    PhaseNotInInterval {
        phase: Duration,
        interval: Duration,
    },
    BurstLongerThanInterval {
        burst_seconds: f64,
        interval: Duration,
    },
    CommonPeriodTooLong,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Decode(message) => f.write_str(message),
            Self::Missing => f.write_str("missing"),
            Self::MustBePositive => f.write_str("must be greater than zero"),
            Self::NotAFraction(value) => write!(
                f,
                "{value} is not a fraction strictly between 0 and 1 (write 0.999 for the 99.9th \
                 percentile)"
            ),
            Self::DrainWindow(value) => write!(
                f,
                "{value} is not a fraction of the interval in (0, 1] (0.8: every drain ends \
                 within 80% of the interval)"
            ),
            Self::DuplicateName { first } => {
                write!(f, "the same name as tenant[{first}]; names must be unique")
            }
            Self::NoTenants => f.write_str("no [[tenant]] to plan for"),
            Self::BadPhase(why) => write!(
                f,
                "expected \"random\" or an offset such as \"0s\" or \"15m\": {why}"
            ),
            Self::PhaseNotInInterval { phase, interval } => write!(
                f,
                "offset {} is not shorter than the interval {}",
                HumanDuration(*phase),
                HumanDuration(*interval)
            ),
            Self::BurstLongerThanInterval {
                burst_seconds,
                interval,
            } => write!(
                f,
                "a checkpoint takes {burst_seconds:.0}s at this bandwidth, longer than the \
                 interval {}: the tenant could never finish one",
                HumanDuration(*interval)
            ),
            Self::CommonPeriodTooLong => write!(
                f,
                "the fixed-phase tenants' intervals have a common period holding more than {} \
                 bursts; use whole minutes, or phase = \"random\" for some",
                alignment::MAX_SWEEP_BURSTS
            ),
        }
    }
}

/// Why a planning file was rejected.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// Not TOML at all; the message shows the line.
    #[error("{0}")]
    Syntax(#[from] toml::de::Error),
    /// Valid TOML, wrong content.
    #[error("{section}: {}{problem}", key.as_ref().map(|k| format!("{k}: ")).unwrap_or_default())]
    Invalid {
        section: Section,
        key: Option<String>,
        problem: Problem,
    },
}

impl ConfigError {
    fn at(section: &Section, key: &str, problem: Problem) -> Self {
        Self::Invalid {
            section: section.clone(),
            key: Some(key.to_owned()),
            problem,
        }
    }
}

/// Parses and validates a planning file.
pub fn parse(text: &str) -> Result<Fleet, ConfigError> {
    let table: toml::Table = toml::from_str(text)?;
    let file: FileSpec = decode(toml::Value::Table(table), &Section::File)?;

    let shared_tier = match file.shared_tier {
        Some(value) => shared_tier(&decode(value, &Section::SharedTier)?)?,
        None => SharedTier {
            percentile: DEFAULT_PERCENTILE,
            capacity: None,
        },
    };
    let node_spec: NodeSpec = match file.node {
        Some(value) => decode(value, &Section::Node)?,
        None => {
            return Err(ConfigError::Invalid {
                section: Section::Node,
                key: None,
                problem: Problem::Missing,
            });
        }
    };
    let (node, default_local_write) = node(&node_spec)?;

    if file.tenant.is_empty() {
        return Err(ConfigError::Invalid {
            section: Section::File,
            key: Some("tenant".to_owned()),
            problem: Problem::NoTenants,
        });
    }
    let mut tenants = Vec::with_capacity(file.tenant.len());
    let mut names: HashMap<String, usize> = HashMap::new();
    let mut common_period = CommonPeriod::default();
    for (index, value) in file.tenant.into_iter().enumerate() {
        let name = value
            .get("name")
            .and_then(toml::Value::as_str)
            .map(str::to_owned);
        let section = Section::Tenant { index, name };
        let spec: TenantSpec = decode(value, &section)?;
        if let Some(&first) = names.get(&spec.name) {
            return Err(ConfigError::at(
                &section,
                "name",
                Problem::DuplicateName { first },
            ));
        }
        names.insert(spec.name.clone(), index);
        let tenant = tenant(spec, &section, default_local_write)?;
        if matches!(tenant.phase, Phase::Fixed(_)) {
            common_period = common_period
                .with(tenant.interval)
                .ok_or_else(|| ConfigError::at(&section, "phase", Problem::CommonPeriodTooLong))?;
        }
        tenants.push(tenant);
    }

    Ok(Fleet {
        shared_tier,
        node,
        tenants,
    })
}

/// Decodes one section, naming it (and the key, when the decoder says which) on failure.
fn decode<T: DeserializeOwned>(value: toml::Value, section: &Section) -> Result<T, ConfigError> {
    value.try_into().map_err(|error: toml::de::Error| {
        // The decoder appends "in `key`" when it knows the key; lift it into the path.
        let text = error.to_string();
        let (message, key) = match text.trim_end().rsplit_once("\nin `") {
            Some((message, key)) => (message.to_owned(), Some(key.trim_end_matches('`'))),
            None => (error.message().to_owned(), None),
        };
        ConfigError::Invalid {
            section: section.clone(),
            key: key.map(str::to_owned),
            problem: Problem::Decode(message),
        }
    })
}

fn shared_tier(spec: &SharedTierSpec) -> Result<SharedTier, ConfigError> {
    let section = Section::SharedTier;
    let percentile = spec.percentile.unwrap_or(DEFAULT_PERCENTILE);
    if !(percentile > 0.0 && percentile < 1.0) {
        return Err(ConfigError::at(
            &section,
            "percentile",
            Problem::NotAFraction(percentile),
        ));
    }
    if let Some(capacity) = spec.capacity {
        positive_rate(capacity, &section, "capacity")?;
    }
    Ok(SharedTier {
        percentile,
        capacity: spec.capacity,
    })
}

fn node(spec: &NodeSpec) -> Result<(Node, Rate), ConfigError> {
    let section = Section::Node;
    positive_rate(
        spec.local_write_bandwidth,
        &section,
        "local_write_bandwidth",
    )?;
    if spec.local_capacity.bytes() == 0 {
        return Err(ConfigError::at(
            &section,
            "local_capacity",
            Problem::MustBePositive,
        ));
    }
    let drain_window = spec.drain_window.unwrap_or(DEFAULT_DRAIN_WINDOW);
    if !(drain_window > 0.0 && drain_window <= 1.0) {
        return Err(ConfigError::at(
            &section,
            "drain_window",
            Problem::DrainWindow(drain_window),
        ));
    }
    let buffer_checkpoints = spec
        .buffer_checkpoints
        .unwrap_or(DEFAULT_BUFFER_CHECKPOINTS);
    if buffer_checkpoints == 0 {
        return Err(ConfigError::at(
            &section,
            "buffer_checkpoints",
            Problem::MustBePositive,
        ));
    }
    let node = Node {
        local_capacity: spec.local_capacity,
        drain_window,
        buffer_checkpoints,
    };
    Ok((node, spec.local_write_bandwidth))
}

fn tenant(
    spec: TenantSpec,
    section: &Section,
    default_local_write: Rate,
) -> Result<Tenant, ConfigError> {
    let count = spec.count.unwrap_or(1);
    if count == 0 {
        return Err(ConfigError::at(section, "count", Problem::MustBePositive));
    }
    if spec.nodes == 0 {
        return Err(ConfigError::at(section, "nodes", Problem::MustBePositive));
    }
    if spec.checkpoint_size.bytes() == 0 {
        return Err(ConfigError::at(
            section,
            "checkpoint_size",
            Problem::MustBePositive,
        ));
    }
    let interval = spec.interval.get();
    if interval.is_zero() {
        return Err(ConfigError::at(
            section,
            "interval",
            Problem::MustBePositive,
        ));
    }
    // Rounded as the planner rounds it: to whole bytes per second.
    if spec.burst_bandwidth.bytes_per_sec().round() < 1.0 {
        return Err(ConfigError::at(
            section,
            "burst_bandwidth",
            Problem::MustBePositive,
        ));
    }
    let local_write_bandwidth = match spec.local_write_bandwidth {
        Some(rate) => positive_rate(rate, section, "local_write_bandwidth")?,
        None => default_local_write,
    };
    let phase = match spec.phase.as_deref().map(str::trim) {
        None | Some("random") => Phase::Random,
        Some(text) => {
            let offset = text
                .parse::<HumanDuration>()
                .map_err(|e| ConfigError::at(section, "phase", Problem::BadPhase(e.to_string())))?
                .get();
            if offset >= interval {
                return Err(ConfigError::at(
                    section,
                    "phase",
                    Problem::PhaseNotInInterval {
                        phase: offset,
                        interval,
                    },
                ));
            }
            Phase::Fixed(offset)
        }
    };
    let tenant = Tenant {
        name: spec.name,
        count,
        nodes: spec.nodes,
        checkpoint_size: spec.checkpoint_size,
        interval,
        burst_bandwidth: spec.burst_bandwidth,
        read_bandwidth: spec.read_bandwidth.unwrap_or_default(),
        phase,
        local_write_bandwidth,
    };
    if tenant.burst_seconds() > tenant.interval_seconds() {
        return Err(ConfigError::at(
            section,
            "burst_bandwidth",
            Problem::BurstLongerThanInterval {
                burst_seconds: tenant.burst_seconds(),
                interval,
            },
        ));
    }
    Ok(tenant)
}

fn positive_rate(rate: Rate, section: &Section, key: &str) -> Result<Rate, ConfigError> {
    if rate.bytes_per_sec() > 0.0 {
        Ok(rate)
    } else {
        Err(ConfigError::at(section, key, Problem::MustBePositive))
    }
}
