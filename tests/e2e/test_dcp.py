"""PyTorch Distributed Checkpoint (DCP) through the node agent, as a trainer runs it: the
CPU build of torch, `torch.distributed.checkpoint.save` with its fsspec writer to an s3://
path whose endpoint is the agent, `load` back from the agent, then `load` from the gateway
once the agent has drained, every tensor compared each time."""

import threading
import time

import pytest
from botocore.exceptions import ClientError

from agent_harness import Agent
from harness import REGION, Backend, Gateway, Tenant, require_module

MiB = 1024 * 1024
ALICE = Tenant("alice", "AKIDALICE000000TEST", "alice-secret-0123456789", "1GiB")


@pytest.fixture
def tiers(tmp_path):
    gw = Gateway(tmp_path / "gw", Backend("local"), tenants=[ALICE]).start()
    agent = Agent(tmp_path / "agent", gw.endpoint, [ALICE]).start()
    yield gw, agent
    agent.stop()
    gw.stop()


def storage_options(endpoint: str, tenant: Tenant = ALICE) -> dict:
    """What DCP's fsspec writer and reader pass to s3fs: the settings in docs/clients.md."""
    return {
        "key": tenant.access_key,
        "secret": tenant.secret_key,
        "endpoint_url": endpoint,
        "client_kwargs": {"region_name": REGION},
        "config_kwargs": {"s3": {"addressing_style": "path"}},
        # Shards above 5 MiB go up as multipart uploads, as large ones do in practice.
        "default_block_size": 5 * MiB,
        "skip_instance_cache": True,
        "use_listings_cache": False,
    }


def flat(state, prefix=""):
    """Every tensor (and plain value) of a nested state dict, by dotted path."""
    out = {}
    if isinstance(state, dict):
        for k, v in state.items():
            out.update(flat(v, f"{prefix}{k}."))
    else:
        out[prefix.rstrip(".")] = state
    return out


def assert_same(torch, saved: dict, loaded: dict):
    a, b = flat(saved), flat(loaded)
    assert a.keys() == b.keys()
    for k, v in a.items():
        if isinstance(v, torch.Tensor):
            assert v.dtype == b[k].dtype and v.shape == b[k].shape, k
            assert torch.equal(v, b[k]), k
        else:
            assert v == b[k], k


def test_dcp_save_through_the_agent_load_from_both_tiers(tiers):
    gw, agent = tiers
    dcp_round_trip(agent, gw)


def dcp_round_trip(agent: Agent, gw: Gateway, mid_drain=None) -> None:
    """A DCP save through `agent`, a load back from it, a load from `gw` once drained; all
    the while a poller of `gw` checks that `.metadata` never shows before every shard is
    whole. `mid_drain()`, if given, is called once the drain has sent bytes upstream
    (test_agent_failover.py kills the other gateway there)."""
    torch = require_module("torch", "torch")
    require_module("s3fs", "s3fs")
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FsspecReader, FsspecWriter

    agent.client(ALICE).create_bucket(Bucket="ckpt")
    torch.manual_seed(7)
    model = torch.nn.Sequential(
        torch.nn.Embedding(1000, 256),
        torch.nn.Linear(256, 1024),
        torch.nn.GELU(),
        torch.nn.Linear(1024, 1024),
        torch.nn.LayerNorm(1024),
        torch.nn.Linear(1024, 256, dtype=torch.bfloat16),
    )
    optim = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tokens = torch.randint(0, 1000, (8, 16))
    out = model[:5](tokens)
    (out.sum() + model[5](out.to(torch.bfloat16)).float().sum()).backward()
    optim.step()
    state = {"model": model.state_dict(), "optim": optim.state_dict(), "step": 100}
    path = "s3://ckpt/run/step-100"
    marker = "run/step-100/.metadata"

    # Two writer threads: two shard files, each above s3fs's 5 MiB block (multipart).
    dcp.save(state, storage_writer=FsspecWriter(path, thread_count=2,
                                                **storage_options(agent.endpoint)))
    node = agent.client(ALICE)
    on_node = {o["Key"]: o["Size"]
               for o in node.list_objects_v2(Bucket="ckpt")["Contents"]}
    violations: list[str] = []
    done, fired = threading.Event(), threading.Event()

    def poll():
        upstream = gw.client(ALICE)
        while True:
            finished = done.is_set()  # one more look after the drain has finished
            if mid_drain is not None and not fired.is_set() \
                    and agent.tenant_status(ALICE.id)["drained_bytes_total"] > 0:
                fired.set()
                mid_drain()
            try:
                up = {o["Key"]: o["Size"]
                      for o in upstream.list_objects_v2(Bucket="ckpt").get("Contents", [])}
            except ClientError:
                up = {}  # the bucket is not upstream yet
            if marker in up:
                early = [k for k, v in on_node.items() if k != marker and up.get(k) != v]
                if early:
                    violations.append(f"{marker} visible before {early}")
            if finished:
                return
            time.sleep(0.02)

    poller = threading.Thread(target=poll)
    poller.start()

    def fresh():
        return {
            "model": {k: torch.zeros_like(v) for k, v in state["model"].items()},
            "optim": {
                "state": {i: {k: torch.zeros_like(v) for k, v in s.items()}
                          for i, s in state["optim"]["state"].items()},
                "param_groups": state["optim"]["param_groups"],
            },
            "step": 0,
        }

    try:
        restored = fresh()
        dcp.load(restored, storage_reader=FsspecReader(path, **storage_options(agent.endpoint)))
        assert_same(torch, state, restored)
        status = agent.wait_drained(ALICE.id, timeout=120)
    finally:
        done.set()
        poller.join()
    assert violations == []
    assert mid_drain is None or fired.is_set()
    assert status["durable_up_to"]["marker"] == marker
    assert status["drain_errors_total"] == 0
    upstream = {o["Key"]: o["Size"]
                for o in gw.client(ALICE).list_objects_v2(Bucket="ckpt")["Contents"]}
    assert upstream == on_node
    shards = [k for k in upstream if k.endswith(".distcp")]
    assert len(shards) == 2 and all(upstream[k] > 5 * MiB for k in shards), upstream
    assert set(upstream) == set(shards) | {marker}
    assert all("-" in node.head_object(Bucket="ckpt", Key=k)["ETag"] for k in shards)  # multipart

    from_gateway = fresh()
    dcp.load(from_gateway, storage_reader=FsspecReader(path, **storage_options(gw.endpoint)))
    assert_same(torch, state, from_gateway)
