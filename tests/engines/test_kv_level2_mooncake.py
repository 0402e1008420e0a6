"""The level below the pool against a real Mooncake Store (master and store client over TCP on
loopback; `make test-mooncake`): a block evicted from one pod's pool is promoted into another
pod's, and killing the master mid-run turns level-2 lookups into misses, never errors."""
import logging

import pytest
import torch

from cxlkit.kv import BlockLayout, EngineTensors, Store, block_hashes

mooncake = pytest.importorskip("mooncake.store", reason="needs Mooncake: run `make test-mooncake`")

LAYOUT = BlockLayout(num_layers=2, num_kv_heads=2, head_dim=16, dtype="float32", block_tokens=16)
KEYS = block_hashes(list(range(16 * 4)))


@pytest.fixture
def master():
    from cxlkit.integrations.mooncake_local import local_mooncake

    with local_mooncake() as mc:
        yield mc.master, dict(mc.config, segment_bytes=32 << 20, buffer_bytes=16 << 20,
                              timeout_s=5.0)


def _engine(seed=None):
    g = torch.Generator().manual_seed(seed) if seed is not None else None
    ts = [torch.randn(2, 8, 16, 2, 16, generator=g) if g else torch.zeros(2, 8, 16, 2, 16)
          for _ in range(LAYOUT.num_layers)]
    return ts, EngineTensors.per_layer(LAYOUT, ts, "KBTHD")


def _ready(lv):
    """Waits (bounded) until the client connected: the first fetch is the first call."""
    assert lv.wait_connected(60), "the Mooncake client did not connect"


@pytest.mark.slow  # ~30 s: a Mooncake client's setup and close take seconds each
def test_mooncake_level_2_carries_blocks_between_pods_and_a_killed_master_is_a_miss(
        pool_path, master, caplog):
    from cxlkit.integrations.mooncake import open_level2

    proc, cfg = master
    lv = open_level2(cfg)
    _ready(lv)
    src, se = _engine(seed=7)
    kw = dict(create=True, size=32 << 20, checksum=True, level2=lv)
    with Store(pool_path, LAYOUT, host_id=0, **kw) as a, \
            Store(pool_path + "-b", LAYOUT, host_id=0, **kw) as b:
        assert a.put(KEYS, se, range(4)) == 4
        assert a.clear() == 4
        assert lv.flush(30) and lv.stats.demoted == 4
        assert b.lookup(KEYS[:2]) == 2 and b.stats.promoted == 2
        dst, de = _engine()
        assert b.get(KEYS[:2], de, [5, 6]) == 2
        assert all(torch.equal(s[:, :2], d[:, 5:7]) for s, d in zip(src, dst))
        proc.kill()  # the master dies mid-run
        proc.wait(10)
        with caplog.at_level(logging.WARNING, logger="cxlkit"):
            for _ in range(2):
                assert b.lookup(KEYS) == 2  # the pool's two; the rest a miss
            assert b.get(KEYS, de, range(4)) == 2
            a.put(KEYS[2:], se, [2, 3])  # puts and evictions go on
            a.clear()
            assert lv.flush(30)
        lines = [r for r in caplog.records if "level 2" in r.getMessage()]
        assert len(lines) == 1, [r.getMessage() for r in lines]
    lv.close()


@pytest.mark.slow  # Mooncake clients in four connectors: a few seconds each
def test_two_pods_a_prefix_served_in_pod_a_is_a_level_2_hit_in_pod_b_then_a_pool_hit(
        pool_path, master):
    """Pod A (its own pool) serves a prompt; pressure on A's pool demotes its blocks to
    Mooncake; pod B's first host loads them from there (promoted into B's pool) and its second
    host from B's pool. Connectors driven by the vLLM fake (test_kv_pods_engine.py runs the
    real engine)."""
    from kv_fakes.vllm_fake import FakeEngine, Request

    _, cfg = master
    prompt = [(13 * i + 1) % 997 for i in range(83)]  # 5 full blocks + 3 tokens
    block = 128 + 3 * 2 * 16 * 2 * 16 * 4  # the fake model's pool block
    pods = []

    def pod(path, host_id, create, **kw):
        extra = {"pool": path, "create": create, "size": 32 << 20, "host_id": host_id,
                 "checksum": True, "level2": dict(cfg, segment_bytes=0), **kw}
        e = FakeEngine(extra, num_blocks=16)
        pods.append(e)
        for c in (e.sched, e.worker):
            _ready(c._inner._level2)
        return e

    try:
        from cxlkit.integrations.mooncake import open_level2

        # a Mooncake store node: the memory the level's objects live in (the pods lend none)
        holder = open_level2(dict(cfg, segment_bytes=64 << 20))
        _ready(holder)
        a = pod(pool_path, 0, True, capacity_bytes=5 * block)
        a.step(Request("a", prompt))
        a.step(Request("a2", [7] + prompt[1:]))  # another prefix: A's first blocks go down
        lv = a.worker._inner._level2
        assert lv.flush(30) and a.worker.store.stats.demoted >= 5
        b0 = pod(pool_path + "-b", 0, True)
        b0.step(Request("b0", prompt))
        assert b0.computed_positions["b0"] == [80, 81, 82]  # 5 blocks from level 2
        assert b0.sched.store.stats.promoted == 5
        ids = b0.sched._inner._reqs["b0"].block_ids[0]
        assert all(b0.block_matches_recompute(Request("x", prompt), ids, i) for i in range(5))
        b1 = pod(pool_path + "-b", 1, False)
        b1.step(Request("b1", prompt))
        assert b1.computed_positions["b1"] == [80, 81, 82]
        assert b1.sched.store.stats.promoted == 0  # pod B's pool had them
    finally:
        for e in pods:
            e.sched.shutdown()
            e.worker.shutdown()
        if "holder" in locals():
            holder.close()


@pytest.mark.slow  # a Mooncake client's setup and close take seconds each
def test_a_local_store_node_holds_what_a_segmentless_client_puts_and_both_stop_after():
    """local_mooncake's node lends the memory: a client that mounts none can put and get
    through it, and when the block ends the master and the node are gone."""
    from cxlkit.integrations.mooncake import MooncakeBackend
    from cxlkit.integrations.mooncake_local import local_mooncake

    with local_mooncake(32 << 20) as mc:
        be = MooncakeBackend(mc.config["master"], mc.config["metadata"], segment_bytes=0,
                             buffer_bytes=16 << 20)
        try:
            be.put("local-node-block", b"x" * 4096)
            assert be.exists(["local-node-block", "absent"]) == [True, False]
            assert be.get("local-node-block") == b"x" * 4096
        finally:
            be.close()
        master, node = mc.master, mc.node
    assert master.poll() is not None and node.poll() is not None
