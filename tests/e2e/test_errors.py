"""Refusals that explain themselves to the AWS CLI: a wrong secret and a bad bucket name are
printed with S3's message, never as "Unknown" (which is what the CLI prints for an error
answered without a message)."""

from __future__ import annotations

import os
import subprocess

import pytest

from harness import DEFAULT_TENANTS, REGION, Backend, Gateway, require_bin

ALICE = DEFAULT_TENANTS[0]


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    g = Gateway(tmp_path_factory.mktemp("gw-errors"), Backend("local")).start()
    yield g
    g.stop()


def aws(tmp_path, gw: Gateway, secret: str, *args: str) -> subprocess.CompletedProcess:
    config = tmp_path / "aws-config"
    config.write_text(f"[default]\nregion = {REGION}\ns3 =\n    addressing_style = path\n")
    env = {
        **os.environ,
        "AWS_ACCESS_KEY_ID": ALICE.access_key,
        "AWS_SECRET_ACCESS_KEY": secret,
        "AWS_CONFIG_FILE": str(config),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "no-credentials"),
        "AWS_MAX_ATTEMPTS": "1",
    }
    exe = require_bin("aws", "awscli")
    return subprocess.run([exe, "--endpoint-url", gw.endpoint, *args], env=env,
                          capture_output=True, text=True, timeout=60)


def test_a_wrong_secret_is_told_to_check_the_key_and_signing_method(tmp_path, gw):
    r = aws(tmp_path, gw, "not-the-secret-000000", "s3api", "list-buckets")
    assert r.returncode != 0
    assert "SignatureDoesNotMatch" in r.stderr, r.stderr
    assert "Check your key and signing method" in r.stderr, r.stderr
    assert "Unknown" not in r.stderr, r.stderr


@pytest.mark.parametrize("bucket,rule", [
    ("ab", "between 3 (min) and 63 (max) characters long"),
    ("Bad_Bucket", "only of lowercase letters, numbers, periods (.), and hyphens (-)"),
])
def test_a_bad_bucket_name_is_told_the_rule_it_broke(tmp_path, gw, bucket, rule):
    r = aws(tmp_path, gw, ALICE.secret_key, "s3api", "create-bucket", "--bucket", bucket)
    assert r.returncode != 0
    assert "InvalidBucketName" in r.stderr, r.stderr
    assert rule in r.stderr, r.stderr
    assert "Unknown" not in r.stderr, r.stderr
