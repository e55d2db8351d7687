"""The agent under kill -9: at random moments during writes and during drains, then restart
(and in some rounds the gateway under kill -9 during the drain as well).
Every acknowledged object must end up on the shared tier byte-identical, nothing
unacknowledged may be half-visible (every object anywhere is exactly its key's payload), and
no checkpoint's marker may be upstream without all of its shards.

Rounds: `SLUICE_AGENT_CRASH_ROUNDS` (default 20); the seed is printed, replay with
`SLUICE_AGENT_CRASH_SEED`."""

import io
import os
import random
import threading
import time

import pytest
from boto3.s3.transfer import TransferConfig

from agent_harness import Agent, LocalSpec
from harness import DEFAULT_TENANTS, Backend, Gateway, Tenant

MiB = 1024 * 1024
ALICE = DEFAULT_TENANTS[0]
SIZES = [0, 1, 4096, 300_000, 2 * MiB, 5 * MiB, 20 * MiB]
# Objects above this go through the agent as boto3 multipart uploads.
MULTIPART = TransferConfig(multipart_threshold=8 * MiB, multipart_chunksize=8 * MiB)


def payload(key: str) -> bytes:
    size = int(key.rsplit("-", 1)[1])
    return random.Random(key).randbytes(size)


@pytest.fixture(scope="module")
def shared_tier(tmp_path_factory):
    # One shared tier for every round; each round cleans up after itself.
    tenants = [Tenant(t.id, t.access_key, t.secret_key, "100GiB") for t in DEFAULT_TENANTS]
    gw = Gateway(tmp_path_factory.mktemp("crash-tier"), Backend("local"), tenants).start()
    yield gw
    gw.stop()


def listed(client, bucket: str) -> dict[str, int]:
    return {o["Key"]: o["Size"]
            for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket)
            for o in page.get("Contents", [])}


@pytest.mark.parametrize("round_", range(int(os.environ.get("SLUICE_AGENT_CRASH_ROUNDS", "20"))))
def test_kill_9_during_writes_and_drains_then_restart(tmp_path, shared_tier, round_):
    seed = int(os.environ.get("SLUICE_AGENT_CRASH_SEED", random.randrange(1 << 30))) + round_
    print(f"agent crash round {round_}: seed {seed} (replay with SLUICE_AGENT_CRASH_SEED={seed - round_})")
    rng = random.Random(seed)
    bucket = f"crash-{seed}"
    agent = Agent(tmp_path, shared_tier.endpoint, DEFAULT_TENANTS,
                  {"alice": LocalSpec(drain_rate=rng.choice(["16MiB/s", "48MiB/s", "200MiB/s"]))}).start()
    agent.client(ALICE).create_bucket(Bucket=bucket)
    acked: list[str] = []
    markers: dict[str, list[str]] = {}
    stop = threading.Event()

    def writer(w: int):
        wr = random.Random(seed * 100 + w)
        c = agent.client(ALICE)
        n = 0
        while not stop.is_set():
            n += 1
            shards = [f"w{w}/ckpt{n}/shard{i}-{wr.choice(SIZES)}" for i in range(wr.randint(1, 3))]
            try:
                for key in shards:
                    if int(key.rsplit("-", 1)[1]) > 8 * MiB:
                        c.upload_fileobj(io.BytesIO(payload(key)), bucket, key, Config=MULTIPART)
                    else:
                        c.put_object(Bucket=bucket, Key=key, Body=payload(key))
                    acked.append(key)
                marker = f"w{w}/ckpt{n}/.metadata-{len(shards)}"
                c.put_object(Bucket=bucket, Key=marker, Body=payload(marker))
                acked.append(marker)
                markers[marker] = shards
            except Exception:
                return

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    time.sleep(rng.uniform(0.3, 1.5))
    agent.kill9()
    stop.set()
    for t in threads:
        t.join()

    agent.start()
    if rng.random() < 0.7:
        # A second crash, during the drain.
        time.sleep(rng.uniform(0.05, 1.0))
        agent.kill9()
        agent.start()
    if rng.random() < 0.3:
        # The shared tier crashes mid-drain too (uploads, completions and HEADs in flight).
        time.sleep(rng.uniform(0.05, 0.8))
        shared_tier.kill9()
        shared_tier.start()
    try:
        agent.wait_drained("alice", timeout=120)
        up = shared_tier.client("alice", max_attempts=3)
        node = agent.client(ALICE, max_attempts=3)
        upstream = listed(up, bucket)
        missing = [k for k in acked if k not in upstream]
        assert missing == [], f"acknowledged but not upstream (seed {seed}): {missing}"
        for key, size in upstream.items():
            body = up.get_object(Bucket=bucket, Key=key)["Body"].read()
            assert len(body) == size and body == payload(key), f"partial or corrupt {key} upstream (seed {seed})"
        for marker in (k for k in upstream if "/.metadata-" in k):
            n = int(marker.rsplit("-", 1)[1])
            prefix = marker.rsplit("/", 1)[0] + "/"
            shards = [k for k in upstream if k.startswith(prefix) and "/shard" in k]
            assert len(shards) >= n, f"{marker} upstream with only {shards} (seed {seed})"
        assert listed(node, bucket) == upstream, f"node and shared tier disagree (seed {seed})"
        s = agent.tenant_status("alice")
        assert s["pending_bytes"] == 0 and s["last_error"] is None, s
        for key in upstream:
            up.delete_object(Bucket=bucket, Key=key)
    finally:
        agent.stop()
