//! The order in which the drain starts the ops that may start: by weight across tenants.
//!
//! The drain has [`TOTAL`](super::TOTAL) transfer slots, [`PER_TENANT`](super::PER_TENANT) at
//! most per tenant. When more tenants have work than slots allow, whoever is first in
//! sequence order would get them; instead the next slot goes to the tenant with the fewest
//! transfers (in flight plus already picked) per unit of its `local_weight`, ties to the
//! earlier op. Each tenant's own ops keep their sequence order (the journal's invariants are
//! per tenant and key, and every op given here may start now). Pure: no clock, no I/O.

use std::collections::{BTreeMap, VecDeque};

use crate::journal::Op;

/// `ready` (ops that may all start now, in sequence order) reordered by weight;
/// `state(tenant)` is the tenant's transfers in flight and its weight (> 0).
pub fn order(ready: Vec<Op>, state: impl Fn(&str) -> (usize, f64)) -> Vec<Op> {
    struct Queue {
        /// The tenant's ops with their places in `ready`.
        ops: VecDeque<(usize, Op)>,
        /// Transfers in flight plus those picked so far.
        load: f64,
        weight: f64,
    }
    let total = ready.len();
    let mut queues: BTreeMap<String, Queue> = BTreeMap::new();
    for (i, op) in ready.into_iter().enumerate() {
        queues
            .entry(op.tenant.clone())
            .or_insert_with(|| {
                let (in_flight, weight) = state(&op.tenant);
                Queue {
                    ops: VecDeque::new(),
                    load: in_flight as f64,
                    weight: if weight > 0.0 { weight } else { 1.0 },
                }
            })
            .ops
            .push_back((i, op));
    }
    let mut out = Vec::with_capacity(total);
    loop {
        let next = queues
            .values_mut()
            .filter_map(|q| {
                let place = q.ops.front()?.0;
                Some(((q.load + 1.0) / q.weight, place, q))
            })
            .min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let Some((_, _, q)) = next else { break };
        if let Some((_, op)) = q.ops.pop_front() {
            q.load += 1.0;
            out.push(op);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::OpKind;

    fn op(seq: u64, tenant: &str) -> Op {
        Op {
            seq,
            tenant: tenant.to_owned(),
            bucket: "b".to_owned(),
            key: format!("k{seq}"),
            kind: OpKind::Delete,
            chain_start: seq,
            marker: false,
            enqueued_ms: 0,
            upload: None,
        }
    }

    fn tenants(ops: &[Op]) -> String {
        ops.iter().map(|o| o.tenant.as_str()).collect()
    }

    #[test]
    fn equal_weights_alternate_tenants_whoever_wrote_first() {
        let ready: Vec<Op> = (0..6)
            .map(|i| op(i, "a"))
            .chain((6..9).map(|i| op(i, "b")))
            .collect();
        let got = order(ready, |_| (0, 1.0));
        assert_eq!(tenants(&got), "ababab aaa".replace(' ', ""));
        // Each tenant's ops keep their sequence order.
        let a: Vec<u64> = got
            .iter()
            .filter(|o| o.tenant == "a")
            .map(|o| o.seq)
            .collect();
        assert_eq!(a, vec![0, 1, 2, 3, 4, 5]);
    }

    #[test]
    fn a_heavier_tenant_gets_slots_in_proportion_to_its_weight() {
        let ready: Vec<Op> = (0..8)
            .map(|i| op(i, "a"))
            .chain((8..16).map(|i| op(i, "b")))
            .collect();
        let got = order(ready, |t| (0, if t == "b" { 3.0 } else { 1.0 }));
        // Of the first eight slots, b (weight 3) gets six and a two.
        let first: String = tenants(&got[..8]);
        assert_eq!(first.matches('b').count(), 6, "{first}");
        assert_eq!(first.matches('a').count(), 2, "{first}");
    }

    #[test]
    fn transfers_already_in_flight_count_against_their_tenant() {
        let ready = vec![op(0, "a"), op(1, "a"), op(2, "b")];
        // a already has two in flight: b, though later, goes first.
        let got = order(ready, |t| (if t == "a" { 2 } else { 0 }, 1.0));
        assert_eq!(tenants(&got), "baa");
    }
}
