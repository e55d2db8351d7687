//! Shared-tier quota held by node agents: escrow granted to a holder (an agent's node id) for
//! a lease period, so that every write the agent acknowledges can drain.
//!
//! Invariant, per tenant: `used + reserved + Σ live grants ≤ quota` whenever space is taken
//! (a reservation, a grant grown). A grant is live until its `expires_ms`; a lapsed one holds
//! nothing (a dead agent's escrow returns when its lease lapses) and is dropped the next time
//! its account is touched. An upload from the holder draws its reservation from the grant
//! first ([`Ledger::reserve_from_escrow`]) and only the remainder from free space; a drawn
//! reservation that does not commit gives the bytes back to the grant.
//!
//! Time is an input: the calls that decide take `now_ms` (milliseconds since the Unix epoch);
//! reservations, which have no caller-supplied clock, read the system clock.

use super::{Account, Ledger, Reservation, Shared, lock, take_locked};
use crate::Result;

/// One holder's grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Grant {
    pub(super) bytes: u64,
    pub(super) expires_ms: i64,
}

/// What an escrow request got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EscrowGrant {
    /// The tenant has no quota on this tier: nothing to hold.
    Unlimited,
    /// The holder now holds `bytes` (at most what it asked for) until `expires_ms`;
    /// `quota` is the tenant's.
    Held {
        bytes: u64,
        expires_ms: i64,
        quota: u64,
    },
}

pub(super) use crate::now_ms;

/// What live grants hold; lapsed ones are dropped on the way.
pub(super) fn live_total(a: &mut Account, now_ms: i64) -> u64 {
    if a.agents.is_empty() {
        return 0;
    }
    a.agents.retain(|_, g| g.expires_ms > now_ms);
    a.agents.values().map(|g| g.bytes).sum()
}

/// Gives `bytes` back to `holder`'s grant, if it still has one (never reviving a lapsed one:
/// its `expires_ms` is kept).
pub(super) fn give_back(a: &mut Account, holder: &str, bytes: u64) {
    if let Some(g) = a.agents.get_mut(holder) {
        g.bytes = g.bytes.saturating_add(bytes);
    }
}

impl Ledger {
    /// Sets `holder`'s grant for `tenant` to `target` bytes until `expires_ms`, as far as the
    /// quota allows: growing it takes free space (partly, if less is free), shrinking it gives
    /// space back. A tenant without a quota (`u64::MAX`) needs none: [`EscrowGrant::Unlimited`].
    pub fn grant_escrow(
        &self,
        tenant: &str,
        holder: &str,
        target: u64,
        now_ms: i64,
        expires_ms: i64,
    ) -> Result<EscrowGrant> {
        let account = self.account(tenant)?;
        let mut a = lock(&account);
        if a.quota == u64::MAX {
            a.agents.remove(holder);
            return Ok(EscrowGrant::Unlimited);
        }
        let held_total = live_total(&mut a, now_ms);
        let current = a.agents.get(holder).map_or(0, |g| g.bytes);
        let others = held_total - current;
        let taken = a.used.saturating_add(a.reserved).saturating_add(others);
        let room = a.quota.saturating_sub(taken);
        // Never below what it holds already (that space is its own), never above the room.
        let bytes = if target <= current {
            target
        } else {
            target.min(room).max(current)
        };
        a.agents
            .insert(holder.to_owned(), Grant { bytes, expires_ms });
        Ok(EscrowGrant::Held {
            bytes,
            expires_ms,
            quota: a.quota,
        })
    }

    /// Installs a grant as a catalog stored it (at open, or a shared catalog's refresh),
    /// adding the tenant if new; `bytes == 0` or a lapsed `expires_ms` removes it.
    pub fn set_escrow(&self, tenant: &str, holder: &str, bytes: u64, expires_ms: i64) {
        let account = self.account_or_insert(tenant);
        let mut a = lock(&account);
        if bytes == 0 {
            a.agents.remove(holder);
        } else {
            a.agents
                .insert(holder.to_owned(), Grant { bytes, expires_ms });
        }
    }

    /// `holder`'s live grant for `tenant`: `(bytes, expires_ms)`.
    pub fn escrow(&self, tenant: &str, holder: &str, now_ms: i64) -> Option<(u64, i64)> {
        let account = self.account(tenant).ok()?;
        let mut a = lock(&account);
        live_total(&mut a, now_ms);
        a.agents.get(holder).map(|g| (g.bytes, g.expires_ms))
    }

    /// What every live agent grant of `tenant` holds.
    pub fn escrowed(&self, tenant: &str, now_ms: i64) -> u64 {
        self.account(tenant)
            .map_or(0, |account| live_total(&mut lock(&account), now_ms))
    }

    /// Every tenant's live grants: `(tenant, holder, bytes, expires_ms)`.
    pub fn escrows(&self, now_ms: i64) -> Vec<(String, String, u64, i64)> {
        let map = self
            .accounts
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut out = Vec::new();
        for (t, account) in map.iter() {
            let mut a = lock(account);
            live_total(&mut a, now_ms);
            for (h, g) in &a.agents {
                out.push((t.clone(), h.clone(), g.bytes, g.expires_ms));
            }
        }
        out.sort();
        out
    }

    /// Takes `bytes` for an upload from `holder`: first from its live grant, the remainder
    /// from free space (or `QuotaExceeded`, the grant untouched).
    pub fn reserve_from_escrow(
        &self,
        tenant: &str,
        holder: &str,
        bytes: u64,
    ) -> Result<Reservation> {
        self.reserve_from_escrow_at(tenant, holder, bytes, now_ms())
    }

