//! The `sluice` binary: one command per part of the system. Each subcommand lives in its own
//! module under `cmd/` and only parses arguments and wires library crates together.

mod cmd;
mod logging;
mod top;

use clap::{Parser, Subcommand};

/// Large blocks on a page: see `sluice_alloc` (request bodies reach the disk without a copy).
#[global_allocator]
static ALLOC: sluice_alloc::PageAligned = sluice_alloc::PageAligned;

#[derive(Parser)]
#[command(
    name = "sluice",
    version,
    about = "Storage for multi-tenant GPU clouds",
    after_help = "Logs go to stderr. SLUICE_LOG (or, if it is unset, RUST_LOG) sets their filter, \
                  e.g. SLUICE_LOG=debug or SLUICE_LOG=info,sluice_serve=debug; the default is \
                  info,s3s=off. Each request is logged once, with its id (the x-amz-request-id \
                  of its response) and tenant: server faults at error, everything else at debug."
)]
struct Cli {
    /// How log lines are written: text (coloured only on a terminal), or json (one object a
    /// line, for log collectors).
    #[arg(long, global = true, value_enum, default_value_t)]
    log_format: logging::Format,
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
    /// The catalog against the backend's recovery records: rebuild, check, gc.
    #[command(subcommand)]
    Catalog(cmd::catalog::Command),
    /// Read every blob back and verify its checksums; exits 1 on a corrupt or missing one.
    Scrub(cmd::scrub::Args),
    /// Provisioning arithmetic for uncorrelated checkpoint bursts.
    Plan(cmd::plan::Args),
    /// Measure the configured backend's bandwidth and operation rate for [gateway.capacity].
    Calibrate(cmd::bench::CalibrateArgs),
    /// Every tenant across the deployment's gateways and agents, live: rates against
    /// reservation, weight share and limit, queue, SlowDowns, the per-gateway split, the
    /// agents' durability lag (--once: one frame; --once --json: as JSON).
    Top(top::Args),
    /// Benchmarks (figures, not tests).
    #[command(subcommand)]
    Bench(cmd::bench::Command),
}

/// A failure is one line on stderr, its causes joined by `: ` (no backtrace: it is the
/// operator's to read, not a developer's), and exit status 1.
fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> anyhow::Result<()> {
    let cli = Cli::parse();
    logging::init(cli.log_format)?;
    match cli.command {
        Command::Up(args) => cmd::up::run(&args),
        Command::Gateway(args) => cmd::gateway::run(&args),
        Command::Agent(args) => cmd::agent::run(&args),
        Command::Tenant(cmd) => cmd::tenant::run(&cmd),
        Command::Catalog(cmd) => cmd::catalog::run(&cmd),
        Command::Scrub(args) => cmd::scrub::run(&args),
        Command::Plan(args) => cmd::plan::run(&args),
        Command::Top(args) => top::run(&args),
        Command::Bench(cmd) => cmd::bench::run(&cmd),
        Command::Calibrate(args) => cmd::bench::calibrate(&args),
    }
}
