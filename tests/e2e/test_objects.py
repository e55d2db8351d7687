"""Every S3 operation sluice serves, driven by boto3, against each backend."""

import hashlib
import os
import uuid

import pytest
import requests
from botocore.exceptions import ClientError

MiB = 1024 * 1024


def code(excinfo) -> str:
    return excinfo.value.response["Error"]["Code"]


def status(excinfo) -> int:
    return excinfo.value.response["ResponseMetadata"]["HTTPStatusCode"]


def test_bucket_lifecycle(alice):
    name = f"life-{uuid.uuid4().hex[:8]}"
    alice.create_bucket(Bucket=name)
    assert name in [b["Name"] for b in alice.list_buckets()["Buckets"]]
    alice.head_bucket(Bucket=name)
    with pytest.raises(ClientError) as e:
        alice.create_bucket(Bucket=name)
    assert code(e) == "BucketAlreadyOwnedByYou"
    alice.put_object(Bucket=name, Key="k", Body=b"x")
    with pytest.raises(ClientError) as e:
        alice.delete_bucket(Bucket=name)
    assert code(e) == "BucketNotEmpty"
    alice.delete_object(Bucket=name, Key="k")
    alice.delete_bucket(Bucket=name)
    with pytest.raises(ClientError) as e:
        alice.head_bucket(Bucket=name)
    assert status(e) == 404


def test_get_bucket_location_and_versioning(alice, bucket):
    assert alice.get_bucket_location(Bucket=bucket).get("LocationConstraint") in (None, "")
    assert "Status" not in alice.get_bucket_versioning(Bucket=bucket)


def test_put_get_head_round_trip_with_metadata(alice, bucket):
    body = os.urandom(3 * MiB + 17)
    put = alice.put_object(
        Bucket=bucket,
        Key="run/step-1/shard.bin",
        Body=body,
        ContentType="application/x-checkpoint",
        Metadata={"rank": "3", "step": "1"},
        CacheControl="no-cache",
    )
    assert put["ETag"] == f'"{hashlib.md5(body).hexdigest()}"'
    got = alice.get_object(Bucket=bucket, Key="run/step-1/shard.bin")
    assert got["Body"].read() == body
    assert got["ContentType"] == "application/x-checkpoint"
    assert got["Metadata"] == {"rank": "3", "step": "1"}
    assert got["CacheControl"] == "no-cache"
    assert got["ETag"] == put["ETag"]
    head = alice.head_object(Bucket=bucket, Key="run/step-1/shard.bin")
    assert head["ContentLength"] == len(body)
    assert head["LastModified"] is not None
    assert head["Metadata"] == {"rank": "3", "step": "1"}


def test_user_metadata_over_2_kib_is_refused_before_anything_is_stored(alice, bucket):
    """S3's limit on user metadata: the bytes of every key and value, at most 2 KiB. Over it,
    PutObject, CreateMultipartUpload and a replacing CopyObject are refused, nothing stored."""
    fits, over = {"k": "x" * 2047}, {"k": "x" * 2048}
    alice.put_object(Bucket=bucket, Key="meta", Body=b"first", Metadata=fits)
    assert alice.head_object(Bucket=bucket, Key="meta")["Metadata"] == fits

    def refused(call):
        with pytest.raises(ClientError) as e:
            call()
        assert (code(e), status(e)) == ("MetadataTooLarge", 400)

    refused(lambda: alice.put_object(Bucket=bucket, Key="meta", Body=b"second", Metadata=over))
    assert alice.get_object(Bucket=bucket, Key="meta")["Body"].read() == b"first"
    refused(lambda: alice.put_object(Bucket=bucket, Key="meta-new", Body=b"x" * MiB, Metadata=over))
    refused(lambda: alice.create_multipart_upload(Bucket=bucket, Key="meta-mpu", Metadata=over))
    assert alice.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
    refused(lambda: alice.copy_object(Bucket=bucket, Key="meta-copy", CopySource=f"{bucket}/meta",
                                      MetadataDirective="REPLACE", Metadata=over))
    assert [o["Key"] for o in alice.list_objects_v2(Bucket=bucket)["Contents"]] == ["meta"]
    # A copy that keeps its source's metadata keeps all of it.
    alice.copy_object(Bucket=bucket, Key="meta-copy", CopySource=f"{bucket}/meta")
    assert alice.head_object(Bucket=bucket, Key="meta-copy")["Metadata"] == fits


