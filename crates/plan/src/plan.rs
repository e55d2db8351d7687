//! The plan: every figure the report, the JSON and the chart show, computed once from a
//! validated [`Fleet`]. Serialises to the JSON contract (`sum_of_averages`, `sum_of_peaks`,
//! `percentiles`, `target`, `with_node_absorption`, `tenants`; every rate in bytes/s) plus
//! the details behind it.

use serde::Serialize;
use sluice_units::Rate;

use crate::absorption::{self, Absorbed};
use crate::alignment::{self, Overlap};
use crate::demand::{Burster, Demand};
use crate::fleet::{Fleet, Phase, Tenant};
use crate::reservation::{self, Reservation};
use crate::simulation::{self, Simulation};

/// The percentiles every plan reports, besides the target.
pub const PERCENTILES: [f64; 4] = [0.5, 0.99, 0.999, 0.9999];

/// What the caller adds to the file.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Overrides `[shared_tier] capacity`.
    pub capacity: Option<Rate>,
    /// Monte Carlo cross-check.
    pub simulate: Option<SimulateOptions>,
}

#[derive(Debug, Clone, Copy)]
pub struct SimulateOptions {
    pub samples: u64,
    pub seed: u64,
}

/// Aggregate demand percentiles, bytes/s.
#[derive(Debug, Clone, Serialize)]
pub struct Percentiles {
    pub p50: f64,
    pub p99: f64,
    #[serde(rename = "p99.9")]
    pub p99_9: f64,
    #[serde(rename = "p99.99")]
    pub p99_99: f64,
}

impl Percentiles {
    fn new(f: impl Fn(f64) -> f64) -> Self {
        Self {
            p50: f(PERCENTILES[0]),
            p99: f(PERCENTILES[1]),
            p99_9: f(PERCENTILES[2]),
            p99_99: f(PERCENTILES[3]),
        }
    }

