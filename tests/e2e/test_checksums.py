"""Additional checksums (`x-amz-checksum-*`), as current SDKs send them on every upload.

Regression: sluice accepted them without looking, so a body that did not match the checksum
its client computed was stored (S3 refuses it with BadDigest), and the verified checksum was
not echoed in responses. Each test drives boto3 exactly as it sends them: a header over plain
HTTP, an aws-chunked trailer over TLS (reproduced here through botocore's own event hook)."""

import base64
import hashlib
import json
import os
import zlib

import pytest
from botocore.exceptions import ClientError

MiB = 1024 * 1024


def code(excinfo) -> str:
    return excinfo.value.response["Error"]["Code"]


def crc32_b64(data: bytes) -> str:
    return base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()


def test_default_crc32_header_is_verified_and_echoed(alice, bucket):
    body = os.urandom(100_000)
    put = alice.put_object(Bucket=bucket, Key="k", Body=body)  # botocore adds CRC32 itself
    assert put["ChecksumCRC32"] == crc32_b64(body)
    assert put["ChecksumType"] == "FULL_OBJECT"
    sha = alice.put_object(Bucket=bucket, Key="s", Body=body, ChecksumAlgorithm="SHA256")
    assert sha["ChecksumSHA256"] == base64.b64encode(hashlib.sha256(body).digest()).decode()


@pytest.mark.parametrize("field,value", [
    ("ChecksumCRC32", base64.b64encode(b"\0\0\0\0").decode()),
    ("ChecksumSHA1", base64.b64encode(b"\0" * 20).decode()),
    ("ChecksumSHA256", base64.b64encode(b"\0" * 32).decode()),
])
def test_a_body_that_does_not_match_its_checksum_is_refused(alice, bucket, field, value):
    with pytest.raises(ClientError) as e:
        alice.put_object(Bucket=bucket, Key="bad", Body=b"hello world", **{field: value})
    assert code(e) == "BadDigest"
    assert "did not match the calculated checksum" in e.value.response["Error"]["Message"]
    with pytest.raises(ClientError) as e:
        alice.head_object(Bucket=bucket, Key="bad")
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404


def test_a_malformed_checksum_is_refused(alice, bucket):
    with pytest.raises(ClientError) as e:
        alice.put_object(Bucket=bucket, Key="bad", Body=b"x", ChecksumCRC32="not base64!")
    assert code(e) == "InvalidRequest"


def test_multipart_parts_are_verified_and_echoed(alice, bucket):
    up = alice.create_multipart_upload(Bucket=bucket, Key="mp", ChecksumAlgorithm="CRC32")
    uid = up["UploadId"]
    parts, data = [], b""
    for n in (1, 2):
        chunk = os.urandom(5 * MiB)
        data += chunk
        r = alice.upload_part(Bucket=bucket, Key="mp", UploadId=uid, PartNumber=n, Body=chunk,
                              ChecksumAlgorithm="CRC32")
        assert r["ChecksumCRC32"] == crc32_b64(chunk)
        parts.append({"PartNumber": n, "ETag": r["ETag"], "ChecksumCRC32": r["ChecksumCRC32"]})
    with pytest.raises(ClientError) as e:
        alice.upload_part(Bucket=bucket, Key="mp", UploadId=uid, PartNumber=3, Body=b"tail",
                          ChecksumCRC32=crc32_b64(b"other"))
    assert code(e) == "BadDigest"
    alice.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=uid,
                                    MultipartUpload={"Parts": parts})
    assert alice.get_object(Bucket=bucket, Key="mp")["Body"].read() == data


class Trailers:
    """botocore sends the checksum of a streaming upload as an aws-chunked trailer when the
    endpoint is https; these hooks make it do so here (and can corrupt the body after the
    checksum was computed, as a faulty network would)."""

    def __init__(self, client, corrupt: bool = False):
        self.sent: list[dict] = []
        self.corrupt = corrupt
        for op in ("PutObject", "UploadPart"):
            client.meta.events.register(f"before-call.s3.{op}", self.as_over_tls)
            client.meta.events.register(f"before-send.s3.{op}", self.on_send)

    @staticmethod
    def as_over_tls(params, **kwargs):
        algorithm = params["context"].get("checksum", {}).get("request_algorithm")
        if isinstance(algorithm, dict):
            algorithm["in"] = "trailer"

    def on_send(self, request, **kwargs):
        self.sent.append({k.lower(): v.decode() if isinstance(v, bytes) else v
                          for k, v in request.headers.items()})
        if self.corrupt:
            encoded = request.body.read()  # "<hex size>\r\n<data>\r\n...0\r\n<trailer>\r\n\r\n"
            at = encoded.index(b"\r\n") + 2
            request.body = encoded[:at] + bytes([encoded[at] ^ 0xFF]) + encoded[at + 1:]


