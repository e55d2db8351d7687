"""Conditional requests, stored representation headers and listing edge cases, driven by
boto3 against the gateway (each backend) and through the node agent: S3's answers (412, 304)
and its precedence, create-only and compare-and-swap writes decided atomically (64 racing
create-only PUTs of one key: exactly one wins), and the listing cases S3 defines."""

import datetime
import hashlib
import threading

import pytest
from botocore.exceptions import ClientError

from agent_harness import Agent
from harness import DEFAULT_TENANTS, Backend, Gateway, free_port

MiB = 1024 * 1024
ALICE = DEFAULT_TENANTS[0]
PAST = datetime.datetime(2000, 1, 1, tzinfo=datetime.timezone.utc)
FUTURE = datetime.datetime(2100, 1, 1, tzinfo=datetime.timezone.utc)


def status(excinfo) -> int:
    return excinfo.value.response["ResponseMetadata"]["HTTPStatusCode"]


def code(excinfo) -> str:
    return excinfo.value.response["Error"]["Code"]


def answer(call, **kw) -> int:
    """The HTTP status a call gets: 200, or the error's."""
    try:
        call(**kw)
        return 200
    except ClientError as e:
        return e.response["ResponseMetadata"]["HTTPStatusCode"]


def check_read_conditions(client, bucket: str, key: str) -> None:
    """GET and HEAD of `key` under every condition S3 defines, and their precedence."""
    etag = client.head_object(Bucket=bucket, Key=key)["ETag"]
    for call in (client.get_object, client.head_object):
        def c(**kw):
            return answer(call, Bucket=bucket, Key=key, **kw)

        assert c(IfMatch='"0123456789abcdef0123456789abcdef"') == 412
        assert c(IfMatch=etag) == 200
        assert c(IfMatch="*") == 200
        assert c(IfNoneMatch=etag) == 304
        assert c(IfNoneMatch="*") == 304
        assert c(IfNoneMatch='"0123456789abcdef0123456789abcdef"') == 200
        assert c(IfModifiedSince=FUTURE) == 304
        assert c(IfModifiedSince=PAST) == 200
        assert c(IfUnmodifiedSince=PAST) == 412
        assert c(IfUnmodifiedSince=FUTURE) == 200
        # If-Match true beats If-Unmodified-Since false; If-None-Match false beats
        # If-Modified-Since true (S3's GetObject documentation).
        assert c(IfMatch=etag, IfUnmodifiedSince=PAST) == 200
        assert c(IfNoneMatch=etag, IfModifiedSince=PAST) == 304
        assert c(IfNoneMatch='"stale"', IfModifiedSince=FUTURE) == 200
    with pytest.raises(ClientError) as e:
        client.get_object(Bucket=bucket, Key=key, IfNoneMatch=etag)
    headers = e.value.response["ResponseMetadata"]["HTTPHeaders"]
    assert headers["etag"] == etag
    assert "last-modified" in headers
    assert headers.get("content-length", "0") == "0"
    with pytest.raises(ClientError) as e:
        client.get_object(Bucket=bucket, Key=key, IfMatch='"stale"')
    assert code(e) == "PreconditionFailed"


def test_get_and_head_answer_412_and_304_with_s3s_precedence(alice, bucket):
    alice.put_object(Bucket=bucket, Key="k", Body=b"hello")
    check_read_conditions(alice, bucket, "k")
    # A multipart object's ETag ("...-N") is compared like any other.
    up = alice.create_multipart_upload(Bucket=bucket, Key="mp")["UploadId"]
    part = alice.upload_part(Bucket=bucket, Key="mp", UploadId=up, PartNumber=1, Body=b"x" * 10)
    alice.complete_multipart_upload(
        Bucket=bucket, Key="mp", UploadId=up,
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]},
    )
    check_read_conditions(alice, bucket, "mp")


