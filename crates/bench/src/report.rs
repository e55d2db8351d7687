//! `sluice bench report`: the benchmarks' JSON reports turned into Markdown tables, so that no
//! figure in the documents is ever typed by hand.
//!
//! Pure: JSON values in, Markdown out; reading and writing files is the command's business.
//! Each benchmark writes its report with `--json FILE` (`bench gateway`, `bench agent`,
//! `bench noisy-neighbor`); this module reads the fields those reports serialize (see
//! [`crate::gateway::Report`], [`crate::noisy::Report`] and the agent's report in
//! `crates/sluice/src/cmd/bench_agent.rs`), ignores the rest, and renders
//!
//! - [`figures`]: one section per benchmark for `docs/benchmarks.md` (the configuration the
//!   report echoes, the command that reproduces it, every table);
//! - [`summary`]: one short table per benchmark for the README.
//!
//! A benchmark without a report is rendered as "not yet measured: run `COMMAND`", never with
//! figures from anywhere else. A figure the benchmark could not measure (JSON `null`: serde
//! writes a NaN or an infinity so) is rendered as "–".
//!
//! In a document each rendered section sits between two markers, `<!-- figures:NAME:begin -->`
//! and `<!-- figures:NAME:end -->`; [`splice`] replaces what is between them and leaves
//! everything around them (the hand-written method) as it is.

use std::fmt::Write as _;
use std::path::PathBuf;

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::stats::quantile;
#[cfg(test)]
use agent::{AgentReport, agent_command};
use agent::{agent_figures, agent_summary};

const MIB: f64 = 1024.0 * 1024.0;
const GIB: f64 = 1024.0 * MIB;
/// The binary that runs the benchmarks, as the documents tell users to call it.
const BIN: &str = "target/release/sluice";
/// What a figure that was not measured shows.
const NONE: &str = "–";

/// Names of the sections [`figures`] renders, in order; [`SUMMARY`] names the README's.
pub const GATEWAY: &str = "gateway";
pub const AGENT: &str = "agent";
pub const NOISY: &str = "noisy-neighbor";
pub const SUMMARY: &str = "summary";

/// Where one benchmark's report lives, and what it holds.
#[derive(Debug, Clone)]
pub struct Source {
    /// The path the report is kept at, as the documents name it (`docs/bench/gateway.json`):
    /// it goes into the command that reproduces the figures.
    pub path: String,
    /// The report; `None` when there is none yet.
    pub json: Option<Value>,
}

/// The three benchmarks' reports.
#[derive(Debug, Clone)]
pub struct Inputs {
    pub gateway: Source,
    pub agent: Source,
    pub noisy: Source,
}

/// Why a report could not be rendered or a document not rewritten.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("{path}: not a `sluice bench {bench}` report: {source}")]
    Shape {
        path: String,
        bench: &'static str,
        source: serde_json::Error,
    },
    #[error("marker {marker:?}: {problem}")]
    Marker {
        marker: String,
        problem: &'static str,
    },
}

/// The marker that opens section `name` in a document.
pub fn begin_marker(name: &str) -> String {
    format!("<!-- figures:{name}:begin -->")
}

/// The marker that closes section `name` in a document.
pub fn end_marker(name: &str) -> String {
    format!("<!-- figures:{name}:end -->")
}

/// The figures of `docs/benchmarks.md`: `(section name, Markdown)` for [`GATEWAY`],
/// [`AGENT`] and [`NOISY`].
pub fn figures(inputs: &Inputs) -> Result<Vec<(&'static str, String)>, ReportError> {
    Ok(vec![
        (GATEWAY, gateway_figures(&inputs.gateway)?),
        (AGENT, agent_figures(&inputs.agent)?),
        (NOISY, noisy_figures(&inputs.noisy)?),
    ])
}

/// The README's [`SUMMARY`] section: one short table per benchmark, each with its command.
pub fn summary(inputs: &Inputs) -> Result<String, ReportError> {
    let mut out = gateway_summary(&inputs.gateway)?;
    out.push('\n');
    out.push_str(&agent_summary(&inputs.agent)?);
    out.push('\n');
    out.push_str(&noisy_summary(&inputs.noisy)?);
    Ok(out)
}