def test_aws_chunked_trailer_checksum_is_verified_and_echoed(alice, bucket):
    trailers = Trailers(alice)
    body = os.urandom(3 * MiB + 11)
    put = alice.put_object(Bucket=bucket, Key="t", Body=body)
    sent = trailers.sent[-1]
    assert sent["x-amz-trailer"] == "x-amz-checksum-crc32"
    assert "aws-chunked" in sent["content-encoding"]
    assert put["ChecksumCRC32"] == crc32_b64(body)
    got = alice.get_object(Bucket=bucket, Key="t")
    assert got["Body"].read() == body
    assert "ContentEncoding" not in got  # aws-chunked framed the request, not the object


def test_a_body_corrupted_under_its_trailer_checksum_is_refused(alice, bucket):
    Trailers(alice, corrupt=True)
    with pytest.raises(ClientError) as e:
        alice.put_object(Bucket=bucket, Key="t", Body=os.urandom(100_000))
    assert code(e) == "BadDigest"
    with pytest.raises(ClientError) as e:
        alice.head_object(Bucket=bucket, Key="t")
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404


# ---- stored checksums returned (issue #30) ----------------------------------------------
#
# Regression: checksums were checked on upload and echoed, but not stored, so no client could
# validate a download. Now a GET or HEAD with `x-amz-checksum-mode: ENABLED` returns the
# object's checksum in the algorithm its client sent, or CRC-64/NVME when it sent none.

_CRC64NVME_POLY = 0x9A6C9329AC4BC9B5  # reflected


def _crc64nvme_table() -> list[int]:
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ _CRC64NVME_POLY if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc64nvme_table()


def crc64nvme_b64(data: bytes) -> str:
    crc = 0xFFFFFFFFFFFFFFFF
    for b in data:
        crc = _TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFFFFFFFFFF
    return base64.b64encode(crc.to_bytes(8, "big")).decode()


def test_the_crc64nvme_reference_matches_the_published_check_value():
    assert crc64nvme_b64(b"123456789") == base64.b64encode(
        (0xAE8B14860A799888).to_bytes(8, "big")).decode()


def stored(s3, bucket: str, key: str) -> tuple[dict, dict]:
    get = s3.get_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
    get["Body"].read()  # botocore validates the body against the returned checksum here
    head = s3.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
    return get, head


@pytest.mark.parametrize("size", [5_000, 300_000])  # inline and in a blob
def test_a_crc32_upload_returns_its_crc32(gateway, alice, bucket, size):
    body = os.urandom(size)
    alice.put_object(Bucket=bucket, Key="k", Body=body)  # botocore sends CRC32
    get, head = stored(alice, bucket, "k")
    # An inline object keeps its client's checksum in its record too.
    assert get["ChecksumCRC32"] == head["ChecksumCRC32"] == crc32_b64(body)
    assert "ChecksumCRC64NVME" not in get
    assert get["ChecksumType"] == head["ChecksumType"] == "FULL_OBJECT"
    # Without the mode (botocore sends it on every GET unless told not to), no checksum.
    plain = gateway.client("alice", response_checksum_validation="when_required").get_object(
        Bucket=bucket, Key="k")
    assert "ChecksumCRC32" not in plain and "ChecksumCRC64NVME" not in plain


def test_a_crc64nvme_upload_returns_its_crc64nvme(alice, bucket):
    body = os.urandom(200_000)
    value = crc64nvme_b64(body)
    alice.put_object(Bucket=bucket, Key="k", Body=body, ChecksumCRC64NVME=value)
    get, head = stored(alice, bucket, "k")
    assert get["ChecksumCRC64NVME"] == head["ChecksumCRC64NVME"] == value
    assert "ChecksumCRC32" not in get


def test_an_upload_without_a_checksum_returns_its_crc64nvme(gateway, bucket):
    s3 = gateway.client("alice", request_checksum_calculation="when_required")
    body = os.urandom(3 * MiB + 17)
    s3.put_object(Bucket=bucket, Key="k", Body=body)
    get, head = stored(s3, bucket, "k")
    assert get["ChecksumCRC64NVME"] == head["ChecksumCRC64NVME"] == crc64nvme_b64(body)
    assert get["ChecksumType"] == "FULL_OBJECT"
    # A range returns none (S3 returns a whole object's checksum only).
    part = s3.get_object(Bucket=bucket, Key="k", Range="bytes=0-99", ChecksumMode="ENABLED")
    assert "ChecksumCRC64NVME" not in part


@pytest.mark.parametrize("size", [0, 5_000, 3 * MiB + 17])  # empty and inline, in a blob
def test_a_put_without_a_checksum_answers_its_crc64nvme_as_s3_does(gateway, bucket, size):
    """S3 keeps a CRC-64/NVME of every upload since 2024 and answers it when the client sent
    no checksum; boto3 takes the answer as it is."""
    s3 = gateway.client("alice", request_checksum_calculation="when_required")
    body = os.urandom(size)
    put = s3.put_object(Bucket=bucket, Key="k", Body=body)
    assert put["ChecksumCRC64NVME"] == crc64nvme_b64(body)
    assert put["ChecksumType"] == "FULL_OBJECT"
    assert "ChecksumCRC32" not in put
    get, head = stored(s3, bucket, "k")
    assert get["ChecksumCRC64NVME"] == head["ChecksumCRC64NVME"] == put["ChecksumCRC64NVME"]


