//! Escrow: quota headroom taken from the database in chunks, held under this gateway's lease,
//! so that a commit far from its tenant's quota reads no other gateway's rows.
//!
//! Each gateway holds a lease row `gateway:<holder>` (renewed in the background; a lapsed one
//! re-taken with a new `generation`) and, per tenant, an `escrow` row: headroom granted to it.
//! Locally, per tenant, `row` mirrors that row and splits into `avail` (unspent), `inflight`
//! (taken by commits not yet finished) and the remainder, headroom already converted into
//! usage by committed commits and not yet folded back (`row - avail - inflight`).
//!
//! - **Fast path.** A commit takes what it may add from `avail` before its transaction; in the
//!   transaction it checks only that its lease is live with the generation it took under, and
//!   moves usage in its own slot row. No other gateway's row is read.
//! - **Slow path** (not enough `avail`, or the lease lapsed): the transaction sums the tenant's
//!   usage and the escrow of every other gateway whose lease is live, counts this gateway's
//!   unspent and in-flight headroom as held, and admits the commit only within the quota;
//!   while more than half the quota is free it also grants this gateway a chunk
//!   (`min(quota / 64, free / 8)`), so near the quota nothing is stranded in escrow and every
//!   commit is checked against the sum, as without escrow.
//! - **Folding.** The refresher subtracts converted headroom from the escrow row. Until then
//!   it is counted twice (in usage and in escrow): other gateways see less free, never more.
//! - **Lapse.** Another gateway ignores the escrow of a lapsed lease: a killed gateway strands
//!   nothing longer than a lease period. A commit whose lease lapsed fails the fast path's
//!   check and takes the slow path; re-taking the lease deletes the old escrow and bumps the
//!   generation, so headroom taken under the old one is never used under the new one.
//! - **Node agents** (`agents`): escrow granted to a node agent (table `agent_escrow`, each
//!   row its own lease) is counted as held by every slow path and by every grant; a commit
//!   whose reservation drew from an agent's escrow spends that row first, in its transaction.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use sluice_meta::MetaError;

use crate::db::{Tx, TxError, TxResult};

mod agents;
use crate::{Inner, signed, unsigned};

/// Bytes and objects.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Amount {
    pub(crate) bytes: u64,
    pub(crate) objects: u64,
}

impl Amount {
    fn fits_in(self, other: Self) -> bool {
        self.bytes <= other.bytes && self.objects <= other.objects
    }

    fn minus(self, other: Self) -> Self {
        Self {
            bytes: self.bytes.saturating_sub(other.bytes),
            objects: self.objects.saturating_sub(other.objects),
        }
    }

    fn plus(self, other: Self) -> Self {
        Self {
            bytes: self.bytes.saturating_add(other.bytes),
            objects: self.objects.saturating_add(other.objects),
        }
    }

    fn min(self, other: Self) -> Self {
        Self {
            bytes: self.bytes.min(other.bytes),
            objects: self.objects.min(other.objects),
        }
    }
}

#[derive(Debug, Default)]
struct Balance {
    row: Amount,
    avail: Amount,
    inflight: Amount,
}

#[derive(Debug, Default)]
pub(crate) struct Escrow {
    generation: i64,
    tenants: HashMap<String, Balance>,
}

/// What one commit took from escrow before its transaction, and what its last attempt did.
pub(crate) struct Ticket {
    generation: i64,
    /// Taken from `avail` (now in-flight).
    taken: Cell<Amount>,
    /// The last attempt: what it added, and (slow path) what it granted.
    added: Cell<Amount>,
    granted: Cell<Amount>,
    fast: Cell<bool>,
    /// The node agent whose escrow the commit's reservation drew from (see `agents`).
    agent: Option<String>,
}

fn lock(e: &Mutex<Escrow>) -> MutexGuard<'_, Escrow> {
    e.lock().unwrap_or_else(PoisonError::into_inner)
}

const NOW_MS: &str = "(EXTRACT(EPOCH FROM now()) * 1000)::BIGINT";

impl Inner {
    pub(crate) fn lease_name(&self) -> String {
        format!("gateway:{}", self.holder)
    }

    /// Before a commit's transaction: takes up to `most` from the tenant's unspent headroom
    /// (all of it or nothing).
    pub(crate) fn prepare(&self, tenant: &str, most: Amount) -> Ticket {
        let mut e = lock(&self.escrow);
        let generation = e.generation;
        let bal = e.tenants.entry(tenant.to_owned()).or_default();
        let taken = if most.fits_in(bal.avail) {
            bal.avail = bal.avail.minus(most);
            bal.inflight = bal.inflight.plus(most);
            most
        } else {
            Amount::default()
        };
        Ticket {
            generation,
            taken: Cell::new(taken),
            added: Cell::new(Amount::default()),
            granted: Cell::new(Amount::default()),
            fast: Cell::new(false),
            agent: None,
        }
    }

