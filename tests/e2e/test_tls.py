"""TLS end to end: the gateway's and the agent's S3 listeners with a private CA's certificate
(`tls_cert`, `tls_key`), spoken to by boto3 and the AWS CLI; the agent draining to a TLS gateway
it trusts through `upstream_ca`, and refusing one signed by another CA, saying why; plain HTTP
to a TLS port; a certificate that does not load; a certificate rotated by SIGHUP."""

from __future__ import annotations

import hashlib
import http.client
import os
import signal
import socket
import ssl
import subprocess
import time
import uuid
from pathlib import Path

import boto3
import pytest
from botocore.config import Config

from agent_harness import Agent
from harness import DEFAULT_TENANTS, REGION, Gateway, Backend, require_bin, sluice_bin

trustme = pytest.importorskip("trustme")

ALICE = DEFAULT_TENANTS[0]
MiB = 1024 * 1024


class Pki:
    """A private CA (trustme) and the files the processes and the clients read."""

    def __init__(self, workdir: Path, name: str = "ca"):
        self.dir = workdir / name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.ca = trustme.CA()
        self.ca_pem = self.dir / "ca.pem"
        self.ca.cert_pem.write_to_path(str(self.ca_pem))
        self.issued = 0

    def issue(self, name: str = "server") -> tuple[Path, Path, bytes]:
        """A certificate for 127.0.0.1 and localhost: (cert path, key path, DER)."""
        self.issued += 1
        cert = self.ca.issue_cert("127.0.0.1", "localhost")
        crt, key = self.dir / f"{name}.crt", self.dir / f"{name}.key"
        cert.cert_chain_pems[0].write_to_path(str(crt))
        cert.private_key_pem.write_to_path(str(key))
        der = ssl.PEM_cert_to_DER_cert(cert.cert_chain_pems[0].bytes().decode())
        return crt, key, der

    def context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_pem))


def tls_keys(crt: Path, key: Path) -> str:
    return f'tls_cert = "{crt}"\ntls_key = "{key}"'


class TlsGateway(Gateway):
    @property
    def endpoint(self) -> str:
        return f"https://127.0.0.1:{self.port}"


class TlsAgent(Agent):
    """An agent whose [agent] section has `extra` lines (TLS keys, upstream_ca; the harness
    writes them)."""

    tls: bool = False

    @property
    def endpoint(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"


def client(endpoint: str, ca: Path, tenant=ALICE):
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=tenant.access_key,
        aws_secret_access_key=tenant.secret_key,
        region_name=REGION,
        verify=str(ca),
        config=Config(s3={"addressing_style": "path"}, signature_version="s3v4",
                      retries={"max_attempts": 1, "mode": "standard"}),
    )


def log_of(p, name: str) -> str:
    return (p.workdir / name).read_text(errors="replace")


def wait_for_log(path: Path, text: str, count: int = 1, timeout: float = 30.0) -> str:
    """Polls a process's log until `text` appears `count` times (the process says so)."""
    deadline = time.monotonic() + timeout
    while True:
        log = path.read_text(errors="replace")
        if log.count(text) >= count:
            return log
        if time.monotonic() > deadline:
            raise AssertionError(f"{text!r} not {count}x in {path} within {timeout}s:\n{log}")
        time.sleep(0.05)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return Pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def tls_gateway(tmp_path_factory, pki):
    crt, key, _ = pki.issue("gateway")
    g = TlsGateway(tmp_path_factory.mktemp("tls-gateway"), Backend("local"),
                   extra=tls_keys(crt, key))
    g.start()
    yield g
    g.stop()