def test_a_multipart_crc32_upload_returns_the_composite_of_its_parts(alice, bucket):
    parts = [os.urandom(5 * MiB), os.urandom(MiB + 3)]
    up = alice.create_multipart_upload(Bucket=bucket, Key="mp", ChecksumAlgorithm="CRC32")
    done = []
    for i, p in enumerate(parts, 1):
        r = alice.upload_part(Bucket=bucket, Key="mp", UploadId=up["UploadId"], PartNumber=i,
                              Body=p, ChecksumAlgorithm="CRC32")
        done.append({"PartNumber": i, "ETag": r["ETag"], "ChecksumCRC32": r["ChecksumCRC32"]})
    alice.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=up["UploadId"],
                                    MultipartUpload={"Parts": done})
    raw = b"".join(base64.b64decode(crc32_b64(p)) for p in parts)
    composite = base64.b64encode(zlib.crc32(raw).to_bytes(4, "big")).decode() + "-2"
    get, head = stored(alice, bucket, "mp")
    assert get["ChecksumCRC32"] == head["ChecksumCRC32"] == composite
    assert get["ChecksumType"] == "COMPOSITE"


def test_the_aws_cli_validates_a_download_with_the_stored_checksum(gateway, bucket, tmp_path):
    from test_clients import aws_cli

    aws = aws_cli(tmp_path)
    body = os.urandom(2 * MiB + 5)
    src = tmp_path / "up.bin"
    src.write_bytes(body)
    aws(gateway.endpoint, "s3api", "put-object", "--bucket", bucket, "--key", "cli",
        "--body", str(src), "--checksum-algorithm", "CRC32")
    out = tmp_path / "down.bin"
    meta = json.loads(aws(gateway.endpoint, "s3api", "get-object", "--bucket", bucket,
                          "--key", "cli", "--checksum-mode", "ENABLED", str(out)))
    assert meta["ChecksumCRC32"] == crc32_b64(body)
    assert out.read_bytes() == body


def test_get_object_attributes_answers_the_stored_checksum_size_and_parts(alice, bucket):
    """GetObjectAttributes, as boto3 calls it: the same stored checksum a GET with
    ChecksumMode returns, the size, the ETag, the part count of a multipart object."""
    attributes = ["ETag", "Checksum", "ObjectParts", "ObjectSize", "StorageClass"]
    for key, size in [("inline", 5_000), ("blob", 300_000)]:
        body = os.urandom(size)
        alice.put_object(Bucket=bucket, Key=key, Body=body)  # botocore sends CRC32
        a = alice.get_object_attributes(Bucket=bucket, Key=key, ObjectAttributes=attributes)
        assert a["ObjectSize"] == size
        assert a["ETag"].strip('"') == hashlib.md5(body).hexdigest()
        assert a["Checksum"]["ChecksumCRC32"] == crc32_b64(body)
        assert a["Checksum"]["ChecksumType"] == "FULL_OBJECT"
        assert a["StorageClass"] == "STANDARD"
        assert "ObjectParts" not in a
    parts = [os.urandom(5 * MiB), os.urandom(MiB + 3)]
    up = alice.create_multipart_upload(Bucket=bucket, Key="mp", ChecksumAlgorithm="CRC32")
    done = []
    for i, p in enumerate(parts, 1):
        r = alice.upload_part(Bucket=bucket, Key="mp", UploadId=up["UploadId"], PartNumber=i,
                              Body=p, ChecksumAlgorithm="CRC32")
        done.append({"PartNumber": i, "ETag": r["ETag"], "ChecksumCRC32": r["ChecksumCRC32"]})
    alice.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=up["UploadId"],
                                    MultipartUpload={"Parts": done})
    a = alice.get_object_attributes(Bucket=bucket, Key="mp", ObjectAttributes=attributes)
    assert a["ObjectParts"]["TotalPartsCount"] == 2
    assert a["ObjectSize"] == sum(len(p) for p in parts)
    assert a["Checksum"]["ChecksumType"] == "COMPOSITE"
    assert a["Checksum"]["ChecksumCRC32"].endswith("-2")
    # Only what was asked for is answered; an unknown attribute is refused.
    a = alice.get_object_attributes(Bucket=bucket, Key="blob", ObjectAttributes=["ObjectSize"])
    assert a["ObjectSize"] == 300_000 and "Checksum" not in a and "ETag" not in a
    with pytest.raises(ClientError) as e:
        alice.get_object_attributes(Bucket=bucket, Key="nope", ObjectAttributes=["ETag"])
    assert code(e) == "NoSuchKey"
