//! `sluice tenant remove --purge`: a tenant's data deleted before the tenant is. Every
//! object and bucket leaves the catalog (a bucket's deletion aborts its uploads), then every
//! backend object under the tenant's prefix (`tenants/<id>/`: blobs and recovery records, so
//! that `sluice catalog rebuild` cannot bring the data back) is deleted. Run where the
//! catalog is open: the CLI with a shared catalog, or with the embedded one while its
//! gateway is stopped.

use std::sync::Arc;

use futures::TryStreamExt;
use object_store::{ObjectStore, ObjectStoreExt};
use sluice_meta::{Catalog, Entry, ListQuery};

use super::AdminError;

/// What a purge deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Purged {
    pub buckets: u64,
    pub objects: u64,
    /// The objects' bytes.
    pub bytes: u64,
    /// Backend objects (blobs, recovery records) deleted.
    pub backend_objects: u64,
}

impl Purged {
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "buckets": self.buckets, "objects": self.objects, "bytes": self.bytes,
            "backend_objects": self.backend_objects,
        })
    }
}

fn catalog_part(catalog: &Catalog, tenant: &str) -> Result<Purged, AdminError> {
    let mut p = Purged::default();
    for (bucket, _) in catalog.list_buckets(tenant)? {
        loop {
            let page = catalog.list_objects(
                tenant,
                &bucket,
                &ListQuery {
                    prefix: "",
                    delimiter: None,
                    after: None,
                    max: 1000,
                },
            )?;
            for e in &page.entries {
                if let Entry::Object(key, _) = e
                    && let Some(rec) = catalog.delete_object(tenant, &bucket, key)?
                {
                    p.objects += 1;
                    p.bytes += rec.size;
                }
            }
            if page.entries.is_empty() || !page.truncated {
                break;
            }
        }
        catalog.delete_bucket(tenant, &bucket)?;
        p.buckets += 1;
    }
    Ok(p)
}

/// Deletes `tenant`'s data (see the module doc).
pub async fn purge(
    catalog: &Catalog,
    backend: &Arc<dyn ObjectStore>,
    tenant: &str,
) -> Result<Purged, AdminError> {
    let mut p = {
        let (catalog, tenant) = (catalog.clone(), tenant.to_owned());
        tokio::task::spawn_blocking(move || catalog_part(&catalog, &tenant))
            .await
            .map_err(|e| AdminError::Invalid(e.to_string()))??
    };
    let prefix = sluice_s3::blob::tenant_root(tenant);
    let listed: Vec<_> = backend
        .list(Some(&prefix))
        .map_ok(|m| m.location)
        .try_collect()
        .await
        .map_err(|e| AdminError::Invalid(format!("listing the backend under {prefix}: {e}")))?;
    for path in listed {
        match backend.delete(&path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => p.backend_objects += 1,
            Err(e) => {
                return Err(AdminError::Invalid(format!(
                    "deleting {path} from the backend: {e}"
                )));
            }
        }
    }
    Ok(p)
}
