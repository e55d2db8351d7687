//! The scrubber: every blob the catalog references read back at a paced rate and verified
//! against the checksums recorded when it was written (`sluice scrub`).
//!
//! Objects are taken from the catalog tenant by tenant, bucket by bucket, in key order; each
//! segment is read whole through the same verifying read a GET uses
//! ([`BlobStore::read_labeled`]), so a scrub finds exactly what a GET would refuse. What it
//! finds is reported by object: a chunk whose bytes fail their checksum (`corrupt`), a blob
//! gone from the backend (`missing`), a blob that could not be read for another reason
//! (`unreadable`). Segments recorded before checksums existed are read (a missing or short
//! blob is still found) and counted as unverified; inline objects live in the catalog and
//! have no blob to read.
//!
//! Pacing: with [`ScrubOptions::admission`] (the gateway's continuous scrub), every grain is
//! admitted through that throttle handle before it is read: a background class of the
//! gateway's throughput scheduler, which serves it only from capacity the tenants leave
//! unused and at most at its own rate (`sluice_throttle`'s background classes). Without one
//! (`sluice scrub` in its own process), the bytes read so far never run ahead of
//! `rate × elapsed`, measured from the scrub's start with tokio's clock, so the backend sees
//! the scrub as a steady stream of grain-sized reads.
//!
//! Progress is reported as it happens to a [`ScrubObserver`] (bytes read, each finding), so a
//! long pass is visible before it ends.
//!
//! Reading only: nothing in the catalog or the backend changes.

use std::collections::BTreeSet;
use std::sync::Arc;

use futures::StreamExt;
use serde::Serialize;
use sluice_meta::Catalog;

use super::CatalogView;
use crate::blob::integrity::{Corrupt, ReadLabel};
use crate::blob::{BlobStore, Pacer};

/// What to scrub, and how fast.
#[derive(Debug, Clone, Default)]
pub struct ScrubOptions {
    /// Only this tenant's objects (all configured tenants when `None`).
    pub tenant: Option<String>,
    /// Bytes per second at most (`None`: as fast as the backend serves them). Ignored with
    /// `admission`, which paces the scrub itself.
    pub rate: Option<u64>,
    /// The throttle every read is admitted through (a background class's handle, see
    /// `sluice_throttle::Throttle::background`); `None`: reads are paced by `rate` alone.
    pub admission: Option<Arc<sluice_throttle::Throttle>>,
}

/// Told of a scrub's progress as it happens.
pub trait ScrubObserver: Send + Sync {
    /// `bytes` more were read and checked.
    fn read(&self, bytes: u64) {
        let _ = bytes;
    }
    /// A bad blob was found (it is also in the report).
    fn found(&self, finding: &ScrubFinding) {
        let _ = finding;
    }
}

/// Observes nothing.
struct Unobserved;

impl ScrubObserver for Unobserved {}

/// One bad blob, named by its object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ScrubFinding {
    /// Bytes that do not match their checksum.
    Corrupt {
        tenant: String,
        bucket: String,
        key: String,
        blob: String,
        segment: usize,
        chunk: u64,
    },
    /// The blob is not in the backend.
    Missing {
        tenant: String,
        bucket: String,
        key: String,
        blob: String,
        segment: usize,
    },
    /// The blob could not be read (shorter than its record, a backend failure).
    Unreadable {
        tenant: String,
        bucket: String,
        key: String,
        blob: String,
        segment: usize,
        error: String,
    },
}

/// What a scrub read and found.
#[derive(Debug, Default, Serialize)]
pub struct ScrubReport {
    pub objects: u64,
    /// Objects kept inline in the catalog (no blob to read).
    pub inline_objects: u64,
    pub segments: u64,
    /// Segments read without checksums to verify (written before checksums existed).
    pub unverified_segments: u64,
    pub bytes: u64,
    pub findings: Vec<ScrubFinding>,
}

impl ScrubReport {
    pub fn is_clean(&self) -> bool {
        self.findings.is_empty()
    }
}

