//! Cluster-wide QoS: the gateways on one shared catalog share `[gateway.capacity]` as the
//! tier's capacity, and each tenant's reservation, weight and limit hold across all of them.
//!
//! # Protocol
//!
//! - **Election.** Every [`LEASE_EVERY`] each gateway tries the catalog lease [`LEASE`]
//!   (TTL [`LEASE_TTL`]) with the holder name `"<id> <control url>"`; whoever holds it is the
//!   coordinator, and the others read its control URL from the lease
//!   ([`sluice_meta::Engine::lease_holder`]). A dead coordinator's lease lapses within
//!   [`LEASE_TTL`] and the next gateway to try takes it.
//! - **Rounds.** Every [`ROUND`] each gateway reports its per-tenant demand and service
//!   ([`Report`]) — the coordinator to itself, the others by `POST /qos/report` to the
//!   coordinator's control listener — and gets the cluster's [`View`] back, which holds its
//!   share: its capacity and each tenant's local reservation, weight and limit
//!   (`sluice_qos::split`). It applies its share to its throttle off the request path
//!   ([`Throttle::set_share`]).
//! - **Authentication.** A report carries `x-sluice-cluster: <ms>.<hex>`, an HMAC-SHA256 of
//!   the time and the body under a key derived from what every gateway of the deployment
//!   already shares and a tenant never holds (the seal key file, else the catalog's URL with
//!   its credentials; see `admin::seal`); a report that does not verify, or is more than
//!   [`MAX_SKEW`] old, is refused. A replay within that window only repeats a report.
//! - **Failures.** A gateway that has not reported for [`REPORT_TTL`] is left out of the next
//!   round: its share goes to the others. A new coordinator collects reports for [`WARMUP`]
//!   before it assigns (until then gateways keep their last share). A gateway with no
//!   assignment for [`FALLBACK_AFTER`] falls back to `capacity / N`, N the live gateways it
//!   last knew of (at least 1), with every tenant's reservation and limit divided by N; it
//!   says so in its log, on `/metrics` (`sluice_qos_cluster_fallback`) and in
//!   `GET /qos/cluster`.
//!
//! The coordinator's and a member's decisions are pure state machines over tokio time
//! ([`Coordinator`], [`Member`]), tested in paused time; the loop around them does the I/O.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use aws_lc_rs::hmac;
use serde::{Deserialize, Serialize};
use sluice_qos::TenantQos;
use sluice_qos::split::{GatewayDemand, split};
use sluice_throttle::{Share, Throttle};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;
use tokio::time::Instant;

/// The catalog lease whose holder coordinates.
pub const LEASE: &str = "qos-coordinator";
/// How long the coordinator's lease lasts unless renewed.
pub const LEASE_TTL: Duration = Duration::from_secs(1);
/// How often each gateway tries (or renews) the lease.
pub const LEASE_EVERY: Duration = Duration::from_millis(300);
/// How often each gateway reports and gets its share.
pub const ROUND: Duration = Duration::from_millis(100);
/// A gateway silent this long is left out of the split.
pub const REPORT_TTL: Duration = Duration::from_millis(800);
/// A new coordinator collects reports this long before it assigns.
pub const WARMUP: Duration = Duration::from_millis(300);
/// No assignment for this long: `capacity / N`.
pub const FALLBACK_AFTER: Duration = Duration::from_millis(1500);
/// A report signed further in the past (or future) than this is refused.
pub const MAX_SKEW: Duration = Duration::from_secs(5);
/// The header carrying a report's signature.
pub const SIGNATURE: &str = "x-sluice-cluster";
/// How long a backlog counts for in a tenant's demand: `demand = served + waiting / this`.
const BACKLOG_WINDOW: f64 = 0.25;
/// The grain a request still waiting for its first admission counts for when the
/// configuration does not say (`[gateway.capacity] grain`'s default).
const DEFAULT_GRAIN: u64 = 1 << 20;

/// One tenant's figures in a report (cost units, i.e. bytes, per second).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    pub demand_bps: f64,
    pub served_bps: f64,
}

/// What a gateway reports each round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub id: String,
    pub s3: String,
    pub control: String,
    pub tenants: BTreeMap<String, Usage>,
}

