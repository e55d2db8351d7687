"""`sluice top`: the deployment found from its configuration file alone, its rates measured.
A gateway paces a 40 MiB/s tier between two tenants (weights 1:3) while boto3 threads drive
them, one writing and one reading, each counting the bytes it moved. `sluice top --once
--json` run during the load reports each tenant's bytes per second within 25% of what its
client measured over the same stretch; the live view under tmux shows both tenants' rows and
quits on `q`, handing the pane back to the shell. Every wait is a poll with a deadline."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time

import pytest
from botocore.exceptions import ClientError

from harness import Backend, Gateway, Tenant, free_port, sluice_bin

MiB = 1024 * 1024
OBJECT = 4 * MiB
CHUNK = 256 * 1024
TENANTS = [
    Tenant("writer", "AKIDWRITER00000TEST", "writer-secret-0123456789"),
    Tenant("reader", "AKIDREADER00000TEST", "reader-secret-0123456789"),
]
WEIGHTS = {"writer": 1, "reader": 3}


@pytest.fixture(scope="module")
def top_gateway(tmp_path_factory):
    gw = Gateway(tmp_path_factory.mktemp("top"), Backend("local"), tenants=TENANTS)
    gw.extra = (
        f'metrics_listen = "127.0.0.1:{free_port()}"\n'
        '[gateway.capacity]\nbandwidth = "40MiB/s"\nops = 2000\nqueue_depth = 16\n'
    )
    gw.write_config()
    text = gw.config_path.read_text()
    for t in TENANTS:
        text = text.replace(f'id = "{t.id}"', f'id = "{t.id}"\nweight = {WEIGHTS[t.id]}')
    gw.config_path.write_text(text)
    gw.write_config = lambda: None  # keep the edited file
    gw.start()
    for t in TENANTS:
        gw.client(t.id).create_bucket(Bucket="data")
    gw.client("reader").put_object(Bucket="data", Key="shard", Body=b"r" * OBJECT)
    yield gw
    gw.stop()


class Load:
    """Threads per tenant moving bytes back to back (the writer PUTs, the reader GETs in
    chunks), each recording (time, bytes) as they move, until `stop`."""

    def __init__(self, gw: Gateway, threads: int = 3):
        self.gw = gw
        self.moved: dict[str, list[tuple[float, int]]] = {t.id: [] for t in TENANTS}
        self.errors: list = []
        self.done = threading.Event()
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.write, args=(i,)) for i in range(threads)]
        self.threads += [threading.Thread(target=self.read) for _ in range(threads)]

    def record(self, tenant: str, n: int) -> None:
        with self.lock:
            self.moved[tenant].append((time.monotonic(), n))

    def write(self, i: int) -> None:
        c = self.gw.client("writer")
        body = b"w" * MiB
        n = 0
        while not self.done.is_set():
            try:
                c.put_object(Bucket="data", Key=f"part-{i}-{n % 4}", Body=body)
            except ClientError as e:
                self.errors.append(("writer", e.response["Error"]["Code"]))
                return
            self.record("writer", len(body))
            n += 1

    def read(self) -> None:
        c = self.gw.client("reader")
        while not self.done.is_set():
            try:
                body = c.get_object(Bucket="data", Key="shard")["Body"]
                for chunk in body.iter_chunks(CHUNK):
                    self.record("reader", len(chunk))
            except ClientError as e:
                self.errors.append(("reader", e.response["Error"]["Code"]))
                return

    def rate(self, tenant: str, start: float, end: float) -> float:
        """Bytes per second the client moved in [start, end]."""
        with self.lock:
            n = sum(b for t, b in self.moved[tenant] if start <= t <= end)
        return n / (end - start)

    def __enter__(self) -> "Load":
        for th in self.threads:
            th.start()
        return self

    def __exit__(self, *exc) -> None:
        self.done.set()
        for th in self.threads:
            th.join(timeout=30)
        assert self.errors == []


def wait_until_moving(load: Load, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not all(load.moved[t.id] for t in TENANTS):
        assert time.monotonic() < deadline, "the load did not start"
        time.sleep(0.05)


def test_once_json_rates_agree_with_what_the_clients_measured(top_gateway):
    with Load(top_gateway) as load:
        wait_until_moving(load)
        # A second of steady state before and around top's two samples.
        time.sleep(1.0)
        start = time.monotonic()
        out = subprocess.run(
            [sluice_bin(), "top", "--once", "--json", "--config", str(top_gateway.config_path)],
            capture_output=True, text=True, timeout=60,
        )
        end = time.monotonic()
        measured = {t.id: load.rate(t.id, start, end) for t in TENANTS}
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    rows = {r["tenant"]: r for r in doc["tenants"]}
    reported = {t: rows[t]["bytes_per_second"] for t in measured}
    print(f"client-measured {dict((t, round(v / MiB, 2)) for t, v in measured.items())} MiB/s, "
          f"top {dict((t, round(v / MiB, 2)) for t, v in reported.items())} MiB/s, "
          f"interval {doc['interval_seconds']:.2f} s, held back "
          f"{dict((t, rows[t]['held_back']) for t in measured)}")
    assert 0.9 <= doc["interval_seconds"] <= 2.0, doc["interval_seconds"]
    for t in measured:
        assert measured[t] > 0, measured
        assert abs(reported[t] - measured[t]) <= 0.25 * measured[t], (t, reported, measured)
    # The direction of each tenant's bytes, and what top says about the tier.
    assert rows["writer"]["write_bytes_per_second"] >= 0.9 * rows["writer"]["bytes_per_second"]
    assert rows["reader"]["read_bytes_per_second"] >= 0.9 * rows["reader"]["bytes_per_second"]
    assert doc["tier_capacity_bps"] == 40 * MiB
    assert rows["reader"]["weight"] == 3 and rows["writer"]["weight"] == 1
    assert [g["gateway"] for g in rows["reader"]["gateways"]] == [doc["gateways"][0]["control"]]
    assert rows["reader"]["ops_per_second"] > 0 and rows["writer"]["ops_per_second"] > 0


def test_once_text_shows_both_tenants_rows(top_gateway):
    out = subprocess.run(
        [sluice_bin(), "top", "--once", "--config", str(top_gateway.config_path)],
        capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 0, out.stderr
    print(out.stdout)
    assert "1 gateway(s), 0 agent(s), 2 tenant(s)" in out.stdout, out.stdout
    for t in TENANTS:
        assert any(line.lstrip("│ ").startswith(t.id) for line in out.stdout.splitlines()), out.stdout


def poll(what, timeout: float, why: str):
    deadline = time.monotonic() + timeout
    while True:
        value = what()
        if value:
            return value
        assert time.monotonic() < deadline, why
        time.sleep(0.1)


def test_live_view_under_tmux_shows_the_tenants_and_quits_on_q(top_gateway, tmp_path):
    tmux = shutil.which("tmux")
    if tmux is None:
        pytest.skip("tmux is not installed (apt-get install tmux)")
    sock = f"sluice-top-{os.getpid()}"

    def t(*args: str) -> str:
        return subprocess.run([tmux, "-L", sock, *args], check=True, capture_output=True,
                              text=True, timeout=10).stdout

    env = {k: v for k, v in os.environ.items() if not k.startswith("TMUX")}
    subprocess.run([tmux, "-L", sock, "-f", "/dev/null", "new-session", "-d", "-s", "top",
                    "-x", "160", "-y", "40", "env", "PS1=$ ", "bash", "--norc", "--noprofile"],
                   check=True, env=env, timeout=10)
    try:
        t("send-keys", "-t", "top", f"{sluice_bin()} top --config {top_gateway.config_path}", "Enter")
        screen = poll(
            lambda: (s := t("capture-pane", "-p", "-t", "top"))
            and all(any(l.lstrip("│ ").startswith(x.id) for l in s.splitlines()) for x in TENANTS)
            and "rates over" in s and s,
            timeout=20, why="no frame with both tenants' rows and measured rates within 20 s")
        assert "q, Esc or Ctrl-C quits" in screen, screen
        assert poll(lambda: t("display-message", "-p", "-t", "top",
                              "#{pane_current_command}").strip() == os.path.basename(sluice_bin()),
                    timeout=5, why="top is not the pane's command")
        t("send-keys", "-t", "top", "q")
        poll(lambda: t("display-message", "-p", "-t", "top",
                       "#{pane_current_command}").strip() == "bash",
             timeout=10, why="top did not exit on q")
        t("send-keys", "-t", "top", "echo top-exit-status=$?", "Enter")
        after = poll(lambda: (s := t("capture-pane", "-p", "-t", "top")) and
                     "top-exit-status=0" in s and s,
                     timeout=10, why="the shell did not come back with top's exit status 0")
        # The terminal is restored: the frame (drawn on the alternate screen) is gone.
        assert "tenants" not in after and "q, Esc or Ctrl-C quits" not in after, after
    finally:
        subprocess.run([tmux, "-L", sock, "kill-server"], capture_output=True, timeout=10)
