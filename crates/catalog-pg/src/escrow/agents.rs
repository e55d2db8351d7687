//! Node agents' escrow on PostgreSQL: table `agent_escrow`, a row per (tenant, holder) holding
//! `bytes` until `expires_ms` (each row its own lease: a row not renewed in time holds
//! nothing, so a dead agent strands its escrow no longer than its lease).
//!
//! - **Grant** (`grant_escrow`): one SERIALIZABLE transaction sums the tenant's usage, every
//!   live gateway's escrow and every other live agent row, and sets the holder's row to what
//!   it asked for as far as the quota allows (never below what it holds). Gateways' slow
//!   paths count the live agent rows as held, so `used + gateway escrow + agent escrow ≤
//!   quota` holds across every gateway.
//! - **Spend**: a commit whose reservation drew from an agent's escrow (`Ticket::from_agent`)
//!   takes what it adds from that row first, in its own transaction; only the remainder goes
//!   through the gateway's own headroom or the slow path.
//! - The local [`sluice_meta::Ledger`] mirrors the rows (set at grant, reloaded with usage),
//!   as a pre-check; the database decides.

use std::time::Duration;

use sluice_meta::{EscrowGrant, MetaError, Result};

use super::{Amount, NOW_MS, Ticket};
use crate::db::{Tx, TxResult};
use crate::{Inner, signed, unsigned};

impl Ticket {
    /// The commit's reservation drew from `escrow`'s holder: spend that row first.
    pub(crate) fn drawn_from(mut self, escrow: Option<(&str, u64)>) -> Self {
        self.agent = escrow.map(|(holder, _)| holder.to_owned());
        self
    }
}

/// Takes what `add` needs from the ticket's agent row, if any: what is left to add.
pub(super) fn spend_agent(
    tx: &Tx<'_>,
    tenant: &str,
    add: Amount,
    ticket: &Ticket,
) -> TxResult<Amount> {
    let Some(holder) = &ticket.agent else {
        return Ok(add);
    };
    if add.bytes == 0 {
        return Ok(add);
    }
    let row = tx.query_opt(
        &format!(
            "SELECT bytes FROM agent_escrow
                 WHERE tenant = $1 AND holder = $2 AND expires_ms > {NOW_MS}"
        ),
        &[&tenant.as_bytes(), holder],
    )?;
    let held = row.map_or(0, |r| unsigned(r.get(0)));
    let spent = held.min(add.bytes);
    if spent > 0 {
        tx.execute(
            "UPDATE agent_escrow SET bytes = bytes - $3 WHERE tenant = $1 AND holder = $2",
            &[&tenant.as_bytes(), holder, &signed(spent)],
        )?;
    }
    Ok(Amount {
        bytes: add.bytes - spent,
        objects: add.objects,
    })
}

/// What the tenant's live agent rows hold.
pub(super) fn agents_escrow(tx: &Tx<'_>, tenant: &str) -> TxResult<u64> {
    let row = tx.query_one(
        &format!(
            "SELECT COALESCE(SUM(bytes), 0)::BIGINT FROM agent_escrow
                 WHERE tenant = $1 AND expires_ms > {NOW_MS}"
        ),
        &[&tenant.as_bytes()],
    )?;
    Ok(unsigned(row.get(0)))
}

impl Inner {
    /// [`sluice_meta::Engine::grant_escrow`].
    pub(crate) fn grant_escrow(
        &self,
        tenant: &str,
        holder: &str,
        target: u64,
        ttl: Duration,
    ) -> Result<EscrowGrant> {
        let (quota, _) = self.limits(tenant).map_err(|e| match e {
            crate::db::TxError::Meta(m) => m,
            crate::db::TxError::Pg(e) => MetaError::Database(Box::new(e)),
        })?;
        let ttl_ms = signed(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX));
        if quota == u64::MAX {
            self.db.write(|tx| {
                tx.execute(
                    "DELETE FROM agent_escrow WHERE tenant = $1 AND holder = $2",
                    &[&tenant.as_bytes(), &holder],
                )?;
                Ok(())
            })?;
            self.ledger.set_escrow(tenant, holder, 0, 0);
            return Ok(EscrowGrant::Unlimited);
        }
        let (bytes, expires_ms) = self.db.write(|tx| {
            let used: i64 = tx
                .query_one(
                    "SELECT COALESCE(SUM(bytes), 0)::BIGINT FROM usage WHERE tenant = $1",
                    &[&tenant.as_bytes()],
                )?
                .get(0);
            let gateways: i64 = tx
                .query_one(
                    &format!(
                        "SELECT COALESCE(SUM(e.bytes), 0)::BIGINT
                         FROM escrow e JOIN leases l ON l.name = 'gateway:' || e.holder
                         WHERE e.tenant = $1 AND l.holder = e.holder
                         AND l.expires_ms > {NOW_MS}"
                    ),
                    &[&tenant.as_bytes()],
                )?
                .get(0);
            let rows = tx.query(
                &format!(
                    "SELECT holder, bytes FROM agent_escrow
                     WHERE tenant = $1 AND expires_ms > {NOW_MS}"
                ),
                &[&tenant.as_bytes()],
            )?;
            let (mut current, mut others) = (0u64, 0u64);
            for r in rows {
                let h: &str = r.get(0);
                if h == holder {
                    current = unsigned(r.get(1));
                } else {
                    others = others.saturating_add(unsigned(r.get(1)));
                }
            }
            let room = quota
                .saturating_sub(unsigned(used))
                .saturating_sub(unsigned(gateways))
                .saturating_sub(others);
            let bytes = if target <= current {
                target
            } else {
                target.min(room).max(current)
            };
            let row = tx.query_one(
                &format!(
                    "INSERT INTO agent_escrow (tenant, holder, bytes, expires_ms)
                     VALUES ($1, $2, $3, {NOW_MS} + $4)
                     ON CONFLICT (tenant, holder) DO UPDATE
                     SET bytes = excluded.bytes, expires_ms = excluded.expires_ms
                     RETURNING expires_ms"
                ),
                &[&tenant.as_bytes(), &holder, &signed(bytes), &ttl_ms],
            )?;
            Ok((bytes, row.get::<_, i64>(0)))
        })?;
        self.ledger.set_escrow(tenant, holder, bytes, expires_ms);
        Ok(EscrowGrant::Held {
            bytes,
            expires_ms,
            quota,
        })
    }

    /// Mirrors the live agent rows into the ledger (with the usage refresh); rows gone from
    /// the database leave it too.
    pub(crate) fn refresh_agents(&self) -> Result<()> {
        let rows = self.db.read(|tx| {
            tx.query(
                &format!(
                    "SELECT tenant, holder, bytes, expires_ms FROM agent_escrow
                     WHERE expires_ms > {NOW_MS}"
                ),
                &[],
            )
        })?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        let mut live = std::collections::HashSet::new();
        for row in rows {
            let tenant = String::from_utf8_lossy(row.get::<_, &[u8]>(0)).into_owned();
            let holder: String = row.get(1);
            self.ledger
                .set_escrow(&tenant, &holder, unsigned(row.get(2)), row.get(3));
            live.insert((tenant, holder));
        }
        for (tenant, holder, _, _) in self.ledger.escrows(now) {
            if !live.contains(&(tenant.clone(), holder.clone())) {
                self.ledger.set_escrow(&tenant, &holder, 0, 0);
            }
        }
        Ok(())
    }
}
