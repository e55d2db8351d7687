//! `sluice plan FILE`: reads a planning file, prints the plan (text or JSON) and optionally
//! writes the demand chart. All arithmetic lives in the `sluice-plan` crate.

use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use sluice_units::Rate;

#[derive(clap::Args)]
pub struct Args {
    /// The planning input (TOML): [shared_tier], [node] and one [[tenant]] per job shape.
    pub file: PathBuf,
    /// Print the plan as JSON (every rate in bytes per second) instead of the report.
    #[arg(long)]
    pub json: bool,
    /// Write the aggregate-demand chart (exceedance curve) as SVG to OUT.
    #[arg(long, value_name = "OUT")]
    pub svg: Option<PathBuf>,
    /// Cross-check the exact distribution with a Monte Carlo of N random instants and phases.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub simulate: Option<u64>,
    /// Seed for --simulate (default: from the clock); the report prints it for replay.
    #[arg(long, value_name = "S", requires = "simulate")]
    pub seed: Option<u64>,
    /// The shared tier's bandwidth to check against, e.g. "400GiB/s" (overrides
    /// [shared_tier] capacity).
    #[arg(long, value_name = "RATE")]
    pub capacity: Option<Rate>,
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&args.file)
        .with_context(|| format!("reading {}", args.file.display()))?;
    let fleet =
        sluice_plan::parse(&text).map_err(|e| anyhow::anyhow!("{}: {e}", args.file.display()))?;
    let options = sluice_plan::Options {
        capacity: args.capacity,
        simulate: args.simulate.map(|samples| sluice_plan::SimulateOptions {
            samples,
            seed: args.seed.unwrap_or_else(clock_seed),
        }),
    };
    let plan = sluice_plan::plan(&fleet, &options);
    if let Some(out) = &args.svg {
        std::fs::write(out, sluice_plan::chart::svg(&plan))
            .with_context(|| format!("writing {}", out.display()))?;
        eprintln!("wrote the demand chart to {}", out.display());
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&plan)?);
    } else {
        print!(
            "{}",
            sluice_plan::report::render(&plan, &args.file.display().to_string())
        );
    }
    Ok(())
}

fn clock_seed() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}
