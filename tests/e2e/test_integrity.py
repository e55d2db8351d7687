"""Integrity end to end: every read verified against the checksums taken at write.

Regression (issue #30): one byte flipped in a blob of the local-filesystem backend was served
with a 200 and the wrong bytes, and a CopyObject of it made a second corrupt object. Now a
GET that touches the bad chunk fails — a 5xx when the bad chunk is the first one sent, a
broken connection after — and a copy of it is refused. Never a 200 with wrong bytes."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import urllib.request

import pytest
from botocore.exceptions import ClientError

from harness import Backend, Gateway, free_port, sluice_bin

MiB = 1024 * 1024


@pytest.fixture
def gw(tmp_path):
    port = free_port()
    g = Gateway(tmp_path / "gw", Backend("local"), extra=f'metrics_listen = "127.0.0.1:{port}"')
    g.metrics_port = port
    g.start()
    yield g
    g.stop()


def integrity_errors(gw: Gateway, tenant: str) -> int:
    """`sluice_integrity_errors_total` of `tenant` on the gateway's metrics listener."""
    url = f"http://127.0.0.1:{gw.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    for line in text.splitlines():
        if line.startswith(f'sluice_integrity_errors_total{{tenant="{tenant}"}}'):
            return int(line.split()[-1])
    return 0


def segments_of(gw: Gateway, tenant: str, bucket: str, key: str) -> list[dict]:
    """The object's segments, from its recovery record in the backend."""
    root = gw.workdir / "data" / "objects" / "tenants" / tenant / bucket / "rec"
    records = sorted((root / hashlib.sha256(key.encode()).hexdigest()).glob("*.json"))
    assert records, f"no recovery record of {key}"
    return json.loads(records[-1].read_text())["segments"]


def flip(gw: Gateway, tenant: str, bucket: str, key: str, offset: int) -> None:
    """Flips one bit of the byte at `offset` of the object, in the blob that holds it."""
    base = 0
    for seg in segments_of(gw, tenant, bucket, key):
        if offset < base + seg["size"]:
            path = gw.workdir / "data" / "objects" / "tenants" / tenant / seg["blob"]
            with open(path, "r+b") as f:
                f.seek(offset - base)
                b = f.read(1)
                f.seek(offset - base)
                f.write(bytes([b[0] ^ 0x10]))
            return
        base += seg["size"]
    raise AssertionError(f"offset {offset} is past the object")


def assert_read_fails(s3, bucket: str, key: str, wrong: bytes, **kw) -> None:
    """The GET fails: an error status, or a body cut short by a broken connection. It never
    ends cleanly with the (corrupt) bytes."""
    try:
        resp = s3.get_object(Bucket=bucket, Key=key, **kw)
    except ClientError as e:
        assert e.response["ResponseMetadata"]["HTTPStatusCode"] >= 500, e.response
        return
    try:
        got = resp["Body"].read()
    except Exception:  # noqa: BLE001 — urllib3/botocore raise several kinds on a cut body
        return
    assert got != wrong, "the corrupt bytes were served whole with a 200"
    length = int(resp["ResponseMetadata"]["HTTPHeaders"]["content-length"])
    assert len(got) < length, "a clean end with wrong bytes"


def log_text(gw: Gateway) -> str:
    return (gw.workdir / "gateway.log").read_text(errors="replace")


@pytest.mark.parametrize("size,offset", [
    (100 * 1024, 50_000),          # small, but not inline (> 16 KiB): fails before the status
    (12 * MiB + 5, 9 * MiB + 77),  # large: the first grains go out, then the connection breaks
    (12 * MiB + 5, 100),           # large, bad byte in the first chunk: a 5xx
])
def test_a_flipped_byte_fails_the_get(gw, size, offset):
    s3 = gw.client("alice")
    s3.create_bucket(Bucket="bkt")
    body = os.urandom(size)
    s3.put_object(Bucket="bkt", Key="k", Body=body)
    assert s3.get_object(Bucket="bkt", Key="k")["Body"].read() == body
    flip(gw, "alice", "bkt", "k", offset)
    wrong = bytearray(body)
    wrong[offset] ^= 0x10
    assert_read_fails(s3, "bkt", "k", bytes(wrong))
    assert integrity_errors(gw, "alice") >= 1
    log = log_text(gw)
    assert "failed their checksum" in log
    assert 'key="k"' in log or "key=k" in log, log[-2000:]


