//! The renderer against small reports written by hand in the shapes the benchmarks write, and
//! against the benchmarks' own report types serialized.

use super::*;

fn source(path: &str, json: Option<&str>) -> Source {
    Source {
        path: path.to_owned(),
        json: json.map(|j| serde_json::from_str(j).expect("test JSON")),
    }
}

fn none() -> Inputs {
    Inputs {
        gateway: source("docs/bench/gateway.json", None),
        agent: source("docs/bench/agent.json", None),
        noisy: source("docs/bench/noisy-neighbor.json", None),
    }
}

/// What `sluice bench gateway --weed none --json` writes, cut to two targets and two rounds.
const GATEWAY_JSON: &str = r#"{
  "config": {"large_objects": 80, "large_size": 67108864, "large_concurrency": 4,
             "large_slice": 8, "small_objects": 4000, "small_size": 4096,
             "small_concurrency": 16, "rounds": 2},
  "bytes_moved_per_target": 10737418240,
  "targets": [
    {"name": "filesystem", "put_mib_s": 700.0, "get_mib_s": 1250.0,
     "small_put_ops_s": 12000.4, "small_get_ops_s": 35000.0,
     "small_put_p50_s": 0.00104, "small_put_p99_s": 0.0021, "small_put_p999_s": 0.0312,
     "small_get_p99_s": 0.0009,
     "rss_start_bytes": null, "rss_peak_bytes": null, "rss_end_bytes": null,
     "cold_reads": true,
     "rounds": [[690.0, 1200.0, 11000.0, 34000.0], [710.0, 1300.0, 13000.0, 36000.0]],
     "large_get_slices_s": [[0.2, 0.4], [0.3]]},
    {"name": "sluice gateway", "put_mib_s": 1050.0, "get_mib_s": 1125.0,
     "small_put_ops_s": 4500.0, "small_get_ops_s": 16000.0,
     "small_put_p50_s": 0.0031, "small_put_p99_s": 0.0072, "small_put_p999_s": 0.0104,
     "small_get_p99_s": null,
     "rss_start_bytes": 10485760, "rss_peak_bytes": 136314880, "rss_end_bytes": 104857600,
     "cold_reads": true,
     "rounds": [[1000.0, 1100.0, 4400.0, 15000.0], [1100.0, 1150.0, 4600.0, 17000.0]],
     "large_get_slices_s": [[0.25, 0.4], [0.5]]}
  ]
}"#;

/// What `sluice bench agent --rounds 3 --json` writes; rounds listed out of order.
const AGENT_JSON: &str = r#"{
  "objects": 16, "size_bytes": 268435456, "drain_rate_bytes_per_s": 67108864.0,
  "page_cache_dropped": true,
  "direct": {"rounds": [{"round": 2, "seconds": 3.0, "cpu_s_per_gib": 0.5},
                        {"round": 0, "seconds": 2.5, "cpu_s_per_gib": 0.4},
                        {"round": 1, "seconds": 2.0, "cpu_s_per_gib": 0.3}],
             "median_s": 2.5, "fastest_s": 2.0},
  "o_direct": {"rounds": [{"round": 0, "seconds": 1.8, "cpu_s_per_gib": 0.2},
                          {"round": 1, "seconds": 1.7, "cpu_s_per_gib": 0.2},
                          {"round": 2, "seconds": 1.9, "cpu_s_per_gib": 0.2}],
               "median_s": 1.8, "fastest_s": 1.7},
  "agent": {"rounds": [{"round": 0, "seconds": 2.3, "cpu_s_per_gib": 0.9},
                       {"round": 1, "seconds": 2.4, "cpu_s_per_gib": null},
                       {"round": 2, "seconds": 2.2, "cpu_s_per_gib": 1.0}],
            "median_s": 2.3, "fastest_s": 2.2},
  "ratio_median": 0.92, "ratio_fastest": 1.1,
  "ratio_median_o_direct": 1.2777, "ratio_fastest_o_direct": 1.2941
}"#;

