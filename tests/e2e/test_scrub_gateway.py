"""The gateway's continuous scrub (`[gateway.scrub]`, issue #30): a byte flipped in a blob
under `data_dir/objects` is found by the next pass, named by its object on `/metrics` and in
the log, while the clean objects are never reported and nothing is changed; SIGHUP changes
the rate. The scrub reads through the throughput scheduler's background class (the gateway
has `[gateway.capacity]`). Every wait polls an observable condition with a deadline."""

from __future__ import annotations

import hashlib
import os
import re
import signal
import time
import urllib.request

import pytest

from harness import Backend, Gateway, free_port

MiB = 1024 * 1024


def metrics(gw: Gateway) -> str:
    url = f"http://127.0.0.1:{gw.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read().decode()


def value(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{name} not on /metrics:\n{text}")


def wait_metrics(gw: Gateway, what: str, done, timeout: float = 60.0) -> str:
    deadline = time.monotonic() + timeout
    while True:
        text = metrics(gw)
        if done(text):
            return text
        assert time.monotonic() < deadline, f"{what} not within {timeout}s:\n{text}"
        time.sleep(0.05)


def log_text(gw: Gateway) -> str:
    return (gw.workdir / "gateway.log").read_text(errors="replace")


def wait_log(gw: Gateway, pattern: str, timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    while True:
        log = log_text(gw)
        if re.search(pattern, log):
            return log
        assert time.monotonic() < deadline, f"{pattern!r} not logged within {timeout}s: {log[-3000:]}"
        time.sleep(0.05)


def scrub_toml(rate: str) -> str:
    return f'[gateway.scrub]\nrate = "{rate}"\ninterval = "1s"\n'


@pytest.fixture
def gw(tmp_path):
    port = free_port()
    g = Gateway(
        tmp_path / "gw",
        Backend("local"),
        extra=(
            f'metrics_listen = "127.0.0.1:{port}"\n'
            '[gateway.capacity]\nbandwidth = "512MiB/s"\n' + scrub_toml("64MiB/s")
        ),
    )
    g.metrics_port = port
    g.start()
    yield g
    g.stop()


def blob_of(gw: Gateway, tenant: str, bucket: str, key: str):
    """The blob file of a single-segment object, from its recovery record."""
    import json
    rec_dir = (gw.workdir / "data" / "objects" / "tenants" / tenant / bucket / "rec"
               / hashlib.sha256(key.encode()).hexdigest())
    records = sorted(rec_dir.glob("*.json"))
    assert records, f"no recovery record of {key}"
    seg = json.loads(records[-1].read_text())["segments"][0]
    return gw.workdir / "data" / "objects" / "tenants" / tenant / seg["blob"], seg["blob"]


def test_the_gateway_scrub_finds_a_flipped_byte_and_names_the_object(gw):
    s3 = gw.client("alice")
    s3.create_bucket(Bucket="bkt")
    bodies = {"clean-a": os.urandom(200 * 1024), "bad": os.urandom(3 * MiB),
              "clean-b": os.urandom(5 * MiB + 7), "tiny": b"inline, no blob"}
    for key, body in bodies.items():
        s3.put_object(Bucket="bkt", Key=key, Body=body)

    # A clean pass over all four objects first.
    text = wait_metrics(gw, "a clean pass", lambda t: value(t, "sluice_scrub_passes_total") >= 1
                        and value(t, "sluice_scrub_last_pass_objects") == 4)
    assert value(text, "sluice_scrub_last_pass_findings") == 0
    assert value(text, 'sluice_scrub_findings_total{kind="corrupt"}') == 0
    assert value(text, "sluice_scrub_bytes_total") >= 8 * MiB

    path, blob = blob_of(gw, "alice", "bkt", "bad")
    with open(path, "r+b") as f:
        f.seek(2 * MiB + 12345)
        b = f.read(1)
        f.seek(2 * MiB + 12345)
        f.write(bytes([b[0] ^ 0x04]))
    flipped = path.read_bytes()

    text = wait_metrics(gw, "the corrupt blob on /metrics",
                        lambda t: value(t, 'sluice_scrub_findings_total{kind="corrupt"}') >= 1)
    # A pass that ended after the flip reports exactly one bad blob: the clean ones never.
    passes = value(text, "sluice_scrub_passes_total")
    text = wait_metrics(gw, "another pass", lambda t: value(t, "sluice_scrub_passes_total") > passes)
    assert value(text, "sluice_scrub_last_pass_findings") == 1
    assert value(text, 'sluice_scrub_findings_total{kind="missing"}') == 0
    assert value(text, 'sluice_scrub_findings_total{kind="unreadable"}') == 0

    log = wait_log(gw, r"scrub: corrupt blob")
    found = [l for l in log.splitlines() if "scrub: corrupt blob" in l]
    assert found and all("bad" in l and blob in l and "ERROR" in l for l in found), found[:3]
    for clean in ("clean-a", "clean-b"):
        assert not any(f'key={clean}' in l or f'key="{clean}"' in l for l in found), found[:3]
    # Never changing data: the blob holds exactly the flipped bytes, the clean objects read.
    assert path.read_bytes() == flipped
    assert s3.get_object(Bucket="bkt", Key="clean-b")["Body"].read() == bodies["clean-b"]


def test_sighup_changes_the_scrub_rate_and_can_turn_it_off(gw):
    s3 = gw.client("alice")
    s3.create_bucket(Bucket="bkt")
    s3.put_object(Bucket="bkt", Key="k", Body=os.urandom(MiB))
    wait_metrics(gw, "a pass", lambda t: value(t, "sluice_scrub_passes_total") >= 1)

    text = gw.config_path.read_text()
    gw.config_path.write_text(text.replace('rate = "64MiB/s"', 'rate = "8MiB/s"'))
    gw.proc.send_signal(signal.SIGHUP)
    wait_log(gw, "configuration reloaded")
    wait_log(gw, r"scrub pass started.*rate_bytes_per_s=8388608")

    # Off: the pass in progress (if any) stops and no further pass starts.
    gw.config_path.write_text(text.replace('interval = "1s"', 'interval = "1s"\nenabled = false'))
    gw.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 30
    while log_text(gw).count("configuration reloaded") < 2:
        assert time.monotonic() < deadline, log_text(gw)[-2000:]
        time.sleep(0.05)
    text = wait_metrics(gw, "the scrub idle", lambda t: value(t, "sluice_scrub_running") == 0)
    assert gw.proc.poll() is None