def test_a_multipart_object_with_a_flipped_byte_in_its_second_part_fails(gw):
    s3 = gw.client("alice")
    s3.create_bucket(Bucket="bkt")
    parts = [os.urandom(5 * MiB), os.urandom(3 * MiB)]
    up = s3.create_multipart_upload(Bucket="bkt", Key="mp")
    done = []
    for i, p in enumerate(parts, 1):
        r = s3.upload_part(Bucket="bkt", Key="mp", UploadId=up["UploadId"], PartNumber=i, Body=p)
        done.append({"PartNumber": i, "ETag": r["ETag"]})
    s3.complete_multipart_upload(
        Bucket="bkt", Key="mp", UploadId=up["UploadId"], MultipartUpload={"Parts": done}
    )
    body = b"".join(parts)
    assert s3.get_object(Bucket="bkt", Key="mp")["Body"].read() == body
    segs = segments_of(gw, "alice", "bkt", "mp")
    assert len(segs) == 2 and all(s.get("checksums") for s in segs), segs
    offset = 5 * MiB + 2 * MiB + 3
    flip(gw, "alice", "bkt", "mp", offset)
    wrong = bytearray(body)
    wrong[offset] ^= 0x10
    assert_read_fails(s3, "bkt", "mp", bytes(wrong))
    # The first part alone is intact and still reads.
    first = s3.get_object(Bucket="bkt", Key="mp", Range=f"bytes=0-{5 * MiB - 1}")["Body"].read()
    assert first == parts[0]


def test_ranged_reads_fail_only_when_they_touch_the_bad_chunk(gw):
    s3 = gw.client("alice")
    s3.create_bucket(Bucket="bkt")
    body = os.urandom(10 * MiB)
    s3.put_object(Bucket="bkt", Key="k", Body=body)
    offset = 6 * MiB + 500
    flip(gw, "alice", "bkt", "k", offset)
    wrong = bytearray(body)
    wrong[offset] ^= 0x10
    # Touching the bad chunk, a few bytes of it or across it: refused.
    for lo, hi in [(offset - 10, offset + 10), (6 * MiB, 6 * MiB + 1), (5 * MiB, 8 * MiB)]:
        with pytest.raises(ClientError) as e:
            s3.get_object(Bucket="bkt", Key="k", Range=f"bytes={lo}-{hi}")
        assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 500
        assert e.value.response["Error"]["Code"] == "InternalError"
    # Not touching it (the chunks before and after, and the tail): served, exact.
    for lo, hi in [(0, 1000), (5 * MiB + 3, 6 * MiB - 1), (7 * MiB, 10 * MiB - 1)]:
        got = s3.get_object(Bucket="bkt", Key="k", Range=f"bytes={lo}-{hi}")["Body"].read()
        assert got == body[lo:hi + 1], (lo, hi)