/// `doc` with the text between section `name`'s markers replaced by `content`. Each marker
/// must appear exactly once, the begin marker first. Splicing the same content again
/// changes nothing.
pub fn splice(doc: &str, name: &str, content: &str) -> Result<String, ReportError> {
    let (begin, end) = (begin_marker(name), end_marker(name));
    let find = |marker: &str| {
        let problem = match doc.matches(marker).count() {
            1 => return Ok(doc.find(marker).unwrap_or_default()),
            0 => "not found in the document",
            _ => "appears more than once in the document",
        };
        Err(ReportError::Marker {
            marker: marker.to_owned(),
            problem,
        })
    };
    let (b, e) = (find(&begin)?, find(&end)?);
    if e < b {
        return Err(ReportError::Marker {
            marker: end,
            problem: "comes before its begin marker",
        });
    }
    let mut out = String::with_capacity(doc.len() + content.len());
    out.push_str(&doc[..b + begin.len()]);
    out.push_str("\n\n");
    out.push_str(content.trim_matches('\n'));
    out.push_str("\n\n");
    out.push_str(&doc[e..]);
    Ok(out)
}

// ---- the reports' shapes (the fields rendered; serde ignores the others) -------------------

#[derive(Deserialize)]
struct GatewayReport {
    config: GatewayConfig,
    bytes_moved_per_target: Option<u64>,
    targets: Vec<GatewayTarget>,
    /// Reports written before the PostgreSQL catalog's target have none of these.
    #[serde(default)]
    postgres: Option<String>,
    #[serde(default)]
    pg_vs_redb: Option<catalogs::PgRatios>,
    #[serde(default)]
    aggregate: Option<catalogs::Aggregate>,
}

#[derive(Deserialize, PartialEq)]
struct GatewayConfig {
    large_objects: usize,
    large_size: u64,
    large_concurrency: usize,
    large_slice: usize,
    small_objects: usize,
    small_size: u64,
    small_concurrency: usize,
    rounds: usize,
}

impl GatewayConfig {
    fn of(c: &crate::gateway::Config) -> Self {
        Self {
            large_objects: c.large_objects,
            large_size: c.large_size as u64,
            large_concurrency: c.large_concurrency,
            large_slice: c.large_slice,
            small_objects: c.small_objects,
            small_size: c.small_size as u64,
            small_concurrency: c.small_concurrency,
            rounds: c.rounds,
        }
    }
}

#[derive(Deserialize)]
struct GatewayTarget {
    name: String,
    put_mib_s: Option<f64>,
    get_mib_s: Option<f64>,
    small_put_ops_s: Option<f64>,
    small_get_ops_s: Option<f64>,
    small_put_p50_s: Option<f64>,
    small_put_p99_s: Option<f64>,
    small_put_p999_s: Option<f64>,
    small_get_p99_s: Option<f64>,
    rss_start_bytes: Option<u64>,
    rss_peak_bytes: Option<u64>,
    cold_reads: bool,
    #[serde(default)]
    rounds: Vec<[Option<f64>; 4]>,
    #[serde(default)]
    large_get_slices_s: Vec<Vec<Option<f64>>>,
}

#[derive(Deserialize)]
struct NoisyReport {
    seed: u64,
    config: NoisyConfig,
    scenarios: Vec<Scenario>,
    /// Scenarios the run could not measure (absent when it measured every one).
    #[serde(default)]
    skipped: Vec<two_gateways::Skipped>,
}

#[derive(Deserialize)]
struct NoisyConfig {
    seconds: f64,
    tier_bandwidth_bps: f64,
    tier_ops: f64,
    victim_shard_bytes: u64,
    victim_rate_per_s: f64,
    victim_reservation_bps: f64,
    victim_weight: f64,
    aggressor_streams: usize,
    aggressor_object_bytes: u64,
    aggressor_interval_s: f64,
    agent_drain_rate_bps: f64,
    grain_bytes: u64,
    /// The node scenarios' local device (absent from reports older than them).
    node: Option<NoisyNode>,
    /// `--only`, when given.
    #[serde(default)]
    only: Option<Vec<String>>,
}

