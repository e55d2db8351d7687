//! Throughput isolation between tenants: a dmClock scheduler.
//!
//! This crate decides, each time the backend can take more work, **which tenant's request
//! goes next**. It owns the per-tenant queues and the tag arithmetic and nothing else: no
//! threads, no clock, no I/O, no globals. The caller owns the clock (every call takes `now`),
//! the wake-ups (it sleeps until [`Decision::NextAt`]) and the requests (an opaque payload `T`,
//! typically what releases one grain of a body). Admission against capacity
//! ([`check_reservations`]), the queue bound ([`Scheduler::check_bound`]) and the cost model
//! ([`CostModel`]) are helpers for the config layer and the gateway; neither calls the other.
//!
//! # What a tenant is promised
//!
//! Each tenant has three numbers. Reservation and limit are in cost units per second (a cost
//! unit prices bytes and operations together, see [`cost`]); the weight is relative.
//!
//! - **Reservation R** — a floor. Whenever the tenant has requests queued it is served at
//!   least R, whatever the others do, provided the reservations of all tenants sum to no more
//!   than the capacity (which [`check_reservations`] enforces at configuration time). R may
//!   be 0.
//! - **Weight W** — a share of what the reservations leave. Capacity not used by reservation
//!   service is split between the tenants with demand in proportion to their weights.
//! - **Limit L** — a ceiling, optionally unlimited; `R ≤ L`.
//!
//! With every tenant saturating a backend of capacity C, tenant i therefore receives
//!
//! ```text
//! a_i = min(R_i + λ·W_i, L_i),   λ ≥ 0 chosen so that Σ a_i = C
//! ```
//!
//! (or `L_i` each if the limits sum below C). The reservation is *added* to the weighted
//! share, not a minimum of it: this differs from mClock, where reservation service is also
//! charged to the proportional clock and a tenant gets `max(R_i, weighted share)`. Charging
//! each dispatch to exactly one clock makes "spare capacity splits by weight" literally true,
//! and keeps a tenant that lives on its reservation from drifting ever further ahead of the
//! weight phase (in mClock it then gets nothing but R long after the others have left).
//!
//! Requests are indivisible, so each promise holds up to a request or two — with `c` the
//! largest request the scheduler has seen (a grain, for the gateway):
//!
//! - a continuously backlogged tenant is served at least `R·T` less a few `c` in any window
//!   of length T, and a newcomer is never more than `2c` behind `R·(t − arrival)`;
//! - a tenant is served at most `L·T + 2c` in any window of length T (`+ 3c` if it also has a
//!   reservation, whose catching up is not held to the limit). A tenant held at its limit
//!   gets nearly all of it: the limit absorbs one request's worth of waiting behind others,
//!   so only when a request is a large part of the limit (on a backend of 100 MiB/s, a 1 MiB
//!   request against a limit of 50 MiB/s) can several tenants' requests keep it waiting
//!   longer, and it loses that time;
//! - idle time buys nothing: a returning tenant rejoins where the others stand, ahead of
//!   each by at most one of their requests (weighted), however long it was away.
//!
//! `tests/isolation.rs` and `tests/randomized.rs` check each of these in virtual time.
//!
//! # The algorithm
//!
//! mClock (Gulati, Merchant, Varman, "mClock: Handling Throughput Variability for Hypervisor
//! IO Scheduling", OSDI 2010) gives each request three tags, one per clock, and serves in two
//! phases. dmClock, from the same paper, distributes it over several servers. The reference
//! implementation is ceph/dmclock (`src/dmclock_server.h`); this is a fresh implementation of
//! the algorithm, with the differences listed below.
//!
//! **Tags.** Only the request at the head of a tenant's queue carries tags. For a head request
//! of cost `c` whose predecessor left the tenant's clocks at `(R', P', L')`:
//!
//! ```text
//! reservation  R = max(R' + ρ·c/R_i, arrival)     real time: when it is due
//! proportion   P = S + (δ − ρ + 1)·c/W_i          virtual time: its place in line
//! limit        L = L' − c_max/L_i                 real time: when it may start
//! ```
//!
//! where `S`, the request's start in the weight phase, is `P'` while the tenant keeps
//! competing (a returning tenant is re-synced, below), and `c_max` is the largest request seen.
//! On dispatch at `now`, whatever the phase, `L' ← max(L', now) + δ·c/L_i`: the limit clock is
//! a leaky bucket (GCRA) one largest request deep.
//!
//! **Decision** ([`Scheduler::dequeue`]) at time `now`:
//!
//! 1. *Constraint phase.* If the smallest reservation tag among backlogged tenants is `≤ now`,
//!    serve that tenant. Limits do not apply here: `R ≤ L`, and a reservation that had to wait
//!    for a neighbour's request may catch up.
//! 2. *Weight phase.* Otherwise serve, among tenants whose limit tag is `≤ now`, the one with
//!    the smallest proportional tag, and advance the virtual time `V` to its start `S`.
//! 3. Otherwise nothing is eligible: answer [`Decision::NextAt`] with the earliest reservation
//!    or limit tag, or [`Decision::Empty`] if nothing is queued.
//!
//! **Each dispatch is charged to one clock.** A request is tagged on both the reservation and
//! the proportional clock; when it is served, the clock of the *other* phase gets the request's
//! own increment back. A weight-phase dispatch does not count against the reservation (the
//! paper's adjustment of the reservation tags), and — our addition — a reservation-phase
//! dispatch does not count against the weight.
//!
//! **No banked credit.** A tenant returning from idle is due on arrival on the reservation
//! clock (the `max` with `arrival`), finds its limit bucket at most one request full, and
//! starts at `S = max(P', V)` in the weight phase: where the weight phase stands, not where it
//! left. An hour of idleness buys one immediately eligible request, not an hour's worth.
//!
//! # Where this differs from the paper and ceph/dmclock, and why
//!
//! - **Proportional tags run on a virtual clock, not the wall clock.** The paper's
//!   `P = max(P' + 1/w, now)` mixes units: weights are relative, so P tags advance at a rate
//!   unrelated to real time. If they run ahead of `now`, a newcomer tagged `now` jumps the
//!   queue until it catches up (a burst); if they fall behind, every tag collapses to `now`
//!   and weights stop mattering (Ceph documents this as a "subtlety": weights must stay below
//!   the request rate). ceph/dmclock patches the first case with a per-client offset found by
//!   a scan over all clients. Here `V` is the largest start tag the weight phase has served —
//!   start-time fair queueing's virtual time — and a tenant rejoins at `V`.
//! - **A tenant held at its limit rejoins at `S = max(P', V − c_max/W_i)`.** While held it
//!   falls behind `V`. A tenant under its limit on average is held only briefly (its requests
//!   bunch up behind a reservation-phase dispatch, say) and must keep that lag to get its
//!   share; one truly capped would build up lag without end, and spend it as a burst once the
//!   others' demand falls below its limit. One request's worth separates the two.
//! - **The limit is a leaky bucket one request deep**, charged at dispatch. The paper's
//!   `max(L' + 1/l, arrival)`, tagged on arrival, lets a tenant whose requests were queued
//!   long ago, or held back by its neighbours, find a backlog of past limit tags eligible all
//!   at once. The bucket's depth (the largest request seen) lets a tenant served late because
//!   a neighbour's request was in service catch up, and no more.
//! - **Tags are computed for the head request only**, as ceph/dmclock's delayed tag
//!   calculation: a refund then touches one tag, not every queued request.
//!
//! # dmClock: ρ and δ
//!
//! With several gateways in front of one backend, each runs its own scheduler and a tenant's
//! R/W/L must hold across all of them. dmClock does it with two counters carried on each
//! request (see [`Request::with_counters`]): ρ, the tenant's requests served in the
//! reservation phase by all gateways since its previous request to this one, and δ, those
//! served in any phase, both counting this request. The increments multiply by them (the
//! proportional clock by `δ − ρ + 1`, the requests served by weight), so a gateway charges a
//! tenant for what the others served. With one gateway ρ = δ = 1 and the formulas reduce to
//! mClock's. Multiplying a count by this request's cost assumes the requests counted cost
//! about the same, which holds when bodies are scheduled in fixed-size grains.
//! [`Request::with_service_elsewhere`] takes the same service in cost units instead (what the
//! node agent counts): the reservation clock moves by ρ's units, the proportional clock by
//! δ's less ρ's, the limit clock by δ's, on top of the request's own cost; the tier this
//! scheduler paces is charged only the request's own cost.
//!
//! # Invariants
//!
//! - A backlogged tenant is in the reservation index iff it has a reservation, and in exactly
//!   one of the proportional index (limit tag ≤ now) or the limit index (limit tag > now). An
//!   idle tenant is in no index.
//! - `V` never decreases. A tenant competing in the weight phase starts at or after `V` less
//!   one of its increments; only a tenant held at its limit falls further behind, by at most
//!   one largest request when it rejoins.
//! - `now` never runs backwards: an earlier `now` than one already seen is read as the latest.
//! - Every decision is O(log n) in the number of tenants: three indexed binary heaps (by
//!   reservation tag, by proportional tag among tenants under their limit, by limit tag among
//!   tenants at it) and no scan over tenants. Moving a tenant from the limit heap to the
//!   proportional heap happens once per head request, amortised into its dispatch.
//!
//! # Time
//!
//! `now` is a [`Duration`](std::time::Duration) since an epoch the caller chooses (the
//! gateway's start, say) and must not go backwards. Internally tags are `f64` seconds, exact to
//! well under a nanosecond for months of uptime; [`Decision::NextAt`] is rounded up, so
//! calling back at that instant always makes progress.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use sluice_qos::{CostModel, Decision, Request, Scheduler, TenantQos};
//!
//! let cost = CostModel::from_capacity(1e9, 20_000.0)?; // 1 GB/s, 20k ops/s
//! let mut scheduler = Scheduler::new();
//! let training = scheduler.add_tenant(TenantQos::new(200e6, 1.0, None)?);
//! let batch = scheduler.add_tenant(TenantQos::new(0.0, 3.0, Some(500e6))?);
//!
//! let now = Duration::ZERO;
//! scheduler.enqueue(batch, Request::new("batch grain", cost.cost(4 << 20)), now)?;
//! scheduler.enqueue(training, Request::new("training read", cost.cost(4 << 20)), now)?;
//! // Training's reservation is due on arrival, so it goes first.
//! let Decision::Dispatch(first) = scheduler.dequeue(now) else { unreachable!() };
//! assert_eq!(first.payload, "training read");
//! # Ok::<(), sluice_qos::QosError>(())
//! ```

pub mod cost;
mod error;
mod heap;
mod scheduler;
pub mod split;
mod tag;
mod tenant;

pub use cost::{CostModel, check_reservations};
pub use error::QosError;
pub use scheduler::{Decision, Dispatch, QueueBound, Request, Scheduler};
pub use tag::Phase;
pub use tenant::{TenantId, TenantQos, TenantStats};
