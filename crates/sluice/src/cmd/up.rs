//! `sluice up`: a single-node deployment from the embedded example configuration.
//!
//! Start-up binds every listener first (the gateway's S3 and metrics addresses, the agent's
//! S3 and status addresses), so that an address in use fails before anything is created, with
//! the configuration key and the flag that change it named. Then the gateway and the agent
//! are opened (data directories, catalogs, reconciliation) and only then served: a failure
//! while opening starts nothing and removes the data directories this run created.

use std::path::{Path, PathBuf};

use sluice_config::Config;

/// The example configuration, embedded so that `sluice up` works from a bare checkout.
const EXAMPLE: &str = include_str!("../../../../examples/sluice.toml");

#[derive(clap::Args)]
pub struct Args {
    /// Use this configuration instead of the embedded example (SIGHUP reloads it).
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// The gateway's S3 address (`[gateway] listen`), e.g. 127.0.0.1:9000.
    #[arg(long, value_name = "ADDR")]
    pub gateway_listen: Option<String>,
    /// The gateway's /metrics, /healthz and /readyz address (`[gateway] metrics_listen`).
    #[arg(long, value_name = "ADDR")]
    pub gateway_metrics_listen: Option<String>,
    /// The node agent's S3 address (`[agent] listen`), e.g. 127.0.0.1:9100.
    #[arg(long, value_name = "ADDR")]
    pub agent_listen: Option<String>,
    /// The node agent's /status, /metrics, /healthz and /readyz address
    /// (`[agent] status_listen`).
    #[arg(long, value_name = "ADDR")]
    pub agent_status_listen: Option<String>,
}

impl Args {
    /// The flags' addresses put into `config` (at start and on every reload, so that a
    /// reload of the file does not see them as changed). An agent whose upstream is the
    /// gateway's configured address follows the gateway to its new one.
    fn apply(&self, config: &mut Config) {
        if let Some(g) = config.gateway.as_mut() {
            if let Some(l) = &self.gateway_listen {
                if let Some(a) = config.agent.as_mut() {
                    let before = format!("http://{}", g.listen);
                    for u in a.upstream.iter_mut().filter(|u| **u == before) {
                        *u = format!("http://{l}");
                    }
                }
                g.listen.clone_from(l);
            }
            if let Some(m) = &self.gateway_metrics_listen {
                g.metrics_listen = Some(m.clone());
            }
        }
        if let Some(a) = config.agent.as_mut() {
            if let Some(l) = &self.agent_listen {
                a.listen.clone_from(l);
            }
            if let Some(s) = &self.agent_status_listen {
                a.status_listen = Some(s.clone());
            }
        }
    }
}

/// The flag that overrides a listen key.
fn flag(key: &str) -> &'static str {
    match key {
        "[gateway] listen" => "--gateway-listen",
        "[gateway] metrics_listen" => "--gateway-metrics-listen",
        "[agent] listen" => "--agent-listen",
        _ => "--agent-status-listen",
    }
}

