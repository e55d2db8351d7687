"""Throughput isolation over HTTP: the gateway's capacity is set low (64 MiB/s) and tenants
saturate it with real GETs; shares are measured at the client, within one run."""

import threading
import time

import pytest
import requests
from botocore.exceptions import ClientError

from harness import Backend, Gateway, Tenant, free_port

MiB = 1024 * 1024
OBJECT = 4 * MiB


@pytest.fixture(scope="module")
def qos_gateway(tmp_path_factory):
    tenants = [
        Tenant("light", "AKIDLIGHT000000TEST", "light-secret-0123456789"),
        Tenant("heavy", "AKIDHEAVY000000TEST", "heavy-secret-0123456789"),
        Tenant("capped", "AKIDCAPPED00000TEST", "capped-secret-0123456789"),
        Tenant("reserved", "AKIDRESERVED000TEST", "reserved-secret-0123456789"),
        Tenant("flood", "AKIDFLOOD000000TEST", "flood-secret-0123456789"),
    ]
    qos = {
        "light": 'weight = 1',
        "heavy": 'weight = 3',
        "capped": 'limit = "16MiB/s"',
        "reserved": 'reservation = "32MiB/s"\nweight = 1',
        "flood": 'weight = 1',
    }
    gw = Gateway(tmp_path_factory.mktemp("qos"), Backend("local"), tenants=tenants)
    metrics_port = free_port()
    gw.extra = (
        f'metrics_listen = "127.0.0.1:{metrics_port}"\n'
        '[gateway.capacity]\nbandwidth = "64MiB/s"\nops = 2000\nqueue_depth = 8\n'
    )
    gw.write_config()
    # Per-tenant QoS lines go right after each tenant's capacity line.
    text = gw.config_path.read_text()
    for t in tenants:
        text = text.replace(f'id = "{t.id}"', f'id = "{t.id}"\n{qos[t.id]}')
    gw.config_path.write_text(text)
    gw.write_config = lambda: None  # keep the edited file
    gw.start()
    for t in tenants:
        c = gw.client(t.id)
        c.create_bucket(Bucket="data")
        c.put_object(Bucket="data", Key="shard", Body=b"s" * OBJECT)
    gw.metrics_port = metrics_port
    yield gw
    gw.stop()


