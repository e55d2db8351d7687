"""The noisy-neighbour benchmark completes and writes its JSON contract. No timing is
asserted: benchmarks report, tests check that they run."""

import glob
import json
import shutil
import subprocess

from harness import sluice_bin

PG_TARGET = "sluice gateway (PostgreSQL catalog)"
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


def postgres_installed() -> bool:
    return bool(glob.glob("/usr/lib/postgresql/*/bin/initdb")) or shutil.which("initdb") is not None


def test_gateway_quick_interleaves_the_large_reads(tmp_path):
    """`bench gateway --quick`: every target reads the large objects in slices of 4, and its
    GET rate is the objects' bytes over the slices' total time. Where PostgreSQL is installed,
    the gateway on a PostgreSQL catalog is one of the targets, its ratios to the redb gateway
    are those of the same run, and the aggregate ran over 1, 2 and 3 gateways, none of whose
    starts changed the shared backend."""
    out = tmp_path / "gw.json"
    work = tmp_path / "work"
    run = subprocess.run(
        [sluice_bin(), "bench", "gateway", "--quick", "--weed", "none",
         "--json", str(out), "--workdir", str(work)],
        capture_output=True, text=True, timeout=600,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    report = json.loads(out.read_text())
    cfg = report["config"]
    assert (cfg["large_objects"], cfg["large_slice"], cfg["rounds"]) == (8, 4, 1)
    pg = postgres_installed()
    assert [t["name"] for t in report["targets"]] == [
        "filesystem", "sluice gateway"] + ([PG_TARGET] if pg else []) + ["sluice gateway (TLS)"]
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
    lines = {ln[2:38].rstrip(): ln[38:] for ln in run.stdout.splitlines()
             if ln.strip().endswith("(2 slices)")}
    for t, gw in zip(report["targets"][1:], gateways):
        ratios = sorted(a / b for a, b in zip(fs, gw))
        line = lines[t["name"]]
        p25, med, p75 = (float(x) for x in line.split("(")[0].split("/"))
        assert (p25, med, p75) == tuple(
            round(ratios[0] + (ratios[1] - ratios[0]) * q, 2) for q in (0.25, 0.5, 0.75)), line
    if pg:
        check_postgres_parts(report, run.stdout)
    else:
        assert report["postgres"] is None and report["aggregate"] is None
        assert "PostgreSQL not found" in run.stderr, run.stderr[-2000:]
    assert not work.exists() or not any(work.iterdir()), "the benchmark's data was left behind"


def check_postgres_parts(report, stdout):
    assert report["postgres"].startswith("postgres (PostgreSQL)"), report["postgres"]
    targets = {t["name"]: t for t in report["targets"]}
    pg, redb = targets[PG_TARGET], targets["sluice gateway"]
    ratios = report["pg_vs_redb"]
    for key in ("put_mib_s", "get_mib_s", "small_put_ops_s", "small_get_ops_s"):
        assert ratios[key] == pg[key] / redb[key], (key, ratios, pg, redb)
    assert ratios["rounds"] == [[a / b for a, b in zip(pg["rounds"][0], redb["rounds"][0])]]
    assert "PostgreSQL catalog / redb catalog, same run" in stdout
    agg = report["aggregate"]
    steps = agg["steps"]
    assert [s["gateways"] for s in steps] == [1, 2, 3]
    cfg = report["config"]
    for s in steps:
        n = s["gateways"]
        assert (s["small_objects"], s["small_in_flight"], s["large_in_flight"]) == (
            n * cfg["small_objects"], n * cfg["small_concurrency"], n * cfg["large_concurrency"])
        assert all(v > 0 for v in s["rounds"][0]), s
        assert s["vs_one_gateway"][2] == s["small_put_ops_s"] / steps[0]["small_put_ops_s"]
    # Gateways 2 and 3 started on a backend holding the objects written through the first:
    # their starts removed nothing (reads of every object through another gateway followed).
    starts = agg["starts"]
    assert [s["gateway"] for s in starts] == [1, 2, 3]
    assert starts[1]["blobs_before"] > 0, starts
    assert all(s["blobs_before"] == s["blobs_after"] for s in starts), starts


def test_agent_bench_encrypt_runs_from_a_relative_dir(tmp_path):
    """`bench agent --encrypt` with a relative `--dir` (the default is one): the encrypted
    tenant's key file and data directories resolve where they were written, and the report
    carries the encrypted series and both encryption ratios."""
    out = tmp_path / "agent.json"
    run = subprocess.run(
        [sluice_bin(), "bench", "agent", "--objects", "2", "--size", "4MiB", "--rounds", "1",
         "--dir", "work", "--encrypt", "--json", str(out)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    report = json.loads(out.read_text())
    assert [r["round"] for r in report["encrypted"]["rounds"]] == [0], report["encrypted"]
    assert report["ratio_median_encrypted"] == \
        report["encrypted"]["median_s"] / report["agent"]["median_s"]
    assert report["encryption"]["aead_median_bytes_per_cpu_s"] > 0, report["encryption"]
    assert not (tmp_path / "work").exists(), "the benchmark's directory was left behind"


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
