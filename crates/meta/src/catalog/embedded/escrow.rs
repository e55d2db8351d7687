//! Node agents' escrow in the embedded engine: the grants live in the ledger, which decides,
//! and in table `agent_escrow` (`(tenant, holder)` → bytes and expiry), written at every grant
//! and loaded at open, so a restarted gateway still counts them.
//!
//! What an upload spends from a grant moves in the ledger only; the table keeps the amount of
//! the last grant until the holder's next request (its renewal) rewrites it. After a restart a
//! grant is therefore loaded at most that much too large: other writers see less free space,
//! never more, until the holder renews.

use std::time::Duration;

use redb::{ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};

use super::{RedbCatalog, decode};
use crate::record::to_json;
use crate::{EscrowGrant, Result};

pub(super) const AGENT_ESCROW: TableDefinition<(&str, &str), &[u8]> =
    TableDefinition::new("agent_escrow");

#[derive(Debug, Serialize, Deserialize)]
struct GrantRecord {
    bytes: u64,
    expires_ms: i64,
}

pub(super) use crate::now_ms;

impl RedbCatalog {
    /// [`crate::Engine::grant_escrow`].
    pub fn grant_escrow(
        &self,
        tenant: &str,
        holder: &str,
        target: u64,
        ttl: Duration,
    ) -> Result<EscrowGrant> {
        let now = now_ms();
        let expires_ms = now.saturating_add(i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX));
        let grant = self
            .ledger
            .grant_escrow(tenant, holder, target, now, expires_ms)?;
        let txn = self.begin()?;
        {
            let mut t = txn.open_table(AGENT_ESCROW)?;
            match grant {
                EscrowGrant::Held { bytes, .. } if bytes > 0 => {
                    let rec = GrantRecord { bytes, expires_ms };
                    t.insert((tenant, holder), to_json(&rec).as_slice())?;
                }
                _ => {
                    t.remove((tenant, holder))?;
                }
            }
        }
        self.finish(txn)?;
        Ok(grant)
    }

    /// Loads the live grants into the ledger and drops the lapsed ones (at open).
    pub(super) fn load_escrow(&self) -> Result<()> {
        let now = now_ms();
        let txn = self.begin()?;
        {
            let mut t = txn.open_table(AGENT_ESCROW)?;
            let mut lapsed = Vec::new();
            for row in t.iter()? {
                let (k, v) = row?;
                let (tenant, holder) = k.value();
                let rec: GrantRecord = decode(v.value())?;
                if rec.expires_ms > now {
                    self.ledger
                        .set_escrow(tenant, holder, rec.bytes, rec.expires_ms);
                } else {
                    lapsed.push((tenant.to_owned(), holder.to_owned()));
                }
            }
            for (tenant, holder) in &lapsed {
                t.remove((tenant.as_str(), holder.as_str()))?;
            }
        }
        self.finish(txn)
    }
}
