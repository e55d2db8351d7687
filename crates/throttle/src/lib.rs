//! Throughput isolation on the data path: every request's operation and every grain of its
//! body is admitted through one dmClock scheduler (`sluice-qos`) and released at the rate the
//! shared tier can serve.
//!
//! # Design
//!
//! A single dispatcher task owns the [`Scheduler`]. Callers send it admission requests over a
//! channel and wait on a oneshot for their grant; nothing holds a lock while waiting, and the
//! dispatcher's work per decision is O(log tenants). The dispatcher models the tier as a
//! server of `capacity` cost units per second: each grant advances the time at which the tier
//! is next free by `cost / capacity`, and grants are issued while that time is less than the
//! lookahead ahead of now (by default [`DEFAULT_LOOKAHEAD`], or one grain's service time if
//! larger), so the tier always has a little work in hand and timer granularity does not waste
//! capacity, while a neighbour's next grain never waits behind more than that. Which tenant is granted next is dmClock's decision.
//!
//! # Policies
//!
//! The same dispatcher runs the alternatives the benchmark compares:
//! - [`Policy::DmClock`]: per-tenant reservation, weight and limit, paced to capacity;
//! - [`Policy::Fifo`]: one queue for everyone, paced to capacity (no isolation);
//! - [`Policy::RateLimit`]: each tenant capped at its limit, no capacity arbitration (static
//!   per-tenant caps, like Ceph RGW or Lustre TBF).
//!
//! # Bounds
//!
//! A tenant may have at most `queue_depth` requests waiting for their *first* admission
//! (the per-operation cost); beyond that [`Throttle::admit_op`] refuses at once and the
//! gateway answers `SlowDown`. Grains of an admitted request always queue: a request has at
//! most one grain waiting, so a tenant's queue is bounded by its admitted requests.
//!
//! # Phase
//!
//! Each grant says whether dmClock served it in the reservation phase (a flag on the
//! oneshot, nothing more on the dispatcher's path); a caller counts them for the request it
//! handles with [`elsewhere::counting_reserved`], for the client's ρ.
//!
//! # Cancellation
//!
//! A caller that stops waiting (client disconnected) drops its oneshot; the dispatcher sees
//! the failed send and gives the tier time back.
//!
//! # Background classes
//!
//! [`Throttle::background`] makes a handle whose admissions, whatever tenant they name, go to
//! a background class of the same dispatcher: work the tier does for itself (the gateway's
//! scrubber). A background class is served only when the tier has room and dmClock has no
//! tenant request it may dispatch, and never faster than its own rate (see `background` for
//! the rules and their proof in virtual time). Under [`Policy::RateLimit`] there is no
//! capacity model, so a background class is held to its rate alone.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use sluice_qos::{CostModel, Decision, Phase, QosError, Request, Scheduler, TenantId, TenantQos};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

mod background;
pub mod elsewhere;

use background::{ClassId, Classes, Pop, Waiting};
use elsewhere::{Elsewhere, Service};

/// How far ahead of now the dispatcher books the tier when nothing else is said: a couple of
/// milliseconds of queued work keeps the backend busy across timer granularity without
/// letting a burst build a queue in front of a neighbour's next grain.
pub const DEFAULT_LOOKAHEAD: Duration = Duration::from_millis(2);

/// How requests are ordered and paced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    DmClock,
    Fifo,
    RateLimit,
}

/// The shared tier's capacity and the admission settings.
#[derive(Debug, Clone, Copy)]
pub struct ThrottleConfig {
    pub policy: Policy,
    /// Bytes per second (cost units per second).
    pub bandwidth: f64,
    /// Operations per second.
    pub ops: f64,
    /// Requests a tenant may have waiting for admission before `SlowDown`.
    pub queue_depth: usize,
    /// How far ahead of now the tier may be booked (see the module doc).
    pub lookahead: Duration,
}

/// A tenant's throughput parameters, by name.
#[derive(Debug, Clone)]
pub struct TenantSpec {
    pub name: String,
    pub qos: TenantQos,
}

