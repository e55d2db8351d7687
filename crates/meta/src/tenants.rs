//! Tenants as a catalog stores them: settings, access keys and the audit record of every
//! administrative change.
//!
//! Every engine stores the deployment's tenants: a shared catalog those of every gateway
//! sharing it, the embedded one those of its gateway. The configuration file's `[[tenant]]`
//! entries *seed* the catalog ([`crate::Engine::seed_tenants`]); from then on tenants are
//! changed online ([`crate::Engine::change_tenant`]: `sluice tenant add|set|key|remove`), and
//! each change, the seeding's included, leaves an [`AuditEntry`] in the same transaction.
//!
//! A tenant changed online is no longer the file's: a file that says otherwise is reported
//! as a conflict and the catalog's settings are kept. A tenant only the file ever wrote
//! (`online == false`) follows its file on the embedded catalog, which one file governs
//! (a SIGHUP reload changes it as it did before tenants lived in the catalog); on a shared
//! catalog, which several files seed, the first file to name a tenant wins and the others'
//! differences are reported.
//!
//! A tenant's node-local settings ([`LocalSettings`]: what the node agents' `[[tenant]]`
//! `local_capacity`, `local_reservation`, `local_weight` and `local_limit` say) may be held
//! here too, set online only (`sluice tenant add|set --local-capacity ...`): the files seed
//! none of them and seeding compares none of them. Each one the catalog holds is served to
//! the agents (`GET /admin/tenants`); one it does not hold (every record written before the
//! catalog held them) leaves the agent's own file governing it, as before.
//!
//! Secrets are stored as the caller gives them: the gateway seals them before they reach an
//! engine (`sluice-gateway`'s `admin::seal`), so a catalog dump alone yields no usable key.

use serde::{Deserialize, Serialize};

/// One access key of a tenant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantKeySpec {
    pub access_key: String,
    /// As stored: sealed by the gateway (see the module doc), or the file's text.
    pub secret_key: String,
    /// When the key was created, ms since the Unix epoch.
    pub created_ms: i64,
    /// After this instant the key no longer authenticates; `None`: never.
    pub expires_ms: Option<i64>,
    /// When the key was revoked; a revoked key never authenticates again.
    pub revoked_ms: Option<i64>,
}

impl TenantKeySpec {
    /// A key created at `created_ms`, without expiry.
    pub fn new(
        access_key: impl Into<String>,
        secret_key: impl Into<String>,
        created_ms: i64,
    ) -> Self {
        Self {
            access_key: access_key.into(),
            secret_key: secret_key.into(),
            created_ms,
            expires_ms: None,
            revoked_ms: None,
        }
    }

    /// Whether the key authenticates at `now_ms`: not revoked, not expired.
    pub fn live(&self, now_ms: i64) -> bool {
        self.revoked_ms.is_none() && self.expires_ms.is_none_or(|e| now_ms < e)
    }
}

/// A tenant's node-local settings as the catalog holds them; `None`: not held (each agent's
/// own file governs it, or its default: no local quota, no local reservation, weight 1, no
/// local limit).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LocalSettings {
    /// Hard quota on each node's local device, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<u64>,
    /// The tenant's share of each node's local device (dmClock), bytes per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reservation: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<f64>,
}

impl LocalSettings {
    /// Whether the catalog holds none of them.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// As audit detail and `tenant list` show them (`null`: the agents' files govern).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "local_capacity": self.capacity,
            "local_reservation": self.reservation,
            "local_weight": self.weight,
            "local_limit": self.limit,
        })
    }
}

/// A tenant's settings and keys (what `[[tenant]]` says for the gateway).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TenantSpec {
    pub id: String,
    /// Hard quota, bytes (`u64::MAX`: none).
    pub capacity: u64,
    /// Objects and uploads in progress (`u64::MAX`: any).
    pub max_objects: u64,
    pub max_buckets: u64,
    /// dmClock reservation and limit in bytes per second, and the weight.
    pub reservation: f64,
    pub weight: f64,
    pub limit: Option<f64>,
    /// By access key; revoked and expired keys stay listed (without use).
    pub keys: Vec<TenantKeySpec>,
    /// Changed online since the file seeded it (or created online): the file no longer
    /// governs it (see the module doc).
    #[serde(default)]
    pub online: bool,
    /// The node-local settings held here (see the module doc); records written before the
    /// catalog held them read as none.
    #[serde(default, skip_serializing_if = "LocalSettings::is_empty")]
    pub local: LocalSettings,
}