    /// After the transaction: `committed` whether it committed.
    pub(crate) fn settle(&self, tenant: &str, ticket: &Ticket, committed: bool) {
        let mut e = lock(&self.escrow);
        if e.generation != ticket.generation {
            return; // The lease was re-taken meanwhile: the old headroom is gone.
        }
        let bal = e.tenants.entry(tenant.to_owned()).or_default();
        let taken = ticket.taken.get();
        bal.inflight = bal.inflight.minus(taken);
        if committed {
            // What it added beyond what it took came from the quota's free space.
            bal.avail = bal.avail.plus(taken.minus(ticket.added.get()));
            let granted = ticket.granted.get();
            bal.row = bal.row.plus(granted);
            bal.avail = bal.avail.plus(granted);
        } else {
            bal.avail = bal.avail.plus(taken);
        }
    }

    /// Checks and moves an increase of usage (`bytes`, `objects`, parts of which may be
    /// negative) in this gateway's `slot` row, within the tenant's quota and `max_objects`.
    pub(crate) fn charge_checked(
        &self,
        tx: &Tx<'_>,
        tenant: &str,
        slot: i32,
        bytes: i64,
        objects: i64,
        ticket: &Ticket,
    ) -> TxResult<()> {
        let (quota, max_objects) = self.limits(tenant)?;
        let add = Amount {
            bytes: if quota == u64::MAX {
                0
            } else {
                unsigned(bytes)
            },
            objects: if max_objects == u64::MAX {
                0
            } else {
                unsigned(objects)
            },
        };
        // What a node agent's escrow covers needs no other headroom.
        let add = agents::spend_agent(tx, tenant, add, ticket)?;
        ticket.added.set(add);
        ticket.granted.set(Amount::default());
        let name = self.lease_name();
        let live = tx
            .query_opt(
                &format!(
                    "SELECT 1 FROM leases WHERE name = $1 AND holder = $2 AND generation = $3
                     AND expires_ms > {NOW_MS}"
                ),
                &[&name, &self.holder, &ticket.generation],
            )?
            .is_some();
        let fast = live && add.fits_in(ticket.taken.get());
        ticket.fast.set(fast);
        if !fast && add != Amount::default() {
            self.slow_path(
                tx,
                tenant,
                add,
                live,
                ticket,
                Amount {
                    bytes: quota,
                    objects: max_objects,
                },
            )?;
        }
        self.charge(tx, tenant, slot, bytes, objects)
    }

    fn slow_path(
        &self,
        tx: &Tx<'_>,
        tenant: &str,
        add: Amount,
        live: bool,
        ticket: &Ticket,
        limit: Amount,
    ) -> TxResult<()> {
        // Everything this gateway holds unspent joins this commit's ticket (once per commit).
        let held_here = {
            let mut e = lock(&self.escrow);
            let same = e.generation == ticket.generation;
            let bal = e.tenants.entry(tenant.to_owned()).or_default();
            if same && live {
                let more = bal.avail;
                bal.avail = Amount::default();
                bal.inflight = bal.inflight.plus(more);
                ticket.taken.set(ticket.taken.get().plus(more));
                bal.inflight
            } else {
                Amount::default()
            }
        };
        let used = tx.query_one(
            "SELECT COALESCE(SUM(bytes), 0)::BIGINT, COALESCE(SUM(objects), 0)::BIGINT
             FROM usage WHERE tenant = $1",
            &[&tenant.as_bytes()],
        )?;
        let others = tx.query_one(
            &format!(
                "SELECT COALESCE(SUM(e.bytes), 0)::BIGINT, COALESCE(SUM(e.objects), 0)::BIGINT
                 FROM escrow e JOIN leases l ON l.name = 'gateway:' || e.holder
                 WHERE e.tenant = $1 AND e.holder <> $2 AND l.holder = e.holder
                 AND l.expires_ms > {NOW_MS}"
            ),
            &[&tenant.as_bytes(), &self.holder],
        )?;
        let agents = agents::agents_escrow(tx, tenant)?;
        let used = Amount {
            bytes: unsigned(used.get(0)).saturating_add(agents),
            objects: unsigned(used.get(1)),
        };
        let others = Amount {
            bytes: unsigned(others.get(0)),
            objects: unsigned(others.get(1)),
        };
        // Free for this commit: what nobody holds, plus what this commit holds itself.
        let mine = ticket.taken.get().min(held_here);
        let free = limit.minus(used).minus(others).minus(held_here).plus(mine);
        if add.bytes > free.bytes {
            return Err(TxError::Meta(MetaError::QuotaExceeded {
                needed: add.bytes,
                available: free.bytes,
                quota: limit.bytes,
            }));
        }
        if add.objects > free.objects {
            return Err(TxError::Meta(MetaError::TooManyObjects {
                max: limit.objects,
            }));
        }
        if !live {
            return Ok(());
        }
        let spare = free.minus(add);
        let grant = |spare: u64, limit: u64, floor: u64| {
            if limit == u64::MAX || spare <= limit / 2 {
                0
            } else {
                (limit / 64).max(floor).min(spare / 8)
            }
        };
        let granted = Amount {
            bytes: grant(spare.bytes, limit.bytes, 64 * 1024),
            objects: grant(spare.objects, limit.objects, 1),
        };
        if granted != Amount::default() {
            tx.execute(
                "INSERT INTO escrow (tenant, holder, bytes, objects) VALUES ($1, $2, $3, $4)
                 ON CONFLICT (tenant, holder) DO UPDATE
                 SET bytes = escrow.bytes + excluded.bytes,
                     objects = escrow.objects + excluded.objects",
                &[
                    &tenant.as_bytes(),
                    &self.holder,
                    &signed(granted.bytes),
                    &signed(granted.objects),
                ],
            )?;
        }
        ticket.granted.set(granted);
        Ok(())
    }

