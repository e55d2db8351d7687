//! `sluice tenant list`: usage and quota per tenant (bytes, and objects with multipart
//! uploads in progress), from the gateway's ledger.
//!
//! Reads the catalog file directly, so the gateway must be stopped (redb holds an exclusive
//! lock while it runs); the figures are those the gateway itself would load at start.

use std::path::PathBuf;

use anyhow::Context;
use sluice_config::Config;
use sluice_meta::Catalog;

#[derive(clap::Subcommand)]
pub enum Command {
    /// Usage and quota per tenant.
    List(ListArgs),
}

#[derive(clap::Args)]
pub struct ListArgs {
    #[arg(long, short)]
    pub config: PathBuf,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

pub fn run(cmd: &Command) -> anyhow::Result<()> {
    match cmd {
        Command::List(args) => list(args),
    }
}

fn list(args: &ListArgs) -> anyhow::Result<()> {
    let config = Config::load(&args.config)?;
    let g = sluice_gateway::gateway_section(&config)?;
    let path = g.data_dir.join("meta.redb");
    let (catalog, _) = Catalog::open(&path).with_context(|| {
        format!(
            "opening {} (is the gateway still running? it locks the file)",
            path.display()
        )
    })?;
    sluice_gateway::set_tenant_limits(catalog.ledger(), &config);
    let rows = catalog.ledger().all();
    let objects = |id: &str| catalog.ledger().objects(id).unwrap_or((0, u64::MAX));
    if args.json {
        let v: Vec<_> = rows
            .iter()
            .map(|(id, used, _, quota)| {
                let (n, max) = objects(id);
                serde_json::json!({
                    "tenant": id, "used_bytes": used, "quota_bytes": quota,
                    "objects": n, "max_objects": (max != u64::MAX).then_some(max),
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!(
        "{:<20} {:>14} {:>14} {:>7} {:>12} {:>12}",
        "TENANT", "USED", "QUOTA", "USE%", "OBJECTS", "MAX OBJECTS"
    );
    for (id, used, _, quota) in rows {
        let pct = if quota == 0 || quota == u64::MAX {
            "-".to_owned()
        } else {
            format!("{:.1}", used as f64 * 100.0 / quota as f64)
        };
        let q = if quota == u64::MAX {
            "unlimited".to_owned()
        } else {
            sluice_units::ByteSize(quota).to_string()
        };
        let (n, max) = objects(&id);
        let max = if max == u64::MAX {
            "unlimited".to_owned()
        } else {
            max.to_string()
        };
        println!(
            "{id:<20} {:>14} {q:>14} {pct:>7} {n:>12} {max:>12}",
            sluice_units::ByteSize(used).to_string()
        );
    }
    Ok(())
}
