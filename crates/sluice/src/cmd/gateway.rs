//! `sluice gateway --config FILE`: serve the shared-tier S3 endpoint until SIGINT/SIGTERM;
//! SIGHUP reloads the tenants' settings from FILE. The listeners are bound before the
//! catalog is opened, so that an address in use fails the start before anything is created.

use std::path::PathBuf;

use anyhow::Context;
use sluice_config::Config;
use sluice_gateway::{Gateway, GatewayError, Listeners};

#[derive(clap::Args)]
pub struct Args {
    /// The configuration file (TOML) with a [gateway] section and tenants.
    #[arg(long, short)]
    pub config: PathBuf,
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    let config = Config::load(&args.config)?;
    super::runtime()?.block_on(async {
        let listeners = Listeners::bind(&config).await.map_err(|e| match &e {
            GatewayError::Listen { .. } => {
                anyhow::anyhow!("{e}; change it in {}", args.config.display())
            }
            _ => e.into(),
        })?;
        let running = open(&config).await?.start_on(listeners);
        log_listening(&running);
        super::until_signal(running, Some(&args.config)).await
    })
}

/// Opens and reconciles the gateway (it serves nothing yet).
pub async fn open(config: &Config) -> anyhow::Result<Gateway> {
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
    Ok(gateway)
}

/// Opens, reconciles and starts the gateway, logging where it listens.
pub async fn start(config: &Config) -> anyhow::Result<sluice_gateway::Running> {
    let running = open(config).await?.start().await?;
    log_listening(&running);
    Ok(running)
}

fn log_listening(running: &sluice_gateway::Running) {
    tracing::info!(addr = %running.addr, "gateway listening");
    if let Some(m) = running.metrics_addr {
        tracing::info!(addr = %m, "/metrics, /healthz and /readyz served");
    }
}
