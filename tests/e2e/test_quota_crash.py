"""The capacity boundary under concurrency, and the catalog's crash model under kill -9.

Both run against the local filesystem backend, where the bytes actually stored can be
counted on disk and compared with the ledger (less the small objects kept inline in the
catalog, which have no blob)."""

import concurrent.futures
import os
import random
import threading
import time
import uuid
from pathlib import Path

import pytest
from botocore.exceptions import ClientError

from harness import INLINE_MAX, Backend, Gateway, Tenant

MiB = 1024 * 1024
QUOTA = 10 * MiB


def stored_bytes(gw: Gateway, tenant: str) -> int:
    root = gw.workdir / "data" / "objects" / "tenants" / tenant
    # Blobs only: recovery records (`<bucket>/rec/...`) are not charged to the quota.
    return sum(p.stat().st_size for p in root.rglob("*")
               if p.is_file() and p.relative_to(root).parts[1:2] != ("rec",)) if root.exists() else 0


def inline_bytes(client, bucket: str) -> int:
    """Bytes of the objects kept in the catalog: single PUTs (ETag without `-N`) this small."""
    return sum(o["Size"] for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket)
               for o in page.get("Contents", [])
               if o["Size"] <= INLINE_MAX and "-" not in o["ETag"])


def catalog_bytes(client, bucket: str) -> int:
    total = sum(o["Size"] for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket)
                for o in page.get("Contents", []))
    for up in client.list_multipart_uploads(Bucket=bucket).get("Uploads", []):
        parts = client.list_parts(Bucket=bucket, Key=up["Key"], UploadId=up["UploadId"]).get("Parts", [])
        total += sum(p["Size"] for p in parts)
    return total


def test_concurrent_writers_never_exceed_the_quota(tmp_path):
    gw = Gateway(tmp_path, Backend("local")).start()
    try:
        admin = gw.client("tiny")
        admin.create_bucket(Bucket="quota")
        outcomes = {"ok": 0, "quota": 0}
        lock = threading.Lock()
        other_errors = []

        def put(i: int):
            c = gw.client("tiny")
            size = random.Random(i).randint(MiB // 2, 2 * MiB)
            try:
                c.put_object(Bucket="quota", Key=f"put-{i}", Body=os.urandom(size))
                return "ok"
            except ClientError as e:
                return e.response["Error"]["Code"], e.response["ResponseMetadata"]["HTTPStatusCode"]

        def multipart(i: int):
            c = gw.client("tiny")
            key = f"mp-{i}"
            try:
                uid = c.create_multipart_upload(Bucket="quota", Key=key)["UploadId"]
                etags = []
                for n, size in enumerate([5 * MiB, MiB], start=1):
                    etags.append(c.upload_part(Bucket="quota", Key=key, UploadId=uid, PartNumber=n,
                                               Body=os.urandom(size))["ETag"])
                c.complete_multipart_upload(Bucket="quota", Key=key, UploadId=uid, MultipartUpload={
                    "Parts": [{"PartNumber": n, "ETag": e} for n, e in enumerate(etags, start=1)]})
                return "ok"
            except ClientError as e:
                return e.response["Error"]["Code"], e.response["ResponseMetadata"]["HTTPStatusCode"]

        with concurrent.futures.ThreadPoolExecutor(64) as pool:
            futures = [pool.submit(put if i % 2 else multipart, i) for i in range(64)]
            for f in futures:
                r = f.result()
                with lock:
                    if r == "ok":
                        outcomes["ok"] += 1
                    elif r == ("QuotaExceeded", 403):
                        outcomes["quota"] += 1
                    else:
                        other_errors.append(r)
        assert other_errors == []
        assert outcomes["ok"] > 0 and outcomes["quota"] > 0, outcomes
        visible = catalog_bytes(admin, "quota")
        assert visible <= QUOTA
        # A write that fits in what is left still succeeds: refusals were about space.
        free = QUOTA - visible
        if free > 0:
            admin.put_object(Bucket="quota", Key="last", Body=b"x" * min(free, 1024))
            visible = catalog_bytes(admin, "quota")
        inline = inline_bytes(admin, "quota")
    finally:
        gw.stop()
    assert gw.tenant_usage()["tiny"] == visible
    assert stored_bytes(gw, "tiny") == visible - inline
    assert visible <= QUOTA


def payload(key: str) -> bytes:
    size = int(key.rsplit("-", 1)[1])
    return random.Random(key).randbytes(size)


@pytest.mark.parametrize("round_", range(int(os.environ.get("SLUICE_CRASH_ROUNDS", "5"))))
def test_kill_9_during_uploads_then_restart(tmp_path, round_):
    seed = int(os.environ.get("SLUICE_CRASH_SEED", random.randrange(1 << 30))) + round_
    print(f"crash round {round_}: seed {seed} (replay with SLUICE_CRASH_SEED={seed - round_})")
    rng = random.Random(seed)
    gw = Gateway(tmp_path, Backend("local")).start()
    acked: list[str] = []
    stop = threading.Event()
    admin = gw.client("alice")
    admin.create_bucket(Bucket="crash")

    def writer(w: int):
        wr = random.Random(seed * 100 + w)
        c = gw.client("alice")
        i = 0
        while not stop.is_set():
            i += 1
            size = wr.choice([0, 1, 4096, INLINE_MAX, INLINE_MAX + 1, 300_000, 2 * MiB, 9 * MiB])
            key = f"w{w}/obj{i}-{size}"
            try:
                if size >= 9 * MiB:
                    c.upload_fileobj(__import__("io").BytesIO(payload(key)), "crash", key)
                else:
                    c.put_object(Bucket="crash", Key=key, Body=payload(key))
                acked.append(key)
            except Exception:
                return

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(6)]
    for t in threads:
        t.start()
    time.sleep(rng.uniform(0.3, 2.0))
    gw.kill9()
    stop.set()
    for t in threads:
        t.join()

    gw.start()
    try:
        c = gw.client("alice", max_attempts=3)
        listed = {o["Key"]: o["Size"]
                  for page in c.get_paginator("list_objects_v2").paginate(Bucket="crash")
                  for o in page.get("Contents", [])}
        missing = [k for k in acked if k not in listed]
        assert missing == [], f"acknowledged but lost (seed {seed}): {missing}"
        for key, size in listed.items():
            body = c.get_object(Bucket="crash", Key=key)["Body"].read()
            assert len(body) == size and body == payload(key), f"partial or corrupt {key} (seed {seed})"
        visible = catalog_bytes(c, "crash")
        inline = inline_bytes(c, "crash")
    finally:
        gw.stop()
    assert gw.tenant_usage()["alice"] == visible, f"seed {seed}"
    assert stored_bytes(gw, "alice") == visible - inline, f"orphans left on disk (seed {seed})"


