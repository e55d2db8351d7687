//! `sluice catalog rebuild` and `sluice catalog gc`: the catalog recreated from the records,
//! and unreferenced backend objects collected without ever touching live data.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::{Duration, Instant};

use serde::Serialize;
use sluice_meta::{Catalog, MetaError};

use super::inventory::{CatalogView, Finding, inventory};
use super::{BucketRecord, Name, ObjectRecovery, bucket_record_name, key_hash};
use crate::blob::{BlobStore, Listed};
use crate::error::ApiError;

/// Why a rebuild or a collection stopped.
#[derive(Debug, thiserror::Error)]
pub enum RecoveryError {
    #[error("catalog: {0}")]
    Catalog(#[from] MetaError),
    #[error("backend: {0}")]
    Backend(#[from] ApiError),
    #[error(
        "the catalog is not empty ({0} buckets): rebuild fills an empty catalog \
         (pass --force to merge the backend's records into this one)"
    )]
    NotEmpty(usize),
    #[error("another process holds the catalog's \"gc\" lease (one collector at a time)")]
    LeaseHeld,
    #[error("lost the \"gc\" lease to another holder while collecting")]
    LeaseLost,
    #[error("blocking task: {0}")]
    Join(String),
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, MetaError> + Send + 'static,
) -> Result<T, RecoveryError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| RecoveryError::Join(e.to_string()))?
        .map_err(RecoveryError::from)
}

/// The listing and the catalog view of the tenants in either (plus `tenants`).
async fn survey(
    catalog: &Catalog,
    blobs: &BlobStore,
    tenants: &BTreeSet<String>,
) -> Result<(Vec<Listed>, CatalogView), RecoveryError> {
    // The listing first: whatever is committed before the catalog is read is then seen as
    // referenced, so only blobs still unreferenced after the listing look like orphans.
    let listing = blobs.list_all_meta().await?;
    let mut all = tenants.clone();
    all.extend(listing.iter().map(|l| l.tenant.clone()));
    let c = catalog.clone();
    let view = blocking(move || CatalogView::read(&c, &all)).await?;
    Ok((listing, view))
}

