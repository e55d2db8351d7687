//! `sluice tenant add|set|key add|key revoke|remove|list|history`: tenants, quotas, rates
//! and keys of a running deployment, found from its configuration file alone
//! (`sluice_gateway::admin` says how):
//! - a shared catalog (`[catalog] url`): the CLI goes to the catalog itself, with its own
//!   credentials; every gateway serves the change within a second;
//! - the embedded catalog: the CLI asks the running gateway (`POST /admin` on `[gateway]
//!   metrics_listen`, with `[admin] token` or the gateway's `data_dir/admin.token`), which
//!   serves the change before it answers; with the gateway stopped, the CLI opens the
//!   catalog file itself.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, bail};
use sluice_config::Config;
use sluice_gateway::admin::{self, AdminRequest, Limits, Settings};
use sluice_meta::Catalog;
use sluice_units::{ByteSize, HumanDuration, Rate};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[derive(clap::Subcommand)]
pub enum Command {
    /// A new tenant; prints its first access key and secret.
    Add(AddArgs),
    /// Changes a tenant's quota, object and bucket limits, or rates.
    Set(SetArgs),
    /// A tenant's access keys.
    #[command(subcommand)]
    Key(KeyCommand),
    /// Removes a tenant (refused while it owns a bucket, unless --purge).
    Remove(RemoveArgs),
    /// Usage, quota, rates and key ids per tenant (never secrets).
    List(ListArgs),
    /// The audit record of administrative changes: who, what, when.
    History(HistoryArgs),
    /// A node agent's credential ([agent] node_credential_file): it reads the tenants and
    /// their keys from the gateways' control listener, and changes nothing.
    NodeToken(NodeTokenArgs),
}

#[derive(clap::Args)]
pub struct NodeTokenArgs {
    /// The node's name (1 to 63 characters of a-z, A-Z, 0-9, '-' and '_').
    pub node: String,
    #[arg(long, short)]
    pub config: PathBuf,
}

#[derive(clap::Subcommand)]
pub enum KeyCommand {
    /// Another access key for the tenant; prints it and its secret.
    Add(KeyAddArgs),
    /// Revokes an access key: it stops working on every gateway within a second.
    Revoke(KeyRevokeArgs),
}

#[derive(clap::Args)]
pub struct Common {
    #[arg(long, short)]
    pub config: PathBuf,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args)]
pub struct SettingsArgs {
    /// Hard quota on the shared tier (e.g. 10GiB).
    #[arg(long)]
    pub capacity: Option<ByteSize>,
    /// Objects and multipart uploads in progress.
    #[arg(long)]
    pub max_objects: Option<u64>,
    #[arg(long)]
    pub max_buckets: Option<u64>,
    /// dmClock reservation (e.g. 100MiB/s).
    #[arg(long)]
    pub reservation: Option<Rate>,
    /// dmClock weight.
    #[arg(long)]
    pub weight: Option<f64>,
    /// dmClock limit (e.g. 1GiB/s; 0 removes it).
    #[arg(long)]
    pub limit: Option<Rate>,
    /// Hard quota on each node agent's local device (e.g. 200GiB), held in the catalog
    /// and served to the agents, which apply it within about a second.
    #[arg(long)]
    pub local_capacity: Option<ByteSize>,
    /// The tenant's reservation of each node's local device (e.g. 100MiB/s; needs the
    /// agents' [agent.capacity]).
    #[arg(long)]
    pub local_reservation: Option<Rate>,
    /// The tenant's weight on each node's local device and drain uplink.
    #[arg(long)]
    pub local_weight: Option<f64>,
    /// The tenant's limit on each node's local device (e.g. 300MiB/s; 0 removes it).
    #[arg(long)]
    pub local_limit: Option<Rate>,
}

#[derive(clap::Args)]
pub struct AddArgs {
    pub id: String,
    #[command(flatten)]
    pub settings: SettingsArgs,
    #[command(flatten)]
    pub common: Common,
}

#[derive(clap::Args)]
pub struct SetArgs {
    pub id: String,
    #[command(flatten)]
    pub settings: SettingsArgs,
    /// The catalog no longer holds the node-local settings not given with this command:
    /// each agent's own [[tenant]] entry governs them again.
    #[arg(long)]
    pub clear_local: bool,
    #[command(flatten)]
    pub common: Common,
}

#[derive(clap::Args)]
pub struct KeyAddArgs {
    pub id: String,
    /// The key stops working after this long (e.g. 30d); never, without.
    #[arg(long)]
    pub expires_in: Option<HumanDuration>,
    #[command(flatten)]
    pub common: Common,
}

#[derive(clap::Args)]
pub struct KeyRevokeArgs {
    pub id: String,
    pub access_key: String,
    #[command(flatten)]
    pub common: Common,
}

