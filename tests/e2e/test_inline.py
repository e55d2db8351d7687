"""Small objects, which the gateway keeps inline in its catalog instead of in blobs, behave
as any other object through boto3: around the size limit, with aws-chunked trailers, under
copies, part copies and overwrites, against each backend."""

import base64
import hashlib
import os

import pytest
from botocore.exceptions import ClientError

from harness import INLINE_MAX
from test_checksums import Trailers, code, crc32_b64

MiB = 1024 * 1024


def blob_files(gateway, bucket: str) -> list:
    """The blobs of `bucket` on a local filesystem backend (None on other backends)."""
    if gateway.backend.kind != "local":
        return None
    root = gateway.workdir / "data" / "objects" / "tenants" / "alice" / bucket
    # Blobs only, not the recovery records beside them (`<bucket>/rec/...`).
    return sorted(p for p in root.rglob("*")
                  if p.is_file() and p.relative_to(root).parts[0] != "rec") if root.exists() else []


def md5_etag(body: bytes) -> str:
    return f'"{hashlib.md5(body).hexdigest()}"'


@pytest.mark.parametrize("size", [INLINE_MAX - 1, INLINE_MAX, INLINE_MAX + 1])
def test_sizes_around_the_limit_with_an_aws_chunked_trailer(gateway, alice, bucket, size):
    trailers = Trailers(alice)
    body = os.urandom(size)
    put = alice.put_object(Bucket=bucket, Key="k", Body=body)
    assert "aws-chunked" in trailers.sent[-1]["content-encoding"]
    assert put["ChecksumCRC32"] == crc32_b64(body)
    assert put["ETag"] == md5_etag(body)
    got = alice.get_object(Bucket=bucket, Key="k")
    assert got["Body"].read() == body and got["ETag"] == md5_etag(body)
    part = alice.get_object(Bucket=bucket, Key="k", Range=f"bytes=1000-{size - 2}")
    assert part["Body"].read() == body[1000:size - 1]
    assert part["ContentRange"] == f"bytes 1000-{size - 2}/{size}"
    head = alice.head_object(Bucket=bucket, Key="k")
    assert head["ContentLength"] == size and head["ETag"] == md5_etag(body)
    listed = alice.list_objects_v2(Bucket=bucket)["Contents"]
    assert [(o["Key"], o["Size"]) for o in listed] == [("k", size)]
    blobs = blob_files(gateway, bucket)
    if blobs is not None:
        assert len(blobs) == (0 if size <= INLINE_MAX else 1), blobs


def test_a_small_body_corrupted_under_its_trailer_is_refused(gateway, alice, bucket):
    Trailers(alice, corrupt=True)
    with pytest.raises(ClientError) as e:
        alice.put_object(Bucket=bucket, Key="t", Body=os.urandom(INLINE_MAX))
    assert code(e) == "BadDigest"
    with pytest.raises(ClientError) as e:
        alice.head_object(Bucket=bucket, Key="t")
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404


def test_copies_and_part_copies_of_a_small_object(gateway, alice, bucket):
    src = os.urandom(5000)
    alice.put_object(Bucket=bucket, Key="src", Body=src, ContentType="text/plain",
                     Metadata={"owner": "me"})
    alice.copy_object(Bucket=bucket, Key="copy", CopySource={"Bucket": bucket, "Key": "src"})
    got = alice.get_object(Bucket=bucket, Key="copy")
    assert got["Body"].read() == src
    assert got["ContentType"] == "text/plain" and got["Metadata"] == {"owner": "me"}
    alice.copy_object(Bucket=bucket, Key="src", CopySource={"Bucket": bucket, "Key": "src"},
                      MetadataDirective="REPLACE", Metadata={"owner": "you"})
    assert alice.head_object(Bucket=bucket, Key="src")["Metadata"] == {"owner": "you"}
    assert alice.get_object(Bucket=bucket, Key="src")["Body"].read() == src
    assert blob_files(gateway, bucket) in (None, [])

    head = os.urandom(5 * MiB)
    uid = alice.create_multipart_upload(Bucket=bucket, Key="assembled")["UploadId"]
    p1 = alice.upload_part(Bucket=bucket, Key="assembled", UploadId=uid, PartNumber=1, Body=head)
    p2 = alice.upload_part_copy(Bucket=bucket, Key="assembled", UploadId=uid, PartNumber=2,
                                CopySource={"Bucket": bucket, "Key": "src"},
                                CopySourceRange="bytes=100-4099")
    assert p2["CopyPartResult"]["ETag"] == md5_etag(src[100:4100])
    alice.complete_multipart_upload(Bucket=bucket, Key="assembled", UploadId=uid, MultipartUpload={
        "Parts": [{"PartNumber": 1, "ETag": p1["ETag"]},
                  {"PartNumber": 2, "ETag": p2["CopyPartResult"]["ETag"]}]})
    assert alice.get_object(Bucket=bucket, Key="assembled")["Body"].read() == head + src[100:4100]


def test_overwrites_between_small_and_large_leave_only_live_blobs(gateway, alice, bucket):
    small, large = os.urandom(100), os.urandom(INLINE_MAX + 1)
    for body in (large, small, large, small, b""):
        alice.put_object(Bucket=bucket, Key="k", Body=body)
        assert alice.get_object(Bucket=bucket, Key="k")["Body"].read() == body
        blobs = blob_files(gateway, bucket)
        if blobs is not None:
            assert len(blobs) == (1 if body is large else 0), blobs
    alice.delete_object(Bucket=bucket, Key="k")
    assert alice.list_objects_v2(Bucket=bucket).get("Contents", []) == []
    assert blob_files(gateway, bucket) in (None, [])


def test_content_md5_of_a_small_body_is_checked(alice, bucket):
    body = b"tiny"
    good = base64.b64encode(hashlib.md5(body).digest()).decode()
    alice.put_object(Bucket=bucket, Key="m", Body=body, ContentMD5=good)
    bad = base64.b64encode(hashlib.md5(b"other").digest()).decode()
    with pytest.raises(ClientError) as e:
        alice.put_object(Bucket=bucket, Key="n", Body=body, ContentMD5=bad)
    assert code(e) == "BadDigest"
    assert [o["Key"] for o in alice.list_objects_v2(Bucket=bucket)["Contents"]] == ["m"]
