//! The node agent's sections (`sluice bench agent`'s report, whose shape is the `Report` of
//! `crates/sluice/src/cmd/bench_agent.rs`): the figures for `docs/benchmarks.md` and the
//! README's summary, with `--local-capacity`'s scheduled agent and `--encrypt`'s encrypted
//! one and encryption per core when the report has them.

use std::fmt::Write as _;

use serde::Deserialize;

use super::{
    BIN, MIB, NONE, ReportError, Source, not_measured, num, opt, parse, plural, rate_arg,
    rate_text, secs, size_arg, size_text,
};

#[derive(Deserialize)]
pub(super) struct AgentReport {
    objects: usize,
    size_bytes: u64,
    drain_rate_bytes_per_s: f64,
    page_cache_dropped: bool,
    direct: Series,
    o_direct: Option<Series>,
    agent: Series,
    ratio_median: Option<f64>,
    ratio_fastest: Option<f64>,
    ratio_median_o_direct: Option<f64>,
    ratio_fastest_o_direct: Option<f64>,
    /// `--local-capacity`: the agent with its local device scheduled (absent before it).
    local_capacity_bytes_per_s: Option<f64>,
    scheduled: Option<Series>,
    ratio_median_scheduled: Option<f64>,
    ratio_fastest_scheduled: Option<f64>,
    /// `--encrypt`: the agent with the tenant's bodies encrypted (absent before it, and
    /// without it).
    encrypted: Option<Series>,
    ratio_median_encrypted: Option<f64>,
    ratio_fastest_encrypted: Option<f64>,
    encryption: Option<Encryption>,
}

/// `--encrypt`'s throughput per core.
#[derive(Deserialize)]
struct Encryption {
    segment_size_bytes: u32,
    aead_median_bytes_per_cpu_s: Option<f64>,
    extra_cpu_median_s: Option<f64>,
    agent_bytes_per_cpu_s: Option<f64>,
    ratio_per_core: Option<f64>,
}

#[derive(Deserialize)]
struct Series {
    rounds: Vec<Measured>,
    median_s: Option<f64>,
    fastest_s: Option<f64>,
}

#[derive(Deserialize)]
struct Measured {
    round: usize,
    seconds: Option<f64>,
    cpu_s_per_gib: Option<f64>,
}

pub(super) fn agent_default_command(path: &str) -> String {
    format!("{BIN} bench agent --json {path}")
}

/// The command that reproduces `r`, every setting spelled out.
pub(super) fn agent_command(r: &AgentReport, path: &str) -> String {
    let local = r.local_capacity_bytes_per_s.map_or_else(String::new, |bw| {
        format!(" --local-capacity {}", rate_arg(bw))
    });
    let encrypt = if r.encrypted.is_some() {
        " --encrypt"
    } else {
        ""
    };
    format!(
        "{BIN} bench agent --objects {} --size {} --drain-rate {} --rounds {}{local}{encrypt} --json {path}",
        r.objects,
        size_arg(r.size_bytes),
        rate_arg(r.drain_rate_bytes_per_s),
        r.direct.rounds.len().max(r.agent.rounds.len()),
    )
}

/// What the agent benchmark measures: `(name, series, agent / this of the medians)`.
fn agent_kinds(r: &AgentReport) -> Vec<(&'static str, &Series, Option<f64>)> {
    let mut kinds = vec![("direct write + fsync", &r.direct, r.ratio_median)];
    if let Some(o) = &r.o_direct {
        kinds.push(("`O_DIRECT` write + fsync", o, r.ratio_median_o_direct));
    }
    kinds.push(("through the agent", &r.agent, None));
    if let Some(s) = &r.scheduled {
        kinds.push(("through the agent, scheduled", s, None));
    }
    if let Some(e) = &r.encrypted {
        kinds.push(("through the agent, encrypted", e, None));
    }
    kinds
}

fn burst(r: &AgentReport) -> String {
    format!(
        "{} × {} ({})",
        r.objects,
        size_text(r.size_bytes),
        size_text(r.size_bytes * r.objects as u64)
    )
}