#[derive(clap::Args)]
pub struct RemoveArgs {
    pub id: String,
    /// Delete the tenant's buckets, objects and uploads first, and say how much.
    #[arg(long)]
    pub purge: bool,
    #[command(flatten)]
    pub common: Common,
}

#[derive(clap::Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub common: Common,
}

#[derive(clap::Args)]
pub struct HistoryArgs {
    pub id: Option<String>,
    #[command(flatten)]
    pub common: Common,
}

/// The options as a request's settings, checked as the file's keys are (the catalog checks
/// them again: this only says it sooner).
fn settings(a: &SettingsArgs) -> anyhow::Result<Settings> {
    if let Some(w) = a.weight
        && !(w.is_finite() && w > 0.0)
    {
        bail!("--weight: must be > 0");
    }
    if let Some(w) = a.local_weight
        && !(w.is_finite() && w > 0.0)
    {
        bail!("--local-weight: must be > 0");
    }
    if let (Some(r), Some(l)) = (a.local_reservation, a.local_limit)
        && l.0 > 0.0
        && l.0 < r.0
    {
        bail!("--local-limit: must not be below the --local-reservation");
    }
    Ok(Settings {
        capacity: a.capacity.map(|c| c.0),
        max_objects: a.max_objects,
        max_buckets: a.max_buckets,
        reservation: a.reservation.map(|r| r.0),
        weight: a.weight,
        limit: a.limit.map(|r| r.0),
        local_capacity: a.local_capacity.map(|c| c.0),
        local_reservation: a.local_reservation.map(|r| r.0),
        local_weight: a.local_weight,
        local_limit: a.local_limit.map(|r| r.0),
        clear_local: false,
    })
}

pub fn run(cmd: &Command) -> anyhow::Result<()> {
    let (common, request, purge) = match cmd {
        Command::NodeToken(a) => {
            let config = Config::load(&a.config)?;
            let token = admin::admin_token(&config, false).context(
                "the admin token ([admin] token, or the gateway's data_dir/admin.token, which \
                 its first start creates)",
            )?;
            println!("{}", admin::node::node_token(&token, &a.node)?);
            return Ok(());
        }
        Command::Add(a) => {
            if a.settings.capacity.is_none() {
                bail!("tenant add needs --capacity (the tenant's quota, e.g. 10GiB)");
            }
            let req = AdminRequest::Add {
                id: a.id.clone(),
                settings: settings(&a.settings)?,
            };
            (&a.common, req, false)
        }
        Command::Set(a) => (
            &a.common,
            AdminRequest::Set {
                id: a.id.clone(),
                settings: Settings {
                    clear_local: a.clear_local,
                    ..settings(&a.settings)?
                },
            },
            false,
        ),
        Command::Key(KeyCommand::Add(a)) => {
            let expires_ms = a.expires_in.map(|d| {
                sluice_meta::now_ms()
                    .saturating_add(i64::try_from(d.0.as_millis()).unwrap_or(i64::MAX))
            });
            (
                &a.common,
                AdminRequest::KeyAdd {
                    id: a.id.clone(),
                    expires_ms,
                },
                false,
            )
        }
        Command::Key(KeyCommand::Revoke(a)) => (
            &a.common,
            AdminRequest::KeyRevoke {
                id: a.id.clone(),
                access_key: a.access_key.clone(),
            },
            false,
        ),
        Command::Remove(a) => (
            &a.common,
            AdminRequest::Remove { id: a.id.clone() },
            a.purge,
        ),
        Command::List(a) => (&a.common, AdminRequest::List, false),
        Command::History(a) => (&a.common, AdminRequest::History { id: a.id.clone() }, false),
    };
    let config = Config::load(&common.config)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let answer = runtime.block_on(send(&config, &request, purge))?;
    if common.json {
        println!("{}", serde_json::to_string_pretty(&answer)?);
    } else {
        print_text(&request, &answer);
    }
    Ok(())
}

/// Who is doing this, for the audit record: `user@host`.
fn who() -> String {
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .unwrap_or_else(|_| "unknown".into());
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map_or_else(|_| "localhost".into(), |h| h.trim().to_owned());
    format!("{user}@{host}")
}