#[derive(Deserialize)]
struct NoisyNode {
    local_bandwidth_bps: f64,
    local_ops: f64,
}

#[derive(Deserialize)]
struct Scenario {
    name: String,
    victim_p50_s: Option<f64>,
    victim_p99_s: Option<f64>,
    victim_p999_s: Option<f64>,
    victim_p99_vs_solo: Option<f64>,
    victim_requests: usize,
    victim_errors: usize,
    victim_throughput_bps: Option<f64>,
    victim_target_bps: Option<f64>,
    aggressor_stall_s: Option<f64>,
    tier_utilization: Option<f64>,
    drain_completion_s: Option<f64>,
    local_utilization: Option<f64>,
    /// `dmclock_scrub`, `solo_scrub`: what the gateway's scrub read (absent elsewhere).
    scrub_bps: Option<f64>,
    /// `two_gateways`: see [`two_gateways`] (absent elsewhere).
    #[serde(default, deserialize_with = "two_gateways::present")]
    reconverge_s: Option<two_gateways::Reconverge>,
}

/// The report in `src`, `None` when there is none.
fn parse<T: DeserializeOwned>(src: &Source, bench: &'static str) -> Result<Option<T>, ReportError> {
    src.json
        .as_ref()
        .map(|v| {
            T::deserialize(v).map_err(|source| ReportError::Shape {
                path: src.path.clone(),
                bench,
                source,
            })
        })
        .transpose()
}

fn not_measured(command: &str) -> String {
    format!("Not yet measured: run `{command}`.\n")
}

// ---- commands ----------------------------------------------------------------------------

fn gateway_default_command(path: &str) -> String {
    format!("{BIN} bench gateway --json {path}")
}

/// The command that reproduces `r`: the preset its configuration is (`--quick` or the
/// default), `--weed none` when it ran without SeaweedFS, `--postgres none` without
/// PostgreSQL.
fn gateway_command(r: &GatewayReport, path: &str) -> String {
    let quick = GatewayConfig::of(
        &crate::gateway::Config::full(PathBuf::new(), PathBuf::new(), None).quick(),
    );
    let mut cmd = format!("{BIN} bench gateway");
    if r.config == quick {
        cmd.push_str(" --quick");
    }
    if !r.targets.iter().any(|t| t.name.starts_with("SeaweedFS")) {
        cmd.push_str(" --weed none");
    }
    if r.postgres.is_none() && !r.targets.iter().any(|t| t.name.contains("PostgreSQL")) {
        cmd.push_str(" --postgres none");
    }
    let _ = write!(cmd, " --json {path}");
    cmd
}

/// The SVG the noisy-neighbour run writes beside its JSON.
fn svg_path(path: &str) -> String {
    match path.strip_suffix(".json") {
        Some(stem) => format!("{stem}.svg"),
        None => format!("{path}.svg"),
    }
}

fn noisy_default_command(path: &str) -> String {
    format!(
        "{BIN} bench noisy-neighbor --json {path} --svg {}",
        svg_path(path)
    )
}

fn noisy_command(r: &NoisyReport, path: &str) -> String {
    let quick = crate::noisy::Config::default_run(r.seed, PathBuf::new(), PathBuf::new()).quick();
    let mut cmd = format!("{BIN} bench noisy-neighbor");
    if (r.config.seconds - quick.seconds).abs() < 1e-9 {
        cmd.push_str(" --quick");
    }
    cmd.push_str(&two_gateways::command_flags(r));
    let _ = write!(
        cmd,
        " --seed {} --json {path} --svg {}",
        r.seed,
        svg_path(path)
    );
    cmd
}

// ---- the gateway -------------------------------------------------------------------------

/// The target every ratio is against: the filesystem (the first target if none is named so).
fn baseline(targets: &[GatewayTarget]) -> Option<&GatewayTarget> {
    targets
        .iter()
        .find(|t| t.name == "filesystem")
        .or(targets.first())
}

