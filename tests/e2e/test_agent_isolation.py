"""Two tenants on one node agent: the node's local device is shared by the agent's own
scheduler (`[agent.capacity]`, per tenant `local_reservation`, `local_weight`,
`local_limit`), not by arrival order. The agent's local store sits behind an emulated device
(`[agent.emulate]`) slow enough for one tenant to saturate it, so the shares are visible in
what each tenant gets through the agent's S3 listener."""

import re
import subprocess
import threading
import time

import pytest

from agent_harness import Agent, LocalSpec
from harness import DEFAULT_TENANTS, Backend, Gateway, free_port, sluice_bin

MiB = 1024 * 1024
ALICE, BOB = DEFAULT_TENANTS[0], DEFAULT_TENANTS[1]
# A 32 MiB/s device with 256 KiB grains, scheduled at its own capacity.
NODE = """[agent.capacity]
bandwidth = "32MiB/s"
ops = 4000
grain = "256KiB"
queue_depth = 1024
[agent.emulate]
bandwidth = "32MiB/s"
ops = 4000"""


@pytest.fixture
def tier(tmp_path):
    gw = Gateway(tmp_path / "gw", Backend("local")).start()
    yield gw
    gw.stop()


# Slow enough that both clients keep it saturated on a loaded machine: a tenant whose bytes
# arrive slower than its share leaves the rest to its neighbour (the scheduler is work
# conserving), which would blur the shares this measures.
SLOW_NODE = NODE.replace('"32MiB/s"', '"8MiB/s"')


def start_agent(tmp_path, gw, local: dict[str, LocalSpec], node: str = NODE) -> Agent:
    return Agent(tmp_path / "agent", gw.endpoint, [ALICE, BOB], local=local,
                 status_port=free_port(), extra=node).start()


def received(agent: Agent, tenant: str) -> int:
    """Body bytes the agent's front admitted from `tenant` (its `/metrics`)."""
    m = re.search(rf'^sluice_received_bytes_total{{tenant="{tenant}"}} (\d+)$', agent.metrics(),
                  re.M)
    assert m, agent.metrics()
    return int(m.group(1))


def write_all(client, bucket: str, prefix: str, n: int, size: int, errors: list) -> None:
    """`n` objects of `size` written at once, one thread each."""
    def put(i):
        try:
            client.put_object(Bucket=bucket, Key=f"{prefix}/obj-{i}", Body=b"x" * size)
        except Exception as e:  # reported by the test, not lost in a thread
            errors.append(e)
    threads = [threading.Thread(target=put, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def test_a_heavier_tenant_gets_most_of_a_saturated_node_while_both_write(tmp_path, tier):
    agent = start_agent(tmp_path, tier, {
        "alice": LocalSpec(local_weight=8),
        "bob": LocalSpec(local_weight=1),
    }, node=SLOW_NODE)
    try:
        a, b = agent.client(ALICE), agent.client(BOB)
        a.create_bucket(Bucket="alice-ckpt")
        b.create_bucket(Bucket="bob-ckpt")
        before = received(agent, "bob")
        errors: list = []
        # Bob's burst is in flight first, and larger: in arrival order he would be served
        # first; by weight Alice gets eight grains of the device for each of his.
        bob = threading.Thread(target=write_all, args=(b, "bob-ckpt", "ckpt", 4, 6 * MiB, errors))
        bob.start()
        deadline = time.monotonic() + 30
        while received(agent, "bob") == before and time.monotonic() < deadline:
            time.sleep(0.01)  # polling an observable condition: Bob's bytes are flowing
        bob_at_alice_start = received(agent, "bob") - before
        write_all(a, "alice-ckpt", "ckpt", 4, 3 * MiB, errors)
        bob_during_alice = received(agent, "bob") - before - bob_at_alice_start
        bob.join()
        assert not errors, errors
        # Alice moved 12 MiB; at 8:1 Bob gets about 1.5 MiB meanwhile. In arrival order (or
        # equal shares) he would have moved at least as much as she did.
        assert bob_during_alice < 6 * MiB, (bob_during_alice, bob_at_alice_start)
        assert received(agent, "bob") - before == 24 * MiB
    finally:
        agent.stop()


def test_a_local_limit_caps_its_tenant_on_the_node_and_leaves_the_rest(tmp_path, tier):
    agent = start_agent(tmp_path, tier, {
        "alice": LocalSpec(local_reservation="8MiB/s"),
        "bob": LocalSpec(local_limit="4MiB/s"),
    })
    try:
        a, b = agent.client(ALICE), agent.client(BOB)
        a.create_bucket(Bucket="alice-ckpt")
        b.create_bucket(Bucket="bob-ckpt")
        errors: list = []
        started = time.monotonic()
        bob = threading.Thread(target=write_all, args=(b, "bob-ckpt", "ckpt", 2, 8 * MiB, errors))
        bob.start()
        # Alice, unlimited, writes and reads back 16 MiB meanwhile.
        write_all(a, "alice-ckpt", "data", 2, 8 * MiB, errors)
        body = a.get_object(Bucket="alice-ckpt", Key="data/obj-0")["Body"].read()
        alice_done = time.monotonic() - started
        bob.join()
        bob_done = time.monotonic() - started
        assert not errors, errors
        assert body == b"x" * 8 * MiB
        # 16 MiB at 4 MiB/s: no less than about four seconds, however fast the machine (the
        # first grains are granted at once, hence a little under).
        assert bob_done >= 3.5, bob_done
        # Alice's 24 MiB on the 28 MiB/s Bob leaves: done well before him.
        assert alice_done < bob_done, (alice_done, bob_done)
    finally:
        agent.stop()


def test_local_reservations_beyond_the_nodes_capacity_refuse_the_start(tmp_path, tier):
    agent = Agent(tmp_path / "agent", tier.endpoint, [ALICE, BOB], local={
        "alice": LocalSpec(local_reservation="20MiB/s"),
        "bob": LocalSpec(local_reservation="20MiB/s"),
    }, extra=NODE)
    agent.write_config()
    run = subprocess.run([sluice_bin(), "agent", "--config", str(agent.config_path)],
                         capture_output=True, text=True, timeout=30)
    assert run.returncode != 0
    out = run.stdout + run.stderr
    assert "tenant.local_reservation: local reservations sum to" in out, out
    assert "agent.capacity.bandwidth" in out, out


def test_a_local_share_without_the_nodes_capacity_is_refused_naming_the_key(tmp_path, tier):
    agent = Agent(tmp_path / "agent", tier.endpoint, [ALICE, BOB],
                  local={"bob": LocalSpec(local_weight=4)})
    agent.write_config()
    run = subprocess.run([sluice_bin(), "agent", "--config", str(agent.config_path)],
                         capture_output=True, text=True, timeout=30)
    assert run.returncode != 0
    out = run.stdout + run.stderr
    assert 'tenant[1] "bob": local_weight' in out, out
    assert "[agent.capacity]" in out, out
