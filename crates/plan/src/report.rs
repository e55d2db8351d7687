//! The human-readable report: the plan as text, section by section, each figure with the
//! sentence that says what it is.

use std::fmt::Write as _;

use sluice_units::{ByteSize, Rate};

use crate::plan::{Plan, Status};

/// Seconds as `850ms`, `4.2s`, `26s`, `12m05s`, `1h30m`.
pub fn seconds(s: f64) -> String {
    if s == 0.0 {
        return "0s".to_owned();
    }
    if s < 1.0 {
        return format!("{:.0}ms", s * 1e3);
    }
    if s < 10.0 {
        return format!("{s:.1}s");
    }
    let whole = s.round() as u64;
    if whole < 60 {
        return format!("{whole}s");
    }
    if whole < 3600 {
        return match whole % 60 {
            0 => format!("{}m", whole / 60),
            rest => format!("{}m{rest:02}s", whole / 60),
        };
    }
    let minutes = (s / 60.0).round() as u64;
    match minutes % 60 {
        0 => format!("{}h", minutes / 60),
        rest => format!("{}h{rest:02}m", minutes / 60),
    }
}

/// A probability as `0.25`, `3.1e-4` or `0`.
pub fn probability(p: f64) -> String {
    if p == 0.0 {
        "0".to_owned()
    } else if p >= 0.01 {
        format!("{p:.3}")
    } else {
        format!("{p:.1e}")
    }
}

/// A percentile fraction as `99.9%`.
pub fn percent(fraction: f64) -> String {
    let text = format!("{:.4}", fraction * 100.0);
    format!("{}%", text.trim_end_matches('0').trim_end_matches('.'))
}

/// How long a probability of exceedance amounts to, per day or per week.
fn time_share(p: f64) -> String {
    let per_day = p * 86_400.0;
    if per_day >= 60.0 {
        format!("about {} per day", seconds(per_day))
    } else {
        format!("about {} per week", seconds(per_day * 7.0))
    }
}

fn status(s: Status) -> &'static str {
    match s {
        Status::Pass => "pass",
        Status::Fail => "FAIL",
        Status::Warn => "WARN",
        Status::NotChecked => "----",
    }
}

/// Renders the plan. `source` names the input in the heading.
pub fn render(plan: &Plan, source: &str) -> String {
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = write_report(&mut out, plan, source);
    out
}

