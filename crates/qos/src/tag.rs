//! Tag arithmetic: the three clocks each tenant runs, and how a request moves them.
//!
//! Everything here is per tenant and O(1). The scheduler decides *which* tenant goes next by
//! comparing these tags across tenants; this module only computes them. Times are `f64`
//! seconds since the scheduler's epoch; proportional tags are in virtual time (see the crate
//! documentation for why they are not wall-clock seconds).

use crate::tenant::TenantQos;

/// How a request was chosen. Each dispatch is charged to exactly one of the two clocks that
/// share capacity out: the reservation clock or the proportional clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Constraint phase: its reservation tag was due (≤ now). Limits do not apply.
    Reservation,
    /// Weight phase: no reservation was due; it had the smallest proportional tag among the
    /// tenants under their limit.
    Weight,
}

/// What one request is charged, after normalisation (cost ≥ 1, 1 ≤ ρ ≤ δ).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Charge {
    pub(crate) cost: f64,
    /// dmClock's ρ: this tenant's requests served in the reservation phase by all gateways
    /// since its previous request here, this one included.
    pub(crate) rho: f64,
    /// dmClock's δ: this tenant's requests served in any phase by all gateways since its
    /// previous request here, this one included.
    pub(crate) delta: f64,
}

impl Charge {
    pub(crate) fn new(cost: u64, rho: u32, delta: u32) -> Self {
        let rho = rho.max(1);
        Self {
            cost: cost.max(1) as f64,
            rho: f64::from(rho),
            delta: f64::from(delta.max(rho)),
        }
    }

    /// Requests served in the weight phase elsewhere, plus this one: δ − ρ + 1.
    fn weight_count(self) -> f64 {
        self.delta - self.rho + 1.0
    }
}

/// A tenant's R/W/L as inverses: how far one cost unit moves each clock, in seconds (virtual
/// seconds for the weight). Zero means "no such clock": no reservation, or no limit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Rates {
    reservation: f64,
    weight: f64,
    limit: f64,
}

impl Rates {
    pub(crate) fn of(qos: &TenantQos) -> Self {
        let inverse = |rate: f64| if rate > 0.0 { 1.0 / rate } else { 0.0 };
        Self {
            reservation: inverse(qos.reservation()),
            weight: 1.0 / qos.weight(),
            limit: qos.limit().map_or(0.0, inverse),
        }
    }

    pub(crate) fn has_reservation(&self) -> bool {
        self.reservation > 0.0
    }

    pub(crate) fn has_limit(&self) -> bool {
        self.limit > 0.0
    }
}

/// The tags of a tenant's head request — the only request whose tags exist (see
/// [`Chains::head`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Tags {
    /// Due time in the constraint phase; `+∞` without a reservation.
    pub(crate) reservation: f64,
    /// Order in the weight phase, in virtual time.
    pub(crate) proportion: f64,
    /// Earliest time the weight phase may serve it; `-∞` without a limit.
    pub(crate) limit: f64,
}

/// Where a tenant's three clocks stand after its last dispatched request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Chains {
    /// Reservation tag of the last request, less its increment if it was served by weight.
    reservation: f64,
    /// No reservation is owed for time before this (the last change of the reservation).
    reservation_since: f64,
    /// Proportional tag of the last request, less its increment if it was served by
    /// reservation.
    proportion: f64,
    /// Limit tag of the last request.
    limit: f64,
    /// When the last request was dispatched.
    last_dispatch: f64,
}

impl Default for Chains {
    fn default() -> Self {
        Self {
            reservation: f64::NEG_INFINITY,
            reservation_since: f64::NEG_INFINITY,
            proportion: f64::NEG_INFINITY,
            limit: f64::NEG_INFINITY,
            last_dispatch: f64::NEG_INFINITY,
        }
    }
}