def test_empty_object(alice, bucket):
    alice.put_object(Bucket=bucket, Key="empty", Body=b"")
    assert alice.get_object(Bucket=bucket, Key="empty")["Body"].read() == b""
    assert alice.head_object(Bucket=bucket, Key="empty")["ContentLength"] == 0


def test_range_reads(alice, bucket):
    body = os.urandom(9 * MiB)  # spans several read grains
    alice.put_object(Bucket=bucket, Key="r", Body=body)
    for rng, want in [
        ("bytes=0-0", body[:1]),
        ("bytes=100-4194404", body[100:4194405]),
        ("bytes=-10", body[-10:]),
        (f"bytes={len(body) - 5}-", body[-5:]),
    ]:
        got = alice.get_object(Bucket=bucket, Key="r", Range=rng)
        assert got["Body"].read() == want, rng
        assert got["ResponseMetadata"]["HTTPStatusCode"] == 206
        assert got["ContentRange"].endswith(f"/{len(body)}")
    with pytest.raises(ClientError) as e:
        alice.get_object(Bucket=bucket, Key="r", Range=f"bytes={len(body)}-")
    assert code(e) == "InvalidRange"
    assert status(e) == 416


def test_overwrite_replaces_atomically(alice, bucket):
    alice.put_object(Bucket=bucket, Key="o", Body=b"first")
    alice.put_object(Bucket=bucket, Key="o", Body=b"second!")
    assert alice.get_object(Bucket=bucket, Key="o")["Body"].read() == b"second!"


def test_missing_key_and_bucket(alice, bucket):
    with pytest.raises(ClientError) as e:
        alice.get_object(Bucket=bucket, Key="nope")
    assert code(e) == "NoSuchKey"
    with pytest.raises(ClientError) as e:
        alice.get_object(Bucket="no-such-bucket-" + bucket[2:], Key="x")
    assert code(e) == "NoSuchBucket"
    # Deleting a missing key succeeds, as in S3.
    alice.delete_object(Bucket=bucket, Key="nope")


def test_list_objects_v2_prefix_delimiter_pagination(alice, bucket):
    keys = [f"ckpt/step-{i:03d}/shard-{j}" for i in range(3) for j in range(4)] + ["ckpt/latest", "top"]
    for k in keys:
        alice.put_object(Bucket=bucket, Key=k, Body=k.encode())
    # Flat, paginated in pages of 5.
    got, token = [], None
    while True:
        kw = {"ContinuationToken": token} if token else {}
        page = alice.list_objects_v2(Bucket=bucket, MaxKeys=5, **kw)
        got += [o["Key"] for o in page.get("Contents", [])]
        assert page["KeyCount"] <= 5
        if not page["IsTruncated"]:
            break
        token = page["NextContinuationToken"]
    assert got == sorted(keys)
    # Delimited.
    page = alice.list_objects_v2(Bucket=bucket, Prefix="ckpt/", Delimiter="/")
    assert [p["Prefix"] for p in page["CommonPrefixes"]] == [f"ckpt/step-{i:03d}/" for i in range(3)]
    assert [o["Key"] for o in page["Contents"]] == ["ckpt/latest"]
    # Delimited and paginated: prefixes are not repeated across pages.
    seen, token = [], None
    while True:
        kw = {"ContinuationToken": token} if token else {}
        page = alice.list_objects_v2(Bucket=bucket, Delimiter="/", Prefix="ckpt/", MaxKeys=2, **kw)
        seen += [p["Prefix"] for p in page.get("CommonPrefixes", [])]
        seen += [o["Key"] for o in page.get("Contents", [])]
        if not page["IsTruncated"]:
            break
        token = page["NextContinuationToken"]
    assert sorted(seen) == ["ckpt/latest", "ckpt/step-000/", "ckpt/step-001/", "ckpt/step-002/"]
    assert len(seen) == len(set(seen))
    page = alice.list_objects_v2(Bucket=bucket, StartAfter="ckpt/step-002/shard-3")
    assert [o["Key"] for o in page["Contents"]] == ["top"]
    obj = alice.list_objects_v2(Bucket=bucket, Prefix="top")["Contents"][0]
    assert obj["Size"] == 3 and obj["ETag"] == f'"{hashlib.md5(b"top").hexdigest()}"'