pub(super) fn agent_figures(src: &Source) -> Result<String, ReportError> {
    let Some(r) = parse::<AgentReport>(src, "agent")? else {
        return Ok(not_measured(&agent_default_command(&src.path)));
    };
    let total = (r.size_bytes * r.objects as u64) as f64;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "`{}` (JSON: `{}`): a burst of {} concurrent PUTs until the agent has acknowledged \
         every one (its drain running at {}), against writing and fsyncing the same files \
         directly, in {}. {}\n",
        agent_command(&r, &src.path),
        src.path,
        burst(&r),
        rate_text(r.drain_rate_bytes_per_s),
        plural(r.direct.rounds.len().max(r.agent.rounds.len()), "round"),
        if r.page_cache_dropped {
            "Dirty pages were written back and the page cache dropped before each measurement."
        } else {
            "Dirty pages were written back before each measurement; the page cache was not \
             dropped (not run as root)."
        }
    );
    let _ = writeln!(
        out,
        "| measurement | each round, s | median | fastest | MiB/s at the median | CPU-s/GiB |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|");
    for (name, s, _) in agent_kinds(&r) {
        let mut rounds: Vec<&Measured> = s.rounds.iter().collect();
        rounds.sort_by_key(|m| m.round);
        let each: Vec<String> = rounds.iter().map(|m| opt(m.seconds, 2)).collect();
        let cpu: Vec<f64> = rounds.iter().filter_map(|m| m.cpu_s_per_gib).collect();
        let cpu = match (
            cpu.iter().copied().reduce(f64::min),
            cpu.iter().copied().reduce(f64::max),
        ) {
            (Some(lo), Some(hi)) if (hi - lo).abs() < 0.005 => num(lo, 2),
            (Some(lo), Some(hi)) => format!("{}–{}", num(lo, 2), num(hi, 2)),
            _ => NONE.to_owned(),
        };
        let _ = writeln!(
            out,
            "| {name} | {} | {} | {} | {} | {cpu} |",
            each.join(" / "),
            secs(s.median_s),
            secs(s.fastest_s),
            opt(s.median_s.filter(|m| *m > 0.0).map(|m| total / m / MIB), 0),
        );
    }
    let _ = writeln!(
        out,
        "\nThe CPU time is the whole benchmark process's: for the agent, the S3 client, the \
         agent, its drain and the gateway it drains to.\n"
    );
    let _ = writeln!(out, "| ratio | of the medians | of the fastest rounds |");
    let _ = writeln!(out, "|---|---|---|");
    let _ = writeln!(
        out,
        "| agent / direct write + fsync | {} | {} |",
        opt(r.ratio_median, 3),
        opt(r.ratio_fastest, 3)
    );
    if r.o_direct.is_some() {
        let _ = writeln!(
            out,
            "| agent / `O_DIRECT` write + fsync | {} | {} |",
            opt(r.ratio_median_o_direct, 3),
            opt(r.ratio_fastest_o_direct, 3)
        );
    }
    if r.scheduled.is_some() {
        let _ = writeln!(
            out,
            "| agent scheduled (`[agent.capacity]` {}) / unscheduled | {} | {} |",
            rate_text(r.local_capacity_bytes_per_s.unwrap_or(f64::NAN)),
            opt(r.ratio_median_scheduled, 3),
            opt(r.ratio_fastest_scheduled, 3)
        );
    }
    if r.encrypted.is_some() {
        let _ = writeln!(
            out,
            "| agent encrypted (`[tenant.encryption]`) / unencrypted | {} | {} |",
            opt(r.ratio_median_encrypted, 3),
            opt(r.ratio_fastest_encrypted, 3)
        );
    }
    if let Some(e) = &r.encryption {
        out.push_str(&per_core(e));
    }
    Ok(out)
}

pub(super) fn agent_summary(src: &Source) -> Result<String, ReportError> {
    let Some(r) = parse::<AgentReport>(src, "agent")? else {
        return Ok(format!(
            "**Node agent.** {}",
            not_measured(&agent_default_command(&src.path))
        ));
    };
    let mut out = format!(
        "**Node agent**: time until a burst of {} PUTs is acknowledged, against writing and \
         fsyncing the same files directly, medians of {} (`{}`):\n\n",
        burst(&r),
        plural(r.direct.rounds.len().max(r.agent.rounds.len()), "round"),
        agent_command(&r, &src.path)
    );
    let _ = writeln!(out, "| measurement | median | agent / this |");
    let _ = writeln!(out, "|---|---|---|");
    for (name, s, ratio) in agent_kinds(&r) {
        let _ = writeln!(out, "| {name} | {} | {} |", secs(s.median_s), opt(ratio, 2));
    }
    Ok(out)
}

/// `--encrypt`'s throughput per core: the AEAD alone against the agent's encryption.
fn per_core(e: &Encryption) -> String {
    let speed = |bps: Option<f64>| {
        bps.filter(|b| b.is_finite())
            .map_or_else(|| NONE.to_owned(), |b| format!("{} MiB/s", num(b / MIB, 0)))
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n| encryption per core | bytes per CPU-second |\n|---|---|"
    );
    let _ = writeln!(
        out,
        "| AES-256-GCM alone ({} KiB segments sealed on one thread, median of the rounds) | {} |",
        e.segment_size_bytes / 1024,
        speed(e.aead_median_bytes_per_cpu_s)
    );
    let _ = writeln!(
        out,
        "| the agent: the burst per CPU-second the encrypted burst took over the unencrypted \
         one (median {} CPU-s more) | {} |",
        opt(e.extra_cpu_median_s, 2),
        speed(e.agent_bytes_per_cpu_s)
    );
    let _ = writeln!(
        out,
        "| agent / AES-256-GCM alone | {} |",
        opt(e.ratio_per_core, 3)
    );
    out
}