impl Chains {
    /// Tags for the request now at the head of the tenant's queue, which arrived at `arrival`.
    ///
    /// Tags are computed only for the head (as ceph/dmclock's delayed tag calculation), so a
    /// refund touches one number, not the whole queue.
    ///
    /// - reservation: `max(R' + ρ·c/R, arrival)` — the paper's tag. The floor at the arrival
    ///   time stops an idle tenant banking reservation; chaining from `R'` (not from the
    ///   dispatch time) lets a request that waited behind a neighbour's be caught up.
    /// - proportion: `P' + (δ − ρ + 1)·c/W`, first raised to the virtual time `V` when
    ///   `resync` is set — on the tenant's return from idle and after each weight-phase
    ///   dispatch, so a tenant neither banks credit while away nor lags behind the weight phase
    ///   while held at its limit. After a reservation-phase dispatch it keeps its place in line.
    /// - limit: `max(L' + δ·c/L, max(arrival, last dispatch))` — the paper's tag, taken when
    ///   the request reaches the head rather than on arrival, so that a tenant held back (by
    ///   its neighbours, or with requests queued long ago) catches up by one request at most.
    pub(crate) fn head(
        &self,
        rates: &Rates,
        charge: Charge,
        arrival: f64,
        virtual_time: f64,
        resync: bool,
    ) -> Tags {
        let cost = charge.cost;
        let reservation = if rates.has_reservation() {
            let chained = self.reservation + charge.rho * cost * rates.reservation;
            chained.max(arrival.max(self.reservation_since))
        } else {
            f64::INFINITY
        };
        let start = if resync {
            self.proportion.max(virtual_time)
        } else {
            self.proportion
        };
        let proportion = start + charge.weight_count() * cost * rates.weight;
        let limit = if rates.has_limit() {
            let chained = self.limit + charge.delta * cost * rates.limit;
            chained.max(arrival.max(self.last_dispatch))
        } else {
            f64::NEG_INFINITY
        };
        Tags {
            reservation,
            proportion,
            limit,
        }
    }

    /// Moves the clocks past the head request, dispatched at `now` in `phase` with tags
    /// `head`.
    ///
    /// The head was charged to both the reservation and the proportional clock; the clock of
    /// the phase that did *not* serve it gets this request's own increment back (the paper's
    /// weight-phase adjustment of the reservation tag, and its mirror image for the
    /// proportional tag). Service elsewhere (ρ − 1, δ − ρ) stays charged. The limit clock is
    /// charged whatever the phase.
    pub(crate) fn dispatched(
        &mut self,
        rates: &Rates,
        head: Tags,
        charge: Charge,
        phase: Phase,
        now: f64,
    ) {
        match phase {
            Phase::Reservation => {
                self.reservation = head.reservation;
                self.proportion = head.proportion - charge.cost * rates.weight;
            }
            Phase::Weight => {
                self.proportion = head.proportion;
                if rates.has_reservation() {
                    self.reservation = head.reservation - charge.cost * rates.reservation;
                }
            }
        }
        if rates.has_limit() {
            self.limit = head.limit;
        }
        self.last_dispatch = now;
    }

    /// Carries the clocks over a change of R/W/L at `now`.
    ///
    /// Service taken ahead of schedule stays owed, converted at the new rate: a tenant whose
    /// reservation clock is 2 s ahead at 100/s is 200 cost units ahead, which is 1 s at 200/s.
    /// The same holds for the limit. A tenant behind on its reservation is forgiven the arrears
    /// when the reservation changes, so that a raise cannot be turned into a burst.
    /// Proportional tags need no conversion: they are within about one request of `V`.
    pub(crate) fn reconfigure(&mut self, old: &Rates, new: &Rates, now: f64) {
        if old.reservation.to_bits() != new.reservation.to_bits() {
            self.reservation = if old.has_reservation() && new.has_reservation() {
                rescale(self.reservation, now, new.reservation / old.reservation)
            } else {
                f64::NEG_INFINITY
            };
            self.reservation_since = now;
        }
        if old.limit.to_bits() != new.limit.to_bits() {
            self.limit = if old.has_limit() && new.has_limit() {
                rescale(self.limit, now, new.limit / old.limit)
            } else {
                f64::NEG_INFINITY
            };
        }
    }
}

