"""Confidential bodies end to end (issue #29): a gateway (the shared tier) and an agent whose
tenant has `[tenant.encryption]` as real processes, driven with boto3. Neither the agent's
disk nor the gateway's holds any plaintext once the drain is done; the agent reads every
object back exactly, whole and in ranges across segment boundaries, and so does a second
agent that has no local copy (from the tier); the gateway itself serves ciphertext; and a
ciphertext altered or copied under another key in the shared tier fails the read."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from botocore.exceptions import BotoCoreError, ClientError

from agent_harness import Agent
from harness import Backend, Gateway, Tenant, free_port

MiB = 1024 * 1024
SEGMENT = 64 * 1024
ALICE = Tenant("alice", "AKIDALICE000000CONF", "alice-secret-confidential")


class EncryptedAgent(Agent):
    """An agent whose only tenant has `[tenant.encryption] key_file`."""

    key_file: Path | None = None

    def write_config(self) -> None:
        super().write_config()
        with self.config_path.open("a") as f:
            f.write(f'[tenant.encryption]\nkey_file = "{self.key_file}"\n')


def start_agent(workdir: Path, gw: Gateway, key_file: Path) -> EncryptedAgent:
    agent = EncryptedAgent(workdir, gw.endpoint, [ALICE], status_port=free_port())
    agent.key_file = key_file
    return agent.start()


def stored_len(plain: int) -> int:
    return 80 + plain + 16 * max(1, -(-plain // SEGMENT))


def files_under(root: Path):
    for p in root.rglob("*"):
        if p.is_file():
            yield p


@pytest.fixture
def setup(tmp_path):
    gw = Gateway(tmp_path / "gw", Backend("local"), tenants=[ALICE]).start()
    key = tmp_path / "alice.key"
    key.write_bytes(os.urandom(32))
    agent = start_agent(tmp_path / "agent", gw, key)
    yield tmp_path, gw, agent, key
    agent.stop()
    gw.stop()


def test_no_plaintext_at_rest_and_exact_reads_here_and_from_the_tier(setup):
    tmp_path, gw, agent, key = setup
    node = agent.client(ALICE)
    node.create_bucket(Bucket="ckpt")
    # 20 MiB: the drain sends it up in parts; 100 KiB: a blob; 3 KiB: inline; and empty.
    bodies = {f"shard-{n}": os.urandom(n) for n in (20 * MiB, 100 * 1024, 3000, 0)}
    for name, body in bodies.items():
        node.put_object(Bucket="ckpt", Key=name, Body=body)
    agent.wait_drained("alice")

    probes = [body[i:i + 32] for body in bodies.values() if body
              for i in range(0, len(body) - 32, max(1, len(body) // 7))]
    for root in (tmp_path / "gw", tmp_path / "agent"):
        for f in files_under(root):
            data = f.read_bytes()
            for p in probes:
                assert p not in data, f"plaintext in {f}"

    upstream = gw.client("alice")
    for name, body in bodies.items():
        raw = upstream.get_object(Bucket="ckpt", Key=name)["Body"].read()
        assert len(raw) == stored_len(len(body)) and raw[:4] == b"SLCE", name

    second = start_agent(tmp_path / "agent2", gw, key)
    try:
        for reader in (node, second.client(ALICE)):
            listed = {o["Key"]: o["Size"]
                      for o in reader.list_objects_v2(Bucket="ckpt").get("Contents", [])}
            assert listed == {k: len(v) for k, v in bodies.items()}
            for name, body in bodies.items():
                assert reader.head_object(Bucket="ckpt", Key=name)["ContentLength"] == len(body)
                assert reader.get_object(Bucket="ckpt", Key=name)["Body"].read() == body, name
                n = len(body)
                for a, b in [(0, 0), (SEGMENT - 3, SEGMENT + 2), (n // 3, 2 * n // 3),
                             (n - 1, n - 1), (5, 3 * SEGMENT + 7)]:
                    if n == 0 or b >= n:
                        continue
                    got = reader.get_object(Bucket="ckpt", Key=name, Range=f"bytes={a}-{b}")
                    assert got["Body"].read() == body[a:b + 1], (name, a, b)
    finally:
        second.stop()


def test_ciphertext_altered_or_moved_in_the_shared_tier_is_refused(setup):
    tmp_path, gw, agent, key = setup
    node = agent.client(ALICE)
    node.create_bucket(Bucket="ckpt")
    bodies = {k: os.urandom(300 * 1024) for k in ("flipped", "cut")}
    for name, body in bodies.items():
        node.put_object(Bucket="ckpt", Key=name, Body=body)
    agent.wait_drained("alice")
    upstream = gw.client("alice")
    second = start_agent(tmp_path / "agent2", gw, key)
    try:
        reader = second.client(ALICE)
        stored = {}
        for name, body in bodies.items():
            assert reader.get_object(Bucket="ckpt", Key=name)["Body"].read() == body
            got = upstream.get_object(Bucket="ckpt", Key=name)
            stored[name] = (got["Body"].read(), got["Metadata"])
            assert "sluice-confidential" in stored[name][1]

        # As whoever holds the shared tier might: a flipped byte in the third segment, the
        # last half segment cut off, and one object's ciphertext copied under another key.
        raw, meta = stored["flipped"]
        flipped = bytearray(raw)
        flipped[80 + 2 * (SEGMENT + 16) + 5] ^= 1
        upstream.put_object(Bucket="ckpt", Key="flipped", Body=bytes(flipped), Metadata=meta)
        raw, meta = stored["cut"]
        upstream.put_object(Bucket="ckpt", Key="cut", Body=raw[:-(SEGMENT // 2)], Metadata=meta)
        upstream.put_object(Bucket="ckpt", Key="moved", Body=raw, Metadata=meta)

        # Found before the status line (the header; the length the entry records): a clear
        # S3 error.
        for name in ("cut", "moved"):
            with pytest.raises(ClientError) as e:
                reader.get_object(Bucket="ckpt", Key=name)["Body"].read()
            error = e.value.response["Error"]
            assert error["Code"] == "InternalError", error
            assert "does not authenticate" in error["Message"] \
                or "does not have the length" in error["Message"], error
        # Found at the third segment, after the first went out: the connection breaks; the
        # body never ends cleanly.
        with pytest.raises(BotoCoreError):
            reader.get_object(Bucket="ckpt", Key="flipped")["Body"].read()
        # A range of "flipped" before the flipped segment still reads exactly; one over it
        # fails.
        got = reader.get_object(Bucket="ckpt", Key="flipped", Range="bytes=0-99")
        assert got["Body"].read() == bodies["flipped"][:100]
        with pytest.raises(ClientError):  # the first segment it needs: before the status line
            reader.get_object(Bucket="ckpt", Key="flipped",
                              Range=f"bytes={2 * SEGMENT}-{2 * SEGMENT + 9}")["Body"].read()
    finally:
        second.stop()


def test_multipart_uploads_and_copies_read_back_exactly_and_leave_no_plaintext(setup):
    import io

    from boto3.s3.transfer import TransferConfig

    tmp_path, gw, agent, key = setup
    node = agent.client(ALICE)
    node.create_bucket(Bucket="ckpt")
    # 17 MiB in 5 MiB parts (5, 5, 5, 2): each part its own encrypted stream.
    body = os.urandom(17 * MiB)
    config = TransferConfig(multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB)
    node.upload_fileobj(io.BytesIO(body), "ckpt", "big", Config=config)
    assert node.head_object(Bucket="ckpt", Key="big")["ETag"].strip('"').endswith("-4")
    node.copy_object(Bucket="ckpt", Key="big-copy", CopySource={"Bucket": "ckpt", "Key": "big"})
    agent.wait_drained("alice")

    probes = [body[i:i + 32] for i in range(0, len(body) - 32, len(body) // 23)]
    for root in (tmp_path / "gw", tmp_path / "agent"):
        for f in files_under(root):
            data = f.read_bytes()
            for p in probes:
                assert p not in data, f"plaintext in {f}"
    upstream = gw.client("alice")
    raw = upstream.get_object(Bucket="ckpt", Key="big")["Body"].read()
    assert len(raw) == 3 * stored_len(5 * MiB) + stored_len(2 * MiB) and raw[:4] == b"SLCE"

    second = start_agent(tmp_path / "agent2", gw, key)
    try:
        for reader in (node, second.client(ALICE)):
            listed = {o["Key"]: o["Size"]
                      for o in reader.list_objects_v2(Bucket="ckpt").get("Contents", [])}
            assert listed == {"big": len(body), "big-copy": len(body)}
            for name in ("big", "big-copy"):
                assert reader.head_object(Bucket="ckpt", Key=name)["ContentLength"] == len(body)
                assert reader.get_object(Bucket="ckpt", Key=name)["Body"].read() == body, name
                for a, b in [(5 * MiB - 1, 5 * MiB), (5 * MiB - 100, 5 * MiB + SEGMENT + 7),
                             (SEGMENT - 3, SEGMENT + 2), (3 * MiB, 11 * MiB),
                             (len(body) - 1, len(body) - 1)]:
                    got = reader.get_object(Bucket="ckpt", Key=name, Range=f"bytes={a}-{b}")
                    assert got["Body"].read() == body[a:b + 1], (name, a, b)
        # A ranged UploadPartCopy takes plaintext bytes of the source.
        up = node.create_multipart_upload(Bucket="ckpt", Key="spliced")["UploadId"]
        a, b = 1000, 1000 + 6 * MiB - 1
        p1 = node.upload_part_copy(Bucket="ckpt", Key="spliced", UploadId=up, PartNumber=1,
                                   CopySource={"Bucket": "ckpt", "Key": "big"},
                                   CopySourceRange=f"bytes={a}-{b}")
        p2 = node.upload_part(Bucket="ckpt", Key="spliced", UploadId=up, PartNumber=2,
                              Body=b"tail")
        node.complete_multipart_upload(
            Bucket="ckpt", Key="spliced", UploadId=up,
            MultipartUpload={"Parts": [
                {"PartNumber": 1, "ETag": p1["CopyPartResult"]["ETag"]},
                {"PartNumber": 2, "ETag": p2["ETag"]}]})
        got = node.get_object(Bucket="ckpt", Key="spliced")["Body"].read()
        assert got == body[a:b + 1] + b"tail"
    finally:
        second.stop()


def test_multipart_parts_swapped_in_the_shared_tier_fail_the_read(setup):
    import io

    from boto3.s3.transfer import TransferConfig

    tmp_path, gw, agent, key = setup
    node = agent.client(ALICE)
    node.create_bucket(Bucket="ckpt")
    body = os.urandom(11 * MiB)
    config = TransferConfig(multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB)
    node.upload_fileobj(io.BytesIO(body), "ckpt", "big", Config=config)
    agent.wait_drained("alice")
    upstream = gw.client("alice")
    got = upstream.get_object(Bucket="ckpt", Key="big")
    raw, meta = got["Body"].read(), got["Metadata"]
    part = stored_len(5 * MiB)
    # As whoever holds the shared tier might: the first two parts' streams swapped.
    swapped = raw[part:2 * part] + raw[:part] + raw[2 * part:]
    upstream.put_object(Bucket="ckpt", Key="big", Body=swapped, Metadata=meta)
    second = start_agent(tmp_path / "agent2", gw, key)
    try:
        reader = second.client(ALICE)
        for rng in (None, "bytes=0-99", f"bytes={5 * MiB + 7}-{5 * MiB + 9}"):
            args = {"Range": rng} if rng else {}
            with pytest.raises(ClientError) as e:
                reader.get_object(Bucket="ckpt", Key="big", **args)["Body"].read()
            error = e.value.response["Error"]
            assert error["Code"] == "InternalError", error
            assert "does not authenticate" in error["Message"], error
        # The third part, untouched, still reads exactly.
        a = 10 * MiB + 5
        got = reader.get_object(Bucket="ckpt", Key="big", Range=f"bytes={a}-{a + 99}")
        assert got["Body"].read() == body[a:a + 100]
    finally:
        second.stop()
