//! The catalog and the backend compared: what `sluice catalog check` reports and what
//! `sluice catalog gc` may collect. Reading only: nothing here changes either side.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use serde::Serialize;
use sluice_meta::{Catalog, Entry, ListQuery, MetaError, ObjectRecord};

use super::{Name, key_hash};
use crate::blob::Listed;

/// What the catalog holds, per tenant, read key by key.
#[derive(Debug, Default)]
pub struct CatalogView {
    /// `(tenant, bucket)` → created.
    pub buckets: BTreeMap<(String, String), i64>,
    /// `(tenant, bucket, key hash)` → `(key, record)`.
    pub objects: HashMap<(String, String, String), (String, ObjectRecord)>,
    /// Every blob the catalog references (objects and uploads in progress), per tenant.
    pub referenced: HashMap<String, HashSet<String>>,
}

impl CatalogView {
    /// Reads the catalog for `tenants` (blocking: call it from a blocking thread).
    pub fn read(catalog: &Catalog, tenants: &BTreeSet<String>) -> Result<Self, MetaError> {
        let mut view = Self {
            referenced: catalog.referenced_blobs()?,
            ..Self::default()
        };
        for tenant in tenants {
            for (bucket, created) in catalog.list_buckets(tenant)? {
                let mut after: Option<String> = None;
                loop {
                    let page = catalog.list_objects(
                        tenant,
                        &bucket,
                        &ListQuery {
                            prefix: "",
                            delimiter: None,
                            after: after.as_deref(),
                            max: 1000,
                        },
                    )?;
                    for e in page.entries {
                        if let Entry::Object(key, rec) = e {
                            after = Some(key.clone());
                            view.objects.insert(
                                (tenant.clone(), bucket.clone(), key_hash(&key)),
                                (key, rec),
                            );
                        }
                    }
                    if !page.truncated {
                        break;
                    }
                }
                view.buckets.insert((tenant.clone(), bucket), created);
            }
        }
        Ok(view)
    }

    /// Whether the catalog holds any bucket.
    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }
}

/// One difference between the catalog and the backend.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Finding {
    /// A recovery record of an object the catalog does not hold at that version or later:
    /// lost from the catalog, or the leftover of a delete that crashed half-way.
    RecordNotInCatalog {
        tenant: String,
        name: String,
        age_ms: i64,
    },
    /// A bucket record of a bucket the catalog does not hold.
    BucketNotInCatalog {
        tenant: String,
        bucket: String,
        age_ms: i64,
    },
    /// A catalog object with no recovery record: it would not survive a rebuild.
    NoRecord {
        tenant: String,
        bucket: String,
        key: String,
        version: u64,
    },
    /// A catalog bucket with no bucket record (an empty one would not survive a rebuild).
    BucketWithoutRecord { tenant: String, bucket: String },
    /// A blob a catalog object references that the backend does not hold.
    MissingBlob {
        tenant: String,
        bucket: String,
        key: String,
        blob: String,
    },
    /// A blob the catalog does not reference.
    OrphanBlob {
        tenant: String,
        blob: String,
        age_ms: i64,
    },
    /// A record superseded by a later version of its key in the catalog.
    StaleRecord {
        tenant: String,
        name: String,
        age_ms: i64,
    },
}

/// Everything `check` found.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Report {
    pub findings: Vec<Finding>,
    pub objects: usize,
    pub blobs: usize,
    pub records: usize,
}

/// Compares `listing` with `view`; `now_ms` is when the listing was taken (ages are
/// relative to it).
pub fn inventory(listing: &[Listed], view: &CatalogView, now_ms: i64) -> Report {
    let mut report = Report::default();
    let mut present: HashMap<&str, HashSet<&str>> = HashMap::new();
    let mut records: HashSet<(&str, &str, &str, u64)> = HashSet::new();
    let mut bucket_records: HashSet<(&str, &str)> = HashSet::new();
    let empty = HashSet::new();
    let no_blobs: HashSet<&str> = HashSet::new();
    for l in listing {
        let age_ms = now_ms - l.last_modified_ms;
        match Name::parse(&l.name) {
            Name::Blob => {
                report.blobs += 1;
                present.entry(&l.tenant).or_default().insert(&l.name);
                let referenced = view.referenced.get(&l.tenant).unwrap_or(&empty);
                if !referenced.contains(&l.name) {
                    report.findings.push(Finding::OrphanBlob {
                        tenant: l.tenant.clone(),
                        blob: l.name.clone(),
                        age_ms,
                    });
                }
            }
            Name::Bucket { bucket } => {
                bucket_records.insert((&l.tenant, bucket));
                if !view
                    .buckets
                    .contains_key(&(l.tenant.clone(), bucket.to_owned()))
                {
                    report.findings.push(Finding::BucketNotInCatalog {
                        tenant: l.tenant.clone(),
                        bucket: bucket.to_owned(),
                        age_ms,
                    });
                }
            }
            Name::Object {
                bucket,
                key_hash,
                version,
            } => {
                report.records += 1;
                records.insert((&l.tenant, bucket, key_hash, version));
                let k = (l.tenant.clone(), bucket.to_owned(), key_hash.to_owned());
                let current = view.objects.get(&k).map(|(_, r)| r.version);
                let (tenant, name) = (l.tenant.clone(), l.name.clone());
                match current {
                    Some(v) if v == version => {}
                    Some(v) if v > version => report.findings.push(Finding::StaleRecord {
                        tenant,
                        name,
                        age_ms,
                    }),
                    _ => report.findings.push(Finding::RecordNotInCatalog {
                        tenant,
                        name,
                        age_ms,
                    }),
                }
            }
            Name::Unknown => {}
        }
    }
    for (tenant, bucket) in view.buckets.keys() {
        if !bucket_records.contains(&(tenant.as_str(), bucket.as_str())) {
            report.findings.push(Finding::BucketWithoutRecord {
                tenant: tenant.clone(),
                bucket: bucket.clone(),
            });
        }
    }
    let mut objects: Vec<_> = view.objects.iter().collect();
    objects.sort_by(|a, b| a.0.cmp(b.0));
    for ((tenant, bucket, hash), (key, rec)) in objects {
        report.objects += 1;
        if !records.contains(&(tenant.as_str(), bucket.as_str(), hash.as_str(), rec.version)) {
            report.findings.push(Finding::NoRecord {
                tenant: tenant.clone(),
                bucket: bucket.clone(),
                key: key.clone(),
                version: rec.version,
            });
        }
        let here = present.get(tenant.as_str()).unwrap_or(&no_blobs);
        for blob in rec.blobs() {
            if !here.contains(blob) {
                report.findings.push(Finding::MissingBlob {
                    tenant: tenant.clone(),
                    bucket: bucket.clone(),
                    key: key.clone(),
                    blob: blob.to_owned(),
                });
            }
        }
    }
    report
}
