//! The provisioning arithmetic behind `sluice plan`: given tenants' checkpoint profiles, how
//! much bandwidth the shared tier needs and how much local disk each GPU node needs.
//!
//! Tenants checkpoint on their own clocks, so the shared tier sees a sum of *uncorrelated*
//! bursts: far below the sum of peaks, well above the sum of averages. This crate owns
//!
//! - the planning file: its schema and validation ([`config`] → [`fleet`]);
//! - the exact distribution of aggregate demand and its percentiles ([`demand`]), including
//!   tenants on fixed, possibly aligned, timetables ([`alignment`]);
//! - node-local absorption, where bursts land on the node and drain at a paced rate
//!   ([`absorption`]), and the gateway reservations that follow ([`reservation`]);
//! - a seeded Monte Carlo cross-check ([`simulation`]);
//! - the plan's presentation: text ([`report`]), JSON (serde on [`Plan`]) and an SVG chart
//!   ([`chart`]).
//!
//! It owns no I/O: callers pass the file's text and get strings back. It does not enforce
//! anything — the gateway's scheduler and the node agent do.
//!
//! ```
//! let fleet = sluice_plan::config::parse(r#"
//!     [node]
//!     local_write_bandwidth = "10GiB/s"
//!     local_capacity = "28TiB"
//!     [[tenant]]
//!     name = "llama-70b"
//!     nodes = 64
//!     checkpoint_size = "980GB"
//!     interval = "30m"
//!     burst_bandwidth = "16GiB/s"
//! "#).expect("valid");
//! let plan = sluice_plan::plan(&fleet, &sluice_plan::Options::default());
//! assert!(plan.sum_of_averages < plan.target.bandwidth);
//! ```

pub mod absorption;
pub mod alignment;
pub mod chart;
pub mod config;
pub mod demand;
pub mod fleet;
mod plan;
pub mod report;
pub mod reservation;
pub mod simulation;

pub use config::{ConfigError, parse};
pub use fleet::Fleet;
pub use plan::{
    AlignedPlan, CapacityPlan, Check, DistributionInfo, Options, PERCENTILES, Percentiles, Plan,
    SimulateOptions, Status, Target, TenantPlan, WithNodeAbsorption, plan,
};

#[cfg(test)]
mod tests;