def test_a_copy_of_a_corrupt_object_is_refused_not_propagated(gw):
    s3 = gw.client("alice")
    s3.create_bucket(Bucket="bkt")
    body = os.urandom(3 * MiB)
    s3.put_object(Bucket="bkt", Key="src", Body=body)
    flip(gw, "alice", "bkt", "src", 2 * MiB + 1)
    with pytest.raises(ClientError) as e:
        s3.copy_object(Bucket="bkt", Key="dst", CopySource={"Bucket": "bkt", "Key": "src"})
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 500
    with pytest.raises(ClientError) as e:
        s3.head_object(Bucket="bkt", Key="dst")
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    # UploadPartCopy of the bad range is refused too; of the intact range it works.
    up = s3.create_multipart_upload(Bucket="bkt", Key="mp")
    with pytest.raises(ClientError) as e:
        s3.upload_part_copy(
            Bucket="bkt", Key="mp", UploadId=up["UploadId"], PartNumber=1,
            CopySource={"Bucket": "bkt", "Key": "src"}, CopySourceRange=f"bytes={2 * MiB}-{3 * MiB - 1}",
        )
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 500
    s3.upload_part_copy(
        Bucket="bkt", Key="mp", UploadId=up["UploadId"], PartNumber=1,
        CopySource={"Bucket": "bkt", "Key": "src"}, CopySourceRange=f"bytes=0-{MiB - 1}",
    )
    s3.abort_multipart_upload(Bucket="bkt", Key="mp", UploadId=up["UploadId"])


def test_an_intact_object_and_its_copy_read_back_exactly(gw):
    s3 = gw.client("alice")
    s3.create_bucket(Bucket="bkt")
    body = os.urandom(5 * MiB + 3)
    s3.put_object(Bucket="bkt", Key="src", Body=body)
    s3.copy_object(Bucket="bkt", Key="dst", CopySource={"Bucket": "bkt", "Key": "src"})
    assert s3.get_object(Bucket="bkt", Key="dst")["Body"].read() == body
    segs = segments_of(gw, "alice", "bkt", "dst")
    assert len(segs[0]["checksums"]["values"]) == 6, segs


def scrub(gw: Gateway, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sluice_bin(), "scrub", "--config", str(gw.config_path), *args],
        capture_output=True, text=True, timeout=120,
    )


def test_scrub_exits_0_on_a_clean_store_and_names_corrupt_and_missing_objects(gw):
    s3 = gw.client("alice")
    s3.create_bucket(Bucket="bkt")
    s3.put_object(Bucket="bkt", Key="inline", Body=b"small")
    s3.put_object(Bucket="bkt", Key="rotten", Body=os.urandom(3 * MiB))
    s3.put_object(Bucket="bkt", Key="lost", Body=os.urandom(200_000))
    s3.put_object(Bucket="bkt", Key="fine", Body=os.urandom(2 * MiB))
    gw.client("bob").create_bucket(Bucket="bobs")
    gw.client("bob").put_object(Bucket="bobs", Key="x", Body=os.urandom(100_000))
    gw.stop()  # the embedded catalog's file is the gateway's while it runs

    clean = scrub(gw, "--json", "--rate", "64MiB/s")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    report = json.loads(clean.stdout)
    assert report["findings"] == []
    assert (report["objects"], report["inline_objects"]) == (5, 1)
    assert report["bytes"] == 3 * MiB + 200_000 + 2 * MiB + 100_000

    flip(gw, "alice", "bkt", "rotten", 2 * MiB + 5)
    lost = segments_of(gw, "alice", "bkt", "lost")[0]["blob"]
    (gw.workdir / "data" / "objects" / "tenants" / "alice" / lost).unlink()
    bad = scrub(gw, "--json")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    found = {(f["kind"], f["key"]) for f in json.loads(bad.stdout)["findings"]}
    assert found == {("corrupt", "rotten"), ("missing", "lost")}
    chunk = next(f for f in json.loads(bad.stdout)["findings"] if f["kind"] == "corrupt")
    assert chunk["chunk"] == 2 and chunk["tenant"] == "alice" and chunk["bucket"] == "bkt"

    text = scrub(gw)
    assert text.returncode == 1
    assert "corrupt: alice/bkt/rotten" in text.stdout and "missing: alice/bkt/lost" in text.stdout
    # Another tenant's store is clean.
    only_bob = scrub(gw, "--tenant", "bob", "--json")
    assert only_bob.returncode == 0, only_bob.stdout + only_bob.stderr
    assert json.loads(only_bob.stdout)["objects"] == 1
    assert scrub(gw, "--tenant", "nobody").returncode != 0
