"""Health endpoints: `/healthz` (alive) and `/readyz` (able to serve) on the gateway's
metrics listener and the agent's status listener. The gateway is unready when its backend
is unreachable; the agent stays ready when its gateway is (it absorbs writes)."""

from __future__ import annotations

import time
import urllib.error
import urllib.request

from agent_harness import Agent
from harness import DEFAULT_TENANTS, Backend, Gateway, SeaweedFS, free_port, weed_bin

import pytest


def probe(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def metered_gateway(workdir, backend: Backend) -> tuple[Gateway, int]:
    port = free_port()
    gw = Gateway(workdir, backend, extra=f'metrics_listen = "127.0.0.1:{port}"').start()
    return gw, port


def test_gateway_is_alive_and_ready_on_its_metrics_listener(tmp_path):
    gw, port = metered_gateway(tmp_path / "gw", Backend("local"))
    try:
        assert probe(port, "/healthz") == (200, "ok\n")
        assert probe(port, "/readyz") == (200, "ready\n")
        status, body = probe(port, "/nothing")
        assert status == 404 and "/readyz" in body
    finally:
        gw.stop()


def test_gateway_is_unready_while_its_backend_is_unreachable(tmp_path):
    if weed_bin() is None:
        pytest.skip("weed binary not installed")
    weed = SeaweedFS(tmp_path / "weed").start()
    gw, port = metered_gateway(tmp_path / "gw", weed.backend())
    try:
        assert probe(port, "/readyz") == (200, "ready\n")
        weed.proc.kill()
        weed.proc.wait()
        status, body = probe(port, "/readyz")
        assert status == 503, body
        assert "backend" in body, body
        # Still alive: a liveness probe must not restart a gateway whose backend is down.
        assert probe(port, "/healthz") == (200, "ok\n")
    finally:
        gw.stop()
        weed.stop()


def test_agent_stays_ready_with_its_gateway_down(tmp_path):
    gw = Gateway(tmp_path / "gw", Backend("local")).start()
    agent = Agent(tmp_path / "agent", gw.endpoint, DEFAULT_TENANTS,
                  status_port=free_port()).start()
    try:
        assert probe(agent.status_port, "/healthz") == (200, "ok\n")
        assert probe(agent.status_port, "/readyz") == (200, "ready\n")
        node = agent.client(DEFAULT_TENANTS[0])
        node.create_bucket(Bucket="ckpt")
        # A first write while the gateway answers: the agent takes shared-tier quota (an
        # escrow chunk) for it and more, so it goes on acknowledging within that once the
        # gateway is gone.
        node.put_object(Bucket="ckpt", Key="first", Body=b"before the outage")
        gw.kill9()
        node.put_object(Bucket="ckpt", Key="k", Body=b"absorbed")
        # The drain has met the dead gateway (an observable condition) and the agent is
        # still ready.
        deadline = time.monotonic() + 30
        while agent.tenant_status("alice")["last_error"] is None:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert probe(agent.status_port, "/readyz") == (200, "ready\n")
    finally:
        agent.stop()
        gw.stop()
