"""PyTorch Distributed Checkpoint through an encrypted agent (issue #29): a trainer saves with
DCP's fsspec writer to an agent whose tenant has `[tenant.encryption]`, restores from it, and
once the drain is done a second agent with the same key and no local copy restores the same
tensors from the shared tier. No file of the gateway or of the writer's node holds any stretch
of the tensors' bytes; the gateway serves only ciphertext."""

from __future__ import annotations

import os

from harness import Backend, Gateway, require_module
from test_confidential import ALICE, files_under, start_agent
from test_dcp import assert_same, storage_options

MiB = 1024 * 1024


def options(endpoint: str) -> dict:
    return storage_options(endpoint, ALICE)


def test_dcp_saves_and_restores_through_encrypted_agents_with_no_plaintext_at_rest(tmp_path):
    torch = require_module("torch", "torch")
    require_module("s3fs", "s3fs")
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FsspecReader, FsspecWriter

    gw = Gateway(tmp_path / "gw", Backend("local"), tenants=[ALICE]).start()
    key = tmp_path / "alice.key"
    key.write_bytes(os.urandom(32))
    agents = [start_agent(tmp_path / "writer", gw, key)]
    try:
        writer = agents[0]
        writer.client(ALICE).create_bucket(Bucket="ckpt")
        torch.manual_seed(11)
        model = torch.nn.Sequential(
            torch.nn.Linear(512, 2048),
            torch.nn.GELU(),
            torch.nn.Linear(2048, 1024),
            torch.nn.Linear(1024, 1024),
            torch.nn.Linear(1024, 256, dtype=torch.bfloat16),
        )
        state = {"model": model.state_dict(), "step": 7}
        path = "s3://ckpt/run/step-7"

        def fresh():
            return {"model": {k: torch.zeros_like(v) for k, v in state["model"].items()},
                    "step": 0}

        # Two writer threads: two shard files of several MiB, each a multipart upload.
        dcp.save(state, storage_writer=FsspecWriter(path, thread_count=2,
                                                    **options(writer.endpoint)))
        restored = fresh()
        dcp.load(restored, storage_reader=FsspecReader(path, **options(writer.endpoint)))
        assert_same(torch, state, restored)
        writer.wait_drained(ALICE.id)

        shards = {o["Key"]: o["Size"] for o in
                  writer.client(ALICE).list_objects_v2(Bucket="ckpt")["Contents"]
                  if o["Key"].endswith(".distcp")}
        assert len(shards) == 2 and all(v > 5 * MiB for v in shards.values()), shards

        # Stretches of every large tensor's bytes, found nowhere at rest.
        probes = []
        for t in state["model"].values():
            raw = t.contiguous().view(torch.uint8).flatten()
            if raw.numel() >= 64 * 1024:
                probes += [bytes(raw[i:i + 48].tolist())
                           for i in range(0, raw.numel() - 48, raw.numel() // 5)]
        assert len(probes) >= 15
        for root in (tmp_path / "gw", tmp_path / "writer"):
            for f in files_under(root):
                data = f.read_bytes()
                for p in probes:
                    assert p not in data, f"plaintext in {f}"
        upstream = gw.client(ALICE)
        for name in shards:
            assert upstream.get_object(Bucket="ckpt", Key=name)["Body"].read(4) == b"SLCE"

        # A second node, the same key, nothing local: the restore comes from the tier.
        agents.append(start_agent(tmp_path / "reader", gw, key))
        from_tier = fresh()
        dcp.load(from_tier, storage_reader=FsspecReader(path, **options(agents[1].endpoint)))
        assert_same(torch, state, from_tier)
    finally:
        for agent in agents:
            agent.stop()
        gw.stop()
