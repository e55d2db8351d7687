"""The namespace boundary: tenant B aimed at tenant A's buckets and keys gets nothing, and
learns nothing; and every way of not being an authenticated SigV4 caller is refused."""

import datetime
import socket
import uuid
from unittest import mock

import pytest
import requests
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from harness import REGION, s3_client


def err(excinfo):
    r = excinfo.value.response
    return r["Error"]["Code"], r["ResponseMetadata"]["HTTPStatusCode"]


@pytest.fixture
def secret_bucket(alice):
    name = f"secret-{uuid.uuid4().hex[:10]}"
    alice.create_bucket(Bucket=name)
    alice.put_object(Bucket=name, Key="weights/llama.bin", Body=b"alice's weights")
    uid = alice.create_multipart_upload(Bucket=name, Key="weights/big.bin")["UploadId"]
    alice.upload_part(Bucket=name, Key="weights/big.bin", UploadId=uid, PartNumber=1, Body=b"p")
    return name, uid


def bob_operations(bob, name, uid):
    """Every operation bob could aim at alice's bucket; each must fail."""
    own = f"bob-{uuid.uuid4().hex[:10]}"
    bob.create_bucket(Bucket=own)
    bob.put_object(Bucket=own, Key="mine", Body=b"bob")
    return {
        "head_bucket": lambda: bob.head_bucket(Bucket=name),
        "list_objects_v2": lambda: bob.list_objects_v2(Bucket=name),
        "list_objects": lambda: bob.list_objects(Bucket=name),
        "list_object_versions": lambda: bob.list_object_versions(Bucket=name),
        "get_object": lambda: bob.get_object(Bucket=name, Key="weights/llama.bin"),
        "head_object": lambda: bob.head_object(Bucket=name, Key="weights/llama.bin"),
        "put_object": lambda: bob.put_object(Bucket=name, Key="weights/llama.bin", Body=b"x"),
        "delete_object": lambda: bob.delete_object(Bucket=name, Key="weights/llama.bin"),
        "delete_objects": lambda: bob.delete_objects(Bucket=name, Delete={"Objects": [{"Key": "weights/llama.bin"}]}),
        "delete_bucket": lambda: bob.delete_bucket(Bucket=name),
        "copy_into": lambda: bob.copy_object(Bucket=name, Key="x", CopySource={"Bucket": own, "Key": "mine"}),
        "copy_out_of": lambda: bob.copy_object(Bucket=own, Key="stolen",
                                               CopySource={"Bucket": name, "Key": "weights/llama.bin"}),
        "create_multipart": lambda: bob.create_multipart_upload(Bucket=name, Key="x"),
        "upload_part": lambda: bob.upload_part(Bucket=name, Key="weights/big.bin", UploadId=uid,
                                               PartNumber=2, Body=b"x"),
        "upload_part_copy_out_of": lambda: bob.upload_part_copy(
            Bucket=own, Key="k", UploadId=bob.create_multipart_upload(Bucket=own, Key="k")["UploadId"],
            PartNumber=1, CopySource={"Bucket": name, "Key": "weights/llama.bin"}),
        "list_parts": lambda: bob.list_parts(Bucket=name, Key="weights/big.bin", UploadId=uid),
        "list_multipart_uploads": lambda: bob.list_multipart_uploads(Bucket=name),
        "complete": lambda: bob.complete_multipart_upload(Bucket=name, Key="weights/big.bin", UploadId=uid,
                                                          MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": "x"}]}),
        "abort": lambda: bob.abort_multipart_upload(Bucket=name, Key="weights/big.bin", UploadId=uid),
        "get_bucket_location": lambda: bob.get_bucket_location(Bucket=name),
    }


def test_every_operation_of_b_on_a_is_refused_without_leaks(alice, bob, secret_bucket):
    name, uid = secret_bucket
    for op, call in bob_operations(bob, name, uid).items():
        with pytest.raises(ClientError) as e:
            call()
        code, status = err(e)
        # The bucket is not in bob's namespace: exactly what a missing bucket gives.
        assert (code, status) in {("NoSuchBucket", 404), ("404", 404)}, (op, code, status)
        text = str(e.value.response)
        assert "weights" not in text and "alice" not in text, (op, text)
    # Alice's data is intact and bob's copies did not land.
    assert alice.get_object(Bucket=name, Key="weights/llama.bin")["Body"].read() == b"alice's weights"
    assert [p["PartNumber"] for p in alice.list_parts(Bucket=name, Key="weights/big.bin", UploadId=uid)["Parts"]] == [1]
    assert name not in [b["Name"] for b in bob.list_buckets()["Buckets"]]


def test_same_bucket_name_is_two_namespaces(alice, bob):
    name = f"ckpt-{uuid.uuid4().hex[:8]}"
    alice.create_bucket(Bucket=name)
    bob.create_bucket(Bucket=name)
    alice.put_object(Bucket=name, Key="k", Body=b"alice")
    bob.put_object(Bucket=name, Key="other", Body=b"bob")
    with pytest.raises(ClientError) as e:
        bob.get_object(Bucket=name, Key="k")
    assert err(e) == ("NoSuchKey", 404)
    assert [o["Key"] for o in bob.list_objects_v2(Bucket=name)["Contents"]] == ["other"]
    assert [o["Key"] for o in alice.list_objects_v2(Bucket=name)["Contents"]] == ["k"]
    with pytest.raises(ClientError) as e:
        bob.copy_object(Bucket=name, Key="stolen", CopySource={"Bucket": name, "Key": "k"})
    assert err(e) == ("NoSuchKey", 404)
    bob.delete_object(Bucket=name, Key="k")  # a no-op in bob's namespace
    assert alice.get_object(Bucket=name, Key="k")["Body"].read() == b"alice"


@pytest.mark.parametrize("key,code", [
    ("../escape", "InvalidObjectName"),
    ("a/../../b", "InvalidObjectName"),
    ("a/./b", "InvalidObjectName"),
    ("a//b", "InvalidObjectName"),
    ("a/%2e%2e/b", "InvalidObjectName"),
    ("ctl\x01char", "InvalidObjectName"),
    ("k" * 1025, "KeyTooLongError"),
])
def test_malformed_keys_are_refused(alice, bucket, key, code):
    with pytest.raises(ClientError) as e:
        alice.put_object(Bucket=bucket, Key=key, Body=b"x")
    assert err(e) == (code, 400)
    assert "Contents" not in alice.list_objects_v2(Bucket=bucket)


def test_bad_signature_and_unknown_key(gateway, bucket):
    t = gateway.tenant("alice")
    wrong = s3_client(gateway.endpoint, t.access_key, "not-the-secret-000")
    with pytest.raises(ClientError) as e:
        wrong.list_objects_v2(Bucket=bucket)
    assert err(e) == ("SignatureDoesNotMatch", 403)
    ghost = s3_client(gateway.endpoint, "AKIDNOBODY00000TEST", "whatever-secret-000")
    with pytest.raises(ClientError) as e:
        ghost.list_buckets()
    assert err(e) == ("InvalidAccessKeyId", 403)


def test_unsigned_requests_are_refused(gateway, alice, bucket):
    alice.put_object(Bucket=bucket, Key="public?", Body=b"x")
    for method, path in [("GET", "/"), ("GET", f"/{bucket}"), ("GET", f"/{bucket}/public%3F"),
                         ("PUT", f"/{bucket}/new"), ("DELETE", f"/{bucket}")]:
        r = requests.request(method, gateway.endpoint + path, data=b"x" if method == "PUT" else None, timeout=10)
        assert r.status_code == 403, (method, path, r.status_code)
        assert b"AccessDenied" in r.content
    assert alice.head_bucket(Bucket=bucket)


def presign(alice, bucket, key, expires, signed_at=None):
    """A presigned GET, signed at `signed_at` (default: now) for `expires` seconds."""
    params = {"Bucket": bucket, "Key": key}
    if signed_at is None:
        return alice.generate_presigned_url("get_object", Params=params, ExpiresIn=expires)
    with mock.patch("botocore.auth.get_current_datetime", return_value=signed_at.replace(tzinfo=None)):
        return alice.generate_presigned_url("get_object", Params=params, ExpiresIn=expires)


def test_expired_presigned_url_is_refused(gateway, alice, bucket):
    alice.put_object(Bucket=bucket, Key="p", Body=b"x")
    # Signed ten minutes ago for one minute (the signature's own clock).
    ago = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=10)
    url = presign(alice, bucket, "p", 60, signed_at=ago)
    r = requests.get(url, timeout=10)
    assert r.status_code == 403 and b"expired" in r.content, r.content
    # The same URL signed now works: the refusal was about time alone.
    url = presign(alice, bucket, "p", 60)
    assert requests.get(url, timeout=10).content == b"x"
    tampered = url.replace("Key=p", "Key=q") if "Key=p" in url else url.replace("/p?", "/q?")
    assert requests.get(tampered, timeout=10).status_code in (403, 404)