/// A clock `tag` seconds ahead of `now` at the old rate is `factor` times as far ahead at the
/// new one; a clock at or behind `now` stays put.
fn rescale(tag: f64, now: f64, factor: f64) -> f64 {
    if tag > now {
        now + (tag - now) * factor
    } else {
        tag
    }
}

#[cfg(test)]
#[allow(clippy::float_cmp)] // the values in these tests are exact in binary floating point
mod tests {
    use super::*;

    fn rates(reservation: f64, weight: f64, limit: Option<f64>) -> Rates {
        Rates::of(&TenantQos::new(reservation, weight, limit).expect("valid qos"))
    }

    const ONE: Charge = Charge {
        cost: 10.0,
        rho: 1.0,
        delta: 1.0,
    };

    #[test]
    fn charge_is_normalised() {
        let charge = Charge::new(0, 0, 0);
        assert_eq!((charge.cost, charge.rho, charge.delta), (1.0, 1.0, 1.0));
        let charge = Charge::new(5, 3, 2);
        assert_eq!(
            (charge.rho, charge.delta),
            (3.0, 3.0),
            "δ counts what ρ counts"
        );
    }

    #[test]
    fn first_request_is_eligible_on_arrival() {
        let r = rates(5.0, 2.0, Some(20.0));
        let tags = Chains::default().head(&r, ONE, 7.0, 100.0, true);
        assert_eq!(tags.reservation, 7.0);
        assert_eq!(tags.proportion, 100.0 + 10.0 / 2.0);
        assert_eq!(tags.limit, 7.0);
    }

    #[test]
    fn reservation_chains_and_an_idle_tenant_banks_nothing() {
        let r = rates(5.0, 1.0, None);
        let mut chains = Chains::default();
        let first = chains.head(&r, ONE, 0.0, 0.0, true);
        chains.dispatched(&r, first, ONE, Phase::Reservation, 0.0);
        // Queued behind it: due one cost/R later, even if served late.
        assert_eq!(chains.head(&r, ONE, 0.0, 0.0, false).reservation, 2.0);
        // Arriving after a long idle time: due on arrival, not 58 s in the past.
        assert_eq!(chains.head(&r, ONE, 60.0, 0.0, true).reservation, 60.0);
    }

    #[test]
    fn weight_phase_service_is_refunded_to_the_reservation_and_the_reverse() {
        let r = rates(5.0, 2.0, None);
        let mut chains = Chains::default();
        let head = chains.head(&r, ONE, 0.0, 0.0, true);
        chains.dispatched(&r, head, ONE, Phase::Weight, 0.0);
        let next = chains.head(&r, ONE, 0.0, 5.0, true);
        assert_eq!(next.reservation, 0.0, "reservation still owed from time 0");
        assert_eq!(
            next.proportion, 10.0,
            "weight service moved the proportional clock"
        );

        let mut chains = Chains::default();
        let head = chains.head(&r, ONE, 0.0, 0.0, true);
        chains.dispatched(&r, head, ONE, Phase::Reservation, 0.0);
        // Even though the weight phase moved on to 3 meanwhile, it keeps its place.
        let next = chains.head(&r, ONE, 0.0, 3.0, false);
        assert_eq!(next.reservation, 2.0);
        assert_eq!(
            next.proportion, 5.0,
            "reservation service left the weight clock alone"
        );
    }

