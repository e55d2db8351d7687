//! The `sluice` binary: one command per part of the system. Each subcommand lives in its own
//! module under `cmd/` and only parses arguments and wires library crates together.

mod cmd;

use clap::{Parser, Subcommand};

/// Large blocks on a page: see `sluice_alloc` (request bodies reach the disk without a copy).
#[global_allocator]
static ALLOC: sluice_alloc::PageAligned = sluice_alloc::PageAligned;

#[derive(Parser)]
#[command(
    name = "sluice",
    version,
    about = "Storage for multi-tenant GPU clouds"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Start a single-node deployment (gateway and node agent) from the example config.
    Up(cmd::up::Args),
    /// Serve the shared-tier S3 gateway.
    Gateway(cmd::gateway::Args),
    /// Serve the node agent (local burst buffer draining to the gateway), or show its status.
    Agent(cmd::agent::Args),
    /// Tenant administration.
    #[command(subcommand)]
    Tenant(cmd::tenant::Command),
    /// Provisioning arithmetic for uncorrelated checkpoint bursts.
    Plan(cmd::plan::Args),
    /// Measure the configured backend's bandwidth and operation rate for [gateway.capacity].
    Calibrate(cmd::bench::CalibrateArgs),
    /// Benchmarks (figures, not tests).
    #[command(subcommand)]
    Bench(cmd::bench::Command),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,s3s=warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    match cli.command {
        Command::Up(args) => cmd::up::run(&args),
        Command::Gateway(args) => cmd::gateway::run(&args),
        Command::Agent(args) => cmd::agent::run(&args),
        Command::Tenant(cmd) => cmd::tenant::run(&cmd),
        Command::Plan(args) => cmd::plan::run(&args),
        Command::Bench(cmd) => cmd::bench::run(&cmd),
        Command::Calibrate(args) => cmd::bench::calibrate(&args),
    }
}
