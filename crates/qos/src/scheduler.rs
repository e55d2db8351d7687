//! The scheduler: per-tenant queues and the three indexes that pick the next request.

use std::time::Duration;

use crate::error::QosError;
use crate::heap::TagHeap;
use crate::tag::{Charge, Phase, Shared};
use crate::tenant::{Queued, Tenant, TenantId, TenantQos, TenantStats};

/// One unit of work offered to the scheduler: an opaque payload and its cost.
///
/// The gateway makes one per grain of a body (and one per metadata operation); the payload is
/// whatever releases that grain when it is dispatched, typically a oneshot sender.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request<T> {
    payload: T,
    cost: u64,
    rho: u32,
    delta: u32,
    /// Cost units served elsewhere since the tenant's previous request here: by
    /// reservation, and in any phase.
    reserved_elsewhere: u64,
    served_elsewhere: u64,
}

impl<T> Request<T> {
    /// A request costing `cost` units (see [`CostModel`](crate::CostModel)); a cost of 0 is
    /// charged as 1. Its dmClock counters are those of a single gateway: ρ = δ = 1.
    pub fn new(payload: T, cost: u64) -> Self {
        Self {
            payload,
            cost: cost.max(1),
            rho: 1,
            delta: 1,
            reserved_elsewhere: 0,
            served_elsewhere: 0,
        }
    }

    /// Sets dmClock's counters for a tenant served by several gateways: `rho` counts this
    /// tenant's requests served in the reservation phase by all gateways since its previous
    /// request to this one, and `delta` those served in any phase, both counting this request.
    /// Zero is read as 1, and `delta` is raised to at least `rho`. The increments assume the
    /// requests counted cost about as much as this one, which holds when bodies are scheduled
    /// in fixed-size grains.
    #[must_use]
    pub fn with_counters(mut self, rho: u32, delta: u32) -> Self {
        self.rho = rho.max(1);
        self.delta = delta.max(self.rho);
        self
    }

    /// dmClock's ρ and δ in cost units rather than counts: what the other gateways served
    /// this tenant since its previous request to this one, `reserved` of it in their
    /// reservation phase and `served` in any phase (raised to at least `reserved`), this
    /// request not included. The tenant's clocks advance by them on top of this request's
    /// own cost (the reservation clock by `reserved`, the proportional clock by
    /// `served − reserved`, the limit clock by `served`); this gateway's tier is not charged
    /// for them ([`Dispatch::cost`] is this request's own). Needs no assumption on the size
    /// of the requests served elsewhere. Adds to [`with_counters`](Self::with_counters).
    #[must_use]
    pub fn with_service_elsewhere(mut self, reserved: u64, served: u64) -> Self {
        self.reserved_elsewhere = reserved;
        self.served_elsewhere = served.max(reserved);
        self
    }

    pub fn cost(&self) -> u64 {
        self.cost
    }

    pub fn payload(&self) -> &T {
        &self.payload
    }
}

/// A request leaving the scheduler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dispatch<T> {
    pub tenant: TenantId,
    pub payload: T,
    pub cost: u64,
    /// Which clock chose it. A gateway that shares tenants with others reports these counts
    /// to them: they are the next requests' ρ (reservation) and δ (all).
    pub phase: Phase,
}

/// The answer to "what next?" at some `now`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision<T> {
    /// Serve this request now.
    Dispatch(Dispatch<T>),
    /// Requests are queued but every tenant holding one is at its limit (and none has a
    /// reservation due): nothing may go before this time. Sleep until then or until the next
    /// [`enqueue`](Scheduler::enqueue), whichever comes first. Calling
    /// [`dequeue`](Scheduler::dequeue) with `now` equal to this value makes progress.
    NextAt(Duration),
    /// No request is queued.
    Empty,
}

/// The most a tenant may have waiting; beyond it the gateway answers `SlowDown`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueBound {
    pub max_requests: usize,
    pub max_cost: u64,
}

#[derive(Debug)]
struct Slot<T> {
    generation: u32,
    tenant: Option<Tenant<T>>,
}

