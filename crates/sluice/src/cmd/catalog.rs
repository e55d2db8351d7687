//! `sluice catalog rebuild | check | gc`: the catalog against the backend's recovery records
//! (see `sluice_s3::recovery` and `docs/design/blob-record.md`).
//!
//! Each opens the catalog the gateway would (`[catalog] url`, or the embedded file under
//! `data_dir`, which a running gateway holds locked: stop it first) and the configured
//! backend, then calls the library; this module only parses arguments and prints.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use sluice_config::Config;
use sluice_meta::Catalog;
use sluice_s3::BlobStore;
use sluice_s3::recovery::{self, Finding, GcOptions};

#[derive(clap::Subcommand)]
pub enum Command {
    /// Rebuild an empty catalog from the backend's recovery records.
    Rebuild(RebuildArgs),
    /// Report differences between the catalog and the backend; change nothing. Exits 1
    /// when there are any.
    Check(CheckArgs),
    /// Delete backend objects nothing references that are older than a grace period.
    Gc(GcArgs),
}

#[derive(clap::Args)]
pub struct RebuildArgs {
    #[arg(long, short)]
    pub config: PathBuf,
    /// Merge the records into a catalog that is not empty (the greater version of a key
    /// wins) instead of refusing.
    #[arg(long)]
    pub force: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args)]
pub struct CheckArgs {
    #[arg(long, short)]
    pub config: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args)]
pub struct GcArgs {
    #[arg(long, short)]
    pub config: PathBuf,
    /// List what would be deleted; delete nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Only objects older than this are deleted (by the backend's last-modified time).
    #[arg(long, default_value = "24h")]
    pub grace: sluice_units::HumanDuration,
    /// Deletions per second at most (`100/s` or `100`).
    #[arg(long, default_value = "100/s", value_parser = parse_rate)]
    pub rate: f64,
    /// Also delete recovery records of objects the catalog does not hold (leftovers of
    /// deletes interrupted half-way). Never against a catalog that may have lost data.
    #[arg(long)]
    pub forget_absent: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

fn parse_rate(s: &str) -> Result<f64, String> {
    let n = s.trim().strip_suffix("/s").unwrap_or(s.trim());
    match n.parse::<f64>() {
        Ok(r) if r > 0.0 && r.is_finite() => Ok(r),
        _ => Err(format!(
            "{s:?} is not a rate: deletions per second, e.g. 100/s"
        )),
    }
}

pub fn run(cmd: &Command) -> anyhow::Result<()> {
    let rt = super::runtime()?;
    match cmd {
        Command::Rebuild(a) => rt.block_on(rebuild(a)),
        Command::Check(a) => rt.block_on(check(a)),
        Command::Gc(a) => rt.block_on(gc(a)),
    }
}

/// The catalog and backend the gateway of `path` uses, and its configured tenants.
pub(super) async fn open(
    path: &std::path::Path,
) -> anyhow::Result<(Catalog, BlobStore, BTreeSet<String>)> {
    let config = Config::load(path)?;
    let g = sluice_gateway::gateway_section(&config)?;
    let catalog = if let Some(shared) = &config.catalog {
        sluice_gateway::open_shared_catalog(&shared.url).await?.0
    } else {
        let file = g.data_dir.join("meta.redb");
        let opening = file.clone();
        tokio::task::spawn_blocking(move || Catalog::open(&opening))
            .await?
            .with_context(|| {
                format!(
                    "opening {} (is the gateway still running? it locks the file)",
                    file.display()
                )
            })?
            .0
    };
    sluice_gateway::set_tenant_limits(catalog.ledger(), &config);
    let backend = sluice_store::open_backend(&config)?;
    let grain = sluice_s3::blob::DEFAULT_GRAIN;
    let blobs = BlobStore::new(backend, grain, sluice_store::part_size(&config, grain));
    let tenants = config.tenants.iter().map(|t| t.id.clone()).collect();
    Ok((catalog, blobs, tenants))
}

async fn rebuild(args: &RebuildArgs) -> anyhow::Result<()> {
    let (catalog, blobs, tenants) = open(&args.config).await?;
    let summary = recovery::rebuild(&catalog, &blobs, &tenants, args.force).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        for (tenant, name, why) in &summary.skipped {
            println!("skipped tenants/{tenant}/{name}: {why}");
        }
        println!(
            "rebuilt {} buckets and {} objects ({} bytes) from the backend's recovery records{}",
            summary.buckets,
            summary.objects,
            summary.bytes,
            if summary.skipped.is_empty() {
                String::new()
            } else {
                format!("; {} records skipped", summary.skipped.len())
            }
        );
    }
    Ok(())
}

async fn check(args: &CheckArgs) -> anyhow::Result<()> {
    let (catalog, blobs, tenants) = open(&args.config).await?;
    let report = recovery::check(&catalog, &blobs, &tenants).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        for f in &report.findings {
            println!("{}", describe(f));
        }
        println!(
            "{} objects, {} blobs, {} recovery records: {} differences",
            report.objects,
            report.blobs,
            report.records,
            report.findings.len()
        );
    }
    if report.findings.is_empty() {
        Ok(())
    } else {
        anyhow::bail!(
            "the catalog and the backend differ in {} places",
            report.findings.len()
        )
    }
}

fn describe(f: &Finding) -> String {
    let age =
        |ms: i64| sluice_units::HumanDuration(Duration::from_millis(ms.max(0).unsigned_abs()));
    match f {
        Finding::RecordNotInCatalog {
            tenant,
            name,
            age_ms,
        } => format!(
            "record not in the catalog: tenants/{tenant}/{name} (age {})",
            age(*age_ms)
        ),
        Finding::BucketNotInCatalog { tenant, bucket, .. } => {
            format!("bucket record not in the catalog: {tenant}/{bucket}")
        }
        Finding::NoRecord {
            tenant,
            bucket,
            key,
            version,
        } => format!("no recovery record: {tenant}/{bucket}/{key} (version {version})"),
        Finding::BucketWithoutRecord { tenant, bucket } => {
            format!("no bucket record: {tenant}/{bucket}")
        }
        Finding::MissingBlob {
            tenant,
            bucket,
            key,
            blob,
        } => format!("blob missing from the backend: {tenant}/{bucket}/{key} needs {blob}"),
        Finding::OrphanBlob {
            tenant,
            blob,
            age_ms,
        } => format!(
            "orphan blob: tenants/{tenant}/{blob} (age {})",
            age(*age_ms)
        ),
        Finding::StaleRecord {
            tenant,
            name,
            age_ms,
        } => format!(
            "superseded record: tenants/{tenant}/{name} (age {})",
            age(*age_ms)
        ),
    }
}

async fn gc(args: &GcArgs) -> anyhow::Result<()> {
    let (catalog, blobs, tenants) = open(&args.config).await?;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let opts = GcOptions {
        grace: args.grace.get(),
        rate: args.rate,
        dry_run: args.dry_run,
        forget_absent: args.forget_absent,
        holder: format!("sluice-catalog-gc-{}-{nanos:08x}", std::process::id()),
    };
    let summary = recovery::gc(&catalog, &blobs, &tenants, &opts).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
        return Ok(());
    }
    let verb = if args.dry_run {
        "would delete"
    } else {
        "deleted"
    };
    for (tenant, name) in &summary.deleted {
        println!("{verb} tenants/{tenant}/{name}");
    }
    println!(
        "{verb} {}; kept {} younger than {} and {} named by recovery records the catalog lacks",
        summary.deleted.len(),
        summary.kept_young,
        args.grace,
        summary.kept_recorded
    );
    Ok(())
}