/// One tenant at one gateway in the view.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TenantView {
    pub reservation_bps: f64,
    pub weight: f64,
    pub limit_bps: Option<f64>,
    pub demand_bps: f64,
    pub served_bps: f64,
}

/// One gateway in the view.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GatewayView {
    pub id: String,
    pub s3: String,
    pub control: String,
    pub capacity_bps: f64,
    pub age_ms: u64,
    pub tenants: BTreeMap<String, TenantView>,
}

/// `GET /qos/cluster`, and the answer to a report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct View {
    pub coordinator: Option<String>,
    pub updated_ms: u64,
    pub fallback: bool,
    pub gateways: Vec<GatewayView>,
}

impl View {
    /// Gateway `id`'s share in this view, with `scale` for tenants it does not name.
    pub fn share_of(&self, id: &str) -> Option<Share> {
        let g = self.gateways.iter().find(|g| g.id == id)?;
        let n = self.gateways.len().max(1) as f64;
        let tenants = g
            .tenants
            .iter()
            .filter_map(|(t, v)| {
                TenantQos::new(v.reservation_bps, v.weight, v.limit_bps)
                    .ok()
                    .map(|q| (t.clone(), q))
            })
            .collect();
        (g.capacity_bps.is_finite() && g.capacity_bps > 0.0).then(|| Share {
            capacity: g.capacity_bps,
            tenants,
            scale: 1.0 / n,
        })
    }
}

/// The coordinator's state: the latest report of each gateway.
#[derive(Debug)]
pub struct Coordinator {
    id: String,
    since: Instant,
    reports: HashMap<String, (Instant, Report)>,
}

impl Coordinator {
    /// Coordinator `id` from `now` on.
    pub fn new(id: &str, now: Instant) -> Self {
        Self {
            id: id.to_owned(),
            since: now,
            reports: HashMap::new(),
        }
    }

    pub fn report(&mut self, now: Instant, report: Report) {
        self.reports.insert(report.id.clone(), (now, report));
    }

    /// The split of `capacity` among the gateways that reported within [`REPORT_TTL`] for
    /// `tenants`' configured parameters; `None` while warming up.
    pub fn assign(
        &mut self,
        now: Instant,
        capacity: f64,
        tenants: &BTreeMap<String, TenantQos>,
    ) -> Option<View> {
        self.reports
            .retain(|_, (at, _)| now.duration_since(*at) <= REPORT_TTL);
        if now.duration_since(self.since) < WARMUP {
            return None;
        }
        let mut live: Vec<&(Instant, Report)> = self.reports.values().collect();
        live.sort_by(|a, b| a.1.id.cmp(&b.1.id));
        let demands: Vec<GatewayDemand> = live
            .iter()
            .map(|(_, r)| GatewayDemand {
                tenants: r
                    .tenants
                    .iter()
                    .map(|(t, u)| (t.clone(), u.demand_bps))
                    .collect(),
            })
            .collect();
        let s = split(capacity, tenants, &demands);
        let gateways = live
            .iter()
            .zip(s.gateways)
            .map(|((at, r), share)| GatewayView {
                id: r.id.clone(),
                s3: r.s3.clone(),
                control: r.control.clone(),
                capacity_bps: share.capacity,
                age_ms: millis(now.duration_since(*at)),
                tenants: share
                    .tenants
                    .iter()
                    .map(|(t, q)| {
                        let u = r.tenants.get(t).copied().unwrap_or(Usage {
                            demand_bps: 0.0,
                            served_bps: 0.0,
                        });
                        (
                            t.clone(),
                            TenantView {
                                reservation_bps: q.reservation(),
                                weight: q.weight(),
                                limit_bps: q.limit(),
                                demand_bps: u.demand_bps,
                                served_bps: u.served_bps,
                            },
                        )
                    })
                    .collect(),
            })
            .collect();
        Some(View {
            coordinator: Some(self.id.clone()),
            updated_ms: sluice_meta::now_ms().try_into().unwrap_or(0),
            fallback: false,
            gateways,
        })
    }
}

/// What a member does with its throttle after a round.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Run on this share.
    Apply(Share),
    /// No assignment for too long: `capacity / n`.
    Fallback(usize),
    /// Keep what it runs on.
    Keep,
}