/// What `sluice bench noisy-neighbor --seed 7 --json` writes, cut to two scenarios.
const NOISY_JSON: &str = r#"{
  "seed": 7,
  "config": {"seed": 7, "seconds": 24.0, "tier_bandwidth_bps": 104857600.0,
             "tier_ops": 8000.0, "victim_shard_bytes": 16777216, "victim_shards": 8,
             "victim_rate_per_s": 2.0, "victim_reservation_bps": 41943040.0,
             "victim_weight": 20.0, "aggressor_streams": 8,
             "aggressor_object_bytes": 134217728, "aggressor_interval_s": 12.0,
             "aggressor_limit_bps": 62914560.0, "agent_drain_rate_bps": 62914560.0,
             "drain_wait_s": 30.0, "grain_bytes": 262144,
             "node": {"local_bandwidth_bps": 104857600.0, "local_ops": 8000.0}},
  "scenarios": [
    {"name": "solo", "victim_p50_s": 0.17842775, "victim_p99_s": 0.184214679,
     "victim_p999_s": 0.184214679, "victim_p99_vs_solo": 1.0, "victim_requests": 48,
     "victim_errors": 0, "victim_throughput_bps": 33554432.0,
     "victim_target_bps": 33554432.0, "aggressor_stall_s": null, "aggressor_bytes": 0,
     "tier_utilization": 0.324, "drain_completion_s": null},
    {"name": "fifo", "victim_p50_s": 1.960873818, "victim_p99_s": 2.076771698,
     "victim_p999_s": 2.076771698, "victim_p99_vs_solo": 11.27364935994053,
     "victim_requests": 48, "victim_errors": 1, "victim_throughput_bps": 31638454.58,
     "victim_target_bps": 33554432.0, "aggressor_stall_s": 15.025459371,
     "aggressor_bytes": 1073741824, "tier_utilization": 1.0232752754583732,
     "drain_completion_s": 15.025459371},
    {"name": "node_dmclock", "victim_p50_s": 0.18, "victim_p99_s": 0.19,
     "victim_p999_s": 0.19, "victim_p99_vs_solo": 1.05, "victim_requests": 48,
     "victim_errors": 0, "victim_throughput_bps": 33554432.0,
     "victim_target_bps": 33554432.0, "aggressor_stall_s": 14.0,
     "aggressor_bytes": 1073741824, "tier_utilization": null,
     "drain_completion_s": null, "local_utilization": 0.912}
  ]
}"#;

fn section<'a>(sections: &'a [(&str, String)], name: &str) -> &'a str {
    sections
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, s)| s.as_str())
        .expect("section rendered")
}

#[test]
fn the_gateway_table_has_a_row_per_target_with_ratios_to_the_filesystem() {
    let mut inputs = none();
    inputs.gateway = source("docs/bench/gateway.json", Some(GATEWAY_JSON));
    let figures = figures(&inputs).expect("renders");
    let md = section(&figures, GATEWAY);
    let command = "`target/release/sluice bench gateway --weed none --postgres none --json \
         docs/bench/gateway.json`";
    assert!(md.starts_with(command), "{md}");
    assert!(md.contains("80 × 64 MiB objects (4 in flight)"), "{md}");
    assert!(
        md.contains("(10 GiB through each target per round)"),
        "{md}"
    );
    assert!(md.contains("reads came from the disk"), "{md}");
    let fs = "| filesystem | 700 | 100% | 1,250 | 100% | – | 12,000 | 35,000 | \
              1.04 ms / 2.10 ms / 31.2 ms | 0.90 ms | – |";
    assert!(md.contains(fs), "{md}");
    // Slices paired: 0.2/0.25, 0.4/0.4, 0.3/0.5 → 0.8, 1.0, 0.6 → quartiles 70/80/90%.
    let gw = "| sluice gateway | 1,050 | 150% | 1,125 | 90% | 70% / 80% / 90% | 4,500 | 16,000 | \
              3.10 ms / 7.20 ms / 10.4 ms | – | 10 / 130 MiB |";
    assert!(md.contains(gw), "{md}");
    let rounds =
        "| sluice gateway | 1,000 / 1,100, 4,400 / 15,000 | 1,100 / 1,150, 4,600 / 17,000 |";
    assert!(md.contains(rounds), "{md}");
    let readme = summary(&inputs).expect("renders");
    let row = "| sluice gateway | 1,050 (150%) | 1,125 (90%) | 4,500 | 16,000 | 130 MiB |";
    assert!(readme.contains(row), "{readme}");
}

#[test]
fn the_command_names_the_preset_the_report_was_run_with() {
    let mut json: Value = serde_json::from_str(GATEWAY_JSON).expect("test JSON");
    json["config"] = serde_json::from_str(
        r#"{"large_objects": 8, "large_size": 67108864, "large_concurrency": 4,
            "large_slice": 4, "small_objects": 400, "small_size": 4096,
            "small_concurrency": 16, "rounds": 1}"#,
    )
    .expect("test JSON");
    json["targets"][1]["name"] = Value::from("SeaweedFS");
    let r: GatewayReport = serde_json::from_value(json).expect("parses");
    assert_eq!(
        gateway_command(&r, "g.json"),
        "target/release/sluice bench gateway --quick --postgres none --json g.json"
    );
    let a: AgentReport = serde_json::from_str(AGENT_JSON).expect("parses");
    assert_eq!(
        agent_command(&a, "a.json"),
        "target/release/sluice bench agent --objects 16 --size 256MiB --drain-rate 64MiB/s \
         --rounds 3 --json a.json"
    );
}