def test_create_only_put_refuses_an_existing_key_and_keeps_it(alice, bucket):
    first = alice.put_object(Bucket=bucket, Key="k", Body=b"first", IfNoneMatch="*")
    with pytest.raises(ClientError) as e:
        alice.put_object(Bucket=bucket, Key="k", Body=b"second" * 100_000, IfNoneMatch="*")
    assert (status(e), code(e)) == (412, "PreconditionFailed")
    got = alice.get_object(Bucket=bucket, Key="k")
    assert (got["Body"].read(), got["ETag"]) == (b"first", first["ETag"])


def test_compare_and_swap_put_replaces_only_the_named_version(alice, bucket):
    with pytest.raises(ClientError) as e:
        alice.put_object(Bucket=bucket, Key="k", Body=b"v0", IfMatch='"absent"')
    assert status(e) == 412
    v1 = alice.put_object(Bucket=bucket, Key="k", Body=b"v1")["ETag"]
    v2 = alice.put_object(Bucket=bucket, Key="k", Body=b"v2", IfMatch=v1)["ETag"]
    with pytest.raises(ClientError) as e:
        alice.put_object(Bucket=bucket, Key="k", Body=b"v3", IfMatch=v1)
    assert status(e) == 412
    assert alice.get_object(Bucket=bucket, Key="k")["Body"].read() == b"v2"
    alice.put_object(Bucket=bucket, Key="k", Body=b"v3", IfMatch=v2)
    assert alice.get_object(Bucket=bucket, Key="k")["Body"].read() == b"v3"


def test_complete_multipart_upload_honours_create_only_and_keeps_a_refused_upload(alice, bucket):
    def upload(key: str) -> tuple[str, list]:
        up = alice.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
        part = alice.upload_part(Bucket=bucket, Key=key, UploadId=up, PartNumber=1, Body=b"p" * 100)
        return up, [{"PartNumber": 1, "ETag": part["ETag"]}]

    up, parts = upload("new")
    alice.complete_multipart_upload(
        Bucket=bucket, Key="new", UploadId=up, MultipartUpload={"Parts": parts}, IfNoneMatch="*")
    alice.put_object(Bucket=bucket, Key="taken", Body=b"already")
    up, parts = upload("taken")
    with pytest.raises(ClientError) as e:
        alice.complete_multipart_upload(
            Bucket=bucket, Key="taken", UploadId=up, MultipartUpload={"Parts": parts},
            IfNoneMatch="*")
    assert status(e) == 412
    assert alice.get_object(Bucket=bucket, Key="taken")["Body"].read() == b"already"
    # The upload is still there: S3 lets the client complete it unconditionally or abort it.
    assert len(alice.list_parts(Bucket=bucket, Key="taken", UploadId=up)["Parts"]) == 1
    current = alice.head_object(Bucket=bucket, Key="taken")["ETag"]
    alice.complete_multipart_upload(
        Bucket=bucket, Key="taken", UploadId=up, MultipartUpload={"Parts": parts}, IfMatch=current)
    assert alice.get_object(Bucket=bucket, Key="taken")["Body"].read() == b"p" * 100


def test_copy_object_honours_destination_and_source_conditions(alice, bucket):
    src = alice.put_object(Bucket=bucket, Key="src", Body=b"source")["ETag"]
    alice.put_object(Bucket=bucket, Key="dst", Body=b"old")
    source = {"Bucket": bucket, "Key": "src"}
    with pytest.raises(ClientError) as e:
        alice.copy_object(Bucket=bucket, Key="dst", CopySource=source, IfNoneMatch="*")
    assert status(e) == 412
    alice.copy_object(Bucket=bucket, Key="fresh", CopySource=source, IfNoneMatch="*")
    old = alice.head_object(Bucket=bucket, Key="dst")["ETag"]
    with pytest.raises(ClientError) as e:
        alice.copy_object(Bucket=bucket, Key="dst", CopySource=source, IfMatch='"stale"')
    assert status(e) == 412
    assert alice.get_object(Bucket=bucket, Key="dst")["Body"].read() == b"old"
    alice.copy_object(Bucket=bucket, Key="dst", CopySource=source, IfMatch=old)
    assert alice.get_object(Bucket=bucket, Key="dst")["Body"].read() == b"source"
    # The source's own conditions: any failing one is 412.
    for kw in ({"CopySourceIfMatch": '"stale"'}, {"CopySourceIfNoneMatch": src},
               {"CopySourceIfUnmodifiedSince": PAST}, {"CopySourceIfModifiedSince": FUTURE}):
        assert answer(alice.copy_object, Bucket=bucket, Key="c", CopySource=source, **kw) == 412
    alice.copy_object(Bucket=bucket, Key="c", CopySource=source, CopySourceIfMatch=src)