/// A gateway's side: when it last got a share, and how many gateways it last knew of.
#[derive(Debug)]
pub struct Member {
    id: String,
    last_ok: Instant,
    live: usize,
    fallback: bool,
}

impl Member {
    /// Gateway `id`, started at `now` (a gateway that never heard from a coordinator falls
    /// back [`FALLBACK_AFTER`] after its start).
    pub fn new(id: &str, now: Instant) -> Self {
        Self {
            id: id.to_owned(),
            last_ok: now,
            live: 1,
            fallback: false,
        }
    }

    /// The round's outcome: `view` if the coordinator answered with one naming this gateway.
    pub fn round(&mut self, now: Instant, view: Option<&View>) -> Action {
        if let Some(share) = view.and_then(|v| v.share_of(&self.id)) {
            self.live = view.map_or(1, |v| v.gateways.len().max(1));
            self.last_ok = now;
            self.fallback = false;
            return Action::Apply(share);
        }
        if now.duration_since(self.last_ok) >= FALLBACK_AFTER {
            self.fallback = true;
            return Action::Fallback(self.live);
        }
        Action::Keep
    }

    pub fn fallback(&self) -> bool {
        self.fallback
    }

    /// The live gateways this one last knew of (at least 1).
    pub fn live(&self) -> usize {
        self.live
    }
}

