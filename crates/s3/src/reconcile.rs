//! Start-up reconciliation of the catalog with the backend.
//!
//! Start-up deletes only what this catalog itself wrote and never referenced: the remains
//! of its own interrupted writes. Every run of an embedded (redb) catalog registers a run id
//! in the catalog's file (table `blob_writers`) and tags the names of the blobs it writes
//! with it (`<bucket>/<2 hex>/<32 hex>-<run>`); an unreferenced blob is deleted at start
//! only if its tag is one of this catalog's runs. So a second gateway, or a fresh catalog
//! pointed at a populated backend, deletes nothing — their runs are not in this file — and
//! a shared catalog (`Catalog::is_shared`) deletes nothing at start at all. Everything else
//! unreferenced is left for `sluice catalog gc` (grace period, lease, rate limit).

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use sluice_meta::redb::{ReadableDatabase, ReadableTable, TableDefinition};
use sluice_meta::{Catalog, MetaError, RedbCatalog};

use crate::BlobStore;
use crate::error::ApiError;

/// Why reconciliation could not run.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("catalog: {0}")]
    Catalog(#[from] MetaError),
    #[error("listing the backend's blobs: {0}")]
    List(#[source] ApiError),
    #[error("registering this run in the catalog: {0}")]
    Join(String),
}

/// The embedded catalog's runs: run id (16 hex) → when it started (ms since the epoch).
const WRITERS: TableDefinition<&str, u64> = TableDefinition::new("blob_writers");

/// Registers a new run of `catalog` and returns its id with every run's (this one included).
pub fn register_writer(catalog: &RedbCatalog) -> Result<(String, HashSet<String>), MetaError> {
    let run = format!("{:016x}", rand::random::<u64>());
    let started = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let db = catalog.database();
    let txn = db.begin_write().map_err(MetaError::from)?;
    {
        let mut t = txn.open_table(WRITERS).map_err(MetaError::from)?;
        t.insert(run.as_str(), started).map_err(MetaError::from)?;
    }
    txn.commit().map_err(MetaError::from)?;
    let read = db.begin_read().map_err(MetaError::from)?;
    let t = read.open_table(WRITERS).map_err(MetaError::from)?;
    let mut runs = HashSet::new();
    for row in t.iter().map_err(MetaError::from)? {
        let (k, _) = row.map_err(MetaError::from)?;
        runs.insert(k.value().to_owned());
    }
    Ok((run, runs))
}

/// The run tag of a blob name (`None`: untagged, or not a blob).
pub fn writer_of(blob: &str) -> Option<&str> {
    let file = blob.rsplit('/').next()?;
    let (id, run) = file.split_once('-')?;
    (id.len() == 32 && run.len() == 16 && run.bytes().all(|b| b.is_ascii_hexdigit())).then_some(run)
}

/// What reconciliation did.
#[derive(Debug, Default, Clone)]
pub struct ReconcileSummary {
    /// Unreferenced blobs this catalog wrote, deleted.
    pub orphans_deleted: usize,
    /// Unreferenced blobs this catalog did not write (another gateway's, a lost catalog's,
    /// or older than run tags): left alone, for `sluice catalog gc`.
    pub orphans_kept: usize,
    /// Staged (never completed) local uploads deleted.
    pub staged_deleted: usize,
    /// Referenced blobs the backend does not hold: `(tenant, blob)`.
    pub missing: Vec<(String, String)>,
    /// Tenants whose stored usage was corrected: `(tenant, was, now)`.
    pub usage_fixed: Vec<(String, u64, u64)>,
}

/// Registers this run with an embedded catalog (tagging `blobs`' names with it), deletes the
/// blobs this catalog wrote that no entry references (see the module doc), and reports
/// referenced blobs that are missing. `local_root` is the filesystem backend's directory,
/// whose staged uploads are also removed.
pub async fn reconcile(
    catalog: &Catalog,
    blobs: &BlobStore,
    local_root: Option<&Path>,
) -> Result<ReconcileSummary, ReconcileError> {
    let mut summary = ReconcileSummary::default();
    let runs = match catalog.embedded() {
        Some(redb) if !catalog.is_shared() => {
            let redb = std::sync::Arc::clone(redb);
            let (run, runs) = tokio::task::spawn_blocking(move || register_writer(&redb))
                .await
                .map_err(|e| ReconcileError::Join(e.to_string()))??;
            blobs.set_writer(run);
            runs
        }
        _ => HashSet::new(),
    };
    let referenced = catalog.referenced_blobs()?;
    let stored = blobs.list_all().await.map_err(ReconcileError::List)?;
    let mut present: HashMap<&str, HashSet<&str>> = HashMap::new();
    let mut orphans: HashMap<String, Vec<String>> = HashMap::new();
    for (tenant, blob) in &stored {
        if !matches!(
            crate::recovery::Name::parse(blob),
            crate::recovery::Name::Blob
        ) {
            continue;
        }
        present.entry(tenant).or_default().insert(blob);
        if referenced.get(tenant).is_some_and(|r| r.contains(blob)) {
            continue;
        }
        if writer_of(blob).is_some_and(|w| runs.contains(w)) {
            orphans
                .entry(tenant.clone())
                .or_default()
                .push(blob.clone());
        } else {
            summary.orphans_kept += 1;
        }
    }
    for (tenant, names) in orphans {
        summary.orphans_deleted += names.len();
        blobs.delete(&tenant, names).await;
    }
    for (tenant, refs) in &referenced {
        for blob in refs {
            if !present
                .get(tenant.as_str())
                .is_some_and(|p| p.contains(blob.as_str()))
            {
                summary.missing.push((tenant.clone(), blob.clone()));
            }
        }
    }
    if let Some(root) = local_root {
        summary.staged_deleted = remove_staged(&root.join("tenants"));
    }
    Ok(summary)
}

/// Removes `object_store` staging files (`name#N`) left by interrupted local uploads.
fn remove_staged(dir: &Path) -> usize {
    let mut removed = 0;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            removed += remove_staged(&path);
        } else if let Some(name) = path.file_name().and_then(|n| n.to_str())
            && let Some((_, suffix)) = name.split_once('#')
            && !suffix.is_empty()
            && suffix.bytes().all(|b| b.is_ascii_digit())
            && std::fs::remove_file(&path).is_ok()
        {
            removed += 1;
        }
    }
    removed
}
