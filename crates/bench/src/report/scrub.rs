//! The scrub scenarios' lines under the noisy-neighbour tables: what the gateway's continuous
//! scrub read beside the tenants, and the victim's p99 against the same scenario without the
//! scrub in the same run (`dmclock_scrub` against `dmclock`, `solo_scrub` against `solo`):
//! the claim is that the scrub, a background class of the scheduler, does not move it.

use std::fmt::Write as _;

use super::{MIB, Scenario, ms, opt, times};

/// The sentences, or nothing when the run has no scrub scenario.
pub(super) fn note(scenarios: &[Scenario]) -> String {
    let mut out = String::new();
    for s in scenarios.iter().filter(|s| s.scrub_bps.is_some()) {
        let base_name = s.name.strip_suffix("_scrub").unwrap_or(&s.name);
        let beside = scenarios
            .iter()
            .find(|b| b.name == base_name)
            .map_or_else(String::new, |b| {
                format!(
                    " (`{}` without it: {}{})",
                    b.name,
                    ms(b.victim_p99_s),
                    match (s.victim_p99_s, b.victim_p99_s) {
                        (Some(x), Some(y)) if y > 0.0 => format!("; ratio {:.2}", x / y),
                        _ => String::new(),
                    }
                )
            });
        let _ = write!(
            out,
            "\nIn `{}` the gateway's continuous scrub (`[gateway.scrub]`, a background class of \
             the scheduler, its rate above the tier's capacity) read {} MiB/s of what the \
             tenants left, while the victim's p99 was {}, {} solo{beside}.\n",
            s.name,
            opt(s.scrub_bps.map(|b| b / MIB), 1),
            ms(s.victim_p99_s),
            times(s.victim_p99_vs_solo),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenario(name: &str, p99: f64, scrub: Option<f64>) -> Scenario {
        serde_json::from_value(serde_json::json!({
            "name": name, "victim_p50_s": 0.1, "victim_p99_s": p99, "victim_p999_s": p99,
            "victim_p99_vs_solo": p99 / 0.2, "victim_requests": 14, "victim_errors": 0,
            "victim_throughput_bps": null, "victim_target_bps": null,
            "aggressor_stall_s": null, "tier_utilization": 0.5, "drain_completion_s": null,
            "scrub_bps": scrub,
        }))
        .expect("a scenario")
    }

    #[test]
    fn each_scrub_scenario_is_set_against_its_run_without_the_scrub() {
        let none = [scenario("solo", 0.2, None), scenario("dmclock", 0.21, None)];
        assert_eq!(note(&none), "");
        let runs = [
            scenario("solo", 0.2, None),
            scenario("dmclock", 0.21, None),
            scenario("dmclock_scrub", 0.22, Some(3.0 * MIB)),
            scenario("solo_scrub", 0.2, Some(60.0 * MIB)),
        ];
        let text = note(&runs);
        assert!(text.contains("In `dmclock_scrub`"), "{text}");
        assert!(text.contains("read 3.0 MiB/s"), "{text}");
        assert!(text.contains("(`dmclock` without it: "), "{text}");
        assert!(text.contains("ratio 1.05"), "{text}");
        assert!(
            text.contains("In `solo_scrub`") && text.contains("read 60.0 MiB/s"),
            "{text}"
        );
        assert!(text.contains("(`solo` without it: "), "{text}");
    }
}
