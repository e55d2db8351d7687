"""`sluice up` failing to start: with any of its four ports taken it exits non-zero before it
creates anything, naming the config key and the flag to change; a second `sluice up` in the
same directory is refused in one line naming the catalog another sluice holds. Each run is
in its own empty working directory (the embedded example keeps its data under ./data)."""

from __future__ import annotations

import signal
import socket
import subprocess

import pytest

from harness import free_port, sluice_bin, wait_for_port

KEYS = {
    "--gateway-listen": "[gateway] listen",
    "--gateway-metrics-listen": "[gateway] metrics_listen",
    "--agent-listen": "[agent] listen",
    "--agent-status-listen": "[agent] status_listen",
}


def up_args(ports: dict[str, int]) -> list[str]:
    return [arg for flag, port in ports.items() for arg in (flag, f"127.0.0.1:{port}")]


@pytest.mark.parametrize("taken", list(KEYS))
def test_up_with_a_port_taken_names_the_key_and_flag_and_leaves_nothing(tmp_path, taken):
    ports = {flag: free_port() for flag in KEYS}
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", ports[taken]))
        holder.listen()
        r = subprocess.run([sluice_bin(), "up", *up_args(ports)], cwd=tmp_path,
                           capture_output=True, text=True, timeout=60)
    assert r.returncode != 0, r.stdout
    assert KEYS[taken] in r.stderr and taken in r.stderr, r.stderr
    assert "Address already in use" in r.stderr, r.stderr
    assert "backtrace" not in r.stderr.lower(), r.stderr
    assert list(tmp_path.iterdir()) == [], "sluice up left something behind"


def test_a_second_up_in_the_same_directory_names_the_catalog_another_sluice_holds(tmp_path):
    first_ports = {flag: free_port() for flag in KEYS}
    first = subprocess.Popen([sluice_bin(), "up", *up_args(first_ports)], cwd=tmp_path,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(first_ports["--agent-listen"], first)
        second_ports = {flag: free_port() for flag in KEYS}
        r = subprocess.run([sluice_bin(), "up", *up_args(second_ports)], cwd=tmp_path,
                           capture_output=True, text=True, timeout=60)
        assert r.returncode != 0, r.stdout
        errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1, r.stderr
        [line] = errors
        assert "meta.redb" in line and "another sluice process" in line, line
        assert line.count("Cannot acquire lock") <= 1, line
        # The first one is unharmed, and so are its data.
        assert first.poll() is None
        assert (tmp_path / "data" / "gateway" / "meta.redb").exists()
    finally:
        first.send_signal(signal.SIGTERM)
        first.wait(timeout=30)
