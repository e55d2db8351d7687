//! Splitting one tier's capacity, and each tenant's reservation, weight and limit, among the
//! gateways in front of it. Pure arithmetic: the caller (the gateway's cluster coordinator)
//! gathers every live gateway's per-tenant demand, calls [`split`] every round, and hands each
//! gateway its [`GatewayShare`] to run dmClock on locally.
//!
//! # The split
//!
//! 1. **Global allocation.** Each tenant's cluster-wide demand `D` (the sum over gateways) is
//!    water-filled against the capacity `C` as the scheduler itself would serve it:
//!    `a = min(D, L, R + λ·W)` with `λ ≥ 0` the largest for which `Σ a ≤ C` (reservations
//!    first: at `λ = 0` every tenant gets `min(D, R)`, which fits since `Σ R ≤ C`; limits
//!    cap; what is left goes by weight). When demand exceeds the capacity `Σ a = C`.
//! 2. **Per gateway.** A tenant's allocation, reservation and limit are split among the
//!    gateways in proportion to its demand there, except for a floor: a fraction
//!    [`FLOOR`] of each is split evenly over all gateways, so an idle tenant (or gateway) that
//!    starts a burst is not starved until the next round. A gateway's capacity is the sum of
//!    its tenants' allocations there plus an even part of what no tenant demands, with the
//!    same floor.
//! 3. **Local weights.** A gateway's dmClock weight for a tenant is the allocation it should
//!    serve the tenant beyond its reservation share, plus a small floor in proportion to the
//!    tenant's configured weight: the local scheduler then reproduces the global split.
//!
//! # Invariants (tested below)
//!
//! - The gateways' capacities sum to `C` (work-conserving: nothing is held back).
//! - A tenant's reservation shares sum to its reservation, its limit shares to its limit.
//! - A tenant's allocation never exceeds its limit, and meets `min(D, R)`.

use std::collections::BTreeMap;

use crate::TenantQos;

/// The fraction of capacity, reservation and limit split evenly over the gateways regardless
/// of demand, so that a new burst is served at once, if slowly, until the next round.
pub const FLOOR: f64 = 0.05;

/// One gateway's report: per tenant, the cost units per second it asks for there.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GatewayDemand {
    pub tenants: BTreeMap<String, f64>,
}

/// What one gateway runs dmClock on until the next round.
#[derive(Debug, Clone, PartialEq)]
pub struct GatewayShare {
    /// Cost units per second this gateway may send to the tier.
    pub capacity: f64,
    /// Every configured tenant's local reservation, weight and limit.
    pub tenants: BTreeMap<String, TenantQos>,
}

/// The result of one round: the global allocation and every gateway's share (in the order of
/// the demands given).
#[derive(Debug, Clone, PartialEq)]
pub struct Split {
    /// Per tenant, what the cluster should serve it (cost units per second).
    pub allocation: BTreeMap<String, f64>,
    pub gateways: Vec<GatewayShare>,
}