/// What seeding found: tenants inserted, tenants updated or removed because their file
/// changed (the embedded catalog only: see the module doc), and tenants the catalog holds
/// with other settings or keys than the file (the catalog's are kept).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SeedReport {
    pub inserted: Vec<String>,
    pub updated: Vec<String>,
    pub removed: Vec<String>,
    /// `(tenant, fields that differ)`; `keys` when the key sets differ.
    pub conflicts: Vec<(String, Vec<&'static str>)>,
}

/// Settings `sluice tenant set` changes; `None` leaves a setting as it is.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TenantPatch {
    pub capacity: Option<u64>,
    pub max_objects: Option<u64>,
    pub max_buckets: Option<u64>,
    pub reservation: Option<f64>,
    pub weight: Option<f64>,
    /// `Some(None)`: no limit.
    pub limit: Option<Option<f64>>,
    /// The node-local settings ([`LocalSettings`]); `Some(None)`: no longer held here (the
    /// agents' files govern it again).
    pub local_capacity: Option<Option<u64>>,
    pub local_reservation: Option<Option<f64>>,
    pub local_weight: Option<Option<f64>>,
    pub local_limit: Option<Option<f64>>,
}

/// One administrative change of a tenant, applied in one transaction with its audit entry.
#[derive(Debug, Clone, PartialEq)]
pub enum TenantChange {
    /// A new tenant with its first key(s).
    Add(TenantSpec),
    Set {
        id: String,
        patch: TenantPatch,
    },
    AddKey {
        id: String,
        key: TenantKeySpec,
    },
    RevokeKey {
        id: String,
        access_key: String,
    },
    /// Refused while the tenant owns a bucket.
    Remove {
        id: String,
    },
}

/// Why a change was refused (nothing changed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TenantRefusal {
    #[error("no tenant {0:?}")]
    NoSuchTenant(String),
    #[error("tenant {0:?} exists already")]
    TenantExists(String),
    #[error("access key {access_key} is tenant {tenant:?}'s already")]
    KeyTaken { access_key: String, tenant: String },
    #[error("tenant {tenant:?} has no access key {access_key}")]
    NoSuchKey { tenant: String, access_key: String },
    #[error("tenant {tenant:?} owns {buckets} bucket(s): remove its data first, or use --purge")]
    NotEmpty { tenant: String, buckets: usize },
    #[error("invalid tenant: {0}")]
    Invalid(String),
}

/// One administrative change as the audit record keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// When, ms since the Unix epoch.
    pub at_ms: i64,
    /// Who: `config` for seeding, else the administrator the caller names (`admin@host`,
    /// the catalog's user).
    pub who: String,
    pub tenant: String,
    /// `add`, `set`, `key-add`, `key-revoke`, `remove`, or for seeding `seed`, `seed-update`,
    /// `seed-remove`.
    pub action: String,
    /// What changed, as JSON (never a secret).
    pub detail: String,
}

impl TenantSpec {
    /// The fields in which `self` and `other` differ, named as in `[[tenant]]`. Keys are
    /// compared by access key and secret among those live at `now_ms`.
    pub fn differences(&self, other: &Self, now_ms: i64) -> Vec<&'static str> {
        let mut d = Vec::new();
        if self.capacity != other.capacity {
            d.push("capacity");
        }
        if self.max_objects != other.max_objects {
            d.push("max_objects");
        }
        if self.max_buckets != other.max_buckets {
            d.push("max_buckets");
        }
        if self.reservation.to_bits() != other.reservation.to_bits() {
            d.push("reservation");
        }
        if self.weight.to_bits() != other.weight.to_bits() {
            d.push("weight");
        }
        if self.limit.map(f64::to_bits) != other.limit.map(f64::to_bits) {
            d.push("limit");
        }
        if self.live_keys(now_ms) != other.live_keys(now_ms) {
            d.push("keys");
        }
        d
    }

    /// `(access key, secret)` of the keys live at `now_ms`, sorted.
    fn live_keys(&self, now_ms: i64) -> Vec<(&str, &str)> {
        let mut k: Vec<_> = self
            .keys
            .iter()
            .filter(|k| k.live(now_ms))
            .map(|k| (k.access_key.as_str(), k.secret_key.as_str()))
            .collect();
        k.sort_unstable();
        k
    }

    /// The tenant's settings as audit detail (no secret).
    fn settings_json(&self) -> serde_json::Value {
        let limit = |n: u64| (n != u64::MAX).then_some(n);
        serde_json::json!({
            "capacity": limit(self.capacity),
            "max_objects": limit(self.max_objects),
            "max_buckets": limit(self.max_buckets),
            "reservation": self.reservation,
            "weight": self.weight,
            "limit": self.limit,
            "keys": self.keys.iter().map(|k| &k.access_key).collect::<Vec<_>>(),
            "local": self.local.to_json(),
        })
    }
}