def test_64_racing_create_only_puts_of_one_key_have_exactly_one_winner(gateway):
    # The 10 MiB tenant, so that the quota shows every loser's reservation released.
    client = gateway.client("tiny", max_pool_connections=64)
    client.create_bucket(Bucket="race")
    bodies = [f"writer {i:2} ".encode() * (1 + i * 100) for i in range(64)]
    results: list[int | None] = [None] * 64
    start = threading.Barrier(64)

    def put(i: int) -> None:
        start.wait()
        results[i] = answer(client.put_object, Bucket="race", Key="k", Body=bodies[i],
                            IfNoneMatch="*")

    threads = [threading.Thread(target=put, args=(i,)) for i in range(64)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [200] + [412] * 63, results
    winner = bodies[results.index(200)]
    got = client.get_object(Bucket="race", Key="k")
    assert got["Body"].read() == winner
    assert got["ETag"] == f'"{hashlib.md5(winner).hexdigest()}"'
    # Only the winner's bytes are held: the rest of the quota fits exactly, one more byte not.
    client.put_object(Bucket="race", Key="fill", Body=b"f" * (10 * MiB - len(winner)))
    with pytest.raises(ClientError) as e:
        client.put_object(Bucket="race", Key="one-more", Body=b"1")
    assert code(e) == "QuotaExceeded"


HEADERS = {
    "CacheControl": "max-age=3600, public",
    "ContentDisposition": 'attachment; filename="weights.bin"',
    "ContentEncoding": "gzip",
    "ContentLanguage": "en-GB",
}
EXPIRES = datetime.datetime(2030, 6, 1, 12, 0, 0, tzinfo=datetime.timezone.utc)


def check_stored_headers(client, bucket: str, key: str, expected: dict, expires) -> None:
    for got in (client.get_object(Bucket=bucket, Key=key), client.head_object(Bucket=bucket, Key=key)):
        assert {k: got.get(k) for k in HEADERS} == expected
        assert got.get("Expires") == expires


def test_representation_headers_are_stored_copied_and_replaced(alice, bucket):
    for key, body in (("small", b"s"), ("large", b"L" * (2 * MiB))):
        alice.put_object(Bucket=bucket, Key=key, Body=body, Expires=EXPIRES, **HEADERS)
        check_stored_headers(alice, bucket, key, HEADERS, EXPIRES)
        source = {"Bucket": bucket, "Key": key}
        alice.copy_object(Bucket=bucket, Key=f"{key}-copy", CopySource=source)
        check_stored_headers(alice, bucket, f"{key}-copy", HEADERS, EXPIRES)
        alice.copy_object(Bucket=bucket, Key=f"{key}-replaced", CopySource=source,
                          MetadataDirective="REPLACE", CacheControl="no-store")
        replaced = {k: None for k in HEADERS} | {"CacheControl": "no-store"}
        check_stored_headers(alice, bucket, f"{key}-replaced", replaced, None)
    up = alice.create_multipart_upload(Bucket=bucket, Key="mp", Expires=EXPIRES, **HEADERS)
    part = alice.upload_part(Bucket=bucket, Key="mp", UploadId=up["UploadId"], PartNumber=1, Body=b"x")
    alice.complete_multipart_upload(
        Bucket=bucket, Key="mp", UploadId=up["UploadId"],
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]},
    )
    check_stored_headers(alice, bucket, "mp", HEADERS, EXPIRES)