def test_list_objects_v1_markers(alice, bucket):
    for k in ["a/1", "a/2", "b", "c"]:
        alice.put_object(Bucket=bucket, Key=k, Body=b"")
    page = alice.list_objects(Bucket=bucket, MaxKeys=2, Delimiter="/")
    assert [p["Prefix"] for p in page["CommonPrefixes"]] == ["a/"]
    assert [o["Key"] for o in page["Contents"]] == ["b"]
    assert page["IsTruncated"] and page["NextMarker"] == "b"
    page = alice.list_objects(Bucket=bucket, Marker="b", Delimiter="/")
    assert [o["Key"] for o in page["Contents"]] == ["c"]
    assert not page["IsTruncated"]


def test_list_with_url_encoding(alice, bucket):
    key = "dir/with space+plus%percent/é"
    alice.put_object(Bucket=bucket, Key=key, Body=b"1")
    # boto3 asks for encoding-type=url and decodes the response itself.
    assert [o["Key"] for o in alice.list_objects_v2(Bucket=bucket)["Contents"]] == [key]
    assert [o["Key"] for o in alice.list_objects(Bucket=bucket)["Contents"]] == [key]


def test_list_object_versions_on_unversioned_bucket(alice, bucket):
    for k in ["x", "y/z"]:
        alice.put_object(Bucket=bucket, Key=k, Body=b"v")
    out = alice.list_object_versions(Bucket=bucket)
    assert [(v["Key"], v["VersionId"], v["IsLatest"]) for v in out["Versions"]] == [
        ("x", "null", True),
        ("y/z", "null", True),
    ]
    out = alice.list_object_versions(Bucket=bucket, Delimiter="/")
    assert [p["Prefix"] for p in out["CommonPrefixes"]] == ["y/"]


def test_delete_objects(alice, bucket):
    for k in ["d1", "d2", "d3"]:
        alice.put_object(Bucket=bucket, Key=k, Body=b"x")
    out = alice.delete_objects(
        Bucket=bucket,
        Delete={"Objects": [{"Key": "d1"}, {"Key": "d2"}, {"Key": "missing"}, {"Key": "../evil"}]},
    )
    assert sorted(d["Key"] for d in out["Deleted"]) == ["d1", "d2", "missing"]
    assert [(e["Key"], e["Code"]) for e in out["Errors"]] == [("../evil", "InvalidObjectName")]
    assert [o["Key"] for o in alice.list_objects_v2(Bucket=bucket)["Contents"]] == ["d3"]


