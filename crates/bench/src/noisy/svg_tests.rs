//! The noisy-neighbour figure ([`super::svg`]) against small reports built by hand.

use std::path::PathBuf;
use std::time::Duration;

use super::*;

/// A scenario whose victim saw `n` latencies of 10 ms and up.
fn scenario(name: &str, n: u32) -> Scenario {
    let mut latencies = Latencies::default();
    for k in 1..=n {
        latencies.record(Duration::from_millis(10 * u64::from(k)));
    }
    Scenario {
        name: name.to_owned(),
        victim_p50_s: 0.1,
        victim_p99_s: 0.2,
        victim_p999_s: 0.2,
        victim_p99_vs_solo: 1.0,
        victim_requests: n as usize,
        victim_errors: 0,
        victim_throughput_bps: 32.0 * MIB,
        victim_target_bps: 32.0 * MIB,
        aggressor_stall_s: None,
        aggressor_bytes: 0,
        tier_utilization: 0.9,
        drain_completion_s: None,
        local_utilization: None,
        scrub_bps: None,
        reconverge_s: None,
        latencies,
    }
}

fn report(scenarios: Vec<Scenario>, skipped: Vec<Skipped>) -> Report {
    Report {
        seed: 3,
        config: Config::default_run(3, PathBuf::new(), PathBuf::new()),
        scenarios,
        skipped,
    }
}

/// Each line's stroke: its colour and dashes.
fn strokes(svg: &str) -> Vec<&str> {
    svg.lines()
        .filter(|l| l.starts_with("<polyline"))
        .map(|l| {
            let from = l.find("stroke=").expect("a stroke");
            &l[from..l.find(" stroke-width").expect("a width")]
        })
        .collect()
}

#[test]
fn every_scenario_has_a_line_of_its_own_and_two_gateways_its_reconverge_s() {
    let mut scenarios: Vec<Scenario> = [
        "solo",
        "fifo",
        "rate_limit",
        "dmclock",
        "dmclock_agent",
        "dmclock_scrub",
        "solo_scrub",
        "node_solo",
        "node_fifo",
        "node_dmclock",
        gateways::UNCOORDINATED,
        gateways::COORDINATED,
    ]
    .iter()
    .map(|name| scenario(name, 20))
    .collect();
    scenarios[11].reconverge_s = Some(Some(1.234));
    let mut r = report(scenarios, Vec::new());
    let svg = svg(&r);
    let lines = strokes(&svg);
    assert_eq!(lines.len(), 12, "{svg}");
    let distinct: std::collections::HashSet<&str> = lines.iter().copied().collect();
    assert_eq!(distinct.len(), 12, "two lines look alike: {lines:?}");
    assert!(
        svg.contains(">two_gateways_uncoordinated (p99 200ms)</text>"),
        "{svg}"
    );
    assert!(svg.contains(">two_gateways (p99 200ms)</text>"), "{svg}");
    assert!(
        svg.contains(">two_gateways: re-converged in 1.23 s<title>"),
        "{svg}"
    );
    assert!(!svg.contains("skipped"), "{svg}");
    r.scenarios[11].reconverge_s = Some(None);
    let svg = super::svg(&r);
    assert!(
        svg.contains(">two_gateways: no re-convergence in 10 s<title>"),
        "{svg}"
    );
}

#[test]
fn a_skipped_scenario_is_listed_as_skipped_with_its_reason_and_drawn_nowhere() {
    let skipped = [gateways::UNCOORDINATED, gateways::COORDINATED]
        .map(|name| Skipped {
            name: name.to_owned(),
            reason: "no PostgreSQL <here> & now".to_owned(),
        })
        .to_vec();
    let svg = svg(&report(vec![scenario("solo", 20)], skipped));
    assert_eq!(strokes(&svg).len(), 1, "{svg}");
    for name in [gateways::UNCOORDINATED, gateways::COORDINATED] {
        let entry = format!(">{name}: skipped<title>no PostgreSQL &lt;here&gt; &amp; now</title>");
        assert!(svg.contains(&entry), "{svg}");
        assert!(!svg.contains(&format!(">{name} (p99")), "{svg}");
    }
}
