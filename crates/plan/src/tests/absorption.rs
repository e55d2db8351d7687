//! Node-local absorption, the checks and the gateway reservations, worked by hand.

use sluice_units::Rate;

use super::{GIB, Shape, close, file, fleet};
use crate::{Options, Status, plan};

/// The llama-70b: 980 GB on 64 nodes every 30 min, 4 GiB/s of reads, 10 GiB/s local
/// writes, drains within 80% of the interval, two checkpoints of room per node.
#[test]
fn the_70b_tenant_worked_by_hand() {
    let text = "[node]\nlocal_write_bandwidth = \"10GiB/s\"\nlocal_capacity = \"28TiB\"\n\
                [[tenant]]\nname = \"llama-70b\"\nnodes = 64\ncheckpoint_size = \"980GB\"\n\
                interval = \"30m\"\nburst_bandwidth = \"16GiB/s\"\nread_bandwidth = \"4GiB/s\"\n";
    let plan = plan(&crate::parse(text).expect("valid"), &Options::default());
    let t = &plan.tenants[0];
    let a = &t.with_node_absorption;
    let size = 980e9;
    assert!(close(t.average_write, size / 1800.0, 1e-12));
    assert!(close(t.burst_seconds, size / (16.0 * GIB as f64), 1e-12));
    assert!(close(
        t.duty_cycle,
        size / (16.0 * GIB as f64) / 1800.0,
        1e-12
    ));
    // 980e9 / 64 = 15,312,500,000 bytes per node, twice.
    assert_eq!(a.local_buffer_per_node, 2 * 15_312_500_000);
    assert!(close(
        a.landing_seconds,
        15_312_500_000.0 / (10.0 * GIB as f64),
        1e-12
    ));
    assert!(close(a.drain_rate, size / (1800.0 * 0.8), 1e-12));
    assert!(close(
        a.drain_rate_per_node,
        size / (1800.0 * 0.8) / 64.0,
        1e-12
    ));
    assert!(close(a.drain_seconds, a.landing_seconds + 1440.0, 1e-12));
    let shared = size / 1440.0 + 4.0 * GIB as f64;
    assert!(close(a.shared_bandwidth, shared, 1e-12));
    assert!(close(
        plan.with_node_absorption.shared_bandwidth,
        shared,
        1e-12
    ));
    // Reservation: shared need rounded up to 0.01 GiB/s; limit: reads + peak.
    assert!(t.gateway.reservation >= shared);
    assert!(t.gateway.reservation - shared < 0.01 * GIB as f64);
    assert_eq!(t.gateway.limit, 20.0 * GIB as f64);
    assert!(plan.checks.iter().all(|c| c.status != Status::Fail));
}

#[test]
fn shared_need_counts_every_copy_and_ignores_phases() {
    let random = plan(
        &fleet(&[Shape::new("t", GIB, 60, 1800).count(10).reads(GIB)]),
        &Options::default(),
    );
    let aligned = plan(
        &fleet(&[Shape::new("t", GIB, 60, 1800).count(10).reads(GIB).phase(0)]),
        &Options::default(),
    );
    let expected = 10.0 * (60.0 * GIB as f64 / (1800.0 * 0.8) + GIB as f64);
    assert!(close(
        random.with_node_absorption.shared_bandwidth,
        expected,
        1e-12
    ));
    assert!(close(
        aligned.with_node_absorption.shared_bandwidth,
        expected,
        1e-12
    ));
    assert!(aligned.percentiles.p99 > random.percentiles.p99);
    assert!(close(
        aligned.aligned.worst_drains,
        expected - 10.0 * GIB as f64,
        1e-12
    ));
    let warn = aligned
        .checks
        .iter()
        .find(|c| c.name == "fixed phases do not align")
        .expect("the alignment check");
    assert_eq!(warn.status, Status::Warn);
}

fn check(plan: &crate::Plan, name: &str) -> Status {
    plan.checks
        .iter()
        .find(|c| c.name == name)
        .map(|c| c.status)
        .expect("check exists")
}

#[test]
fn each_check_fails_when_its_condition_does() {
    // One node holds a whole 2 TiB checkpoint twice: 4 TiB > 3 TiB of local disk.
    let mut big = Shape::new("big", 8 * GIB, 256, 3600);
    big.nodes = 1;
    let text = file(&[big], "").replace("\"28TiB\"", "\"3TiB\"");
    let plan = plan(&crate::parse(&text).expect("valid"), &Options::default());
    assert_eq!(
        check(&plan, "local buffers fit local_capacity"),
        Status::Fail
    );
    assert_eq!(check(&plan, "drain time < interval"), Status::Pass);
    assert_eq!(
        check(&plan, "reservations fit the capacity"),
        Status::NotChecked
    );

    // A drain window of the whole interval leaves no time to land the checkpoint first.
    let text = file(&[Shape::new("t", GIB, 60, 1800)], "")
        .replace("\"28TiB\"", "\"28TiB\"\ndrain_window = 1.0");
    let plan = crate::plan(&crate::parse(&text).expect("valid"), &Options::default());
    assert_eq!(check(&plan, "drain time < interval"), Status::Fail);

    // Reservations above the capacity, from the file or the flag.
    let fleet = fleet(&[Shape::new("t", GIB, 60, 1800).count(10).reads(GIB)]);
    let need = 10.0 * (60.0 * GIB as f64 / 1440.0 + GIB as f64);
    let options = |c: f64| Options {
        capacity: Some(Rate(c)),
        simulate: None,
    };
    let plan = crate::plan(&fleet, &options(need * 0.99));
    assert_eq!(check(&plan, "reservations fit the capacity"), Status::Fail);
    let plan = crate::plan(&fleet, &options(need * 1.01));
    assert_eq!(check(&plan, "reservations fit the capacity"), Status::Pass);
}

#[test]
fn the_gateway_toml_pastes_back_as_tenants() {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Gateway {
        tenant: Vec<Entry>,
    }
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Entry {
        id: String,
        reservation: Rate,
        weight: u64,
        limit: Rate,
    }
    let fleet = fleet(&[
        Shape::new("solo", 16 * GIB, 60, 1800).reads(3 * GIB),
        Shape::new("pair", 2 * GIB, 30, 600).count(2).reads(GIB / 3),
    ]);
    let plan = plan(&fleet, &Options::default());
    let gateway: Gateway = toml::from_str(plan.gateway_toml()).expect("valid TOML");
    let ids: Vec<&str> = gateway.tenant.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(ids, ["solo", "pair-1", "pair-2"]);
    for (entry, t) in gateway
        .tenant
        .iter()
        .zip([0, 1, 1].map(|i| &plan.tenants[i]))
    {
        let need = t.with_node_absorption.shared_bandwidth;
        let reserved = entry.reservation.bytes_per_sec();
        assert!(
            reserved >= need && reserved <= need * 1.01,
            "{}: {reserved} vs {need}",
            entry.id
        );
        assert!(entry.limit.bytes_per_sec() >= t.peak + t.read_bandwidth);
        assert_eq!(entry.weight, (reserved / (1024.0 * 1024.0)).round() as u64);
    }
}
