//! Tenants in the embedded engine: table `tenants` (id → the tenant's settings and keys,
//! JSON) and `tenant_audit` (a sequence number → one [`AuditEntry`], JSON), written together
//! in one transaction per change. The rules are `crate::tenants`'s; this module only stores.

use redb::{ReadableDatabase, ReadableTable, TableDefinition};

use super::{RedbCatalog, decode};
use crate::record::to_json;
use crate::tenants::{Applied, apply_change, plan_seed};
use crate::{AuditEntry, Result, SeedReport, TenantChange, TenantRefusal, TenantSpec, now_ms};

pub(super) const TENANTS: TableDefinition<&str, &[u8]> = TableDefinition::new("tenants");
pub(super) const TENANT_AUDIT: TableDefinition<u64, &[u8]> = TableDefinition::new("tenant_audit");

impl RedbCatalog {
    fn read_tenants(&self) -> Result<Vec<TenantSpec>> {
        let txn = self.db.begin_read()?;
        let t = txn.open_table(TENANTS)?;
        let mut out = Vec::new();
        for row in t.iter()? {
            let (_, v) = row?;
            out.push(decode::<TenantSpec>(v.value())?);
        }
        Ok(out)
    }

    /// Writes `applied` (each tenant's new state and its audit entry) in one transaction.
    fn write_tenants(&self, applied: &[Applied]) -> Result<()> {
        if applied.is_empty() {
            return Ok(());
        }
        let txn = self.begin()?;
        {
            let mut t = txn.open_table(TENANTS)?;
            let mut audit = txn.open_table(TENANT_AUDIT)?;
            let first = audit.last()?.map_or(0, |(k, _)| k.value() + 1);
            for (a, seq) in applied.iter().zip(first..) {
                match &a.after {
                    Some(spec) => {
                        t.insert(a.id.as_str(), to_json(spec).as_slice())?;
                    }
                    None => {
                        t.remove(a.id.as_str())?;
                    }
                }
                audit.insert(seq, to_json(&a.audit).as_slice())?;
            }
        }
        self.finish(txn)
    }

    /// [`crate::Engine::seed_tenants`]: one file governs this catalog, so a tenant only the
    /// file wrote follows it (see `crate::tenants`).
    pub fn seed_tenants(&self, specs: &[TenantSpec]) -> Result<SeedReport> {
        // Seeding and changes run under the catalog's one writer at a time (redb's), but the
        // read before it is not in that transaction: serialise them here.
        let _one = self
            .tenants_lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let all = self.read_tenants()?;
        let (writes, report) = plan_seed(&all, specs, true, now_ms());
        self.write_tenants(&writes)?;
        Ok(report)
    }

    /// [`crate::Engine::tenants`].
    pub fn tenants(&self) -> Result<Vec<TenantSpec>> {
        self.read_tenants()
    }

    /// [`crate::Engine::change_tenant`].
    pub fn change_tenant(
        &self,
        change: &TenantChange,
        who: &str,
    ) -> Result<std::result::Result<Option<TenantSpec>, TenantRefusal>> {
        let _one = self
            .tenants_lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let all = self.read_tenants()?;
        let mut buckets = Ok(0);
        let applied = apply_change(&all, change, who, now_ms(), |id| {
            let n = self.list_buckets(id).map(|b| b.len());
            let shown = *n.as_ref().unwrap_or(&0);
            buckets = n;
            shown
        });
        buckets?;
        match applied {
            Ok(a) => {
                self.write_tenants(std::slice::from_ref(&a))?;
                Ok(Ok(a.after))
            }
            Err(refused) => Ok(Err(refused)),
        }
    }

    /// [`crate::Engine::tenant_history`].
    pub fn tenant_history(&self, tenant: Option<&str>) -> Result<Vec<AuditEntry>> {
        let txn = self.db.begin_read()?;
        let t = txn.open_table(TENANT_AUDIT)?;
        let mut out = Vec::new();
        for row in t.iter()? {
            let (_, v) = row?;
            let e: AuditEntry = decode(v.value())?;
            if tenant.is_none_or(|id| e.tenant == id) {
                out.push(e);
            }
        }
        Ok(out)
    }
}