def saturate(gw, plan: dict[str, int], seconds: float, warmup: float = 1.0) -> dict[str, float]:
    """Runs `plan[tenant]` threads of back-to-back GETs per tenant; returns MiB/s per tenant
    counted over [warmup, seconds] by completion time."""
    start = time.monotonic()
    done: dict[str, list[float]] = {t: [] for t in plan}
    errors = []

    def loop(tenant: str):
        c = gw.client(tenant)
        while time.monotonic() - start < seconds:
            try:
                body = c.get_object(Bucket="data", Key="shard")["Body"].read()
                assert len(body) == OBJECT
                done[tenant].append(time.monotonic() - start)
            except ClientError as e:
                errors.append((tenant, e.response["Error"]["Code"]))
                return

    threads = [threading.Thread(target=loop, args=(t,)) for t, n in plan.items() for _ in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    window = seconds - warmup
    return {t: sum(1 for x in ts if warmup <= x <= seconds) * OBJECT / MiB / window for t, ts in done.items()}


def test_weights_one_to_three_split_the_tier(qos_gateway):
    rates = saturate(qos_gateway, {"light": 4, "heavy": 4}, seconds=9)
    ratio = rates["heavy"] / rates["light"]
    print(f"weights 1:3 -> {rates}, ratio {ratio:.2f}")
    assert 3 * 0.85 <= ratio <= 3 * 1.15, rates
    # Isolation does not waste the tier: together they use most of the 64 MiB/s.
    assert rates["heavy"] + rates["light"] >= 0.8 * 64, rates


def test_limit_is_never_exceeded(qos_gateway):
    rates = saturate(qos_gateway, {"capped": 6}, seconds=7)
    print(f"limit 16 MiB/s -> {rates}")
    # One 4 MiB object more or less at the window's edges is the measurement's resolution.
    assert rates["capped"] <= 16 + OBJECT / MiB / 6, rates
    assert rates["capped"] >= 16 * 0.75, rates


def test_reservation_holds_while_a_neighbour_saturates(qos_gateway):
    rates = saturate(qos_gateway, {"reserved": 4, "heavy": 6}, seconds=9)
    print(f"reservation 32 MiB/s vs heavy -> {rates}")
    assert rates["reserved"] >= 0.9 * 32, rates


def test_overloaded_tenant_gets_slowdown_and_only_it(qos_gateway):
    outcomes = []
    stop = threading.Event()

    def flood():
        c = qos_gateway.client("flood")
        while not stop.is_set():
            try:
                c.get_object(Bucket="data", Key="shard")["Body"].read()
                outcomes.append("ok")
            except ClientError as e:
                r = e.response
                outcomes.append((r["Error"]["Code"], r["ResponseMetadata"]["HTTPStatusCode"],
                                 r["ResponseMetadata"]["HTTPHeaders"].get("retry-after")))

    threads = [threading.Thread(target=flood) for _ in range(40)]
    for th in threads:
        th.start()
    try:
        light = qos_gateway.client("light")
        for _ in range(8):
            assert len(light.get_object(Bucket="data", Key="shard")["Body"].read()) == OBJECT
    finally:
        stop.set()
        for th in threads:
            th.join()
    slowdowns = [o for o in outcomes if o != "ok"]
    assert slowdowns, "40 concurrent requests against a queue depth of 8 must be refused"
    assert all(o[0] == "SlowDown" and o[1] == 503 and o[2] and int(o[2]) >= 1 for o in slowdowns), slowdowns[:3]
    assert "ok" in outcomes


def test_metrics_show_every_tenant(qos_gateway):
    text = requests.get(f"http://127.0.0.1:{qos_gateway.metrics_port}/metrics", timeout=10).text
    for t in ["light", "heavy", "capped", "reserved", "flood"]:
        assert f'sluice_sent_bytes_total{{tenant="{t}"}}' in text
        assert f'sluice_request_duration_seconds_count{{tenant="{t}"}}' in text
        assert f'sluice_queue_wait_seconds_bucket{{tenant="{t}",le="+Inf"}}' in text
        assert f'sluice_quota_used_bytes{{tenant="{t}"}} {OBJECT}' in text
        assert f'sluice_qos_weight{{tenant="{t}"}}' in text
    assert 'sluice_qos_limit_bytes_per_second{tenant="capped"} 16777216' in text
    assert 'sluice_qos_reservation_bytes_per_second{tenant="reserved"} 33554432' in text
    assert 'sluice_requests_total{tenant="light",op="GetObject",outcome="ok"}' in text
    throttled = [line for line in text.splitlines() if line.startswith('sluice_throttled_requests_total{tenant="flood"}')]
    assert throttled and int(throttled[0].split()[-1]) > 0, throttled
    # Every blob here has chunk checksums, so its GETs are read into buffers and verified,
    # never sent by sendfile from pages nobody checked (docs/integrity.md).
    sent = [line for line in text.splitlines() if line.startswith("sluice_sendfile_bytes_total ")]
    assert sent and int(sent[0].split()[-1]) == 0, sent
    assert "# TYPE sluice_sendfile_handbacks_total counter" in text


def test_sighup_reload_changes_a_limit_without_restart(qos_gateway):
    import signal
    text = qos_gateway.config_path.read_text().replace('limit = "16MiB/s"', 'limit = "8MiB/s"')
    qos_gateway.config_path.write_text(text)
    qos_gateway.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    url = f"http://127.0.0.1:{qos_gateway.metrics_port}/metrics"
    while 'sluice_qos_limit_bytes_per_second{tenant="capped"} 8388608' not in requests.get(url, timeout=10).text:
        assert time.monotonic() < deadline, "the reload never took effect"
        time.sleep(0.1)
    rates = saturate(qos_gateway, {"capped": 4}, seconds=6)
    # Counted by completion, a window can also hold the objects its 4 streams had in flight
    # when it opened (admitted under either limit): at most 4 objects over 5 s. The old
    # limit (16 MiB/s) is well above that bound.
    assert rates["capped"] <= 8 + 4 * OBJECT / MiB / 5, rates
    assert rates["capped"] < 16 * 0.8, rates
    # An invalid reload (reservations above capacity) is refused and changes nothing.
    qos_gateway.config_path.write_text(text.replace('reservation = "32MiB/s"', 'reservation = "99MiB/s"'))
    qos_gateway.proc.send_signal(signal.SIGHUP)
    time.sleep(1)  # give the refused reload time to (not) happen; the check below is the assertion
    assert 'sluice_qos_reservation_bytes_per_second{tenant="reserved"} 33554432' in requests.get(url, timeout=10).text
    assert qos_gateway.proc.poll() is None