def test_copy_object_and_metadata_directive(alice, bucket):
    body = os.urandom(1 * MiB)
    alice.put_object(Bucket=bucket, Key="src", Body=body, ContentType="text/plain", Metadata={"a": "1"})
    out = alice.copy_object(Bucket=bucket, Key="dst", CopySource={"Bucket": bucket, "Key": "src"})
    assert out["CopyObjectResult"]["ETag"] == f'"{hashlib.md5(body).hexdigest()}"'
    got = alice.get_object(Bucket=bucket, Key="dst")
    assert got["Body"].read() == body and got["Metadata"] == {"a": "1"}
    assert got["ContentType"] == "text/plain"
    alice.copy_object(
        Bucket=bucket, Key="dst", CopySource={"Bucket": bucket, "Key": "dst"},
        MetadataDirective="REPLACE", Metadata={"b": "2"}, ContentType="application/json",
    )
    head = alice.head_object(Bucket=bucket, Key="dst")
    assert head["Metadata"] == {"b": "2"} and head["ContentType"] == "application/json"
    with pytest.raises(ClientError) as e:
        alice.copy_object(Bucket=bucket, Key="src", CopySource={"Bucket": bucket, "Key": "src"})
    assert code(e) == "InvalidRequest"
    with pytest.raises(ClientError) as e:
        alice.copy_object(Bucket=bucket, Key="x", CopySource={"Bucket": bucket, "Key": "nope"})
    assert code(e) == "NoSuchKey"


def test_dcp_style_rename_via_copy_then_delete(alice, bucket):
    """PyTorch DCP over fsspec commits `.metadata` as CopyObject + DeleteObject."""
    alice.put_object(Bucket=bucket, Key="run/step-9/.metadata.tmp", Body=b"meta")
    alice.copy_object(Bucket=bucket, Key="run/step-9/.metadata",
                      CopySource={"Bucket": bucket, "Key": "run/step-9/.metadata.tmp"})
    alice.delete_object(Bucket=bucket, Key="run/step-9/.metadata.tmp")
    keys = [o["Key"] for o in alice.list_objects_v2(Bucket=bucket, Prefix="run/")["Contents"]]
    assert keys == ["run/step-9/.metadata"]
    assert alice.get_object(Bucket=bucket, Key="run/step-9/.metadata")["Body"].read() == b"meta"


def test_multipart_upload_full_cycle(alice, bucket):
    key = "big/model.bin"
    up = alice.create_multipart_upload(Bucket=bucket, Key=key, ContentType="application/octet-stream",
                                       Metadata={"m": "v"})
    uid = up["UploadId"]
    parts_data = [os.urandom(5 * MiB), os.urandom(5 * MiB), os.urandom(123)]
    etags = []
    for n, data in enumerate(parts_data, start=1):
        r = alice.upload_part(Bucket=bucket, Key=key, UploadId=uid, PartNumber=n, Body=data)
        assert r["ETag"] == f'"{hashlib.md5(data).hexdigest()}"'
        etags.append(r["ETag"])
    # Re-uploading a part replaces it.
    parts_data[1] = os.urandom(5 * MiB)
    etags[1] = alice.upload_part(Bucket=bucket, Key=key, UploadId=uid, PartNumber=2, Body=parts_data[1])["ETag"]
    listed = alice.list_parts(Bucket=bucket, Key=key, UploadId=uid)
    assert [(p["PartNumber"], p["ETag"], p["Size"]) for p in listed["Parts"]] == [
        (n, etags[n - 1], len(parts_data[n - 1])) for n in (1, 2, 3)
    ]
    page = alice.list_parts(Bucket=bucket, Key=key, UploadId=uid, MaxParts=2)
    assert page["IsTruncated"] and page["NextPartNumberMarker"] == 2
    uploads = alice.list_multipart_uploads(Bucket=bucket)["Uploads"]
    assert [(u["Key"], u["UploadId"]) for u in uploads] == [(key, uid)]
    # Object not visible before completion.
    with pytest.raises(ClientError):
        alice.head_object(Bucket=bucket, Key=key)
    done = alice.complete_multipart_upload(
        Bucket=bucket, Key=key, UploadId=uid,
        MultipartUpload={"Parts": [{"PartNumber": n, "ETag": etags[n - 1]} for n in (1, 2, 3)]},
    )
    md5s = b"".join(hashlib.md5(d).digest() for d in parts_data)
    assert done["ETag"] == f'"{hashlib.md5(md5s).hexdigest()}-3"'
    got = alice.get_object(Bucket=bucket, Key=key)
    assert got["Body"].read() == b"".join(parts_data)
    assert got["Metadata"] == {"m": "v"}
    assert alice.get_object(Bucket=bucket, Key=key, Range=f"bytes={5 * MiB - 2}-{5 * MiB + 1}")["Body"].read() \
        == (parts_data[0] + parts_data[1])[5 * MiB - 2:5 * MiB + 2]
    assert "Uploads" not in alice.list_multipart_uploads(Bucket=bucket) or \
        alice.list_multipart_uploads(Bucket=bucket)["Uploads"] == []


