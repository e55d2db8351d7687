//! `sluice scrub`: every blob the catalog references read back and verified against the
//! checksums recorded at write (see `sluice_s3::recovery::scrub` and `docs/integrity.md`).
//!
//! Opens the catalog and backend as `sluice catalog` does (the embedded catalog's file is
//! locked by a running gateway: stop it first, use a shared catalog, or let the gateway
//! scrub continuously with `[gateway.scrub]`); prints what it found by object and exits 1
//! when it found any corrupt, missing or unreadable blob.

use std::path::PathBuf;

use sluice_s3::recovery::scrub::{self, ScrubFinding, ScrubOptions};

#[derive(clap::Args)]
pub struct Args {
    #[arg(long, short)]
    pub config: PathBuf,
    /// Only this tenant's objects.
    #[arg(long)]
    pub tenant: Option<String>,
    /// Read at most this fast (`200MiB/s`); unpaced when absent.
    #[arg(long)]
    pub rate: Option<sluice_units::Rate>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    let rt = super::runtime()?;
    let report = rt.block_on(async {
        let (catalog, blobs, tenants) = super::catalog::open(&args.config).await?;
        let opts = ScrubOptions {
            tenant: args.tenant.clone(),
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // a positive rate
            rate: args.rate.map(|r| r.bytes_per_sec().max(1.0) as u64),
            ..ScrubOptions::default()
        };
        anyhow::Ok(scrub::scrub(&catalog, &blobs, &tenants, &opts).await?)
    })?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        for f in &report.findings {
            println!("{}", describe(f));
        }
        println!(
            "scrubbed {} objects ({} inline), {} segments, {} bytes: {} corrupt or missing{}",
            report.objects,
            report.inline_objects,
            report.segments,
            report.bytes,
            report.findings.len(),
            if report.unverified_segments > 0 {
                format!(
                    "; {} segments written before checksums, read unverified",
                    report.unverified_segments
                )
            } else {
                String::new()
            }
        );
    }
    if report.is_clean() {
        Ok(())
    } else {
        std::process::exit(1)
    }
}

fn describe(f: &ScrubFinding) -> String {
    match f {
        ScrubFinding::Corrupt {
            tenant,
            bucket,
            key,
            blob,
            segment,
            chunk,
        } => format!(
            "corrupt: {tenant}/{bucket}/{key}: segment {segment} (blob {blob}), chunk {chunk} fails its checksum"
        ),
        ScrubFinding::Missing {
            tenant,
            bucket,
            key,
            blob,
            segment,
        } => format!(
            "missing: {tenant}/{bucket}/{key}: segment {segment} (blob {blob}) is not in the backend"
        ),
        ScrubFinding::Unreadable {
            tenant,
            bucket,
            key,
            blob,
            segment,
            error,
        } => {
            format!("unreadable: {tenant}/{bucket}/{key}: segment {segment} (blob {blob}): {error}")
        }
    }
}