    #[test]
    fn proportional_tag_resyncs_to_virtual_time() {
        let r = rates(0.0, 1.0, None);
        let mut chains = Chains::default();
        let head = chains.head(&r, ONE, 0.0, 0.0, true);
        chains.dispatched(&r, head, ONE, Phase::Weight, 0.0);
        // Others moved the weight phase on to 1000 while this tenant was away.
        assert_eq!(chains.head(&r, ONE, 5.0, 1000.0, true).proportion, 1010.0);
        // A tenant ahead of the weight phase stays ahead.
        assert_eq!(chains.head(&r, ONE, 5.0, 0.0, true).proportion, 20.0);
    }

    #[test]
    fn limit_chains_and_catches_up_one_request_at_most() {
        let r = rates(0.0, 1.0, Some(5.0));
        let mut chains = Chains::default();
        let head = chains.head(&r, ONE, 0.0, 0.0, true);
        assert_eq!(head.limit, 0.0, "the first request may start at once");
        chains.dispatched(&r, head, ONE, Phase::Weight, 0.0);
        let next = chains.head(&r, ONE, 0.0, 0.0, false);
        assert_eq!(next.limit, 2.0, "10 units at 5/s");
        // Served 1 s late (at 3): the next is still due at 4, catching up.
        chains.dispatched(&r, next, ONE, Phase::Weight, 3.0);
        assert_eq!(chains.head(&r, ONE, 0.0, 0.0, false).limit, 4.0);
        // Served 8 s late (at 12): the next may go at once, but the one after waits.
        let next = chains.head(&r, ONE, 0.0, 0.0, false);
        chains.dispatched(&r, next, ONE, Phase::Weight, 12.0);
        let next = chains.head(&r, ONE, 0.0, 0.0, false);
        assert_eq!(next.limit, 12.0);
        chains.dispatched(&r, next, ONE, Phase::Weight, 12.0);
        assert_eq!(chains.head(&r, ONE, 0.0, 0.0, false).limit, 14.0);
    }

    #[test]
    fn distributed_counters_scale_the_increments() {
        let r = rates(5.0, 2.0, Some(10.0));
        // 3 requests served elsewhere since the last one here: 1 by reservation, 2 by weight.
        let charge = Charge::new(10, 2, 4);
        let mut chains = Chains::default();
        let first = chains.head(&r, ONE, 0.0, 0.0, true);
        chains.dispatched(&r, first, ONE, Phase::Weight, 0.0);
        let tags = chains.head(&r, charge, 0.0, 0.0, true);
        assert_eq!(tags.reservation, -2.0 + 2.0 * 2.0);
        assert_eq!(tags.proportion, 5.0 + 3.0 * 5.0);
        assert_eq!(tags.limit, 0.0 + 4.0 * 1.0);
    }

    #[test]
    fn reconfiguring_converts_what_is_owed_at_the_new_rate() {
        let old = rates(100.0, 1.0, Some(100.0));
        let new = rates(200.0, 1.0, Some(400.0));
        let mut chains = Chains {
            reservation: 12.0,
            limit: 11.0,
            ..Chains::default()
        };
        chains.reconfigure(&old, &new, 10.0);
        assert_eq!(
            chains.reservation, 11.0,
            "2 s ahead at 100/s is 1 s at 200/s"
        );
        assert_eq!(chains.limit, 10.25, "1 s ahead at 100/s is 0.25 s at 400/s");
        assert_eq!(chains.reservation_since, 10.0);

        let unlimited = rates(0.0, 1.0, None);
        chains.reconfigure(&new, &unlimited, 10.0);
        assert_eq!(chains.limit, f64::NEG_INFINITY);
        assert_eq!(chains.reservation, f64::NEG_INFINITY);
    }

    #[test]
    fn a_raised_reservation_forgives_arrears() {
        let old = rates(10.0, 1.0, None);
        let new = rates(20.0, 1.0, None);
        let mut chains = Chains {
            reservation: 1.0,
            ..Chains::default()
        };
        chains.reconfigure(&old, &new, 50.0);
        // The queued head arrived at 0, but no reservation is owed before the change at 50.
        assert_eq!(chains.head(&new, ONE, 0.0, 0.0, false).reservation, 50.0);
    }
}
