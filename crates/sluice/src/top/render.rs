//! A frame drawn: the tenants' table (rates against reservation, weight share and limit,
//! queue, SlowDowns, why held back, the per-gateway split, the agents' lag), the gateways'
//! and the agents'. Pure: a [`Frame`] in, cells of a ratatui [`Buffer`] out; the live view
//! draws it on the terminal, `--once` into a buffer it prints as text.

use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Paragraph, Row, Table, Widget};

use super::frame::Frame;

/// Rows a frame needs (header, three tables with their borders and headings, the hint).
pub fn height(f: &Frame) -> u16 {
    let agents: usize = f.agents.iter().map(|a| a.tenants.len().max(1)).sum();
    let tables = (f.tenants.len().max(1) + 3) + (f.gateways.len().max(1) + 3);
    let agents = if f.agents.is_empty() { 0 } else { agents + 3 };
    u16::try_from(2 + tables + agents).unwrap_or(u16::MAX)
}

/// Draws `f` into `area` of `buf`; `hint` is the last line (the live view's keys).
pub fn draw(f: &Frame, hint: &str, area: Rect, buf: &mut Buffer) {
    let agent_rows: usize = f.agents.iter().map(|a| a.tenants.len().max(1)).sum();
    let rows = |n: usize| Constraint::Length(u16::try_from(n + 3).unwrap_or(u16::MAX));
    let mut constraints = vec![
        Constraint::Length(1),
        rows(f.tenants.len().max(1)),
        rows(f.gateways.len().max(1)),
    ];
    if !f.agents.is_empty() {
        constraints.push(rows(agent_rows));
    }
    constraints.push(Constraint::Length(1));
    constraints.push(Constraint::Min(0));
    let parts = Layout::vertical(constraints).split(area);
    Paragraph::new(summary(f)).render(parts[0], buf);
    tenants(f).render(parts[1], buf);
    gateways(f).render(parts[2], buf);
    let mut next = 3;
    if !f.agents.is_empty() {
        agents(f).render(parts[3], buf);
        next = 4;
    }
    Paragraph::new(hint.to_owned()).render(parts[next], buf);
}

/// The frame as text: drawn into a buffer `width` wide and as tall as it needs, each line's
/// trailing blanks trimmed.
pub fn text(f: &Frame, width: u16) -> String {
    let area = Rect::new(0, 0, width, height(f));
    let mut buf = Buffer::empty(area);
    draw(f, "", area, &mut buf);
    lines(&buf).join("\n").trim_end().to_owned() + "\n"
}

/// The buffer's rows as strings, trailing blanks trimmed.
pub fn lines(buf: &Buffer) -> Vec<String> {
    let area = buf.area;
    (area.top()..area.bottom())
        .map(|y| {
            let mut line = String::new();
            for x in area.left()..area.right() {
                line.push_str(buf[(x, y)].symbol());
            }
            line.trim_end().to_owned()
        })
        .collect()
}

fn summary(f: &Frame) -> Line<'static> {
    let tier = f.tier_capacity_bps.map_or_else(
        || "tier unpaced".to_owned(),
        |c| {
            format!(
                "tier {} of {} ({:.0}%)",
                bps(f.tier_bytes_per_second),
                bps(c),
                f.tier_bytes_per_second * 100.0 / c
            )
        },
    );
    let interval = if f.interval_seconds > 0.0 {
        format!("rates over {:.1} s", f.interval_seconds)
    } else {
        "first sample: rates from the next".to_owned()
    };
    Line::from(format!(
        "sluice top: {} gateway(s), {} agent(s), {} tenant(s); {tier}; {interval}",
        f.gateways.len(),
        f.agents.len(),
        f.tenants.len()
    ))
}

