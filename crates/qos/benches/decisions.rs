//! Scheduler decisions per second against the number of tenants, all saturated.
//!
//! `cargo bench -p sluice-qos` (release). Plain `std::time::Instant`, no harness.
//!
//! Each tenant keeps two requests queued: every dispatch is followed by an enqueue for the
//! same tenant, so one "decision" here is a `dequeue` plus the `enqueue` that replaces it — the
//! gateway's steady state. Virtual time advances by cost / capacity per dispatch, as if the
//! backend were saturated. A third of the tenants hold reservations (together half the
//! capacity), weights are 1–10, and a fifth are limited near their fair share, so all three
//! heaps and the limit → ready hand-over are exercised.
//!
//! Expected cost: O(log n) per decision (binary heaps); beyond ~10,000 tenants the heaps and
//! tenant records outgrow the CPU caches, which adds a roughly constant memory-latency term.
//!
//! Options (environment): `SLUICE_QOS_BENCH_SEED`, `SLUICE_QOS_BENCH_DECISIONS` (per
//! repetition, default 2,000,000), `SLUICE_QOS_BENCH_REPS` (default 5),
//! `SLUICE_QOS_BENCH_TENANTS` (comma-separated, default 10,100,1000,10000,100000).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark binary, not library code

use std::hint::black_box;
use std::time::{Duration, Instant};

use sluice_qos::{Decision, Phase, Request, Scheduler, TenantId, TenantQos};

/// 10 GiB/s of cost units (bytes).
const CAPACITY: f64 = 10.0 * 1024.0 * 1024.0 * 1024.0;
/// 64 KiB per operation plus bodies of 0–4 MiB, drawn from a fixed table.
const PER_OP: u64 = 64 << 10;
/// Decisions timed together for the latency distribution (an `Instant` per decision would
/// cost as much as the decision).
const BATCH: usize = 64;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn env<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

struct Setup {
    scheduler: Scheduler<u32>,
    ids: Vec<TenantId>,
    /// Costs to cycle through.
    costs: Vec<u64>,
    next_cost: usize,
    now: Duration,
}

fn setup(tenants: usize, rng: &mut Rng) -> Setup {
    let mut scheduler = Scheduler::new();
    let reserved = tenants.div_ceil(3);
    let fair = CAPACITY / tenants as f64;
    let ids: Vec<TenantId> = (0..tenants)
        .map(|i| {
            let reservation = if i % 3 == 0 {
                0.5 * CAPACITY / reserved as f64
            } else {
                0.0
            };
            let weight = 1.0 + (rng.next() % 10) as f64;
            let limit = (i % 5 == 1).then(|| (fair * (0.5 + rng.unit())).max(reservation));
            scheduler.add_tenant(TenantQos::new(reservation, weight, limit).unwrap())
        })
        .collect();
    let costs = (0..4096).map(|_| PER_OP + rng.next() % (4 << 20)).collect();
    let mut setup = Setup {
        scheduler,
        ids,
        costs,
        next_cost: 0,
        now: Duration::ZERO,
    };
    for i in 0..tenants {
        for _ in 0..2 {
            setup.offer(i as u32);
        }
    }
    setup
}

impl Setup {
    fn offer(&mut self, tenant: u32) {
        let cost = self.costs[self.next_cost];
        self.next_cost = (self.next_cost + 1) % self.costs.len();
        self.scheduler
            .enqueue(
                self.ids[tenant as usize],
                Request::new(tenant, cost),
                self.now,
            )
            .unwrap();
    }

    /// One decision and its replacement enqueue; returns whether it was a reservation-phase
    /// dispatch, and counts a `NextAt` as a decision too.
    fn step(&mut self) -> Step {
        match self.scheduler.dequeue(self.now) {
            Decision::Dispatch(dispatch) => {
                // The backend is busy with it for cost / capacity.
                self.now += Duration::from_nanos((dispatch.cost as f64 * 1e9 / CAPACITY) as u64);
                self.offer(dispatch.payload);
                black_box(&dispatch);
                if dispatch.phase == Phase::Reservation {
                    Step::Reservation
                } else {
                    Step::Weight
                }
            }
            Decision::NextAt(at) => {
                self.now = at;
                Step::Wait
            }
            Decision::Empty => unreachable!("every tenant is saturated"),
        }
    }
}

#[derive(PartialEq)]
enum Step {
    Reservation,
    Weight,
    Wait,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[rank]
}

fn main() {
    let seed: u64 = env("SLUICE_QOS_BENCH_SEED", 0x51u64);
    let decisions: usize = env("SLUICE_QOS_BENCH_DECISIONS", 2_000_000);
    let reps: usize = env("SLUICE_QOS_BENCH_REPS", 5);
    let sizes: Vec<usize> = std::env::var("SLUICE_QOS_BENCH_TENANTS")
        .unwrap_or_else(|_| "10,100,1000,10000,100000".to_owned())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    println!(
        "sluice-qos decisions: seed={seed:#x} decisions/rep={decisions} reps={reps} \
         capacity={:.0} GiB/s cost=64KiB+U[0,4MiB) queue depth=2 batch={BATCH}",
        CAPACITY / f64::from(1u32 << 30)
    );
    println!(
        "{:>8} {:>4} {:>12} {:>8} {:>8} {:>8} {:>8} {:>7} {:>7}",
        "tenants", "rep", "decisions/s", "ns/dec", "p50", "p99", "p99.9", "resv%", "wait%"
    );
    for &tenants in &sizes {
        let mut rng = Rng(seed ^ tenants as u64);
        let mut setup = setup(tenants, &mut rng);
        // Warm up: every tenant served a few times, caches and tags in steady state.
        for _ in 0..(tenants * 8).max(200_000) {
            setup.step();
        }
        let mut best = f64::INFINITY;
        for rep in 1..=reps {
            let mut batches = Vec::with_capacity(decisions / BATCH);
            let (mut reserved, mut waits) = (0usize, 0usize);
            let start = Instant::now();
            for _ in 0..decisions / BATCH {
                let batch_start = Instant::now();
                for _ in 0..BATCH {
                    match setup.step() {
                        Step::Reservation => reserved += 1,
                        Step::Weight => {}
                        Step::Wait => waits += 1,
                    }
                }
                batches.push(batch_start.elapsed().as_nanos() as f64 / BATCH as f64);
            }
            let elapsed = start.elapsed().as_secs_f64();
            let done = (decisions / BATCH * BATCH) as f64;
            let ns = elapsed * 1e9 / done;
            best = best.min(ns);
            batches.sort_by(f64::total_cmp);
            println!(
                "{tenants:>8} {rep:>4} {:>12.0} {ns:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>7.1} {:>7.2}",
                done / elapsed,
                percentile(&batches, 0.5),
                percentile(&batches, 0.99),
                percentile(&batches, 0.999),
                100.0 * reserved as f64 / done,
                100.0 * waits as f64 / done,
            );
        }
        println!(
            "{tenants:>8} best {:>12.0} {best:>8.1}   ({:.1} ns per log2(tenants))",
            1e9 / best,
            best / (tenants as f64).log2()
        );
    }
    println!("(p50/p99/p99.9: ns per decision, over batches of {BATCH} decisions)");
}