fn write_report(out: &mut String, plan: &Plan, source: &str) -> std::fmt::Result {
    let target = &plan.target;
    writeln!(
        out,
        "sluice plan {source}: {} tenant shapes, {} tenants, target percentile {}",
        plan.tenants.len(),
        plan.tenant_count,
        percent(target.percentile)
    )?;

    writeln!(out, "\nTenants (figures per tenant; count copies each)")?;
    writeln!(
        out,
        "  {:<16} {:>5} {:>5} {:>10} {:>8} {:>7} {:>11} {:>7} {:>7} {:>11} {:>11}",
        "name",
        "count",
        "nodes",
        "checkpoint",
        "interval",
        "phase",
        "peak",
        "burst",
        "duty",
        "average",
        "reads"
    )?;
    for t in &plan.tenants {
        let phase = t
            .phase
            .as_f64()
            .map_or_else(|| "random".to_owned(), seconds);
        writeln!(
            out,
            "  {:<16} {:>5} {:>5} {:>10} {:>8} {:>7} {:>11} {:>7} {:>7} {:>11} {:>11}",
            t.name,
            t.count,
            t.nodes,
            ByteSize(t.checkpoint_size).to_string(),
            seconds(t.interval_seconds),
            phase,
            Rate(t.peak).to_string(),
            seconds(t.burst_seconds),
            format!("{:.2}%", t.duty_cycle * 100.0),
            Rate(t.average_write).to_string(),
            Rate(t.read_bandwidth).to_string()
        )?;
    }

    let d = &plan.distribution;
    writeln!(
        out,
        "\nWithout node-local absorption: every burst goes straight to the shared tier"
    )?;
    writeln!(
        out,
        "  sum of averages  {:>12}   reads + checkpoint size / interval: the floor",
        Rate(plan.sum_of_averages).to_string()
    )?;
    writeln!(
        out,
        "  sum of peaks     {:>12}   reads + every burst at once: the ceiling",
        Rate(plan.sum_of_peaks).to_string()
    )?;
    if d.exact {
        writeln!(
            out,
            "  aggregate demand at a random instant, phases independent and uniform \
             (exact, {} grid):",
            Rate(d.grid_step)
        )?;
    } else {
        writeln!(
            out,
            "  aggregate demand at a random instant, phases independent and uniform \
             ({} grid; figures are upper bounds, each with its bracket):",
            Rate(d.grid_step)
        )?;
    }
    let lower = d.percentiles_lower.labelled();
    for ((label, value), (_, low)) in plan.percentiles.labelled().iter().zip(lower) {
        write!(out, "    {label:<12} {:>12}", Rate(*value).to_string())?;
        if !d.exact {
            write!(out, "   truth within {} below", Rate(*value - low))?;
        }
        writeln!(out)?;
    }
    writeln!(
        out,
        "    {:<12} {:>12}   <- provision the shared tier for this without absorption",
        format!("target {}", percent(target.percentile)),
        Rate(target.bandwidth).to_string()
    )?;
    if let Some(c) = &plan.capacity {
        writeln!(
            out,
            "  capacity {} ({}): P(demand > capacity) = {}{}, {}",
            Rate(c.bandwidth),
            c.source,
            probability(c.exceedance),
            if d.exact {
                String::new()
            } else {
                format!(" (at least {})", probability(c.exceedance_lower))
            },
            time_share(c.exceedance)
        )?;
    }

    let a = &plan.with_node_absorption;
    writeln!(
        out,
        "\nWith node-local absorption: bursts land on each node's disk, drains are paced"
    )?;
    writeln!(
        out,
        "  {:<16} {:>8} {:>11} {:>11} {:>10} {:>13} {:>11} {:>11}",
        "name",
        "landing",
        "drain/job",
        "drain/node",
        "drained",
        "buffer/node",
        "shared",
        "reservation"
    )?;
    for t in &plan.tenants {
        let n = &t.with_node_absorption;
        writeln!(
            out,
            "  {:<16} {:>8} {:>11} {:>11} {:>10} {:>13} {:>11} {:>11}",
            t.name,
            seconds(n.landing_seconds),
            Rate(n.drain_rate).to_string(),
            Rate(n.drain_rate_per_node).to_string(),
            seconds(n.drain_seconds),
            ByteSize(n.local_buffer_per_node).to_string(),
            Rate(n.shared_bandwidth).to_string(),
            Rate(t.gateway.reservation).to_string()
        )?;
    }
    writeln!(
        out,
        "  shared tier needs  {:>12}   drains + reads, whatever the phases (vs {} at the target \
         without absorption)",
        Rate(a.shared_bandwidth).to_string(),
        Rate(target.bandwidth)
    )?;
    writeln!(
        out,
        "  local buffer       {:>12}   per node at most ({})",
        ByteSize(a.local_buffer_per_node).to_string(),
        a.local_buffer_tenant
    )?;

    write_aligned(out, plan)?;

    writeln!(out, "\nChecks")?;
    for c in &plan.checks {
        writeln!(out, "  {}  {}: {}", status(c.status), c.name, c.detail)?;
    }

    writeln!(
        out,
        "\nGateway tenants (reservation = drain + reads; paste into the gateway config)"
    )?;
    write!(out, "{}", plan.gateway_toml())?;

    if let Some(s) = &plan.simulation {
        writeln!(
            out,
            "\nMonte Carlo cross-check: {} random instants and phases, seed {} (replay with \
             --seed {})",
            s.samples, s.seed, s.seed
        )?;
        for &(p, value) in &s.quantiles {
            writeln!(
                out,
                "    {:<12} {:>12}   exact {}",
                format!("p{}", percent(p).trim_end_matches('%')),
                Rate(value).to_string(),
                Rate(plan.demand().quantile(p))
            )?;
        }
        for g in &s.agreement {
            writeln!(
                out,
                "    P(demand > {:<8}) estimate {:>7} ± {:<7}  exact {:>7}  {:.1} standard errors apart",
                g.label,
                probability(g.estimate),
                probability(g.standard_error),
                probability(g.exact),
                g.sigmas
            )?;
        }
        writeln!(
            out,
            "  largest disagreement {:.1} standard errors{}",
            s.worst_sigmas(),
            if s.worst_sigmas() < 4.0 {
                " (chance alone gives up to about 3): the exact figures stand"
            } else {
                ": MORE THAN CHANCE, the exact figures are in doubt"
            }
        )?;
    }
    Ok(())
}

fn write_aligned(out: &mut String, plan: &Plan) -> std::fmt::Result {
    let al = &plan.aligned;
    let absorbed = plan.with_node_absorption.shared_bandwidth;
    writeln!(out, "\nAligned phases")?;
    match &al.worst {
        None => {
            writeln!(
                out,
                "  every phase is random. Were all {} tenants to checkpoint at once (\"on the \
                 hour\"), demand would be the sum of peaks, {};",
                plan.tenant_count,
                Rate(plan.sum_of_peaks)
            )?;
            writeln!(
                out,
                "  with node-local absorption the shared tier would still need only {absorbed}.",
                absorbed = Rate(absorbed)
            )?;
        }
        Some(w) if w.tenants > 1 => {
            writeln!(
                out,
                "  FAILURE MODE: {} tenants with fixed phases ({}) burst together at +{} of \
                 every {}:",
                w.tenants,
                al.worst_names.join(", "),
                seconds(w.at_seconds),
                seconds(al.common_period_seconds)
            )?;
            writeln!(
                out,
                "  {} on top of reads — the sum of their peaks — for {} each time. The \
                 percentiles above include this timetable.",
                Rate(w.bandwidth),
                seconds(w.seconds_per_period)
            )?;
            writeln!(
                out,
                "  With node-local absorption the same tenants send {} of drains instead; the \
                 shared tier needs {} in all, aligned or not.",
                Rate(al.worst_drains),
                Rate(absorbed)
            )?;
        }
        Some(w) => {
            writeln!(
                out,
                "  {} tenants have fixed phases and no two of their bursts overlap (largest \
                 {}); with absorption the shared tier needs {absorbed}.",
                al.fixed_phase_tenants,
                Rate(w.bandwidth),
                absorbed = Rate(absorbed)
            )?;
        }
    }
    Ok(())
}