async fn send(
    config: &Config,
    req: &AdminRequest,
    purge: bool,
) -> anyhow::Result<serde_json::Value> {
    if let Some(shared) = &config.catalog {
        let (catalog, _) = sluice_gateway::open_shared_catalog(&shared.url)
            .await
            .context("opening the shared catalog ([catalog] url)")?;
        let who = format!("{} (catalog credentials)", who());
        return direct(config, catalog, req.clone(), purge, who).await;
    }
    let g = sluice_gateway::gateway_section(config)?;
    if purge {
        // A purge deletes backend objects, which the CLI does itself, on the catalog file.
        return offline(config, req, purge, "--purge runs with the gateway stopped").await;
    }
    let Some(listen) = &g.metrics_listen else {
        return offline(config, req, purge, "[gateway] metrics_listen is not set").await;
    };
    let mut addr: SocketAddr = listen
        .parse()
        .with_context(|| format!("[gateway] metrics_listen {listen:?} is not an address"))?;
    if addr.ip().is_unspecified() {
        addr.set_ip(match addr.ip() {
            IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::LOCALHOST),
        });
    }
    let stream = match tokio::net::TcpStream::connect(addr).await {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            return offline(config, req, purge, "the gateway is not running").await;
        }
        Err(e) => return Err(e).with_context(|| format!("connecting to the gateway at {addr}")),
    };
    // A gateway binds its listeners before it opens its data_dir (and creates its token
    // there): one that is starting accepts the connection before its token exists.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while config.admin.token.is_none()
        && !admin::token_path(config)?.exists()
        && std::time::Instant::now() < deadline
    {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let token = admin::admin_token(config, false).with_context(|| {
        "reading the admin token ([admin] token, or the gateway's data_dir/admin.token: run \
         this as the gateway's user)"
    })?;
    let mut body = req.to_json();
    body["who"] = serde_json::Value::String(who());
    post(stream, addr, &token, &body.to_string()).await
}

