//! The JSON contract, the text report and the SVG chart.

use super::{GIB, Shape, fleet};
use crate::{Options, SimulateOptions, plan};

fn example() -> crate::Plan {
    let text = include_str!("../../../../examples/plan.toml");
    let options = Options {
        capacity: None,
        simulate: Some(SimulateOptions {
            samples: 20_000,
            seed: 1,
        }),
    };
    plan(&crate::parse(text).expect("valid"), &options)
}

#[test]
fn json_carries_the_contract_keys_in_bytes_per_second() {
    let plan = example();
    let json = serde_json::to_value(&plan).expect("serialises");
    for key in ["sum_of_averages", "sum_of_peaks"] {
        assert!(json[key].as_f64().is_some_and(|v| v > 0.0), "{key}");
    }
    for key in ["p50", "p99", "p99.9", "p99.99"] {
        assert!(
            json["percentiles"][key].as_f64().is_some(),
            "percentiles.{key}"
        );
    }
    assert_eq!(json["target"]["percentile"].as_f64(), Some(0.999));
    assert_eq!(
        json["target"]["bandwidth"].as_f64(),
        Some(plan.percentiles.p99_9)
    );
    assert!(
        json["with_node_absorption"]["shared_bandwidth"]
            .as_f64()
            .is_some()
    );
    assert!(
        json["with_node_absorption"]["local_buffer_per_node"]
            .as_u64()
            .is_some()
    );
    let tenants = json["tenants"].as_array().expect("tenants");
    assert_eq!(tenants.len(), 5);
    assert_eq!(tenants[1]["name"], "llama-70b");
    assert_eq!(tenants[1]["peak"].as_f64(), Some(16.0 * GIB as f64));
    assert_eq!(tenants[3]["phase"].as_f64(), Some(0.0));
    assert_eq!(tenants[0]["phase"], "random");
}

#[test]
fn the_report_states_every_section() {
    let plan = example();
    let text = crate::report::render(&plan, "examples/plan.toml");
    for needle in [
        "sum of averages",
        "sum of peaks",
        "p99.99",
        "target 99.9%",
        "shared tier needs",
        "FAILURE MODE: 10 tenants with fixed phases (mistral-7b-sweep, qwen-32b)",
        "pass  drain time < interval",
        "pass  local buffers fit local_capacity",
        "pass  reservations fit the capacity",
        "id = \"llama-8b-16\"",
        "seed 1",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in\n{text}");
    }
}

#[test]
fn the_chart_marks_the_target_and_the_reference_lines() {
    let plan = example();
    let svg = crate::chart::svg(&plan);
    assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
    assert!(svg.trim_end().ends_with("</svg>"));
    for needle in [
        "target p99.9:",
        "sum of averages",
        "sum of peaks",
        "with absorption",
        "capacity",
        "<polyline",
        "aggregate demand x (GiB/s)",
        "P(demand &gt; x)",
    ] {
        assert!(svg.contains(needle), "missing {needle:?}");
    }
    // Every element opened is closed or self-closing.
    let opened = svg.matches("<text").count();
    assert_eq!(opened, svg.matches("</text>").count());
}

#[test]
fn the_chart_keeps_a_far_sum_of_peaks_off_scale() {
    // 200 tenants rarely bursting: the sum of peaks is far right of every percentile.
    let plan = plan(
        &fleet(&[Shape::new("t", GIB, 10, 3600).count(200)]),
        &Options::default(),
    );
    let svg = crate::chart::svg(&plan);
    assert!(svg.contains("→ (off scale)"), "{svg}");
}
