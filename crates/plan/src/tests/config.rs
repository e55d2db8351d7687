//! Bad planning files get errors that name the section, the key and the problem.

use super::{GIB, Shape, file};
use crate::fleet::Phase;

fn error(text: &str) -> String {
    match crate::parse(text) {
        Ok(_) => panic!("accepted a bad file:\n{text}"),
        Err(e) => e.to_string(),
    }
}

fn three_tenants() -> String {
    file(
        &[
            Shape::new("llama-8b", 8 * GIB, 14, 900),
            Shape::new("mistral-7b", 4 * GIB, 23, 600),
            Shape::new("llama-70b", 16 * GIB, 57, 1800),
        ],
        "",
    )
}

/// Replaces the `n`-th (from zero) occurrence of `key = ...` with `key = value`.
fn with(text: &str, n: usize, key: &str, value: &str) -> String {
    let mut seen = 0;
    text.lines()
        .map(|line| {
            if line.starts_with(&format!("{key} =")) {
                seen += 1;
                if seen == n + 1 {
                    return format!("{key} = {value}");
                }
            }
            line.to_owned()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_example_file_parses() {
    let text = include_str!("../../../../examples/plan.toml");
    let fleet = crate::parse(text).expect("examples/plan.toml is valid");
    assert_eq!(fleet.tenants().len(), 5);
    assert_eq!(fleet.tenant_count(), 31);
    assert_eq!(fleet.target_percentile(), 0.999);
    assert_eq!(
        fleet.tenants()[3].phase(),
        Phase::Fixed(std::time::Duration::ZERO)
    );
}

#[test]
fn a_bad_unit_names_the_tenant_and_the_key() {
    let text = with(&three_tenants(), 2, "interval", "\"30 fortnights\"");
    let e = error(&text);
    assert!(
        e.starts_with("tenant[2] \"llama-70b\": interval: unknown unit \"fortnights\""),
        "{e}"
    );
}

#[test]
fn a_misspelt_key_is_refused_not_ignored() {
    let text = three_tenants().replacen("read_bandwidth", "read_bandwidht", 2);
    let e = error(&text);
    assert!(
        e.starts_with("tenant[0] \"llama-8b\": unknown field `read_bandwidht`"),
        "{e}"
    );
    let e = error(&format!(
        "[shared_tier]\npercentil = 0.99\n{}",
        three_tenants()
    ));
    assert!(
        e.starts_with("shared_tier: unknown field `percentil`"),
        "{e}"
    );
    let e = error(&format!("{}\n[gateway]\nx = 1\n", three_tenants()));
    assert!(e.starts_with("file: unknown field `gateway`"), "{e}");
}

#[test]
fn a_missing_key_is_named() {
    let text: String = three_tenants()
        .lines()
        .filter(|l| !l.starts_with("nodes"))
        .collect::<Vec<_>>()
        .join("\n");
    let e = error(&text);
    assert!(
        e.starts_with("tenant[0] \"llama-8b\": missing field `nodes`"),
        "{e}"
    );
    let e = error("[[tenant]]\nname = \"a\"\n");
    assert_eq!(e, "node: missing");
}

#[test]
fn a_percentile_written_as_a_percentage_is_refused() {
    let e = error(&format!(
        "[shared_tier]\npercentile = 99.9\n{}",
        three_tenants()
    ));
    assert!(
        e.starts_with("shared_tier: percentile: 99.9 is not a fraction strictly between 0 and 1"),
        "{e}"
    );
}

#[test]
fn values_that_make_no_sense_are_refused_with_the_reason() {
    let base = three_tenants();
    let cases = [
        (
            with(&base, 1, "count", "0"),
            "tenant[1] \"mistral-7b\": count: must be greater than zero",
        ),
        (
            with(&base, 0, "nodes", "0"),
            "tenant[0] \"llama-8b\": nodes: must be greater than zero",
        ),
        (
            with(&base, 2, "interval", "\"0s\""),
            "tenant[2] \"llama-70b\": interval: must be greater than zero",
        ),
        (
            with(&base, 2, "burst_bandwidth", "\"100MiB/s\""),
            "tenant[2] \"llama-70b\": burst_bandwidth: a checkpoint takes",
        ),
        (
            format!("{base}phase = \"40m\"\n"),
            "tenant[2] \"llama-70b\": phase: offset 40m is not shorter than the interval 30m",
        ),
        (
            format!("{base}phase = \"soon\"\n"),
            "tenant[2] \"llama-70b\": phase: expected \"random\" or an offset",
        ),
        (
            with(&base, 1, "name", "\"llama-8b\""),
            "tenant[1] \"llama-8b\": name: the same name as tenant[0]",
        ),
        (
            base.replace(
                "local_capacity = \"28TiB\"",
                "local_capacity = \"28TiB\"\ndrain_window = 1.5",
            ),
            "node: drain_window: 1.5 is not a fraction of the interval",
        ),
        (
            with(&base, 0, "count", "-3"),
            "tenant[0] \"llama-8b\": count: invalid value: integer `-3`",
        ),
    ];
    for (text, expected) in cases {
        let e = error(&text);
        assert!(e.starts_with(expected), "expected {expected:?}, got {e:?}");
    }
}

#[test]
fn a_timetable_too_long_to_sweep_is_refused() {
    // Intervals of 997 s and 1009 s (primes) at fixed phases: a common period of ~11.6
    // days holding thousands of bursts is fine; five coprime ones are not.
    let mut shapes = Vec::new();
    for (i, interval) in [997, 1009, 1013, 1019, 1021].into_iter().enumerate() {
        shapes.push(Shape::new(&format!("t{i}"), GIB, 10, interval).phase(0));
    }
    let e = error(&file(&shapes, ""));
    assert!(
        e.contains("phase: the fixed-phase tenants' intervals have a common period"),
        "{e}"
    );
    assert!(crate::parse(&file(&shapes[..2], "")).is_ok());
}

#[test]
fn broken_toml_shows_the_line() {
    let e = error("[node\nlocal_capacity = 1\n");
    assert!(e.contains("line 1"), "{e}");
}
