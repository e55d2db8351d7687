"""The node agent never acknowledges what the shared tier will refuse: it holds the tenant's
shared-tier quota (escrow leased from the gateways) before it acknowledges a write, refuses
what it cannot hold with 403 QuotaExceeded at once, its drain spends what it holds, and a
killed agent's escrow returns when its lease lapses. On one gateway over the embedded
catalog, and on two gateways over PostgreSQL."""

import hashlib
import os
import time

import pytest
from botocore.exceptions import ClientError

from agent_harness import Agent
from harness import DEFAULT_TENANTS, Backend, Gateway, Tenant, free_port
from multigateway import error, start_gateways
from postgres import postgres  # noqa: F401 (the fixture)

MiB = 1024 * 1024
# 8 MiB of shared-tier quota; on the node, room for far more than that.
SMALL = Tenant("small", "AKIDSMALL000000TEST", "small-secret-0123456789", "8MiB")
TENANTS = [*DEFAULT_TENANTS, SMALL]


def upstream_sizes(client, bucket: str) -> dict[str, int]:
    return {o["Key"]: o["Size"]
            for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket)
            for o in page.get("Contents", [])}


def start_agent(tmp_path, upstream, extra: str = "") -> Agent:
    return Agent(tmp_path / "agent", upstream, TENANTS, status_port=free_port(),
                 extra=extra).start()


def refused_at_once(client, key: str, body: bytes) -> ClientError:
    started = time.monotonic()
    with pytest.raises(ClientError) as e:
        client.put_object(Bucket="ckpt", Key=key, Body=body)
    elapsed = time.monotonic() - started
    assert error(e.value) == ("QuotaExceeded", 403), e.value.response
    assert "shared tier" in e.value.response["Error"]["Message"], e.value.response
    # At once: no waiting for the drain or for a lease.
    assert elapsed < 2.0, elapsed
    return e.value


def fill_then_refuse(agent: Agent, gateway_client) -> dict[str, bytes]:
    """4 MiB of the 8 MiB quota used directly on the shared tier; through the agent a 3 MiB
    write is admitted, a second 3 MiB write is refused at once, and 1 MiB more (exactly what
    is left) is admitted. Returns what the agent acknowledged."""
    node = agent.client(SMALL)
    node.create_bucket(Bucket="ckpt")
    agent.wait_drained("small")
    gateway_client.put_object(Bucket="ckpt", Key="direct", Body=os.urandom(4 * MiB))
    acked = {}
    acked["shard-0"] = os.urandom(3 * MiB)
    node.put_object(Bucket="ckpt", Key="shard-0", Body=acked["shard-0"])
    # Drained first: while an upload is in flight upstream the node counts its bytes twice
    # (see docs/design/agent-escrow.md, Limits), and the last write below fits exactly.
    agent.wait_drained("small")
    refused_at_once(node, "shard-1", os.urandom(3 * MiB))
    acked["last"] = os.urandom(MiB)
    node.put_object(Bucket="ckpt", Key="last", Body=acked["last"])
    # The quota is all held or used now: one byte more is refused too.
    refused_at_once(node, "one-more", b"x")
    return acked


def assert_all_drained(agent: Agent, gateway_clients, acked: dict[str, bytes]) -> None:
    s = agent.wait_drained("small", timeout=60)
    assert s["last_error"] is None, s
    for c in gateway_clients:
        sizes = upstream_sizes(c, "ckpt")
        assert sizes == {"direct": 4 * MiB, **{k: len(v) for k, v in acked.items()}}, sizes
        for key, body in acked.items():
            got = c.get_object(Bucket="ckpt", Key=key)["Body"].read()
            assert hashlib.sha256(got).digest() == hashlib.sha256(body).digest(), key


