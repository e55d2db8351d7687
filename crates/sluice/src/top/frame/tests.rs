use std::collections::BTreeMap;
use std::fmt::Write as _;

use sluice_gateway::cluster::{GatewayView, TenantView, View};

use super::*;

const MIB: f64 = 1024.0 * 1024.0;

/// One gateway's `/metrics` with these per-tenant counters and gauges.
fn metrics(tier: Option<f64>, tenants: &[(&str, Counters)]) -> Exposition {
    let mut text = String::new();
    if let Some(c) = tier {
        let _ = writeln!(text, "{} {c}\n{} {c}", series::TIER, series::CAPACITY);
    }
    for (t, c) in tenants {
        let _ = write!(
            text,
            "{r}{{tenant=\"{t}\"}} {}\n{s}{{tenant=\"{t}\"}} {}\n\
             {q}{{tenant=\"{t}\",op=\"GetObject\",outcome=\"ok\"}} {}\n\
             {th}{{tenant=\"{t}\"}} {}\n{ws}{{tenant=\"{t}\"}} {}\n{wc}{{tenant=\"{t}\"}} {}\n\
             {sc}{{tenant=\"{t}\"}} {}\n{qu}{{tenant=\"{t}\"}} {}\n{w}{{tenant=\"{t}\"}} {}\n\
             {l}{{tenant=\"{t}\"}} {}\n{res}{{tenant=\"{t}\"}} 0\n",
            c.received,
            c.sent,
            c.ops,
            c.slowdowns,
            c.wait_sum,
            c.wait_count,
            c.received + c.sent,
            c.queued,
            c.weight,
            c.limit.map_or("+Inf".to_owned(), |l| l.to_string()),
            r = series::RECEIVED,
            s = series::SENT,
            q = series::REQUESTS,
            th = series::THROTTLED,
            ws = series::WAIT_SUM,
            wc = series::WAIT_COUNT,
            sc = series::SERVED_COST,
            qu = series::QUEUED,
            w = series::WEIGHT,
            l = series::LIMIT,
            res = series::RESERVATION,
        );
    }
    Exposition::parse(&text)
}

#[derive(Clone, Copy)]
struct Counters {
    received: f64,
    sent: f64,
    ops: f64,
    slowdowns: f64,
    wait_sum: f64,
    wait_count: f64,
    queued: u64,
    weight: f64,
    limit: Option<f64>,
}

impl Counters {
    fn new(weight: f64) -> Self {
        Self {
            received: 0.0,
            sent: 0.0,
            ops: 0.0,
            slowdowns: 0.0,
            wait_sum: 0.0,
            wait_count: 0.0,
            queued: 0,
            weight,
            limit: None,
        }
    }
}

fn gateway(control: &str, m: Exposition) -> GatewaySample {
    GatewaySample {
        control: control.to_owned(),
        metrics: Ok(m),
        cluster: None,
    }
}

