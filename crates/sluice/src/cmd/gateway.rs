//! `sluice gateway --config FILE`: serve the shared-tier S3 endpoint until SIGINT/SIGTERM.

use std::path::PathBuf;

use anyhow::Context;
use sluice_config::Config;
use sluice_gateway::Gateway;

#[derive(clap::Args)]
pub struct Args {
    /// The configuration file (TOML) with a [gateway] section and tenants.
    #[arg(long, short)]
    pub config: PathBuf,
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    let config = Config::load(&args.config)?;
    super::runtime()?.block_on(async {
        let running = start(&config).await?;
        super::until_signal(running, Some(&args.config)).await
    })
}

/// Opens, reconciles and starts the gateway, printing where it listens.
pub async fn start(config: &Config) -> anyhow::Result<sluice_gateway::Running> {
    let gateway = Gateway::open(config)
        .await
        .context("starting the gateway")?;
    let s = &gateway.summary;
    tracing::info!(
        orphans_deleted = s.orphans_deleted,
        staged_deleted = s.staged_deleted,
        missing = s.missing.len(),
        usage_fixed = s.usage_fixed.len(),
        "reconciled with the backend"
    );
    let running = gateway.start().await?;
    tracing::info!(addr = %running.addr, "gateway listening");
    if let Some(m) = running.metrics_addr {
        tracing::info!(addr = %m, "metrics at /metrics");
    }
    Ok(running)
}