ODD = "odd key %+&<\u00e9\u4e2d.bin"


def test_listing_edge_cases(alice, bucket):
    # (A key ending in "/" is refused by sluice's key rules, so none is the prefix itself.)
    for key in ["a/b", "a/c/d", "b", ODD]:
        alice.put_object(Bucket=bucket, Key=key, Body=b"x")

    def keys(page):
        return [o["Key"] for o in page.get("Contents", [])]

    def prefixes(page):
        return [p["Prefix"] for p in page.get("CommonPrefixes", [])]

    everything = sorted(["a/b", "a/c/d", "b", ODD])
    # An empty delimiter is no delimiter.
    page = alice.list_objects_v2(Bucket=bucket, Delimiter="")
    assert (keys(page), prefixes(page)) == (everything, [])
    # A prefix ending in the delimiter: the keys directly under it, deeper ones rolled up.
    for listing in (alice.list_objects_v2, alice.list_objects):
        page = listing(Bucket=bucket, Prefix="a/", Delimiter="/")
        assert (keys(page), prefixes(page)) == (["a/b"], ["a/c/"])
    # max-keys=0: nothing, and not truncated.
    for listing in (alice.list_objects_v2, alice.list_objects):
        page = listing(Bucket=bucket, MaxKeys=0)
        assert (keys(page), page["IsTruncated"]) == ([], False)
    # boto3 asks for encoding-type=url itself and decodes: the odd key comes back exact.
    assert keys(alice.list_objects_v2(Bucket=bucket)) == everything
    assert keys(alice.list_objects(Bucket=bucket)) == everything
    # Asked explicitly, boto3 leaves the encoding alone: each UTF-8 byte is percent-encoded.
    page = alice.list_objects_v2(Bucket=bucket, EncodingType="url", Prefix="odd")
    assert keys(page) == ["odd%20key%20%25%2B%26%3C%C3%A9%E4%B8%AD.bin"]
    assert page["EncodingType"] == "url"
    page = alice.list_objects_v2(Bucket=bucket, Prefix="odd key %")
    assert keys(page) == [ODD]
    assert page["Prefix"] == "odd key %"


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    """A gateway (the shared tier) and an agent in front of it."""
    gw = Gateway(tmp_path_factory.mktemp("cond-gw"), Backend("local")).start()
    agent = Agent(tmp_path_factory.mktemp("cond-agent"), gw.endpoint, DEFAULT_TENANTS, {},
                  status_port=free_port()).start()
    yield gw, agent
    agent.stop()
    gw.stop()


def test_through_the_agent_reads_are_conditional_here_and_upstream(node):
    gw, agent = node
    here, upstream = agent.client(ALICE), gw.client("alice")
    upstream.create_bucket(Bucket="shared")
    # Only upstream: the agent has no copy and applies the conditions to the tier's record.
    upstream.put_object(Bucket="shared", Key="remote", Body=b"from the tier", **HEADERS)
    check_read_conditions(here, "shared", "remote")
    check_stored_headers(here, "shared", "remote", HEADERS, None)
    # Written through the node: decided against the node's catalog.
    here.put_object(Bucket="shared", Key="local", Body=b"on the node", Expires=EXPIRES, **HEADERS)
    check_read_conditions(here, "shared", "local")
    check_stored_headers(here, "shared", "local", HEADERS, EXPIRES)
    here.put_object(Bucket="shared", Key="once", Body=b"1", IfNoneMatch="*")
    with pytest.raises(ClientError) as e:
        here.put_object(Bucket="shared", Key="once", Body=b"2", IfNoneMatch="*")
    assert status(e) == 412
