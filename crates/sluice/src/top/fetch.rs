//! Where the deployment is and what it says: the endpoints found from the configuration
//! file alone, and one [`Sample`] of them.
//!
//! The gateways are `[gateway] metrics_listen`, `[agent] gateway_control`, the coordinator
//! named in the shared catalog's lease (`qos-coordinator`, with `[catalog] url`), and every
//! gateway the cluster's `GET /qos/cluster` lists (re-read at each sample, so gateways that
//! join are found); the agents are `[agent] status_listen`. `GET /qos/cluster` takes the
//! admin token (`[admin] token` or the gateway's `data_dir/admin.token`) or, for a node's
//! file, its `node_credential_file`; without either, `top` shows what `/metrics` says.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use anyhow::Context;
use object_store::client::{HttpClient, HttpConnector, HttpRequestBody, ReqwestConnector};
use sluice_config::Config;
use sluice_gateway::cluster::View;

use super::frame::{AgentSample, AgentStatus, GatewaySample, Sample, control_of};
use super::prom::Exposition;

/// How long one endpoint may take to answer.
const TIMEOUT: Duration = Duration::from_secs(2);

/// The endpoints and the credential to read them with.
pub struct Deployment {
    /// Gateways' control listeners, `host:port`, in the order found.
    pub gateways: Vec<String>,
    /// Agents' status listeners, `host:port`.
    pub agents: Vec<String>,
    token: Option<String>,
    client: HttpClient,
}

impl Deployment {
    /// The endpoints `config` names (see the module doc).
    pub async fn find(config: &Config) -> anyhow::Result<Self> {
        let mut gateways = Vec::new();
        let mut agents = Vec::new();
        if let Some(g) = &config.gateway
            && let Some(listen) = &g.metrics_listen
        {
            gateways.push(reachable(listen)?);
        }
        if let Some(a) = &config.agent {
            if let Some(fetch) = &a.fetch {
                for c in &fetch.control {
                    gateways.push(reachable(c)?);
                }
            }
            if let Some(s) = &a.status_listen {
                agents.push(reachable(s)?);
            }
        }
        if let Some(shared) = &config.catalog
            && let Some(c) = coordinator(&shared.url).await
        {
            gateways.push(c);
        }
        dedup(&mut gateways);
        if gateways.is_empty() && agents.is_empty() {
            anyhow::bail!(
                "the file names no gateway control listener ([gateway] metrics_listen, [agent] \
                 gateway_control) and no agent status listener ([agent] status_listen)"
            );
        }
        let token = if config.gateway.is_some() {
            sluice_gateway::admin::admin_token(config, false).ok()
        } else {
            None
        }
        .or_else(|| {
            let path = &config.agent.as_ref()?.fetch.as_ref()?.credential_file;
            std::fs::read_to_string(path)
                .ok()
                .map(|s| s.trim().to_owned())
        });
        let client = ReqwestConnector::default().connect(
            &object_store::ClientOptions::new()
                .with_allow_http(true)
                .with_timeout(TIMEOUT)
                .with_connect_timeout(TIMEOUT),
        )?;
        Ok(Self {
            gateways,
            agents,
            token,
            client,
        })
    }

    /// Every endpoint's answers now (all asked at once); `at` on `clock`. Gateways a
    /// cluster view names that were not known yet are added for the next sample.
    pub async fn sample(&mut self, clock: std::time::Instant) -> Sample {
        let gateways = self.gateways.iter().map(|g| self.gateway(g));
        let agents = self.agents.iter().map(|a| self.agent(a));
        let (gateways, agents) = tokio::join!(join_all(gateways), join_all(agents));
        let at = clock.elapsed().as_secs_f64();
        let mut known = self.gateways.clone();
        for g in &gateways {
            for v in g.cluster.iter().flat_map(|v| &v.gateways) {
                known.push(control_of(&v.control));
            }
        }
        dedup(&mut known);
        self.gateways = known;
        Sample {
            at,
            gateways,
            agents,
        }
    }