def test_multipart_errors_and_abort(alice, bucket):
    key = "mp"
    uid = alice.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    e1 = alice.upload_part(Bucket=bucket, Key=key, UploadId=uid, PartNumber=1, Body=b"small")["ETag"]
    e2 = alice.upload_part(Bucket=bucket, Key=key, UploadId=uid, PartNumber=2, Body=b"tail")["ETag"]
    with pytest.raises(ClientError) as e:
        alice.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=uid, MultipartUpload={
            "Parts": [{"PartNumber": 1, "ETag": e1}, {"PartNumber": 2, "ETag": e2}]})
    assert code(e) == "EntityTooSmall"
    with pytest.raises(ClientError) as e:
        alice.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=uid, MultipartUpload={
            "Parts": [{"PartNumber": 2, "ETag": e2}, {"PartNumber": 1, "ETag": e1}]})
    assert code(e) == "InvalidPartOrder"
    with pytest.raises(ClientError) as e:
        alice.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=uid, MultipartUpload={
            "Parts": [{"PartNumber": 1, "ETag": '"0123456789abcdef0123456789abcdef"'}]})
    assert code(e) == "InvalidPart"
    with pytest.raises(ClientError) as e:
        alice.upload_part(Bucket=bucket, Key=key, UploadId=uid, PartNumber=10001, Body=b"x")
    assert code(e) == "InvalidArgument"
    alice.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=uid)
    with pytest.raises(ClientError) as e:
        alice.list_parts(Bucket=bucket, Key=key, UploadId=uid)
    assert code(e) == "NoSuchUpload"
    with pytest.raises(ClientError) as e:
        alice.upload_part(Bucket=bucket, Key=key, UploadId="deadbeef", PartNumber=1, Body=b"x")
    assert code(e) == "NoSuchUpload"


def test_upload_part_copy(alice, bucket):
    src = os.urandom(6 * MiB)
    alice.put_object(Bucket=bucket, Key="src", Body=src)
    key = "assembled"
    uid = alice.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    p1 = alice.upload_part_copy(Bucket=bucket, Key=key, UploadId=uid, PartNumber=1,
                                CopySource={"Bucket": bucket, "Key": "src"},
                                CopySourceRange=f"bytes=0-{5 * MiB - 1}")
    p2 = alice.upload_part_copy(Bucket=bucket, Key=key, UploadId=uid, PartNumber=2,
                                CopySource={"Bucket": bucket, "Key": "src"},
                                CopySourceRange=f"bytes={5 * MiB}-{6 * MiB - 1}")
    alice.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=uid, MultipartUpload={"Parts": [
        {"PartNumber": 1, "ETag": p1["CopyPartResult"]["ETag"]},
        {"PartNumber": 2, "ETag": p2["CopyPartResult"]["ETag"]}]})
    assert alice.get_object(Bucket=bucket, Key=key)["Body"].read() == src


def test_presigned_get(gateway, alice, bucket):
    alice.put_object(Bucket=bucket, Key="shared.txt", Body=b"presigned!")
    url = alice.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "shared.txt"},
                                       ExpiresIn=60)
    r = requests.get(url, timeout=10)
    assert r.status_code == 200 and r.content == b"presigned!"


def test_streaming_upload_of_unknown_length(alice, bucket):
    """upload_fileobj streams through multipart; the gateway never needs the whole body."""
    import io
    data = os.urandom(17 * MiB)
    alice.upload_fileobj(io.BytesIO(data), bucket, "streamed")
    assert alice.get_object(Bucket=bucket, Key="streamed")["Body"].read() == data