def test_through_the_agent_a_write_past_the_shared_quota_is_refused_and_the_rest_drains(tmp_path):
    # The bug this pins: with 4 MiB left, two 3 MiB PUTs through the agent were both
    # acknowledged and the second never drained (QuotaExceeded upstream, marked permanent).
    gw = Gateway(tmp_path / "gw", Backend("local"), tenants=TENANTS).start()
    agent = start_agent(tmp_path, gw.endpoint)
    try:
        acked = fill_then_refuse(agent, gw.client("small"))
        assert_all_drained(agent, [gw.client("small")], acked)
        # The drain spent the agent's escrow instead of reserving anew: the shared tier
        # holds exactly the quota, and nothing more is admitted anywhere.
        with pytest.raises(ClientError) as e:
            gw.client("small").put_object(Bucket="ckpt", Key="over", Body=b"x")
        assert error(e.value) == ("QuotaExceeded", 403)
        # Space freed upstream is admitted again through the agent.
        gw.client("small").delete_object(Bucket="ckpt", Key="direct")
        agent.client(SMALL).put_object(Bucket="ckpt", Key="after", Body=os.urandom(2 * MiB))
        agent.wait_drained("small", timeout=60)
        assert upstream_sizes(gw.client("small"), "ckpt")["after"] == 2 * MiB
    finally:
        agent.stop()
        gw.stop()
    # The ledger agrees with what is stored: 3 + 1 + 2 MiB.
    assert gw.tenant_usage()["small"] == 6 * MiB


def test_a_killed_agents_escrow_returns_when_its_lease_lapses(tmp_path):
    gw = Gateway(tmp_path / "gw", Backend("local"), tenants=TENANTS).start()
    agent = start_agent(tmp_path, gw.endpoint, extra='escrow_lease = "2s"')
    direct = gw.client("small")
    try:
        node = agent.client(SMALL)
        node.create_bucket(Bucket="ckpt")
        agent.wait_drained("small", timeout=60)  # the bucket reaches the gateway
        direct.put_object(Bucket="ckpt", Key="direct", Body=os.urandom(6 * MiB))
        # Two writes through the agent: the first asks for a chunk beyond its own bytes, part
        # of which the agent still holds unspent once both have drained.
        node.put_object(Bucket="ckpt", Key="a", Body=os.urandom(MiB))
        node.put_object(Bucket="ckpt", Key="b", Body=os.urandom(MiB // 4))
        agent.wait_drained("small", timeout=60)
        # 8 - 6 - 1.25 = 0.75 MiB free, some of it (at most a chunk) still held by the live
        # agent, renewed every third of its 2 s lease: for three leases, a direct write of
        # all 0.75 MiB is refused.
        probe = os.urandom(3 * MiB // 4)
        deadline = time.monotonic() + 6
        while time.monotonic() < deadline:
            with pytest.raises(ClientError) as e:
                direct.put_object(Bucket="ckpt", Key="probe", Body=probe)
            assert error(e.value) == ("QuotaExceeded", 403)
            time.sleep(0.5)
        agent.kill9()
        # Dead, its lease lapses within 2 s and its escrow returns.
        deadline = time.monotonic() + 15
        while True:
            try:
                direct.put_object(Bucket="ckpt", Key="probe", Body=probe)
                break
            except ClientError as e:
                assert error(e) == ("QuotaExceeded", 403)
                assert time.monotonic() < deadline, "the dead agent's escrow never returned"
                time.sleep(0.2)
    finally:
        agent.stop()
        gw.stop()


@pytest.fixture(scope="module")
def two_gateways(postgres, seaweed_cluster, tmp_path_factory):  # noqa: F811
    gws = start_gateways(postgres.database("agentquota"), seaweed_cluster.backend(),
                         tmp_path_factory, n=2, tenants=TENANTS, name="aq")
    try:
        yield gws
    finally:
        for gw in gws:
            gw.stop()


def test_through_an_agent_over_two_gateways_on_postgres_the_same_holds(tmp_path, two_gateways):
    agent = start_agent(tmp_path, [gw.endpoint for gw in two_gateways])
    try:
        acked = fill_then_refuse(agent, two_gateways[1].client("small"))
        assert_all_drained(agent, [gw.client("small") for gw in two_gateways], acked)
        for gw in two_gateways:
            with pytest.raises(ClientError) as e:
                gw.client("small").put_object(Bucket="ckpt", Key="over", Body=b"x")
            assert error(e.value) == ("QuotaExceeded", 403)
    finally:
        agent.stop()
