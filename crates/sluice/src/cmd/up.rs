//! `sluice up`: a single-node deployment from the embedded example configuration.

use std::path::{Path, PathBuf};

use sluice_config::Config;

/// The example configuration, embedded so that `sluice up` works from a bare checkout.
const EXAMPLE: &str = include_str!("../../../../examples/sluice.toml");

#[derive(clap::Args)]
pub struct Args {
    /// Use this configuration instead of the embedded example.
    #[arg(long, short)]
    pub config: Option<PathBuf>,
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    let config = match &args.config {
        Some(p) => Config::load(p)?,
        None => Config::parse(EXAMPLE, Path::new("./sluice.toml"))?,
    };
    super::runtime()?.block_on(async {
        let running = super::gateway::start(&config).await?;
        let gateway_endpoint = format!("http://{}", running.addr);
        let agent = match &config.agent {
            Some(_) => Some(super::agent::start(&config).await?),
            None => None,
        };
        // Trainers on this node talk to the agent; the gateway is the shared tier behind it.
        let endpoint = agent
            .as_ref()
            .map_or_else(|| gateway_endpoint.clone(), |a| format!("http://{}", a.addr));
        println!("sluice is up.");
        println!();
        if let Some(a) = &agent {
            println!("  S3 endpoint (node agent, for trainers): {endpoint}");
            println!("  S3 endpoint (gateway, shared tier):     {gateway_endpoint}");
            if let Some(s) = a.status_addr {
                println!("  agent status:          http://{s}/status  (or: sluice agent status --config FILE)");
            }
        } else {
            println!("  S3 endpoint (gateway): {endpoint}");
        }
        if let Some(g) = &config.gateway {
            println!("  region:                {}", g.region);
            println!("  data:                  {}", g.data_dir.display());
        }
        if let Some(a) = &config.agent {
            println!("  agent data:            {}", a.data_dir.display());
        }
        println!("  addressing:            path-style");
        println!();
        for t in &config.tenants {
            println!("  tenant {:<8} AWS_ACCESS_KEY_ID={} AWS_SECRET_ACCESS_KEY={}", t.id, t.access_key, t.secret_key);
        }
        println!();
        if let Some(t) = config.tenants.first() {
            println!("Try:");
            println!(
                "  AWS_ACCESS_KEY_ID={} AWS_SECRET_ACCESS_KEY={} aws --endpoint-url {endpoint} s3 mb s3://ckpt",
                t.access_key, t.secret_key
            );
        }
        println!("Ctrl-C stops it.");
        match agent {
            None => super::until_signal(running, args.config.as_deref()).await,
            Some(agent) => {
                let reload = super::Reload {
                    path: args.config.as_deref(),
                    gateway: Some(&running.control),
                    agent: Some(&agent.control),
                };
                super::serve_until_signal(&reload).await?;
                // The agent first (its drain talks to the gateway), then the gateway.
                agent.shutdown().await;
                let _ = running.stopper().send(true);
                running.wait().await;
                Ok(())
            }
        }
    })
}
