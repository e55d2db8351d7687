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
//! - **Urgent reports.** Between rounds each gateway looks at its tenants' backlogs every
//!   [`SAMPLE`] ([`Meter::urgent`]). When a tenant's demand appears or more than doubles, or a
//!   tenant that demanded a part of the tier has had nothing asked and nothing waiting for
//!   [`IDLE`], it reports at once, marked urgent. The coordinator splits again on an urgent
//!   report without waiting for its round, answers the reporter with its new share and pushes
//!   the new view to every other gateway (`POST /qos/view`, signed as reports are), so that a
//!   burst's onset moves capacity toward it, and its end back, within a few milliseconds
//!   instead of up to two rounds. A gateway applies a view (pushed, or a round's answer) only
//!   if it is not older than the last it applied from the same coordinator.
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
/// How often a gateway looks at its tenants' backlogs between rounds (see [`Meter::urgent`]).
pub const SAMPLE: Duration = Duration::from_millis(10);
/// A tenant with nothing asked and nothing waiting at a gateway for this long demands
/// nothing there.
pub const IDLE: Duration = Duration::from_millis(20);
/// How long a backlog counts for in a tenant's demand: `demand = served + waiting / this`.
/// About the time an urgent report takes to move capacity: a tenant with work queued wants
/// it done by then, so a backlogged tenant asks for more than any share and gets what its
/// reservation and weight give it, as dmClock on one server would give it.
const BACKLOG_WINDOW: f64 = 0.025;
/// The fraction of the tier a tenant's demand must reach, or fall from, to report urgently.
const URGENT_FRACTION: f64 = 0.05;
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
    /// A demand appeared, jumped or vanished: split again now, not at the next round.
    #[serde(default)]
    pub urgent: bool,
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
    /// A view pushed by the coordinator (or, on the coordinator, split on another
    /// gateway's urgent report) waits in [`State::pushed`].
    pushed: tokio::sync::Notify,
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
    /// A newer view than the last applied, for the loop to apply at once.
    pushed: Option<View>,
    /// The coordinator and `updated_ms` of the last view applied: an older one from the same
    /// coordinator is ignored (a new coordinator's clock may be behind: its views are taken).
    applied: (Option<String>, u64),
}

