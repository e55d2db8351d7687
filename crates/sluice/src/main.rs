//! The `sluice` binary: one command per part of the system. Each subcommand lives in its own
//! module under `cmd/` and only parses arguments and wires library crates together.

mod cmd;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "sluice", version, about = "Storage for multi-tenant GPU clouds")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Provisioning arithmetic for uncorrelated checkpoint bursts.
    Plan(cmd::plan::Args),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Plan(args) => cmd::plan::run(&args),
    }
}
