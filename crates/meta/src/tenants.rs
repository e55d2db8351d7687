//! Tenants as a catalog stores them: settings and access keys.
//!
//! A shared catalog holds every tenant of the deployment (seeded from each gateway's
//! `[[tenant]]` entries), so that every gateway serves the same tenants. The embedded catalog
//! stores none: it is private to one process, whose file is then the only source, and a copy
//! in the redb file would be a second truth to keep in step for no reader.

/// One access key of a tenant. The secret is stored as given (the file's text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantKeySpec {
    pub access_key: String,
    pub secret_key: String,
}

/// A tenant's settings and keys (what `[[tenant]]` says for the gateway).
#[derive(Debug, Clone, PartialEq)]
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
    /// By access key.
    pub keys: Vec<TenantKeySpec>,
}

/// What seeding found: tenants inserted, and tenants the catalog already holds with other
/// settings or keys (the catalog's are kept).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SeedReport {
    pub inserted: Vec<String>,
    /// `(tenant, fields that differ)`; `keys` when the key sets differ.
    pub conflicts: Vec<(String, Vec<&'static str>)>,
}

impl TenantSpec {
    /// The fields in which `self` and `other` differ, named as in `[[tenant]]`.
    pub fn differences(&self, other: &Self) -> Vec<&'static str> {
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
        let sorted = |s: &Self| {
            let mut k = s.keys.clone();
            k.sort_by(|a, b| a.access_key.cmp(&b.access_key));
            k
        };
        if sorted(self) != sorted(other) {
            d.push("keys");
        }
        d
    }
}
