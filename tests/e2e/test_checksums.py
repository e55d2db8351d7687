"""Additional checksums (`x-amz-checksum-*`), as current SDKs send them on every upload.

Regression: sluice accepted them without looking, so a body that did not match the checksum
its client computed was stored (S3 refuses it with BadDigest), and the verified checksum was
not echoed in responses. Each test drives boto3 exactly as it sends them: a header over plain
HTTP, an aws-chunked trailer over TLS (reproduced here through botocore's own event hook)."""

import base64
import hashlib
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