/// The share of a gateway that cannot reach its coordinator: `1 / n` of everything.
pub fn fallback_share(capacity: f64, n: usize) -> Share {
    let k = 1.0 / n.max(1) as f64;
    Share {
        capacity: capacity * k,
        tenants: HashMap::new(),
        scale: k,
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The key reports are signed with (see the module doc).
pub fn key(config: &sluice_config::Config) -> Result<hmac::Key, crate::GatewayError> {
    let material = if let Some(path) = &config.admin.seal_key_file {
        crate::admin::seal::read_key(path)?
    } else if let Some(shared) = &config.catalog {
        shared.url.as_bytes().to_vec()
    } else {
        crate::admin::seal::random_hex(32).into_bytes()
    };
    let derived = hmac::sign(
        &hmac::Key::new(hmac::HMAC_SHA256, &material),
        b"sluice qos cluster reports",
    );
    Ok(hmac::Key::new(hmac::HMAC_SHA256, derived.as_ref()))
}

/// The signature header's value for `body` at `now_ms`.
pub fn sign(key: &hmac::Key, now_ms: i64, body: &[u8]) -> String {
    let mut ctx = hmac::Context::with_key(key);
    ctx.update(now_ms.to_string().as_bytes());
    ctx.update(b"\n");
    ctx.update(body);
    format!("{now_ms}.{}", crate::admin::seal::hex(ctx.sign().as_ref()))
}

/// Whether `header` signs `body` under `key` within [`MAX_SKEW`] of `now_ms`.
pub fn verify(key: &hmac::Key, now_ms: i64, header: &str, body: &[u8]) -> bool {
    let Some((ms, tag)) = header.split_once('.') else {
        return false;
    };
    let Ok(ms) = ms.parse::<i64>() else {
        return false;
    };
    if ms.abs_diff(now_ms) > millis(MAX_SKEW) {
        return false;
    }
    let Some(tag) = crate::admin::seal::unhex(tag) else {
        return false;
    };
    let mut msg = Vec::with_capacity(body.len() + 24);
    msg.extend_from_slice(ms.to_string().as_bytes());
    msg.push(b'\n');
    msg.extend_from_slice(body);
    hmac::verify(key, &msg, &tag).is_ok()
}

/// A running gateway's part in the cluster: what `/qos/cluster`, `/qos/report` and
/// `/metrics` read.
pub struct Cluster {
    pub(crate) id: String,
    s3: String,
    control: String,
    key: hmac::Key,
    capacity: f64,
    /// `[gateway.capacity] grain`: what a request waiting for its first admission counts
    /// for in its tenant's demand.
    grain: u64,
    throttle: Arc<Throttle>,
    state: Mutex<State>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

#[derive(Debug)]
struct State {
    coordinator: Option<Coordinator>,
    /// The latest view this gateway computed or received.
    view: Option<View>,
    fallback: bool,
    /// The capacity this gateway runs on now.
    share: f64,
}

impl Cluster {
    /// This gateway's part, with S3 on `s3` and its control listener on `control`.
    pub fn new(
        config: &sluice_config::Config,
        throttle: Arc<Throttle>,
        s3: std::net::SocketAddr,
        control: std::net::SocketAddr,
    ) -> Result<Arc<Self>, crate::GatewayError> {
        let capacity = throttle.config().bandwidth;
        let g = crate::gateway_section(config).ok();
        let grain = g
            .and_then(|g| g.throttle)
            .map_or(DEFAULT_GRAIN, |c| c.grain);
        let names = Names::of(
            s3,
            control,
            g.and_then(|g| g.advertise.as_deref()),
            g.is_some_and(|g| g.tls.is_some()),
        );
        Ok(Arc::new(Self {
            id: names.id,
            s3: names.s3,
            control: names.control,
            key: key(config)?,
            capacity,
            grain,
            throttle,
            state: Mutex::new(State {
                coordinator: None,
                view: None,
                fallback: false,
                share: capacity,
            }),
        }))
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `GET /qos/cluster`'s body.
    pub fn view(&self) -> View {
        let s = self.state();
        let mut v = s.view.clone().unwrap_or(View {
            coordinator: None,
            updated_ms: 0,
            fallback: s.fallback,
            gateways: Vec::new(),
        });
        v.fallback = s.fallback;
        v
    }

    /// A report from another gateway (already verified): the coordinator's latest view, or
    /// `None` if this gateway is not coordinating or still warming up.
    pub fn take_report(&self, report: Report) -> Option<View> {
        let mut s = self.state();
        let view = s.view.clone();
        let c = s.coordinator.as_mut()?;
        c.report(Instant::now(), report);
        view.filter(|v| v.coordinator.as_deref() == Some(self.id.as_str()))
    }

    pub fn verify(&self, header: &str, body: &[u8]) -> bool {
        verify(&self.key, sluice_meta::now_ms(), header, body)
    }

    /// The Prometheus lines of `sluice_qos_cluster_*`.
    pub fn render(&self) -> String {
        let s = self.state();
        let gateways = s.view.as_ref().map_or(0, |v| v.gateways.len());
        let coordinating = s.coordinator.is_some();
        format!(
            "# HELP sluice_qos_cluster_capacity_bytes_per_second The part of the tier's capacity this gateway paces to now.\n\
             # TYPE sluice_qos_cluster_capacity_bytes_per_second gauge\n\
             sluice_qos_cluster_capacity_bytes_per_second {}\n\
             # HELP sluice_qos_cluster_capacity_share This gateway's fraction of the tier's capacity.\n\
             # TYPE sluice_qos_cluster_capacity_share gauge\n\
             sluice_qos_cluster_capacity_share {}\n\
             # HELP sluice_qos_cluster_fallback 1 while this gateway cannot reach the coordinator and runs on capacity / N.\n\
             # TYPE sluice_qos_cluster_fallback gauge\n\
             sluice_qos_cluster_fallback {}\n\
             # HELP sluice_qos_cluster_coordinator 1 while this gateway is the cluster's QoS coordinator.\n\
             # TYPE sluice_qos_cluster_coordinator gauge\n\
             sluice_qos_cluster_coordinator {}\n\
             # HELP sluice_qos_cluster_gateways Live gateways in the latest split.\n\
             # TYPE sluice_qos_cluster_gateways gauge\n\
             sluice_qos_cluster_gateways {gateways}\n",
            s.share,
            s.share / self.capacity,
            u8::from(s.fallback),
            u8::from(coordinating),
        )
    }
}

/// How a gateway names itself to the others: its id, its S3 URL and its control URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Names {
    pub id: String,
    pub s3: String,
    pub control: String,
}

impl Names {
    /// For S3 bound at `s3` (over TLS if `tls`) and the control listener at `control`. With
    /// `[gateway] advertise` (a validated `http(s)://host:port`) the others reach the control
    /// listener there: the id is that `host:port`, unique among gateways the others can reach,
    /// and the S3 URL the same host at the S3 listener's port. Without, the bound addresses
    /// (which an unspecified bind address makes unreachable; the configuration refuses that
    /// with coordination on).
    pub(crate) fn of(
        s3: std::net::SocketAddr,
        control: std::net::SocketAddr,
        advertise: Option<&str>,
        tls: bool,
    ) -> Self {
        let scheme = if tls { "https" } else { "http" };
        let advertised = advertise.and_then(|url| {
            let (_, at) = url.split_once("://")?;
            let (host, _) = at.rsplit_once(':')?;
            Some((url, at, host))
        });
        match advertised {
            Some((url, at, host)) => Self {
                id: at.to_owned(),
                s3: format!("{scheme}://{host}:{}", s3.port()),
                control: url.to_owned(),
            },
            None => Self {
                id: format!("{s3}"),
                s3: format!("{scheme}://{s3}"),
                control: format!("http://{control}"),
            },
        }
    }
}

/// Per-tenant cumulative counters, differenced into rates each round.
///
/// A tenant's demand here is what it was served over the round plus the work it has waiting
/// now, spread over [`BACKLOG_WINDOW`]: the grains it asked for and was not yet granted, and
/// one grain for each request still waiting for its first admission (all such a request has
/// asked for is its operation's cost, but a body follows). Without that grain a gateway held
/// to its floor, whose requests all wait for their first admission, reported almost no
/// demand and kept its floor: the share that starves a tenant also hid its demand.
struct Meter {
    last: HashMap<String, u64>,
    at: Option<Instant>,
    grain: f64,
}

impl Meter {
    fn new(grain: u64) -> Self {
        Self {
            last: HashMap::new(),
            at: None,
            grain: grain as f64,
        }
    }

    fn rates(&mut self, throttle: &Throttle, now: Instant) -> BTreeMap<String, Usage> {
        let dt = self
            .at
            .map_or(ROUND.as_secs_f64(), |a| now.duration_since(a).as_secs_f64())
            .max(1e-3);
        self.at = Some(now);
        let mut out = BTreeMap::new();
        for u in throttle.usage() {
            let served0 = self.last.get(&u.name).copied().unwrap_or(u.served);
            let served = u.served.saturating_sub(served0) as f64 / dt;
            let waiting = u.asked.saturating_sub(u.served) as f64 + u.waiting as f64 * self.grain;
            self.last.insert(u.name.clone(), u.served);
            out.insert(
                u.name,
                Usage {
                    demand_bps: served + waiting / BACKLOG_WINDOW,
                    served_bps: served,
                },
            );
        }
        out
    }
}

/// Runs this gateway's part in the cluster until `stop` changes.
pub async fn run(
    cluster: Arc<Cluster>,
    catalog: Arc<sluice_meta::Catalog>,
    mut stop: watch::Receiver<bool>,
) {
    let holder = format!("{} {}", cluster.id, cluster.control);
    let mut member = Member::new(&cluster.id, Instant::now());
    let mut meter = Meter::new(cluster.grain);
    let mut next_lease = Instant::now();
    let mut coordinator_url: Option<String> = None;
    let mut tick = tokio::time::interval(ROUND);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => break,
        }
        let now = Instant::now();
        if now >= next_lease {
            next_lease = now + LEASE_EVERY;
            match elect(&catalog, &holder).await {
                Ok(None) => {
                    let mut s = cluster.state();
                    if s.coordinator.is_none() {
                        tracing::info!(id = %cluster.id, "coordinating the cluster's QoS");
                        s.coordinator = Some(Coordinator::new(&cluster.id, now));
                    }
                    coordinator_url = None;
                }
                Ok(Some(other)) => {
                    let mut s = cluster.state();
                    if s.coordinator.take().is_some() {
                        tracing::info!(coordinator = %other, "no longer coordinating");
                    }
                    coordinator_url = other.split_once(' ').map(|(_, url)| url.to_owned());
                }
                Err(e) => {
                    tracing::warn!(error = %e, "the QoS coordinator lease could not be read");
                    cluster.state().coordinator = None;
                }
            }
        }
        let report = Report {
            id: cluster.id.clone(),
            s3: cluster.s3.clone(),
            control: cluster.control.clone(),
            tenants: meter.rates(&cluster.throttle, now),
        };
        let view = if cluster.state().coordinator.is_some() {
            coordinate(&cluster, now, report)
        } else if let Some(url) = &coordinator_url {
            match send(&cluster.key, url, &report).await {
                Ok(v) => v,
                Err(e) => {
                    tracing::debug!(error = %e, "the QoS coordinator did not answer");
                    None
                }
            }
        } else {
            None
        };
        let was = member.fallback();
        let action = member.round(now, view.as_ref());
        if let Some(v) = view {
            cluster.state().view = Some(v);
        }
        let share = match action {
            Action::Apply(share) => Some(share),
            Action::Fallback(n) => Some(fallback_share(cluster.capacity, n)),
            Action::Keep => None,
        };
        if member.fallback() && !was {
            tracing::warn!(
                gateways = member.live(),
                "the QoS coordinator is unreachable: pacing to capacity / {}",
                member.live()
            );
        } else if was && !member.fallback() {
            tracing::info!("the QoS coordinator is back: pacing to the assigned share");
        }
        if let Some(share) = share {
            let capacity = share.capacity;
            match cluster.throttle.set_share(Some(share)).await {
                Ok(()) => {
                    let mut s = cluster.state();
                    s.share = capacity;
                    s.fallback = member.fallback();
                }
                Err(e) => tracing::warn!(error = %e, "the assigned share was not applied"),
            }
        }
    }
    let was_coordinating = cluster.state().coordinator.take().is_some();
    if was_coordinating {
        let (c, h) = (Arc::clone(&catalog), holder);
        let _ = tokio::task::spawn_blocking(move || c.release_lease(LEASE, &h)).await;
    }
}

/// The coordinator's own round: its report, then the split.
fn coordinate(cluster: &Cluster, now: Instant, report: Report) -> Option<View> {
    let tenants: BTreeMap<String, TenantQos> = cluster
        .throttle
        .specs()
        .into_iter()
        .map(|t| (t.name, t.qos))
        .collect();
    let mut s = cluster.state();
    let c = s.coordinator.as_mut()?;
    c.report(now, report);
    c.assign(now, cluster.capacity, &tenants)
}

/// Takes or renews the lease: `None` when this gateway holds it, else the holder's name.
async fn elect(
    catalog: &Arc<sluice_meta::Catalog>,
    holder: &str,
) -> Result<Option<String>, String> {
    let (c, h) = (Arc::clone(catalog), holder.to_owned());
    let work = tokio::task::spawn_blocking(move || {
        if c.try_lease(LEASE, &h, LEASE_TTL)? {
            Ok(None)
        } else {
            c.lease_holder(LEASE).map(|o| Some(o.unwrap_or_default()))
        }
    });
    match tokio::time::timeout(LEASE_EVERY, work).await {
        Err(_) => Err("the catalog did not answer in time".into()),
        Ok(Err(e)) => Err(e.to_string()),
        Ok(Ok(r)) => r.map_err(|e: sluice_meta::MetaError| e.to_string()),
    }
}

/// `POST /qos/report` to the coordinator at `url` (`http://host:port`): its view, or `None`
/// when it is warming up.
async fn send(key: &hmac::Key, url: &str, report: &Report) -> Result<Option<View>, String> {
    let body = serde_json::to_vec(report).map_err(|e| e.to_string())?;
    let addr = url.strip_prefix("http://").unwrap_or(url).to_owned();
    let signature = sign(key, sluice_meta::now_ms(), &body);
    let exchange = async move {
        let mut stream = tokio::net::TcpStream::connect(&addr)
            .await
            .map_err(|e| e.to_string())?;
        let head = format!(
            "POST /qos/report HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n{SIGNATURE}: {signature}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        stream
            .write_all(head.as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        stream.write_all(&body).await.map_err(|e| e.to_string())?;
        let mut answer = Vec::new();
        stream
            .take(4 << 20)
            .read_to_end(&mut answer)
            .await
            .map_err(|e| e.to_string())?;
        Ok::<_, String>(answer)
    };
    let answer = tokio::time::timeout(ROUND * 3, exchange)
        .await
        .map_err(|_| "timed out".to_owned())??;
    let split_at = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("no HTTP head in the answer")?;
    let head = String::from_utf8_lossy(&answer[..split_at]);
    let status = head.split_whitespace().nth(1).unwrap_or("");
    match status {
        "200" => serde_json::from_slice(&answer[split_at + 4..])
            .map(Some)
            .map_err(|e| e.to_string()),
        "503" => Ok(None),
        other => Err(format!("the coordinator answered {other}")),
    }
}

#[cfg(test)]
mod tests;
