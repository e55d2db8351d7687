//! Start-up reconciliation of the catalog with the backend.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use sluice_meta::{Catalog, MetaError};

use crate::BlobStore;
use crate::error::ApiError;

/// Why reconciliation could not run.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("catalog: {0}")]
    Catalog(#[from] MetaError),
    #[error("listing the backend's blobs: {0}")]
    List(#[source] ApiError),
}

/// What reconciliation did.
#[derive(Debug, Default, Clone)]
pub struct ReconcileSummary {
    /// Unreferenced blobs deleted.
    pub orphans_deleted: usize,
    /// Staged (never completed) local uploads deleted.
    pub staged_deleted: usize,
    /// Referenced blobs the backend does not hold: `(tenant, blob)`.
    pub missing: Vec<(String, String)>,
    /// Tenants whose stored usage was corrected: `(tenant, was, now)`.
    pub usage_fixed: Vec<(String, u64, u64)>,
}

/// Deletes blobs no catalog entry references and reports referenced blobs that are missing.
/// `local_root` is the filesystem backend's directory, whose staged uploads are also removed.
pub async fn reconcile(
    catalog: &Catalog,
    blobs: &BlobStore,
    local_root: Option<&Path>,
) -> Result<ReconcileSummary, ReconcileError> {
    let mut summary = ReconcileSummary::default();
    let referenced = catalog.referenced_blobs()?;
    let stored = blobs.list_all().await.map_err(ReconcileError::List)?;
    let mut present: HashMap<&str, HashSet<&str>> = HashMap::new();
    let mut orphans: HashMap<String, Vec<String>> = HashMap::new();
    for (tenant, blob) in &stored {
        present.entry(tenant).or_default().insert(blob);
        if !referenced.get(tenant).is_some_and(|r| r.contains(blob)) {
            orphans
                .entry(tenant.clone())
                .or_default()
                .push(blob.clone());
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
