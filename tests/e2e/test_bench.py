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


def test_gateway_quick_interleaves_the_large_reads(tmp_path):
    """`bench gateway --quick`: every target reads the large objects in slices of 4, and its
    GET rate is the objects' bytes over the slices' total time."""
    out = tmp_path / "gw.json"
    work = tmp_path / "work"
    run = subprocess.run(
        [sluice_bin(), "bench", "gateway", "--quick", "--weed", "none",
         "--json", str(out), "--workdir", str(work)],
        capture_output=True, text=True, timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    report = json.loads(out.read_text())
    cfg = report["config"]
    assert (cfg["large_objects"], cfg["large_slice"], cfg["rounds"]) == (8, 4, 1)
    assert [t["name"] for t in report["targets"]] == ["filesystem", "sluice gateway"]
    mib = cfg["large_objects"] * cfg["large_size"] / (1 << 20)
    for t in report["targets"]:
        assert len(t["rounds"]) == 1 and all(v > 0 for v in t["rounds"][0]), t
        [slices] = t["large_get_slices_s"]
        assert len(slices) == 2 and all(s > 0 for s in slices), slices
        assert abs(t["get_mib_s"] - mib / sum(slices)) <= 1e-6 * t["get_mib_s"], t
        assert t["rounds"][0][1] == t["get_mib_s"]
    assert "sluice gateway" in run.stdout
    assert not work.exists() or not any(work.iterdir()), "the benchmark's data was left behind"
