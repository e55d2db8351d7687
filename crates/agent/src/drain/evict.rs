//! Eviction: local copies durable upstream deleted when retention or space says so.

use std::collections::HashMap;

use sluice_config::Retention;

use super::{Drain, DrainError, HIGH_WATER, LOW_WATER, lock};
use crate::journal::{self, Journal};

impl Drain {
    /// Deletes local copies durable upstream when retention or space says so.
    pub(super) async fn evict(&self) -> Result<(), DrainError> {
        let copies = self.blocking(Journal::durable_copies).await?;
        if copies.is_empty() {
            return Ok(());
        }
        let mut by_tenant: HashMap<String, Vec<(String, String, journal::DurableCopy)>> =
            HashMap::new();
        for (t, b, k, c) in copies {
            by_tenant.entry(t).or_default().push((b, k, c));
        }
        for (tenant, mut copies) in by_tenant {
            let (retention, capacity) = match lock(&self.tenants).get(&tenant) {
                Some(t) => (t.retention, t.local_capacity),
                None => continue,
            };
            let t = tenant.clone();
            let markers = self.blocking(move |j| j.markers(&t)).await?;
            let used = self
                .journal
                .catalog()
                .ledger()
                .usage(&tenant)
                .map_or(0, |u| u.0);
            // Oldest first.
            copies.sort_by_key(|c| c.2.durable_ms);
            let mut victims: Vec<usize> = Vec::new();
            match retention {
                Retention::Checkpoints(n) => {
                    let mut kept: Vec<(&str, &str)> = Vec::new();
                    for m in markers.iter().rev() {
                        if kept.len() as u32 >= n {
                            break;
                        }
                        if !kept.contains(&(m.bucket.as_str(), m.prefix.as_str())) {
                            kept.push((&m.bucket, &m.prefix));
                        }
                    }
                    for (i, (b, k, _)) in copies.iter().enumerate() {
                        let in_checkpoint = markers
                            .iter()
                            .any(|m| &m.bucket == b && k.starts_with(&m.prefix));
                        let retained = kept.iter().any(|(mb, mp)| mb == b && k.starts_with(mp));
                        if in_checkpoint && !retained {
                            victims.push(i);
                        }
                    }
                }
                Retention::Bytes(limit) => {
                    let mut keep = 0u64;
                    for (i, (_, _, c)) in copies.iter().enumerate().rev() {
                        keep += c.object.size;
                        if keep > limit {
                            victims.push(i);
                        }
                    }
                }
            }
            // Space: above the high-water mark, evict oldest durable copies down to low water.
            let high = capacity as f64 * HIGH_WATER;
            if capacity != u64::MAX && used as f64 > high {
                let mut freed: u64 = victims.iter().map(|&i| copies[i].2.object.size).sum();
                let target = used as f64 - capacity as f64 * LOW_WATER;
                for (i, copy) in copies.iter().enumerate() {
                    if freed as f64 >= target {
                        break;
                    }
                    if !victims.contains(&i) {
                        victims.push(i);
                        freed += copy.2.object.size;
                    }
                }
            }
            for i in victims {
                let (b, k, c) = copies[i].clone();
                let (t2, b2, k2, c2) = (tenant.clone(), b.clone(), k.clone(), c.clone());
                let evicted = self
                    .blocking(move |j| {
                        let removed = j.catalog().evict_object(&t2, &b2, &k2, &c2.object)?;
                        j.forget_durable(&t2, &b2, &k2)?;
                        Ok(removed)
                    })
                    .await?;
                if evicted {
                    let names: Vec<String> =
                        c.object.segments.iter().map(|s| s.blob.clone()).collect();
                    self.blobs.delete(&tenant, names).await;
                    if let Some(t) = lock(&self.tenants).get_mut(&tenant) {
                        t.evicted_bytes_total += c.object.size;
                    }
                    tracing::debug!(tenant, bucket = b, key = k, "evicted a durable local copy");
                }
            }
        }
        Ok(())
    }
}
