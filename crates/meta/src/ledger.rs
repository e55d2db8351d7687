//! Per-tenant quota accounting in memory: committed usage plus in-flight reservations.
//!
//! Invariant: for every tenant, `used + reserved <= quota` whenever a reservation is taken or
//! grown; `used` only grows by settling a reservation that already covered the bytes, so
//! concurrent writers cannot push a tenant over its quota, not by one byte. Each account has
//! its own mutex; the map of accounts is only written when tenants are (re)configured.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};

use crate::{MetaError, Result};

mod escrow;

pub use escrow::EscrowGrant;

#[derive(Debug)]
struct Account {
    used: u64,
    reserved: u64,
    quota: u64,
    /// Objects plus multipart uploads in progress: what costs the catalog a record.
    objects: u64,
    max_objects: u64,
    max_buckets: u64,
    /// Shared-tier quota held by node agents (see [`escrow`]), by holder.
    agents: HashMap<String, escrow::Grant>,
}

impl Default for Account {
    fn default() -> Self {
        Self {
            used: 0,
            reserved: 0,
            quota: 0,
            objects: 0,
            max_objects: u64::MAX,
            max_buckets: u64::MAX,
            agents: HashMap::new(),
        }
    }
}

type Shared = Arc<Mutex<Account>>;

fn lock(a: &Shared) -> MutexGuard<'_, Account> {
    // A panic while holding the lock cannot leave the plain counters half-updated.
    a.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Usage, reservations and quota of every tenant.
#[derive(Debug, Default)]
pub struct Ledger {
    accounts: RwLock<HashMap<String, Shared>>,
}

/// One more object (or upload) counted for a write in progress: taken inside the catalog
/// transaction that adds the record, kept once it commits, given back if dropped before.
#[derive(Debug)]
pub struct ObjectSlot {
    account: Shared,
    kept: bool,
}

impl ObjectSlot {
    /// The record it counted has committed: keep the count.
    pub fn keep(mut self) {
        self.kept = true;
    }
}

impl Drop for ObjectSlot {
    fn drop(&mut self) {
        if !self.kept {
            let mut a = lock(&self.account);
            a.objects = a.objects.saturating_sub(1);
        }
    }
}

/// Told how a write ended: `true` when its reservation settled (the write committed),
/// `false` when it was dropped. Attached with [`Reservation::on_end`].
pub type OnEnd = Box<dyn FnOnce(bool) + Send>;

/// Space held for a write in progress. Dropping it gives the space back; settling it turns
/// the bytes actually stored into usage.
pub struct Reservation {
    account: Shared,
    bytes: u64,
    /// The part of `bytes` drawn from a node agent's escrow: `(holder, bytes)`.
    escrow: Option<(String, u64)>,
    /// Told how the write ended (the node agent's shared-tier admission).
    on_end: Option<OnEnd>,
}

impl std::fmt::Debug for Reservation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reservation")
            .field("bytes", &self.bytes)
            .field("escrow", &self.escrow)
            .finish_non_exhaustive()
    }
}

impl Ledger {
    fn account(&self, tenant: &str) -> Result<Shared> {
        self.accounts
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(tenant)
            .cloned()
            .ok_or(MetaError::UnknownTenant)
    }

    fn account_or_insert(&self, tenant: &str) -> Shared {
        if let Ok(a) = self.account(tenant) {
            return a;
        }
        self.accounts
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(tenant.to_owned())
            .or_default()
            .clone()
    }

    /// Sets a tenant's quota (adding the tenant if new). Lowering a quota below current usage
    /// refuses new writes but deletes nothing.
    pub fn set_quota(&self, tenant: &str, quota: u64) {
        lock(&self.account_or_insert(tenant)).quota = quota;
    }

    /// Sets how many objects and multipart uploads in progress a tenant may hold (adding the
    /// tenant if new). Lowering it below the current count refuses new ones, deletes nothing.
    pub fn set_max_objects(&self, tenant: &str, max: u64) {
        lock(&self.account_or_insert(tenant)).max_objects = max;
    }

