//! Shared-tier quota held by the node before it acknowledges: every write the agent
//! acknowledges can drain, because the bytes it will take upstream are held for it there.
//!
//! Per tenant the agent keeps a [`Book`]: what the gateways granted this node (its escrow,
//! `sluice_s3::front::escrow`), and what is charged against it — `base`, the bytes still to
//! drain when the grant was last asked for (the journal's pending bytes plus the parts of
//! local multipart uploads in progress), `reserved`, writes admitted and not yet ended, and
//! `committed`, writes admitted and committed since. Invariant: `base + reserved + committed
//! ≤ granted` while the lease is live, so what is acknowledged and not yet drained never
//! exceeds what is held upstream. The drain's uploads name this node
//! (`x-sluice-escrow-holder`), so the gateway spends the escrow instead of reserving anew.
//! When an upload is drained both sides fall together: the gateway's escrow by its size, and
//! the journal's pending bytes the next time `base` is measured.
//!
//! - **Admission** ([`SharedQuota::admit`]): a write of `n` bytes takes `n` from the headroom
//!   (`granted − base − reserved − committed`) at once. When short, one request per tenant at
//!   a time asks for `base + reserved + committed + n + chunk` (chunk: a sixteenth of the quota,
//!   at most 64 MiB, and 64 MiB before the quota is known); the gateway grants up to what is
//!   free, so during an outage of the gateways the node keeps acknowledging up to that chunk. Still short: 403 `QuotaExceeded`
//!   naming the shared tier. The gateway unreachable: what is held is still admitted; beyond
//!   it, 503 `SlowDown` (the node cannot know whether the shared tier would take it).
//! - **End**: the admission rides on the write's local reservation; a write that commits moves
//!   its bytes from `reserved` to `committed`, one that fails gives them back.
//! - **Renewal** ([`SharedQuota::renew_all`], every third of the lease): each tenant's grant is
//!   set again to what it needs plus what it has spare (at most a chunk), measured afresh, which
//!   also renews the lease. A tenant with nothing to drain and nothing held lets it lapse.
//! - **Restart**: the first renewal runs at start, for every tenant with bytes in the journal,
//!   so what was acknowledged before a crash is held again before the drain needs it.
//! - **Lapse**: a grant is trusted locally until `sent + lease` (the local clock when the request
//!   left, before the gateway's grant): after that nothing is admitted without a new answer.
//! - A tenant without a quota upstream is told so (`unlimited`) and needs no round trip until
//!   the lease passes.
//!
//! Measuring `base` races commits and ends only in the safe direction: a write that committed
//! while `base` was read may be counted twice (in `base` and in `committed`), never not at all.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use sluice_meta::{Catalog, OnEnd};
use sluice_s3::error::{ApiError, ApiResult, TierError};

use crate::drain::pending_bytes;
use crate::journal::Journal;
use crate::upstream::{EscrowAnswer, Pool, Upstream, UpstreamError};

/// The largest chunk asked for beyond a write's own bytes.
pub const MAX_CHUNK: u64 = 64 << 20;

/// One tenant's shared-tier escrow as this node sees it (pure bookkeeping; time as input).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Book {
    /// The tenant has no quota upstream (until `expires_ms`).
    pub unlimited: bool,
    /// Held upstream for this node, as last answered.
    pub granted: u64,
    /// Bytes still to drain when `granted` was asked for.
    pub base: u64,
    /// Admitted, not yet ended.
    pub reserved: u64,
    /// Admitted and committed since `base` was measured.
    pub committed: u64,
    /// Until when the grant is trusted (local clock, ms since the epoch).
    pub expires_ms: i64,
    /// The tenant's quota upstream, once known.
    pub quota: Option<u64>,
}

/// How a write was admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admitted {
    /// The tenant has no quota upstream.
    Free,
    /// Taken from the headroom: end it with [`Book::ended`].
    Held,
}

impl Book {
    /// What is charged against the grant.
    pub fn needs(&self) -> u64 {
        self.base
            .saturating_add(self.reserved)
            .saturating_add(self.committed)
    }

    /// What may still be admitted at `now_ms`.
    pub fn headroom(&self, now_ms: i64) -> u64 {
        if now_ms >= self.expires_ms || self.unlimited {
            return 0;
        }
        self.granted.saturating_sub(self.needs())
    }

