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

/// What one request is charged, after normalisation (cost ≥ 1, what was served elsewhere
/// by reservation ≤ what was served elsewhere at all), in cost units.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Charge {
    pub(crate) cost: f64,
    /// dmClock's ρ less this request: what other gateways served this tenant in their
    /// reservation phase since its previous request here.
    pub(crate) reserved_elsewhere: f64,
    /// dmClock's δ less this request: what other gateways served this tenant in any phase
    /// since its previous request here.
    pub(crate) served_elsewhere: f64,
}

impl Charge {
    /// A request of `cost` with dmClock's counters as request counts (ρ, δ, this one
    /// included), each counted request taken to cost as much as this one.
    pub(crate) fn new(cost: u64, rho: u32, delta: u32) -> Self {
        let rho = rho.max(1);
        let cost = cost.max(1) as f64;
        Self {
            cost,
            reserved_elsewhere: f64::from(rho - 1) * cost,
            served_elsewhere: f64::from(delta.max(rho) - 1) * cost,
        }
    }

    /// Adds service elsewhere given in cost units: `reserved` in the reservation phase,
    /// `served` in any (raised to at least `reserved`).
    pub(crate) fn elsewhere(mut self, reserved: u64, served: u64) -> Self {
        self.reserved_elsewhere += reserved as f64;
        self.served_elsewhere += served.max(reserved) as f64;
        self
    }

    /// What moves the reservation clock: this request and reservation service elsewhere
    /// (ρ·c with counts).
    fn reservation_units(self) -> f64 {
        self.cost + self.reserved_elsewhere
    }

    /// What moves the proportional clock: this request and weight-phase service elsewhere
    /// ((δ − ρ + 1)·c with counts).
    fn weight_units(self) -> f64 {
        self.cost + self.served_elsewhere - self.reserved_elsewhere
    }

    /// What moves the limit clock: this request and all service elsewhere (δ·c with counts).
    fn limit_units(self) -> f64 {
        self.cost + self.served_elsewhere
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

/// How a tenant's head request joins the weight phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rejoin {
    /// It kept competing: it keeps its place in line.
    Stay,
    /// It was idle: it starts where the weight phase stands, with no credit.
    FromIdle,
    /// It was held at its limit: it keeps at most one request's worth of the place it had.
    FromLimit,
}

/// What a tenant's tags depend on beyond its own clocks: the scheduler-wide state.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Shared {
    /// Where the weight phase stands (start-time fair queueing's virtual time).
    pub(crate) virtual_time: f64,
    /// The limit's tolerance in cost units: the largest request seen.
    pub(crate) limit_slack: f64,
}

/// The tags of a tenant's head request — the only request whose tags exist (see
/// [`Chains::head`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Tags {
    /// Due time in the constraint phase; `+∞` without a reservation.
    pub(crate) reservation: f64,
    /// Where the request starts in the weight phase, in virtual time: the proportional tag
    /// less this request's increment.
    pub(crate) proportion_start: f64,
    /// Order in the weight phase, in virtual time: the smallest goes first.
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
    /// reservation: where the next request starts in the weight phase.
    proportion: f64,
    /// When the next request would start if the tenant were served at exactly its limit (a
    /// GCRA "theoretical arrival time"): each dispatch moves it `δ·c/L` past `max(itself, now)`.
    limit: f64,
}