/// The tenant's queue is full.
#[derive(Debug, Clone, thiserror::Error)]
#[error("tenant {tenant} has {waiting} requests waiting for the shared tier; slow down")]
pub struct Throttled {
    pub tenant: String,
    pub waiting: usize,
    /// A hint for `Retry-After`.
    pub retry_after: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum ThrottleError {
    #[error("{0}")]
    Qos(#[from] QosError),
    #[error("the throttle has stopped")]
    Stopped,
    /// A background class's rate must be a positive number of bytes per second.
    #[error("a background rate must be positive bytes per second, not {0}")]
    Rate(f64),
    /// [`Throttle::set_background_rate`] on a handle that is not a background class's.
    #[error("not a background class's handle")]
    NotBackground,
}

struct Slot {
    id: TenantId,
    waiting: AtomicUsize,
    /// Cost units asked for and granted, since start (see [`Throttle::usage`]).
    asked: AtomicU64,
    served: AtomicU64,
}

impl Slot {
    fn new(id: TenantId) -> Arc<Self> {
        Arc::new(Self {
            id,
            waiting: AtomicUsize::new(0),
            asked: AtomicU64::new(0),
            served: AtomicU64::new(0),
        })
    }
}

/// A tenant's admissions so far, in cost units (see [`Throttle::usage`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantUsage {
    pub name: String,
    /// Cost units of every admission asked for since start (granted or waiting).
    pub asked: u64,
    /// Cost units granted since start.
    pub served: u64,
    /// Requests waiting for their first admission now.
    pub waiting: usize,
}

/// This gateway's part of a tier shared with other gateways (see [`Throttle::set_share`]):
/// the capacity it may use and, per tenant, the local reservation, weight and limit. Tenants
/// it does not name keep their configured weight with reservation and limit times `scale`.
#[derive(Debug, Clone, PartialEq)]
pub struct Share {
    /// Bytes (cost units) per second.
    pub capacity: f64,
    pub tenants: HashMap<String, TenantQos>,
    pub scale: f64,
}

enum Msg {
    Admit {
        tenant: TenantId,
        cost: u64,
        /// Served elsewhere (cost units): by reservation, and in all (see `elsewhere`).
        reserved_elsewhere: u64,
        served_elsewhere: u64,
        /// Told whether the reservation phase served it (see `elsewhere::counting_reserved`).
        grant: oneshot::Sender<bool>,
    },
    Update {
        specs: Vec<(Option<TenantId>, TenantQos)>,
        reply: oneshot::Sender<Result<Vec<TenantId>, QosError>>,
    },
    /// The tier's capacity for this dispatcher changes (bytes per second).
    Capacity(f64),
    /// Adds background class `id`, or changes its rate.
    Class { id: ClassId, rate: Option<f64> },
    /// The class's last handle is gone.
    Unclass { id: ClassId },
    AdmitBackground {
        class: ClassId,
        bytes: u64,
        cost: u64,
        grant: oneshot::Sender<()>,
    },
}

/// The tenants' slots by name, swapped whole on reload.
type SlotMap = Arc<HashMap<String, Arc<Slot>>>;

/// Whose admissions a handle makes.
enum Route {
    Tenants,
    Background(Arc<ClassHandle>),
}

/// A background class, removed from the dispatcher when its last handle goes.
struct ClassHandle {
    id: ClassId,
    name: String,
    tx: mpsc::UnboundedSender<Msg>,
}

impl Drop for ClassHandle {
    fn drop(&mut self) {
        let _ = self.tx.send(Msg::Unclass { id: self.id });
    }
}

/// The admission gate in front of the shared tier. Cheap to share (`Arc`).
pub struct Throttle {
    tx: mpsc::UnboundedSender<Msg>,
    tenants: Arc<RwLock<SlotMap>>,
    specs: Arc<RwLock<Vec<TenantSpec>>>,
    /// This gateway's part of a shared tier, when the cluster coordinator set one.
    share: Arc<RwLock<Option<Share>>>,
    cost: CostModel,
    config: ThrottleConfig,
    route: Route,
    /// Background class ids, shared by every handle of one dispatcher.
    classes: Arc<AtomicU64>,
    /// Whether [`Throttle::admit_op_elsewhere`] applies what it is told (see
    /// [`Throttle::honour_elsewhere`]).
    elsewhere: Arc<AtomicBool>,
}

impl std::fmt::Debug for Throttle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("Throttle");
        d.field("config", &self.config);
        if let Route::Background(class) = &self.route {
            d.field("background", &class.name);
        }
        d.finish_non_exhaustive()
    }
}

