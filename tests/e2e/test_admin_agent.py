"""A node agent whose file holds no tenant's secret: it reads the tenants and their keys from
the gateway's control listener with its node credential (`sluice tenant node-token NODE`),
every second, and caches them. A tenant added online writes through the agent within 3 s, a
revoked key stops working there within 3 s, and with the gateway stopped the agent restarts
and serves from its cache. The node credential reads; it changes nothing. Every wait is a
poll of an observable condition with a deadline."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest
import requests
from botocore.exceptions import ClientError

from agent_harness import Agent
from harness import DEFAULT_TENANTS, Backend, Gateway, free_port, s3_client, sluice_bin

ALICE = DEFAULT_TENANTS[0]
WITHIN = 3.0
MiB = 1 << 20


def cli(gw: Gateway, *args: str) -> str:
    out = subprocess.run([sluice_bin(), "tenant", *args, "--config", str(gw.config_path)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, f"sluice tenant {' '.join(args)}: {out.stderr}"
    return out.stdout


def eventually(what, timeout: float = WITHIN):
    deadline = time.monotonic() + timeout
    while True:
        try:
            return what()
        except (ClientError, AssertionError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def refused_key(client, bucket: str):
    try:
        client.list_objects_v2(Bucket=bucket)
    except ClientError as e:
        assert e.response["Error"]["Code"] == "InvalidAccessKeyId", e.response
        return
    raise AssertionError("the key still works")


@pytest.fixture
def deployment(tmp_path):
    control = free_port()
    gw = Gateway(tmp_path / "gw", Backend("local"), tenants=[ALICE],
                 extra=f'metrics_listen = "127.0.0.1:{control}"\n').start()
    # The gateway binds its listeners before it creates its admin token in data_dir.
    made = gw.workdir / "data" / "admin.token"
    deadline = time.monotonic() + 10
    while not made.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    token = cli(gw, "node-token", "node-1").strip()
    cred = tmp_path / "node.cred"
    cred.write_text(token + "\n")
    cred.chmod(0o600)
    agent = Agent(tmp_path / "agent", gw.endpoint, tenants=[], status_port=free_port(),
                  extra=f'node_credential_file = "{cred}"\n'
                        f'gateway_control = "127.0.0.1:{control}"')
    try:
        yield gw, agent, token, f"http://127.0.0.1:{control}"
    finally:
        agent.stop()
        gw.stop()


def test_a_node_credential_reads_the_tenants_and_changes_nothing(deployment):
    gw, _, token, control = deployment
    url = f"{control}/admin/tenants"
    read = requests.get(url, headers={"Authorization": f"Bearer {token}"}, timeout=10)
    assert read.status_code == 200, read.text
    alice = next(t for t in read.json()["tenants"] if t["id"] == "alice")
    assert alice["keys"] == [{"access_key": ALICE.access_key, "secret_key": ALICE.secret_key}]
    assert requests.get(url, timeout=10).status_code == 401
    for other in [ALICE.secret_key, token[:-1] + ("0" if token[-1] != "0" else "1"),
                  token.replace("node-1", "node-2")]:
        r = requests.get(url, headers={"Authorization": f"Bearer {other}"}, timeout=10)
        assert r.status_code == 403, (other, r.text)
    body = json.dumps({"op": "add", "id": "mallory", "settings": {"capacity": 1}})
    for path in ["/admin", "/admin/tenants"]:
        r = requests.post(f"{control}{path}", data=body, timeout=10,
                          headers={"Authorization": f"Bearer {token}"})
        assert r.status_code in (403, 405), (path, r.status_code, r.text)
    names = [t["tenant"] for t in json.loads(cli(gw, "list", "--json"))]
    assert "mallory" not in names


def test_an_agent_without_secrets_serves_the_gateways_tenants_and_its_cache(deployment):
    gw, agent, _, _ = deployment
    agent.start()
    assert ALICE.secret_key not in agent.config_path.read_text()
    eventually(lambda: agent.client(ALICE).list_buckets())

    added = json.loads(cli(gw, "add", "dave", "--capacity", "4MiB", "--json"))
    first = (added["access_key"], added["secret_key"])
    dave = s3_client(agent.endpoint, *first)
    eventually(lambda: dave.create_bucket(Bucket="daves"))
    dave.put_object(Bucket="daves", Key="one", Body=b"through the agent")

    second_added = json.loads(cli(gw, "key", "add", "dave", "--json"))
    second = (second_added["access_key"], second_added["secret_key"])
    eventually(lambda: s3_client(agent.endpoint, *second).list_objects_v2(Bucket="daves"))
    cli(gw, "key", "revoke", "dave", first[0])
    eventually(lambda: refused_key(dave, "daves"))
    s3_client(agent.endpoint, *second).put_object(Bucket="daves", Key="two", Body=b"second")

    # What the agent wrote drains to the gateway with the tenant's live key.
    at_gateway = s3_client(gw.endpoint, *second)
    eventually(lambda: at_gateway.get_object(Bucket="daves", Key="two"), timeout=60)

    cache = agent.workdir / "data" / "tenants.cache"
    assert cache.stat().st_mode & 0o077 == 0
    assert second[1] in cache.read_text() and first[1] not in cache.read_text()

    gw.stop()
    agent.stop()
    agent.start()
    # No gateway answers: the cached keys are served (a write would need more of the shared
    # tier's quota than the node holds, so the node's own copy is read).
    got = s3_client(agent.endpoint, *second).get_object(Bucket="daves", Key="two")
    assert got["Body"].read() == b"second"
    refused_key(s3_client(agent.endpoint, *first), "daves")


def local_quota(agent: Agent, tenant: str):
    """The tenant's local quota in the agent's operator status."""
    return next(t for t in agent.status()["tenants"] if t["tenant"] == tenant)[
        "local_capacity_bytes"]


def quota_refused(client, bucket: str, key: str, body: bytes):
    try:
        client.put_object(Bucket=bucket, Key=key, Body=body)
    except ClientError as e:
        assert e.response["Error"]["Code"] == "QuotaExceeded", e.response
        return e.response
    raise AssertionError("the write went through")


def test_a_local_quota_set_online_holds_on_the_agent_and_a_raise_lets_the_write_through(
        deployment):
    gw, agent, _, _ = deployment
    agent.start()
    eventually(lambda: agent.client(ALICE).list_buckets())
    added = json.loads(cli(gw, "add", "erin", "--capacity", "64MiB", "--local-capacity", "1MiB",
                           "--json"))
    erin = s3_client(agent.endpoint, added["access_key"], added["secret_key"])
    eventually(lambda: erin.create_bucket(Bucket="erins"))
    # The tenant arrived with its local quota: the agent says so and refuses beyond it.
    assert local_quota(agent, "erin") == MiB
    body = os.urandom(2 * MiB)
    quota_refused(erin, "erins", "big", body)
    row = next(t for t in json.loads(cli(gw, "list", "--json")) if t["tenant"] == "erin")
    assert row["local_capacity"] == MiB and row["local_weight"] is None, row

    cli(gw, "set", "erin", "--local-capacity", "8MiB")
    start = time.monotonic()
    eventually(lambda: erin.put_object(Bucket="erins", Key="big", Body=body))
    assert time.monotonic() - start <= WITHIN + 0.5
    assert local_quota(agent, "erin") == 8 * MiB
    assert erin.get_object(Bucket="erins", Key="big")["Body"].read() == body

    history = [e for e in json.loads(cli(gw, "history", "erin", "--json"))]
    assert [e["action"] for e in history] == ["add", "set"], history
    assert history[1]["detail"]["before"]["local"]["local_capacity"] == MiB
    assert history[1]["detail"]["after"]["local"]["local_capacity"] == 8 * MiB

    # Bad values are refused with the key's name, and change nothing.
    for args, says in [(["--local-weight", "0"], "--local-weight"),
                       (["--local-reservation", "2MiB/s", "--local-limit", "1MiB/s"],
                        "--local-limit"),
                       (["--local-capacity", "lots"], "local-capacity")]:
        out = subprocess.run([sluice_bin(), "tenant", "set", "erin", *args,
                              "--config", str(gw.config_path)],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode != 0 and says in out.stderr, (args, out.stderr)
    assert local_quota(agent, "erin") == 8 * MiB
