"""The agent process and the stand-in key broker (keybroker.py): the tenant's key is released
only with the expected evidence; refused, the agent keeps running, refuses the tenant's writes
(503 naming why) rather than write plaintext, its status says why, and the key loads once the
broker releases it, without a restart; the key is never on disk."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from botocore.exceptions import ClientError

from agent_harness import Agent
from harness import DEFAULT_TENANTS, Backend, Gateway, free_port
from keybroker import KeyBroker

ALICE = DEFAULT_TENANTS[0]
RESOURCE = "default/sluice/alice"


class EncryptedAgent(Agent):
    """An agent whose only tenant has `[tenant.encryption]` (the table follows its
    `[[tenant]]`, the last one in the file)."""

    encryption: str = ""

    def write_config(self) -> None:
        super().write_config()
        with self.config_path.open("a") as f:
            f.write(f"[tenant.encryption]\n{self.encryption}\n")


@pytest.fixture
def tier(tmp_path):
    gw = Gateway(tmp_path / "gw", Backend("local")).start()
    yield gw
    gw.stop()


@pytest.fixture
def broker():
    with KeyBroker(evidence="attested") as b:
        yield b


def start_agent(workdir: Path, upstream: str, broker: KeyBroker,
                evidence_file: Path) -> EncryptedAgent:
    agent = EncryptedAgent(workdir, upstream, [ALICE], status_port=free_port())
    agent.encryption = (f'key_url = "{broker.url(RESOURCE)}"\n'
                        f'evidence_file = "{evidence_file}"')
    return agent.start()


def key_state(agent: Agent) -> dict:
    [row] = [t for t in agent.status()["tenants"] if t["tenant"] == "alice"]
    return row["encryption"]


def test_the_key_loads_with_the_evidence_and_never_reaches_the_disk(tmp_path, tier, broker):
    key = os.urandom(32)
    broker.put(RESOURCE, key)
    evidence = tmp_path / "evidence"
    evidence.write_text("attested\n")
    agent = start_agent(tmp_path / "agent", tier.endpoint, broker, evidence)
    try:
        state = key_state(agent)
        assert state["loaded"] is True, state
        assert state["source"] == "key_url"
        assert len(state["key_id"]) == 16, state
        assert key.hex() not in agent.operator("/status")
        assert 'sluice_agent_tenant_key_loaded{tenant="alice"} 1' in agent.metrics()
        node = agent.client(ALICE)
        node.create_bucket(Bucket="ckpt")
        body = os.urandom(300_000)
        node.put_object(Bucket="ckpt", Key="w.bin", Body=body)
        assert node.get_object(Bucket="ckpt", Key="w.bin")["Body"].read() == body
        agent.wait_drained("alice", timeout=30)
    finally:
        agent.stop()
    assert broker.answered[200] >= 1
    scanned = 0
    for path in (tmp_path / "agent").rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            scanned += 1
            assert key not in data and key.hex().encode() not in data, path
    assert scanned >= 3, scanned  # config, log, catalog, node id...


def test_a_refused_key_is_unavailable_then_loads_once_released(tmp_path, tier, broker):
    broker.put(RESOURCE, os.urandom(32))
    evidence = tmp_path / "evidence"
    evidence.write_text("forged")
    agent = start_agent(tmp_path / "agent", tier.endpoint, broker, evidence)
    try:
        state = key_state(agent)
        assert state["loaded"] is False, state
        assert "403" in state["error"] and RESOURCE in state["error"], state
        assert 'sluice_agent_tenant_key_loaded{tenant="alice"} 0' in agent.metrics()
        # The tenant's writes are refused, naming why, rather than written in clear.
        node = agent.client(ALICE)
        node.create_bucket(Bucket="ckpt")
        with pytest.raises(ClientError) as refused:
            node.put_object(Bucket="ckpt", Key="w.bin", Body=b"secret weights " * 1000)
        err = refused.value.response
        assert err["ResponseMetadata"]["HTTPStatusCode"] == 503, err
        assert "403" in err["Error"]["Message"], err
        assert broker.answered[403] >= 1
        # The broker's policy now accepts what the pod presents: retried, no restart.
        broker.expect_evidence("forged")
        deadline = time.monotonic() + 20
        while not key_state(agent)["loaded"]:
            assert time.monotonic() < deadline, key_state(agent)
            time.sleep(0.2)
        assert agent.proc.poll() is None
        node.put_object(Bucket="ckpt", Key="w.bin", Body=b"secret weights " * 1000)
        assert node.get_object(Bucket="ckpt", Key="w.bin")["Body"].read() == b"secret weights " * 1000
    finally:
        agent.stop()


def refused_for_the_key(node, key: str) -> bool:
    """Whether a read of `key` is refused because the tenant's key is unavailable."""
    try:
        node.get_object(Bucket="ckpt", Key=key)["Body"].read()
    except ClientError as e:
        assert e.response["ResponseMetadata"]["HTTPStatusCode"] == 503, e.response
        return True
    return False


def test_crypto_shred_at_the_broker_leaves_no_agent_able_to_decrypt(tmp_path, tier, broker):
    """Removing the tenant's key at the broker shreds it: both agents, the writer and one that
    reads only from the tier, drop the key at their next check and refuse every read, and an
    agent started afterwards has no key to load."""
    broker.put(RESOURCE, os.urandom(32))
    evidence = tmp_path / "evidence"
    evidence.write_text("attested")
    agents = [start_agent(tmp_path / "writer", tier.endpoint, broker, evidence)]
    try:
        writer = agents[0]
        node = writer.client(ALICE)
        node.create_bucket(Bucket="ckpt")
        bodies = {"big": os.urandom(3 * 1024 * 1024), "small": os.urandom(2000)}
        for k, v in bodies.items():
            node.put_object(Bucket="ckpt", Key=k, Body=v)
        writer.wait_drained("alice", timeout=60)
        agents.append(start_agent(tmp_path / "reader", tier.endpoint, broker, evidence))
        for agent in agents:
            for k, v in bodies.items():
                assert agent.client(ALICE).get_object(Bucket="ckpt", Key=k)["Body"].read() == v

        broker.remove(RESOURCE)
        deadline = time.monotonic() + 25  # the agents check a loaded key every 10 s
        for agent in agents:
            client = agent.client(ALICE)
            while not all(refused_for_the_key(client, k) for k in bodies):
                assert time.monotonic() < deadline, key_state(agent)
                time.sleep(0.2)
            assert key_state(agent)["loaded"] is False
            assert "404" in key_state(agent)["error"], key_state(agent)
        assert broker.answered[404] >= 2

        # A node started after the shred finds nothing to load either.
        agents.append(start_agent(tmp_path / "late", tier.endpoint, broker, evidence))
        assert key_state(agents[2])["loaded"] is False
        assert all(refused_for_the_key(agents[2].client(ALICE), k) for k in bodies)
        # What remains upstream is ciphertext only.
        upstream = tier.client(ALICE)
        for k, v in bodies.items():
            stored = upstream.get_object(Bucket="ckpt", Key=k)["Body"].read()
            assert stored[:4] == b"SLCE" and v[:64] not in stored
    finally:
        for agent in agents:
            agent.stop()