/// What an engine must write for a change: the tenant's new state (`None`: removed) and the
/// audit entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Applied {
    pub id: String,
    pub after: Option<TenantSpec>,
    pub audit: AuditEntry,
}

fn check_settings(s: &TenantSpec) -> Result<(), TenantRefusal> {
    if s.id.is_empty()
        || s.id.len() > 64
        || !s
            .id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    {
        return Err(TenantRefusal::Invalid(format!(
            "tenant id {:?}: 1 to 64 characters of A-Z a-z 0-9 - _ .",
            s.id
        )));
    }
    if !(s.reservation.is_finite() && s.reservation >= 0.0) {
        return Err(TenantRefusal::Invalid(
            "reservation must be a rate ≥ 0".into(),
        ));
    }
    if !(s.weight.is_finite() && s.weight > 0.0) {
        return Err(TenantRefusal::Invalid("weight must be > 0".into()));
    }
    if let Some(l) = s.limit
        && !(l.is_finite() && l > 0.0 && l >= s.reservation)
    {
        return Err(TenantRefusal::Invalid(
            "limit must be a rate > 0 and at least the reservation".into(),
        ));
    }
    check_local(&s.local)?;
    for k in &s.keys {
        if k.access_key.len() < 3
            || k.access_key.len() > 128
            || !k.access_key.bytes().all(|b| b.is_ascii_graphic())
        {
            return Err(TenantRefusal::Invalid(format!(
                "access key {:?}: 3 to 128 printable characters",
                k.access_key
            )));
        }
    }
    Ok(())
}

/// The node-local settings, by the rules of the agents' files (`sluice_config`'s `local_qos`).
/// A local limit below a local reservation held here is refused; against a reservation only
/// an agent's file sets, each agent checks it (and reports it).
fn check_local(l: &LocalSettings) -> Result<(), TenantRefusal> {
    let invalid = |m: &str| Err(TenantRefusal::Invalid(m.to_owned()));
    if l.capacity.is_some_and(|c| i64::try_from(c).is_err()) {
        return invalid("local_capacity: at most 8 EiB");
    }
    if l.reservation.is_some_and(|r| !(r.is_finite() && r >= 0.0)) {
        return invalid("local_reservation: must be a rate of zero or more");
    }
    if l.weight.is_some_and(|w| !(w.is_finite() && w > 0.0)) {
        return invalid("local_weight: must be > 0");
    }
    if let Some(lim) = l.limit {
        if !(lim.is_finite() && lim > 0.0) {
            return invalid("local_limit: must be > 0");
        }
        if l.reservation.is_some_and(|r| lim < r) {
            return invalid("local_limit: must not be below the local_reservation");
        }
    }
    Ok(())
}

/// The owner of `access_key` among `all`, if any.
fn owner<'a>(all: &'a [TenantSpec], access_key: &str) -> Option<&'a str> {
    all.iter()
        .find(|t| t.keys.iter().any(|k| k.access_key == access_key))
        .map(|t| t.id.as_str())
}