    /// Admits `bytes` if the headroom covers them (or the tenant has no quota).
    pub fn try_admit(&mut self, bytes: u64, now_ms: i64) -> Option<Admitted> {
        if self.unlimited && now_ms < self.expires_ms {
            return Some(Admitted::Free);
        }
        if self.headroom(now_ms) >= bytes {
            self.reserved += bytes;
            return Some(Admitted::Held);
        }
        None
    }

    /// A held admission of `bytes` ended: `committed` whether its write did.
    pub fn ended(&mut self, bytes: u64, committed: bool) {
        self.reserved = self.reserved.saturating_sub(bytes);
        if committed {
            self.committed = self.committed.saturating_add(bytes);
        }
    }

    /// The chunk asked for beyond what is needed: a sixteenth of the quota, at most
    /// [`MAX_CHUNK`] (the most, while the quota is not yet known; the gateway grants no more
    /// than is free).
    pub fn chunk(&self) -> u64 {
        self.quota.map_or(MAX_CHUNK, |q| (q / 16).min(MAX_CHUNK))
    }

    /// An answer to a request that left at `sent_ms`, `undrained` measured just before it,
    /// when `committed` stood at `committed_then` (those commits are in `undrained`).
    pub fn answered(
        &mut self,
        answer: &EscrowAnswer,
        undrained: u64,
        committed_then: u64,
        sent_ms: i64,
        lease: Duration,
    ) {
        self.base = undrained;
        self.committed = self.committed.saturating_sub(committed_then);
        self.expires_ms =
            sent_ms.saturating_add(i64::try_from(lease.as_millis()).unwrap_or(i64::MAX));
        self.unlimited = answer.unlimited;
        self.granted = if answer.unlimited { 0 } else { answer.bytes };
        self.quota = (!answer.unlimited).then_some(answer.quota);
    }
}

struct Tenant {
    book: Mutex<Book>,
    /// One request per tenant at a time.
    asking: tokio::sync::Mutex<()>,
}

impl Tenant {
    fn book(&self) -> MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The node's shared-tier escrow for every tenant (see the module doc).
pub struct SharedQuota {
    node: String,
    lease: Duration,
    upstream: Arc<Pool<Upstream>>,
    journal: Arc<Journal>,
    catalog: Arc<Catalog>,
    tenants: Mutex<HashMap<String, Arc<Tenant>>>,
}

pub(crate) use sluice_meta::now_ms;

impl SharedQuota {
    pub fn new(
        node: String,
        lease: Duration,
        upstream: Arc<Pool<Upstream>>,
        journal: Arc<Journal>,
        catalog: Arc<Catalog>,
    ) -> Self {
        Self {
            node,
            lease,
            upstream,
            journal,
            catalog,
            tenants: Mutex::default(),
        }
    }

    /// This node's id, named in its escrow requests and uploads.
    pub fn node(&self) -> &str {
        &self.node
    }

    fn tenant(&self, tenant: &str) -> Arc<Tenant> {
        let mut map = self.tenants.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(map.entry(tenant.to_owned()).or_insert_with(|| {
            Arc::new(Tenant {
                book: Mutex::default(),
                asking: tokio::sync::Mutex::new(()),
            })
        }))
    }

    /// A tenant's book, for status and tests.
    pub fn book(&self, tenant: &str) -> Option<Book> {
        let map = self.tenants.lock().unwrap_or_else(PoisonError::into_inner);
        map.get(tenant).map(|t| t.book().clone())
    }

    /// Admits a write of `bytes` for `tenant` before it is acknowledged, or refuses it (see
    /// the module doc); the answer is told how the write ended.
    pub async fn admit(&self, tenant: &str, bytes: u64) -> ApiResult<Option<OnEnd>> {
        let t = self.tenant(tenant);
        if let Some(a) = t.book().try_admit(bytes, now_ms()) {
            return Ok(on_end(&t, a, bytes));
        }
        let _asking = t.asking.lock().await;
        // Another write's request may have brought enough meanwhile.
        if let Some(a) = t.book().try_admit(bytes, now_ms()) {
            return Ok(on_end(&t, a, bytes));
        }
        if let Err(e) = self.ask(tenant, &t, bytes).await {
            return Err(match e {
                UpstreamError::Refused { status, message } => {
                    TierError::Refused { status, message }.into()
                }
                e => TierError::SlowDown(format!(
                    "this node holds too little of the tenant's shared tier quota and the \
                     shared tier did not answer its request for more: {e}"
                ))
                .into(),
            });
        }
        let mut book = t.book();
        if let Some(a) = book.try_admit(bytes, now_ms()) {
            drop(book);
            return Ok(on_end(&t, a, bytes));
        }
        Err(ApiError::SharedQuotaExceeded {
            needed: bytes,
            available: book.headroom(now_ms()),
            quota: book.quota.unwrap_or(0),
        })
    }

