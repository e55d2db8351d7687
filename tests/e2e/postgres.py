"""A PostgreSQL server for the end-to-end suite, started the way the Rust tests start it:
Debian's binaries (`initdb`, `postgres`, `psql`; on PATH or under
`/usr/lib/postgresql/*/bin`), a fresh cluster in a temp dir, a free loopback port, run as
`nobody` when the suite runs as root (initdb refuses root), trust authentication on
loopback, readiness polled. `postgres()` is the module fixture; in CI a missing PostgreSQL
fails, elsewhere it skips."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from harness import free_port

START_TIMEOUT = 60.0


def pg_bin_dir() -> Path | None:
    initdb = shutil.which("initdb")
    if initdb and shutil.which("postgres"):
        return Path(os.path.realpath(initdb)).parent
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    return found[-1].parent if found else None


class Postgres:
    def __init__(self, workdir: Path, bin_dir: Path):
        self.workdir = workdir
        self.bin = bin_dir
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self.root = os.geteuid() == 0

    def _as_postgres(self, program: str) -> list[str]:
        exe = str(self.bin / program)
        if self.root:
            return ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", exe]
        return [exe]

    def start(self) -> "Postgres":
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self.root:
            os.chown(self.workdir, 65534, 65534)
        data = self.workdir / "data"
        subprocess.run(
            self._as_postgres("initdb")
            + ["-D", str(data), "-U", "sluice", "--auth=trust", "-E", "UTF8", "--no-sync"],
            check=True, capture_output=True,
        )
        log = open(self.workdir / "postgres.log", "ab")
        self.proc = subprocess.Popen(
            self._as_postgres("postgres")
            + ["-D", str(data), "-p", str(self.port), "-k", str(self.workdir),
               "-c", "listen_addresses=127.0.0.1", "-c", "max_connections=300"],
            stdout=subprocess.DEVNULL, stderr=log,
        )
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"postgres exited: {(self.workdir / 'postgres.log').read_text()}")
            if self.try_sql("postgres", "SELECT 1") is not None:
                return self
            if time.monotonic() > deadline:
                raise RuntimeError("postgres did not accept connections")
            time.sleep(0.05)

    def url(self, database: str) -> str:
        return f"postgres://sluice@127.0.0.1:{self.port}/{database}"

    def try_sql(self, database: str, sql: str) -> str | None:
        r = subprocess.run(
            [str(self.bin / "psql"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "sluice",
             "-d", database, "-Atqc", sql],
            capture_output=True, text=True,
        )
        return r.stdout.strip() if r.returncode == 0 else None

    def sql(self, database: str, sql: str) -> str:
        out = self.try_sql(database, sql)
        assert out is not None, f"{sql} failed"
        return out

    def database(self, name: str) -> str:
        """A new empty database; its URL."""
        self.sql("postgres", f"CREATE DATABASE {name}")
        return self.url(name)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            # SIGINT: fast shutdown.
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(scope="module")
def postgres():
    bin_dir = pg_bin_dir()
    if bin_dir is None:
        msg = "PostgreSQL is not installed (apt-get install postgresql)"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    # Not under pytest's tmp_path: its parents are root's alone, and the server runs as nobody.
    workdir = Path(tempfile.mkdtemp(prefix="sluice-pg-"))
    pg = Postgres(workdir, bin_dir)
    try:
        yield pg.start()
    finally:
        pg.stop()
        shutil.rmtree(workdir, ignore_errors=True)
