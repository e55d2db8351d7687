//! Subcommands of the `sluice` binary.

pub mod plan;