#[test]
fn rates_are_counter_differences_over_the_interval_summed_over_gateways() {
    let a0 = Counters::new(1.0);
    let b0 = Counters::new(3.0);
    // Over 2 s: alice writes 20 MiB through g1; bob reads 30 MiB through g1 and 10 MiB
    // through g2, 40 GETs in all.
    let a1 = Counters {
        received: 20.0 * MIB,
        ops: 10.0,
        ..a0
    };
    let b1 = Counters {
        sent: 30.0 * MIB,
        ops: 30.0,
        ..b0
    };
    let b2 = Counters {
        sent: 10.0 * MIB,
        ops: 10.0,
        ..b0
    };
    let prev = Sample {
        at: 5.0,
        gateways: vec![
            gateway(
                "g1:1",
                metrics(Some(64.0 * MIB), &[("alice", a0), ("bob", b0)]),
            ),
            gateway("g2:1", metrics(Some(64.0 * MIB), &[("bob", b0)])),
        ],
        agents: vec![],
    };
    let cur = Sample {
        at: 7.0,
        gateways: vec![
            gateway(
                "g1:1",
                metrics(Some(64.0 * MIB), &[("alice", a1), ("bob", b1)]),
            ),
            gateway("g2:1", metrics(Some(64.0 * MIB), &[("bob", b2)])),
        ],
        agents: vec![],
    };
    let f = frame(Some(&prev), &cur);
    assert!((f.interval_seconds - 2.0).abs() < 1e-9);
    let alice = &f.tenants[0];
    let bob = &f.tenants[1];
    assert_eq!(
        (alice.tenant.as_str(), bob.tenant.as_str()),
        ("alice", "bob")
    );
    assert!((alice.bytes_per_second - 10.0 * MIB).abs() < 1.0);
    assert!((alice.write_bytes_per_second - 10.0 * MIB).abs() < 1.0);
    assert!((alice.ops_per_second - 5.0).abs() < 1e-9);
    assert!((bob.bytes_per_second - 20.0 * MIB).abs() < 1.0);
    assert!((bob.read_bytes_per_second - 20.0 * MIB).abs() < 1.0);
    assert!((bob.ops_per_second - 20.0).abs() < 1e-9);
    // The split: 15 MiB/s at g1, 5 at g2.
    let split: Vec<(&str, f64)> = bob
        .gateways
        .iter()
        .map(|g| (g.gateway.as_str(), g.bytes_per_second / MIB))
        .collect();
    assert_eq!(split.len(), 2);
    assert_eq!(split[0].0, "g1:1");
    assert!((split[0].1 - 15.0).abs() < 1e-6 && (split[1].1 - 5.0).abs() < 1e-6);
    // Both active: weights 1:3 of the 64 MiB/s tier.
    assert!((alice.weight_share_bps.unwrap_or(0.0) - 16.0 * MIB).abs() < 1.0);
    assert!((bob.weight_share_bps.unwrap_or(0.0) - 48.0 * MIB).abs() < 1.0);
    assert!((f.tier_bytes_per_second - 30.0 * MIB).abs() < 1.0);
    assert_eq!(f.tier_capacity_bps, Some(64.0 * MIB));
    // Nobody waited: nobody is held back.
    assert_eq!((alice.held_back, bob.held_back), (None, None));
    let g1 = &f.gateways[0];
    assert!((g1.bytes_per_second - 25.0 * MIB).abs() < 1.0);
}

#[test]
fn one_sample_has_no_rates_and_a_reset_counter_gives_none_this_interval() {
    let c = Counters {
        sent: 100.0 * MIB,
        ..Counters::new(1.0)
    };
    let only = Sample {
        at: 1.0,
        gateways: vec![gateway("g:1", metrics(None, &[("alice", c)]))],
        agents: vec![],
    };
    let f = frame(None, &only);
    assert!(f.interval_seconds.abs() < f64::EPSILON);
    assert!(f.tenants[0].bytes_per_second.abs() < f64::EPSILON);
    // The gateway restarted: its counter fell from 100 MiB to 1 MiB.
    let restarted = Sample {
        at: 2.0,
        gateways: vec![gateway(
            "g:1",
            metrics(None, &[("alice", Counters { sent: MIB, ..c })]),
        )],
        agents: vec![],
    };
    let f = frame(Some(&only), &restarted);
    assert!(f.tenants[0].bytes_per_second.abs() < f64::EPSILON);
    assert_eq!(f.tier_capacity_bps, None);
    assert_eq!(f.tenants[0].weight_share_bps, None);
}

