//! Tests against cases worked by hand, brute-force enumeration and Monte Carlo, plus the
//! planning file's errors. Helpers here build planning files from plain numbers.

// Exact equality is the point where a figure is exact (the hand-worked percentiles).
#![allow(clippy::float_cmp)]

mod absorption;
mod config;
mod demand;
mod output;
mod scale;
mod simulation;

use std::fmt::Write as _;

use crate::fleet::{Fleet, Phase};

pub(crate) const GIB: u64 = 1 << 30;

/// One `[[tenant]]` in plain units: bytes, seconds, bytes per second.
#[derive(Debug, Clone)]
pub(crate) struct Shape {
    pub name: String,
    pub count: u32,
    pub nodes: u32,
    pub size: u64,
    pub interval: u64,
    pub peak: u64,
    pub reads: u64,
    pub phase: Option<u64>,
}

impl Shape {
    /// A tenant bursting at `peak` for `burst` seconds every `interval` seconds.
    pub fn new(name: &str, peak: u64, burst: u64, interval: u64) -> Self {
        Self {
            name: name.to_owned(),
            count: 1,
            nodes: 8,
            size: peak * burst,
            interval,
            peak,
            reads: 0,
            phase: None,
        }
    }

    pub fn count(mut self, count: u32) -> Self {
        self.count = count;
        self
    }

    pub fn reads(mut self, reads: u64) -> Self {
        self.reads = reads;
        self
    }

    pub fn phase(mut self, seconds: u64) -> Self {
        self.phase = Some(seconds);
        self
    }
}

/// A planning file with the default node and `header` (extra `[shared_tier]` lines etc.).
pub(crate) fn file(shapes: &[Shape], header: &str) -> String {
    let mut text = String::from(header);
    text.push_str("\n[node]\nlocal_write_bandwidth = \"10GiB/s\"\nlocal_capacity = \"28TiB\"\n");
    for s in shapes {
        let _ = write!(
            text,
            "\n[[tenant]]\nname = {:?}\ncount = {}\nnodes = {}\ncheckpoint_size = {}\n\
             interval = {}\nburst_bandwidth = {}\nread_bandwidth = {}\n",
            s.name, s.count, s.nodes, s.size, s.interval, s.peak, s.reads
        );
        if let Some(p) = s.phase {
            let _ = writeln!(text, "phase = \"{p}s\"");
        }
    }
    text
}

pub(crate) fn fleet(shapes: &[Shape]) -> Fleet {
    crate::parse(&file(shapes, "")).expect("the test's planning file is valid")
}

/// The distribution of demand by enumerating every on/off state of the random-phase
/// tenants (2^n) and every whole second of the fixed-phase timetable. Fixed-phase tenants
/// must have whole-second phases, intervals and bursts. Returns (demand, probability)
/// ascending, equal demands merged.
pub(crate) fn brute_force(fleet: &Fleet) -> Vec<(f64, f64)> {
    let mut random = Vec::new();
    let mut fixed = Vec::new();
    let mut reads = 0.0;
    for t in &fleet.tenants {
        reads += f64::from(t.count) * t.reads();
        match t.phase {
            Phase::Random => {
                for _ in 0..t.count {
                    random.push((t.peak() as f64, t.duty_cycle()));
                }
            }
            Phase::Fixed(offset) => fixed.push((
                f64::from(t.count) * t.peak() as f64,
                offset.as_secs(),
                t.interval.as_secs(),
                t.burst_seconds(),
            )),
        }
    }
    assert!(random.len() <= 16, "brute force is for small cases");
    let period = fixed
        .iter()
        .fold(1, |acc, &(_, _, interval, _)| lcm(acc, interval));
    let mut timetable: Vec<(f64, f64)> = Vec::new();
    if fixed.is_empty() {
        timetable.push((0.0, 1.0));
    } else {
        for second in 0..period {
            let at = second as f64 + 0.5;
            let demand: f64 = fixed
                .iter()
                .filter(|&&(_, phase, interval, burst)| {
                    (at - phase as f64).rem_euclid(interval as f64) < burst
                })
                .map(|&(peak, ..)| peak)
                .sum();
            timetable.push((demand, 1.0 / period as f64));
        }
    }
    let mut atoms = Vec::new();
    for state in 0_u32..(1 << random.len()) {
        let mut demand = reads;
        let mut probability = 1.0;
        for (i, &(peak, duty)) in random.iter().enumerate() {
            if state & (1 << i) != 0 {
                demand += peak;
                probability *= duty;
            } else {
                probability *= 1.0 - duty;
            }
        }
        for &(level, share) in &timetable {
            atoms.push((demand + level, probability * share));
        }
    }
    atoms.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut merged: Vec<(f64, f64)> = Vec::new();
    for (demand, p) in atoms {
        match merged.last_mut() {
            Some(last) if (last.0 - demand).abs() <= 1e-9 * demand.max(1.0) => last.1 += p,
            _ => merged.push((demand, p)),
        }
    }
    merged
}

fn lcm(a: u64, b: u64) -> u64 {
    let (mut x, mut y) = (a, b);
    while y != 0 {
        (x, y) = (y, x % y);
    }
    a / x * b
}

/// The `p`-quantile of a brute-force distribution.
pub(crate) fn brute_quantile(atoms: &[(f64, f64)], p: f64) -> f64 {
    let mut below = 0.0;
    for &(demand, probability) in atoms {
        below += probability;
        if below >= p - 1e-12 {
            return demand;
        }
    }
    atoms.last().map_or(0.0, |a| a.0)
}

/// P(D > x) of a brute-force distribution.
pub(crate) fn brute_exceedance(atoms: &[(f64, f64)], x: f64) -> f64 {
    atoms
        .iter()
        .filter(|&&(demand, _)| demand > x)
        .map(|&(_, p)| p)
        .sum()
}

pub(crate) fn close(a: f64, b: f64, relative: f64) -> bool {
    (a - b).abs() <= relative * a.abs().max(b.abs()).max(1.0)
}
