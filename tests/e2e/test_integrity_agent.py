"""Integrity through the node agent: its local copies and the shared tier behind it.

Regression (issue #30): a byte flipped in a stored blob was served with a 200 and the wrong
bytes, through the gateway and through an agent reading from the shared tier. The agent
serves the gateway's own front over its local store, so its local reads are verified the
same way; these tests prove it end to end and cover what only the agent does: a GET of an
object only the shared tier has (the gateway refuses or breaks its connection, and the agent
must pass that on, never end cleanly), a copy of such an object, the drain's read-back of a
corrupt local copy (never uploaded, reported in status, logged at error, counted) and a
restore after a restart reading a local copy that rotted while the agent was down."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import pytest
from botocore.exceptions import ClientError

from agent_harness import Agent
from harness import DEFAULT_TENANTS, Backend, Gateway, free_port
from test_integrity import assert_read_fails, flip, integrity_errors

MiB = 1024 * 1024
ALICE = DEFAULT_TENANTS[0]


@pytest.fixture
def gw(tmp_path):
    port = free_port()
    g = Gateway(tmp_path / "gw", Backend("local"), extra=f'metrics_listen = "127.0.0.1:{port}"')
    g.metrics_port = port
    g.start()
    yield g
    g.stop()


@pytest.fixture
def agent(tmp_path, gw):
    a = Agent(tmp_path / "agent", gw.endpoint, DEFAULT_TENANTS, status_port=free_port()).start()
    yield a
    a.stop()


def local_blob(agent: Agent, tenant: str, content: bytes) -> Path:
    """The file in the agent's local store that holds exactly `content` (a blob's bytes:
    an object's, or one part's of a multipart object). The agent writes no recovery records,
    so its blobs are found by what they hold."""
    root = agent.workdir / "data" / "objects" / "tenants" / tenant
    want = hashlib.sha256(content).digest()
    found = [p for p in root.rglob("*")
             if p.is_file() and p.stat().st_size == len(content)
             and hashlib.sha256(p.read_bytes()).digest() == want]
    assert len(found) == 1, f"{len(found)} local blobs hold these {len(content)} bytes: {found}"
    return found[0]


def flip_local(agent: Agent, tenant: str, content: bytes, offset: int) -> bytes:
    """Flips one bit of the byte at `offset` of the local blob holding `content`; returns the
    corrupt bytes as a GET would wrongly serve them."""
    path = local_blob(agent, tenant, content)
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x10]))
    wrong = bytearray(content)
    wrong[offset] ^= 0x10
    return bytes(wrong)


def agent_counter(agent: Agent, name: str, tenant: str) -> int:
    """A per-tenant counter on the agent's operator metrics (0 when absent)."""
    for line in agent.metrics().splitlines():
        if line.startswith(f'{name}{{tenant="{tenant}"}}'):
            return int(float(line.split()[-1]))
    return 0


def agent_log(agent: Agent) -> str:
    return (agent.workdir / "agent.log").read_text(errors="replace")