/// Splits `capacity` among `gateways` for the configured `tenants` (see the module doc).
/// Tenants a gateway reports that are not in `tenants` are ignored. With no gateway the result
/// has none.
pub fn split(
    capacity: f64,
    tenants: &BTreeMap<String, TenantQos>,
    gateways: &[GatewayDemand],
) -> Split {
    let n = gateways.len();
    let demand: BTreeMap<&str, f64> = tenants
        .keys()
        .map(|t| {
            let d = gateways
                .iter()
                .map(|g| clean(g.tenants.get(t).copied().unwrap_or(0.0)))
                .sum::<f64>();
            (t.as_str(), d)
        })
        .collect();
    let allocation = water_fill(capacity, tenants, &demand);
    if n == 0 {
        return Split {
            allocation,
            gateways: Vec::new(),
        };
    }
    let nf = n as f64;
    let even = FLOOR / nf;
    // The fraction of tenant t's demand at gateway g.
    let frac = |t: &str, g: &GatewayDemand| -> f64 {
        let total = demand.get(t).copied().unwrap_or(0.0);
        if total > 0.0 {
            clean(g.tenants.get(t).copied().unwrap_or(0.0)) / total
        } else {
            1.0 / nf
        }
    };
    let allocated: f64 = allocation.values().sum();
    let surplus = (capacity - allocated).max(0.0);
    let total_weight: f64 = tenants.values().map(TenantQos::weight).sum();
    let shares = gateways
        .iter()
        .map(|g| {
            let base = allocation.iter().map(|(t, a)| a * frac(t, g)).sum::<f64>() + surplus / nf;
            let capacity_g = capacity * even + (1.0 - FLOOR) * base;
            let local = tenants
                .iter()
                .map(|(t, q)| {
                    let part = even + (1.0 - FLOOR) * frac(t, g);
                    let reservation = q.reservation() * part;
                    let limit = q.limit().map(|l| l * part);
                    let served = allocation.get(t.as_str()).copied().unwrap_or(0.0) * frac(t, g);
                    let floor = FLOOR * capacity * q.weight() / (total_weight * nf);
                    let weight = (served - reservation).max(0.0) + floor;
                    let qos = TenantQos::new(reservation, weight.max(f64::MIN_POSITIVE), limit)
                        .unwrap_or(*q);
                    (t.clone(), qos)
                })
                .collect();
            GatewayShare {
                capacity: capacity_g,
                tenants: local,
            }
        })
        .collect();
    Split {
        allocation,
        gateways: shares,
    }
}

/// Negative, NaN and infinite demands count as none (a report is input, not trusted arithmetic).
fn clean(x: f64) -> f64 {
    if x.is_finite() && x > 0.0 { x } else { 0.0 }
}

