"""`sluice up` failing to start: with any of its four ports taken it exits non-zero before it
creates anything, naming the config key and the flag to change; a second `sluice up` in the
same directory is refused in one line naming the catalog another sluice holds. Each run is
in its own empty working directory (the embedded example keeps its data under ./data)."""

from __future__ import annotations

import signal
import socket
import subprocess

import pytest

from harness import ROOT, free_port, sluice_bin, wait_for_port

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


def test_sighup_reloads_both_processes_of_up_with_its_flags_kept(tmp_path):
    """A tenant added to `sluice up`'s file writes through the agent and reaches the gateway
    after SIGHUP; the listen flags still apply to the reloaded file (so it is not refused as
    a change of address)."""
    import time

    from botocore.exceptions import ClientError

    from harness import s3_client

    config = tmp_path / "sluice.toml"
    config.write_text((ROOT / "examples" / "sluice.toml").read_text())
    ports = {flag: free_port() for flag in KEYS}
    log = tmp_path / "up.log"
    with open(log, "wb") as out:
        up = subprocess.Popen([sluice_bin(), "up", "--config", str(config), *up_args(ports)],
                              cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_for_port(ports["--agent-listen"], up)
        agent = f"http://127.0.0.1:{ports['--agent-listen']}"
        gateway = f"http://127.0.0.1:{ports['--gateway-listen']}"
        carol = ("AKIDCAROL000000TEST", "carol-secret-0123456789")
        with pytest.raises(ClientError):
            s3_client(agent, *carol).create_bucket(Bucket="carol-ckpt")
        config.write_text(config.read_text() + (
            '\n[[tenant]]\nid = "carol"\n'
            f'access_key = "{carol[0]}"\nsecret_key = "{carol[1]}"\ncapacity = "1GiB"\n'))
        up.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 30
        while log.read_text().count("configuration reloaded") < 2:
            assert time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.05)
        assert "refused" not in log.read_text(), log.read_text()[-2000:]
        node = s3_client(agent, *carol)
        node.create_bucket(Bucket="carol-ckpt")
        node.put_object(Bucket="carol-ckpt", Key="k", Body=b"through the node")
        shared = s3_client(gateway, *carol)
        while True:  # drained: an observable condition, polled
            try:
                body = shared.get_object(Bucket="carol-ckpt", Key="k")["Body"].read()
                break
            except ClientError:
                assert time.monotonic() < deadline + 60, log.read_text()[-2000:]
                time.sleep(0.1)
        assert body == b"through the node"
        assert up.poll() is None
    finally:
        up.send_signal(signal.SIGTERM)
        up.wait(timeout=30)