    async fn gateway(&self, control: &str) -> GatewaySample {
        let metrics = self
            .get(control, "/metrics", None)
            .await
            .map(|t| Exposition::parse(&t));
        let cluster = match (&metrics, &self.token) {
            (Ok(_), Some(token)) => self
                .get(control, "/qos/cluster", Some(token))
                .await
                .ok()
                .and_then(|body| serde_json::from_str::<View>(&body).ok()),
            _ => None,
        };
        GatewaySample {
            control: control.to_owned(),
            metrics,
            cluster,
        }
    }

    async fn agent(&self, status: &str) -> AgentSample {
        let report = self.get(status, "/status", None).await.and_then(|body| {
            serde_json::from_str::<AgentStatus>(&body).map_err(|e| format!("not a status: {e}"))
        });
        let metrics = match &report {
            Ok(_) => self
                .get(status, "/metrics", None)
                .await
                .ok()
                .map(|t| Exposition::parse(&t)),
            Err(_) => None,
        };
        AgentSample {
            status: status.to_owned(),
            report,
            metrics,
        }
    }

    /// `GET http://addr{path}`: the body of a 200, else why not (one line).
    async fn get(&self, addr: &str, path: &str, bearer: Option<&str>) -> Result<String, String> {
        let exchange = async {
            let mut req = http::Request::builder()
                .method(http::Method::GET)
                .uri(format!("http://{addr}{path}"));
            if let Some(token) = bearer {
                req = req.header(http::header::AUTHORIZATION, format!("Bearer {token}"));
            }
            let req = req
                .body(HttpRequestBody::from(bytes::Bytes::new()))
                .map_err(|e| e.to_string())?;
            let resp = self.client.execute(req).await.map_err(|e| cause(&e))?;
            let status = resp.status();
            let body = resp.into_body().bytes().await.map_err(|e| cause(&e))?;
            let text = String::from_utf8_lossy(&body).into_owned();
            if status.is_success() {
                Ok(text)
            } else {
                Err(format!("{path} answered {status}"))
            }
        };
        tokio::time::timeout(TIMEOUT, exchange)
            .await
            .unwrap_or_else(|_| Err("no answer within 2 s".to_owned()))
    }
}

/// The error's innermost cause (e.g. `Connection refused (os error 111)`).
fn cause(e: &dyn std::error::Error) -> String {
    let mut e = e;
    while let Some(s) = e.source() {
        e = s;
    }
    e.to_string()
}

/// Every future's output, in order, the futures polled together (a few endpoints).
async fn join_all<F: Future>(futures: impl Iterator<Item = F>) -> Vec<F::Output> {
    let mut futures: Vec<_> = futures.map(Box::pin).collect();
    let mut results: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (f, r) in futures.iter_mut().zip(results.iter_mut()) {
            if r.is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => *r = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    results.into_iter().flatten().collect()
}

/// The coordinator's control listener, from the shared catalog's lease (`None` when no
/// gateway coordinates, or the catalog cannot be read: the other sources remain).
async fn coordinator(url: &str) -> Option<String> {
    let (catalog, _) = sluice_gateway::open_shared_catalog(url).await.ok()?;
    let holder =
        tokio::task::spawn_blocking(move || catalog.lease_holder(sluice_gateway::cluster::LEASE))
            .await
            .ok()?
            .ok()??;
    let (_, control) = holder.split_once(' ')?;
    Some(control_of(control))
}

/// `host:port` to connect to: an unspecified address (`0.0.0.0`) means this host.
fn reachable(listen: &str) -> anyhow::Result<String> {
    let mut addr: SocketAddr = listen
        .parse()
        .with_context(|| format!("{listen:?} is not an address"))?;
    if addr.ip().is_unspecified() {
        addr.set_ip(match addr.ip() {
            IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::LOCALHOST),
        });
    }
    Ok(addr.to_string())
}

/// Drops repeats, keeping the first of each.
fn dedup(v: &mut Vec<String>) {
    let mut seen = std::collections::HashSet::new();
    v.retain(|x| seen.insert(x.clone()));
}