def wait_for(what: str, condition, timeout: float = 30.0):
    """Polls an observable condition; returns its first truthy value."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s: {what}")
        time.sleep(0.1)


# ---- the agent's local copies ----------------------------------------------------------


@pytest.mark.parametrize("size,offset", [
    (100 * 1024, 50_000),          # small (not inline): refused before the status line
    (12 * MiB + 5, 9 * MiB + 77),  # large: the first grains go out, then the connection breaks
    (12 * MiB + 5, 100),           # large, bad byte in the first chunk: a 5xx
])
def test_a_flipped_byte_in_the_agents_local_copy_fails_the_get(gw, agent, size, offset):
    node = agent.client(ALICE)
    node.create_bucket(Bucket="bkt")
    body = os.urandom(size)
    node.put_object(Bucket="bkt", Key="k", Body=body)
    agent.wait_drained("alice")  # durable upstream; the local copy stays (not evicted)
    assert node.get_object(Bucket="bkt", Key="k")["Body"].read() == body
    wrong = flip_local(agent, "alice", body, offset)
    assert_read_fails(node, "bkt", "k", wrong)
    assert agent_counter(agent, "sluice_integrity_errors_total", "alice") >= 1
    log = agent_log(agent)
    assert "failed their checksum" in log
    assert 'key="k"' in log or "key=k" in log, log[-2000:]
    # The rot stayed on the node: the shared tier's copy is intact.
    assert gw.client("alice").get_object(Bucket="bkt", Key="k")["Body"].read() == body


def test_a_multipart_object_on_the_agent_fails_where_its_part_rotted(gw, agent):
    node = agent.client(ALICE)
    node.create_bucket(Bucket="bkt")
    parts = [os.urandom(5 * MiB), os.urandom(3 * MiB + 1)]
    up = node.create_multipart_upload(Bucket="bkt", Key="mp")
    done = []
    for i, p in enumerate(parts, 1):
        r = node.upload_part(Bucket="bkt", Key="mp", UploadId=up["UploadId"], PartNumber=i, Body=p)
        done.append({"PartNumber": i, "ETag": r["ETag"]})
    node.complete_multipart_upload(
        Bucket="bkt", Key="mp", UploadId=up["UploadId"], MultipartUpload={"Parts": done}
    )
    agent.wait_drained("alice")
    flip_local(agent, "alice", parts[1], 2 * MiB + 3)
    wrong = bytearray(b"".join(parts))
    wrong[5 * MiB + 2 * MiB + 3] ^= 0x10
    assert_read_fails(node, "bkt", "mp", bytes(wrong))
    # The intact first part still reads, exactly.
    first = node.get_object(Bucket="bkt", Key="mp", Range=f"bytes=0-{5 * MiB - 1}")["Body"].read()
    assert first == parts[0]


def test_ranged_reads_on_the_agent_fail_only_when_they_touch_the_bad_chunk(gw, agent):
    node = agent.client(ALICE)
    node.create_bucket(Bucket="bkt")
    body = os.urandom(10 * MiB)
    node.put_object(Bucket="bkt", Key="k", Body=body)
    agent.wait_drained("alice")
    offset = 6 * MiB + 500
    flip_local(agent, "alice", body, offset)
    for lo, hi in [(offset - 10, offset + 10), (6 * MiB, 6 * MiB + 1), (5 * MiB, 8 * MiB)]:
        with pytest.raises(ClientError) as e:
            node.get_object(Bucket="bkt", Key="k", Range=f"bytes={lo}-{hi}")
        assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 500
        assert e.value.response["Error"]["Code"] == "InternalError"
    for lo, hi in [(0, 1000), (5 * MiB + 3, 6 * MiB - 1), (7 * MiB, 10 * MiB - 1)]:
        got = node.get_object(Bucket="bkt", Key="k", Range=f"bytes={lo}-{hi}")["Body"].read()
        assert got == body[lo:hi + 1], (lo, hi)


def test_a_copy_on_the_agent_of_a_corrupt_local_object_is_refused(gw, agent):
    node = agent.client(ALICE)
    node.create_bucket(Bucket="bkt")
    body = os.urandom(3 * MiB)
    node.put_object(Bucket="bkt", Key="src", Body=body)
    agent.wait_drained("alice")
    flip_local(agent, "alice", body, 2 * MiB + 1)
    with pytest.raises(ClientError) as e:
        node.copy_object(Bucket="bkt", Key="dst", CopySource={"Bucket": "bkt", "Key": "src"})
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 500
    for s3 in (node, gw.client("alice")):
        with pytest.raises(ClientError) as e:
            s3.head_object(Bucket="bkt", Key="dst")
        assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404


def test_a_restore_after_a_restart_refuses_a_local_copy_that_rotted_meanwhile(gw, agent):
    node = agent.client(ALICE)
    node.create_bucket(Bucket="ckpt")
    shard = os.urandom(6 * MiB + 7)
    node.put_object(Bucket="ckpt", Key="step-1/shard-0", Body=shard)
    agent.wait_drained("alice")
    agent.stop()
    wrong = flip_local(agent, "alice", shard, 4 * MiB + 9)
    agent.start()
    node = agent.client(ALICE)
    assert_read_fails(node, "ckpt", "step-1/shard-0", wrong)
    assert agent_counter(agent, "sluice_integrity_errors_total", "alice") >= 1
    # The checkpoint is whole on the shared tier, for a restore from there.
    got = gw.client("alice").get_object(Bucket="ckpt", Key="step-1/shard-0")["Body"].read()
    assert got == shard


# ---- the shared tier behind the agent --------------------------------------------------


@pytest.mark.parametrize("size,offset", [
    (100 * 1024, 50_000),          # the gateway refuses before its status line
    (12 * MiB + 5, 100),           # likewise, bad byte in the first chunk
    (12 * MiB + 5, 9 * MiB + 77),  # the gateway breaks its connection mid-body
])
def test_an_object_only_on_the_shared_tier_that_rotted_fails_through_the_agent(
        gw, agent, size, offset):
    up = gw.client("alice")
    up.create_bucket(Bucket="bkt")
    body = os.urandom(size)
    up.put_object(Bucket="bkt", Key="k", Body=body)
    node = agent.client(ALICE)
    assert node.get_object(Bucket="bkt", Key="k")["Body"].read() == body
    flip(gw, "alice", "bkt", "k", offset)
    wrong = bytearray(body)
    wrong[offset] ^= 0x10
    # Never a 200 with the wrong bytes, nor a clean end with a short body.
    assert_read_fails(node, "bkt", "k", bytes(wrong))
    assert integrity_errors(gw, "alice") >= 1
    # A range away from the bad chunk (a small object is one chunk) still reads, exactly.
    if size > MiB:
        lo, hi = (0, 1000) if offset > MiB else (size - 1000, size - 1)
        got = node.get_object(Bucket="bkt", Key="k", Range=f"bytes={lo}-{hi}")["Body"].read()
        assert got == body[lo:hi + 1]


@pytest.mark.parametrize("offset", [100, 9 * MiB + 77])
def test_a_copy_on_the_agent_of_a_rotted_shared_tier_object_is_refused(gw, agent, offset):
    """Regression: a source the gateway cut short mid-body was taken for the client's broken
    request body (400); it is the tier's failure, and nothing is written."""
    up = gw.client("alice")
    up.create_bucket(Bucket="bkt")
    body = os.urandom(12 * MiB + 5)
    up.put_object(Bucket="bkt", Key="src", Body=body)
    flip(gw, "alice", "bkt", "src", offset)
    node = agent.client(ALICE)
    with pytest.raises(ClientError) as e:
        node.copy_object(Bucket="bkt", Key="dst", CopySource={"Bucket": "bkt", "Key": "src"})
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] >= 500, e.value.response
    for s3 in (node, up):
        with pytest.raises(ClientError) as e:
            s3.head_object(Bucket="bkt", Key="dst")
        assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404