/// How much of the baseline's speed `t` had reading the same slice of the same round:
/// quartiles of `base time / t time` over every slice both measured.
fn paired_slices(base: &GatewayTarget, t: &GatewayTarget) -> Option<[f64; 3]> {
    let ratios: Vec<f64> = base
        .large_get_slices_s
        .iter()
        .zip(&t.large_get_slices_s)
        .flat_map(|(b, o)| b.iter().zip(o))
        .filter_map(|(b, o)| Some((b.filter(|b| *b > 0.0)?, o.filter(|o| *o > 0.0)?)))
        .map(|(b, o)| b / o)
        .collect();
    (!ratios.is_empty()).then(|| [0.25, 0.5, 0.75].map(|p| quantile(&ratios, p)))
}

fn vs(v: Option<f64>, base: Option<f64>) -> String {
    match (v, base) {
        (Some(v), Some(b)) if b > 0.0 => percent(v / b),
        _ => NONE.to_owned(),
    }
}

fn rss(t: &GatewayTarget) -> String {
    match (t.rss_start_bytes, t.rss_peak_bytes) {
        (Some(s), Some(p)) => format!("{} / {} MiB", mib(s), mib(p)),
        _ => NONE.to_owned(),
    }
}

fn gateway_setup(r: &GatewayReport) -> String {
    let c = &r.config;
    let mut out = format!(
        "{} × {} objects ({} in flight) and {} × {} objects ({} in flight), written then read \
         back",
        group(c.large_objects as u64),
        size_text(c.large_size),
        c.large_concurrency,
        group(c.small_objects as u64),
        size_text(c.small_size),
        c.small_concurrency,
    );
    if let Some(b) = r.bytes_moved_per_target {
        let _ = write!(out, " ({} through each target per round)", size_text(b));
    }
    let _ = write!(
        out,
        ", in {}; large reads interleaved in slices of {} objects. Every figure is the median of \
         the rounds.",
        plural(c.rounds, "round"),
        c.large_slice
    );
    out
}

fn cold_note(cold: bool) -> &'static str {
    if cold {
        "The page cache was dropped before each read phase: reads came from the disk."
    } else {
        "The page cache was not dropped (not run as root): reads may have come from memory."
    }
}

fn gateway_figures(src: &Source) -> Result<String, ReportError> {
    let Some(r) = parse::<GatewayReport>(src, "gateway")? else {
        return Ok(not_measured(&gateway_default_command(&src.path)));
    };
    let small = size_text(r.config.small_size);
    let base = baseline(&r.targets);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "`{}` (JSON: `{}`): {} {}\n",
        gateway_command(&r, &src.path),
        src.path,
        gateway_setup(&r),
        cold_note(r.targets.iter().all(|t| t.cold_reads)),
    );
    let _ = writeln!(
        out,
        "| target | PUT MiB/s | vs fs | GET MiB/s | vs fs | GET by slice vs fs (p25 / median / \
         p75) | {small} PUT/s | {small} GET/s | {small} PUT p50 / p99 / p99.9 | {small} GET p99 \
         | server RSS start / peak |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|---|---|");
    for t in &r.targets {
        let slices = match base {
            Some(b) if !std::ptr::eq(b, t) => paired_slices(b, t).map_or(NONE.to_owned(), |q| {
                format!("{} / {} / {}", percent(q[0]), percent(q[1]), percent(q[2]))
            }),
            _ => NONE.to_owned(),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} / {} / {} | {} | {} |",
            t.name,
            opt(t.put_mib_s, 0),
            vs(t.put_mib_s, base.and_then(|b| b.put_mib_s)),
            opt(t.get_mib_s, 0),
            vs(t.get_mib_s, base.and_then(|b| b.get_mib_s)),
            slices,
            opt(t.small_put_ops_s, 0),
            opt(t.small_get_ops_s, 0),
            ms(t.small_put_p50_s),
            ms(t.small_put_p99_s),
            ms(t.small_put_p999_s),
            ms(t.small_get_p99_s),
            rss(t),
        );
    }
    let rounds = r.targets.iter().map(|t| t.rounds.len()).max().unwrap_or(0);
    if rounds > 1 {
        let _ = writeln!(
            out,
            "\nEach round: PUT / GET MiB/s, then {small} PUT / GET per second.\n"
        );
        let mut header = "| target |".to_owned();
        let mut rule = "|---|".to_owned();
        for i in 1..=rounds {
            let _ = write!(header, " round {i} |");
            rule.push_str("---|");
        }
        let _ = writeln!(out, "{header}\n{rule}");
        for t in &r.targets {
            let _ = write!(out, "| {} |", t.name);
            for [p, g, sp, sg] in &t.rounds {
                let _ = write!(
                    out,
                    " {} / {}, {} / {} |",
                    opt(*p, 0),
                    opt(*g, 0),
                    opt(*sp, 0),
                    opt(*sg, 0)
                );
            }
            out.push('\n');
        }
    }
    let (large, small_name) = catalogs::sizes(r.config.large_size, r.config.small_size);
    if let Some(x) = &r.pg_vs_redb {
        out.push_str(&catalogs::pg_figures(
            x,
            &large,
            &small_name,
            r.postgres.as_deref(),
        ));
    }
    if let Some(a) = &r.aggregate {
        out.push_str(&catalogs::aggregate_figures(a, &large, &small_name));
    }
    Ok(out)
}