    /// Sets how many buckets a tenant may own (adding the tenant if new); lowering it deletes
    /// nothing.
    pub fn set_max_buckets(&self, tenant: &str, max: u64) {
        lock(&self.account_or_insert(tenant)).max_buckets = max;
    }

    /// How many buckets a tenant may own (`u64::MAX`: any, or an unknown tenant).
    pub fn max_buckets(&self, tenant: &str) -> u64 {
        self.account(tenant)
            .map_or(u64::MAX, |a| lock(&a).max_buckets)
    }

    /// Sets a tenant's committed usage and object count, as recovered from the catalog at
    /// start-up.
    pub fn set_used(&self, tenant: &str, used: u64, objects: u64) {
        let account = self.account_or_insert(tenant);
        let mut a = lock(&account);
        a.used = used;
        a.objects = objects;
    }

    /// Counts one more object or upload, or fails with `TooManyObjects`.
    pub fn take_object(&self, tenant: &str) -> Result<ObjectSlot> {
        let account = self.account(tenant)?;
        {
            let mut a = lock(&account);
            if a.objects >= a.max_objects {
                return Err(MetaError::TooManyObjects { max: a.max_objects });
            }
            a.objects += 1;
        }
        Ok(ObjectSlot {
            account,
            kept: false,
        })
    }

    /// `(objects, max_objects)` of a tenant: objects plus multipart uploads in progress.
    pub fn objects(&self, tenant: &str) -> Option<(u64, u64)> {
        let a = self.account(tenant).ok()?;
        let a = lock(&a);
        Some((a.objects, a.max_objects))
    }

    /// Takes `bytes` of the tenant's quota or fails with `QuotaExceeded`.
    pub fn reserve(&self, tenant: &str, bytes: u64) -> Result<Reservation> {
        let account = self.account(tenant)?;
        take(&account, bytes)?;
        Ok(Reservation {
            account,
            bytes: 0,
            escrow: None,
            on_end: None,
        }
        .with(bytes))
    }

    /// `(used, reserved, quota)` of a tenant.
    pub fn usage(&self, tenant: &str) -> Option<(u64, u64, u64)> {
        let a = self.account(tenant).ok()?;
        let a = lock(&a);
        Some((a.used, a.reserved, a.quota))
    }

    /// Every tenant's `(id, used, reserved, quota)`, sorted by id.
    pub fn all(&self) -> Vec<(String, u64, u64, u64)> {
        let map = self.accounts.read().unwrap_or_else(PoisonError::into_inner);
        let mut out: Vec<_> = map
            .iter()
            .map(|(t, a)| {
                let a = lock(a);
                (t.clone(), a.used, a.reserved, a.quota)
            })
            .collect();
        out.sort();
        out
    }

    /// Counts committed bytes and objects that arrived without a reservation (a restore from
    /// the backend), adding the tenant if new.
    pub fn add(&self, tenant: &str, bytes: u64, objects: u64) {
        let account = self.account_or_insert(tenant);
        let mut a = lock(&account);
        a.used = a.used.saturating_add(bytes);
        a.objects = a.objects.saturating_add(objects);
    }

    /// Gives back committed bytes and object slots (a delete, an abort, a replaced object).
    pub fn free(&self, tenant: &str, bytes: u64, objects: u64) {
        if bytes == 0 && objects == 0 {
            return;
        }
        let account = self.account_or_insert(tenant);
        let mut a = lock(&account);
        a.used = a.used.saturating_sub(bytes);
        a.objects = a.objects.saturating_sub(objects);
    }
}

fn take(account: &Shared, bytes: u64) -> Result<()> {
    let mut a = lock(account);
    take_locked(&mut a, bytes, escrow::now_ms())
}

/// Takes `bytes` of free space: what neither usage, reservations nor a live agent grant holds.
fn take_locked(a: &mut Account, bytes: u64, now_ms: i64) -> Result<()> {
    let held = a
        .used
        .saturating_add(a.reserved)
        .saturating_add(escrow::live_total(a, now_ms));
    let available = a.quota.saturating_sub(held);
    if bytes > available {
        return Err(MetaError::QuotaExceeded {
            needed: bytes,
            available,
            quota: a.quota,
        });
    }
    a.reserved += bytes;
    Ok(())
}

