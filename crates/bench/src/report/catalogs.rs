//! The gateway report's shared-catalog parts: the PostgreSQL catalog against the embedded
//! (redb) one, and the aggregate over 1, 2 and 3 gateways on one PostgreSQL catalog (see
//! [`crate::gateway::Ratios`] and [`crate::aggregate::Report`]).

use std::fmt::Write as _;

use serde::Deserialize;

use super::{NONE, group, ms, opt, opt_percent, plural, size_text, times};

/// The small-object PUT rate the PostgreSQL catalog is held to, as a share of redb's.
const SMALL_PUT_TARGET: f64 = 0.5;
/// The large-object throughput it is held to, as a share of redb's.
const LARGE_TARGET: f64 = 0.95;

#[derive(Deserialize)]
pub(super) struct PgRatios {
    put_mib_s: Option<f64>,
    get_mib_s: Option<f64>,
    small_put_ops_s: Option<f64>,
    small_get_ops_s: Option<f64>,
    #[serde(default)]
    rounds: Vec<[Option<f64>; 4]>,
}

#[derive(Deserialize)]
pub(super) struct Aggregate {
    steps: Vec<Step>,
    #[serde(default)]
    starts: Vec<Start>,
    rounds: usize,
    cold_reads: bool,
}

#[derive(Deserialize)]
struct Step {
    gateways: usize,
    large_in_flight: usize,
    small_objects: u64,
    small_in_flight: usize,
    put_mib_s: Option<f64>,
    get_mib_s: Option<f64>,
    small_put_ops_s: Option<f64>,
    small_get_ops_s: Option<f64>,
    small_put_p99_s: Option<f64>,
    small_get_p99_s: Option<f64>,
    vs_one_gateway: [Option<f64>; 4],
}

#[derive(Deserialize)]
struct Start {
    gateway: usize,
    blobs_before: u64,
    blobs_after: u64,
}

/// `ratio` against the `target` share, as "91% (≥ 95%: short)".
fn held(ratio: Option<f64>, target: f64) -> String {
    match ratio.filter(|r| r.is_finite()) {
        None => NONE.to_owned(),
        Some(r) => format!(
            "{} (target ≥ {}: {})",
            opt_percent(Some(r)),
            opt_percent(Some(target)),
            if r >= target { "met" } else { "not met" }
        ),
    }
}

/// The ratios' table for `docs/benchmarks.md`.
pub(super) fn pg_figures(x: &PgRatios, large: &str, small: &str, version: Option<&str>) -> String {
    let mut out = format!(
        "\n**PostgreSQL catalog / embedded (redb) catalog**, the same gateway, backend and work \
         side by side in every round{}:\n\n",
        version.map_or(String::new(), |v| format!(" ({v}, fsync on)"))
    );
    let _ = writeln!(
        out,
        "| PostgreSQL / redb | {large} PUT | {large} GET | {small} PUT | {small} GET |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|");
    let _ = writeln!(
        out,
        "| of the medians | {} | {} | {} | {} |",
        held(x.put_mib_s, LARGE_TARGET),
        held(x.get_mib_s, LARGE_TARGET),
        held(x.small_put_ops_s, SMALL_PUT_TARGET),
        opt_percent(x.small_get_ops_s),
    );
    if x.rounds.len() > 1 {
        for (i, [p, g, sp, sg]) in x.rounds.iter().enumerate() {
            let _ = writeln!(
                out,
                "| round {} | {} | {} | {} | {} |",
                i + 1,
                opt_percent(*p),
                opt_percent(*g),
                opt_percent(*sp),
                opt_percent(*sg)
            );
        }
    }
    out
}

/// The aggregate's table for `docs/benchmarks.md`.
pub(super) fn aggregate_figures(a: &Aggregate, large: &str, small: &str) -> String {
    let mut out = format!(
        "\n**1, 2 and 3 gateways on one PostgreSQL catalog** and one backend directory, the \
         client spreading its requests over them (each object read back through another \
         gateway than the one it was written through), medians of {}. {}\n\n",
        plural(a.rounds, "round"),
        if a.cold_reads {
            "The page cache was dropped before each read phase."
        } else {
            "The page cache was not dropped (not run as root)."
        }
    );
    let _ = writeln!(
        out,
        "| gateways | in flight ({large} / {small}) | {small} objects | PUT MiB/s | GET MiB/s \
         | {small} PUT/s | {small} GET/s | {small} PUT p99 / GET p99 | vs 1 gateway: {small} \
         PUT / GET |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|");
    for s in &a.steps {
        let _ = writeln!(
            out,
            "| {} | {} / {} | {} | {} | {} | {} | {} | {} / {} | {} / {} |",
            s.gateways,
            s.large_in_flight,
            s.small_in_flight,
            group(s.small_objects),
            opt(s.put_mib_s, 0),
            opt(s.get_mib_s, 0),
            opt(s.small_put_ops_s, 0),
            opt(s.small_get_ops_s, 0),
            ms(s.small_put_p99_s),
            ms(s.small_get_p99_s),
            times(s.vs_one_gateway[2]),
            times(s.vs_one_gateway[3]),
        );
    }
    if !a.starts.is_empty() {
        let starts: Vec<String> = a
            .starts
            .iter()
            .map(|s| {
                format!(
                    "gateway {} started on {} blobs and left {}",
                    s.gateway,
                    group(s.blobs_before),
                    group(s.blobs_after)
                )
            })
            .collect();
        let _ = writeln!(
            out,
            "\nEach gateway started on the populated catalog and backend: {}.",
            starts.join("; ")
        );
    }
    out
}

/// The README's line under the gateway's table.
pub(super) fn summary_line(
    x: Option<&PgRatios>,
    a: Option<&Aggregate>,
    large: &str,
    small: &str,
) -> String {
    let mut parts = Vec::new();
    if let Some(x) = x {
        parts.push(format!(
            "PostgreSQL catalog / redb in the same run: {small} PUT {}, GET {}; {large} PUT \
             {}, GET {}",
            opt_percent(x.small_put_ops_s),
            opt_percent(x.small_get_ops_s),
            opt_percent(x.put_mib_s),
            opt_percent(x.get_mib_s),
        ));
    }
    if let Some(last) = a.and_then(|a| a.steps.iter().max_by_key(|s| s.gateways)) {
        parts.push(format!(
            "{} on one PostgreSQL catalog: {} {small} PUT/s ({} of one gateway), {} MiB/s \
             {large} GET",
            plural(last.gateways, "gateway"),
            opt(last.small_put_ops_s, 0),
            times(last.vs_one_gateway[2]),
            opt(last.get_mib_s, 0),
        ));
    }
    if parts.is_empty() {
        return String::new();
    }
    format!("\n{}.\n", parts.join(". "))
}

/// Sizes as the tables name them.
pub(super) fn sizes(large: u64, small: u64) -> (String, String) {
    (size_text(large), size_text(small))
}
