//! `sluice agent --config FILE`: serve the node agent until SIGINT/SIGTERM; SIGHUP reloads
//! the tenants' settings from FILE.
//! `sluice agent status --config FILE [--metrics]`: print a running agent's status.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use sluice_agent::Agent;
use sluice_config::Config;

#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Args {
    #[command(subcommand)]
    pub command: Option<Sub>,
    /// The configuration file (TOML) with an [agent] section and tenants.
    #[arg(long, short)]
    pub config: Option<PathBuf>,
}

#[derive(clap::Subcommand)]
pub enum Sub {
    /// Print the running agent's per-tenant status (JSON), or its Prometheus metrics.
    Status {
        #[arg(long, short)]
        config: PathBuf,
        /// Print the Prometheus text instead of JSON.
        #[arg(long)]
        metrics: bool,
    },
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    match &args.command {
        Some(Sub::Status { config, metrics }) => status(config, *metrics),
        None => {
            let Some(path) = &args.config else {
                bail!("--config FILE is required");
            };
            let config = Config::load(path)?;
            super::runtime()?.block_on(async {
                let listeners =
                    sluice_agent::Listeners::bind(&config)
                        .await
                        .map_err(|e| match &e {
                            sluice_agent::AgentError::Listen { .. } => {
                                anyhow::anyhow!("{e}; change it in {}", path.display())
                            }
                            _ => e.into(),
                        })?;
                let running = open(&config).await?.start_on(listeners);
                log_listening(&running);
                let reload = super::Reload {
                    path: Some(path),
                    adjust: None,
                    gateway: None,
                    agent: Some(&running.control),
                };
                super::serve_until_signal(&reload).await?;
                let _ = running.stopper().send(true);
                running.wait().await;
                Ok(())
            })
        }
    }
}

/// Opens and reconciles the agent (it serves nothing yet).
pub async fn open(config: &Config) -> anyhow::Result<Agent> {
    let agent = Agent::open(config).await.context("starting the agent")?;
    let s = &agent.summary;
    tracing::info!(
        orphans_deleted = s.orphans_deleted,
        staged_deleted = s.staged_deleted,
        missing = s.missing.len(),
        "reconciled with the node's disk"
    );
    Ok(agent)
}

/// Opens, reconciles and starts the agent, logging where it listens.
pub async fn start(config: &Config) -> anyhow::Result<sluice_agent::Running> {
    let running = open(config).await?.start().await?;
    log_listening(&running);
    Ok(running)
}

fn log_listening(running: &sluice_agent::Running) {
    tracing::info!(addr = %running.addr, status = ?running.status_addr, "agent listening");
}

fn status(path: &Path, metrics: bool) -> anyhow::Result<()> {
    let config = Config::load(path)?;
    let a = config
        .agent
        .as_ref()
        .context("the configuration has no [agent] section")?;
    let body = match (&a.status_listen, metrics) {
        (Some(addr), _) => {
            let route = if metrics { "/metrics" } else { "/status" };
            let url = format!("http://{addr}{route}");
            super::runtime()?
                .block_on(async {
                    let (status, body) = super::request(http::Method::GET, &url, None, "").await?;
                    anyhow::ensure!(status.is_success(), "{status}: {body}");
                    Ok(body)
                })
                .with_context(|| format!("asking the agent at {addr}"))?
        }
        (None, true) => bail!(
            "the agent serves metrics on its operator address only: set [agent] status_listen"
        ),
        (None, false) => tenants_status(&config, &a.listen)
            .with_context(|| format!("asking the agent at {}", a.listen))?,
    };
    print!("{body}");
    if !body.ends_with('\n') {
        println!();
    }
    Ok(())
}

/// Without `status_listen`: every configured tenant's own status from the S3 listener
/// (`GET /?sluice-status`, signed with the tenant's keys), in the operator document's shape.
fn tenants_status(config: &Config, listen: &str) -> anyhow::Result<String> {
    let region = config
        .gateway
        .as_ref()
        .map_or("us-east-1", |g| g.region.as_str());
    super::runtime()?.block_on(async {
        let mut upstream = serde_json::Value::Null;
        let mut rows = Vec::new();
        for t in &config.tenants {
            let url = format!("http://{listen}/?{}", sluice_agent::server::STATUS_QUERY);
            let keys = (t.access_key.as_str(), t.secret_key.as_str());
            let (status, text) = super::request(http::Method::GET, &url, Some(keys), region)
                .await
                .with_context(|| format!("tenant {}", t.id))?;
            if !status.is_success() {
                bail!("tenant {}: {status}: {text}", t.id);
            }
            let mut doc: serde_json::Value = serde_json::from_str(&text)?;
            upstream = doc["upstream"].take();
            if let serde_json::Value::Array(mine) = doc["tenants"].take() {
                rows.extend(mine);
            }
        }
        let doc = serde_json::json!({ "upstream": upstream, "tenants": rows });
        Ok(serde_json::to_string_pretty(&doc)?)
    })
}