def test_the_object_count_quota_holds_under_concurrent_writers(tmp_path):
    """`max_objects`: every object and multipart upload in progress costs the catalog a
    record the byte quota does not count; past the maximum a new one is refused
    (`QuotaExceeded`, 403), an overwrite is not, and concurrent writers cannot overshoot."""
    counted = Tenant("counted", "AKIDCOUNTED000TEST", "counted-secret-0123456789", max_objects=6)
    gw = Gateway(tmp_path, Backend("local"), tenants=[counted]).start()
    try:
        c = gw.client(counted)
        c.create_bucket(Bucket="bkt")
        uid = c.create_multipart_upload(Bucket="bkt", Key="big")["UploadId"]

        def put(key: str) -> str:
            try:
                c.put_object(Bucket="bkt", Key=key, Body=b"x")
                return "ok"
            except ClientError as e:
                assert e.response["ResponseMetadata"]["HTTPStatusCode"] == 403, e.response
                return e.response["Error"]["Code"]

        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            results = list(pool.map(put, [f"k{i:02d}" for i in range(32)]))
        assert results.count("ok") == 5, results
        assert set(results) == {"ok", "QuotaExceeded"}, results
        keys = [o["Key"] for o in c.list_objects_v2(Bucket="bkt")["Contents"]]
        assert len(keys) == 5
        assert put(keys[0]) == "ok"  # an overwrite is not one more object
        assert put("late") == "QuotaExceeded"
        c.abort_multipart_upload(Bucket="bkt", Key="big", UploadId=uid)
        assert put("late") == "ok"
        c.delete_object(Bucket="bkt", Key=keys[0])
        with pytest.raises(ClientError) as e:
            c.create_multipart_upload(Bucket="bkt", Key="x2")
            c.create_multipart_upload(Bucket="bkt", Key="x3")
        assert e.value.response["Error"]["Code"] == "QuotaExceeded"
        assert "objects" in e.value.response["Error"]["Message"]
    finally:
        gw.stop()
    assert gw.tenant_objects() == {"counted": 6}


def test_a_tenant_owns_at_most_max_buckets(tmp_path):
    owner = Tenant("owner", "AKIDOWNER0000TEST", "owner-secret-0123456789", max_buckets=2)
    gw = Gateway(tmp_path, Backend("local"), tenants=[owner]).start()
    try:
        c = gw.client(owner)
        c.create_bucket(Bucket="one")
        c.create_bucket(Bucket="two")
        with pytest.raises(ClientError) as e:
            c.create_bucket(Bucket="three")
        assert e.value.response["Error"]["Code"] == "TooManyBuckets"
        assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
        assert [b["Name"] for b in c.list_buckets()["Buckets"]] == ["one", "two"]
        c.delete_bucket(Bucket="one")
        c.create_bucket(Bucket="three")
    finally:
        gw.stop()
