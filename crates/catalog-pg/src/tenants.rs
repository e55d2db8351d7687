//! Tenants and their access keys (`tenants`, `tenant_keys`) and the audit record of their
//! changes (`tenant_audit`). The gateways' files seed them: the first file to name a tenant
//! inserts it, and from then on the catalog's settings and keys are the tenant's (a file that
//! says otherwise is reported; several files seed one catalog, so none of them governs it).
//! Changes online ([`sluice_meta::Engine::change_tenant`]) rewrite a tenant's row and keys
//! and add an audit row in one SERIALIZABLE transaction; every gateway reads them back
//! within its refresh (1 s). Secrets are stored as the caller gives them (the gateway seals
//! them: see `sluice-gateway`'s `admin::seal`); rows a schema v3/v4 gateway wrote hold the
//! file's text. A tenant's node-local settings are four nullable columns (schema v6): `NULL`
//! is not held (each agent's file governs), as every row an older gateway wrote reads.

use sluice_meta::{
    Applied, AuditEntry, LocalSettings, Result, SeedReport, TenantChange, TenantKeySpec,
    TenantRefusal, TenantSpec, apply_change, now_ms, plan_seed,
};

use crate::Inner;
use crate::db::{Tx, TxResult};

/// A limit as stored: `NULL` for none (`u64::MAX`) and for what exceeds `BIGINT`.
fn to_db(n: u64) -> Option<i64> {
    i64::try_from(n).ok()
}

fn from_db(n: Option<i64>) -> u64 {
    n.map_or(u64::MAX, |n| u64::try_from(n).unwrap_or(0))
}

/// `spec` as it reads back once stored (limits beyond `BIGINT` become none).
fn stored(spec: &TenantSpec) -> TenantSpec {
    let mut s = spec.clone();
    s.capacity = from_db(to_db(s.capacity));
    s.max_objects = from_db(to_db(s.max_objects));
    s.max_buckets = from_db(to_db(s.max_buckets));
    s
}

fn read_all(tx: &Tx<'_>) -> TxResult<Vec<TenantSpec>> {
    let mut all: Vec<TenantSpec> = Vec::new();
    for r in tx.query(
        "SELECT id, capacity, max_objects, max_buckets, reservation, weight, qos_limit, online,
                local_capacity, local_reservation, local_weight, local_limit
         FROM tenants ORDER BY id",
        &[],
    )? {
        all.push(TenantSpec {
            id: String::from_utf8_lossy(r.get::<_, &[u8]>(0)).into_owned(),
            capacity: from_db(r.get(1)),
            max_objects: from_db(r.get(2)),
            max_buckets: from_db(r.get(3)),
            reservation: r.get(4),
            weight: r.get(5),
            limit: r.get(6),
            keys: Vec::new(),
            online: r.get(7),
            local: LocalSettings {
                capacity: r
                    .get::<_, Option<i64>>(8)
                    .map(|n| u64::try_from(n).unwrap_or(0)),
                reservation: r.get(9),
                weight: r.get(10),
                limit: r.get(11),
            },
        });
    }
    for r in tx.query(
        "SELECT tenant, access_key, secret, created_ms, expires_ms, revoked_ms
         FROM tenant_keys ORDER BY access_key",
        &[],
    )? {
        let id = String::from_utf8_lossy(r.get::<_, &[u8]>(0));
        if let Some(t) = all.iter_mut().find(|t| t.id == id) {
            t.keys.push(TenantKeySpec {
                access_key: r.get(1),
                secret_key: r.get(2),
                created_ms: r.get(3),
                expires_ms: r.get(4),
                revoked_ms: r.get(5),
            });
        }
    }
    Ok(all)
}