/// Compares the catalog with the backend (`sluice catalog check`); changes nothing.
pub async fn check(
    catalog: &Catalog,
    blobs: &BlobStore,
    tenants: &BTreeSet<String>,
) -> Result<super::Report, RecoveryError> {
    let (listing, view) = survey(catalog, blobs, tenants).await?;
    Ok(inventory(&listing, &view, now_ms()))
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// What a rebuild restored.
#[derive(Debug, Default, Serialize)]
pub struct RebuildSummary {
    pub buckets: usize,
    pub objects: usize,
    pub bytes: u64,
    /// Records not restored: `(tenant, name, why)`.
    pub skipped: Vec<(String, String, String)>,
}

/// Rebuilds the catalog from the backend's recovery records: every bucket, and of every key
/// the record with the greatest version whose blobs are all present. Refuses a catalog that
/// holds any bucket of `tenants` or of the backend's tenants unless `force`.
pub async fn rebuild(
    catalog: &Catalog,
    blobs: &BlobStore,
    tenants: &BTreeSet<String>,
    force: bool,
) -> Result<RebuildSummary, RecoveryError> {
    let (listing, view) = survey(catalog, blobs, tenants).await?;
    if !view.is_empty() && !force {
        return Err(RecoveryError::NotEmpty(view.buckets.len()));
    }
    let mut summary = RebuildSummary::default();
    let present: HashSet<(&str, &str)> = listing
        .iter()
        .map(|l| (l.tenant.as_str(), l.name.as_str()))
        .collect();
    let mut bucket_records: BTreeSet<(&str, &str)> = BTreeSet::new();
    let mut newest: BTreeMap<(&str, &str, &str), (u64, &str)> = BTreeMap::new();
    for l in &listing {
        match Name::parse(&l.name) {
            Name::Bucket { bucket } => {
                bucket_records.insert((&l.tenant, bucket));
            }
            Name::Object {
                bucket,
                key_hash,
                version,
            } => {
                let slot = newest
                    .entry((&l.tenant, bucket, key_hash))
                    .or_insert((version, &l.name));
                if version > slot.0 {
                    *slot = (version, &l.name);
                }
            }
            Name::Blob | Name::Unknown => {}
        }
    }
    let mut restored: HashSet<(String, String)> = HashSet::new();
    for (tenant, bucket) in bucket_records {
        let name = bucket_record_name(bucket);
        let Some(bytes) = blobs.get_small(tenant, &name).await? else {
            continue;
        };
        match serde_json::from_slice::<BucketRecord>(&bytes) {
            Ok(r) if r.format == super::FORMAT && r.bucket == bucket && r.tenant == tenant => {
                let (t, b) = (tenant.to_owned(), bucket.to_owned());
                blocking({
                    let c = catalog.clone();
                    move || c.restore_bucket(&t, &b, r.created_ms)
                })
                .await?;
                restored.insert((tenant.to_owned(), bucket.to_owned()));
            }
            Ok(_) => summary
                .skipped
                .push(skip(tenant, &name, "not this bucket's record")),
            Err(e) => summary.skipped.push(skip(tenant, &name, &e.to_string())),
        }
    }
    for ((tenant, bucket, hash), (_, name)) in newest {
        let Some(bytes) = blobs.get_small(tenant, name).await? else {
            continue;
        };
        let rec = match ObjectRecovery::from_json(&bytes) {
            Ok(r) => r,
            Err(e) => {
                summary.skipped.push(skip(tenant, name, &e.to_string()));
                continue;
            }
        };
        if rec.tenant != tenant || rec.bucket != bucket || key_hash(&rec.key) != hash {
            summary
                .skipped
                .push(skip(tenant, name, "a record of another object"));
            continue;
        }
        if let Some(gone) = rec
            .segments
            .iter()
            .find(|s| !present.contains(&(tenant, s.blob.as_str())))
        {
            let why = format!("its blob {} is not in the backend", gone.blob);
            summary.skipped.push(skip(tenant, name, &why));
            continue;
        }
        let body = rec.body().unwrap_or_default();
        if restored.insert((tenant.to_owned(), bucket.to_owned())) {
            let (c, t, b, at) = (
                catalog.clone(),
                tenant.to_owned(),
                bucket.to_owned(),
                rec.last_modified_ms,
            );
            blocking(move || c.restore_bucket(&t, &b, at)).await?;
        }
        let object = rec.to_object();
        summary.bytes += object.size;
        let c = catalog.clone();
        if blocking(move || {
            c.restore_object_with_body(&rec.tenant, &rec.bucket, &rec.key, &object, body.as_deref())
        })
        .await?
        {
            summary.objects += 1;
        }
    }
    summary.buckets = restored.len();
    Ok(summary)
}

fn skip(tenant: &str, name: &str, why: &str) -> (String, String, String) {
    (tenant.to_owned(), name.to_owned(), why.to_owned())
}

/// How `gc` runs.
#[derive(Debug, Clone)]
pub struct GcOptions {
    /// Only objects older than this are collected (the backend's last-modified time).
    pub grace: Duration,
    /// Deletions per second at most.
    pub rate: f64,
    /// List what would be deleted; delete nothing.
    pub dry_run: bool,
    /// Also collect records (and bucket records) of objects the catalog does not hold —
    /// the leftovers of deletes that crashed half-way. Off by default: against a catalog
    /// that lost data, they are what a rebuild needs.
    pub forget_absent: bool,
    /// Who holds the lease (a process-unique string).
    pub holder: String,
}

/// What `gc` collected (or, in a dry run, would have).
#[derive(Debug, Default, Serialize)]
pub struct GcSummary {
    /// `(tenant, name)` under `tenants/<tenant>/`.
    pub deleted: Vec<(String, String)>,
    /// Unreferenced but younger than the grace period.
    pub kept_young: usize,
    /// Unreferenced by the catalog, but named by a recovery record the catalog lacks.
    pub kept_recorded: usize,
    pub dry_run: bool,
}

/// How long a collector's lease lasts; renewed at a third of it.
const LEASE_TTL: Duration = Duration::from_secs(60);

/// Deletes backend objects that nothing references and that are older than the grace
/// period, under the catalog's `"gc"` lease, at most `rate` a second. A blob is referenced
/// by the catalog, or by a recovery record of an object the catalog does not hold (never
/// deleted on the catalog's word alone: a fresh or stale catalog would make everything look
/// like garbage). Records are garbage when a later version of their key is in the catalog.
pub async fn gc(
    catalog: &Catalog,
    blobs: &BlobStore,
    tenants: &BTreeSet<String>,
    opts: &GcOptions,
) -> Result<GcSummary, RecoveryError> {
    let (c, h) = (catalog.clone(), opts.holder.clone());
    if !blocking(move || c.try_lease("gc", &h, LEASE_TTL)).await? {
        return Err(RecoveryError::LeaseHeld);
    }
    let result = collect(catalog, blobs, tenants, opts).await;
    let (c, h) = (catalog.clone(), opts.holder.clone());
    blocking(move || c.release_lease("gc", &h)).await?;
    result
}

async fn collect(
    catalog: &Catalog,
    blobs: &BlobStore,
    tenants: &BTreeSet<String>,
    opts: &GcOptions,
) -> Result<GcSummary, RecoveryError> {
    let now = now_ms();
    let (listing, view) = survey(catalog, blobs, tenants).await?;
    let report = inventory(&listing, &view, now);
    let grace = i64::try_from(opts.grace.as_millis()).unwrap_or(i64::MAX);
    // Blobs named by records the catalog lacks stay, whatever the catalog says.
    let mut recorded: HashMap<String, HashSet<String>> = HashMap::new();
    for f in &report.findings {
        if let Finding::RecordNotInCatalog { tenant, name, .. } = f
            && let Some(bytes) = blobs.get_small(tenant, name).await?
            && let Ok(rec) = ObjectRecovery::from_json(&bytes)
        {
            recorded
                .entry(tenant.clone())
                .or_default()
                .extend(rec.segments.into_iter().map(|s| s.blob));
        }
    }
    let mut summary = GcSummary {
        dry_run: opts.dry_run,
        ..GcSummary::default()
    };
    let mut candidates = Vec::new();
    for f in report.findings {
        let (tenant, name, age) = match f {
            Finding::OrphanBlob {
                tenant,
                blob,
                age_ms,
            } => {
                if recorded.get(&tenant).is_some_and(|r| r.contains(&blob)) {
                    summary.kept_recorded += 1;
                    continue;
                }
                (tenant, blob, age_ms)
            }
            Finding::StaleRecord {
                tenant,
                name,
                age_ms,
            } => (tenant, name, age_ms),
            Finding::RecordNotInCatalog {
                tenant,
                name,
                age_ms,
            } if opts.forget_absent => (tenant, name, age_ms),
            Finding::BucketNotInCatalog {
                tenant,
                bucket,
                age_ms,
            } if opts.forget_absent => (tenant, bucket_record_name(&bucket), age_ms),
            _ => continue,
        };
        if age < grace {
            summary.kept_young += 1;
        } else {
            candidates.push((tenant, name));
        }
    }
    let pause = Duration::from_secs_f64(1.0 / opts.rate.max(0.001));
    let mut renewed = Instant::now();
    for (i, (tenant, name)) in candidates.into_iter().enumerate() {
        if !opts.dry_run {
            if i > 0 {
                tokio::time::sleep(pause).await;
            }
            if renewed.elapsed() > LEASE_TTL / 3 {
                let (c, h) = (catalog.clone(), opts.holder.clone());
                if !blocking(move || c.try_lease("gc", &h, LEASE_TTL)).await? {
                    return Err(RecoveryError::LeaseLost);
                }
                renewed = Instant::now();
            }
            blobs.delete(&tenant, [name.clone()]).await;
        }
        summary.deleted.push((tenant, name));
    }
    Ok(summary)
}
