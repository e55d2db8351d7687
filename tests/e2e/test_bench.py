"""The noisy-neighbour benchmark completes and writes its JSON contract. No timing is
asserted: benchmarks report, tests check that they run."""

import json
import subprocess

from harness import sluice_bin

SCENARIOS = {"solo", "fifo", "rate_limit", "dmclock", "dmclock_agent"}
KEYS = {"name", "victim_p50_s", "victim_p99_s", "victim_p999_s", "victim_throughput_bps",
        "victim_target_bps", "aggressor_stall_s", "tier_utilization", "drain_completion_s"}


def test_noisy_neighbor_quick_writes_valid_json(tmp_path):
    out = tmp_path / "nn.json"
    svg = tmp_path / "nn.svg"
    run = subprocess.run(
        [sluice_bin(), "bench", "noisy-neighbor", "--quick", "--seed", "7",
         "--json", str(out), "--svg", str(svg), "--workdir", str(tmp_path / "work")],
        capture_output=True, text=True, timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["seed"] == 7
    assert report["config"]["seed"] == 7
    names = {s["name"] for s in report["scenarios"]}
    assert SCENARIOS <= names, names
    for s in report["scenarios"]:
        assert KEYS <= set(s), set(s) ^ KEYS
        assert s["victim_p50_s"] <= s["victim_p99_s"] <= s["victim_p999_s"]
    assert svg.read_text().startswith("<svg")
    assert "solo" in run.stdout and "dmclock" in run.stdout
