//! The continuous scrub (`[gateway.scrub]`): every blob the catalog references read back
//! through the verifying reader, pass after pass, as a background class of the gateway's
//! throughput scheduler.
//!
//! - **Pacing.** Each pass admits its reads through `Throttle::background("scrub", rate)`:
//!   with `[gateway.capacity]` it is served only from capacity the tenants leave unused and
//!   never faster than `rate` (`sluice_throttle`'s background classes), so it does not move a
//!   tenant's tail. Without `[gateway.capacity]` there is no capacity model; the scrub runs
//!   through a throttle of its own with no tenants, held to `rate` alone.
//! - **Passes.** A pass reads the catalog's objects of the served tenants (`recovery::scrub`);
//!   the next starts `interval` after it ended. The first starts when the gateway does.
//! - **One scrubber per catalog.** A pass runs under the catalog's `scrub` lease
//!   (`Engine::try_lease`), renewed every [`RENEW`] while this gateway keeps scrubbing, also
//!   between passes: of several gateways on one shared catalog exactly one scrubs, and
//!   another takes over within [`LEASE_TTL`] when it stops. The embedded catalog is this
//!   process's alone: its holder name is fixed, so a restarted gateway takes over its
//!   predecessor's lease at once.
//! - **Findings** are logged at error as they are found (tenant, bucket, key, blob, segment)
//!   and counted on `/metrics`; nothing is changed, in the catalog or the backend.
//! - **Reload** applies at once: a new rate to the running pass, a new interval to the wait,
//!   `enabled = false` (or the table removed) stops the pass and gives the lease up.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use sluice_config::ScrubConfig;
use sluice_meta::Catalog;
use sluice_s3::BlobStore;
use sluice_s3::recovery::scrub::{ScrubFinding, ScrubObserver, ScrubOptions, scrub_observed};
use sluice_throttle::{Policy, Throttle, ThrottleConfig};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::Control;

/// The catalog lease a scrubbing gateway holds.
pub const LEASE: &str = "scrub";
/// How long the lease outlives its last renewal.
pub const LEASE_TTL: Duration = Duration::from_secs(60);
/// How often it is renewed (and how often a gateway without it asks again).
pub const RENEW: Duration = Duration::from_secs(20);

/// What the scrub has done, for `/metrics`.
#[derive(Debug, Default)]
pub struct ScrubStats {
    bytes: AtomicU64,
    corrupt: AtomicU64,
    missing: AtomicU64,
    unreadable: AtomicU64,
    passes: AtomicU64,
    /// Unix milliseconds; 0: no pass has ended.
    last_end_ms: AtomicI64,
    last_objects: AtomicU64,
    last_findings: AtomicU64,
    running: AtomicBool,
    /// Times the lease was asked for and another holder had it.
    lease_refusals: AtomicU64,
}

impl ScrubObserver for ScrubStats {
    fn read(&self, bytes: u64) {
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    fn found(&self, finding: &ScrubFinding) {
        match finding {
            ScrubFinding::Corrupt {
                tenant,
                bucket,
                key,
                blob,
                segment,
                chunk,
            } => {
                self.corrupt.fetch_add(1, Ordering::Relaxed);
                tracing::error!(
                    tenant,
                    bucket,
                    key,
                    blob,
                    segment,
                    chunk,
                    "scrub: corrupt blob (its bytes fail their checksum)"
                );
            }
            ScrubFinding::Missing {
                tenant,
                bucket,
                key,
                blob,
                segment,
            } => {
                self.missing.fetch_add(1, Ordering::Relaxed);
                tracing::error!(
                    tenant,
                    bucket,
                    key,
                    blob,
                    segment,
                    "scrub: missing blob (not in the backend)"
                );
            }
            ScrubFinding::Unreadable {
                tenant,
                bucket,
                key,
                blob,
                segment,
                error,
            } => {
                self.unreadable.fetch_add(1, Ordering::Relaxed);
                tracing::error!(
                    tenant,
                    bucket,
                    key,
                    blob,
                    segment,
                    error,
                    "scrub: unreadable blob"
                );
            }
        }
    }
}

/// The gateway's scrub: its settings (swapped on reload) and what it has done.
#[derive(Debug)]
pub struct Scrub {
    settings: watch::Sender<Option<ScrubConfig>>,
    stats: Arc<ScrubStats>,
}

impl Scrub {
    pub fn new(settings: Option<ScrubConfig>) -> Arc<Self> {
        Arc::new(Self {
            settings: watch::Sender::new(settings),
            stats: Arc::default(),
        })
    }

    /// Applies `[gateway.scrub]` from a reloaded configuration.
    pub fn configure(&self, settings: Option<ScrubConfig>) {
        self.settings.send_if_modified(|current| {
            let changed = *current != settings;
            *current = settings;
            changed
        });
    }