def test_presigned_urls_live_at_most_a_week(gateway, alice, bucket):
    """As S3: a URL signed for longer than a week would be a credential that never lapses."""
    alice.put_object(Bucket=bucket, Key="p", Body=b"x")
    week = 7 * 24 * 3600
    assert requests.get(presign(alice, bucket, "p", week), timeout=10).content == b"x"
    r = requests.get(presign(alice, bucket, "p", week + 1), timeout=10)
    assert r.status_code == 400 and b"AuthorizationQueryParametersError" in r.content, r.content


def test_sigv2_is_refused(gateway, bucket):
    r = requests.get(f"{gateway.endpoint}/{bucket}", headers={
        "Authorization": f"AWS {gateway.tenant('alice').access_key}:bm90YXNpZ25hdHVyZQ==",
        "Date": datetime.datetime.now(datetime.timezone.utc).strftime("%a, %d %b %Y %H:%M:%S GMT"),
    }, timeout=10)
    assert r.status_code == 403


def test_replayed_request_outside_the_skew_window_is_refused(gateway, bucket):
    t = gateway.tenant("alice")
    req = AWSRequest(method="GET", url=f"{gateway.endpoint}/{bucket}?list-type=2")
    signer = SigV4Auth(Credentials(t.access_key, t.secret_key), "s3", REGION)
    old = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=30)
    req.headers["x-amz-content-sha256"] = "UNSIGNED-PAYLOAD"
    # A request captured half an hour ago: sign it with that clock.
    with mock.patch("botocore.auth.get_current_datetime", return_value=old.replace(tzinfo=None)):
        signer.add_auth(req)
    r = requests.get(req.url, headers=dict(req.headers), timeout=10)
    assert r.status_code == 403 and b"RequestTimeTooSkewed" in r.content, r.content
    # The same request signed now is accepted: the refusal above was about time alone.
    fresh = AWSRequest(method="GET", url=f"{gateway.endpoint}/{bucket}?list-type=2")
    fresh.headers["x-amz-content-sha256"] = "UNSIGNED-PAYLOAD"
    signer.add_auth(fresh)
    assert requests.get(fresh.url, headers=dict(fresh.headers), timeout=10).status_code == 200


def test_oversized_headers_do_not_hurt_the_server(gateway, alice, bucket):
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (1024 * 1024) + b"\r\n\r\n")
        try:
            reply = s.recv(100)
        except OSError:
            reply = b""
    assert not reply.startswith(b"HTTP/1.1 200")
    alice.head_bucket(Bucket=bucket)  # still serving


def test_an_oversized_header_section_is_refused_with_an_s3_error(gateway, alice, bucket):
    """Stored headers come back with every GET and HEAD; past the gateway's 16 KiB limit a
    request is refused before anything is stored (hyper alone took 400 KiB, and boto3 could
    then not read the object back)."""
    with pytest.raises(ClientError) as e:
        alice.put_object(Bucket=bucket, Key="typed", Body=b"x", ContentType="a/" + "b" * 20000)
    assert err(e) == ("RequestHeaderSectionTooLarge", 400)
    with pytest.raises(ClientError) as e:
        alice.head_object(Bucket=bucket, Key="typed")
    assert err(e) == ("404", 404)
    within = "a/" + "b" * 12000
    alice.put_object(Bucket=bucket, Key="typed", Body=b"x", ContentType=within)
    assert alice.get_object(Bucket=bucket, Key="typed")["ContentType"] == within