impl Throttle {
    /// Starts the dispatcher on the current tokio runtime.
    pub fn start(
        config: ThrottleConfig,
        tenants: Vec<TenantSpec>,
    ) -> Result<Arc<Self>, ThrottleError> {
        let cost = CostModel::from_capacity(config.bandwidth, config.ops)?;
        if config.policy == Policy::DmClock {
            sluice_qos::check_reservations(config.bandwidth, tenants.iter().map(|t| &t.qos))?;
        }
        let mut sched = Scheduler::new();
        let shared = (config.policy == Policy::Fifo).then(|| sched.add_tenant(plain_qos()));
        let mut map = HashMap::new();
        for t in &tenants {
            let id = match shared {
                Some(id) => id,
                None => sched.add_tenant(effective(config.policy, t.qos)),
            };
            map.insert(t.name.clone(), Slot::new(id));
        }
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(dispatch(sched, rx, config, shared));
        Ok(Arc::new(Self {
            tx,
            tenants: Arc::new(RwLock::new(Arc::new(map))),
            specs: Arc::new(RwLock::new(tenants)),
            share: Arc::default(),
            cost,
            config,
            route: Route::Tenants,
            classes: Arc::default(),
            elsewhere: Arc::default(),
        }))
    }

    /// A handle on this throttle whose every admission, whatever tenant it names, goes to a
    /// new background class `name`: served only from capacity the tenants leave unused and
    /// at most `rate` bytes per second (`None`: no cap of its own). The class lives as long
    /// as the handle (and its clones); tenants' parameters, [`Throttle::specs`] and
    /// [`Throttle::update`] are the same through it.
    pub fn background(&self, name: &str, rate: Option<f64>) -> Result<Arc<Self>, ThrottleError> {
        check_rate(rate)?;
        let id = self.classes.fetch_add(1, Ordering::Relaxed);
        self.tx
            .send(Msg::Class { id, rate })
            .map_err(|_| ThrottleError::Stopped)?;
        Ok(Arc::new(Self {
            tx: self.tx.clone(),
            tenants: Arc::clone(&self.tenants),
            specs: Arc::clone(&self.specs),
            share: Arc::clone(&self.share),
            cost: self.cost,
            config: self.config,
            route: Route::Background(Arc::new(ClassHandle {
                id,
                name: name.to_owned(),
                tx: self.tx.clone(),
            })),
            classes: Arc::clone(&self.classes),
            elsewhere: Arc::clone(&self.elsewhere),
        }))
    }

    /// Changes a background handle's rate, effective from its next grant (a faster one at
    /// once). A tenants' handle has no rate: that is an error.
    pub fn set_background_rate(&self, rate: Option<f64>) -> Result<(), ThrottleError> {
        check_rate(rate)?;
        let Route::Background(class) = &self.route else {
            return Err(ThrottleError::NotBackground);
        };
        self.tx
            .send(Msg::Class { id: class.id, rate })
            .map_err(|_| ThrottleError::Stopped)
    }

    /// The background class's name, if this is a background handle.
    pub fn background_name(&self) -> Option<&str> {
        match &self.route {
            Route::Background(class) => Some(&class.name),
            Route::Tenants => None,
        }
    }

    pub fn config(&self) -> ThrottleConfig {
        self.config
    }