/// Applies `change` to the catalog's tenants `all` (every engine's logic: the engines only
/// store the result). `buckets` counts the buckets the changed tenant owns (for `Remove`).
pub fn apply_change(
    all: &[TenantSpec],
    change: &TenantChange,
    who: &str,
    now_ms: i64,
    buckets: impl FnOnce(&str) -> usize,
) -> Result<Applied, TenantRefusal> {
    let find = |id: &str| {
        all.iter()
            .find(|t| t.id == id)
            .cloned()
            .ok_or_else(|| TenantRefusal::NoSuchTenant(id.to_owned()))
    };
    let entry = |tenant: &str, action: &str, detail: serde_json::Value| AuditEntry {
        at_ms: now_ms,
        who: who.to_owned(),
        tenant: tenant.to_owned(),
        action: action.to_owned(),
        detail: detail.to_string(),
    };
    let (id, after, audit) = match change {
        TenantChange::Add(spec) => {
            if all.iter().any(|t| t.id == spec.id) {
                return Err(TenantRefusal::TenantExists(spec.id.clone()));
            }
            check_settings(spec)?;
            for k in &spec.keys {
                if let Some(t) = owner(all, &k.access_key) {
                    return Err(TenantRefusal::KeyTaken {
                        access_key: k.access_key.clone(),
                        tenant: t.to_owned(),
                    });
                }
            }
            let mut t = spec.clone();
            t.online = true;
            let audit = entry(&t.id, "add", t.settings_json());
            (t.id.clone(), Some(t), audit)
        }
        TenantChange::Set { id, patch } => {
            let mut t = find(id)?;
            let before = t.settings_json();
            if let Some(v) = patch.capacity {
                t.capacity = v;
            }
            if let Some(v) = patch.max_objects {
                t.max_objects = v;
            }
            if let Some(v) = patch.max_buckets {
                t.max_buckets = v;
            }
            if let Some(v) = patch.reservation {
                t.reservation = v;
            }
            if let Some(v) = patch.weight {
                t.weight = v;
            }
            if let Some(v) = patch.limit {
                t.limit = v;
            }
            if let Some(v) = patch.local_capacity {
                t.local.capacity = v;
            }
            if let Some(v) = patch.local_reservation {
                t.local.reservation = v;
            }
            if let Some(v) = patch.local_weight {
                t.local.weight = v;
            }
            if let Some(v) = patch.local_limit {
                t.local.limit = v;
            }
            check_settings(&t)?;
            t.online = true;
            let audit = entry(
                id,
                "set",
                serde_json::json!({ "before": before, "after": t.settings_json() }),
            );
            (id.clone(), Some(t), audit)
        }
        TenantChange::AddKey { id, key } => {
            let mut t = find(id)?;
            if let Some(o) = owner(all, &key.access_key) {
                return Err(TenantRefusal::KeyTaken {
                    access_key: key.access_key.clone(),
                    tenant: o.to_owned(),
                });
            }
            t.keys.push(key.clone());
            check_settings(&t)?;
            t.online = true;
            let audit = entry(
                id,
                "key-add",
                serde_json::json!({ "access_key": key.access_key, "expires_ms": key.expires_ms }),
            );
            (id.clone(), Some(t), audit)
        }
        TenantChange::RevokeKey { id, access_key } => {
            let mut t = find(id)?;
            let Some(k) = t.keys.iter_mut().find(|k| &k.access_key == access_key) else {
                return Err(TenantRefusal::NoSuchKey {
                    tenant: id.clone(),
                    access_key: access_key.clone(),
                });
            };
            k.revoked_ms.get_or_insert(now_ms);
            t.online = true;
            let audit = entry(
                id,
                "key-revoke",
                serde_json::json!({ "access_key": access_key }),
            );
            (id.clone(), Some(t), audit)
        }
        TenantChange::Remove { id } => {
            let t = find(id)?;
            let n = buckets(id);
            if n > 0 {
                return Err(TenantRefusal::NotEmpty {
                    tenant: id.clone(),
                    buckets: n,
                });
            }
            let audit = entry(id, "remove", t.settings_json());
            (id.clone(), None, audit)
        }
    };
    Ok(Applied { id, after, audit })
}

