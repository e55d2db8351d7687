//! [`Ledger`]: what each gateway of a [`Pool`](super::Pool) served each tenant, in any phase
//! and in the reservation phase, for dmClock's δ and ρ (see `sluice_throttle::elsewhere`).
//!
//! The agent is its own client of the gateways: its drain spreads a tenant's transfers over
//! them. Without help each gateway would charge the tenant only for what it served itself, so
//! with the gateways uncoordinated a tenant limited to L would drain at up to N·L. dmClock's
//! remedy is on the client: each request carries what the *other* gateways served the tenant
//! since its previous request to this one, and the gateway advances the tenant's clocks by it.
//!
//! The ledger keeps, per tenant (by the access key its requests are signed with) and per
//! gateway, the requests and bytes that gateway served, and what the others had served when
//! the last request to it was sent. A request to gateway g carries the difference: every unit
//! one gateway serves is reported exactly once to each other gateway. A request that was not
//! admitted (no answer, `SlowDown`, a 5xx) serves nothing, and what it carried is owed to its
//! gateway again (its next request carries it).
//!
//! ρ is counted the same way, from what each answer says the gateway served in its
//! reservation phase (`x-sluice-dmclock-reserved`: the request's operation and the grains
//! admitted before the answer's head; a GET's body, streamed after it, counts as δ only).
//! What a gateway served by reservation is at most what it served ([`Ledger::served`] cuts
//! it to that), and the two are reported together, so every request's ρ is at most its δ.
//! With it, service elsewhere by reservation moves the tenant's reservation clock too, and
//! the gateways together owe the tenant its reservation once, not each on its own.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use sluice_throttle::elsewhere::{Elsewhere, Service};

#[derive(Debug, Default, Clone)]
struct Tenant {
    /// Per gateway: what it served, in any phase and by reservation.
    served: Vec<Service>,
    reserved: Vec<Service>,
    /// Per gateway: what the others had served (in any phase, by reservation) when its last
    /// request was sent.
    reported: Vec<(Service, Service)>,
}

/// See the module doc. Shared by the clients of one pool's gateways.
#[derive(Debug)]
pub struct Ledger {
    gateways: usize,
    tenants: Mutex<HashMap<String, Tenant>>,
}

impl Ledger {
    pub fn new(gateways: usize) -> Self {
        Self {
            gateways,
            tenants: Mutex::default(),
        }
    }

    fn with<T>(&self, key: &str, f: impl FnOnce(&mut Tenant) -> T) -> T {
        let mut tenants = self.tenants.lock().unwrap_or_else(PoisonError::into_inner);
        let t = tenants.entry(key.to_owned()).or_insert_with(|| Tenant {
            served: vec![Service::default(); self.gateways],
            reserved: vec![Service::default(); self.gateways],
            reported: vec![(Service::default(), Service::default()); self.gateways],
        });
        f(t)
    }

    /// δ and ρ for a request of `key` about to go to `gateway`: what the other gateways
    /// served (in any phase, by reservation) since the last request to it was sent, now
    /// counted as reported to it. ρ ≤ δ.
    pub fn take(&self, key: &str, gateway: usize) -> Elsewhere {
        if gateway >= self.gateways {
            return Elsewhere::default();
        }
        let others = |of: &[Service]| {
            of.iter()
                .enumerate()
                .filter(|&(i, _)| i != gateway)
                .fold(Service::default(), |sum, (_, s)| sum.saturating_add(*s))
        };
        self.with(key, |t| {
            let now = (others(&t.served), others(&t.reserved));
            let (delta, rho) = t.reported[gateway];
            t.reported[gateway] = now;
            let delta = now.0.saturating_sub(delta);
            Elsewhere {
                delta,
                rho: at_most(now.1.saturating_sub(rho), delta),
            }
        })
    }

    /// The request that carried `told` to `gateway` was not admitted: it is owed again.
    pub fn unreport(&self, key: &str, gateway: usize, told: Elsewhere) {
        if gateway < self.gateways && !(told.delta.is_zero() && told.rho.is_zero()) {
            self.with(key, |t| {
                let (delta, rho) = t.reported[gateway];
                t.reported[gateway] = (
                    delta.saturating_sub(told.delta),
                    rho.saturating_sub(told.rho),
                );
            });
        }
    }

    /// `gateway` served `key` `service`, of which `reserved` in its reservation phase (cut
    /// to `service`).
    pub fn served(&self, key: &str, gateway: usize, service: Service, reserved: Service) {
        if gateway < self.gateways {
            self.with(key, |t| {
                t.served[gateway] = t.served[gateway].saturating_add(service);
                t.reserved[gateway] =
                    t.reserved[gateway].saturating_add(at_most(reserved, service));
            });
        }
    }
}

/// `s`, each of its numbers at most `cap`'s.
fn at_most(s: Service, cap: Service) -> Service {
    Service {
        requests: s.requests.min(cap.requests),
        bytes: s.bytes.min(cap.bytes),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(requests: u64, bytes: u64) -> Service {
        Service { requests, bytes }
    }

    fn none() -> Service {
        s(0, 0)
    }

    /// δ alone.
    fn d(requests: u64, bytes: u64) -> Elsewhere {
        Elsewhere {
            delta: s(requests, bytes),
            rho: none(),
        }
    }

    #[test]
    fn each_gateway_hears_once_of_what_the_others_served() {
        let l = Ledger::new(3);
        assert_eq!(l.take("k", 0), d(0, 0));
        l.served("k", 0, s(1, 100), none());
        l.served("k", 0, s(1, 50), none());
        l.served("k", 2, s(1, 7), none());
        assert_eq!(l.take("k", 1), d(3, 157));
        assert_eq!(l.take("k", 1), d(0, 0), "reported once");
        assert_eq!(
            l.take("k", 0),
            d(1, 7),
            "its own service is not reported to it"
        );
        l.served("k", 1, s(1, 1), none());
        assert_eq!(l.take("k", 2), d(3, 151));
        assert_eq!(l.take("other", 1), d(0, 0), "per tenant key");
    }

    #[test]
    fn what_a_refused_request_carried_is_owed_again() {
        let l = Ledger::new(2);
        l.served("k", 0, s(2, 20), s(1, 8));
        let told = l.take("k", 1);
        assert_eq!(told.delta, s(2, 20));
        assert_eq!(told.rho, s(1, 8));
        l.unreport("k", 1, told);
        l.served("k", 0, s(1, 5), s(1, 5));
        let again = l.take("k", 1);
        assert_eq!((again.delta, again.rho), (s(3, 25), s(2, 13)));
    }

    #[test]
    fn rho_is_what_the_others_served_by_reservation_and_never_above_delta() {
        let l = Ledger::new(3);
        l.served("k", 0, s(1, 100), s(1, 40));
        // An answer that claims more by reservation than the request was served is cut.
        l.served("k", 2, s(1, 10), s(5, 1000));
        let told = l.take("k", 1);
        assert_eq!((told.delta, told.rho), (s(2, 110), s(2, 50)));
        assert_eq!(
            l.take("k", 0).rho,
            s(1, 10),
            "its own reservation service is not reported to it"
        );
        l.served("k", 1, s(1, 7), none());
        let told = l.take("k", 2);
        assert_eq!((told.delta, told.rho), (s(2, 107), s(1, 40)));
        assert_eq!(l.take("k", 2), Elsewhere::default(), "reported once");
    }
}