/// Writes one tenant's new state (its row and keys replaced, or removed) and its audit row.
fn write(tx: &Tx<'_>, a: &Applied) -> TxResult<()> {
    let id = a.id.as_bytes();
    tx.execute("DELETE FROM tenant_keys WHERE tenant = $1", &[&id])?;
    match &a.after {
        None => {
            tx.execute("DELETE FROM tenants WHERE id = $1", &[&id])?;
        }
        Some(spec) => {
            tx.execute(
                "INSERT INTO tenants
                 (id, capacity, max_objects, max_buckets, reservation, weight, qos_limit,
                  created_ms, online, local_capacity, local_reservation, local_weight,
                  local_limit)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
                 ON CONFLICT (id) DO UPDATE SET capacity = excluded.capacity,
                   max_objects = excluded.max_objects, max_buckets = excluded.max_buckets,
                   reservation = excluded.reservation, weight = excluded.weight,
                   qos_limit = excluded.qos_limit, online = excluded.online,
                   local_capacity = excluded.local_capacity,
                   local_reservation = excluded.local_reservation,
                   local_weight = excluded.local_weight, local_limit = excluded.local_limit",
                &[
                    &id,
                    &to_db(spec.capacity),
                    &to_db(spec.max_objects),
                    &to_db(spec.max_buckets),
                    &spec.reservation,
                    &spec.weight,
                    &spec.limit,
                    &a.audit.at_ms,
                    &spec.online,
                    &spec.local.capacity.and_then(|n| i64::try_from(n).ok()),
                    &spec.local.reservation,
                    &spec.local.weight,
                    &spec.local.limit,
                ],
            )?;
            for k in &spec.keys {
                tx.execute(
                    "INSERT INTO tenant_keys
                     (access_key, tenant, secret, created_ms, expires_ms, revoked_ms)
                     VALUES ($1, $2, $3, $4, $5, $6)",
                    &[
                        &k.access_key,
                        &id,
                        &k.secret_key,
                        &k.created_ms,
                        &k.expires_ms,
                        &k.revoked_ms,
                    ],
                )?;
            }
        }
    }
    let e = &a.audit;
    tx.execute(
        "INSERT INTO tenant_audit (at_ms, who, tenant, action, detail)
         VALUES ($1, $2, $3, $4, $5)",
        &[&e.at_ms, &e.who, &e.tenant.as_bytes(), &e.action, &e.detail],
    )?;
    Ok(())
}

impl Inner {
    pub(crate) fn seed_tenants(&self, specs: &[TenantSpec]) -> Result<SeedReport> {
        let specs: Vec<TenantSpec> = specs.iter().map(stored).collect();
        self.db.write(|tx| {
            let all = read_all(tx)?;
            let (writes, report) = plan_seed(&all, &specs, false, now_ms());
            for a in &writes {
                write(tx, a)?;
            }
            Ok(report)
        })
    }

    pub(crate) fn tenants(&self) -> Result<Vec<TenantSpec>> {
        self.db.read(read_all)
    }

    pub(crate) fn change_tenant(
        &self,
        change: &TenantChange,
        who: &str,
    ) -> Result<std::result::Result<Option<TenantSpec>, TenantRefusal>> {
        let change = match change {
            TenantChange::Add(spec) => TenantChange::Add(stored(spec)),
            other => other.clone(),
        };
        self.db.write(|tx| {
            let all = read_all(tx)?;
            let buckets = match &change {
                TenantChange::Remove { id } => tx
                    .query_one(
                        "SELECT count(*) FROM buckets WHERE tenant = $1",
                        &[&id.as_bytes()],
                    )?
                    .get::<_, i64>(0),
                _ => 0,
            };
            match apply_change(&all, &change, who, now_ms(), |_| {
                usize::try_from(buckets).unwrap_or(usize::MAX)
            }) {
                Ok(a) => {
                    let a = Applied {
                        after: a.after.as_ref().map(stored),
                        ..a
                    };
                    write(tx, &a)?;
                    Ok(Ok(a.after))
                }
                Err(refused) => Ok(Err(refused)),
            }
        })
    }

    pub(crate) fn tenant_history(&self, tenant: Option<&str>) -> Result<Vec<AuditEntry>> {
        self.db.read(|tx| {
            let rows = tx.query(
                "SELECT at_ms, who, tenant, action, detail FROM tenant_audit ORDER BY seq",
                &[],
            )?;
            Ok(rows
                .iter()
                .map(|r| AuditEntry {
                    at_ms: r.get(0),
                    who: r.get(1),
                    tenant: String::from_utf8_lossy(r.get::<_, &[u8]>(2)).into_owned(),
                    action: r.get(3),
                    detail: r.get(4),
                })
                .filter(|e| tenant.is_none_or(|id| e.tenant == id))
                .collect())
        })
    }
}