/// Seeding `specs` (the file's tenants) into `all` (the catalog's): what to write, in order,
/// and the report. `follow_file`: tenants only the file wrote follow it (the embedded
/// catalog, see the module doc); otherwise the catalog's are kept and differences reported.
pub fn plan_seed(
    all: &[TenantSpec],
    specs: &[TenantSpec],
    follow_file: bool,
    now_ms: i64,
) -> (Vec<Applied>, SeedReport) {
    let mut report = SeedReport::default();
    let mut writes = Vec::new();
    let mut state: Vec<TenantSpec> = all.to_vec();
    let entry = |tenant: &str, action: &str, detail: serde_json::Value| AuditEntry {
        at_ms: now_ms,
        who: "config".to_owned(),
        tenant: tenant.to_owned(),
        action: action.to_owned(),
        detail: detail.to_string(),
    };
    for spec in specs {
        let taken = spec
            .keys
            .iter()
            .any(|k| owner(&state, &k.access_key).is_some_and(|o| o != spec.id));
        if let Some(i) = state.iter().position(|t| t.id == spec.id) {
            let have = &state[i];
            let diff = spec.differences(have, now_ms);
            if diff.is_empty() {
                continue;
            }
            if !follow_file || have.online || taken {
                report.conflicts.push((spec.id.clone(), diff));
                continue;
            }
            // Keys the file still names keep their creation time; the node-local settings
            // are not the file's to change.
            let mut t = spec.clone();
            t.local = have.local.clone();
            for k in &mut t.keys {
                if let Some(old) = have
                    .keys
                    .iter()
                    .find(|o| o.access_key == k.access_key && o.secret_key == k.secret_key)
                {
                    k.created_ms = old.created_ms;
                }
            }
            let audit = entry(
                &t.id,
                "seed-update",
                serde_json::json!({ "changed": diff, "after": t.settings_json() }),
            );
            state[i] = t.clone();
            report.updated.push(t.id.clone());
            writes.push(Applied {
                id: t.id.clone(),
                after: Some(t),
                audit,
            });
        } else {
            // A key another tenant holds is that tenant's: insert nothing for this one.
            if taken {
                report.conflicts.push((spec.id.clone(), vec!["keys"]));
                continue;
            }
            let mut t = spec.clone();
            t.online = false;
            t.local = LocalSettings::default();
            let audit = entry(&t.id, "seed", t.settings_json());
            state.push(t.clone());
            report.inserted.push(t.id.clone());
            writes.push(Applied {
                id: t.id.clone(),
                after: Some(t),
                audit,
            });
        }
    }
    if follow_file {
        for t in all {
            if !t.online && !specs.iter().any(|s| s.id == t.id) {
                report.removed.push(t.id.clone());
                writes.push(Applied {
                    id: t.id.clone(),
                    after: None,
                    audit: entry(&t.id, "seed-remove", serde_json::json!({})),
                });
            }
        }
    }
    (writes, report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(id: &str, key: &str) -> TenantSpec {
        TenantSpec {
            id: id.into(),
            capacity: 1 << 20,
            max_objects: u64::MAX,
            max_buckets: 1000,
            reservation: 0.0,
            weight: 1.0,
            limit: None,
            keys: vec![TenantKeySpec::new(key, "s", 1)],
            online: false,
            local: LocalSettings::default(),
        }
    }

    #[test]
    fn a_key_lives_until_revoked_or_expired() {
        let mut k = TenantKeySpec::new("AK", "s", 0);
        assert!(k.live(10));
        k.expires_ms = Some(10);
        assert!(k.live(9) && !k.live(10));
        k.expires_ms = None;
        k.revoked_ms = Some(5);
        assert!(!k.live(0));
    }

    #[test]
    fn changes_are_checked_before_anything_is_written() {
        let all = vec![spec("a", "AKA")];
        let none = |_: &str| 0;
        let add = |s| apply_change(&all, &TenantChange::Add(s), "admin", 5, none);
        assert_eq!(
            add(spec("a", "AKX")).expect_err("exists"),
            TenantRefusal::TenantExists("a".into())
        );
        assert!(matches!(
            add(spec("b", "AKA")),
            Err(TenantRefusal::KeyTaken { .. })
        ));
        assert!(matches!(
            add(spec("b/c", "AKB")),
            Err(TenantRefusal::Invalid(_))
        ));
        let ok = add(spec("b", "AKB")).expect("new tenant");
        assert!(
            ok.after.expect("stored").online,
            "a tenant added online is not the file's"
        );
        assert_eq!(
            (ok.audit.who.as_str(), ok.audit.action.as_str()),
            ("admin", "add")
        );
        let remove = apply_change(
            &all,
            &TenantChange::Remove { id: "a".into() },
            "admin",
            5,
            |_| 2,
        );
        assert_eq!(
            remove.expect_err("holds data"),
            TenantRefusal::NotEmpty {
                tenant: "a".into(),
                buckets: 2
            }
        );
        let revoke = TenantChange::RevokeKey {
            id: "a".into(),
            access_key: "AKA".into(),
        };
        let t = apply_change(&all, &revoke, "admin", 7, none)
            .expect("revoked")
            .after
            .expect("kept");
        assert_eq!(t.keys[0].revoked_ms, Some(7));
        assert!(!t.keys[0].live(8));
    }

    #[test]
    fn seeding_follows_the_file_only_for_what_only_the_file_wrote() {
        let mut online = spec("b", "AKB");
        online.online = true;
        let all = vec![spec("a", "AKA"), online];
        let mut file_a = spec("a", "AKA");
        file_a.capacity = 5;
        let mut file_b = spec("b", "AKB");
        file_b.capacity = 5;
        let (writes, report) = plan_seed(&all, &[file_a.clone(), file_b.clone()], true, 9);
        assert_eq!(report.updated, ["a"]);
        assert_eq!(report.conflicts, [("b".to_owned(), vec!["capacity"])]);
        assert_eq!(writes.len(), 1);
        let (_, shared) = plan_seed(&all, &[file_a, file_b], false, 9);
        assert!(
            shared.updated.is_empty() && shared.conflicts.len() == 2,
            "{shared:?}"
        );
        let (writes, report) = plan_seed(&all, &[], true, 9);
        assert_eq!(
            report.removed,
            ["a"],
            "a tenant managed online outlives its file entry"
        );
        assert!(writes[0].after.is_none());
    }
}