    /// Takes this gateway's lease at open (generation 1: the holder name is new).
    pub(crate) fn take_lease(&self) -> Result<(), MetaError> {
        let ttl = signed(u64::try_from(self.lease_ttl.as_millis()).unwrap_or(u64::MAX));
        let generation = self.db.write(|tx| {
            tx.execute("DELETE FROM escrow WHERE holder = $1", &[&self.holder])?;
            let row = tx.query_one(
                &format!(
                    "INSERT INTO leases (name, holder, expires_ms, generation)
                     VALUES ($1, $2, {NOW_MS} + $3, 1)
                     ON CONFLICT (name) DO UPDATE
                     SET expires_ms = excluded.expires_ms, generation = leases.generation + 1
                     RETURNING generation"
                ),
                &[&self.lease_name(), &self.holder, &ttl],
            )?;
            Ok(row.get::<_, i64>(0))
        })?;
        let mut e = lock(&self.escrow);
        e.generation = generation;
        e.tenants.clear();
        Ok(())
    }

    /// Renews this gateway's lease; a lapsed one is taken again under a new generation,
    /// its escrow gone. Then folds converted headroom back out of the escrow rows.
    pub(crate) fn renew(&self) -> Result<(), MetaError> {
        let ttl = signed(u64::try_from(self.lease_ttl.as_millis()).unwrap_or(u64::MAX));
        let generation = lock(&self.escrow).generation;
        let renewed = self.db.write(|tx| {
            Ok(tx
                .query_opt(
                    &format!(
                        "UPDATE leases SET expires_ms = {NOW_MS} + $3
                         WHERE name = $1 AND holder = $2 AND generation = $4
                         AND expires_ms > {NOW_MS} RETURNING generation"
                    ),
                    &[&self.lease_name(), &self.holder, &ttl, &generation],
                )?
                .is_some())
        })?;
        if !renewed {
            tracing::warn!(
                holder = self.holder,
                "this gateway's catalog lease had lapsed: its escrow is gone, taken again"
            );
            return self.take_lease();
        }
        self.fold()
    }

    fn fold(&self) -> Result<(), MetaError> {
        let (generation, folds): (i64, Vec<(String, Amount)>) = {
            let e = lock(&self.escrow);
            let folds = e
                .tenants
                .iter()
                .map(|(t, b)| (t.clone(), b.row.minus(b.avail).minus(b.inflight)))
                .filter(|(_, c)| *c != Amount::default())
                .collect();
            (e.generation, folds)
        };
        if folds.is_empty() {
            return Ok(());
        }
        self.db.write(|tx| {
            for (tenant, c) in &folds {
                tx.execute(
                    "UPDATE escrow SET bytes = GREATEST(bytes - $3, 0),
                                       objects = GREATEST(objects - $4, 0)
                     WHERE tenant = $1 AND holder = $2",
                    &[
                        &tenant.as_bytes(),
                        &self.holder,
                        &signed(c.bytes),
                        &signed(c.objects),
                    ],
                )?;
            }
            Ok(())
        })?;
        let mut e = lock(&self.escrow);
        if e.generation == generation {
            for (tenant, c) in folds {
                if let Some(b) = e.tenants.get_mut(&tenant) {
                    b.row = b.row.minus(c);
                }
            }
        }
        Ok(())
    }
}
