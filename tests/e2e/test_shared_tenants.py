"""Tenants live in the shared catalog: a gateway serves a tenant its own file does not name,
once any gateway's file seeded it; a file that disagrees with the catalog is reported in that
gateway's log, and the catalog's settings are enforced; a tenant another gateway adds on
SIGHUP reaches the running ones by their periodic refresh."""

import os
import signal
import time

import pytest
from botocore.exceptions import ClientError

from harness import Gateway, Tenant
from multigateway import error
from postgres import postgres  # noqa: F401 (the fixture)

MiB = 1024 * 1024

ALICE_A = Tenant("alice", "AKIDALICE000000TEST", "alice-secret-0123456789", "2MiB")
BOB = Tenant("bob", "AKIDBOB00000000TEST", "bob-secret-0123456789")
# B's file gives alice a quota the catalog (seeded by A) does not hold.
ALICE_B = Tenant("alice", "AKIDALICE000000TEST", "alice-secret-0123456789", "1GiB")
CAROL = Tenant("carol", "AKIDCAROL000000TEST", "carol-secret-0123456789")


@pytest.fixture(scope="module")
def pair(postgres, seaweedfs, tmp_path_factory):  # noqa: F811
    url = postgres.database("sharedtenants")
    extra = f'[catalog]\nurl = "{url}"\n'
    a = Gateway(tmp_path_factory.mktemp("st-a"), seaweedfs.backend(), tenants=[ALICE_A, BOB],
                extra=extra).start()
    b = None
    try:
        b = Gateway(tmp_path_factory.mktemp("st-b"), seaweedfs.backend(), tenants=[ALICE_B],
                    extra=extra).start()
        yield a, b
    finally:
        a.stop()
        if b:
            b.stop()


def test_a_tenant_seeded_by_one_gateway_is_served_by_another_whose_file_lacks_it(pair):
    a, b = pair
    a.client(BOB).create_bucket(Bucket="bobs")
    body = os.urandom(300_000)
    a.client(BOB).put_object(Bucket="bobs", Key="k", Body=body)
    assert b.client(BOB).get_object(Bucket="bobs", Key="k")["Body"].read() == body


def test_a_conflicting_quota_is_reported_and_the_catalogs_is_enforced(pair):
    a, b = pair
    log = (b.workdir / "gateway.log").read_text()
    reported = [line for line in log.splitlines()
                if "differs from the shared catalog" in line and "alice" in line]
    assert reported and "capacity" in reported[0], log
    assert "differs" not in (a.workdir / "gateway.log").read_text()
    alice = b.client(ALICE_B)
    alice.create_bucket(Bucket="alices")
    with pytest.raises(ClientError) as e:  # 3 MiB: within B's file's 1 GiB, not the 2 MiB
        alice.put_object(Bucket="alices", Key="big", Body=os.urandom(3 * MiB))
    assert error(e.value) == ("QuotaExceeded", 403)
    alice.put_object(Bucket="alices", Key="small", Body=os.urandom(MiB))


def test_a_tenant_added_on_reload_reaches_the_other_gateway_by_refresh(pair):
    a, b = pair
    a.tenants.append(CAROL)
    a.write_config()
    a.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 15
    while True:  # polls B until its refresh (every second) serves carol
        try:
            b.client(CAROL).list_buckets()
            break
        except ClientError as e:
            assert error(e)[0] == "InvalidAccessKeyId", e
            assert time.monotonic() < deadline, "carol never reached gateway B"
            time.sleep(0.2)
    a.client(CAROL).create_bucket(Bucket="carols")
    assert [x["Name"] for x in b.client(CAROL).list_buckets()["Buckets"]] == ["carols"]