    /// [`Ledger::reserve_from_escrow`] at `now_ms`.
    pub fn reserve_from_escrow_at(
        &self,
        tenant: &str,
        holder: &str,
        bytes: u64,
        now_ms: i64,
    ) -> Result<Reservation> {
        let account: Shared = self.account(tenant)?;
        let drawn = {
            let mut a = lock(&account);
            live_total(&mut a, now_ms);
            let drawn = a.agents.get(holder).map_or(0, |g| g.bytes.min(bytes));
            if let Some(g) = a.agents.get_mut(holder) {
                g.bytes -= drawn;
            }
            // The drawn bytes move from the grant to the reservations before the remainder
            // is checked against what is free.
            a.reserved += drawn;
            if let Err(e) = take_locked(&mut a, bytes - drawn, now_ms) {
                a.reserved -= drawn;
                give_back(&mut a, holder, drawn);
                return Err(e);
            }
            drawn
        };
        Ok(Reservation {
            account,
            bytes,
            escrow: (drawn > 0).then(|| (holder.to_owned(), drawn)),
            on_end: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::{EscrowGrant, Ledger, MetaError};

    const MIB: u64 = 1 << 20;
    /// Reservations read the system clock, so the tests' times are around it.
    fn now() -> i64 {
        super::now_ms()
    }

    fn ledger(quota: u64, used: u64) -> Ledger {
        let l = Ledger::default();
        l.set_quota("t", quota);
        l.set_used("t", used, 0);
        l
    }

    fn held(g: EscrowGrant) -> u64 {
        match g {
            EscrowGrant::Held { bytes, .. } => bytes,
            EscrowGrant::Unlimited => panic!("unlimited"),
        }
    }

    #[test]
    fn a_grant_takes_free_space_from_other_writers_and_is_capped_by_it() {
        let t0 = now();
        let l = ledger(8 * MIB, 4 * MIB);
        let g = l
            .grant_escrow("t", "n1", 3 * MIB, t0, t0 + 60_000)
            .expect("grant");
        assert_eq!(held(g), 3 * MIB);
        // Others see 1 MiB free, not 4.
        assert!(matches!(
            l.reserve("t", MIB + 1),
            Err(MetaError::QuotaExceeded { available, .. }) if available == MIB
        ));
        // Asking for more than is free gets what is free.
        let g = l
            .grant_escrow("t", "n1", 10 * MIB, t0, t0 + 60_000)
            .expect("grant");
        assert_eq!(held(g), 4 * MIB);
        // Shrinking gives space back.
        let g = l
            .grant_escrow("t", "n1", MIB, t0, t0 + 60_000)
            .expect("grant");
        assert_eq!(held(g), MIB);
        assert!(l.reserve("t", 3 * MIB).is_ok());
    }

    #[test]
    fn the_holders_upload_spends_its_grant_and_a_failed_one_gives_it_back() {
        let t0 = now();
        let l = ledger(8 * MIB, 4 * MIB);
        l.grant_escrow("t", "n1", 4 * MIB, t0, t0 + 60_000)
            .expect("grant");
        // The quota is all held: another writer is refused, the holder is not.
        assert!(l.reserve("t", 1).is_err());
        let r = l
            .reserve_from_escrow_at("t", "n1", 3 * MIB, t0)
            .expect("from escrow");
        assert_eq!(r.escrow(), Some(("n1", 3 * MIB)));
        drop(r);
        assert_eq!(l.escrow("t", "n1", t0), Some((4 * MIB, t0 + 60_000)));
        let r = l
            .reserve_from_escrow_at("t", "n1", 3 * MIB, t0)
            .expect("from escrow");
        r.settle(3 * MIB, 0);
        assert_eq!(l.escrow("t", "n1", t0), Some((MIB, t0 + 60_000)));
        assert_eq!(l.usage("t"), Some((7 * MIB, 0, 8 * MIB)));
        // Beyond the grant and the free space: refused, the grant untouched.
        assert!(l.reserve_from_escrow_at("t", "n1", 2 * MIB, t0).is_err());
        assert_eq!(l.escrow("t", "n1", t0), Some((MIB, t0 + 60_000)));
    }

    #[test]
    fn a_lapsed_grant_holds_nothing() {
        let t0 = now();
        let l = ledger(8 * MIB, 0);
        l.grant_escrow("t", "n1", 8 * MIB, t0, t0 + 60_000)
            .expect("grant");
        assert_eq!(l.escrowed("t", t0 + 59_999), 8 * MIB);
        assert_eq!(l.escrowed("t", t0 + 60_000), 0);
        let g = l
            .grant_escrow("t", "n2", 8 * MIB, t0 + 60_000, t0 + 120_000)
            .expect("grant");
        assert_eq!(held(g), 8 * MIB);
        assert_eq!(l.escrow("t", "n1", t0 + 60_000), None);
    }

    #[test]
    fn a_tenant_without_a_quota_needs_no_escrow() {
        let t0 = now();
        let l = ledger(u64::MAX, 0);
        assert_eq!(
            l.grant_escrow("t", "n1", MIB, t0, t0 + 60_000)
                .expect("grant"),
            EscrowGrant::Unlimited
        );
        assert!(matches!(
            l.grant_escrow("ghost", "n1", MIB, t0, t0 + 60_000),
            Err(MetaError::UnknownTenant)
        ));
    }
}