    /// The tenants' current parameters.
    pub fn specs(&self) -> Vec<TenantSpec> {
        self.specs
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn slot(&self, tenant: &str) -> Option<Arc<Slot>> {
        self.tenants
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(tenant)
            .cloned()
    }

    /// Admits a new request's operation (its per-op cost), or refuses at once if the
    /// tenant's queue is full. Returns how long it waited. Unknown tenants pass unthrottled.
    pub async fn admit_op(&self, tenant: &str) -> Result<Duration, Throttled> {
        self.admit_op_elsewhere(tenant, None).await
    }

    /// Applies dmClock's δ/ρ from the requests' headers (off until called): a gateway pacing
    /// on its own turns it on, a coordinated one leaves it off (see `elsewhere`).
    pub fn honour_elsewhere(&self, on: bool) {
        self.elsewhere.store(on, Ordering::Relaxed);
    }

    /// [`Throttle::admit_op`] for a request that says what other gateways served its tenant
    /// since its previous request here (see [`elsewhere`]): priced with this throttle's cost
    /// model, cut to [`elsewhere::MAX_SECONDS`] of its capacity, it advances the tenant's
    /// clocks on top of the operation's own cost, when [`Throttle::honour_elsewhere`] is on
    /// and the policy keeps per-tenant clocks (not [`Policy::Fifo`]). It never lowers what the
    /// request is charged, and the tier is charged only the operation.
    pub async fn admit_op_elsewhere(
        &self,
        tenant: &str,
        elsewhere: Option<Elsewhere>,
    ) -> Result<Duration, Throttled> {
        if let Route::Background(class) = &self.route {
            return Ok(self.wait_background(class, 0, self.cost.per_op()).await);
        }
        let Some(slot) = self.slot(tenant) else {
            return Ok(Duration::ZERO);
        };
        let waiting = slot.waiting.fetch_add(1, Ordering::AcqRel);
        if waiting >= self.config.queue_depth {
            slot.waiting.fetch_sub(1, Ordering::AcqRel);
            let per_request = self.cost.per_op() as f64 + 4.0 * 1024.0 * 1024.0;
            let secs = (waiting as f64 * per_request / self.config.bandwidth).clamp(1.0, 60.0);
            return Err(Throttled {
                tenant: tenant.to_owned(),
                waiting,
                retry_after: Duration::from_secs_f64(secs.ceil()),
            });
        }
        let honoured = self.config.policy != Policy::Fifo && self.elsewhere.load(Ordering::Relaxed);
        let (reserved, served) = match elsewhere.filter(|_| honoured) {
            None => (0, 0),
            Some(e) => {
                // Finite and positive (`start` checked the bandwidth); saturates in the cast.
                let cap = (self.config.bandwidth * elsewhere::MAX_SECONDS) as u64;
                let rho = e.rho.cost(self.cost, cap);
                (rho, e.delta.cost(self.cost, cap).max(rho))
            }
        };
        let (waited, by_reservation) = self
            .wait(&slot, self.cost.per_op(), (reserved, served))
            .await;
        slot.waiting.fetch_sub(1, Ordering::AcqRel);
        if by_reservation {
            elsewhere::note_reserved(Service {
                requests: 1,
                bytes: 0,
            });
        }
        Ok(waited)
    }

    /// Admits one backend transfer of `bytes` for an admitted request: it costs an operation
    /// plus its bytes (`per_op + bytes`), as the backend spends both on it. Returns how long
    /// it waited.
    pub async fn admit_bytes(&self, tenant: &str, bytes: u64) -> Duration {
        if let Route::Background(class) = &self.route {
            return self
                .wait_background(class, bytes, self.cost.cost(bytes))
                .await;
        }
        match self.slot(tenant) {
            Some(slot) if bytes > 0 => {
                let (waited, by_reservation) =
                    self.wait(&slot, self.cost.cost(bytes), (0, 0)).await;
                if by_reservation {
                    elsewhere::note_reserved(Service { requests: 0, bytes });
                }
                waited
            }
            _ => Duration::ZERO,
        }
    }

    /// Queues `cost` for the tenant of `slot`, with `elsewhere` (reserved, served) on top of
    /// it for its clocks, and waits for the grant: how long, and whether the reservation
    /// phase served it.
    async fn wait(&self, slot: &Slot, cost: u64, elsewhere: (u64, u64)) -> (Duration, bool) {
        let started = Instant::now();
        let (grant, granted) = oneshot::channel();
        slot.asked.fetch_add(cost, Ordering::Relaxed);
        if self
            .tx
            .send(Msg::Admit {
                tenant: slot.id,
                cost,
                reserved_elsewhere: elsewhere.0,
                served_elsewhere: elsewhere.1,
                grant,
            })
            .is_err()
        {
            return (Duration::ZERO, false);
        }
        let by_reservation = if let Ok(by_reservation) = granted.await {
            slot.served.fetch_add(cost, Ordering::Relaxed);
            by_reservation
        } else {
            slot.asked.fetch_sub(cost, Ordering::Relaxed);
            false
        };
        (started.elapsed(), by_reservation)
    }

    async fn wait_background(&self, class: &ClassHandle, bytes: u64, cost: u64) -> Duration {
        let started = Instant::now();
        let (grant, granted) = oneshot::channel();
        let msg = Msg::AdmitBackground {
            class: class.id,
            bytes,
            cost,
            grant,
        };
        if self.tx.send(msg).is_err() {
            return Duration::ZERO;
        }
        let _ = granted.await;
        started.elapsed()
    }

    /// Replaces every tenant's parameters at once (a configuration reload), after checking
    /// the new set as a whole. Tenants not in `tenants` keep their last parameters.
    pub async fn update(&self, tenants: Vec<TenantSpec>) -> Result<(), ThrottleError> {
        if self.config.policy == Policy::DmClock {
            sluice_qos::check_reservations(self.config.bandwidth, tenants.iter().map(|t| &t.qos))?;
        }
        if self.config.policy == Policy::Fifo {
            // One queue for everyone: new tenants share it; nothing else to update.
            let current = self
                .tenants
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .clone();
            let shared = current.values().next().map(|s| s.id);
            if let Some(id) = shared {
                let mut map = (*current).clone();
                for t in &tenants {
                    map.entry(t.name.clone()).or_insert_with(|| Slot::new(id));
                }
                *self.tenants.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(map);
            }
            *self.specs.write().unwrap_or_else(PoisonError::into_inner) = tenants;
            return Ok(());
        }
        self.apply(&tenants).await?;
        *self.specs.write().unwrap_or_else(PoisonError::into_inner) = tenants;
        Ok(())
    }

    /// Sets this gateway's part of a tier shared with other gateways (`None`: the whole
    /// capacity and the configured parameters again). Off the request path: the dispatcher
    /// takes the new capacity and parameters between two decisions. Local reservations that
    /// do not fit the share's capacity are scaled down to fit.
    pub async fn set_share(&self, share: Option<Share>) -> Result<(), ThrottleError> {
        let capacity = share.as_ref().map_or(self.config.bandwidth, |s| s.capacity);
        if !(capacity.is_finite() && capacity > 0.0) {
            return Err(ThrottleError::Rate(capacity));
        }
        *self.share.write().unwrap_or_else(PoisonError::into_inner) = share;
        self.tx
            .send(Msg::Capacity(capacity))
            .map_err(|_| ThrottleError::Stopped)?;
        if self.config.policy == Policy::Fifo {
            return Ok(());
        }
        let specs = self.specs();
        self.apply(&specs).await
    }

    /// This gateway's part of a shared tier, if one is set.
    pub fn share(&self) -> Option<Share> {
        self.share
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Every tenant's admissions so far (cumulative counters: a reader takes differences),
    /// sorted by name.
    pub fn usage(&self) -> Vec<TenantUsage> {
        let mut out = Vec::new();
        self.each_usage(|name, asked, served, waiting| {
            out.push(TenantUsage {
                name: name.to_owned(),
                asked,
                served,
                waiting,
            });
        });
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// The same counters handed to `f` (name, asked, served, waiting) tenant by tenant, in
    /// no particular order, copying nothing: for a reader that looks every few
    /// milliseconds (a gateway's check for urgent reports) at however many tenants.
    pub fn each_usage(&self, mut f: impl FnMut(&str, u64, u64, usize)) {
        let map = Arc::clone(&self.tenants.read().unwrap_or_else(PoisonError::into_inner));
        for (name, s) in map.iter() {
            f(
                name,
                s.asked.load(Ordering::Relaxed),
                s.served.load(Ordering::Relaxed),
                s.waiting.load(Ordering::Relaxed),
            );
        }
    }

    /// The parameters the scheduler runs for `tenants` under the current share.
    fn local(&self, tenants: &[TenantSpec]) -> Vec<TenantQos> {
        let share = self.share();
        let Some(share) = share else {
            return tenants.iter().map(|t| t.qos).collect();
        };
        let mut local: Vec<TenantQos> = tenants
            .iter()
            .map(|t| match share.tenants.get(&t.name) {
                Some(q) => *q,
                None => TenantQos::new(
                    t.qos.reservation() * share.scale,
                    t.qos.weight(),
                    t.qos.limit().map(|l| l * share.scale),
                )
                .unwrap_or(t.qos),
            })
            .collect();
        let reserved: f64 = local.iter().map(TenantQos::reservation).sum();
        if reserved > share.capacity {
            let k = share.capacity / reserved;
            for q in &mut local {
                *q = TenantQos::new(q.reservation() * k, q.weight(), q.limit()).unwrap_or(*q);
            }
        }
        local
    }

    /// Hands the scheduler `tenants`' parameters under the current share and makes slots for
    /// new tenants.
    async fn apply(&self, tenants: &[TenantSpec]) -> Result<(), ThrottleError> {
        let current = self
            .tenants
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let specs = tenants
            .iter()
            .zip(self.local(tenants))
            .map(|(t, q)| {
                (
                    current.get(&t.name).map(|s| s.id),
                    effective(self.config.policy, q),
                )
            })
            .collect();
        let (reply, answer) = oneshot::channel();
        self.tx
            .send(Msg::Update { specs, reply })
            .map_err(|_| ThrottleError::Stopped)?;
        let ids = answer.await.map_err(|_| ThrottleError::Stopped)??;
        let mut map = (*current).clone();
        for (t, id) in tenants.iter().zip(ids) {
            map.entry(t.name.clone()).or_insert_with(|| Slot::new(id));
        }
        *self.tenants.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(map);
        Ok(())
    }
}

/// A background rate is positive and finite when there is one.
fn check_rate(rate: Option<f64>) -> Result<(), ThrottleError> {
    match rate {
        Some(r) if !(r.is_finite() && r > 0.0) => Err(ThrottleError::Rate(r)),
        _ => Ok(()),
    }
}

/// No floor, weight 1, no cap.
fn plain_qos() -> TenantQos {
    TenantQos::new(0.0, 1.0, None).expect("reservation 0, weight 1 and no limit are valid")
}

/// The parameters the scheduler actually uses under a policy.
fn effective(policy: Policy, qos: TenantQos) -> TenantQos {
    match policy {
        Policy::DmClock => qos,
        Policy::Fifo => plain_qos(),
        // Static caps only: no floor, no proportional share beyond the cap.
        Policy::RateLimit => TenantQos::new(0.0, 1.0, qos.limit()).unwrap_or(qos),
    }
}

async fn dispatch(
    mut sched: Scheduler<oneshot::Sender<bool>>,
    mut rx: mpsc::UnboundedReceiver<Msg>,
    config: ThrottleConfig,
    _shared: Option<TenantId>,
) {
    let epoch = Instant::now();
    let paced = config.policy != Policy::RateLimit;
    let mut free_at = epoch;
    let mut background: Classes<oneshot::Sender<()>> = Classes::default();
    let mut bandwidth = config.bandwidth;
    let handle = |sched: &mut Scheduler<oneshot::Sender<bool>>,
                  background: &mut Classes<oneshot::Sender<()>>,
                  bandwidth: &mut f64,
                  free_at: &mut Instant,
                  msg: Msg,
                  now: Instant| match msg {
        Msg::Capacity(bw) => {
            // A raise shortens the work already booked to its time at the new rate: kept in
            // seconds, a grain booked while the share was small would hold the tier closed
            // for its old service time (a gateway on the cluster's 5% floor books 1 MiB for
            // over a second). A cut leaves it as booked: that grain is already on the tier,
            // and stretching it would close the gateway for longer than the cut is meant to
            // last; the new rate governs the grants that follow.
            if *free_at > now && bw > *bandwidth {
                *free_at = now + (*free_at - now).mul_f64(*bandwidth / bw);
            }
            *bandwidth = bw;
        }
        Msg::Admit {
            tenant,
            cost,
            reserved_elsewhere,
            served_elsewhere,
            grant,
        } => {
            let request = Request::new(grant, cost)
                .with_service_elsewhere(reserved_elsewhere, served_elsewhere);
            if let Err(e) = sched.enqueue(tenant, request, now - epoch) {
                tracing::error!(error = %e, "admission for an unknown scheduler tenant");
            }
        }
        Msg::Update { specs, reply } => {
            let mut ids = Vec::with_capacity(specs.len());
            let mut result = Ok(());
            for (id, qos) in specs {
                match id {
                    Some(id) => {
                        if let Err(e) = sched.update_tenant(id, qos, now - epoch) {
                            result = Err(e);
                        }
                        ids.push(id);
                    }
                    None => ids.push(sched.add_tenant(qos)),
                }
            }
            let _ = reply.send(result.map(|()| ids));
        }
        Msg::Class { id, rate } => {
            if !background.set_rate(id, rate, now - epoch) {
                background.add(id, rate);
            }
        }
        Msg::Unclass { id } => drop(background.remove(id)),
        Msg::AdmitBackground {
            class,
            bytes,
            cost,
            grant,
        } => {
            // A class that is gone drops the grant: its caller is told at once.
            let _ = background.enqueue(Waiting {
                class,
                bytes,
                cost,
                payload: grant,
            });
        }
    };
    loop {
        while let Ok(msg) = rx.try_recv() {
            handle(
                &mut sched,
                &mut background,
                &mut bandwidth,
                &mut free_at,
                msg,
                Instant::now(),
            );
        }
        let now = Instant::now();
        if paced && free_at > now + config.lookahead {
            tokio::select! {
                () = tokio::time::sleep_until(free_at - config.lookahead) => {}
                msg = rx.recv() => match msg {
                    Some(m) => handle(&mut sched, &mut background, &mut bandwidth, &mut free_at, m, Instant::now()),
                    None => return,
                },
            }
            continue;
        }
        let mut wake = match sched.dequeue(now - epoch) {
            Decision::Dispatch(d) => {
                let service = Duration::from_secs_f64(d.cost as f64 / bandwidth);
                if paced {
                    free_at = free_at.max(now) + service;
                }
                let by_reservation = d.phase == Phase::Reservation;
                if d.payload.send(by_reservation).is_err() && paced {
                    // The caller gave up: the tier will not do this work.
                    free_at -= service;
                }
                continue;
            }
            Decision::NextAt(at) => Some(at),
            Decision::Empty => None,
        };
        // The tier has room and no tenant request may go now: the background's turn.
        match background.pop(now - epoch) {
            Pop::Grant(w) => {
                let service = Duration::from_secs_f64(w.cost as f64 / bandwidth);
                if paced {
                    free_at = free_at.max(now) + service;
                }
                if w.payload.send(()).is_err() {
                    background.refund(w.class, w.bytes);
                    if paced {
                        free_at -= service;
                    }
                }
                continue;
            }
            Pop::NextAt(at) => wake = Some(wake.map_or(at, |w| w.min(at))),
            Pop::Empty => {}
        }
        match wake {
            Some(at) => {
                tokio::select! {
                    () = tokio::time::sleep_until(epoch + at) => {}
                    msg = rx.recv() => match msg {
                        Some(m) => handle(&mut sched, &mut background, &mut bandwidth, &mut free_at, m, Instant::now()),
                        None => return,
                    },
                }
            }
            None => match rx.recv().await {
                Some(m) => handle(
                    &mut sched,
                    &mut background,
                    &mut bandwidth,
                    &mut free_at,
                    m,
                    Instant::now(),
                ),
                None => return,
            },
        }
    }
}

#[cfg(test)]
mod tests;