    /// Asks the gateways to set this node's escrow to what it needs, plus `more` and a chunk.
    /// Called with the tenant's `asking` lock held.
    async fn ask(&self, tenant: &str, t: &Tenant, more: u64) -> Result<(), UpstreamError> {
        let committed_then = t.book().committed;
        let undrained = self.undrained(tenant).await?;
        let (target, sent) = {
            let book = t.book();
            let needs = undrained
                .saturating_add(book.reserved)
                .saturating_add(book.committed.saturating_sub(committed_then));
            let spare = if more == 0 {
                book.headroom(now_ms()).min(book.chunk())
            } else {
                more.saturating_add(book.chunk())
            };
            (needs.saturating_add(spare), now_ms())
        };
        let answer = self
            .upstream
            .escrow(tenant, &self.node, target, self.lease)
            .await?;
        t.book()
            .answered(&answer, undrained, committed_then, sent, self.lease);
        Ok(())
    }

    /// The tenant's bytes still to go upstream: the journal's pending puts and the parts of
    /// local multipart uploads in progress.
    async fn undrained(&self, tenant: &str) -> Result<u64, UpstreamError> {
        let (journal, catalog, tenant) = (
            Arc::clone(&self.journal),
            Arc::clone(&self.catalog),
            tenant.to_owned(),
        );
        tokio::task::spawn_blocking(move || {
            let mut bytes: u64 = journal
                .pending()?
                .iter()
                .filter(|op| op.tenant == tenant)
                .map(pending_bytes)
                .sum();
            for (bucket, _) in catalog.list_buckets(&tenant)? {
                for (_, up) in catalog.list_uploads(&tenant, &bucket)? {
                    bytes += up.parts.values().map(|p| p.size).sum::<u64>();
                }
            }
            Ok::<_, sluice_meta::MetaError>(bytes)
        })
        .await
        .map_err(|e| UpstreamError::Unavailable(format!("measuring the journal: {e}")))?
        .map_err(|e| UpstreamError::Unavailable(format!("reading the journal: {e}")))
    }

    /// Renews every tenant's escrow that holds or needs something, and takes escrow for the
    /// tenants the journal holds bytes of (at start: what was acknowledged before a restart).
    pub async fn renew_all(&self) {
        let mut names: Vec<String> = {
            let map = self.tenants.lock().unwrap_or_else(PoisonError::into_inner);
            map.iter()
                .filter(|(_, t)| {
                    let b = t.book();
                    b.granted > 0 || b.needs() > 0 || b.unlimited
                })
                .map(|(n, _)| n.clone())
                .collect()
        };
        let journal = Arc::clone(&self.journal);
        if let Ok(Ok(ops)) = tokio::task::spawn_blocking(move || journal.pending()).await {
            names.extend(
                ops.into_iter()
                    .filter(|op| pending_bytes(op) > 0)
                    .map(|op| op.tenant),
            );
        }
        names.sort();
        names.dedup();
        for name in names {
            let t = self.tenant(&name);
            let _asking = t.asking.lock().await;
            if let Err(e) = self.ask(&name, &t, 0).await {
                tracing::warn!(
                    tenant = name,
                    error = %e,
                    "could not renew this node's shared-tier escrow; it lapses unless renewed"
                );
            }
        }
    }

    /// Renews every third of the lease until `stop` turns true; the first round at once.
    pub async fn run(self: Arc<Self>, mut stop: tokio::sync::watch::Receiver<bool>) {
        let mut tick = tokio::time::interval(self.lease / 3);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => self.renew_all().await,
                _ = stop.changed() => return,
            }
            if *stop.borrow() {
                return;
            }
        }
    }
}

fn on_end(t: &Arc<Tenant>, admitted: Admitted, bytes: u64) -> Option<OnEnd> {
    match admitted {
        Admitted::Free => None,
        Admitted::Held => {
            let t = Arc::clone(t);
            Some(Box::new(move |committed| t.book().ended(bytes, committed)))
        }
    }
}