fn gateway_summary(src: &Source) -> Result<String, ReportError> {
    let Some(r) = parse::<GatewayReport>(src, "gateway")? else {
        return Ok(format!(
            "**Gateway.** {}",
            not_measured(&gateway_default_command(&src.path))
        ));
    };
    let small = size_text(r.config.small_size);
    let large = size_text(r.config.large_size);
    let base = baseline(&r.targets);
    let mut out = format!(
        "**Gateway** against the filesystem and SeaweedFS, {large} and {small} objects, medians \
         of {} (`{}`):\n\n",
        plural(r.config.rounds, "round"),
        gateway_command(&r, &src.path)
    );
    let _ = writeln!(
        out,
        "| target | PUT MiB/s | GET MiB/s | {small} PUT/s | {small} GET/s | server RSS peak |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|");
    for t in &r.targets {
        let _ = writeln!(
            out,
            "| {} | {} ({}) | {} ({}) | {} | {} | {} |",
            t.name,
            opt(t.put_mib_s, 0),
            vs(t.put_mib_s, base.and_then(|b| b.put_mib_s)),
            opt(t.get_mib_s, 0),
            vs(t.get_mib_s, base.and_then(|b| b.get_mib_s)),
            opt(t.small_put_ops_s, 0),
            opt(t.small_get_ops_s, 0),
            t.rss_peak_bytes
                .map_or(NONE.to_owned(), |p| format!("{} MiB", mib(p))),
        );
    }
    out.push_str(&catalogs::summary_line(
        r.pg_vs_redb.as_ref(),
        r.aggregate.as_ref(),
        &large,
        &small,
    ));
    Ok(out)
}

// ---- the noisy neighbour -----------------------------------------------------------------

fn noisy_setup(r: &NoisyReport) -> String {
    let c = &r.config;
    let checkpoint = c.aggressor_object_bytes * c.aggressor_streams as u64;
    format!(
        "a shared tier of {} and {} ops/s (an emulated device, gateway grain {}); the victim \
         reads {} shards at {}/s ({}; reservation {}, weight {}) for {} s per scenario; the \
         aggressor writes a checkpoint of {} × {} ({}) and its marker every {} s (through the \
         agent in `dmclock_agent`, which drains at {} or faster if the interval needs it). \
         Seed {}.",
        rate_text(c.tier_bandwidth_bps),
        group(c.tier_ops.round() as u64),
        size_text(c.grain_bytes),
        size_text(c.victim_shard_bytes),
        trim(c.victim_rate_per_s),
        rate_text(c.victim_rate_per_s * c.victim_shard_bytes as f64),
        rate_text(c.victim_reservation_bps),
        trim(c.victim_weight),
        trim(c.seconds),
        c.aggressor_streams,
        size_text(c.aggressor_object_bytes),
        size_text(checkpoint),
        trim(c.aggressor_interval_s),
        rate_text(c.agent_drain_rate_bps),
        r.seed,
    ) + &c.node.as_ref().map_or_else(String::new, |n| {
        format!(
            " The `node_*` scenarios put both tenants on one node agent whose local store is an \
             emulated device of {} and {} ops/s: the victim reads its shards from the node while \
             the aggressor's checkpoints land there (no `[agent.capacity]` in `node_fifo`; \
             `[agent.capacity]` at the device's bandwidth with the victim's reservation and \
             weight as `local_reservation` and `local_weight` in `node_solo` and \
             `node_dmclock`); *local use* is the bytes the device moved over its capacity.",
            rate_text(n.local_bandwidth_bps),
            group(n.local_ops.round() as u64),
        )
    }) + &two_gateways::setup(r)
}