def test_boto3_over_tls_puts_gets_lists_and_uploads_in_parts(tls_gateway, pki, tmp_path):
    s3 = client(tls_gateway.endpoint, pki.ca_pem)
    bucket = f"tls-{uuid.uuid4().hex[:10]}"
    s3.create_bucket(Bucket=bucket)
    small = os.urandom(1000)  # kept in the catalog
    large = os.urandom(9 * MiB + 5)  # a blob on the local disk: sent by sendfile on plain HTTP
    s3.put_object(Bucket=bucket, Key="small", Body=small)
    s3.put_object(Bucket=bucket, Key="dir/large", Body=large)
    # Over TLS a blob's GET body takes the ordinary path: the bytes, never placeholders' zeros.
    assert s3.get_object(Bucket=bucket, Key="small")["Body"].read() == small
    got = s3.get_object(Bucket=bucket, Key="dir/large")["Body"].read()
    assert hashlib.sha256(got).hexdigest() == hashlib.sha256(large).hexdigest()
    ranged = s3.get_object(Bucket=bucket, Key="dir/large", Range="bytes=4096-1052671")
    assert ranged["Body"].read() == large[4096:1052672]

    parts = [os.urandom(5 * MiB), os.urandom(5 * MiB), os.urandom(123)]
    up = s3.create_multipart_upload(Bucket=bucket, Key="mp")
    done = [
        {"PartNumber": i + 1,
         "ETag": s3.upload_part(Bucket=bucket, Key="mp", UploadId=up["UploadId"],
                                PartNumber=i + 1, Body=p)["ETag"]}
        for i, p in enumerate(parts)
    ]
    s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=up["UploadId"],
                                 MultipartUpload={"Parts": done})
    assert s3.get_object(Bucket=bucket, Key="mp")["Body"].read() == b"".join(parts)

    listed = s3.list_objects_v2(Bucket=bucket)
    assert {o["Key"]: o["Size"] for o in listed["Contents"]} == {
        "dir/large": len(large), "mp": sum(map(len, parts)), "small": len(small)}
    assert [b["Name"] for b in s3.list_buckets()["Buckets"]].count(bucket) == 1


def test_aws_cli_over_tls_with_the_private_ca(tls_gateway, pki, tmp_path):
    exe = require_bin("aws", "awscli")
    config = tmp_path / "aws-config"
    config.write_text(f"[default]\nregion = {REGION}\ns3 =\n    addressing_style = path\n"
                      "    signature_version = s3v4\n")
    env = {**os.environ, "AWS_ACCESS_KEY_ID": ALICE.access_key,
           "AWS_SECRET_ACCESS_KEY": ALICE.secret_key, "AWS_DEFAULT_REGION": REGION,
           "AWS_CONFIG_FILE": str(config),
           "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "no-credentials")}

    def aws(*args: str, ca: Path | None = pki.ca_pem) -> subprocess.CompletedProcess:
        bundle = ["--ca-bundle", str(ca)] if ca else []
        return subprocess.run([exe, "--endpoint-url", tls_gateway.endpoint, *bundle, *args],
                              env=env, capture_output=True, text=True, timeout=300)

    bucket = f"cli-tls-{uuid.uuid4().hex[:8]}"
    mb = aws("s3", "mb", f"s3://{bucket}")
    assert mb.returncode == 0, mb.stderr
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(20 * MiB + 1))  # above the CLI's 8 MiB multipart threshold
    cp = aws("s3", "cp", str(big), f"s3://{bucket}/big.bin", "--no-progress")
    assert cp.returncode == 0, cp.stderr
    ls = aws("s3", "ls", f"s3://{bucket}/")
    assert ls.returncode == 0 and f"{20 * MiB + 1} big.bin" in ls.stdout, ls
    back = tmp_path / "back.bin"
    cp = aws("s3", "cp", f"s3://{bucket}/big.bin", str(back), "--no-progress")
    assert cp.returncode == 0, cp.stderr
    assert back.read_bytes() == big.read_bytes()
    # Without the private CA the CLI refuses the gateway's certificate.
    refused = aws("s3", "ls", f"s3://{bucket}/", ca=None)
    assert refused.returncode != 0 and "CERTIFICATE_VERIFY_FAILED" in refused.stderr, refused


def test_plain_http_to_a_tls_port_gets_no_http_answer(tls_gateway):
    with socket.create_connection(("127.0.0.1", tls_gateway.port), timeout=10) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        got = b""
        while chunk := s.recv(4096):
            got += chunk
    # rustls reads the request as a corrupt TLS record, answers with a fatal TLS alert record
    # (content type 21) and closes: no status line, no S3 error document.
    assert got[:1] == b"\x15", got
    assert b"HTTP/" not in got and b"<Error>" not in got, got
    # A client pointed at http:// gets a connection error, not an answer.
    s3 = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{tls_gateway.port}",
                      aws_access_key_id=ALICE.access_key,
                      aws_secret_access_key=ALICE.secret_key, region_name=REGION,
                      config=Config(retries={"max_attempts": 1, "mode": "standard"}))
    with pytest.raises(Exception) as refused:
        s3.list_buckets()
    assert "ClientError" not in type(refused.value).__name__, refused.value