fn heading(cells: &[&'static str]) -> Row<'static> {
    Row::new(cells.to_vec()).style(Style::default().add_modifier(Modifier::BOLD))
}

fn tenants(f: &Frame) -> Table<'static> {
    // Gateways numbered as in the gateways' table, for the split column.
    let index = |control: &str| {
        f.gateways
            .iter()
            .position(|g| g.control == control)
            .map_or(0, |i| i + 1)
    };
    let rows: Vec<Row> = f
        .tenants
        .iter()
        .map(|t| {
            let split = if t.bytes_per_second > 0.0 {
                t.gateways
                    .iter()
                    .filter(|g| g.bytes_per_second > 0.0)
                    .map(|g| {
                        format!(
                            "g{} {:.0}%",
                            index(&g.gateway),
                            g.bytes_per_second * 100.0 / t.bytes_per_second
                        )
                    })
                    .collect::<Vec<_>>()
                    .join(" ")
            } else {
                "-".to_owned()
            };
            let lag = t.lag.as_ref().map_or_else(
                || "-".to_owned(),
                |l| {
                    format!(
                        "{} {}",
                        bytes(l.pending_bytes as f64),
                        l.oldest_pending_age_seconds
                            .map_or_else(|| "-".to_owned(), |a| format!("{a:.1}s"))
                    )
                },
            );
            Row::new(vec![
                t.tenant.clone(),
                bps(t.bytes_per_second),
                format!("{:.1}", t.ops_per_second),
                opt_bps(t.reservation_bps.filter(|r| *r > 0.0)),
                t.weight.map_or_else(|| "-".to_owned(), |w| format!("{w}")),
                opt_bps(t.weight_share_bps),
                opt_bps(t.limit_bps),
                t.queued.to_string(),
                t.slowdowns.to_string(),
                t.queue_wait_ms
                    .map_or_else(|| "-".to_owned(), |w| format!("{w:.1}ms")),
                t.held_back.map_or("-", |h| h.text()).to_owned(),
                split,
                lag,
            ])
        })
        .collect();
    let widths = [
        Constraint::Length(16),
        Constraint::Length(12),
        Constraint::Length(8),
        Constraint::Length(12),
        Constraint::Length(6),
        Constraint::Length(12),
        Constraint::Length(12),
        Constraint::Length(5),
        Constraint::Length(6),
        Constraint::Length(9),
        Constraint::Length(12),
        Constraint::Length(18),
        Constraint::Min(12),
    ];
    Table::new(rows, widths)
        .header(heading(&[
            "TENANT",
            "BYTES/S",
            "OPS/S",
            "RESERVED",
            "WEIGHT",
            "WEIGHT SHARE",
            "LIMIT",
            "QUEUE",
            "SLOWDN",
            "WAIT",
            "HELD BACK",
            "SPLIT",
            "LAG (AGE)",
        ]))
        .block(Block::bordered().title(" tenants "))
}

fn gateways(f: &Frame) -> Table<'static> {
    let rows: Vec<Row> = f
        .gateways
        .iter()
        .enumerate()
        .map(|(i, g)| {
            let role = match (&g.error, g.coordinator, g.fallback) {
                (Some(e), _, _) => format!("unreachable: {e}"),
                (None, true, _) => "coordinator".to_owned(),
                (None, false, true) => "fallback: capacity / N".to_owned(),
                (None, false, false) => "-".to_owned(),
            };
            Row::new(vec![
                format!("g{}", i + 1),
                g.control.clone(),
                bps(g.bytes_per_second),
                opt_bps(g.capacity_bps),
                role,
            ])
        })
        .collect();
    Table::new(
        rows,
        [
            Constraint::Length(4),
            Constraint::Length(24),
            Constraint::Length(12),
            Constraint::Length(12),
            Constraint::Min(10),
        ],
    )
    .header(heading(&["", "CONTROL", "BYTES/S", "PACES TO", "ROLE"]))
    .block(Block::bordered().title(" gateways "))
}

fn agents(f: &Frame) -> Table<'static> {
    let mut rows = Vec::new();
    for a in &f.agents {
        if let Some(e) = &a.error {
            rows.push(Row::new(vec![
                a.status.clone(),
                format!("unreachable: {e}"),
            ]));
            continue;
        }
        if a.tenants.is_empty() {
            rows.push(Row::new(vec![a.status.clone(), "no tenants".to_owned()]));
        }
        for t in &a.tenants {
            rows.push(Row::new(vec![
                a.status.clone(),
                t.tenant.clone(),
                bps(t.bytes_per_second),
                bytes(t.pending_bytes as f64),
                t.oldest_pending_age_seconds
                    .map_or_else(|| "-".to_owned(), |s| format!("{s:.1}s")),
                bps(t.drain_bytes_per_second),
            ]));
        }
    }
    Table::new(
        rows,
        [
            Constraint::Length(24),
            Constraint::Length(16),
            Constraint::Length(12),
            Constraint::Length(12),
            Constraint::Length(10),
            Constraint::Min(12),
        ],
    )
    .header(heading(&[
        "AGENT",
        "TENANT",
        "NODE BYTES/S",
        "NOT UPSTREAM",
        "AGE",
        "DRAINING",
    ]))
    .block(Block::bordered().title(" agents (durability lag) "))
}

/// `12.3MiB/s`.
pub fn bps(x: f64) -> String {
    bytes(x) + "/s"
}

fn opt_bps(x: Option<f64>) -> String {
    x.map_or_else(|| "-".to_owned(), bps)
}

/// `12.3MiB`, one decimal.
fn bytes(x: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = x.max(0.0);
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{v:.0}{}", UNITS[0])
    } else {
        format!("{v:.1}{}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests;
