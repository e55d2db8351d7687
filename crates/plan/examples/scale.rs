//! How planning time grows with the number of tenants.
//!
//! ```text
//! cargo run --release -p sluice-plan --example scale            # the sweep, as a table
//! cargo run --release -p sluice-plan --example scale -- 1000    # a 1,000-tenant planning file
//! ```
//!
//! Tenants are heterogeneous (peaks drawn to the byte, so the grid is bracketed, the slow
//! path) from a fixed seed. Expected cost: O(tenants × grid cells), with at most 2^18 cells,
//! so linear in tenants once the grid is full.

use std::fmt::Write as _;
use std::time::Instant;

use sluice_plan::simulation::SplitMix64;

const SEED: u64 = 1000;
const GIB: u64 = 1 << 30;

/// A planning file of `tenants` seeded, heterogeneous tenants.
fn planning_file(tenants: usize) -> String {
    let mut rng = SplitMix64::new(SEED);
    let mut text = String::from(
        "[shared_tier]\npercentile = 0.999\n\n[node]\nlocal_write_bandwidth = \"10GiB/s\"\n\
         local_capacity = \"28TiB\"\n",
    );
    for i in 0..tenants {
        let peak = GIB + rng.next_u64() % (31 * GIB);
        let interval = 60 * (10 + rng.next_u64() % 170);
        let burst = 5 + rng.next_u64() % (interval / 10);
        let reads = rng.next_u64() % (4 * GIB);
        let nodes = 1 << (rng.next_u64() % 7);
        let _ = write!(
            text,
            "\n[[tenant]]\nname = \"job-{i}\"\nnodes = {nodes}\ncheckpoint_size = {}\n\
             interval = {interval}\nburst_bandwidth = {peak}\nread_bandwidth = {reads}\n",
            peak * burst
        );
    }
    text
}

fn main() {
    if let Some(n) = std::env::args().nth(1) {
        let n: usize = n.parse().unwrap_or_else(|_| {
            eprintln!("usage: scale [TENANTS]");
            std::process::exit(2)
        });
        print!("{}", planning_file(n));
        return;
    }
    println!("seed {SEED}; parse + plan, best of 3 runs");
    println!(
        "{:>8} {:>10} {:>12} {:>14} {:>14}",
        "tenants", "time", "grid step", "p99.9", "bracket"
    );
    for tenants in [10, 100, 1_000, 3_000, 10_000] {
        let text = planning_file(tenants);
        let mut best = f64::INFINITY;
        let mut last = None;
        for _ in 0..3 {
            let start = Instant::now();
            let fleet = match sluice_plan::parse(&text) {
                Ok(fleet) => fleet,
                Err(e) => {
                    eprintln!("{e}");
                    std::process::exit(1)
                }
            };
            let plan = sluice_plan::plan(&fleet, &sluice_plan::Options::default());
            best = best.min(start.elapsed().as_secs_f64());
            last = Some(plan);
        }
        let Some(plan) = last else { continue };
        let d = &plan.distribution;
        let bracket = plan.percentiles.p99_9 - d.percentiles_lower.p99_9;
        println!(
            "{tenants:>8} {:>9.3}s {:>12} {:>14} {:>13.3}%",
            best,
            sluice_units::Rate(d.grid_step).to_string(),
            sluice_units::Rate(plan.percentiles.p99_9).to_string(),
            100.0 * bracket / plan.percentiles.p99_9
        );
    }
}