    /// (label, bytes/s) in ascending order.
    pub fn labelled(&self) -> [(&'static str, f64); 4] {
        [
            ("p50", self.p50),
            ("p99", self.p99),
            ("p99.9", self.p99_9),
            ("p99.99", self.p99_99),
        ]
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Target {
    /// A fraction, e.g. 0.999.
    pub percentile: f64,
    /// Demand at that percentile without absorption, bytes/s.
    pub bandwidth: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct WithNodeAbsorption {
    /// Sum of drains plus reads, bytes/s: a bound whatever the phases.
    pub shared_bandwidth: f64,
    /// The largest local buffer any node needs, bytes.
    pub local_buffer_per_node: u64,
    /// The tenant whose nodes need it.
    pub local_buffer_tenant: String,
    /// Sum of the recommended gateway reservations as printed (rounded up), bytes/s.
    pub reservations: f64,
}

/// One `[[tenant]]` shape; figures are per copy.
#[derive(Debug, Clone, Serialize)]
pub struct TenantPlan {
    pub name: String,
    pub count: u32,
    pub nodes: u32,
    pub checkpoint_size: u64,
    pub interval_seconds: f64,
    /// "random", or the fixed offset in seconds.
    pub phase: serde_json::Value,
    /// Burst bandwidth, bytes/s.
    pub peak: f64,
    /// Checkpoint size / interval, bytes/s.
    pub average_write: f64,
    pub read_bandwidth: f64,
    pub burst_seconds: f64,
    pub duty_cycle: f64,
    pub with_node_absorption: Absorbed,
    pub gateway: Reservation,
    /// The copies' gateway tenant ids.
    pub ids: Vec<String>,
}

/// How the distribution was computed.
#[derive(Debug, Clone, Serialize)]
pub struct DistributionInfo {
    /// Grid step, bytes/s.
    pub grid_step: f64,
    /// Every possible demand is on the grid: the percentiles are exact.
    pub exact: bool,
    /// Worst-case gap between a reported figure and the truth, bytes/s (0 when exact).
    pub error_bound: f64,
    /// Lower ends of the percentile brackets (equal to `percentiles` when exact).
    pub percentiles_lower: Percentiles,
    pub target_lower: f64,
}

/// The shared tier's bandwidth, when given, against the plan.
#[derive(Debug, Clone, Serialize)]
pub struct CapacityPlan {
    pub bandwidth: f64,
    /// "--capacity" or "shared_tier.capacity".
    pub source: &'static str,
    /// P(demand > capacity) without absorption (upper bound when bracketed).
    pub exceedance: f64,
    pub exceedance_lower: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct AlignedPlan {
    /// Tenants with a fixed phase, counting copies.
    pub fixed_phase_tenants: u64,
    pub common_period_seconds: f64,
    /// The largest coincidence of fixed-phase bursts.
    pub worst: Option<Overlap>,
    pub worst_names: Vec<String>,
    /// What the coinciding tenants send to the shared tier with absorption: their drains,
    /// bytes/s (in place of `worst.bandwidth`).
    pub worst_drains: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Pass,
    Fail,
    Warn,
    NotChecked,
}

#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub name: &'static str,
    pub status: Status,
    pub detail: String,
}

/// Everything `sluice plan` reports.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    pub sum_of_averages: f64,
    pub sum_of_peaks: f64,
    pub percentiles: Percentiles,
    pub target: Target,
    pub with_node_absorption: WithNodeAbsorption,
    pub tenants: Vec<TenantPlan>,
    /// Sum of reads, bytes/s (included in every demand figure).
    pub reads: f64,
    pub tenant_count: u64,
    pub distribution: DistributionInfo,
    pub capacity: Option<CapacityPlan>,
    pub aligned: AlignedPlan,
    pub checks: Vec<Check>,
    pub simulation: Option<Simulation>,
    #[serde(skip)]
    pub(crate) demand: Demand,
    /// The recommended gateway `[[tenant]]` entries, TOML.
    pub gateway_toml: String,
}

impl Plan {
    /// The distribution behind the percentiles.
    pub fn demand(&self) -> &Demand {
        &self.demand
    }

    /// Recommended gateway `[[tenant]]` entries, TOML.
    pub fn gateway_toml(&self) -> &str {
        &self.gateway_toml
    }
}

/// Computes the plan.
pub fn plan(fleet: &Fleet, options: &Options) -> Plan {
    let tenants = &fleet.tenants;
    let copies = |t: &Tenant| f64::from(t.count);
    let reads: f64 = tenants.iter().map(|t| copies(t) * t.reads()).sum();
    let sum_of_averages = reads
        + tenants
            .iter()
            .map(|t| copies(t) * t.average_write())
            .sum::<f64>();
    let sum_of_peaks = reads
        + tenants
            .iter()
            .map(|t| copies(t) * t.peak() as f64)
            .sum::<f64>();

    let alignment = alignment::sweep(tenants);
    let random: Vec<Burster> = tenants
        .iter()
        .filter(|t| t.phase == Phase::Random)
        .map(|t| Burster {
            peak: t.peak(),
            duty: t.duty_cycle(),
            count: t.count,
        })
        .collect();
    let demand = Demand::new(reads, &random, &alignment.levels);
    let percentile = fleet.shared_tier.percentile;
    let percentiles = Percentiles::new(|p| demand.quantile(p));
    let target = Target {
        percentile,
        bandwidth: demand.quantile(percentile),
    };
    let distribution = DistributionInfo {
        grid_step: demand.step() as f64,
        exact: demand.is_exact(),
        error_bound: demand.error_bound(),
        percentiles_lower: Percentiles::new(|p| demand.quantile_bounds(p).0),
        target_lower: demand.quantile_bounds(percentile).0,
    };

    let absorbed: Vec<Absorbed> = tenants
        .iter()
        .map(|t| absorption::absorb(t, &fleet.node))
        .collect();
    let reservations: Vec<Reservation> = tenants
        .iter()
        .zip(&absorbed)
        .map(|(t, a)| reservation::recommend(t, a))
        .collect();
    let shared_bandwidth: f64 = tenants
        .iter()
        .zip(&absorbed)
        .map(|(t, a)| copies(t) * a.shared_bandwidth)
        .sum();
    let reserved: f64 = tenants
        .iter()
        .zip(&reservations)
        .map(|(t, r)| copies(t) * r.reservation)
        .sum();
    let (buffer_index, largest_buffer) = absorbed
        .iter()
        .map(|a| a.local_buffer_per_node)
        .enumerate()
        .max_by_key(|&(_, b)| b)
        .unwrap_or((0, 0));
    let with_node_absorption = WithNodeAbsorption {
        shared_bandwidth,
        local_buffer_per_node: largest_buffer,
        local_buffer_tenant: tenants
            .get(buffer_index)
            .map(|t| t.name.clone())
            .unwrap_or_default(),
        reservations: reserved,
    };

    let capacity = match (options.capacity, fleet.shared_tier.capacity) {
        (Some(rate), _) => Some((rate, "--capacity")),
        (None, Some(rate)) => Some((rate, "shared_tier.capacity")),
        (None, None) => None,
    }
    .map(|(rate, source)| {
        let (exceedance_lower, exceedance) = demand.exceedance_bounds(rate.bytes_per_sec());
        CapacityPlan {
            bandwidth: rate.bytes_per_sec(),
            source,
            exceedance,
            exceedance_lower,
        }
    });

    let worst_members = alignment
        .worst
        .as_ref()
        .map(|w| w.members.clone())
        .unwrap_or_default();
    let aligned = AlignedPlan {
        fixed_phase_tenants: tenants
            .iter()
            .filter(|t| t.phase != Phase::Random)
            .map(|t| u64::from(t.count))
            .sum(),
        common_period_seconds: alignment.period_seconds,
        worst_names: worst_members
            .iter()
            .map(|&i| tenants[i].name.clone())
            .collect(),
        worst_drains: worst_members
            .iter()
            .map(|&i| copies(&tenants[i]) * absorbed[i].drain_rate)
            .sum(),
        worst: alignment.worst.clone(),
    };

    let tenant_plans: Vec<TenantPlan> = tenants
        .iter()
        .zip(absorbed.iter().zip(&reservations))
        .map(|(t, (a, r))| TenantPlan {
            name: t.name.clone(),
            count: t.count,
            nodes: t.nodes,
            checkpoint_size: t.checkpoint_size.bytes(),
            interval_seconds: t.interval_seconds(),
            phase: match t.phase {
                Phase::Random => serde_json::Value::from("random"),
                Phase::Fixed(offset) => serde_json::Value::from(offset.as_secs_f64()),
            },
            peak: t.peak() as f64,
            average_write: t.average_write(),
            read_bandwidth: t.reads(),
            burst_seconds: t.burst_seconds(),
            duty_cycle: t.duty_cycle(),
            with_node_absorption: a.clone(),
            gateway: r.clone(),
            ids: reservation::ids(t),
        })
        .collect();

    let checks = checks(
        fleet,
        &tenant_plans,
        &with_node_absorption,
        capacity.as_ref(),
        &aligned,
    );

    let simulation = options.simulate.map(|s| {
        let mut thresholds: Vec<(String, f64)> = percentiles
            .labelled()
            .iter()
            .map(|&(label, value)| (label.to_owned(), value))
            .collect();
        thresholds.push(("target".to_owned(), target.bandwidth));
        if let Some(c) = &capacity {
            thresholds.push(("capacity".to_owned(), c.bandwidth));
        }
        let mut at = PERCENTILES.to_vec();
        if !at.contains(&percentile) {
            at.push(percentile);
        }
        simulation::simulate(
            fleet,
            &alignment,
            &demand,
            &thresholds,
            &at,
            s.samples,
            s.seed,
        )
    });

    let shapes: Vec<(&Tenant, &Absorbed, &Reservation)> = tenants
        .iter()
        .zip(absorbed.iter().zip(&reservations))
        .map(|(t, (a, r))| (t, a, r))
        .collect();
    let gateway_toml = reservation::gateway_toml(&shapes);

    Plan {
        sum_of_averages,
        sum_of_peaks,
        percentiles,
        target,
        with_node_absorption,
        tenants: tenant_plans,
        reads,
        tenant_count: fleet.tenant_count(),
        distribution,
        capacity,
        aligned,
        checks,
        simulation,
        demand,
        gateway_toml,
    }
}

fn checks(
    fleet: &Fleet,
    tenants: &[TenantPlan],
    absorbed: &WithNodeAbsorption,
    capacity: Option<&CapacityPlan>,
    aligned: &AlignedPlan,
) -> Vec<Check> {
    let mut checks = Vec::new();

    let late: Vec<&TenantPlan> = tenants
        .iter()
        .filter(|t| t.with_node_absorption.drain_seconds >= t.interval_seconds)
        .collect();
    let tightest = tenants.iter().max_by(|a, b| {
        let ratio = |t: &TenantPlan| t.with_node_absorption.drain_seconds / t.interval_seconds;
        ratio(a).total_cmp(&ratio(b))
    });
    let describe = |t: &TenantPlan| {
        format!(
            "{}: landing {} + drain {} = {} of {}",
            t.name,
            crate::report::seconds(t.with_node_absorption.landing_seconds),
            crate::report::seconds(
                t.with_node_absorption.drain_seconds - t.with_node_absorption.landing_seconds
            ),
            crate::report::seconds(t.with_node_absorption.drain_seconds),
            crate::report::seconds(t.interval_seconds)
        )
    };
    checks.push(Check {
        name: "drain time < interval",
        status: if late.is_empty() {
            Status::Pass
        } else {
            Status::Fail
        },
        detail: if late.is_empty() {
            tightest
                .map(|t| format!("tightest {}", describe(t)))
                .unwrap_or_default()
        } else {
            late.iter()
                .map(|t| describe(t))
                .collect::<Vec<_>>()
                .join("; ")
        },
    });

    let local_capacity = fleet.node.local_capacity;
    checks.push(Check {
        name: "local buffers fit local_capacity",
        status: if absorbed.local_buffer_per_node <= local_capacity.bytes() {
            Status::Pass
        } else {
            Status::Fail
        },
        detail: format!(
            "largest {} per node ({}, {} checkpoint shards) of {}",
            sluice_units::ByteSize(absorbed.local_buffer_per_node),
            absorbed.local_buffer_tenant,
            fleet.node.buffer_checkpoints,
            local_capacity
        ),
    });

    checks.push(match capacity {
        Some(c) => Check {
            name: "reservations fit the capacity",
            status: if absorbed.reservations <= c.bandwidth {
                Status::Pass
            } else {
                Status::Fail
            },
            detail: format!(
                "{} reserved of {} ({})",
                Rate(absorbed.reservations),
                Rate(c.bandwidth),
                c.source
            ),
        },
        None => Check {
            name: "reservations fit the capacity",
            status: Status::NotChecked,
            detail: format!(
                "no capacity given (--capacity or [shared_tier] capacity); reservations need {}",
                Rate(absorbed.reservations)
            ),
        },
    });

    checks.push(match &aligned.worst {
        Some(w) if w.tenants > 1 => Check {
            name: "fixed phases do not align",
            status: Status::Warn,
            detail: format!(
                "{} tenants burst together at +{}: {} without absorption, {} of drains with it",
                w.tenants,
                crate::report::seconds(w.at_seconds),
                Rate(w.bandwidth),
                Rate(aligned.worst_drains)
            ),
        },
        Some(w) => Check {
            name: "fixed phases do not align",
            status: Status::Pass,
            detail: format!(
                "at most one fixed-phase tenant bursts at a time (largest {})",
                Rate(w.bandwidth)
            ),
        },
        None => Check {
            name: "fixed phases do not align",
            status: Status::Pass,
            detail: "every phase is random".to_owned(),
        },
    });
    checks
}