#[test]
fn the_agent_table_lists_rounds_in_order_and_the_ratios() {
    let mut inputs = none();
    inputs.agent = source("docs/bench/agent.json", Some(AGENT_JSON));
    let figures = figures(&inputs).expect("renders");
    let md = section(&figures, AGENT);
    assert!(
        md.contains("a burst of 16 × 256 MiB (4 GiB) concurrent PUTs"),
        "{md}"
    );
    assert!(md.contains("its drain running at 64 MiB/s"), "{md}");
    // 4 GiB in 2.5 s is 1,638 MiB/s.
    let direct =
        "| direct write + fsync | 2.50 / 2.00 / 3.00 | 2.50 s | 2.00 s | 1,638 | 0.30–0.50 |";
    assert!(md.contains(direct), "{md}");
    let o_direct =
        "| `O_DIRECT` write + fsync | 1.80 / 1.70 / 1.90 | 1.80 s | 1.70 s | 2,276 | 0.20 |";
    assert!(md.contains(o_direct), "{md}");
    // A round whose CPU time was not measured is left out of the range.
    let agent = "| through the agent | 2.30 / 2.40 / 2.20 | 2.30 s | 2.20 s | 1,781 | 0.90–1.00 |";
    assert!(md.contains(agent), "{md}");
    assert!(
        md.contains("| agent / direct write + fsync | 0.920 | 1.100 |"),
        "{md}"
    );
    assert!(
        md.contains("| agent / `O_DIRECT` write + fsync | 1.278 | 1.294 |"),
        "{md}"
    );
    let readme = summary(&inputs).expect("renders");
    assert!(
        readme.contains("| direct write + fsync | 2.50 s | 0.92 |"),
        "{readme}"
    );
    assert!(
        readme.contains("| through the agent | 2.30 s | – |"),
        "{readme}"
    );
}

#[test]
fn the_noisy_neighbour_table_has_a_row_per_scenario() {
    let mut inputs = none();
    inputs.noisy = source("docs/bench/noisy-neighbor.json", Some(NOISY_JSON));
    let figures = figures(&inputs).expect("renders");
    let md = section(&figures, NOISY);
    let command = "`target/release/sluice bench noisy-neighbor --seed 7 --json \
                   docs/bench/noisy-neighbor.json --svg docs/bench/noisy-neighbor.svg`";
    assert!(md.starts_with(command), "{md}");
    assert!(
        md.contains("a shared tier of 100 MiB/s and 8,000 ops/s"),
        "{md}"
    );
    assert!(md.contains("8 × 128 MiB (1 GiB)"), "{md}");
    let solo =
        "| solo | 178.4 ms | 184.2 ms | 184.2 ms | 1.00× | 32.0 (32) | 48 (0) | – | – | 32% | – |";
    assert!(md.contains(solo), "{md}");
    let fifo = "| fifo | 1,961 ms | 2,077 ms | 2,077 ms | 11.27× | 30.2 (32) | 48 (1) | 15.0 s | \
                15.0 s | 102% | – |";
    assert!(md.contains(fifo), "{md}");
    // A node scenario: the local device's use, no tier's.
    let node = "| node_dmclock | 180.0 ms | 190.0 ms | 190.0 ms | 1.05× | 32.0 (32) | 48 (0) | \
                14.0 s | – | – | 91% |";
    assert!(md.contains(node), "{md}");
    assert!(
        md.contains("an emulated device of 100 MiB/s and 8,000 ops/s"),
        "{md}"
    );
    let readme = summary(&inputs).expect("renders");
    assert!(
        readme.contains("| fifo | 2,077 ms | 11.27× | 15.0 s | 102% | – |"),
        "{readme}"
    );
}

#[test]
fn a_benchmark_without_a_report_says_how_to_measure_it() {
    let figures = figures(&none()).expect("renders");
    assert_eq!(
        section(&figures, GATEWAY),
        "Not yet measured: run `target/release/sluice bench gateway --json \
         docs/bench/gateway.json`.\n"
    );
    assert!(section(&figures, NOISY).contains("--svg docs/bench/noisy-neighbor.svg"));
    let readme = summary(&none()).expect("renders");
    let agent = "**Node agent.** Not yet measured: run `target/release/sluice bench agent --json \
                 docs/bench/agent.json`.";
    assert!(readme.contains(agent), "{readme}");
    assert!(!readme.contains('|'), "no table without figures: {readme}");
}