    /// The Prometheus text of the scrub's counters.
    pub fn render(&self) -> String {
        let s = &self.stats;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mut out = String::new();
        let mut metric = |name: &str, kind: &str, help: &str, lines: &[(&str, String)]| {
            let _ = writeln!(out, "# HELP sluice_scrub_{name} {help}");
            let _ = writeln!(out, "# TYPE sluice_scrub_{name} {kind}");
            for (labels, value) in lines {
                let _ = writeln!(out, "sluice_scrub_{name}{labels} {value}");
            }
        };
        metric(
            "bytes_total",
            "counter",
            "Bytes the continuous scrub read and verified.",
            &[("", load(&s.bytes).to_string())],
        );
        metric(
            "findings_total",
            "counter",
            "Bad blobs the continuous scrub found (each pass counts what it finds), by kind.",
            &[
                ("{kind=\"corrupt\"}", load(&s.corrupt).to_string()),
                ("{kind=\"missing\"}", load(&s.missing).to_string()),
                ("{kind=\"unreadable\"}", load(&s.unreadable).to_string()),
            ],
        );
        metric(
            "passes_total",
            "counter",
            "Scrub passes completed.",
            &[("", load(&s.passes).to_string())],
        );
        let end = s.last_end_ms.load(Ordering::Relaxed) as f64 / 1e3;
        metric(
            "last_pass_end_timestamp_seconds",
            "gauge",
            "When the last complete scrub pass ended, Unix time (0: none yet).",
            &[("", end.to_string())],
        );
        metric(
            "last_pass_objects",
            "gauge",
            "Objects the last complete scrub pass checked.",
            &[("", load(&s.last_objects).to_string())],
        );
        metric(
            "last_pass_findings",
            "gauge",
            "Bad blobs the last complete scrub pass found.",
            &[("", load(&s.last_findings).to_string())],
        );
        metric(
            "lease_refusals_total",
            "counter",
            "Times this gateway asked for the catalog's scrub lease while another held it.",
            &[("", load(&s.lease_refusals).to_string())],
        );
        metric(
            "running",
            "gauge",
            "1 while a scrub pass runs on this gateway.",
            &[("", u8::from(s.running.load(Ordering::Relaxed)).to_string())],
        );
        out
    }
}

/// How a pass ended.
enum PassEnd {
    Done(Result<sluice_s3::recovery::scrub::ScrubReport, String>),
    /// `[gateway.scrub]` was turned off or removed.
    Disabled,
    LeaseLost,
    Stopped,
}

/// The lease's holder name for this gateway. On a shared catalog: its S3 address, process
/// and start time, unique among the gateways. The embedded catalog is one process's at a
/// time, so a lease in its file is a predecessor's: one fixed name takes it over at once.
pub fn holder(addr: std::net::SocketAddr, shared: bool) -> String {
    if shared {
        format!(
            "gateway {addr} pid {} since {}",
            std::process::id(),
            sluice_meta::now_ms()
        )
    } else {
        "the gateway of this embedded catalog".to_owned()
    }
}

async fn lease(catalog: &Arc<Catalog>, holder: &str, take: bool) -> Result<bool, String> {
    let (c, h) = (Arc::clone(catalog), holder.to_owned());
    tokio::task::spawn_blocking(move || {
        if take {
            c.try_lease(LEASE, &h, LEASE_TTL)
        } else {
            c.release_lease(LEASE, &h).map(|()| false)
        }
    })
    .await
    .map_err(|e| e.to_string())?
    .map_err(|e| e.to_string())
}

/// Runs the scrub until `stop` changes: idle while `[gateway.scrub]` is off.
pub async fn run(
    control: Control,
    blobs: Arc<BlobStore>,
    holder: String,
    mut stop: watch::Receiver<bool>,
) {
    let scrub = Arc::clone(&control.scrub);
    let mut settings = scrub.settings.subscribe();
    let mut held = false;
    // Whether "another gateway scrubs" was said since this one last held the lease.
    let mut announced = false;
    let mut last_end: Option<Instant> = None;
    // The throttle of its own when the gateway has none (see the module doc).
    let mut own: Option<Arc<Throttle>> = None;
    loop {
        if *stop.borrow() {
            break;
        }
        let current = *settings.borrow_and_update();
        let Some(cfg) = current.filter(|c| c.enabled) else {
            if held {
                held = false;
                if let Err(e) = lease(&control.catalog, &holder, false).await {
                    tracing::warn!(error = %e, "giving up the scrub lease failed");
                }
            }
            tokio::select! {
                _ = settings.changed() => {}
                () = stopped(&mut stop) => break,
            }
            continue;
        };
        // Between passes: wait for the interval, keeping the lease.
        if let Some(end) = last_end
            && Instant::now() < end + cfg.interval
        {
            let wake = if held {
                (end + cfg.interval).min(Instant::now() + RENEW)
            } else {
                end + cfg.interval
            };
            tokio::select! {
                () = tokio::time::sleep_until(wake) => {
                    if held {
                        held = matches!(lease(&control.catalog, &holder, true).await, Ok(true));
                    }
                }
                _ = settings.changed() => {}
                () = stopped(&mut stop) => break,
            }
            continue;
        }
        match lease(&control.catalog, &holder, true).await {
            Ok(true) => {
                held = true;
                announced = false;
            }
            outcome => {
                if let Err(e) = outcome {
                    tracing::warn!(error = %e, "taking the scrub lease failed");
                } else {
                    scrub.stats.lease_refusals.fetch_add(1, Ordering::Relaxed);
                    if !announced {
                        tracing::info!(
                            "another gateway holds the catalog's scrub lease: it scrubs"
                        );
                        announced = true;
                    }
                }
                held = false;
                tokio::select! {
                    () = tokio::time::sleep(RENEW) => {}
                    _ = settings.changed() => {}
                    () = stopped(&mut stop) => break,
                }
                continue;
            }
        }
        let throttle = match &control.throttle {
            Some(t) => Arc::clone(t),
            None => match &own {
                Some(t) => Arc::clone(t),
                None => match alone(cfg.rate) {
                    Ok(t) => Arc::clone(own.insert(t)),
                    Err(e) => {
                        tracing::error!(error = %e, "the scrub cannot start its pacing");
                        return;
                    }
                },
            },
        };
        let end = pass(
            &control,
            &blobs,
            &throttle,
            &holder,
            cfg,
            &mut settings,
            &mut stop,
        )
        .await;
        scrub.stats.running.store(false, Ordering::Relaxed);
        match end {
            PassEnd::Done(result) => {
                last_end = Some(Instant::now());
                match result {
                    Ok(report) => {
                        let s = &scrub.stats;
                        s.passes.fetch_add(1, Ordering::Relaxed);
                        s.last_end_ms
                            .store(sluice_meta::now_ms(), Ordering::Relaxed);
                        s.last_objects.store(report.objects, Ordering::Relaxed);
                        s.last_findings
                            .store(report.findings.len() as u64, Ordering::Relaxed);
                        let findings = report.findings.len();
                        if findings == 0 {
                            tracing::info!(
                                objects = report.objects,
                                bytes = report.bytes,
                                "scrub pass done: every blob verified"
                            );
                        } else {
                            tracing::error!(
                                objects = report.objects,
                                bytes = report.bytes,
                                findings,
                                "scrub pass done: blobs are corrupt, missing or unreadable"
                            );
                        }
                    }
                    Err(e) => tracing::error!(error = %e, "the scrub pass failed"),
                }
            }
            PassEnd::Disabled => {}
            PassEnd::LeaseLost => {
                held = false;
                tracing::warn!("the scrub lease was lost: the pass stopped");
            }
            PassEnd::Stopped => break,
        }
    }
    if held && let Err(e) = lease(&control.catalog, &holder, false).await {
        tracing::warn!(error = %e, "giving up the scrub lease failed");
    }
}

/// Resolves when the gateway stops (or its stopper is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// A throttle for the scrub alone: no tenants, no capacity model (`rate_limit`), so its
/// background class is held to its own rate.
fn alone(rate: f64) -> Result<Arc<Throttle>, sluice_throttle::ThrottleError> {
    Throttle::start(
        ThrottleConfig {
            policy: Policy::RateLimit,
            bandwidth: rate,
            ops: 1e9,
            queue_depth: 1,
            lookahead: sluice_throttle::DEFAULT_LOOKAHEAD,
        },
        Vec::new(),
    )
}

/// One pass, under the lease, through a background class of `throttle`.
async fn pass(
    control: &Control,
    blobs: &BlobStore,
    throttle: &Throttle,
    holder: &str,
    cfg: ScrubConfig,
    settings: &mut watch::Receiver<Option<ScrubConfig>>,
    stop: &mut watch::Receiver<bool>,
) -> PassEnd {
    let class = match throttle.background("scrub", Some(cfg.rate)) {
        Ok(c) => c,
        Err(e) => return PassEnd::Done(Err(e.to_string())),
    };
    let tenants: BTreeSet<String> = control
        .config
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .tenants
        .iter()
        .map(|t| t.id.clone())
        .collect();
    let opts = ScrubOptions {
        admission: Some(Arc::clone(&class)),
        ..ScrubOptions::default()
    };
    let stats = Arc::clone(&control.scrub.stats);
    stats.running.store(true, Ordering::Relaxed);
    tracing::info!(
        tenants = tenants.len(),
        rate_bytes_per_s = cfg.rate,
        "scrub pass started"
    );
    let scrubbing = scrub_observed(&control.catalog, blobs, &tenants, &opts, &*stats);
    tokio::pin!(scrubbing);
    let mut renew = tokio::time::interval_at(Instant::now() + RENEW, RENEW);
    loop {
        tokio::select! {
            report = &mut scrubbing => return PassEnd::Done(report.map_err(|e| e.to_string())),
            _ = renew.tick() => {
                if !matches!(lease(&control.catalog, holder, true).await, Ok(true)) {
                    return PassEnd::LeaseLost;
                }
            }
            _ = settings.changed() => {
                let now = *settings.borrow();
                match now.filter(|c| c.enabled) {
                    Some(c) => {
                        if let Err(e) = class.set_background_rate(Some(c.rate)) {
                            tracing::warn!(error = %e, "the scrub's new rate was not applied");
                        }
                    }
                    None => return PassEnd::Disabled,
                }
            }
            () = stopped(stop) => return PassEnd::Stopped,
        }
    }
}