fn noisy_figures(src: &Source) -> Result<String, ReportError> {
    let Some(r) = parse::<NoisyReport>(src, "noisy-neighbor")? else {
        return Ok(not_measured(&noisy_default_command(&src.path)));
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "`{}` (JSON: `{}`): {}\n",
        noisy_command(&r, &src.path),
        src.path,
        noisy_setup(&r)
    );
    let _ = writeln!(
        out,
        "| scenario | victim p50 | p99 | p99.9 | p99 / solo | victim MiB/s (target) | victim \
         GETs (errors) | aggressor stall | checkpoint on tier | tier use | local use |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|---|---|");
    for s in &r.scenarios {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} ({}) | {} ({}) | {} | {} | {} | {} |",
            s.name,
            ms(s.victim_p50_s),
            ms(s.victim_p99_s),
            ms(s.victim_p999_s),
            times(s.victim_p99_vs_solo),
            opt(s.victim_throughput_bps.map(|b| b / MIB), 1),
            opt(s.victim_target_bps.map(|b| b / MIB), 0),
            s.victim_requests,
            s.victim_errors,
            secs1(s.aggressor_stall_s),
            secs1(s.drain_completion_s),
            opt_percent(s.tier_utilization),
            opt_percent(s.local_utilization),
        );
    }
    out.push_str(&two_gateways::skipped_rows(&r.skipped, 11));
    out.push_str(&scrub::note(&r.scenarios));
    out.push_str(&two_gateways::note(&r));
    Ok(out)
}

fn noisy_summary(src: &Source) -> Result<String, ReportError> {
    let Some(r) = parse::<NoisyReport>(src, "noisy-neighbor")? else {
        return Ok(format!(
            "**Noisy neighbour.** {}",
            not_measured(&noisy_default_command(&src.path))
        ));
    };
    let c = &r.config;
    let mut out = format!(
        "**Noisy neighbour**: a victim reading {} against a neighbour's {} checkpoints on a {} \
         tier, per isolation layer (`{}`):\n\n",
        rate_text(c.victim_rate_per_s * c.victim_shard_bytes as f64),
        size_text(c.aggressor_object_bytes * c.aggressor_streams as u64),
        rate_text(c.tier_bandwidth_bps),
        noisy_command(&r, &src.path)
    );
    let _ = writeln!(
        out,
        "| scenario | victim p99 | p99 / solo | aggressor stall | tier use | local use |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|");
    for s in &r.scenarios {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} |",
            s.name,
            ms(s.victim_p99_s),
            times(s.victim_p99_vs_solo),
            secs1(s.aggressor_stall_s),
            opt_percent(s.tier_utilization),
            opt_percent(s.local_utilization),
        );
    }
    out.push_str(&two_gateways::skipped_rows(&r.skipped, 6));
    out.push_str(&scrub::note(&r.scenarios));
    out.push_str(&two_gateways::note(&r));
    Ok(out)
}

// ---- numbers -----------------------------------------------------------------------------