/// A dmClock scheduler over tenants' queues of `T`. See the [crate documentation](crate) for
/// the algorithm and its guarantees.
///
/// Every method takes `&mut self` and returns at once; the caller serialises access (a mutex
/// held for the fraction of a microsecond a decision takes) and owns the clock.
///
/// Offer work in grains of bounded size: the largest cost ever enqueued is how much a tenant
/// served late may catch up on its limit, so one oversized request loosens every limit.
#[derive(Debug)]
pub struct Scheduler<T> {
    slots: Vec<Slot<T>>,
    free: Vec<u32>,
    /// Backlogged tenants with a reservation, by their head's reservation tag.
    by_reservation: TagHeap,
    /// Backlogged tenants under their limit, by their head's proportional tag.
    by_proportion: TagHeap,
    /// Backlogged tenants at their limit, by their head's limit tag.
    by_limit: TagHeap,
    /// Where the weight phase stands: the largest start tag it has served (start-time fair
    /// queueing's virtual time), never decreasing.
    virtual_time: f64,
    /// The largest request cost seen: how much a tenant served late may catch up on its
    /// limit.
    largest_cost: u64,
    /// The latest `now` seen, in seconds; earlier values are read as this one.
    now: f64,
    queued: usize,
}

impl<T> Default for Scheduler<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Scheduler<T> {
    pub fn new() -> Self {
        Self {
            slots: Vec::new(),
            free: Vec::new(),
            by_reservation: TagHeap::default(),
            by_proportion: TagHeap::default(),
            by_limit: TagHeap::default(),
            virtual_time: 0.0,
            largest_cost: 1,
            now: 0.0,
            queued: 0,
        }
    }

    /// Adds a tenant with an empty queue. Whether its reservation fits the capacity is the
    /// config layer's check ([`check_reservations`](crate::check_reservations)), made on the
    /// whole tenant set before it is applied.
    pub fn add_tenant(&mut self, qos: TenantQos) -> TenantId {
        let tenant = Some(Tenant::new(qos));
        if let Some(index) = self.free.pop() {
            let slot = &mut self.slots[index as usize];
            slot.tenant = tenant;
            TenantId::new(index, slot.generation)
        } else {
            let index = u32::try_from(self.slots.len()).expect("fewer than 2^32 tenants");
            self.slots.push(Slot {
                generation: 0,
                tenant,
            });
            TenantId::new(index, 0)
        }
    }

    /// Swaps a tenant's R/W/L at `now`; its queue stays. What it was served ahead of its
    /// reservation or limit stays owed, converted to the new rates; reservation arrears are
    /// forgiven.
    pub fn update_tenant(
        &mut self,
        tenant: TenantId,
        qos: TenantQos,
        now: Duration,
    ) -> Result<(), QosError> {
        let now = self.observe(now);
        let shared = self.shared();
        self.tenant_mut(tenant)?.reconfigure(qos, now, shared);
        self.place(tenant.index(), now);
        Ok(())
    }

    /// Removes a tenant and hands back its queued payloads, oldest first, for the caller to
    /// fail. Its id becomes unknown.
    pub fn remove_tenant(&mut self, tenant: TenantId) -> Result<Vec<T>, QosError> {
        let payloads = self.tenant_mut(tenant)?.drain();
        let index = tenant.index();
        self.by_reservation.remove(index);
        self.by_proportion.remove(index);
        self.by_limit.remove(index);
        let slot = &mut self.slots[index as usize];
        slot.tenant = None;
        slot.generation = slot.generation.wrapping_add(1);
        self.free.push(index);
        self.queued -= payloads.len();
        Ok(payloads)
    }

    /// Queues a request for `tenant`, arrived at `now`. O(log tenants).
    ///
    /// The queue is unbounded here; call [`check_bound`](Self::check_bound) first to refuse
    /// work beyond the tenant's bound. On error the request is dropped (a waiter on its payload
    /// sees it closed).
    pub fn enqueue(
        &mut self,
        tenant: TenantId,
        request: Request<T>,
        now: Duration,
    ) -> Result<(), QosError> {
        self.tenant(tenant)?;
        let now = self.observe(now);
        self.largest_cost = self.largest_cost.max(request.cost);
        let shared = self.shared();
        let queued = Queued {
            payload: request.payload,
            cost: request.cost,
            charge: Charge::new(request.cost, request.rho, request.delta)
                .elsewhere(request.reserved_elsewhere, request.served_elsewhere),
            arrival: now,
        };
        if self.tenant_mut(tenant)?.push(queued, shared) {
            self.place(tenant.index(), now);
        }
        self.queued += 1;
        Ok(())
    }