#[test]
fn a_report_of_another_shape_is_refused_naming_its_file() {
    let mut inputs = none();
    inputs.agent = source("docs/bench/agent.json", Some(r#"{"objects": 16}"#));
    let err = figures(&inputs).expect_err("must fail").to_string();
    assert!(
        err.starts_with("docs/bench/agent.json: not a `sluice bench agent` report"),
        "{err}"
    );
    assert!(err.contains("size_bytes"), "{err}");
}

#[test]
fn the_real_reports_serialize_to_what_the_renderer_reads() {
    // Built from the benchmarks' own types: a field renamed there breaks this test.
    let target = crate::gateway::TargetResult {
        name: "filesystem".to_owned(),
        put_mib_s: 500.0,
        get_mib_s: 1000.0,
        small_put_ops_s: 10.0,
        small_get_ops_s: 20.0,
        small_put_p50_s: 0.001,
        small_put_p99_s: 0.002,
        small_put_p999_s: 0.003,
        small_get_p99_s: f64::NAN,
        rss_start_bytes: None,
        rss_peak_bytes: None,
        rss_end_bytes: None,
        cold_reads: false,
        rounds: vec![[500.0, 1000.0, 10.0, 20.0]],
        large_get_slices_s: vec![vec![0.5]],
        large_put_slices_s: vec![vec![0.25]],
        client_retries: 0,
    };
    let pg = crate::gateway::TargetResult {
        name: crate::gateway::PG_TARGET.to_owned(),
        ..target.clone()
    };
    let step = |gateways: usize, put: f64| crate::aggregate::Step {
        gateways,
        large_objects: 8,
        large_in_flight: 4 * gateways,
        small_objects: 400 * gateways,
        small_in_flight: 16 * gateways,
        put_mib_s: 500.0,
        get_mib_s: 900.0,
        small_put_ops_s: put,
        small_get_ops_s: 3000.0,
        small_put_p99_s: 0.012,
        small_get_p99_s: 0.002,
        vs_one_gateway: [1.0, 1.0, put / 1000.0, 1.0],
        rounds: vec![[500.0, 900.0, put, 3000.0]],
    };
    let gateway = crate::gateway::Report {
        config: crate::gateway::Config::full(PathBuf::new(), PathBuf::new(), None).quick(),
        bytes_moved_per_target: 1 << 30,
        pg_vs_redb: Some(crate::gateway::Ratios::of(&pg, &target)),
        targets: vec![target, pg],
        postgres: Some("postgres (PostgreSQL) 15.14".to_owned()),
        aggregate: Some(crate::aggregate::Report {
            steps: vec![step(1, 1000.0), step(3, 1500.0)],
            starts: vec![crate::aggregate::Start {
                gateway: 2,
                blobs_before: 1208,
                blobs_after: 1208,
            }],
            rounds: 1,
            cold_reads: false,
        }),
    };
    let noisy = crate::noisy::Report {
        seed: 1,
        config: crate::noisy::Config::default_run(1, PathBuf::new(), PathBuf::new()),
        scenarios: vec![crate::noisy::Scenario {
            name: "dmclock".to_owned(),
            victim_p50_s: 0.1,
            victim_p99_s: 0.2,
            victim_p999_s: 0.3,
            victim_p99_vs_solo: 1.01,
            victim_requests: 48,
            victim_errors: 0,
            victim_throughput_bps: 32.0 * MIB,
            victim_target_bps: 32.0 * MIB,
            aggressor_stall_s: Some(16.0),
            aggressor_bytes: 1 << 30,
            tier_utilization: 0.96,
            drain_completion_s: Some(16.0),
            local_utilization: None,
            scrub_bps: None,
            reconverge_s: None,
            latencies: crate::stats::Latencies::default(),
        }],
        skipped: Vec::new(),
    };
    let mut inputs = none();
    inputs.gateway.json = Some(serde_json::to_value(&gateway).expect("serializes"));
    inputs.noisy.json = Some(serde_json::to_value(&noisy).expect("serializes"));
    let figures = figures(&inputs).expect("renders");
    let md = section(&figures, GATEWAY);
    assert!(
        md.contains("bench gateway --quick --weed none --json"),
        "{md}"
    );
    assert!(
        md.contains(
            "| of the medians | 100% (target ≥ 95%: met) | 100% (target ≥ 95%: met) | 100% \
             (target ≥ 50%: met) | 100% |"
        ),
        "{md}"
    );
    assert!(
        md.contains("(postgres (PostgreSQL) 15.14, fsync on)"),
        "{md}"
    );
    assert!(
        md.contains("| 3 | 12 / 48 | 1,200 | 500 | 900 | 1,500 | 3,000 | 12.0 ms / 2.00 ms | 1.50× / 1.00× |"),
        "{md}"
    );
    assert!(
        md.contains("gateway 2 started on 1,208 blobs and left 1,208"),
        "{md}"
    );
    assert!(md.contains("The page cache was not dropped"), "{md}");
    let row = "| filesystem | 500 | 100% | 1,000 | 100% | – | 10 | 20 | 1.00 ms / 2.00 ms / 3.00 ms | – |";
    assert!(md.contains(row), "{md}");
    let md = section(&figures, NOISY);
    assert!(md.contains("--seed 1 --json"), "{md}");
    assert!(!md.contains("--quick"), "{md}");
    assert!(
        md.contains("| dmclock | 100.0 ms | 200.0 ms | 300.0 ms | 1.01× |"),
        "{md}"
    );
}

#[test]
fn splice_rewrites_only_between_the_markers() {
    let doc = "# Benchmarks\n\nMethod.\n\n<!-- figures:agent:begin -->\nold\n\
               <!-- figures:agent:end -->\n\nMore prose.\n";
    let once = splice(doc, AGENT, "| new |\n").expect("splices");
    assert_eq!(
        once,
        "# Benchmarks\n\nMethod.\n\n<!-- figures:agent:begin -->\n\n| new |\n\n\
         <!-- figures:agent:end -->\n\nMore prose.\n"
    );
    assert_eq!(splice(&once, AGENT, "| new |").expect("splices"), once);
}

#[test]
fn splice_refuses_missing_doubled_or_reversed_markers() {
    let missing = splice("no markers", GATEWAY, "x").expect_err("must fail");
    assert!(missing.to_string().contains("not found"), "{missing}");
    let (b, e) = (begin_marker(GATEWAY), end_marker(GATEWAY));
    let err = splice(&format!("{b}\n{e}\n{b}\n{e}\n"), GATEWAY, "x").expect_err("must fail");
    assert!(err.to_string().contains("more than once"), "{err}");
    let err = splice(&format!("{e}\n{b}\n"), GATEWAY, "x").expect_err("must fail");
    assert!(err.to_string().contains("before its begin"), "{err}");
}

#[test]
fn numbers_read_as_people_write_them() {
    assert_eq!(num(1_234_567.891, 1), "1,234,567.9");
    assert_eq!(num(999.5, 0), "1,000");
    assert_eq!(num(-1234.0, 0), "-1,234");
    assert_eq!(opt(Some(f64::NAN), 1), "–");
    assert_eq!(size_text(4096), "4 KiB");
    assert_eq!(size_text(3 << 29), "1.5 GiB");
    assert_eq!(size_arg(268_435_456), "256MiB");
    assert_eq!(size_arg(1000), "1000B");
    assert_eq!(rate_arg(64.0 * MIB), "64MiB/s");
    assert_eq!(rate_text(100.0 * MIB), "100 MiB/s");
    assert_eq!(ms(Some(0.001_04)), "1.04 ms");
    assert_eq!(ms(Some(1.9609)), "1,961 ms");
}

/// A report with the PostgreSQL-catalog target, its ratios and the aggregate, as
/// `sluice bench gateway --weed none --json` writes it where PostgreSQL is installed.
const GATEWAY_PG_JSON: &str = r#"{
  "config": {"large_objects": 80, "large_size": 67108864, "large_concurrency": 4,
             "large_slice": 8, "small_objects": 4000, "small_size": 4096,
             "small_concurrency": 16, "rounds": 2},
  "bytes_moved_per_target": 10737418240,
  "targets": [
    {"name": "sluice gateway", "put_mib_s": 1000.0, "get_mib_s": 800.0,
     "small_put_ops_s": 2000.0, "small_get_ops_s": 14000.0,
     "small_put_p50_s": 0.008, "small_put_p99_s": 0.017, "small_put_p999_s": 0.026,
     "small_get_p99_s": 0.002, "rss_start_bytes": 10485760, "rss_peak_bytes": 136314880,
     "rss_end_bytes": 104857600, "cold_reads": true,
     "rounds": [[990.0, 790.0, 1900.0, 13000.0], [1010.0, 810.0, 2100.0, 15000.0]]},
    {"name": "sluice gateway (PostgreSQL catalog)", "put_mib_s": 960.0, "get_mib_s": 800.0,
     "small_put_ops_s": 900.0, "small_get_ops_s": 7000.0,
     "small_put_p50_s": 0.016, "small_put_p99_s": 0.03, "small_put_p999_s": 0.05,
     "small_get_p99_s": 0.004, "rss_start_bytes": 10485760, "rss_peak_bytes": 136314880,
     "rss_end_bytes": 104857600, "cold_reads": true,
     "rounds": [[950.0, 780.0, 800.0, 6500.0], [970.0, 820.0, 1000.0, 7500.0]]}
  ],
  "postgres": "postgres (PostgreSQL) 15.14",
  "pg_vs_redb": {"put_mib_s": 0.96, "get_mib_s": 1.0, "small_put_ops_s": 0.45,
                 "small_get_ops_s": 0.5,
                 "rounds": [[0.9596, 0.9873, 0.4211, 0.5], [0.9604, 1.0123, 0.4762, 0.5]]},
  "aggregate": {"rounds": 2, "cold_reads": true,
    "starts": [{"gateway": 2, "blobs_before": 4080, "blobs_after": 4080},
               {"gateway": 3, "blobs_before": 8080, "blobs_after": 8080}],
    "steps": [
      {"gateways": 1, "large_objects": 80, "large_in_flight": 4, "small_objects": 4000,
       "small_in_flight": 16, "put_mib_s": 900.0, "get_mib_s": 800.0,
       "small_put_ops_s": 900.0, "small_get_ops_s": 7000.0, "small_put_p99_s": 0.03,
       "small_get_p99_s": 0.004, "vs_one_gateway": [1.0, 1.0, 1.0, 1.0],
       "rounds": [[900.0, 800.0, 900.0, 7000.0]]},
      {"gateways": 3, "large_objects": 80, "large_in_flight": 12, "small_objects": 12000,
       "small_in_flight": 48, "put_mib_s": 950.0, "get_mib_s": 820.0,
       "small_put_ops_s": 1350.0, "small_get_ops_s": 9000.0, "small_put_p99_s": 0.06,
       "small_get_p99_s": null, "vs_one_gateway": [1.0556, 1.025, 1.5, 1.2857],
       "rounds": [[950.0, 820.0, 1350.0, 9000.0]]}
    ]}
}"#;

#[test]
fn the_postgres_catalog_is_rendered_against_redb_and_the_aggregate_per_gateway_count() {
    let mut inputs = none();
    inputs.gateway = source("docs/bench/gateway.json", Some(GATEWAY_PG_JSON));
    let figures = figures(&inputs).expect("renders");
    let md = section(&figures, GATEWAY);
    // PostgreSQL ran: the command does not skip it.
    assert!(
        md.starts_with("`target/release/sluice bench gateway --weed none --json docs/bench/"),
        "{md}"
    );
    let row = "| sluice gateway (PostgreSQL catalog) | 960 | 96% | 800 | 100% | – | 900 | 7,000 |";
    assert!(md.contains(row), "{md}");
    let ratios = "| of the medians | 96% (target ≥ 95%: met) | 100% (target ≥ 95%: met) | 45% \
                  (target ≥ 50%: not met) | 50% |";
    assert!(md.contains(ratios), "{md}");
    assert!(md.contains("| round 2 | 96% | 101% | 48% | 50% |"), "{md}");
    let one =
        "| 1 | 4 / 16 | 4,000 | 900 | 800 | 900 | 7,000 | 30.0 ms / 4.00 ms | 1.00× / 1.00× |";
    assert!(md.contains(one), "{md}");
    let three =
        "| 3 | 12 / 48 | 12,000 | 950 | 820 | 1,350 | 9,000 | 60.0 ms / – | 1.50× / 1.29× |";
    assert!(md.contains(three), "{md}");
    assert!(
        md.contains("medians of 2 rounds. The page cache was dropped"),
        "{md}"
    );
    assert!(
        md.contains(
            "gateway 2 started on 4,080 blobs and left 4,080; gateway 3 started on 8,080 blobs \
             and left 8,080."
        ),
        "{md}"
    );
    let readme = summary(&inputs).expect("renders");
    assert!(
        readme.contains(
            "PostgreSQL catalog / redb in the same run: 4 KiB PUT 45%, GET 50%; 64 MiB PUT 96%, \
             GET 100%. 3 gateways on one PostgreSQL catalog: 1,350 4 KiB PUT/s (1.50× of one \
             gateway), 820 MiB/s 64 MiB GET."
        ),
        "{readme}"
    );
    let rules = readme.lines().filter(|l| l.starts_with("|---")).count();
    assert_eq!(rules, 1, "one table: {readme}");
}

/// [`NOISY_JSON`] with `scenarios` added and `more` merged into the report.
fn noisy_with(scenarios: &[Value], more: &Value) -> Source {
    let mut json: Value = serde_json::from_str(NOISY_JSON).expect("test JSON");
    let list = json["scenarios"].as_array_mut().expect("scenarios");
    list.extend(scenarios.iter().cloned());
    for (k, v) in more.as_object().expect("an object") {
        json[k] = v.clone();
    }
    Source {
        path: "docs/bench/noisy-neighbor.json".to_owned(),
        json: Some(json),
    }
}

/// A two-gateway scenario as `noisy::gateways` writes it.
fn two_gateway(name: &str, p99: f64, reconverge: Option<Value>) -> Value {
    let mut s = serde_json::json!({
        "name": name, "victim_p50_s": 0.17, "victim_p99_s": p99, "victim_p999_s": p99,
        "victim_p99_vs_solo": p99 / 0.184_214_679, "victim_requests": 48, "victim_errors": 0,
        "victim_throughput_bps": 33_554_432.0, "victim_target_bps": 33_554_432.0,
        "aggressor_stall_s": 16.5, "aggressor_bytes": 1_073_741_824, "tier_utilization": 0.93,
        "drain_completion_s": 16.5,
    });
    if let Some(r) = reconverge {
        s["reconverge_s"] = r;
    }
    s
}

#[test]
fn the_two_gateway_scenarios_have_their_rows_and_reconverge_s_its_sentence() {
    let mut inputs = none();
    inputs.noisy = noisy_with(
        &[
            two_gateway("two_gateways_uncoordinated", 0.5, None),
            two_gateway("two_gateways", 0.2, Some(serde_json::json!(1.234))),
        ],
        &serde_json::json!({}),
    );
    let figures = figures(&inputs).expect("renders");
    let md = section(&figures, NOISY);
    let uncoordinated = "| two_gateways_uncoordinated | 170.0 ms | 500.0 ms | 500.0 ms | 2.71× | \
                         32.0 (32) | 48 (0) | 16.5 s | 16.5 s | 93% | – |";
    assert!(md.contains(uncoordinated), "{md}");
    let coordinated = "| two_gateways | 170.0 ms | 200.0 ms | 200.0 ms | 1.09× | 32.0 (32) | \
                       48 (0) | 16.5 s | 16.5 s | 93% | – |";
    assert!(md.contains(coordinated), "{md}");
    assert!(
        md.contains("two gateways on one PostgreSQL catalog share the tier"),
        "{md}"
    );
    let reconverge = "In `two_gateways` gateway 2 was killed under load: gateway 1 alone moved \
                      85% of the tier 1.23 s later (`reconverge_s`, the time capacity and limits \
                      took to re-converge; bound 2 s: met).";
    assert!(md.contains(reconverge), "{md}");
    // Only the scenario that measured it has the sentence; nothing was skipped.
    assert_eq!(md.matches("reconverge_s").count(), 1, "{md}");
    assert!(!md.contains("skipped"), "{md}");
    assert!(
        !md.contains("--postgres none") && !md.contains("--only"),
        "{md}"
    );
    let readme = summary(&inputs).expect("renders");
    assert!(
        readme.contains("| two_gateways_uncoordinated | 500.0 ms | 2.71× | 16.5 s | 93% | – |"),
        "{readme}"
    );
    assert!(
        readme.contains("| two_gateways | 200.0 ms | 1.09× |"),
        "{readme}"
    );
    assert!(readme.contains(reconverge), "{readme}");

    // Gateway 1 never took the tier over: `null`, said so, not a zero.
    inputs.noisy = noisy_with(
        &[two_gateway("two_gateways", 0.2, Some(Value::Null))],
        &serde_json::json!({}),
    );
    let md = section(&figures_of(&inputs), NOISY).to_owned();
    assert!(
        md.contains(
            "In `two_gateways` gateway 2 was killed under load: gateway 1 alone did not move 85% \
             of the tier within 10 s (`reconverge_s` null: capacity and limits did not \
             re-converge)."
        ),
        "{md}"
    );
    // Later than the bound: not met.
    inputs.noisy = noisy_with(
        &[two_gateway(
            "two_gateways",
            0.2,
            Some(serde_json::json!(3.5)),
        )],
        &serde_json::json!({}),
    );
    let md = section(&figures_of(&inputs), NOISY).to_owned();
    assert!(
        md.contains("3.50 s later") && md.contains("bound 2 s: not met"),
        "{md}"
    );
}

fn figures_of(inputs: &Inputs) -> Vec<(&'static str, String)> {
    figures(inputs).expect("renders")
}

#[test]
fn a_skipped_scenario_is_shown_as_skipped_with_its_reason_never_as_figures() {
    let mut inputs = none();
    let reason = "no PostgreSQL for the two gateways' shared catalog (PostgreSQL not found)";
    inputs.noisy = noisy_with(
        &[],
        &serde_json::json!({"skipped": [
            {"name": "two_gateways_uncoordinated", "reason": reason},
            {"name": "two_gateways"},
        ]}),
    );
    let figures = figures_of(&inputs);
    let md = section(&figures, NOISY);
    assert!(
        md.contains(
            "| two_gateways_uncoordinated | skipped | – | – | – | – | – | – | – | – | – |\n"
        ),
        "{md}"
    );
    assert!(
        md.contains("| two_gateways | skipped | – | – | – | – | – | – | – | – | – |\n"),
        "{md}"
    );
    assert!(
        md.contains(&format!(
            "`two_gateways_uncoordinated` was skipped: {reason}."
        )),
        "{md}"
    );
    // No reason in the report: none made up.
    assert!(md.contains("`two_gateways` was skipped.\n"), "{md}");
    assert!(!md.contains("reconverge_s"), "{md}");
    // The command that reproduces the run skips them too.
    assert!(
        md.starts_with("`target/release/sluice bench noisy-neighbor --postgres none --seed 7 "),
        "{md}"
    );
    let readme = summary(&inputs).expect("renders");
    assert!(
        readme.contains("| two_gateways | skipped | – | – | – | – |\n"),
        "{readme}"
    );
    assert!(readme.contains(reason), "{readme}");

    // `--only`: the command names the scenarios the run was limited to.
    let only = serde_json::json!(["dmclock", "two_gateways"]);
    let mut json = inputs.noisy.json.take().expect("a report");
    json["config"]["only"] = only;
    json["skipped"] = serde_json::json!([{"name": "two_gateways", "reason": "no coordination"}]);
    inputs.noisy.json = Some(json);
    let md = section(&figures_of(&inputs), NOISY).to_owned();
    assert!(
        md.starts_with(
            "`target/release/sluice bench noisy-neighbor --only dmclock,two_gateways --seed 7 "
        ),
        "{md}"
    );
}

#[test]
fn the_noisy_reports_two_gateway_parts_serialize_to_what_the_renderer_reads() {
    // Built from the benchmark's own types: a field renamed there breaks this test.
    let scenario = |name: &str, reconverge_s| crate::noisy::Scenario {
        name: name.to_owned(),
        victim_p50_s: 0.1,
        victim_p99_s: 0.2,
        victim_p999_s: 0.3,
        victim_p99_vs_solo: 1.05,
        victim_requests: 48,
        victim_errors: 0,
        victim_throughput_bps: 32.0 * MIB,
        victim_target_bps: 32.0 * MIB,
        aggressor_stall_s: Some(16.0),
        aggressor_bytes: 1 << 30,
        tier_utilization: 0.9,
        drain_completion_s: Some(16.0),
        local_utilization: None,
        scrub_bps: None,
        reconverge_s,
        latencies: crate::stats::Latencies::default(),
    };
    let mut config = crate::noisy::Config::default_run(1, PathBuf::new(), PathBuf::new());
    config.only = Some(vec!["two_gateways".to_owned()]);
    let noisy = crate::noisy::Report {
        seed: 1,
        config,
        scenarios: vec![
            scenario("solo", None),
            scenario(crate::noisy::gateways::COORDINATED, Some(None)),
        ],
        skipped: vec![crate::noisy::Skipped {
            name: crate::noisy::gateways::UNCOORDINATED.to_owned(),
            reason: format!("no PostgreSQL ({})", crate::postgres::INSTALL_HINT),
        }],
    };
    let mut inputs = none();
    inputs.noisy.json = Some(serde_json::to_value(&noisy).expect("serializes"));
    let md = section(&figures_of(&inputs), NOISY).to_owned();
    assert!(
        md.contains("--only two_gateways --postgres none --seed 1"),
        "{md}"
    );
    assert!(
        md.contains("| two_gateways | 100.0 ms | 200.0 ms |"),
        "{md}"
    );
    assert!(
        md.contains("| two_gateways_uncoordinated | skipped |"),
        "{md}"
    );
    // The reason as written, its glob shown as such, not as the start of emphasis.
    assert!(
        md.contains(
            "`two_gateways_uncoordinated` was skipped: no PostgreSQL (PostgreSQL not found (no \
             initdb and postgres on PATH or under /usr/lib/postgresql/\\*/bin): apt-get install \
             postgresql)."
        ),
        "{md}"
    );
    // `Some(None)` is written as `null`: did not re-converge; `solo` has no sentence.
    assert!(
        md.contains("gateway 1 alone did not move 85% of the tier within 10 s"),
        "{md}"
    );
    assert_eq!(md.matches("was killed under load").count(), 1, "{md}");
}

/// [`AGENT_JSON`] with what `--encrypt` adds: the encrypted series, its ratios and the
/// encryption per core (one round's AEAD speed not measured: null).
fn agent_encrypted_json() -> Value {
    let mut json: Value = serde_json::from_str(AGENT_JSON).expect("test JSON");
    let added: Value = serde_json::from_str(
        r#"{
  "encrypted": {"rounds": [{"round": 1, "seconds": 2.5, "cpu_s_per_gib": 1.2},
                           {"round": 0, "seconds": 2.4, "cpu_s_per_gib": 1.1},
                           {"round": 2, "seconds": 2.3, "cpu_s_per_gib": 1.3}],
                "median_s": 2.4, "fastest_s": 2.3},
  "ratio_median_encrypted": 1.04348, "ratio_fastest_encrypted": 1.04545,
  "encryption": {"segment_size_bytes": 65536,
                 "aead_bytes_per_cpu_s": [3221225472.0, null, 3435973836.8],
                 "aead_median_bytes_per_cpu_s": 3328599654.4,
                 "extra_cpu_s": [0.8, 1.2, 1.2], "extra_cpu_median_s": 1.2,
                 "agent_bytes_per_cpu_s": 3579139413.3, "ratio_per_core": 1.0753}
}"#,
    )
    .expect("test JSON");
    for (k, v) in added.as_object().expect("an object") {
        json[k] = v.clone();
    }
    json
}