impl State {
    /// Whether `view` is older than the one applied, from the same coordinator.
    fn stale(&self, view: &View) -> bool {
        view.coordinator == self.applied.0 && view.updated_ms < self.applied.1
    }
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
                pushed: None,
                applied: (None, 0),
            }),
            pushed: tokio::sync::Notify::new(),
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
    /// `None` if this gateway is not coordinating or still warming up. An urgent report is
    /// split on at once, and the new view pushed to the other gateways.
    pub fn take_report(&self, report: Report) -> Option<View> {
        let now = Instant::now();
        let (urgent, from) = (report.urgent, report.id.clone());
        let view = {
            let mut s = self.state();
            let view = s.view.clone();
            s.coordinator.as_mut()?.report(now, report);
            if urgent {
                self.split_now(&mut s, now)
            } else {
                view.filter(|v| v.coordinator.as_deref() == Some(self.id.as_str()))
            }
        };
        if urgent && let Some(v) = &view {
            self.push(v, &from);
        }
        view
    }

    /// The coordinator's split of the reports it holds, kept as its view.
    fn split_now(&self, s: &mut State, now: Instant) -> Option<View> {
        let tenants: BTreeMap<String, TenantQos> = self
            .throttle
            .specs()
            .into_iter()
            .map(|t| (t.name, t.qos))
            .collect();
        let v = s
            .coordinator
            .as_mut()?
            .assign(now, self.capacity, &tenants)?;
        s.view = Some(v.clone());
        Some(v)
    }

    /// Hands `view` to every gateway it names but `except` (which has it as its answer): this
    /// one through [`State::pushed`], the others by `POST /qos/view`, each on a task of its
    /// own (a gateway that does not answer delays nobody; it gets its share at its round).
    fn push(&self, view: &View, except: &str) {
        let Ok(body) = serde_json::to_vec(view) else {
            return;
        };
        for g in view.gateways.iter().filter(|g| g.id != except) {
            if g.id == self.id {
                self.take_view(view.clone());
                continue;
            }
            let (key, url, body) = (self.key.clone(), g.control.clone(), body.clone());
            tokio::spawn(async move {
                if let Err(e) = post(&key, &url, "/qos/view", body).await {
                    tracing::debug!(gateway = %url, error = %e, "a pushed QoS view was not taken");
                }
            });
        }
    }

    /// A view pushed by the coordinator (already verified): kept for the loop to apply at once
    /// if it names this gateway and is newer than the last applied. Whether it was taken.
    pub fn take_view(&self, view: View) -> bool {
        let mut s = self.state();
        if s.stale(&view) || !view.gateways.iter().any(|g| g.id == self.id) {
            return false;
        }
        s.pushed = Some(view);
        drop(s);
        self.pushed.notify_one();
        true
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
/// A tenant's demand here is what it was served since the last report plus the work it has
/// waiting now, spread over [`BACKLOG_WINDOW`]: the bytes it asked for and was not yet
/// granted, and for each request still waiting for its first admission the window a request
/// asks for once admitted (all such a request has asked for is its operation's cost, but a
/// body follows: a GET asks for [`sluice_s3::blob::READ_AHEAD_BYTES`] at once, a PUT keeps
/// [`sluice_s3::blob::WRITE_BEHIND_BYTES`] in flight). Without it a gateway held to its floor,
/// whose requests all wait for their first admission, reported almost no demand and kept its
/// floor: the share that starves a tenant also hid its demand.
///
/// A tenant that has had nothing asked and nothing waiting for [`IDLE`] demands nothing,
/// whatever it was served before: the end of a burst gives its share back at once rather
/// than a round later.
struct Meter {
    last: HashMap<String, u64>,
    at: Option<Instant>,
    /// What a request waiting for its first admission counts for (bytes).
    waiting_bytes: f64,
    seen: HashMap<String, Seen>,
}

/// One tenant as the last sample saw it.
struct Seen {
    asked: u64,
    /// When it last had something asked or waiting.
    active_at: Instant,
    /// Its demand in the last report.
    reported: f64,
}

impl Meter {
    fn new(grain: u64) -> Self {
        let window = sluice_s3::blob::READ_AHEAD_BYTES
            .max(sluice_s3::blob::WRITE_BEHIND_BYTES)
            .max(2 * grain);
        Self {
            last: HashMap::new(),
            at: None,
            waiting_bytes: window as f64,
            seen: HashMap::new(),
        }
    }

    /// The tenant's backlog now (bytes), and whether it is idle: nothing asked since the last
    /// look, nothing waiting, for [`IDLE`].
    fn observe(
        &mut self,
        name: &str,
        asked: u64,
        served: u64,
        waiting: usize,
        now: Instant,
    ) -> (f64, bool) {
        let backlog = asked.saturating_sub(served) as f64 + waiting as f64 * self.waiting_bytes;
        if !self.seen.contains_key(name) {
            self.seen.insert(
                name.to_owned(),
                Seen {
                    asked,
                    active_at: now,
                    reported: 0.0,
                },
            );
        }
        let Some(seen) = self.seen.get_mut(name) else {
            return (backlog, false);
        };
        if backlog > 0.0 || asked != seen.asked {
            seen.active_at = now;
        }
        seen.asked = asked;
        (backlog, now.duration_since(seen.active_at) >= IDLE)
    }

    /// Whether this gateway should report now, between rounds: a tenant's backlog alone
    /// demands more than twice what it last reported and at least [`URGENT_FRACTION`] of
    /// `capacity`, or a tenant that reported that much has gone idle. Runs every [`SAMPLE`]:
    /// it copies no tenant's name (only a tenant seen for the first time is added).
    fn urgent(&mut self, throttle: &Throttle, now: Instant, capacity: f64) -> bool {
        let least = URGENT_FRACTION * capacity;
        let mut urgent = false;
        throttle.each_usage(|name, asked, served, waiting| {
            let (backlog, idle) = self.observe(name, asked, served, waiting, now);
            let reported = self.seen.get(name).map_or(0.0, |s| s.reported);
            let wants = backlog / BACKLOG_WINDOW;
            urgent |= wants >= least && wants > 2.0 * reported;
            urgent |= idle && reported >= least;
        });
        urgent
    }

    fn rates(&mut self, throttle: &Throttle, now: Instant) -> BTreeMap<String, Usage> {
        let dt = self
            .at
            .map_or(ROUND.as_secs_f64(), |a| now.duration_since(a).as_secs_f64())
            .max(1e-3);
        self.at = Some(now);
        let mut out = BTreeMap::new();
        for u in throttle.usage() {
            let (backlog, idle) = self.observe(&u.name, u.asked, u.served, u.waiting, now);
            let served0 = self.last.get(&u.name).copied().unwrap_or(u.served);
            let served = u.served.saturating_sub(served0) as f64 / dt;
            self.last.insert(u.name.clone(), u.served);
            let demand = if idle {
                0.0
            } else {
                served + backlog / BACKLOG_WINDOW
            };
            if let Some(seen) = self.seen.get_mut(&u.name) {
                seen.reported = demand;
            }
            out.insert(
                u.name,
                Usage {
                    demand_bps: demand,
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
    let mut sample = tokio::time::interval(SAMPLE);
    sample.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let mut urgent = false;
        tokio::select! {
            _ = tick.tick() => {}
            _ = sample.tick() => {
                if !meter.urgent(&cluster.throttle, Instant::now(), cluster.capacity) {
                    continue;
                }
                urgent = true;
            }
            () = cluster.pushed.notified() => {
                let pushed = cluster.state().pushed.take();
                if let Some(view) = pushed {
                    let now = Instant::now();
                    if let Action::Apply(share) = member.round(now, Some(&view)) {
                        let applied = Some((view.coordinator.clone(), view.updated_ms));
                        cluster.state().view = Some(view);
                        apply(&cluster, &member, share, applied).await;
                    }
                }
                continue;
            }
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
            urgent,
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
        // A round's answer older than a view pushed meanwhile (and applied) is stale.
        let view = view.filter(|v| !cluster.state().stale(v));
        let was = member.fallback();
        let action = member.round(now, view.as_ref());
        let applied = view.as_ref().map(|v| (v.coordinator.clone(), v.updated_ms));
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
            apply(&cluster, &member, share, applied).await;
        }
    }
    let was_coordinating = cluster.state().coordinator.take().is_some();
    if was_coordinating {
        let (c, h) = (Arc::clone(&catalog), holder);
        let _ = tokio::task::spawn_blocking(move || c.release_lease(LEASE, &h)).await;
    }
}

/// Runs this gateway on `share`, from the view of `stamp` (its coordinator and `updated_ms`;
/// `None`: the fallback's).
async fn apply(
    cluster: &Cluster,
    member: &Member,
    share: Share,
    stamp: Option<(Option<String>, u64)>,
) {
    let capacity = share.capacity;
    match cluster.throttle.set_share(Some(share)).await {
        Ok(()) => {
            let mut s = cluster.state();
            s.share = capacity;
            s.fallback = member.fallback();
            if let Some(stamp) = stamp
                && !(stamp.0 == s.applied.0 && stamp.1 < s.applied.1)
            {
                s.applied = stamp;
            }
        }
        Err(e) => tracing::warn!(error = %e, "the assigned share was not applied"),
    }
}

/// The coordinator's own round: its report, then the split; an urgent one's view is pushed
/// to the other gateways at once.
fn coordinate(cluster: &Cluster, now: Instant, report: Report) -> Option<View> {
    let urgent = report.urgent;
    let view = {
        let mut s = cluster.state();
        s.coordinator.as_mut()?.report(now, report);
        cluster.split_now(&mut s, now)
    };
    if urgent && let Some(v) = &view {
        cluster.push(v, &cluster.id);
    }
    view
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
    let (status, answer) = post(key, url, "/qos/report", body).await?;
    match status.as_str() {
        "200" => serde_json::from_slice(&answer)
            .map(Some)
            .map_err(|e| e.to_string()),
        "503" => Ok(None),
        other => Err(format!("the coordinator answered {other}")),
    }
}

/// A signed `POST path` of `body` to the control listener at `url` (`http://host:port`):
/// the answer's status and body.
async fn post(
    key: &hmac::Key,
    url: &str,
    path: &str,
    body: Vec<u8>,
) -> Result<(String, Vec<u8>), String> {
    let addr = url.strip_prefix("http://").unwrap_or(url).to_owned();
    let signature = sign(key, sluice_meta::now_ms(), &body);
    let exchange = async move {
        let mut stream = tokio::net::TcpStream::connect(&addr)
            .await
            .map_err(|e| e.to_string())?;
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
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
    let status = head.split_whitespace().nth(1).unwrap_or("").to_owned();
    Ok((status, answer[split_at + 4..].to_vec()))
}

#[cfg(test)]
mod tests;
