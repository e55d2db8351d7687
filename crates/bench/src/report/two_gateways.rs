//! What the noisy-neighbour tables say about the two-gateway scenarios
//! ([`crate::noisy::gateways`]) beyond their rows: the scenarios a run could not measure
//! (`skipped` in the report, e.g. with `--postgres none`), each as a row of its own marked
//! *skipped* and a sentence with its reason, never as zeros; and `two_gateways`'
//! `reconverge_s`, how long after gateway 2 was killed under load gateway 1 alone moved
//! [`RECONVERGED`] of the tier (`null`: not within [`RECONVERGE_WAIT`]).

use std::fmt::Write as _;

use serde::{Deserialize, Deserializer};

use super::{NONE, NoisyReport, Scenario, num};
use crate::noisy::gateways::{COORDINATED, RECONVERGE_WAIT, RECONVERGED, UNCOORDINATED};

/// How soon a dead gateway's share is to be reassigned (issue #25; `docs/cluster-qos.md`).
const REASSIGN_BOUND_S: f64 = 2.0;

/// A scenario the run could not measure (`crate::noisy::Skipped`).
#[derive(Deserialize)]
pub(super) struct Skipped {
    name: String,
    #[serde(default)]
    reason: Option<String>,
}

/// `reconverge_s` of a scenario that measured it (absent elsewhere).
#[derive(Clone, Copy)]
pub(super) enum Reconverge {
    /// Gateway 1 alone moved [`RECONVERGED`] of the tier this many seconds after the kill.
    Seconds(f64),
    /// It did not within [`RECONVERGE_WAIT`] (`null` in the report).
    NotInTime,
}

/// `reconverge_s` as the report writes it: seconds, or `null` when it did not re-converge
/// (the field's absence, [`None`], is serde's `default`).
pub(super) fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Reconverge>, D::Error> {
    let v = Option::<f64>::deserialize(d)?;
    Ok(Some(v.map_or(Reconverge::NotInTime, Reconverge::Seconds)))
}

/// Whether the report has anything of the two-gateway scenarios, measured or skipped.
fn any(r: &NoisyReport) -> bool {
    let two = |name: &str| name == COORDINATED || name == UNCOORDINATED;
    r.scenarios.iter().any(|s| two(&s.name)) || r.skipped.iter().any(|k| two(&k.name))
}

/// The flags that reproduce which scenarios ran: `--only` as given, `--postgres none` when
/// the uncoordinated scenario was skipped (it is only for want of PostgreSQL).
pub(super) fn command_flags(r: &NoisyReport) -> String {
    let mut out = String::new();
    if let Some(only) = &r.config.only {
        let _ = write!(out, " --only {}", only.join(","));
    }
    if r.skipped.iter().any(|k| k.name == UNCOORDINATED) {
        out.push_str(" --postgres none");
    }
    out
}

/// The setup's sentence on the two gateways, or nothing when the report has neither scenario.
pub(super) fn setup(r: &NoisyReport) -> String {
    if !any(r) {
        return String::new();
    }
    format!(
        " In `{UNCOORDINATED}` and `{COORDINATED}` two gateways on one PostgreSQL catalog share \
         the tier (one emulated device), the victim reading through gateway 1 and the aggressor \
         writing through gateway 2: in `{UNCOORDINATED}` each paces to the whole tier on its \
         own, in `{COORDINATED}` they split its capacity and the tenants' reservations and \
         limits between them."
    )
}

/// A table row for each skipped scenario: its name, *skipped*, and "–" in the other
/// `columns - 2` columns.
pub(super) fn skipped_rows(skipped: &[Skipped], columns: usize) -> String {
    let rest = format!(" {NONE} |").repeat(columns.saturating_sub(2));
    let mut out = String::new();
    for k in skipped {
        let _ = writeln!(out, "| {} | skipped |{rest}", k.name);
    }
    out
}

/// The sentences under the table: each skipped scenario's reason, then `reconverge_s`.
pub(super) fn note(r: &NoisyReport) -> String {
    let mut out = String::new();
    for k in &r.skipped {
        let _ = match &k.reason {
            Some(reason) => write!(out, "\n`{}` was skipped: {}.\n", k.name, plain(reason)),
            None => write!(out, "\n`{}` was skipped.\n", k.name),
        };
    }
    for s in &r.scenarios {
        out.push_str(&reconverge(s));
    }
    out
}

/// `text` as Markdown shows it literally: the characters that would start emphasis, code,
/// HTML or a table cell escaped (a reason names paths such as `/usr/lib/postgresql/*/bin`).
fn plain(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '\\' | '*' | '`' | '<' | '|') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn reconverge(s: &Scenario) -> String {
    let Some(measured) = s.reconverge_s else {
        return String::new();
    };
    let share = num(RECONVERGED * 100.0, 0);
    let what = match measured {
        Reconverge::Seconds(v) => format!(
            "gateway 1 alone moved {share}% of the tier {} s later (`reconverge_s`, the time \
             capacity and limits took to re-converge; bound {} s: {})",
            num(v, 2),
            num(REASSIGN_BOUND_S, 0),
            if v <= REASSIGN_BOUND_S {
                "met"
            } else {
                "not met"
            }
        ),
        Reconverge::NotInTime => format!(
            "gateway 1 alone did not move {share}% of the tier within {} s (`reconverge_s` \
             null: capacity and limits did not re-converge)",
            RECONVERGE_WAIT.as_secs()
        ),
    };
    format!(
        "\nIn `{}` gateway 2 was killed under load: {what}.\n",
        s.name
    )
}