/// Why a scrub could not run.
#[derive(Debug, thiserror::Error)]
pub enum ScrubError {
    #[error("reading the catalog: {0}")]
    Catalog(#[from] sluice_meta::MetaError),
    #[error("the catalog read task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
    #[error("tenant {0:?} is not configured")]
    UnknownTenant(String),
}

/// Scrubs every object of `tenants` (or of `opts.tenant` alone).
pub async fn scrub(
    catalog: &Catalog,
    blobs: &BlobStore,
    tenants: &BTreeSet<String>,
    opts: &ScrubOptions,
) -> Result<ScrubReport, ScrubError> {
    scrub_observed(catalog, blobs, tenants, opts, &Unobserved).await
}

/// [`scrub`], telling `observer` of every byte read and every finding as it happens.
pub async fn scrub_observed(
    catalog: &Catalog,
    blobs: &BlobStore,
    tenants: &BTreeSet<String>,
    opts: &ScrubOptions,
    observer: &dyn ScrubObserver,
) -> Result<ScrubReport, ScrubError> {
    let tenants: BTreeSet<String> = match &opts.tenant {
        Some(t) if !tenants.contains(t) => return Err(ScrubError::UnknownTenant(t.clone())),
        Some(t) => BTreeSet::from([t.clone()]),
        None => tenants.clone(),
    };
    let reading = catalog.clone();
    let view = tokio::task::spawn_blocking(move || CatalogView::read(&reading, &tenants)).await??;
    let mut objects: Vec<_> = view.objects.into_iter().collect();
    objects.sort_by(|a, b| (&a.0.0, &a.0.1, &a.1.0).cmp(&(&b.0.0, &b.0.1, &b.1.0)));
    let mut report = ScrubReport::default();
    let started = tokio::time::Instant::now();
    for ((tenant, bucket, _), (key, rec)) in objects {
        report.objects += 1;
        if rec.inline {
            report.inline_objects += 1;
            continue;
        }
        let pacer = Pacer {
            throttle: opts.admission.clone(),
            ..Pacer::unthrottled(&tenant)
        };
        // Admitted reads are paced by the throttle; only unadmitted ones by `rate`.
        let rate = if opts.admission.is_some() {
            None
        } else {
            opts.rate
        };
        let label = Arc::new(ReadLabel {
            bucket: bucket.clone(),
            key: key.clone(),
        });
        for (index, seg) in rec.segments.iter().enumerate() {
            report.segments += 1;
            if seg.checksums.is_none() {
                report.unverified_segments += 1;
            }
            let one = std::slice::from_ref(seg);
            let mut read = blobs.read_labeled(&pacer, &label, one, 0..seg.size, None);
            let mut failed = None;
            while let Some(item) = read.next().await {
                match item {
                    Ok(bytes) => {
                        report.bytes += bytes.len() as u64;
                        observer.read(bytes.len() as u64);
                        pace(started, report.bytes, rate).await;
                    }
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                }
            }
            if let Some(e) = failed {
                let (tenant, bucket, key, blob) = (
                    tenant.clone(),
                    bucket.clone(),
                    key.clone(),
                    seg.blob.clone(),
                );
                let finding = match e {
                    object_store::Error::NotFound { .. } => ScrubFinding::Missing {
                        tenant,
                        bucket,
                        key,
                        blob,
                        segment: index,
                    },
                    object_store::Error::Generic { source, .. } if source.is::<Corrupt>() => {
                        let chunk = source.downcast_ref::<Corrupt>().map_or(0, |c| c.chunk);
                        ScrubFinding::Corrupt {
                            tenant,
                            bucket,
                            key,
                            blob,
                            segment: index,
                            chunk,
                        }
                    }
                    other => ScrubFinding::Unreadable {
                        tenant,
                        bucket,
                        key,
                        blob,
                        segment: index,
                        error: other.to_string(),
                    },
                };
                observer.found(&finding);
                report.findings.push(finding);
            }
        }
    }
    Ok(report)
}

/// Waits until `bytes` read since `started` are within `rate` bytes per second.
async fn pace(started: tokio::time::Instant, bytes: u64, rate: Option<u64>) {
    if let Some(due) = due(bytes, rate) {
        tokio::time::sleep_until(started + due).await;
    }
}

/// When, from the scrub's start, `bytes` may have been read at `rate` bytes per second.
fn due(bytes: u64, rate: Option<u64>) -> Option<std::time::Duration> {
    let rate = rate.filter(|r| *r > 0)?;
    #[allow(clippy::cast_precision_loss)] // byte counts far below 2^52
    Some(std::time::Duration::from_secs_f64(
        bytes as f64 / rate as f64,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_are_due_at_the_rate_from_the_start() {
        assert_eq!(
            due(4 << 20, Some(1 << 20)),
            Some(std::time::Duration::from_secs(4))
        );
        assert_eq!(
            due(1 << 19, Some(1 << 20)),
            Some(std::time::Duration::from_millis(500))
        );
        assert_eq!(due(1 << 40, None), None);
        assert_eq!(due(1, Some(0)), None);
    }
}