impl Default for Chains {
    fn default() -> Self {
        Self {
            reservation: f64::NEG_INFINITY,
            reservation_since: f64::NEG_INFINITY,
            proportion: f64::NEG_INFINITY,
            limit: f64::NEG_INFINITY,
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
    /// - proportion: `P' + (δ − ρ + 1)·c/W`, where `P'` (the request's start) is first raised
    ///   to the virtual time `V` when the tenant returns from idle, so that time away is
    ///   neither credit nor debt, and to `V` less one largest request when it comes out from
    ///   behind its limit. That much lag is what a tenant under its limit on average builds
    ///   up while briefly held (its requests bunch up behind a reservation-phase dispatch, say)
    ///   and must keep to get its share; a tenant truly capped by its limit would otherwise
    ///   build up lag without end, and spend it as a burst once no longer capped. A tenant
    ///   that keeps competing keeps its exact place in line.
    /// - limit: the limit clock less a tolerance of `limit_slack` cost units at rate L — a
    ///   leaky bucket one request deep. The scheduler passes the largest request it has seen,
    ///   so a tenant served late because a neighbour's request was in service catches up
    ///   instead of losing that time, and no more.
    pub(crate) fn head(
        &self,
        rates: &Rates,
        charge: Charge,
        arrival: f64,
        shared: Shared,
        rejoin: Rejoin,
    ) -> Tags {
        let reservation = if rates.has_reservation() {
            let chained = self.reservation + charge.reservation_units() * rates.reservation;
            chained.max(arrival.max(self.reservation_since))
        } else {
            f64::INFINITY
        };
        let proportion_start = match rejoin {
            Rejoin::Stay => self.proportion,
            Rejoin::FromIdle => self.proportion.max(shared.virtual_time),
            Rejoin::FromLimit => self
                .proportion
                .max(shared.virtual_time - shared.limit_slack * rates.weight),
        };
        let proportion = proportion_start + charge.weight_units() * rates.weight;
        let limit = if rates.has_limit() {
            self.limit - shared.limit_slack * rates.limit
        } else {
            f64::NEG_INFINITY
        };
        Tags {
            reservation,
            proportion_start,
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
    /// charged whatever the phase, from `now` if it had fallen behind: unused limit is not
    /// saved up.
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
            self.limit = self.limit.max(now) + charge.limit_units() * rates.limit;
        }
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

    fn at(virtual_time: f64, limit_slack: f64) -> Shared {
        Shared {
            virtual_time,
            limit_slack,
        }
    }

    fn rates(reservation: f64, weight: f64, limit: Option<f64>) -> Rates {
        Rates::of(&TenantQos::new(reservation, weight, limit).expect("valid qos"))
    }

    const ONE: Charge = Charge {
        cost: 10.0,
        reserved_elsewhere: 0.0,
        served_elsewhere: 0.0,
    };

    #[test]
    fn charge_is_normalised() {
        let charge = Charge::new(0, 0, 0);
        assert_eq!(
            (
                charge.cost,
                charge.reserved_elsewhere,
                charge.served_elsewhere
            ),
            (1.0, 0.0, 0.0)
        );
        let charge = Charge::new(5, 3, 2);
        assert_eq!(
            (charge.reserved_elsewhere, charge.served_elsewhere),
            (10.0, 10.0),
            "δ counts what ρ counts"
        );
        let charge = Charge::new(5, 1, 1).elsewhere(7, 3);
        assert_eq!(
            (charge.reserved_elsewhere, charge.served_elsewhere),
            (7.0, 7.0),
            "served elsewhere counts what was reserved elsewhere"
        );
    }

    #[test]
    fn first_request_is_eligible_on_arrival() {
        let r = rates(5.0, 2.0, Some(20.0));
        let tags = Chains::default().head(&r, ONE, 7.0, at(100.0, 0.0), Rejoin::FromIdle);
        assert_eq!(tags.reservation, 7.0);
        assert_eq!(
            tags.proportion_start, 100.0,
            "starts where the weight phase stands"
        );
        assert_eq!(tags.proportion, 100.0 + 10.0 / 2.0);
        assert_eq!(tags.limit, f64::NEG_INFINITY);
    }

    #[test]
    fn reservation_chains_and_an_idle_tenant_banks_nothing() {
        let r = rates(5.0, 1.0, None);
        let mut chains = Chains::default();
        let first = chains.head(&r, ONE, 0.0, at(0.0, 0.0), Rejoin::FromIdle);
        chains.dispatched(&r, first, ONE, Phase::Reservation, 0.0);
        // Queued behind it: due one cost/R later, even if served late.
        assert_eq!(
            chains
                .head(&r, ONE, 0.0, at(0.0, 0.0), Rejoin::Stay)
                .reservation,
            2.0
        );
        // Arriving after a long idle time: due on arrival, not 58 s in the past.
        assert_eq!(
            chains
                .head(&r, ONE, 60.0, at(0.0, 0.0), Rejoin::FromIdle)
                .reservation,
            60.0
        );
    }

    #[test]
    fn weight_phase_service_is_refunded_to_the_reservation_and_the_reverse() {
        let r = rates(5.0, 2.0, None);
        let mut chains = Chains::default();
        let head = chains.head(&r, ONE, 0.0, at(0.0, 0.0), Rejoin::FromIdle);
        assert_eq!((head.reservation, head.proportion), (0.0, 5.0));
        chains.dispatched(&r, head, ONE, Phase::Weight, 0.0);
        let next = chains.head(&r, ONE, 0.0, at(0.0, 0.0), Rejoin::Stay);
        assert_eq!(next.reservation, 0.0, "reservation still owed from time 0");
        assert_eq!(
            next.proportion, 10.0,
            "weight service moved the proportional clock"
        );

        let mut chains = Chains::default();
        let head = chains.head(&r, ONE, 0.0, at(0.0, 0.0), Rejoin::FromIdle);
        chains.dispatched(&r, head, ONE, Phase::Reservation, 0.0);
        let next = chains.head(&r, ONE, 0.0, at(3.0, 0.0), Rejoin::Stay);
        assert_eq!(
            next.reservation, 2.0,
            "reservation service moved the reservation clock"
        );
        assert_eq!(
            next.proportion, 5.0,
            "and left its place in the weight phase alone"
        );
    }

    #[test]
    fn proportional_tag_resyncs_to_virtual_time() {
        let r = rates(0.0, 1.0, None);
        let mut chains = Chains::default();
        let head = chains.head(&r, ONE, 0.0, at(0.0, 0.0), Rejoin::FromIdle);
        chains.dispatched(&r, head, ONE, Phase::Weight, 0.0);
        // Others moved the weight phase on to 1000 while this tenant was away.
        assert_eq!(
            chains
                .head(&r, ONE, 5.0, at(1000.0, 0.0), Rejoin::FromIdle)
                .proportion,
            1010.0
        );
        // Without a re-sync (it kept competing), it keeps its place.
        assert_eq!(
            chains
                .head(&r, ONE, 5.0, at(1000.0, 0.0), Rejoin::Stay)
                .proportion,
            20.0
        );
        // A tenant ahead of the weight phase stays ahead.
        assert_eq!(
            chains
                .head(&r, ONE, 5.0, at(0.0, 0.0), Rejoin::FromIdle)
                .proportion,
            20.0
        );
    }

    #[test]
    fn limit_is_a_leaky_bucket_with_one_request_of_slack() {
        let r = rates(0.0, 1.0, Some(5.0));
        let mut chains = Chains::default();
        let head = chains.head(&r, ONE, 0.0, at(0.0, 10.0), Rejoin::FromIdle);
        assert_eq!(
            head.limit,
            f64::NEG_INFINITY,
            "the first request may start at once"
        );
        chains.dispatched(&r, head, ONE, Phase::Weight, 0.0);
        // 10 units at 5/s: at exactly the limit the next starts at 2; with 10 units of slack
        // it may start at once.
        assert_eq!(
            chains.head(&r, ONE, 0.0, at(0.0, 0.0), Rejoin::Stay).limit,
            2.0
        );
        assert_eq!(
            chains.head(&r, ONE, 0.0, at(0.0, 10.0), Rejoin::Stay).limit,
            0.0
        );
        // Served late, at 2.5 (a neighbour's request was in service): with the slack the next
        // may go at 2.5, so the half second is caught up; without it, not before 4.5.
        chains.dispatched(&r, head, ONE, Phase::Weight, 2.5);
        assert_eq!(
            chains.head(&r, ONE, 0.0, at(0.0, 10.0), Rejoin::Stay).limit,
            2.5
        );
        assert_eq!(
            chains.head(&r, ONE, 0.0, at(0.0, 0.0), Rejoin::Stay).limit,
            4.5
        );
        // Served 8 s late, at 12: unused limit is not saved up beyond the slack.
        chains.dispatched(&r, head, ONE, Phase::Weight, 12.0);
        assert_eq!(
            chains.head(&r, ONE, 0.0, at(0.0, 10.0), Rejoin::Stay).limit,
            12.0
        );
    }

    #[test]
    fn distributed_counters_scale_the_increments() {
        let r = rates(5.0, 2.0, Some(10.0));
        // 3 requests served elsewhere since the last one here: 1 by reservation, 2 by weight.
        let charge = Charge::new(10, 2, 4);
        let mut chains = Chains::default();
        let first = chains.head(&r, ONE, 0.0, at(0.0, 0.0), Rejoin::FromIdle);
        chains.dispatched(&r, first, ONE, Phase::Weight, 0.0);
        let tags = chains.head(&r, charge, 0.0, at(0.0, 0.0), Rejoin::FromIdle);
        assert_eq!(tags.reservation, -2.0 + 2.0 * 2.0);
        assert_eq!(tags.proportion, 5.0 + 3.0 * 5.0);
        chains.dispatched(&r, tags, charge, Phase::Weight, 0.0);
        assert_eq!(chains.limit, 1.0 + 4.0 * 1.0);
    }

    #[test]
    fn service_elsewhere_in_cost_units_advances_each_clock_by_its_part() {
        let r = rates(5.0, 2.0, Some(10.0));
        let mut chains = Chains::default();
        let first = chains.head(&r, ONE, 0.0, at(0.0, 0.0), Rejoin::FromIdle);
        chains.dispatched(&r, first, ONE, Phase::Weight, 0.0);
        // Since its last request here, 30 units served elsewhere, 20 of them by reservation.
        let charge = ONE.elsewhere(20, 30);
        let plain = chains.head(&r, ONE, 0.0, at(0.0, 0.0), Rejoin::Stay);
        let tags = chains.head(&r, charge, 0.0, at(0.0, 0.0), Rejoin::Stay);
        assert_eq!(tags.reservation, plain.reservation + 20.0 / 5.0);
        assert_eq!(tags.proportion, plain.proportion + 10.0 / 2.0);
        let mut alone = chains;
        alone.dispatched(&r, plain, ONE, Phase::Weight, 0.0);
        chains.dispatched(&r, tags, charge, Phase::Weight, 0.0);
        assert_eq!(chains.limit, alone.limit + 30.0 / 10.0);
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
        assert_eq!(
            chains
                .head(&new, ONE, 0.0, at(0.0, 0.0), Rejoin::Stay)
                .reservation,
            50.0
        );
    }
}
