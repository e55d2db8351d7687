"""Rollback detection end to end (issue #29): a gateway (the shared tier) and agents of a
confidential tenant as real processes, driven with boto3. An older ciphertext of an object put
back in the shared tier in place of the newer one — alone, or together with its directory's
older manifest — is refused by a read through an agent that has no local copy of it, with an
S3 InternalError naming the object and the rollback; the newer version read fine before.
What stays undetectable is pinned too: a node that never saw the newer manifest cannot tell a
manifest rolled back with its objects from the real one (docs/confidential.md)."""

from __future__ import annotations

import os

import pytest
from botocore.exceptions import ClientError

from harness import Backend, Gateway
from test_confidential import ALICE, start_agent

SHARD = "step-1/shard-0"
MANIFEST = "step-1/.sluice-manifest"


@pytest.fixture
def setup(tmp_path):
    gw = Gateway(tmp_path / "gw", Backend("local"), tenants=[ALICE]).start()
    key = tmp_path / "alice.key"
    key.write_bytes(os.urandom(32))
    writer = start_agent(tmp_path / "writer", gw, key)
    started = [writer]
    yield tmp_path, gw, writer, key, started
    for agent in started:
        agent.stop()
    gw.stop()


def stored(upstream, key: str):
    """An object as the shared tier holds it: its ciphertext and its metadata (the entry)."""
    got = upstream.get_object(Bucket="ckpt", Key=key)
    return got["Body"].read(), got["Metadata"]


def put_back(upstream, key: str, copy) -> None:
    """As whoever holds the shared tier might: an old body and its entry put back."""
    body, meta = copy
    upstream.put_object(Bucket="ckpt", Key=key, Body=body, Metadata=meta)


def refused(reader, key: str, why: str) -> None:
    with pytest.raises(ClientError) as e:
        reader.get_object(Bucket="ckpt", Key=key)["Body"].read()
    error = e.value.response["Error"]
    assert error["Code"] == "InternalError", error
    assert f"ckpt/{key}" in error["Message"] and "rollback" in error["Message"], error
    assert why in error["Message"], error


def test_an_older_generation_put_back_is_refused_on_restore(setup):
    tmp_path, gw, writer, key, started = setup
    node = writer.client(ALICE)
    node.create_bucket(Bucket="ckpt")
    v1, v2 = os.urandom(200 * 1024), os.urandom(200 * 1024)
    node.put_object(Bucket="ckpt", Key=SHARD, Body=v1)
    writer.wait_drained("alice")
    upstream = gw.client("alice")
    old_shard, old_manifest = stored(upstream, SHARD), stored(upstream, MANIFEST)
    node.put_object(Bucket="ckpt", Key=SHARD, Body=v2)
    writer.wait_drained("alice")
    assert stored(upstream, SHARD)[0] != old_shard[0]

    # A restore on another node (no local copy): the newest version reads.
    restorer = start_agent(tmp_path / "restorer", gw, key)
    started.append(restorer)
    reader = restorer.client(ALICE)
    assert reader.get_object(Bucket="ckpt", Key=SHARD)["Body"].read() == v2
    listed = [o["Key"] for o in reader.list_objects_v2(Bucket="ckpt")["Contents"]]
    assert listed == [SHARD], "the manifest is hidden from listings"

    # v1's ciphertext and entry put back in place of v2's: refused, never served.
    put_back(upstream, SHARD, old_shard)
    refused(reader, SHARD, "is not the newest written")
    with pytest.raises(ClientError) as e:
        reader.head_object(Bucket="ckpt", Key=SHARD)
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 500

    # The directory's older manifest put back too: the restorer has seen the newer one, and
    # remembers it across a restart.
    put_back(upstream, MANIFEST, old_manifest)
    refused(reader, SHARD, "below the 2 this node has seen")
    restorer.stop()
    restorer.start()
    refused(restorer.client(ALICE), SHARD, "below the 2 this node has seen")
    # The manifest deleted outright: refused as well.
    upstream.delete_object(Bucket="ckpt", Key=MANIFEST)
    refused(restorer.client(ALICE), SHARD, "is missing")

    # What is not detected, as docs/confidential.md says: a fresh node that never saw the
    # newer manifest, reading a directory rolled back whole (objects and manifest).
    put_back(upstream, MANIFEST, old_manifest)
    fresh = start_agent(tmp_path / "fresh", gw, key)
    started.append(fresh)
    assert fresh.client(ALICE).get_object(Bucket="ckpt", Key=SHARD)["Body"].read() == v1


def test_clients_cannot_write_or_read_a_manifest_through_the_agent(setup):
    _, gw, writer, _, _ = setup
    node = writer.client(ALICE)
    node.create_bucket(Bucket="ckpt")
    node.put_object(Bucket="ckpt", Key=SHARD, Body=b"x" * 1000)
    with pytest.raises(ClientError) as e:
        node.put_object(Bucket="ckpt", Key=MANIFEST, Body=b"{}")
    assert e.value.response["Error"]["Code"] == "InvalidArgument"
    assert "reserved" in e.value.response["Error"]["Message"]
    with pytest.raises(ClientError) as e:
        node.get_object(Bucket="ckpt", Key=MANIFEST)
    assert e.value.response["Error"]["Code"] == "NoSuchKey"
    with pytest.raises(ClientError) as e:
        node.delete_object(Bucket="ckpt", Key=MANIFEST)
    assert e.value.response["Error"]["Code"] == "InvalidArgument"
    writer.wait_drained("alice")
    # The shared tier holds it (ciphertext, like every body of the tenant).
    body, meta = stored(gw.client("alice"), MANIFEST)
    assert body[:4] == b"SLCE" and "sluice-confidential" in meta
