//! Tenants and their access keys (`tenants`, `tenant_keys`), seeded from the gateways'
//! configuration files: the first file to name a tenant inserts it, and from then on the
//! catalog's settings and keys are the tenant's (a file that says otherwise is reported).
//! Secrets are stored as the file gives them, in clear.

use std::collections::BTreeMap;

use sluice_meta::{Result, SeedReport, TenantKeySpec, TenantSpec};

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

use sluice_meta::now_ms;

fn read_all(tx: &Tx<'_>) -> TxResult<BTreeMap<String, TenantSpec>> {
    let mut all = BTreeMap::new();
    for r in tx.query(
        "SELECT id, capacity, max_objects, max_buckets, reservation, weight, qos_limit
         FROM tenants",
        &[],
    )? {
        let id = String::from_utf8_lossy(r.get::<_, &[u8]>(0)).into_owned();
        all.insert(
            id.clone(),
            TenantSpec {
                id,
                capacity: from_db(r.get(1)),
                max_objects: from_db(r.get(2)),
                max_buckets: from_db(r.get(3)),
                reservation: r.get(4),
                weight: r.get(5),
                limit: r.get(6),
                keys: Vec::new(),
            },
        );
    }
    for r in tx.query(
        "SELECT tenant, access_key, secret FROM tenant_keys ORDER BY access_key",
        &[],
    )? {
        let id = String::from_utf8_lossy(r.get::<_, &[u8]>(0)).into_owned();
        if let Some(t) = all.get_mut(&id) {
            t.keys.push(TenantKeySpec {
                access_key: r.get(1),
                secret_key: r.get(2),
            });
        }
    }
    Ok(all)
}

impl Inner {
    pub(crate) fn seed_tenants(&self, specs: &[TenantSpec]) -> Result<SeedReport> {
        self.db.write(|tx| {
            let existing = read_all(tx)?;
            let owner: BTreeMap<&str, &str> = existing
                .values()
                .flat_map(|t| {
                    t.keys
                        .iter()
                        .map(|k| (k.access_key.as_str(), t.id.as_str()))
                })
                .collect();
            let mut report = SeedReport::default();
            let now = now_ms();
            for spec in specs {
                if let Some(have) = existing.get(&spec.id) {
                    let diff = stored(spec).differences(have);
                    if !diff.is_empty() {
                        report.conflicts.push((spec.id.clone(), diff));
                    }
                    continue;
                }
                // A key another tenant holds is that tenant's: insert nothing for this one.
                if spec
                    .keys
                    .iter()
                    .any(|k| owner.contains_key(k.access_key.as_str()))
                {
                    report.conflicts.push((spec.id.clone(), vec!["keys"]));
                    continue;
                }
                tx.execute(
                    "INSERT INTO tenants
                     (id, capacity, max_objects, max_buckets, reservation, weight, qos_limit,
                      created_ms)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                    &[
                        &spec.id.as_bytes(),
                        &to_db(spec.capacity),
                        &to_db(spec.max_objects),
                        &to_db(spec.max_buckets),
                        &spec.reservation,
                        &spec.weight,
                        &spec.limit,
                        &now,
                    ],
                )?;
                for k in &spec.keys {
                    tx.execute(
                        "INSERT INTO tenant_keys (access_key, tenant, secret, created_ms)
                         VALUES ($1, $2, $3, $4)",
                        &[&k.access_key, &spec.id.as_bytes(), &k.secret_key, &now],
                    )?;
                }
                report.inserted.push(spec.id.clone());
            }
            Ok(report)
        })
    }

    pub(crate) fn tenants(&self) -> Result<Vec<TenantSpec>> {
        self.db.read(|tx| Ok(read_all(tx)?.into_values().collect()))
    }
}
