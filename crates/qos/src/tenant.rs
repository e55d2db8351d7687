//! Tenants as the scheduler sees them: an id, validated R/W/L, a queue and three clocks.

use std::collections::VecDeque;
use std::fmt;

use crate::error::QosError;
use crate::tag::{Chains, Charge, Phase, Rates, Rejoin, Shared, Tags};

/// A tenant's handle in one [`Scheduler`](crate::Scheduler), handed out by
/// [`add_tenant`](crate::Scheduler::add_tenant).
///
/// The gateway maps tenant names to these. An id outlives its tenant harmlessly: once the
/// tenant is removed, calls with the old id fail with [`QosError::UnknownTenant`] even after
/// the slot is reused, because the generation differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TenantId {
    index: u32,
    generation: u32,
}

impl TenantId {
    pub(crate) fn new(index: u32, generation: u32) -> Self {
        Self { index, generation }
    }

    /// A small dense number, unique among the live tenants of one scheduler: usable as an
    /// index into per-tenant arrays (metrics). Reused after the tenant is removed.
    pub fn index(self) -> u32 {
        self.index
    }

    pub(crate) fn generation(self) -> u32 {
        self.generation
    }
}

impl fmt::Display for TenantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}.{}", self.index, self.generation)
    }
}

/// A tenant's reservation, weight and limit, validated.
///
/// Reservation and limit are in cost units per second (bytes per second with the
/// [`CostModel`](crate::CostModel) of this crate); the weight is relative and has no unit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TenantQos {
    reservation: f64,
    weight: f64,
    limit: Option<f64>,
}

impl TenantQos {
    /// `reservation` ≥ 0 (0: no floor), `weight` > 0, `limit` > 0 or `None` for no ceiling,
    /// and `reservation ≤ limit`; all finite.
    pub fn new(reservation: f64, weight: f64, limit: Option<f64>) -> Result<Self, QosError> {
        if !(reservation.is_finite() && reservation >= 0.0) {
            return Err(QosError::InvalidReservation(reservation));
        }
        if !(weight.is_finite() && weight > 0.0) {
            return Err(QosError::InvalidWeight(weight));
        }
        if let Some(limit) = limit {
            if !(limit.is_finite() && limit > 0.0) {
                return Err(QosError::InvalidLimit(limit));
            }
            if reservation > limit {
                return Err(QosError::ReservationAboveLimit { reservation, limit });
            }
        }
        Ok(Self {
            reservation,
            weight,
            limit,
        })
    }

    /// Cost units per second guaranteed whenever the tenant has demand.
    pub fn reservation(&self) -> f64 {
        self.reservation
    }

    /// Share of the capacity left after reservations, relative to the other tenants' weights.
    pub fn weight(&self) -> f64 {
        self.weight
    }

    /// Cost units per second never exceeded; `None` for unlimited.
    pub fn limit(&self) -> Option<f64> {
        self.limit
    }
}

/// What a tenant has been served so far, by phase.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TenantStats {
    /// Requests dispatched, both phases.
    pub requests: u64,
    /// Cost units dispatched, both phases.
    pub cost: u64,
    /// Of `requests`, those dispatched in the reservation phase.
    pub reservation_requests: u64,
    /// Of `cost`, that dispatched in the reservation phase.
    pub reservation_cost: u64,
}

/// One queued request.
#[derive(Debug)]
pub(crate) struct Queued<T> {
    pub(crate) payload: T,
    pub(crate) cost: u64,
    pub(crate) charge: Charge,
    pub(crate) arrival: f64,
}

/// A tenant's whole state. Its head request's tags live in `head`, valid while the queue is
/// not empty.
#[derive(Debug)]
pub(crate) struct Tenant<T> {
    qos: TenantQos,
    rates: Rates,
    queue: VecDeque<Queued<T>>,
    queued_cost: u64,
    chains: Chains,
    head: Tags,
    /// How the head joined the weight phase (see [`Chains::head`]).
    head_rejoin: Rejoin,
    stats: TenantStats,
}

impl<T> Tenant<T> {
    pub(crate) fn new(qos: TenantQos) -> Self {
        Self {
            qos,
            rates: Rates::of(&qos),
            queue: VecDeque::new(),
            queued_cost: 0,
            chains: Chains::default(),
            head: Tags {
                reservation: f64::INFINITY,
                proportion_start: 0.0,
                proportion: 0.0,
                limit: f64::NEG_INFINITY,
            },
            head_rejoin: Rejoin::FromIdle,
            stats: TenantStats::default(),
        }
    }

    pub(crate) fn qos(&self) -> &TenantQos {
        &self.qos
    }

    pub(crate) fn stats(&self) -> TenantStats {
        self.stats
    }

    pub(crate) fn has_reservation(&self) -> bool {
        self.rates.has_reservation()
    }

    pub(crate) fn queue_len(&self) -> usize {
        self.queue.len()
    }

    pub(crate) fn queued_cost(&self) -> u64 {
        self.queued_cost
    }

