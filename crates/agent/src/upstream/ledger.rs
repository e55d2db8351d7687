//! [`Ledger`]: what each gateway of a [`Pool`](super::Pool) served each tenant, for
//! dmClock's δ (see `sluice_throttle::elsewhere`).
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
//! What is not counted: which phase served a request. The gateways' answers do not say (a
//! body's grains may be served partly by reservation, partly by weight), so the agent sends
//! δ alone and no ρ: service elsewhere moves the tenant's proportional and limit clocks, not
//! its reservation clock. Each gateway then still owes the tenant its reservation on its own;
//! weight and limit hold over the gateways together.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use sluice_throttle::elsewhere::Service;

#[derive(Debug, Default, Clone)]
struct Tenant {
    /// Per gateway: what it served.
    served: Vec<Service>,
    /// Per gateway: what the others had served when its last request was sent.
    reported: Vec<Service>,
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
            reported: vec![Service::default(); self.gateways],
        });
        f(t)
    }

    /// δ for a request of `key` about to go to `gateway`: what the other gateways served
    /// since the last request to it was sent, now counted as reported to it.
    pub fn take(&self, key: &str, gateway: usize) -> Service {
        if gateway >= self.gateways {
            return Service::default();
        }
        self.with(key, |t| {
            let others = t
                .served
                .iter()
                .enumerate()
                .filter(|&(i, _)| i != gateway)
                .fold(Service::default(), |sum, (_, s)| sum.saturating_add(*s));
            let delta = others.saturating_sub(t.reported[gateway]);
            t.reported[gateway] = others;
            delta
        })
    }

    /// The request that carried `delta` to `gateway` was not admitted: it is owed again.
    pub fn unreport(&self, key: &str, gateway: usize, delta: Service) {
        if gateway < self.gateways && !delta.is_zero() {
            self.with(key, |t| {
                t.reported[gateway] = t.reported[gateway].saturating_sub(delta);
            });
        }
    }

    /// `gateway` served `key` `service`.
    pub fn served(&self, key: &str, gateway: usize, service: Service) {
        if gateway < self.gateways {
            self.with(key, |t| {
                t.served[gateway] = t.served[gateway].saturating_add(service);
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(requests: u64, bytes: u64) -> Service {
        Service { requests, bytes }
    }

    #[test]
    fn each_gateway_hears_once_of_what_the_others_served() {
        let l = Ledger::new(3);
        assert_eq!(l.take("k", 0), s(0, 0));
        l.served("k", 0, s(1, 100));
        l.served("k", 0, s(1, 50));
        l.served("k", 2, s(1, 7));
        assert_eq!(l.take("k", 1), s(3, 157));
        assert_eq!(l.take("k", 1), s(0, 0), "reported once");
        assert_eq!(
            l.take("k", 0),
            s(1, 7),
            "its own service is not reported to it"
        );
        l.served("k", 1, s(1, 1));
        assert_eq!(l.take("k", 2), s(3, 151));
        assert_eq!(l.take("other", 1), s(0, 0), "per tenant key");
    }

    #[test]
    fn what_a_refused_request_carried_is_owed_again() {
        let l = Ledger::new(2);
        l.served("k", 0, s(2, 20));
        let d = l.take("k", 1);
        assert_eq!(d, s(2, 20));
        l.unreport("k", 1, d);
        l.served("k", 0, s(1, 5));
        assert_eq!(l.take("k", 1), s(3, 25));
    }
}
