//! The plan as a self-contained SVG, drawn by hand: the exceedance curve P(demand > x) of
//! aggregate demand on a log scale, the target percentile marked, and vertical reference lines
//! for the sum of averages, the sum of peaks, the shared-tier need with node-local absorption
//! and the capacity when one is given.
//!
//! The curve is a step function (demand takes grid values); corners that fall on the same
//! pixel column are merged, so the file stays small whatever the grid.

use std::fmt::Write as _;

use crate::plan::Plan;
use crate::report::{percent, probability};

const WIDTH: f64 = 960.0;
const HEIGHT: f64 = 560.0;
const LEFT: f64 = 90.0;
const RIGHT: f64 = 40.0;
const TOP: f64 = 70.0;
const BOTTOM: f64 = 70.0;

/// A binary rate unit chosen so that axis numbers stay readable.
fn unit_for(max: f64) -> (f64, &'static str) {
    const GIB: f64 = 1024.0 * 1024.0 * 1024.0;
    if max >= 4.0 * 1024.0 * GIB {
        (1024.0 * GIB, "TiB/s")
    } else if max >= 4.0 * GIB {
        (GIB, "GiB/s")
    } else if max >= 4.0 * 1024.0 * 1024.0 {
        (1024.0 * 1024.0, "MiB/s")
    } else {
        (1.0, "B/s")
    }
}

/// A tick step of 1, 2 or 5 × 10^n giving about `count` ticks over `span`.
fn tick_step(span: f64, count: f64) -> f64 {
    let raw = (span / count).max(f64::MIN_POSITIVE);
    let magnitude = 10_f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * magnitude)
        .find(|&s| s >= raw)
        .unwrap_or(10.0 * magnitude)
}