/// `x` with `decimals` decimals and its integer part in groups of three: `12,345.6`.
fn num(x: f64, decimals: usize) -> String {
    let text = format!("{x:.decimals$}");
    let (sign, digits) = match text.strip_prefix('-') {
        Some(d) => ("-", d),
        None => ("", text.as_str()),
    };
    let (int, frac) = digits.split_at(digits.find('.').unwrap_or(digits.len()));
    let mut out = sign.to_owned();
    for (i, c) in int.chars().enumerate() {
        if i > 0 && (int.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out.push_str(frac);
    out
}

fn group(n: u64) -> String {
    num(n as f64, 0)
}

/// A measured figure, or "–" when it was not measured.
fn opt(x: Option<f64>, decimals: usize) -> String {
    x.filter(|x| x.is_finite())
        .map_or(NONE.to_owned(), |x| num(x, decimals))
}

/// Seconds as milliseconds, with the decimals that matter at that scale.
fn ms(s: Option<f64>) -> String {
    match s.filter(|s| s.is_finite()) {
        None => NONE.to_owned(),
        Some(s) => {
            let ms = s * 1e3;
            let decimals = match ms {
                m if m < 10.0 => 2,
                m if m < 1000.0 => 1,
                _ => 0,
            };
            format!("{} ms", num(ms, decimals))
        }
    }
}

fn secs(s: Option<f64>) -> String {
    s.filter(|s| s.is_finite())
        .map_or(NONE.to_owned(), |s| format!("{} s", num(s, 2)))
}

fn secs1(s: Option<f64>) -> String {
    s.filter(|s| s.is_finite())
        .map_or(NONE.to_owned(), |s| format!("{} s", num(s, 1)))
}

fn percent(ratio: f64) -> String {
    format!("{}%", num(100.0 * ratio, 0))
}

fn opt_percent(ratio: Option<f64>) -> String {
    ratio
        .filter(|r| r.is_finite())
        .map_or(NONE.to_owned(), percent)
}

fn times(ratio: Option<f64>) -> String {
    ratio
        .filter(|r| r.is_finite())
        .map_or(NONE.to_owned(), |r| format!("{}×", num(r, 2)))
}

fn mib(bytes: u64) -> String {
    group((bytes as f64 / MIB).round() as u64)
}

/// A number without a fraction it does not have: `2`, `2.5`.
fn trim(x: f64) -> String {
    if x.fract() == 0.0 {
        num(x, 0)
    } else {
        let t = format!("{x:.3}");
        t.trim_end_matches('0').trim_end_matches('.').to_owned()
    }
}

fn plural(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

const UNITS: [(u64, &str); 4] = [
    (1 << 40, "TiB"),
    (1 << 30, "GiB"),
    (1 << 20, "MiB"),
    (1 << 10, "KiB"),
];

/// A size as a person reads it: `64 MiB`, `1.5 GiB`, `100 B`.
fn size_text(bytes: u64) -> String {
    for (unit, name) in UNITS {
        if bytes >= unit {
            return if bytes.is_multiple_of(unit) {
                format!("{} {name}", group(bytes / unit))
            } else {
                format!(
                    "{} {name}",
                    trim((bytes as f64 / unit as f64 * 10.0).round() / 10.0)
                )
            };
        }
    }
    format!("{bytes} B")
}

/// A size as the command line takes it, exactly: `256MiB`, `1000B`.
fn size_arg(bytes: u64) -> String {
    UNITS
        .iter()
        .find(|(unit, _)| bytes >= *unit && bytes.is_multiple_of(*unit))
        .map_or(format!("{bytes}B"), |(unit, name)| {
            format!("{}{name}", bytes / unit)
        })
}

/// A rate as the command line takes it, exactly: `64MiB/s`.
fn rate_arg(bps: f64) -> String {
    if bps.fract() == 0.0 && (0.0..9e15).contains(&bps) {
        format!("{}/s", size_arg(bps as u64))
    } else {
        format!("{bps}B/s")
    }
}

/// A rate as a person reads it: `100 MiB/s`, `1.5 GiB/s`.
fn rate_text(bps: f64) -> String {
    if bps >= GIB {
        format!("{} GiB/s", trim((bps / GIB * 10.0).round() / 10.0))
    } else {
        format!("{} MiB/s", trim((bps / MIB * 10.0).round() / 10.0))
    }
}

mod agent;
mod catalogs;
mod scrub;
#[cfg(test)]
mod tests;
mod two_gateways;