/// The data directories of `config` that do not exist yet, as the topmost missing ancestor
/// of each: what this run will create, and remove again if it fails to start.
fn missing_dirs(config: &Config) -> Vec<PathBuf> {
    let dirs = config
        .gateway
        .iter()
        .map(|g| g.data_dir.as_path())
        .chain(config.agent.iter().map(|a| a.data_dir.as_path()));
    let mut out: Vec<PathBuf> = Vec::new();
    for dir in dirs {
        let mut top = None;
        let mut cur = Some(dir);
        while let Some(d) = cur.filter(|d| !d.as_os_str().is_empty() && !d.exists()) {
            top = Some(d.to_path_buf());
            cur = d.parent();
        }
        if let Some(t) = top
            && !out.contains(&t)
        {
            out.push(t);
        }
    }
    out
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    let mut config = match &args.config {
        Some(p) => Config::load(p)?,
        None => Config::parse(EXAMPLE, Path::new("./sluice.toml"))?,
    };
    args.apply(&mut config);
    let file = args.config.as_ref().map_or_else(
        || "the embedded example".to_owned(),
        |p| p.display().to_string(),
    );
    super::runtime()?.block_on(async {
        let listen_failed = |e: &dyn std::fmt::Display, key: &str| {
            anyhow::anyhow!(
                "{e}; change it in {file} or pass {} ADDR",
                flag(key)
            )
        };
        let gateway_listeners = sluice_gateway::Listeners::bind(&config)
            .await
            .map_err(|e| match &e {
                sluice_gateway::GatewayError::Listen { key, .. } => listen_failed(&e, key),
                _ => e.into(),
            })?;
        let agent_listeners = match &config.agent {
            None => None,
            Some(_) => Some(sluice_agent::Listeners::bind(&config).await.map_err(
                |e| match &e {
                    sluice_agent::AgentError::Listen { key, .. } => listen_failed(&e, key),
                    _ => e.into(),
                },
            )?),
        };
        let created = missing_dirs(&config);
        let opened = open(&config).await;
        let (gateway, agent) = match opened {
            Ok(both) => both,
            Err(e) => {
                for dir in &created {
                    if let Err(rm) = std::fs::remove_dir_all(dir) {
                        tracing::warn!(dir = %dir.display(), error = %rm, "cannot remove what this run created");
                    }
                }
                return Err(e);
            }
        };
        let running = gateway.start_on(gateway_listeners);
        let agent = match (agent, agent_listeners) {
            (Some(a), Some(l)) => Some(a.start_on(l)),
            _ => None,
        };
        print_banner(&config, &running, agent.as_ref());
        let adjust = |c: &mut Config| args.apply(c);
        let reload = super::Reload {
            path: args.config.as_deref(),
            adjust: Some(&adjust),
            gateway: Some(&running.control),
            agent: agent.as_ref().map(|a| &a.control),
        };
        super::serve_until_signal(&reload).await?;
        // The agent first (its drain talks to the gateway), then the gateway.
        if let Some(agent) = agent {
            agent.shutdown().await;
        }
        running.shutdown().await;
        Ok(())
    })
}

/// Opens (and reconciles) the gateway, then the agent; serves neither.
async fn open(
    config: &Config,
) -> anyhow::Result<(sluice_gateway::Gateway, Option<sluice_agent::Agent>)> {
    let gateway = super::gateway::open(config).await?;
    let agent = match &config.agent {
        Some(_) => Some(super::agent::open(config).await?),
        None => None,
    };
    Ok((gateway, agent))
}

fn print_banner(
    config: &Config,
    running: &sluice_gateway::Running,
    agent: Option<&sluice_agent::Running>,
) {
    let scheme = |tls: bool| if tls { "https" } else { "http" };
    let gateway_tls = config.gateway.as_ref().is_some_and(|g| g.tls.is_some());
    let agent_tls = config.agent.as_ref().is_some_and(|a| a.tls.is_some());
    let gateway_endpoint = format!("{}://{}", scheme(gateway_tls), running.addr);
    // Trainers on this node talk to the agent; the gateway is the shared tier behind it.
    let endpoint = agent.map_or_else(
        || gateway_endpoint.clone(),
        |a| format!("{}://{}", scheme(agent_tls), a.addr),
    );
    println!("sluice is up.");
    println!();
    if let Some(a) = agent {
        println!("  S3 endpoint (node agent, for trainers): {endpoint}");
        println!("  S3 endpoint (gateway, shared tier):     {gateway_endpoint}");
        if let Some(s) = a.status_addr {
            println!(
                "  agent status:          http://{s}/status, /metrics, /healthz, /readyz  (or: sluice agent status --config FILE)"
            );
        }
    } else {
        println!("  S3 endpoint (gateway): {endpoint}");
    }
    if let Some(m) = running.metrics_addr {
        println!("  gateway metrics:       http://{m}/metrics, /healthz, /readyz");
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
        println!(
            "  tenant {:<8} AWS_ACCESS_KEY_ID={} AWS_SECRET_ACCESS_KEY={}",
            t.id, t.access_key, t.secret_key
        );
    }
    println!();
    if let Some(t) = config.tenants.first() {
        println!("Try:");
        println!(
            "  AWS_ACCESS_KEY_ID={} AWS_SECRET_ACCESS_KEY={} aws --endpoint-url {endpoint} s3 mb s3://ckpt",
            t.access_key, t.secret_key
        );
    }
    println!("Ctrl-C stops it; SIGHUP reloads the tenants from --config FILE.");
}
