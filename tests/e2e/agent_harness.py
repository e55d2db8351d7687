"""A sluice node agent process for the end-to-end suite, next to a gateway from harness.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import requests
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from harness import REGION, Tenant, free_port, s3_client, sluice_bin, wait_for_port


@dataclass
class LocalSpec:
    """A tenant's node-local settings (all optional, as in the config file)."""

    local_capacity: str | None = None
    drain_rate: str | None = None
    interval: str | None = None
    limit: str | None = None
    retention: str | int | None = None
    # The tenant's share of the node's local device (with `[agent.capacity]` in `extra`).
    local_reservation: str | None = None
    local_weight: float | None = None
    local_limit: str | None = None

    def toml(self) -> str:
        out = []
        for k in ["local_capacity", "drain_rate", "interval", "limit", "local_reservation",
                  "local_limit"]:
            v = getattr(self, k)
            if v is not None:
                out.append(f'{k} = "{v}"')
        if self.local_weight is not None:
            out.append(f"local_weight = {self.local_weight}")
        if self.retention is not None:
            r = self.retention
            out.append(f"retention = {r}" if isinstance(r, int) else f'retention = "{r}"')
        return "\n".join(out)


@dataclass
class Agent:
    workdir: Path
    upstream: str | list[str]  # one gateway's endpoint, or several (`upstream = [...]`)
    tenants: list[Tenant]
    local: dict[str, LocalSpec] = field(default_factory=dict)
    port: int = 0
    status_port: int | None = None
    extra: str = ""  # more `[agent]` keys, e.g. 'escrow_lease = "2s"'
    proc: subprocess.Popen | None = None

    @property
    def config_path(self) -> Path:
        return self.workdir / "agent.toml"

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def write_config(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        if not self.port:
            self.port = free_port()
        lines = [
            "[agent]",
            f'listen = "127.0.0.1:{self.port}"',
            f'data_dir = "{self.workdir / "data"}"',
            f"upstream = {json.dumps(self.upstream)}",
        ]
        if self.status_port is not None:
            lines.append(f'status_listen = "127.0.0.1:{self.status_port}"')
        if self.extra:
            lines.append(self.extra)
        for t in self.tenants:
            lines += [
                "[[tenant]]",
                f'id = "{t.id}"',
                f'access_key = "{t.access_key}"',
                f'secret_key = "{t.secret_key}"',
                f'capacity = "{t.capacity}"',
                self.local.get(t.id, LocalSpec()).toml(),
            ]
        self.config_path.write_text("\n".join(lines) + "\n")

    def start(self) -> "Agent":
        self.write_config()
        log = open(self.workdir / "agent.log", "ab")
        self.proc = subprocess.Popen(
            [sluice_bin(), "agent", "--config", str(self.config_path)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(os.environ),
        )
        wait_for_port(self.port, self.proc)
        return self

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def kill9(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def client(self, tenant: Tenant, **config):
        return s3_client(self.endpoint, tenant.access_key, tenant.secret_key, **config)

    def cli_status(self, *extra: str) -> str:
        """`sluice agent status --config FILE`, as an operator runs it."""
        return subprocess.run(
            [sluice_bin(), "agent", "status", "--config", str(self.config_path), *extra],
            check=True, capture_output=True, text=True,
        ).stdout

    def operator(self, path: str) -> str:
        """`/status` or `/metrics` on `status_listen`, the operator's address."""
        assert self.status_port is not None, "this agent was started without status_listen"
        with urllib.request.urlopen(f"http://127.0.0.1:{self.status_port}{path}", timeout=10) as r:
            return r.read().decode()

    def status(self) -> dict:
        return json.loads(self.operator("/status"))

    def metrics(self) -> str:
        return self.operator("/metrics")

    def own_status(self, tenant: Tenant) -> requests.Response:
        """`GET /?sluice-status` on the S3 listener, signed with `tenant`'s keys."""
        req = AWSRequest(method="GET", url=f"{self.endpoint}/?sluice-status")
        req.headers["x-amz-content-sha256"] = "UNSIGNED-PAYLOAD"
        SigV4Auth(Credentials(tenant.access_key, tenant.secret_key), "s3", REGION).add_auth(req)
        return requests.get(req.url, headers=dict(req.headers), timeout=10)

    def tenant_status(self, tenant: str) -> dict:
        """The tenant's own row, as the tenant sees it."""
        who = next(t for t in self.tenants if t.id == tenant)
        r = self.own_status(who)
        assert r.status_code == 200, r.text
        [row] = r.json()["tenants"]
        assert row["tenant"] == tenant
        return row

    def wait_drained(self, tenant: str, timeout: float = 120.0) -> dict:
        """Polls status until the tenant has nothing pending (an observable condition)."""
        deadline = time.monotonic() + timeout
        while True:
            s = self.tenant_status(tenant)
            if s["pending_ops"] == 0:
                return s
            if time.monotonic() > deadline:
                raise AssertionError(f"not drained within {timeout}s: {s}")
            time.sleep(0.1)