def test_a_certificate_that_does_not_load_fails_the_start_naming_key_and_file(tmp_path, pki):
    crt, key, _ = pki.issue("start")
    _, other_key, _ = pki.issue("other")
    cases = [
        (tls_keys(tmp_path / "absent.crt", key), f"`[gateway] tls_cert` {tmp_path / 'absent.crt'}: cannot read"),
        (tls_keys(crt, other_key), f"`[gateway] tls_key` {other_key}: not the private key of `tls_cert` {crt}"),
        (f'tls_cert = "{crt}"', "gateway.tls_key: required with gateway.tls_cert"),
    ]
    for i, (extra, message) in enumerate(cases):
        g = Gateway(tmp_path / f"g{i}", Backend("local"), extra=extra)
        g.write_config()
        p = subprocess.run([sluice_bin(), "gateway", "--config", str(g.config_path)],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode != 0
        assert message in p.stderr, p.stderr
        assert not (g.workdir / "data").exists(), "a failed start left its data directory"


def presented(port: int, pki: Pki) -> bytes:
    """The certificate a new TLS connection to `port` is served (verified against the CA)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with pki.context().wrap_socket(raw, server_hostname="127.0.0.1") as s:
            return s.getpeercert(binary_form=True)


def test_sighup_serves_a_rotated_certificate_to_new_connections(tmp_path, pki):
    crt, key, first = pki.issue("rotating")
    g = TlsGateway(tmp_path / "g", Backend("local"), extra=tls_keys(crt, key)).start()
    log = g.workdir / "gateway.log"
    try:
        assert presented(g.port, pki) == first
        s3 = client(g.endpoint, pki.ca_pem)
        s3.create_bucket(Bucket="rotate")
        # A connection opened before the rotation keeps its certificate.
        held = http.client.HTTPSConnection("127.0.0.1", g.port, context=pki.context(), timeout=10)
        held.request("GET", "/")
        held.getresponse().read()
        assert held.sock.getpeercert(binary_form=True) == first

        new_crt, new_key, second = pki.issue("rotated")
        new_crt.replace(crt)
        new_key.replace(key)
        g.proc.send_signal(signal.SIGHUP)
        wait_for_log(log, "configuration reloaded")
        assert presented(g.port, pki) == second
        s3 = client(g.endpoint, pki.ca_pem)
        s3.put_object(Bucket="rotate", Key="after", Body=b"new certificate")
        assert s3.get_object(Bucket="rotate", Key="after")["Body"].read() == b"new certificate"
        held.request("GET", "/")
        assert held.getresponse().status == 403  # unsigned; answered on the old connection
        assert held.sock.getpeercert(binary_form=True) == first

        # A bad certificate is refused: the reload changes nothing, the process serves on.
        crt.write_text("not a certificate\n")
        g.proc.send_signal(signal.SIGHUP)
        text = wait_for_log(log, "reload refused")
        assert f"`[gateway] tls_cert` {crt}: no certificate in the file" in text, text
        assert g.proc.poll() is None
        assert presented(g.port, pki) == second
    finally:
        g.stop()


def status_row(agent: Agent, tenant: str) -> dict:
    return next(t for t in agent.status()["tenants"] if t["tenant"] == tenant)


def wait_status(agent: Agent, tenant: str, ok, what: str, timeout: float = 60.0) -> dict:
    """Polls the agent's status until `ok(row)` holds for the tenant."""
    deadline = time.monotonic() + timeout
    while True:
        row = status_row(agent, tenant)
        if ok(row):
            return row
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not seen within {timeout}s: {row}")
        time.sleep(0.1)


def start_agent(workdir: Path, upstream: str, extra: str, tls: bool) -> TlsAgent:
    from harness import free_port
    a = TlsAgent(workdir, upstream, [ALICE], status_port=free_port())
    a.extra, a.tls = extra, tls
    return a.start()


def test_the_agent_over_tls_drains_to_a_tls_gateway_it_trusts_by_upstream_ca(
        tls_gateway, pki, tmp_path):
    node_pki = Pki(tmp_path, "node-ca")  # the agent's own listener: another private CA
    crt, key, _ = node_pki.issue("agent")
    agent = start_agent(tmp_path / "agent", tls_gateway.endpoint,
                        f'{tls_keys(crt, key)}\nupstream_ca = "{pki.ca_pem}"', tls=True)
    try:
        node = client(agent.endpoint, node_pki.ca_pem)
        bucket = f"drain-{uuid.uuid4().hex[:8]}"
        node.create_bucket(Bucket=bucket)
        body = os.urandom(6 * MiB + 7)
        node.put_object(Bucket=bucket, Key="ckpt/shard-0", Body=body)
        assert node.get_object(Bucket=bucket, Key="ckpt/shard-0")["Body"].read() == body
        wait_status(agent, ALICE.id, lambda r: r["pending_ops"] == 0 and r["drained_objects_total"] >= 1,
                    "the drain")
        shared = client(tls_gateway.endpoint, pki.ca_pem)
        assert shared.get_object(Bucket=bucket, Key="ckpt/shard-0")["Body"].read() == body
        assert status_row(agent, ALICE.id)["last_error"] is None
    finally:
        agent.stop()


def test_an_agent_that_does_not_trust_the_gateways_ca_says_so_and_acknowledges_nothing(
        tls_gateway, tmp_path):
    # The agent acknowledges only what it holds shared-tier quota for, and it asks a gateway
    # for that quota: with a CA that is not the gateway's, the write is refused (503, so the
    # client retries) with the certificate error in the answer and the log, never taken in.
    from botocore.exceptions import ClientError
    stranger = Pki(tmp_path, "other-ca")
    agent = start_agent(tmp_path / "agent", tls_gateway.endpoint,
                        f'upstream_ca = "{stranger.ca_pem}"', tls=False)
    try:
        node = agent.client(ALICE)
        node.create_bucket(Bucket="untrusted")
        with pytest.raises(ClientError) as refused:
            node.put_object(Bucket="untrusted", Key="k", Body=b"not acknowledged")
        err = refused.value.response
        assert err["Error"]["Code"] == "SlowDown", err
        assert err["ResponseMetadata"]["HTTPStatusCode"] == 503, err
        message = err["Error"]["Message"]
        assert "invalid peer certificate" in message and "UnknownIssuer" in message, message
        row = status_row(agent, ALICE.id)
        assert row["local_bytes"] == 0 and row["pending_bytes"] == 0, row  # the bucket alone waits
    finally:
        agent.stop()


def test_an_upstream_ca_that_is_no_certificate_fails_the_agents_start(tmp_path):
    junk = tmp_path / "junk.pem"
    junk.write_text("nothing here\n")
    a = TlsAgent(tmp_path / "a", "https://127.0.0.1:1", [ALICE])
    a.extra = f'upstream_ca = "{junk}"'
    a.write_config()
    p = subprocess.run([sluice_bin(), "agent", "--config", str(a.config_path)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    assert f"`[agent] upstream_ca` {junk}: no certificate in the file" in p.stderr, p.stderr
    assert not (a.workdir / "data").exists()


def test_sighup_rotates_the_agents_certificate_and_refuses_a_mismatched_key(tmp_path, pki):
    crt, key, first = pki.issue("node")
    agent = start_agent(tmp_path / "agent", "http://127.0.0.1:1", tls_keys(crt, key), tls=True)
    log = agent.workdir / "agent.log"
    try:
        assert presented(agent.port, pki) == first
        new_crt, new_key, second = pki.issue("node-next")
        new_crt.replace(crt)
        new_key.replace(key)
        agent.proc.send_signal(signal.SIGHUP)
        wait_for_log(log, "configuration reloaded")
        assert presented(agent.port, pki) == second
        node = client(agent.endpoint, pki.ca_pem)
        # No gateway behind this agent, so no write is acknowledged: a bucket and a listing
        # over the rotated certificate show the node serves on it.
        node.create_bucket(Bucket="rotated")
        assert node.list_objects_v2(Bucket="rotated")["KeyCount"] == 0

        # A key that is not the certificate's: the reload is refused, the agent serves on.
        _, stray_key, _ = pki.issue("stray")
        stray_key.replace(key)
        agent.proc.send_signal(signal.SIGHUP)
        text = wait_for_log(log, "reload refused")
        assert f"`[agent] tls_key` {key}: not the private key of `tls_cert` {crt}" in text, text
        assert agent.proc.poll() is None
        assert presented(agent.port, pki) == second
    finally:
        agent.stop()