/// This node's id: read from `node-id` in the data directory, or made and written there on
/// first start (so a restarted agent renews the same escrow).
pub fn node_id(data_dir: &std::path::Path) -> std::io::Result<String> {
    let path = data_dir.join("node-id");
    match std::fs::read_to_string(&path) {
        Ok(s) if !s.trim().is_empty() => return Ok(s.trim().to_owned()),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    use std::hash::{BuildHasher, RandomState};
    let n = RandomState::new().hash_one((std::process::id(), SystemTime::now()));
    let id = format!("node-{n:016x}");
    let tmp = data_dir.join("node-id.tmp");
    std::fs::write(&tmp, format!("{id}\n"))?;
    std::fs::File::open(&tmp)?.sync_all()?;
    std::fs::rename(&tmp, &path)?;
    std::fs::File::open(data_dir)?.sync_all()?;
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    const LEASE: Duration = Duration::from_secs(30);

    fn answer(bytes: u64, quota: u64) -> EscrowAnswer {
        EscrowAnswer {
            unlimited: false,
            bytes,
            expires_ms: 0,
            quota,
        }
    }

    #[test]
    fn what_is_acknowledged_and_undrained_never_exceeds_what_is_held() {
        let mut b = Book::default();
        // Nothing held yet: nothing is admitted without asking.
        assert_eq!(b.try_admit(1, 0), None);
        b.answered(&answer(6 * MIB, 8 * MIB), 0, 0, 0, LEASE);
        assert_eq!(b.try_admit(3 * MIB, 1), Some(Admitted::Held));
        assert_eq!(b.try_admit(3 * MIB, 1), Some(Admitted::Held));
        assert_eq!(b.try_admit(1, 1), None);
        // One write fails: its bytes come back; the other commits.
        b.ended(3 * MIB, false);
        b.ended(3 * MIB, true);
        assert_eq!(b.headroom(1), 3 * MIB);
        assert_eq!(b.needs(), 3 * MIB);
    }

    #[test]
    fn a_new_answer_counts_commits_made_while_it_was_asked_for_once_or_twice_never_zero() {
        let mut b = Book::default();
        b.answered(&answer(4 * MIB, 8 * MIB), 0, 0, 0, LEASE);
        assert!(b.try_admit(2 * MIB, 1).is_some());
        b.ended(2 * MIB, true);
        // Measured: the 2 MiB are in the journal, committed stood at 2 MiB. One more write
        // commits while the request is out.
        let committed_then = b.committed;
        assert!(b.try_admit(MIB, 2).is_some());
        b.ended(MIB, true);
        b.answered(&answer(5 * MIB, 8 * MIB), 2 * MIB, committed_then, 3, LEASE);
        assert_eq!(b.needs(), 3 * MIB);
        assert_eq!(b.headroom(4), 2 * MIB);
    }

    #[test]
    fn a_lapsed_grant_admits_nothing_and_unlimited_tenants_need_no_escrow() {
        let mut b = Book::default();
        b.answered(&answer(4 * MIB, 8 * MIB), 0, 0, 1_000, LEASE);
        assert!(b.try_admit(MIB, 30_999).is_some());
        assert_eq!(b.try_admit(MIB, 31_000), None);
        let unlimited = EscrowAnswer {
            unlimited: true,
            bytes: 0,
            expires_ms: 0,
            quota: 0,
        };
        b.answered(&unlimited, 0, 0, 40_000, LEASE);
        assert_eq!(b.try_admit(u64::MAX, 40_001), Some(Admitted::Free));
        assert_eq!(b.try_admit(1, 70_000), None);
    }

    #[test]
    fn the_chunk_is_a_sixteenth_of_the_quota_at_most_64_mib() {
        let mut b = Book::default();
        assert_eq!(b.chunk(), MAX_CHUNK);
        b.answered(&answer(0, 8 * MIB), 0, 0, 0, LEASE);
        assert_eq!(b.chunk(), MIB / 2);
        b.answered(&answer(0, 1 << 40), 0, 0, 0, LEASE);
        assert_eq!(b.chunk(), MAX_CHUNK);
    }

    #[test]
    fn the_node_id_is_made_once_and_kept() {
        let dir = tempfile::tempdir().expect("tempdir");
        let id = node_id(dir.path()).expect("made");
        assert!(id.starts_with("node-"));
        assert_eq!(node_id(dir.path()).expect("read"), id);
    }
}
