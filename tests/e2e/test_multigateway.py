"""Three gateways over one PostgreSQL catalog and a replicated SeaweedFS: any gateway serves
any tenant's objects, byte for byte with their metadata; tenants stay apart through every
gateway; a quota holds exactly across gateways under concurrent writers."""

import concurrent.futures
import os

import pytest
from botocore.exceptions import ClientError

from multigateway import error, start_gateways
from postgres import postgres  # noqa: F401 (the fixture)

MiB = 1024 * 1024


@pytest.fixture(scope="module")
def gateways(postgres, seaweed_cluster, tmp_path_factory):  # noqa: F811
    gws = start_gateways(postgres.database("multigateway"), seaweed_cluster.backend(),
                         tmp_path_factory)
    try:
        yield gws
    finally:
        for gw in gws:
            gw.stop()


def test_objects_written_through_any_gateway_read_identically_through_every_other(gateways):
    writer = gateways[0].client("alice")
    writer.create_bucket(Bucket="shared")
    written = {}
    for i, gw in enumerate(gateways):
        c = gw.client("alice")
        for kind, body in [("small", os.urandom(1000)), ("single", os.urandom(300_000))]:
            key = f"{kind}-{i}"
            c.put_object(Bucket="shared", Key=key, Body=body, ContentType=f"application/x-{i}",
                         Metadata={"writer": str(i), "kind": kind})
            written[key] = (body, f"application/x-{i}", {"writer": str(i), "kind": kind})
        key = f"multi-{i}"
        parts = [os.urandom(5 * MiB), os.urandom(MiB)]
        uid = c.create_multipart_upload(Bucket="shared", Key=key, ContentType="video/x-test",
                                        Metadata={"writer": str(i)})["UploadId"]
        etags = [c.upload_part(Bucket="shared", Key=key, UploadId=uid, PartNumber=n,
                               Body=p)["ETag"] for n, p in enumerate(parts, start=1)]
        c.complete_multipart_upload(Bucket="shared", Key=key, UploadId=uid, MultipartUpload={
            "Parts": [{"PartNumber": n, "ETag": e} for n, e in enumerate(etags, start=1)]})
        written[key] = (b"".join(parts), "video/x-test", {"writer": str(i)})
    for gw in gateways:
        c = gw.client("alice")
        listed = c.list_objects_v2(Bucket="shared")
        assert sorted(o["Key"] for o in listed["Contents"]) == sorted(written)
        for key, (body, ctype, meta) in written.items():
            got = c.get_object(Bucket="shared", Key=key)
            assert got["Body"].read() == body, f"{key} through {gw.endpoint}"
            assert got["ContentType"] == ctype
            assert got["Metadata"] == meta


def test_another_tenant_sees_nothing_through_any_gateway(gateways):
    gateways[1].client("alice").create_bucket(Bucket="private")
    gateways[2].client("alice").put_object(Bucket="private", Key="k", Body=b"secret")
    for gw in gateways:
        bob = gw.client("bob")
        assert "private" not in [b["Name"] for b in bob.list_buckets()["Buckets"]]
        for call in (lambda: bob.get_object(Bucket="private", Key="k"),
                     lambda: bob.list_objects_v2(Bucket="private")):
            with pytest.raises(ClientError) as e:
                call()
            assert error(e.value)[1] in (403, 404)


def test_concurrent_writers_over_three_gateways_never_exceed_the_quota(gateways, postgres):  # noqa: F811
    gateways[0].client("tiny").create_bucket(Bucket="quota")  # tiny: a 10 MiB quota

    def put(i: int):
        c = gateways[i % 3].client("tiny")
        try:
            c.put_object(Bucket="quota", Key=f"k{i}", Body=os.urandom(MiB))
            return "ok"
        except ClientError as e:
            return error(e)

    with concurrent.futures.ThreadPoolExecutor(48) as pool:
        results = list(pool.map(put, range(48)))
    assert set(results) <= {"ok", ("QuotaExceeded", 403)}, results
    admitted = results.count("ok")
    assert admitted >= 9, results
    for gw in gateways:
        listed = gw.client("tiny").list_objects_v2(Bucket="quota").get("Contents", [])
        assert len(listed) == admitted
        stored = sum(o["Size"] for o in listed)
        assert stored == admitted * MiB <= 10 * MiB
    ledger = postgres.sql(
        "multigateway",
        "SELECT COALESCE(SUM(bytes), 0) FROM usage WHERE tenant = convert_to('tiny', 'UTF8')",
    )
    assert int(ledger) == admitted * MiB
