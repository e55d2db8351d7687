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
        let endpoint = format!("http://{}", running.addr);
        println!("sluice is up.");
        println!();
        println!("  S3 endpoint (gateway): {endpoint}");
        if let Some(g) = &config.gateway {
            println!("  region:                {}", g.region);
            println!("  data:                  {}", g.data_dir.display());
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
        super::until_signal(running, args.config.as_deref()).await
    })
}
