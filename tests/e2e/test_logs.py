"""The gateway's log as an operator reads it from a file, under the binary's own default filter
(neither SLUICE_LOG nor RUST_LOG set): a 404, a bad signature and SlowDowns under designed
back-pressure leave no WARN or ERROR line, and nothing holds a terminal's colour escapes. Every
response, errors included, carries x-amz-request-id and x-amz-id-2. With --log-format json
every line is a JSON object."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from dataclasses import dataclass, field

import pytest
from botocore.exceptions import ClientError

from harness import Backend, Gateway, s3_client, sluice_bin, wait_for_port

# One operation a second for the whole tier, one request waiting per tenant: of a burst of
# concurrent requests, one is admitted, one waits, the rest are refused SlowDown.
THROTTLED = '[gateway.capacity]\nbandwidth = "1GiB/s"\nops = 1.0\nqueue_depth = 1\n'


@dataclass
class LoggedGateway(Gateway):
    """A gateway whose stderr alone goes to `log`, filtered by the binary's default."""

    args: list[str] = field(default_factory=list)

    @property
    def log(self):
        return self.workdir / "stderr.log"

    def start(self) -> "LoggedGateway":
        self.write_config()
        env = {k: v for k, v in os.environ.items() if k not in ("SLUICE_LOG", "RUST_LOG")}
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sluice_bin(), *self.args, "gateway", "--config", str(self.config_path)],
                stdout=subprocess.DEVNULL,
                stderr=log,
                env=env,
            )
        wait_for_port(self.port, self.proc)
        return self


def refusals(gw: Gateway) -> list[dict]:
    """A 404, a bad signature and a burst that is throttled; every response's metadata."""
    alice = gw.client("alice")
    answers = [alice.create_bucket(Bucket="logs")["ResponseMetadata"]]

    def refused(call) -> dict:
        with pytest.raises(ClientError) as e:
            call()
        return e.value.response

    missing = refused(lambda: alice.head_object(Bucket="logs", Key="missing"))
    assert missing["ResponseMetadata"]["HTTPStatusCode"] == 404
    t = gw.tenant("alice")
    forger = s3_client(gw.endpoint, t.access_key, "not-" + t.secret_key)
    forged = refused(lambda: forger.get_object(Bucket="logs", Key="missing"))
    assert forged["Error"]["Code"] == "SignatureDoesNotMatch", forged
    answers += [missing["ResponseMetadata"], forged["ResponseMetadata"]]

    burst: list[dict] = []

    def one():
        c = gw.client("alice")
        try:
            c.head_object(Bucket="logs", Key="missing")
        except ClientError as e:
            burst.append(e.response["ResponseMetadata"])

    threads = [threading.Thread(target=one) for _ in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    statuses = sorted(m["HTTPStatusCode"] for m in burst)
    assert 503 in statuses, statuses
    return answers + burst


def test_refusals_leave_no_warning_or_escape_in_a_log_file(tmp_path):
    gw = LoggedGateway(tmp_path, Backend("local"), extra=THROTTLED).start()
    try:
        answers = refusals(gw)
    finally:
        gw.stop()
    ids = [m["HTTPHeaders"].get("x-amz-request-id") for m in answers]
    assert all(ids), answers
    assert len(set(ids)) == len(ids), ids
    assert all(m["HTTPHeaders"].get("x-amz-id-2") for m in answers), answers

    text = gw.log.read_text()
    assert "gateway listening" in text, text
    assert "\x1b" not in text, repr(text)
    loud = [line for line in text.splitlines() if " WARN " in line or " ERROR " in line]
    assert not loud, loud


def test_json_log_lines_are_objects(tmp_path):
    gw = LoggedGateway(tmp_path, Backend("local"), args=["--log-format", "json"]).start()
    try:
        alice = gw.client("alice")
        alice.create_bucket(Bucket="logs")
        with pytest.raises(ClientError):
            alice.head_object(Bucket="logs", Key="missing")
    finally:
        gw.stop()
    lines = [json.loads(line) for line in gw.log.read_text().splitlines()]
    assert any(line.get("message") == "gateway listening" for line in lines), lines
    assert all(line["level"] in ("INFO", "DEBUG", "TRACE") for line in lines), lines