/// `a = min(D, L, R + λW)` with the largest `λ` for which `Σ a ≤ capacity`.
fn water_fill(
    capacity: f64,
    tenants: &BTreeMap<String, TenantQos>,
    demand: &BTreeMap<&str, f64>,
) -> BTreeMap<String, f64> {
    let cap = |t: &str, q: &TenantQos| {
        let d = demand.get(t).copied().unwrap_or(0.0);
        q.limit().map_or(d, |l| d.min(l))
    };
    let at = |lambda: f64| -> f64 {
        tenants
            .iter()
            .map(|(t, q)| cap(t, q).min(q.reservation() + lambda * q.weight()))
            .sum()
    };
    let alloc = |lambda: f64| -> BTreeMap<String, f64> {
        tenants
            .iter()
            .map(|(t, q)| {
                (
                    t.clone(),
                    cap(t, q).min(q.reservation() + lambda * q.weight()),
                )
            })
            .collect()
    };
    let full: f64 = tenants.iter().map(|(t, q)| cap(t, q)).sum();
    if full <= capacity {
        return alloc(f64::INFINITY);
    }
    // Σ a(λ) is continuous and non-decreasing; bisect for Σ a = capacity.
    let (mut lo, mut hi) = (0.0_f64, 1.0_f64);
    while at(hi) < capacity && hi < 1e300 {
        hi *= 2.0;
    }
    for _ in 0..100 {
        let mid = 0.5 * (lo + hi);
        if at(mid) <= capacity {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    // `lo` keeps Σ ≤ capacity; hand the rounding remainder to nobody (it is below 1e-9·C).
    alloc(lo)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: f64 = 1024.0 * 1024.0;

    fn qos(r: f64, w: f64, l: Option<f64>) -> TenantQos {
        TenantQos::new(r, w, l).expect("valid")
    }

    fn gw(pairs: &[(&str, f64)]) -> GatewayDemand {
        GatewayDemand {
            tenants: pairs.iter().map(|(t, d)| ((*t).to_owned(), *d)).collect(),
        }
    }

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol * b.abs().max(1.0)
    }

    #[test]
    fn weights_hold_across_gateways_when_tenants_use_different_ones() {
        // A (weight 1) only on gateway 1, B (weight 3) on gateways 2 and 3, both saturating.
        let c = 48.0 * MIB;
        let tenants = BTreeMap::from([
            ("a".to_owned(), qos(0.0, 1.0, None)),
            ("b".to_owned(), qos(0.0, 3.0, None)),
        ]);
        let gws = [
            gw(&[("a", 100.0 * MIB)]),
            gw(&[("b", 100.0 * MIB)]),
            gw(&[("b", 100.0 * MIB)]),
        ];
        let s = split(c, &tenants, &gws);
        assert!(close(s.allocation["a"], 12.0 * MIB, 1e-6));
        assert!(close(s.allocation["b"], 36.0 * MIB, 1e-6));
        let caps: Vec<f64> = s.gateways.iter().map(|g| g.capacity).collect();
        assert!(close(caps.iter().sum(), c, 1e-9));
        // Gateway 1 serves A's 12 MiB/s, less the floor it gives up to the others.
        let expect1 = c * FLOOR / 3.0 + (1.0 - FLOOR) * 12.0 * MIB;
        assert!(close(caps[0], expect1, 1e-6), "{caps:?}");
        assert!(close(caps[1], caps[2], 1e-9));
    }

    #[test]
    fn a_limit_spread_over_gateways_sums_to_the_limit_by_demand() {
        let c = 48.0 * MIB;
        let tenants = BTreeMap::from([("l".to_owned(), qos(0.0, 1.0, Some(6.0 * MIB)))]);
        let gws = [
            gw(&[("l", 30.0 * MIB)]),
            gw(&[("l", 10.0 * MIB)]),
            gw(&[("l", 0.0)]),
        ];
        let s = split(c, &tenants, &gws);
        let limits: Vec<f64> = s
            .gateways
            .iter()
            .map(|g| g.tenants["l"].limit().expect("limited"))
            .collect();
        assert!(close(limits.iter().sum(), 6.0 * MIB, 1e-9));
        assert!(limits[0] > 2.5 * limits[1], "{limits:?}");
        assert!(limits[2] > 0.0, "an idle gateway keeps a floor");
        assert!(close(s.allocation["l"], 6.0 * MIB, 1e-9));
    }

    #[test]
    fn a_reservation_is_met_while_a_heavier_neighbour_floods() {
        let c = 48.0 * MIB;
        let tenants = BTreeMap::from([
            ("r".to_owned(), qos(16.0 * MIB, 1.0, None)),
            ("heavy".to_owned(), qos(0.0, 10.0, None)),
        ]);
        let gws = [
            gw(&[("r", 40.0 * MIB)]),
            gw(&[("heavy", 100.0 * MIB)]),
            gw(&[("heavy", 100.0 * MIB)]),
        ];
        let s = split(c, &tenants, &gws);
        // R first, then the remaining 32 by weight 1:10.
        assert!(close(
            s.allocation["r"],
            16.0 * MIB + 32.0 * MIB / 11.0,
            1e-6
        ));
        let r1 = s.gateways[0].tenants["r"].reservation();
        assert!(r1 <= s.gateways[0].capacity);
        assert!(s.gateways[0].capacity >= 0.95 * 16.0 * MIB);
    }

    #[test]
    fn idle_capacity_is_spread_so_nothing_is_held_back() {
        let c = 48.0 * MIB;
        let tenants = BTreeMap::from([("a".to_owned(), qos(0.0, 1.0, None))]);
        let gws = [gw(&[("a", 4.0 * MIB)]), gw(&[])];
        let s = split(c, &tenants, &gws);
        let total: f64 = s.gateways.iter().map(|g| g.capacity).sum();
        assert!(close(total, c, 1e-9));
        assert!(s.gateways[0].capacity > s.gateways[1].capacity);
    }

    #[test]
    fn garbage_demands_count_as_none_and_no_gateway_gives_no_share() {
        let tenants = BTreeMap::from([("a".to_owned(), qos(0.0, 1.0, None))]);
        let gws = [gw(&[("a", f64::NAN), ("ghost", 1e9)]), gw(&[("a", -5.0)])];
        let s = split(10.0, &tenants, &gws);
        assert!(s.allocation["a"].abs() < 1e-9, "{}", s.allocation["a"]);
        assert!(close(
            s.gateways.iter().map(|g| g.capacity).sum(),
            10.0,
            1e-9
        ));
        assert!(split(10.0, &tenants, &[]).gateways.is_empty());
    }

    /// A small deterministic generator: the seed is printed on failure.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn unit(&mut self) -> f64 {
            (self.next() >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    #[test]
    fn randomized_splits_keep_their_sums_limits_and_reservations() {
        for seed in 1..=400u64 {
            let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
            let c = 1.0e6 + rng.unit() * 1.0e9;
            let nt = 1 + (rng.next() % 12) as usize;
            let ng = 1 + (rng.next() % 6) as usize;
            let mut budget = c;
            let tenants: BTreeMap<String, TenantQos> = (0..nt)
                .map(|i| {
                    let r = if rng.unit() < 0.5 {
                        let r = rng.unit() * budget / 2.0;
                        budget -= r;
                        r
                    } else {
                        0.0
                    };
                    let w = 0.1 + rng.unit() * 10.0;
                    let l = (rng.unit() < 0.4).then(|| r + 1.0 + rng.unit() * c);
                    (format!("t{i}"), qos(r, w, l))
                })
                .collect();
            let mut gws = Vec::new();
            for _ in 0..ng {
                let mut g = GatewayDemand::default();
                for t in tenants.keys() {
                    if rng.unit() < 0.6 {
                        g.tenants.insert(t.clone(), rng.unit() * c);
                    }
                }
                gws.push(g);
            }
            let s = split(c, &tenants, &gws);
            let ctx = format!("seed {seed}");
            let caps: f64 = s.gateways.iter().map(|g| g.capacity).sum();
            assert!(close(caps, c, 1e-9), "{ctx}: capacities {caps} vs {c}");
            let allocated: f64 = s.allocation.values().sum();
            assert!(allocated <= c * (1.0 + 1e-9), "{ctx}: over-allocated");
            for (t, q) in &tenants {
                let d: f64 = gws.iter().filter_map(|g| g.tenants.get(t)).sum();
                let a = s.allocation[t];
                let want = d.min(q.limit().unwrap_or(f64::INFINITY));
                if want > 0.0 {
                    // Work-conserving: a tenant short of its demand means the tier is full.
                    assert!(
                        close(a, want, 1e-6) || close(allocated, c, 1e-6),
                        "{ctx}: {t} got {a} of {want} with {allocated} of {c} allocated"
                    );
                }
                assert!(
                    a >= d.min(q.reservation()) * (1.0 - 1e-9),
                    "{ctx}: {t} below its reservation"
                );
                if let Some(l) = q.limit() {
                    let sum: f64 = s
                        .gateways
                        .iter()
                        .map(|g| g.tenants[t].limit().expect("limited"))
                        .sum();
                    assert!(
                        sum <= l * (1.0 + 1e-9),
                        "{ctx}: {t}'s limits sum to {sum} > {l}"
                    );
                    assert!(
                        a <= l * (1.0 + 1e-9),
                        "{ctx}: {t} allocated above its limit"
                    );
                }
                let rsum: f64 = s.gateways.iter().map(|g| g.tenants[t].reservation()).sum();
                assert!(
                    close(rsum, q.reservation(), 1e-9),
                    "{ctx}: {t} reservations"
                );
            }
            for g in &s.gateways {
                assert!(g.capacity > 0.0, "{ctx}: a gateway without capacity");
            }
        }
    }
}