fn number(v: f64) -> String {
    let text = format!("{v:.2}");
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

struct Frame {
    x_min: f64,
    x_max: f64,
    decades: i32,
}

impl Frame {
    fn x(&self, demand: f64) -> f64 {
        let share = (demand - self.x_min) / (self.x_max - self.x_min);
        LEFT + share.clamp(0.0, 1.0) * (WIDTH - LEFT - RIGHT)
    }

    /// Log scale from 1 at the top to 10^-decades at the bottom; zero sits on the bottom.
    fn y(&self, probability: f64) -> f64 {
        let floor = 10_f64.powi(-self.decades);
        let p = probability.clamp(floor, 1.0);
        TOP + (-p.log10() / f64::from(self.decades)) * (HEIGHT - TOP - BOTTOM)
    }
}

/// Renders the chart.
pub fn svg(plan: &Plan) -> String {
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = draw(&mut out, plan);
    out
}

#[allow(clippy::too_many_lines)]
fn draw(out: &mut String, plan: &Plan) -> std::fmt::Result {
    let target = plan.target.percentile;
    let decades = ((-(1.0 - target).log10()).ceil() as i32 + 2).clamp(5, 9);
    let floor = 10_f64.powi(-decades);
    let curve: Vec<(f64, f64)> = plan.demand().exceedance_curve().collect();
    // Where the curve leaves the chart through its bottom edge.
    let curve_end = curve
        .iter()
        .find(|&&(_, tail)| tail < floor)
        .or(curve.last())
        .map_or(0.0, |&(x, _)| x);
    let absorbed = plan.with_node_absorption.shared_bandwidth;
    let capacity = plan.capacity.as_ref().map(|c| c.bandwidth);
    let focus = [
        curve_end,
        plan.sum_of_averages,
        plan.target.bandwidth,
        absorbed,
        capacity.unwrap_or(0.0),
    ]
    .into_iter()
    .fold(0.0, f64::max)
        * 1.15;
    let peaks_on_scale = plan.sum_of_peaks <= 3.0 * focus;
    let x_max = if peaks_on_scale {
        plan.sum_of_peaks * 1.05
    } else {
        focus
    }
    .max(1.0);
    let (unit, unit_name) = unit_for(x_max);
    // When the steady reads dwarf the bursts, start the axis near them instead of at zero.
    let step = tick_step(x_max / unit, 8.0);
    let low = 0.9 * plan.reads.min(plan.sum_of_averages) / unit;
    let x_min = if low > 0.3 * x_max / unit {
        (low / step).floor() * step * unit
    } else {
        0.0
    };
    let step = tick_step((x_max - x_min) / unit, 8.0);
    let frame = Frame {
        x_min,
        x_max,
        decades,
    };
    let (x0, x1, y0, y1) = (LEFT, WIDTH - RIGHT, TOP, HEIGHT - BOTTOM);

    writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="12">"#
    )?;
    // Labels get a white halo so that lines and the curve behind them do not cross the text.
    writeln!(
        out,
        "<style>text.label {{ paint-order: stroke; stroke: #ffffff; stroke-width: 4px; stroke-linejoin: round; }}</style>"
    )?;
    writeln!(
        out,
        r##"<rect x="0" y="0" width="{WIDTH}" height="{HEIGHT}" fill="#ffffff"/>"##
    )?;
    writeln!(
        out,
        r#"<text x="{LEFT}" y="26" font-size="16" font-weight="bold">Aggregate demand on the shared tier without node-local absorption</text>"#
    )?;
    let how = if plan.distribution.exact {
        "exact".to_owned()
    } else {
        format!(
            "bracket within {}",
            sluice_units::Rate(plan.distribution.error_bound)
        )
    };
    writeln!(
        out,
        r##"<text x="{LEFT}" y="46" fill="#444">{} tenants; random phases independent and uniform, fixed phases on their timetable; {how}</text>"##,
        plan.tenant_count
    )?;

    // Grid and y ticks: one per decade.
    for d in 0..=decades {
        let p = 10_f64.powi(-d);
        let y = frame.y(p);
        writeln!(
            out,
            r##"<line x1="{x0}" y1="{y:.1}" x2="{x1}" y2="{y:.1}" stroke="#e4e4e4"/>"##
        )?;
        let label = match d {
            0 => "1".to_owned(),
            1 => "0.1".to_owned(),
            2 => "0.01".to_owned(),
            _ => format!("1e-{d}"),
        };
        writeln!(
            out,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{label}</text>"#,
            x0 - 8.0,
            y + 4.0
        )?;
    }
    // X ticks.
    let mut tick = (x_min / unit / step).ceil() * step;
    while tick * unit <= x_max * 1.0001 {
        let x = frame.x(tick * unit);
        writeln!(
            out,
            r##"<line x1="{x:.1}" y1="{y0}" x2="{x:.1}" y2="{y1}" stroke="#f0f0f0"/>"##
        )?;
        writeln!(
            out,
            r#"<text x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            y1 + 18.0,
            number(tick)
        )?;
        tick += step;
    }
    writeln!(
        out,
        r##"<rect x="{x0}" y="{y0}" width="{:.1}" height="{:.1}" fill="none" stroke="#333"/>"##,
        x1 - x0,
        y1 - y0
    )?;
    writeln!(
        out,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="13">aggregate demand x ({unit_name})</text>"#,
        f64::midpoint(x0, x1),
        HEIGHT - 22.0
    )?;
    writeln!(
        out,
        r#"<text transform="translate(24 {:.1}) rotate(-90)" text-anchor="middle" font-size="13">P(demand &gt; x): fraction of time</text>"#,
        f64::midpoint(y0, y1)
    )?;

    // Labels are written last, over every line and the curve.
    let mut labels = String::new();

    // Reference lines, labels staggered so that close lines stay legible.
    let mut references: Vec<(f64, String, &str)> = vec![
        (
            plan.sum_of_averages,
            format!(
                "sum of averages {}",
                sluice_units::Rate(plan.sum_of_averages)
            ),
            "#777777",
        ),
        (
            absorbed,
            format!("with absorption {}", sluice_units::Rate(absorbed)),
            "#2a9d3a",
        ),
    ];
    if let Some(c) = capacity {
        references.push((c, format!("capacity {}", sluice_units::Rate(c)), "#1f5fbf"));
    }
    if peaks_on_scale {
        references.push((
            plan.sum_of_peaks,
            format!("sum of peaks {}", sluice_units::Rate(plan.sum_of_peaks)),
            "#c0392b",
        ));
    }
    references.sort_by(|a, b| a.0.total_cmp(&b.0));
    for (row, (value, label, colour)) in references.iter().enumerate() {
        let x = frame.x(*value);
        let label_y = y0 + 16.0 + 15.0 * row as f64;
        let (anchor, dx) = if x > x1 - 200.0 {
            ("end", -4.0)
        } else {
            ("start", 4.0)
        };
        writeln!(
            out,
            r#"<line x1="{x:.1}" y1="{y0}" x2="{x:.1}" y2="{y1}" stroke="{colour}" stroke-width="1.5" stroke-dasharray="6 4"/>"#
        )?;
        writeln!(
            labels,
            r#"<text class="label" x="{:.1}" y="{label_y:.1}" text-anchor="{anchor}" fill="{colour}">{}</text>"#,
            x + dx,
            escape(label)
        )?;
    }
    if !peaks_on_scale {
        writeln!(
            labels,
            r##"<text class="label" x="{:.1}" y="{:.1}" text-anchor="end" fill="#c0392b">sum of peaks {} → (off scale)</text>"##,
            x1 - 4.0,
            y1 - 8.0,
            sluice_units::Rate(plan.sum_of_peaks)
        )?;
    }

    // The curve: P(D > x) = 1 left of the smallest demand, then a step down at every value.
    let mut points: Vec<(f64, f64)> = vec![(frame.x(0.0), frame.y(1.0))];
    let mut level = frame.y(1.0);
    for &(value, tail) in &curve {
        let x = (frame.x(value) * 10.0).round() / 10.0;
        let y = frame.y(tail);
        match points.last_mut() {
            Some(last) if (last.0 - x).abs() < 0.05 => last.1 = y,
            _ => {
                points.push((x, level));
                points.push((x, y));
            }
        }
        level = y;
        if tail < floor || value > x_max {
            break;
        }
    }
    if level < y1 {
        points.push((x1, level));
    }
    let path: Vec<String> = points
        .iter()
        .map(|(x, y)| format!("{x:.1},{y:.1}"))
        .collect();
    writeln!(
        out,
        r##"<polyline points="{}" fill="none" stroke="#111111" stroke-width="2"/>"##,
        path.join(" ")
    )?;

    // The target percentile: where the curve crosses 1 - p.
    let tail_target = 1.0 - target;
    let ty = frame.y(tail_target);
    let tx = frame.x(plan.target.bandwidth);
    writeln!(
        out,
        r##"<line x1="{x0}" y1="{ty:.1}" x2="{x1}" y2="{ty:.1}" stroke="#e67e22" stroke-width="1.2" stroke-dasharray="3 3"/>"##
    )?;
    writeln!(
        out,
        r##"<line x1="{tx:.1}" y1="{ty:.1}" x2="{tx:.1}" y2="{y1}" stroke="#e67e22" stroke-width="2"/>"##
    )?;
    writeln!(
        out,
        r##"<circle cx="{tx:.1}" cy="{ty:.1}" r="5" fill="#e67e22"/>"##
    )?;
    let (anchor, dx) = if tx > x1 - 260.0 {
        ("end", -8.0)
    } else {
        ("start", 8.0)
    };
    writeln!(
        labels,
        r##"<text class="label" x="{:.1}" y="{:.1}" text-anchor="{anchor}" fill="#b35900" font-weight="bold">target p{}: {} (exceeded {} of the time)</text>"##,
        tx + dx,
        ty - 8.0,
        percent(target).trim_end_matches('%'),
        sluice_units::Rate(plan.target.bandwidth),
        probability(tail_target)
    )?;
    writeln!(
        out,
        r##"<text x="{:.1}" y="{:.1}" text-anchor="end" font-size="11" fill="#555">demand in {unit_name}; grid step {}</text>"##,
        x1,
        HEIGHT - 6.0,
        sluice_units::Rate(plan.distribution.grid_step)
    )?;
    out.push_str(&labels);
    writeln!(out, "</svg>")
}