#[test]
fn a_waiting_tenant_is_held_back_at_its_limit_or_by_a_full_tier() {
    let tier = 64.0 * MIB;
    let capped0 = Counters {
        limit: Some(16.0 * MIB),
        ..Counters::new(1.0)
    };
    let free0 = Counters::new(1.0);
    let idle0 = Counters::new(1.0);
    // Over 1 s: capped moves 15.5 MiB (≥ 90% of its 16 MiB/s limit) with 3 queued; free
    // moves 48 MiB with grains waiting 20 ms on average; the tier is at 63.5 of 64 MiB/s.
    let capped1 = Counters {
        sent: 15.5 * MIB,
        queued: 3,
        ..capped0
    };
    let free1 = Counters {
        sent: 48.0 * MIB,
        wait_sum: 2.0,
        wait_count: 100.0,
        ..free0
    };
    let idle1 = Counters { ops: 1.0, ..idle0 };
    let s = |at, c: Counters, f: Counters, i: Counters| Sample {
        at,
        gateways: vec![gateway(
            "g:1",
            metrics(Some(tier), &[("capped", c), ("free", f), ("idle", i)]),
        )],
        agents: vec![],
    };
    let f = frame(
        Some(&s(0.0, capped0, free0, idle0)),
        &s(1.0, capped1, free1, idle1),
    );
    let row = |t: &str| {
        f.tenants
            .iter()
            .find(|r| r.tenant == t)
            .cloned()
            .unwrap_or_default()
    };
    assert_eq!(row("capped").held_back, Some(HeldBack::AtLimit));
    assert_eq!(row("capped").queued, 3);
    assert_eq!(row("free").held_back, Some(HeldBack::TierFull));
    assert!((row("free").queue_wait_ms.unwrap_or(0.0) - 20.0).abs() < 1e-9);
    assert_eq!(row("idle").held_back, None);
    // The same waits on a tier at half its capacity: queued, neither full nor at a limit.
    let half = |at, f: Counters| Sample {
        at,
        gateways: vec![gateway("g:1", metrics(Some(tier), &[("free", f)]))],
        agents: vec![],
    };
    let f = frame(
        Some(&half(0.0, free0)),
        &half(
            1.0,
            Counters {
                sent: 32.0 * MIB,
                slowdowns: 2.0,
                ..free0
            },
        ),
    );
    assert_eq!(f.tenants[0].held_back, Some(HeldBack::Queued));
    assert_eq!(f.tenants[0].slowdowns, 2);
}

#[test]
fn the_cluster_view_gives_each_gateways_share_and_an_unreachable_one_is_shown() {
    let c0 = Counters::new(1.0);
    let mut tenants = BTreeMap::new();
    tenants.insert(
        "alice".to_owned(),
        TenantView {
            reservation_bps: MIB,
            weight: 1.0,
            limit_bps: Some(4.0 * MIB),
            demand_bps: 0.0,
            served_bps: 0.0,
        },
    );
    let view = View {
        coordinator: Some("g".into()),
        updated_ms: 0,
        fallback: false,
        gateways: vec![GatewayView {
            id: "s3".into(),
            s3: "http://127.0.0.1:9000".into(),
            control: "http://127.0.0.1:9100".into(),
            capacity_bps: 32.0 * MIB,
            age_ms: 0,
            tenants,
        }],
    };
    let cur = Sample {
        at: 1.0,
        gateways: vec![
            GatewaySample {
                control: "127.0.0.1:9100".into(),
                metrics: Ok(metrics(Some(64.0 * MIB), &[("alice", c0)])),
                cluster: Some(view),
            },
            GatewaySample {
                control: "127.0.0.1:9200".into(),
                metrics: Err("Connection refused".into()),
                cluster: None,
            },
        ],
        agents: vec![],
    };
    let f = frame(None, &cur);
    let at = &f.tenants[0].gateways[0];
    assert_eq!(at.reservation_bps, Some(MIB));
    assert_eq!(at.limit_bps, Some(4.0 * MIB));
    assert_eq!(f.gateways[1].error.as_deref(), Some("Connection refused"));
}

#[test]
fn agents_lag_is_summed_over_agents_with_the_oldest_age() {
    let status = |pending: u64, age: Option<f64>| AgentStatus {
        tenants: vec![AgentTenantStatus {
            tenant: "alice".into(),
            pending_bytes: pending,
            pending_ops: 1,
            drain_rate_bytes_per_second: 1000.0,
            oldest_pending_age_seconds: age,
        }],
    };
    let agent = |addr: &str, s: AgentStatus| AgentSample {
        status: addr.into(),
        report: Ok(s),
        metrics: None,
    };
    let cur = Sample {
        at: 1.0,
        gateways: vec![],
        agents: vec![
            agent("n1:1", status(100, Some(2.0))),
            agent("n2:1", status(50, Some(7.5))),
            AgentSample {
                status: "n3:1".into(),
                report: Err("timed out".into()),
                metrics: None,
            },
        ],
    };
    let f = frame(None, &cur);
    let lag = f.tenants[0].lag.clone().unwrap_or_default();
    assert_eq!((lag.pending_bytes, lag.pending_ops), (150, 2));
    assert_eq!(lag.oldest_pending_age_seconds, Some(7.5));
    assert!((lag.drain_bytes_per_second - 2000.0).abs() < 1e-9);
    assert_eq!(f.agents.len(), 3);
    assert_eq!(f.agents[2].error.as_deref(), Some("timed out"));
}