# ---- the drain -------------------------------------------------------------------------


def test_the_drain_never_uploads_a_local_copy_that_fails_its_checksum(gw, agent):
    node = agent.client(ALICE)
    node.create_bucket(Bucket="bkt")
    # A first write while the gateway answers: the agent takes shared-tier quota for it and
    # more, so it goes on acknowledging within that while the gateway is down.
    node.put_object(Bucket="bkt", Key="first", Body=b"before the outage")
    agent.wait_drained("alice")
    gw.stop()
    body = os.urandom(3 * MiB)
    node.put_object(Bucket="bkt", Key="k", Body=body)
    # The drain has met the stopped gateway (it read the copy back, intact, and failed to
    # send it); now the copy rots before the gateway returns.
    wait_for("the drain failing against the stopped gateway",
             lambda: agent.tenant_status("alice")["last_error"])
    flip_local(agent, "alice", body, MiB + 12)
    gw.start()
    attempts = agent.tenant_status("alice")["drain_errors_total"]
    # An attempt with the gateway up again: the read-back fails its checksum, nothing is sent.
    row = wait_for(
        "a drain attempt after the gateway returned, refused by the checksum",
        lambda: (lambda t: t if t["drain_errors_total"] > attempts
                 and "checksum" in (t["last_error"] or {}).get("message", "") else None)(
            agent.tenant_status("alice")),
        timeout=40.0,
    )
    assert row["last_error"]["permanent"], row
    assert row["last_error"]["key"] == "bkt/k", row
    assert row["pending_ops"] == 1 and row["pending_bytes"] == 3 * MiB, row
    assert row["integrity_errors_total"] >= 1, row
    with pytest.raises(ClientError) as e:
        gw.client("alice").head_object(Bucket="bkt", Key="k")
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    assert agent_counter(agent, "sluice_integrity_errors_total", "alice") >= 1
    errors = [line for line in agent_log(agent).splitlines()
              if "ERROR" in line and "failed their checksum" in line]
    assert errors and any("key=k" in line or 'key="k"' in line for line in errors), errors
