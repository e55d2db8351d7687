"""The node agent over two gateways (`[agent] upstream = [gw1, gw2]`) that share a PostgreSQL
catalog and a replicated SeaweedFS backend: one gateway is killed with SIGKILL mid-drain and
the drain completes through the other, every object byte-identical and the commit marker
still last. Each test starts its own two gateways (one of them dies)."""

import hashlib
import itertools
import os
import time

import pytest

from agent_harness import Agent, LocalSpec
from harness import DEFAULT_TENANTS, free_port
from multigateway import start_gateways
from postgres import postgres  # noqa: F401 (the fixture)
from test_agent import dcp_marker_lands_last, listing
from test_dcp import dcp_round_trip

MiB = 1024 * 1024
ALICE = DEFAULT_TENANTS[0]
DATABASES = itertools.count()


@pytest.fixture
def gateways(postgres, seaweed_cluster, tmp_path_factory):  # noqa: F811
    db = postgres.database(f"failover_{next(DATABASES)}")
    gws = start_gateways(db, seaweed_cluster.backend(), tmp_path_factory, n=2,
                         name="failover")
    yield gws
    for gw in gws:
        gw.stop()


def start_agent(tmp_path, gws, **local) -> Agent:
    specs = {t: LocalSpec(**kw) for t, kw in local.items()}
    return Agent(tmp_path / "agent", [gw.endpoint for gw in gws], DEFAULT_TENANTS, specs,
                 status_port=free_port()).start()


def wait_for(what: str, check, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout}s")
        time.sleep(0.02)


def gateway_state(agent: Agent, endpoint: str) -> dict:
    [g] = [g for g in agent.status()["gateways"] if g["endpoint"] == endpoint]
    return g


def assert_failed_over(agent: Agent, dead, alive) -> None:
    """Status and metrics show the dead gateway's failures and the live one up."""
    d, a = gateway_state(agent, dead.endpoint), gateway_state(agent, alive.endpoint)
    assert d["failures_total"] >= 1 and d["last_error"], d
    assert a["up"] and a["consecutive_failures"] == 0, a
    metrics = agent.metrics()
    assert f'sluice_agent_upstream_up{{gateway="{alive.endpoint}"}} 1' in metrics
    assert f'sluice_agent_upstream_failures_total{{gateway="{dead.endpoint}"}}' in metrics


def test_a_large_checkpoint_drains_through_the_survivor_of_a_kill_9(tmp_path, gateways):
    gw1, gw2 = gateways
    # Paced: ~100 MiB at 16 MiB/s is seconds of drain, so the kill lands mid-transfer.
    agent = start_agent(tmp_path, gateways, alice={"drain_rate": "16MiB/s"})
    try:
        status = agent.status()
        assert [g["endpoint"] for g in status["gateways"]] == [gw1.endpoint, gw2.endpoint]
        assert all(g["up"] for g in status["gateways"])
        assert status["upstream"] == f"{gw1.endpoint}, {gw2.endpoint}"
        node = agent.client(ALICE)
        node.create_bucket(Bucket="big")
        prefix = "run/step-7/"
        # Multipart upstream (over 16 MiB) and single PUTs, spread over both gateways by key.
        objects = {f"{prefix}__{rank}_0.distcp": os.urandom(size)
                   for rank, size in enumerate([40 * MiB, 40 * MiB, 3 * MiB, 3 * MiB,
                                                3 * MiB, 3 * MiB, 1])}
        for key, body in objects.items():
            node.put_object(Bucket="big", Key=key, Body=body)
        node.put_object(Bucket="big", Key=f"{prefix}.metadata", Body=b"metadata")
        wait_for("the drain sends bytes upstream",
                 lambda: agent.tenant_status("alice")["drained_bytes_total"] > 0)
        pending = agent.tenant_status("alice")["pending_bytes"]
        assert pending > 32 * MiB, f"the drain was nearly done before the kill: {pending}"
        gw1.kill9()
        status = agent.wait_drained("alice", timeout=120)
        assert status["durable_up_to"]["marker"] == f"{prefix}.metadata"
        survivor = gw2.client("alice")
        up = listing(survivor, "big")
        assert set(up) == set(objects) | {f"{prefix}.metadata"}
        for key, body in objects.items():
            got = survivor.get_object(Bucket="big", Key=key)["Body"].read()
            assert hashlib.sha256(got).digest() == hashlib.sha256(body).digest(), key
        big = [k for k, v in objects.items() if len(v) > 16 * MiB]
        assert all("-" in survivor.head_object(Bucket="big", Key=k)["ETag"] for k in big)
        assert_failed_over(agent, gw1, gw2)
        # The node's reads of what it no longer holds locally go through the survivor too.
        assert node.list_objects_v2(Bucket="big")["KeyCount"] == len(objects) + 1
    finally:
        agent.stop()


def test_dcp_marker_lands_last_with_a_gateway_killed_mid_drain(tmp_path, gateways):
    gw1, gw2 = gateways
    agent = start_agent(tmp_path, gateways, alice={"drain_rate": "24MiB/s"})
    try:
        dcp_marker_lands_last(agent, gw2.client("alice"), mid_drain=gw1.kill9)
        assert gw1.proc.poll() is not None, "the gateway was killed"
        assert_failed_over(agent, gw1, gw2)
    finally:
        agent.stop()


def test_dcp_save_and_load_with_a_gateway_killed_mid_drain(tmp_path, gateways):
    """test_dcp.py's round trip (torch's own DCP writer and reader over s3fs) through an agent
    over both gateways, paced so that the kill lands mid-drain."""
    gw1, gw2 = gateways
    agent = start_agent(tmp_path, gateways, alice={"drain_rate": "4MiB/s"})
    try:
        dcp_round_trip(agent, gw2, mid_drain=gw1.kill9)
        assert gw1.proc.poll() is not None, "the gateway was killed"
        assert_failed_over(agent, gw1, gw2)
    finally:
        agent.stop()


def test_a_single_upstream_string_still_works_and_reports_one_gateway(tmp_path, gateways):
    gw1, _ = gateways
    agent = Agent(tmp_path / "agent", gw1.endpoint, DEFAULT_TENANTS,
                  status_port=free_port()).start()
    try:
        assert 'upstream = "' in agent.config_path.read_text()
        status = agent.status()
        assert status["upstream"] == gw1.endpoint
        assert [g["endpoint"] for g in status["gateways"]] == [gw1.endpoint]
        node = agent.client(ALICE)
        node.create_bucket(Bucket="one")
        node.put_object(Bucket="one", Key="k", Body=b"v")
        agent.wait_drained("alice")
        assert gw1.client("alice").get_object(Bucket="one", Key="k")["Body"].read() == b"v"
    finally:
        agent.stop()