    /// Picks the next request at `now`. O(log tenants), amortised over the tenants released
    /// from their limit.
    ///
    /// Constraint phase first: the tenant with the smallest reservation tag, if that tag is
    /// due. Otherwise the weight phase: among tenants under their limit, the one with the
    /// smallest proportional tag.
    pub fn dequeue(&mut self, now: Duration) -> Decision<T> {
        let now = self.observe(now);
        self.release_limited(now);
        let choice = match self.by_reservation.peek() {
            Some((due, slot)) if due <= now => Some((slot, Phase::Reservation)),
            _ => self
                .by_proportion
                .peek()
                .map(|(_, slot)| (slot, Phase::Weight)),
        };
        match choice {
            Some((slot, phase)) => Decision::Dispatch(self.dispatch(slot, phase, now)),
            None => self.next_event(),
        }
    }

    /// Refuses one more request for `tenant` if its queue is at `bound`: the gateway's cue to
    /// answer `SlowDown` to this tenant, and only this one.
    pub fn check_bound(&self, tenant: TenantId, bound: QueueBound) -> Result<(), QosError> {
        let state = self.tenant(tenant)?;
        let (queued_requests, queued_cost) = (state.queue_len(), state.queued_cost());
        if queued_requests >= bound.max_requests || queued_cost >= bound.max_cost {
            return Err(QosError::QueueFull {
                tenant,
                queued_requests,
                queued_cost,
            });
        }
        Ok(())
    }

    /// Requests waiting for `tenant`.
    pub fn queue_len(&self, tenant: TenantId) -> Result<usize, QosError> {
        Ok(self.tenant(tenant)?.queue_len())
    }

    /// Cost units waiting for `tenant`.
    pub fn queued_cost(&self, tenant: TenantId) -> Result<u64, QosError> {
        Ok(self.tenant(tenant)?.queued_cost())
    }

    /// The tenant's current R/W/L.
    pub fn qos(&self, tenant: TenantId) -> Result<TenantQos, QosError> {
        Ok(*self.tenant(tenant)?.qos())
    }

    /// What the tenant has been served since it was added.
    pub fn stats(&self, tenant: TenantId) -> Result<TenantStats, QosError> {
        Ok(self.tenant(tenant)?.stats())
    }

    /// Requests waiting, all tenants.
    pub fn len(&self) -> usize {
        self.queued
    }

    pub fn is_empty(&self) -> bool {
        self.queued == 0
    }