#[test]
fn the_agent_table_adds_the_encrypted_agent_and_the_encryption_per_core() {
    let mut inputs = none();
    inputs.agent = Source {
        path: "docs/bench/agent.json".to_owned(),
        json: Some(agent_encrypted_json()),
    };
    let figures = figures(&inputs).expect("renders");
    let md = section(&figures, AGENT);
    assert!(
        md.contains("--rounds 3 --encrypt --json docs/bench/agent.json`"),
        "{md}"
    );
    let row = "| through the agent, encrypted | 2.40 / 2.50 / 2.30 | 2.40 s | 2.30 s | 1,707 | 1.10–1.30 |";
    assert!(md.contains(row), "{md}");
    assert!(
        md.contains("| agent encrypted (`[tenant.encryption]`) / unencrypted | 1.043 | 1.045 |"),
        "{md}"
    );
    // 3,328,599,654.4 B/s is 3,174.4 MiB/s; 3,579,139,413.3 is 3,413.3.
    assert!(
        md.contains("one thread, median of the rounds) | 3,174 MiB/s |"),
        "{md}"
    );
    assert!(
        md.contains("over the unencrypted one (median 1.20 CPU-s more) | 3,413 MiB/s |"),
        "{md}"
    );
    assert!(md.contains("| agent / AES-256-GCM alone | 1.075 |"), "{md}");
    let readme = summary(&inputs).expect("renders");
    assert!(
        readme.contains("| through the agent, encrypted | 2.40 s | – |"),
        "{readme}"
    );
}

#[test]
fn an_encryption_per_core_not_measured_is_a_dash_and_a_report_without_it_has_no_such_rows() {
    let mut json = agent_encrypted_json();
    json["encryption"]["agent_bytes_per_cpu_s"] = Value::Null;
    json["encryption"]["ratio_per_core"] = Value::Null;
    let mut inputs = none();
    inputs.agent = Source {
        path: "a.json".to_owned(),
        json: Some(json),
    };
    let md = section(&figures(&inputs).expect("renders"), AGENT).to_owned();
    assert!(md.contains("CPU-s more) | – |"), "{md}");
    assert!(md.contains("| agent / AES-256-GCM alone | – |"), "{md}");

    inputs.agent = source("a.json", Some(AGENT_JSON));
    let md = section(&figures(&inputs).expect("renders"), AGENT).to_owned();
    for absent in ["encrypt", "AES-256-GCM"] {
        assert!(!md.contains(absent), "{absent}: {md}");
    }
}