    pub(crate) fn is_backlogged(&self) -> bool {
        !self.queue.is_empty()
    }

    /// The head request's tags. Meaningful only while backlogged.
    pub(crate) fn head(&self) -> Tags {
        self.head
    }

    /// Appends a request; returns true if it became the head (the tenant was idle), in which
    /// case its tags have been computed.
    pub(crate) fn push(&mut self, request: Queued<T>, shared: Shared) -> bool {
        self.queued_cost = self.queued_cost.saturating_add(request.cost);
        self.queue.push_back(request);
        let became_head = self.queue.len() == 1;
        if became_head {
            self.head_rejoin = Rejoin::FromIdle;
            self.retag(shared);
        }
        became_head
    }

    /// Takes the head request out, dispatched at `now` in `phase`, and tags the next one.
    pub(crate) fn pop(&mut self, phase: Phase, now: f64, shared: Shared) -> Option<Queued<T>> {
        let request = self.queue.pop_front()?;
        self.queued_cost = self.queued_cost.saturating_sub(request.cost);
        self.chains
            .dispatched(&self.rates, self.head, request.charge, phase, now);
        self.stats.requests += 1;
        self.stats.cost = self.stats.cost.saturating_add(request.cost);
        if phase == Phase::Reservation {
            self.stats.reservation_requests += 1;
            self.stats.reservation_cost = self.stats.reservation_cost.saturating_add(request.cost);
        }
        self.head_rejoin = Rejoin::Stay;
        self.retag(shared);
        Some(request)
    }

    /// The head comes out from behind its limit: its place in the weight phase is re-synced
    /// (see [`Rejoin::FromLimit`]), so that time held at the limit is not credit there.
    pub(crate) fn release(&mut self, shared: Shared) {
        if self.head_rejoin == Rejoin::Stay {
            self.head_rejoin = Rejoin::FromLimit;
        }
        self.retag(shared);
    }

    /// Swaps R/W/L at `now`, carrying the clocks over, and re-tags the head.
    pub(crate) fn reconfigure(&mut self, qos: TenantQos, now: f64, shared: Shared) {
        let rates = Rates::of(&qos);
        self.chains.reconfigure(&self.rates, &rates, now);
        self.qos = qos;
        self.rates = rates;
        self.retag(shared);
    }

    /// Empties the queue, oldest first.
    pub(crate) fn drain(&mut self) -> Vec<T> {
        self.queued_cost = 0;
        self.queue.drain(..).map(|queued| queued.payload).collect()
    }

    fn retag(&mut self, shared: Shared) {
        if let Some(front) = self.queue.front() {
            self.head = self.chains.head(
                &self.rates,
                front.charge,
                front.arrival,
                shared,
                self.head_rejoin,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qos_is_validated() {
        assert!(TenantQos::new(0.0, 1.0, None).is_ok());
        assert!(TenantQos::new(10.0, 0.5, Some(10.0)).is_ok());
        assert_eq!(
            TenantQos::new(-1.0, 1.0, None),
            Err(QosError::InvalidReservation(-1.0))
        );
        assert!(matches!(
            TenantQos::new(f64::NAN, 1.0, None),
            Err(QosError::InvalidReservation(_))
        ));
        assert_eq!(
            TenantQos::new(0.0, 0.0, None),
            Err(QosError::InvalidWeight(0.0))
        );
        assert_eq!(
            TenantQos::new(0.0, f64::INFINITY, None),
            Err(QosError::InvalidWeight(f64::INFINITY))
        );
        assert_eq!(
            TenantQos::new(0.0, 1.0, Some(0.0)),
            Err(QosError::InvalidLimit(0.0))
        );
        assert_eq!(
            TenantQos::new(20.0, 1.0, Some(10.0)),
            Err(QosError::ReservationAboveLimit {
                reservation: 20.0,
                limit: 10.0
            })
        );
    }

    #[test]
    fn queue_accounts_cost_and_stats() {
        let mut tenant = Tenant::new(TenantQos::new(1.0, 1.0, None).expect("valid qos"));
        let request = |payload, cost| Queued {
            payload,
            cost,
            charge: Charge::new(cost, 1, 1),
            arrival: 0.0,
        };
        let shared = Shared {
            virtual_time: 0.0,
            limit_slack: 0.0,
        };
        assert!(tenant.push(request('a', 3), shared));
        assert!(!tenant.push(request('b', 4), shared));
        assert_eq!((tenant.queue_len(), tenant.queued_cost()), (2, 7));
        let popped = tenant.pop(Phase::Reservation, 0.0, shared).expect("queued");
        assert_eq!(popped.payload, 'a');
        assert_eq!(tenant.queued_cost(), 4);
        assert_eq!(tenant.drain(), vec!['b']);
        assert!(!tenant.is_backlogged());
        assert_eq!(
            tenant.stats(),
            TenantStats {
                requests: 1,
                cost: 3,
                reservation_requests: 1,
                reservation_cost: 3
            }
        );
    }
}