    /// Live tenants.
    pub fn tenant_count(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    fn tenant(&self, id: TenantId) -> Result<&Tenant<T>, QosError> {
        self.slots
            .get(id.index() as usize)
            .filter(|slot| slot.generation == id.generation())
            .and_then(|slot| slot.tenant.as_ref())
            .ok_or(QosError::UnknownTenant(id))
    }

    fn tenant_mut(&mut self, id: TenantId) -> Result<&mut Tenant<T>, QosError> {
        self.slots
            .get_mut(id.index() as usize)
            .filter(|slot| slot.generation == id.generation())
            .and_then(|slot| slot.tenant.as_mut())
            .ok_or(QosError::UnknownTenant(id))
    }

    /// The scheduler-wide state a tenant's tags are computed against.
    fn shared(&self) -> Shared {
        Shared {
            virtual_time: self.virtual_time,
            limit_slack: self.largest_cost as f64,
        }
    }

    /// Seconds since the epoch, never earlier than a `now` already seen.
    fn observe(&mut self, now: Duration) -> f64 {
        self.now = self.now.max(now.as_secs_f64());
        self.now
    }

    /// Moves tenants whose limit tag has come from the limit index to the proportional one.
    fn release_limited(&mut self, now: f64) {
        while let Some((at, slot)) = self.by_limit.peek() {
            if at > now {
                break;
            }
            self.by_limit.remove(slot);
            let shared = self.shared();
            let tenant = self.live_mut(slot);
            tenant.release(shared);
            let head = tenant.head();
            self.by_proportion.set(slot, head.proportion);
        }
    }

    /// Takes the head of `slot`'s queue out in `phase` and re-indexes the tenant.
    fn dispatch(&mut self, slot: u32, phase: Phase, now: f64) -> Dispatch<T> {
        if phase == Phase::Weight {
            let served = self.live(slot).head().proportion_start;
            self.virtual_time = self.virtual_time.max(served);
        }
        let shared = self.shared();
        let generation = self.slots[slot as usize].generation;
        let request = self
            .live_mut(slot)
            .pop(phase, now, shared)
            .expect("an indexed tenant has a queued request");
        self.queued -= 1;
        self.place(slot, now);
        Dispatch {
            tenant: TenantId::new(slot, generation),
            payload: request.payload,
            cost: request.cost,
            phase,
        }
    }

    /// Puts a tenant in the indexes its head request belongs to (none when idle).
    ///
    /// Invariant: a backlogged tenant is in `by_reservation` iff it has a reservation, and in
    /// exactly one of `by_proportion` (limit tag ≤ now) or `by_limit` (limit tag > now).
    fn place(&mut self, slot: u32, now: f64) {
        let tenant = self.live(slot);
        let (backlogged, has_reservation, head) = (
            tenant.is_backlogged(),
            tenant.has_reservation(),
            tenant.head(),
        );
        if !backlogged {
            self.by_reservation.remove(slot);
            self.by_proportion.remove(slot);
            self.by_limit.remove(slot);
            return;
        }
        if has_reservation {
            self.by_reservation.set(slot, head.reservation);
        } else {
            self.by_reservation.remove(slot);
        }
        if head.limit > now {
            self.by_proportion.remove(slot);
            self.by_limit.set(slot, head.limit);
        } else {
            self.by_limit.remove(slot);
            self.by_proportion.set(slot, head.proportion);
        }
    }

    /// Nothing is eligible now: when will something be?
    fn next_event(&self) -> Decision<T> {
        let next = [self.by_reservation.peek(), self.by_limit.peek()]
            .into_iter()
            .flatten()
            .map(|(at, _)| at)
            .fold(f64::INFINITY, f64::min);
        if next.is_finite() {
            Decision::NextAt(at_or_after(next))
        } else {
            Decision::Empty
        }
    }

    fn live(&self, slot: u32) -> &Tenant<T> {
        self.slots[slot as usize]
            .tenant
            .as_ref()
            .expect("indexed slots hold live tenants")
    }

    fn live_mut(&mut self, slot: u32) -> &mut Tenant<T> {
        self.slots[slot as usize]
            .tenant
            .as_mut()
            .expect("indexed slots hold live tenants")
    }
}

/// The earliest `Duration` whose `as_secs_f64()` is at least `secs`, so that a caller that
/// sleeps until [`Decision::NextAt`] and passes that instant back finds the request eligible.
fn at_or_after(secs: f64) -> Duration {
    if secs.is_nan() || secs <= 0.0 {
        return Duration::ZERO;
    }
    let mut at = Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX);
    while at.as_secs_f64() < secs {
        match at.checked_add(Duration::from_nanos(1)) {
            Some(later) => at = later,
            None => break,
        }
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;

    fn qos(reservation: f64, weight: f64, limit: Option<f64>) -> TenantQos {
        TenantQos::new(reservation, weight, limit).expect("valid qos")
    }

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    fn dispatched<T>(decision: Decision<T>) -> Dispatch<T> {
        match decision {
            Decision::Dispatch(dispatch) => dispatch,
            Decision::NextAt(at) => panic!("expected a dispatch, got NextAt({at:?})"),
            Decision::Empty => panic!("expected a dispatch, got Empty"),
        }
    }

    #[test]
    fn empty_scheduler_says_empty() {
        let mut scheduler: Scheduler<()> = Scheduler::new();
        assert_eq!(scheduler.dequeue(Duration::ZERO), Decision::Empty);
        let a = scheduler.add_tenant(qos(0.0, 1.0, None));
        assert_eq!(scheduler.dequeue(Duration::ZERO), Decision::Empty);
        scheduler
            .enqueue(a, Request::new((), 1), Duration::ZERO)
            .expect("known tenant");
        assert_eq!(scheduler.len(), 1);
        assert!(matches!(
            scheduler.dequeue(Duration::ZERO),
            Decision::Dispatch(_)
        ));
        assert!(scheduler.is_empty());
    }

    #[test]
    fn a_tenant_at_its_limit_reports_when_it_may_go() {
        let mut scheduler = Scheduler::new();
        let a = scheduler.add_tenant(qos(0.0, 1.0, Some(100.0)));
        for i in 0..4 {
            scheduler
                .enqueue(a, Request::new(i, 10), Duration::ZERO)
                .expect("known tenant");
        }
        // The limit has one request of slack: two go at once after an idle time...
        assert_eq!(dispatched(scheduler.dequeue(Duration::ZERO)).payload, 0);
        assert_eq!(dispatched(scheduler.dequeue(Duration::ZERO)).payload, 1);
        // ...then one per 10 units at 100/s.
        let Decision::NextAt(at) = scheduler.dequeue(secs(0.05)) else {
            panic!("expected NextAt");
        };
        assert!(at >= secs(0.1) && at <= secs(0.1) + Duration::from_nanos(2));
        assert_eq!(dispatched(scheduler.dequeue(at)).payload, 2);
        let Decision::NextAt(next) = scheduler.dequeue(at) else {
            panic!("expected NextAt");
        };
        assert!(next >= secs(0.2) && next <= secs(0.2) + Duration::from_nanos(2));
    }

    #[test]
    fn service_elsewhere_moves_a_tenant_later_at_its_limit_and_in_the_weight_phase() {
        // Limit 100/s: after the first request (its slack spent), one of 10 units per 0.1 s
        // — unless 40 units were served elsewhere since, which move the limit clock 0.4 s on.
        let mut scheduler = Scheduler::new();
        let a = scheduler.add_tenant(qos(0.0, 1.0, Some(100.0)));
        scheduler
            .enqueue(
                a,
                Request::new('a', 10).with_service_elsewhere(0, 40),
                Duration::ZERO,
            )
            .expect("known tenant");
        scheduler
            .enqueue(a, Request::new('a', 10), Duration::ZERO)
            .expect("known tenant");
        let first = dispatched(scheduler.dequeue(Duration::ZERO));
        assert_eq!(
            (first.payload, first.cost),
            ('a', 10),
            "the tier is charged its own cost"
        );
        let Decision::NextAt(at) = scheduler.dequeue(Duration::ZERO) else {
            panic!("expected NextAt");
        };
        // 50 units at 100/s less one request of slack: 0.4 s.
        assert!(
            at >= secs(0.4) && at <= secs(0.4) + Duration::from_nanos(2),
            "{at:?}"
        );

        // In the weight phase, 25 units elsewhere put a tenant two and a half requests behind
        // its equal-weight neighbour: proportional tags 35, 45, … against 10, 20, ….
        let mut scheduler = Scheduler::new();
        let a2 = scheduler.add_tenant(qos(0.0, 1.0, None));
        for i in 0..4 {
            let r = Request::new('a', 10);
            let r = if i == 0 {
                r.with_service_elsewhere(0, 25)
            } else {
                r
            };
            scheduler
                .enqueue(a2, r, Duration::ZERO)
                .expect("known tenant");
        }
        let b2 = scheduler.add_tenant(qos(0.0, 1.0, None));
        for _ in 0..4 {
            scheduler
                .enqueue(b2, Request::new('b', 10), Duration::ZERO)
                .expect("known tenant");
        }
        let order: String = (0..8)
            .map(|_| dispatched(scheduler.dequeue(Duration::ZERO)).payload)
            .collect();
        assert_eq!(order, "bbbabaaa");
    }

    #[test]
    fn a_due_reservation_goes_before_a_smaller_proportional_tag() {
        let mut scheduler = Scheduler::new();
        let heavy = scheduler.add_tenant(qos(0.0, 1000.0, None));
        let reserved = scheduler.add_tenant(qos(10.0, 1.0, None));
        for _ in 0..10 {
            scheduler
                .enqueue(heavy, Request::new('h', 10), Duration::ZERO)
                .expect("known tenant");
        }
        scheduler
            .enqueue(reserved, Request::new('r', 10), Duration::ZERO)
            .expect("known tenant");
        let first = dispatched(scheduler.dequeue(Duration::ZERO));
        assert_eq!((first.payload, first.phase), ('r', Phase::Reservation));
        let second = dispatched(scheduler.dequeue(Duration::ZERO));
        assert_eq!((second.payload, second.phase), ('h', Phase::Weight));
    }

    #[test]
    fn reservation_due_while_everyone_is_limited_is_reported() {
        let mut scheduler = Scheduler::new();
        let a = scheduler.add_tenant(qos(10.0, 1.0, Some(10.0)));
        for _ in 0..3 {
            scheduler
                .enqueue(a, Request::new((), 10), Duration::ZERO)
                .expect("known tenant");
        }
        assert_eq!(
            dispatched(scheduler.dequeue(Duration::ZERO)).phase,
            Phase::Reservation
        );
        // The limit's slack lets the weight phase take one more at once.
        assert_eq!(
            dispatched(scheduler.dequeue(Duration::ZERO)).phase,
            Phase::Weight
        );
        // Reservation and limit both put the next request at t = 1.
        assert_eq!(
            scheduler.dequeue(Duration::ZERO),
            Decision::NextAt(secs(1.0))
        );
        assert_eq!(
            dispatched(scheduler.dequeue(secs(1.0))).phase,
            Phase::Reservation
        );
    }

    #[test]
    fn stale_and_unknown_ids_are_refused() {
        let mut scheduler: Scheduler<u8> = Scheduler::new();
        let a = scheduler.add_tenant(qos(0.0, 1.0, None));
        scheduler
            .enqueue(a, Request::new(1, 1), Duration::ZERO)
            .expect("known tenant");
        scheduler
            .enqueue(a, Request::new(2, 1), Duration::ZERO)
            .expect("known tenant");
        assert_eq!(scheduler.remove_tenant(a), Ok(vec![1, 2]));
        assert!(scheduler.is_empty());
        let b = scheduler.add_tenant(qos(0.0, 1.0, None));
        assert_eq!(b.index(), a.index(), "the slot is reused");
        assert_eq!(
            scheduler.enqueue(a, Request::new(3, 1), Duration::ZERO),
            Err(QosError::UnknownTenant(a))
        );
        assert_eq!(scheduler.queue_len(a), Err(QosError::UnknownTenant(a)));
        assert_eq!(scheduler.remove_tenant(a), Err(QosError::UnknownTenant(a)));
        assert_eq!(scheduler.tenant_count(), 1);
        assert_eq!(scheduler.dequeue(Duration::ZERO), Decision::Empty);
    }

    #[test]
    fn removing_a_backlogged_tenant_leaves_the_others_scheduled() {
        let mut scheduler = Scheduler::new();
        let a = scheduler.add_tenant(qos(5.0, 1.0, Some(10.0)));
        let b = scheduler.add_tenant(qos(0.0, 1.0, None));
        scheduler
            .enqueue(a, Request::new('a', 100), Duration::ZERO)
            .expect("known tenant");
        scheduler
            .enqueue(a, Request::new('a', 100), Duration::ZERO)
            .expect("known tenant");
        scheduler
            .enqueue(b, Request::new('b', 1), Duration::ZERO)
            .expect("known tenant");
        assert_eq!(scheduler.remove_tenant(a).map(|p| p.len()), Ok(2));
        assert_eq!(dispatched(scheduler.dequeue(Duration::ZERO)).payload, 'b');
        assert_eq!(scheduler.dequeue(Duration::ZERO), Decision::Empty);
    }

    #[test]
    fn queue_bound_refuses_only_the_full_tenant() {
        let mut scheduler = Scheduler::new();
        let a = scheduler.add_tenant(qos(0.0, 1.0, None));
        let b = scheduler.add_tenant(qos(0.0, 1.0, None));
        let bound = QueueBound {
            max_requests: 2,
            max_cost: 1_000,
        };
        for _ in 0..2 {
            scheduler.check_bound(a, bound).expect("room left");
            scheduler
                .enqueue(a, Request::new((), 10), Duration::ZERO)
                .expect("known tenant");
        }
        assert_eq!(
            scheduler.check_bound(a, bound),
            Err(QosError::QueueFull {
                tenant: a,
                queued_requests: 2,
                queued_cost: 20
            })
        );
        assert_eq!(scheduler.check_bound(b, bound), Ok(()));
        scheduler
            .enqueue(b, Request::new((), 1_000), Duration::ZERO)
            .expect("known tenant");
        assert!(matches!(
            scheduler.check_bound(b, bound),
            Err(QosError::QueueFull { .. })
        ));
    }

    #[test]
    fn raising_a_limit_takes_effect_at_once() {
        let mut scheduler = Scheduler::new();
        let a = scheduler.add_tenant(qos(0.0, 1.0, Some(1.0)));
        for i in 0..4 {
            scheduler
                .enqueue(a, Request::new(i, 100), Duration::ZERO)
                .expect("known tenant");
        }
        dispatched(scheduler.dequeue(Duration::ZERO));
        dispatched(scheduler.dequeue(Duration::ZERO));
        // 200 units at 1/s, less one request of slack: the next may start at t = 100.
        assert_eq!(scheduler.dequeue(secs(1.0)), Decision::NextAt(secs(100.0)));
        // At t = 1 the limit goes to 100/s: the 199 s still owed become 1.99 s.
        scheduler
            .update_tenant(a, qos(0.0, 1.0, Some(100.0)), secs(1.0))
            .expect("known tenant");
        let Decision::NextAt(at) = scheduler.dequeue(secs(1.0)) else {
            panic!("expected NextAt");
        };
        assert!((at.as_secs_f64() - 1.99).abs() < 1e-9, "{at:?}");
        assert_eq!(dispatched(scheduler.dequeue(at)).payload, 2);
    }

    #[test]
    fn dropping_a_limit_releases_the_tenant() {
        let mut scheduler = Scheduler::new();
        let a = scheduler.add_tenant(qos(0.0, 1.0, Some(1.0)));
        scheduler
            .enqueue(a, Request::new(0, 100), Duration::ZERO)
            .expect("known tenant");
        scheduler
            .enqueue(a, Request::new(1, 100), Duration::ZERO)
            .expect("known tenant");
        dispatched(scheduler.dequeue(Duration::ZERO));
        scheduler
            .update_tenant(a, qos(0.0, 1.0, None), Duration::ZERO)
            .expect("known tenant");
        assert_eq!(dispatched(scheduler.dequeue(Duration::ZERO)).payload, 1);
    }

    #[test]
    fn time_never_runs_backwards() {
        let mut scheduler = Scheduler::new();
        let a = scheduler.add_tenant(qos(0.0, 1.0, Some(10.0)));
        for _ in 0..3 {
            scheduler
                .enqueue(a, Request::new((), 10), secs(5.0))
                .expect("known tenant");
        }
        dispatched(scheduler.dequeue(secs(5.0)));
        dispatched(scheduler.dequeue(secs(5.0)));
        // A caller passing an older instant is read as 5 s: the next is still due at 6 s.
        assert_eq!(scheduler.dequeue(secs(1.0)), Decision::NextAt(secs(6.0)));
    }

    #[test]
    fn next_at_is_never_before_the_tag() {
        for secs in [
            1e-9,
            0.1,
            0.3,
            1.0 / 3.0,
            12_345.678_9,
            9.9e6 + 0.123_456_789,
        ] {
            let at = at_or_after(secs);
            assert!(at.as_secs_f64() >= secs, "{secs}");
            assert!(
                at <= Duration::from_secs_f64(secs) + Duration::from_nanos(4),
                "{secs}"
            );
        }
        assert_eq!(at_or_after(-1.0), Duration::ZERO);
        assert_eq!(at_or_after(f64::INFINITY), Duration::MAX);
    }
}