impl Reservation {
    fn with(mut self, bytes: u64) -> Self {
        self.bytes = bytes;
        self
    }

    /// Bytes currently held.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Holds `more` bytes in addition (a body of unknown length, chunk by chunk).
    pub fn grow(&mut self, more: u64) -> Result<()> {
        take(&self.account, more)?;
        self.bytes += more;
        Ok(())
    }

    /// Converts the reservation into `added` bytes of usage and gives `freed` bytes back, in
    /// one step under the tenant's lock. `added` beyond the reservation is still counted
    /// (the catalog is the truth), but callers reserve first so it never is.
    pub fn settle(mut self, added: u64, freed: u64) {
        let mut a = lock(&self.account);
        a.reserved = a.reserved.saturating_sub(self.bytes);
        a.used = a.used.saturating_add(added).saturating_sub(freed);
        self.bytes = 0;
        // What it drew from an agent's escrow is spent.
        self.escrow = None;
        drop(a);
        if let Some(f) = self.on_end.take() {
            f(true);
        }
    }

    /// Tells `f` how the write ends: `true` once this reservation settles, `false` if it is
    /// dropped unsettled.
    pub fn on_end(&mut self, f: OnEnd) {
        self.on_end = Some(f);
    }

    /// The node agent whose escrow this reservation drew from, and how much it drew.
    pub fn escrow(&self) -> Option<(&str, u64)> {
        self.escrow.as_ref().map(|(h, b)| (h.as_str(), *b))
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if let Some(f) = self.on_end.take() {
            f(false);
        }
        if self.bytes > 0 {
            let mut a = lock(&self.account);
            a.reserved = a.reserved.saturating_sub(self.bytes);
            // A write that did not commit gives what it drew back to the agent's grant.
            if let Some((holder, drawn)) = self.escrow.take() {
                escrow::give_back(&mut a, &holder, drawn);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_never_overshoot_under_threads() {
        let ledger = Arc::new(Ledger::default());
        ledger.set_quota("t", 1000);
        let granted = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let handles: Vec<_> = (0..16)
            .map(|_| {
                let ledger = Arc::clone(&ledger);
                let granted = Arc::clone(&granted);
                std::thread::spawn(move || {
                    let mut held = Vec::new();
                    for _ in 0..100 {
                        if let Ok(r) = ledger.reserve("t", 7) {
                            granted.fetch_add(7, std::sync::atomic::Ordering::SeqCst);
                            held.push(r);
                        }
                    }
                    held
                })
            })
            .collect();
        let held: Vec<_> = handles
            .into_iter()
            .flat_map(|h| h.join().expect("thread"))
            .collect();
        let total = granted.load(std::sync::atomic::Ordering::SeqCst);
        assert!(total <= 1000, "granted {total}");
        assert_eq!(total, 1000 / 7 * 7, "the quota should be filled exactly");
        drop(held);
        assert_eq!(ledger.usage("t"), Some((0, 0, 1000)));
    }

    #[test]
    fn settle_moves_reserved_to_used_and_frees() {
        let ledger = Ledger::default();
        ledger.set_quota("t", 100);
        ledger.set_used("t", 30, 0);
        let r = ledger.reserve("t", 50).expect("fits");
        assert!(matches!(
            ledger.reserve("t", 21),
            Err(MetaError::QuotaExceeded { available: 20, .. })
        ));
        r.settle(40, 30);
        assert_eq!(ledger.usage("t"), Some((40, 0, 100)));
    }

    #[test]
    fn growing_past_the_quota_fails_and_keeps_what_was_held() {
        let ledger = Ledger::default();
        ledger.set_quota("t", 10);
        let mut r = ledger.reserve("t", 6).expect("fits");
        assert!(r.grow(5).is_err());
        assert_eq!(r.bytes(), 6);
        r.grow(4).expect("fits exactly");
        drop(r);
        assert_eq!(ledger.usage("t"), Some((0, 0, 10)));
    }

    #[test]
    fn unknown_tenants_cannot_reserve() {
        let ledger = Ledger::default();
        assert!(matches!(
            ledger.reserve("ghost", 1),
            Err(MetaError::UnknownTenant)
        ));
    }
}
