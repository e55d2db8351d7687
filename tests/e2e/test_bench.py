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
    assert [t["name"] for t in report["targets"]] == [
        "filesystem", "sluice gateway", "sluice gateway (TLS)"]
    mib = cfg["large_objects"] * cfg["large_size"] / (1 << 20)
    for t in report["targets"]:
        assert len(t["rounds"]) == 1 and all(v > 0 for v in t["rounds"][0]), t
        [slices] = t["large_get_slices_s"]
        assert len(slices) == 2 and all(s > 0 for s in slices), slices
        assert abs(t["get_mib_s"] - mib / sum(slices)) <= 1e-6 * t["get_mib_s"], t
        assert t["rounds"][0][1] == t["get_mib_s"]
    assert "sluice gateway" in run.stdout and "sluice gateway (TLS)" in run.stdout
    # The printed pairing: the filesystem's slice time over each gateway's, slice by slice.
    fs, *gateways = ([s for r in t["large_get_slices_s"] for s in r] for t in report["targets"])
    lines = {ln[2:22].rstrip(): ln[22:] for ln in run.stdout.splitlines()
             if ln.strip().endswith("(2 slices)")}
    for t, gw in zip(report["targets"][1:], gateways):
        ratios = sorted(a / b for a, b in zip(fs, gw))
        line = lines[t["name"]]
        p25, med, p75 = (float(x) for x in line.split("(")[0].split("/"))
        assert (p25, med, p75) == tuple(
            round(ratios[0] + (ratios[1] - ratios[0]) * q, 2) for q in (0.25, 0.5, 0.75)), line
    assert not work.exists() or not any(work.iterdir()), "the benchmark's data was left behind"


def test_agent_bench_reports_every_round_and_both_ratios(tmp_path):
    """`bench agent`: every kind measured once per round, the medians and the fastest rounds
    taken from those measurements, the ratios of the agent to both baselines, nothing left."""
    out = tmp_path / "agent.json"
    work = tmp_path / "work"
    run = subprocess.run(
        [sluice_bin(), "bench", "agent", "--objects", "2", "--size", "8MiB", "--rounds", "3",
         "--dir", str(work), "--json", str(out)],
        capture_output=True, text=True, timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    report = json.loads(out.read_text())
    assert (report["objects"], report["size_bytes"]) == (2, 8 << 20)
    series = {kind: report[kind] for kind in ("direct", "o_direct", "agent")
              if report[kind] is not None}
    assert {"direct", "agent"} <= set(series)
    for kind, s in series.items():
        times = [r["seconds"] for r in s["rounds"]]
        assert [r["round"] for r in s["rounds"]] == [0, 1, 2], (kind, s)
        assert all(t > 0 for t in times), (kind, times)
        assert s["median_s"] == sorted(times)[1] and s["fastest_s"] == min(times), (kind, s)
    direct, agent = series["direct"], series["agent"]
    assert report["ratio_median"] == agent["median_s"] / direct["median_s"]
    assert report["ratio_fastest"] == agent["fastest_s"] / direct["fastest_s"]
    if "o_direct" in series:
        assert report["ratio_fastest_o_direct"] == \
            agent["fastest_s"] / series["o_direct"]["fastest_s"]
    assert "median: " in run.stdout and "fastest:" in run.stdout
    # `--dir` did not exist: the benchmark made it, and removes it with everything in it.
    assert not work.exists(), "the benchmark's directory was left behind"