/// One `POST /admin` over `stream`; the answer's JSON, or its error as an error.
async fn post(
    mut stream: tokio::net::TcpStream,
    addr: SocketAddr,
    token: &str,
    body: &str,
) -> anyhow::Result<serde_json::Value> {
    let head = format!(
        "POST {} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        admin::ADMIN_PATH,
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .context("the gateway's answer has no header section")?;
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .context("the gateway's answer has no status")?;
    let value: serde_json::Value = serde_json::from_str(body.trim())
        .with_context(|| format!("the gateway answered {status} with {body:?}"))?;
    if status != 200 {
        let why = value["error"].as_str().unwrap_or("refused");
        bail!("the gateway refused ({status}): {why}");
    }
    Ok(value)
}

/// The embedded catalog with its gateway stopped: the CLI opens it itself.
async fn offline(
    config: &Config,
    req: &AdminRequest,
    purge: bool,
    why: &str,
) -> anyhow::Result<serde_json::Value> {
    let g = sluice_gateway::gateway_section(config)?;
    let path = g.data_dir.join("meta.redb");
    let catalog = {
        let path = path.clone();
        tokio::task::spawn_blocking(move || Catalog::open(&path)).await?
    };
    let catalog = match catalog {
        Ok((c, _)) => c,
        Err(e) if sluice_gateway::catalog_locked(&e) => bail!(
            "{why} but {} is held by a running gateway: set [gateway] metrics_listen so the \
             CLI can reach it",
            path.display()
        ),
        Err(e) => return Err(e).with_context(|| format!("opening {}", path.display())),
    };
    let who = format!("{} (catalog file)", who());
    direct(config, catalog, req.clone(), purge, who).await
}

/// Executes `req` on `catalog` here (after a purge, with `--purge`).
async fn direct(
    config: &Config,
    catalog: Catalog,
    req: AdminRequest,
    purge: bool,
    who: String,
) -> anyhow::Result<serde_json::Value> {
    let mut purged = None;
    if let (true, AdminRequest::Remove { id }) = (purge, &req) {
        let backend = sluice_store::open_backend(config)?;
        purged = Some(admin::purge(&catalog, &backend, id).await?);
    }
    let sealer = admin::sealer(config, config.catalog.is_none())?;
    let limits = Limits::of(config);
    let catalog = Arc::new(catalog);
    let listing = matches!(req, AdminRequest::List);
    let mut answer = {
        let catalog = Arc::clone(&catalog);
        tokio::task::spawn_blocking(move || admin::execute(&catalog, &sealer, limits, &req, &who))
            .await??
    };
    if listing && let Some(rows) = answer.as_array_mut() {
        // The file's tenants the catalog does not hold yet (a catalog just rebuilt, or a
        // gateway never started since they were added): the gateway seeds them at start.
        let now = sluice_meta::now_ms();
        for t in &config.tenants {
            if rows.iter().any(|r| r["tenant"] == t.id.as_str()) {
                continue;
            }
            let spec = sluice_meta::TenantSpec {
                id: t.id.clone(),
                capacity: t.capacity,
                max_objects: t.max_objects,
                max_buckets: t.max_buckets,
                reservation: t.qos.reservation,
                weight: t.qos.weight,
                limit: t.qos.limit,
                keys: vec![sluice_meta::TenantKeySpec::new(t.access_key.clone(), "", 0)],
                online: false,
                local: sluice_meta::LocalSettings::default(),
            };
            rows.push(admin::tenant_row(&catalog, &spec, now));
        }
        rows.sort_by(|a, b| a["tenant"].as_str().cmp(&b["tenant"].as_str()));
    }
    if let Some(p) = purged {
        answer["purged"] = p.to_json();
    }
    Ok(answer)
}

fn print_text(req: &AdminRequest, v: &serde_json::Value) {
    let s = |k: &str| v[k].as_str().unwrap_or_default().to_owned();
    match req {
        AdminRequest::Add { .. } | AdminRequest::KeyAdd { .. } => {
            println!("tenant:     {}", s("id"));
            println!("access key: {}", s("access_key"));
            println!("secret key: {}", s("secret_key"));
            println!("(the secret is shown once: the catalog keeps it sealed)");
        }
        AdminRequest::Set { id, .. } => println!("tenant {id} updated"),
        AdminRequest::KeyRevoke { id, access_key } => {
            println!("access key {access_key} of tenant {id} revoked");
        }
        AdminRequest::Remove { id } => {
            if let Some(p) = v.get("purged") {
                println!(
                    "purged {} object(s) in {} bucket(s): {}",
                    p["objects"],
                    p["buckets"],
                    ByteSize(p["bytes"].as_u64().unwrap_or(0))
                );
            }
            println!("tenant {id} removed");
        }
        AdminRequest::List => print_list(v),
        AdminRequest::History { .. } => {
            for e in v.as_array().into_iter().flatten() {
                println!(
                    "{:>14} {:<32} {:<16} {:<11} {}",
                    e["at_ms"],
                    e["who"].as_str().unwrap_or_default(),
                    e["tenant"].as_str().unwrap_or_default(),
                    e["action"].as_str().unwrap_or_default(),
                    e["detail"]
                );
            }
        }
    }
}

fn print_list(v: &serde_json::Value) {
    let or = |x: &serde_json::Value, none: &str, f: &dyn Fn(u64) -> String| {
        x.as_u64().map_or_else(|| none.to_owned(), f)
    };
    println!(
        "{:<20} {:>12} {:>12} {:>7} {:>9} {:>11} {:>12} {:>12}  {:<24}  KEYS",
        "TENANT",
        "USED",
        "QUOTA",
        "USE%",
        "OBJECTS",
        "MAX OBJECTS",
        "RESERVATION",
        "LIMIT",
        "NODE-LOCAL (CATALOG)"
    );
    for t in v.as_array().into_iter().flatten() {
        let used = t["used_bytes"].as_u64().unwrap_or(0);
        let pct = t["quota_bytes"].as_u64().filter(|q| *q > 0).map_or_else(
            || "-".to_owned(),
            |q| format!("{:.1}", used as f64 * 100.0 / q as f64),
        );
        let rate = |x: &serde_json::Value| {
            x.as_f64()
                .filter(|r| *r > 0.0)
                .map_or_else(|| "-".to_owned(), |r| Rate(r).to_string())
        };
        let keys: Vec<String> = t["keys"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|k| {
                let id = k["access_key"].as_str().unwrap_or_default();
                if k["live"].as_bool() == Some(true) {
                    id.to_owned()
                } else {
                    format!("{id} (revoked or expired)")
                }
            })
            .collect();
        println!(
            "{:<20} {:>12} {:>12} {pct:>7} {:>9} {:>11} {:>12} {:>12}  {:<24}  {}",
            t["tenant"].as_str().unwrap_or_default(),
            ByteSize(used).to_string(),
            or(&t["quota_bytes"], "unlimited", &|q| ByteSize(q).to_string()),
            t["objects"],
            or(&t["max_objects"], "unlimited", &|n| n.to_string()),
            rate(&t["reservation"]),
            rate(&t["limit"]),
            local_text(t),
            keys.join(", ")
        );
    }
}

/// The node-local settings the catalog holds, in a row of `tenant list`: `-` for none (the
/// agents' files govern).
fn local_text(t: &serde_json::Value) -> String {
    let mut parts = Vec::new();
    if let Some(c) = t["local_capacity"].as_u64() {
        parts.push(format!("quota {}", ByteSize(c)));
    }
    if let Some(r) = t["local_reservation"].as_f64() {
        parts.push(format!("res {}", Rate(r)));
    }
    if let Some(w) = t["local_weight"].as_f64() {
        parts.push(format!("weight {w}"));
    }
    if let Some(l) = t["local_limit"].as_f64() {
        parts.push(format!("limit {}", Rate(l)));
    }
    if parts.is_empty() {
        "-".to_owned()
    } else {
        parts.join(", ")
    }
}
