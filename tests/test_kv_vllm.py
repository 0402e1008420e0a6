"""The vLLM connector driven by a faithful fake of vLLM's calls (tests/kv_fakes/vllm_fake.py):
call order, a prefix saved by one engine and loaded by another on another host instead of
recomputed, vLLM's own block hashes as keys, load errors degrading to recompute, cross-layer
caches. vLLM itself is not installed here; nothing in this file runs real vLLM."""

import pytest

from cxlkit.integrations import vllm as conn
from kv_fakes.vllm_fake import FakeEngine, Request, vllm_block_hashes

PROMPT = [(11 * i + 5) % 997 for i in range(83)]  # 5 full blocks + 3 tokens


@pytest.fixture
def extra(pool_path):
    return {"pool": pool_path, "create": True, "size": 32 << 20, "host_id": 0, "checksum": True}


STEP_CALLS = ["get_num_new_matched_tokens", "update_state_after_alloc", "build_connector_meta",
              "bind_connector_metadata", "start_load_kv"] + [
    "wait_for_layer_load", "save_kv_layer"] * 3 + [
    "wait_for_save", "get_finished", "get_block_ids_with_load_errors", "clear_connector_metadata"]


def test_connector_imports_and_runs_without_vllm():
    assert conn.HAVE_VLLM is False  # vLLM is not installable on this machine
    assert issubclass(conn.CxlkitConnector, conn.KVConnectorBase_V1)


def test_one_engine_saves_and_another_host_loads_instead_of_recomputing(extra):
    a = FakeEngine(extra)
    req = Request("a-1", PROMPT)
    so = a.step(req)
    assert a.calls == ["register_kv_caches"] + STEP_CALLS  # init, then one step in order
    meta = so.kv_connector_metadata
    assert meta.loads == [] and [len(t.keys) for t in meta.saves] == [5]
    assert a.computed_positions["a-1"] == list(range(83))
    a.finish(req)
    assert a.calls[-1] == "request_finished"

    b = FakeEngine(dict(extra, host_id=1, create=False))
    req_b = Request("b-1", PROMPT)
    so_b = b.step(req_b)
    ids = so_b.scheduled_new_reqs[0].block_ids[0]
    assert so_b.scheduled_new_reqs[0].num_computed_tokens == 80  # 5 blocks from the pool
    assert b.computed_positions["b-1"] == [80, 81, 82]  # only the suffix ran
    assert [len(t.keys) for t in so_b.kv_connector_metadata.loads] == [5]
    assert all(b.block_matches_recompute(req_b, ids, i) for i in range(5))
    assert b.invalid_block_ids == set()
    assert b.worker.store.stats.hits == 5 and b.worker.store.stats.load_errors == 0


def test_keys_are_vllms_block_hashes(extra):
    a = FakeEngine(extra)
    req = Request("r", PROMPT)
    assert a.sched._keys(req) == vllm_block_hashes(PROMPT, 16)
    req.block_hashes = []  # an engine that does not hand them over: computed the same way
    assert a.sched._keys(req) == vllm_block_hashes(PROMPT, 16)
    req.block_hashes = [h[:16] for h in vllm_block_hashes(PROMPT, 16)]  # e.g. xxhash: 16 bytes
    assert [len(k) for k in a.sched._keys(req)] == [32] * 5
    a.sched._inner._hash_algo = "xxhash"  # past the recording proxy
    req.block_hashes = []
    with pytest.raises(ValueError, match="xxhash"):
        a.sched._keys(req)


def test_a_block_evicted_between_lookup_and_load_is_recomputed(extra):
    a = FakeEngine(extra)
    a.step(Request("a", PROMPT))
    b = FakeEngine(dict(extra, host_id=1, create=False))
    req = Request("b", PROMPT)
    keys = vllm_block_hashes(PROMPT, 16)

    def evict_third_block():  # the owner host evicts after b's scheduler counted the hit
        a.worker.store.pool.destroy(a.worker.store.name(keys[2]))

    b.before_worker = evict_third_block
    so = b.step(req)
    ids = so.scheduled_new_reqs[0].block_ids[0]
    assert b.invalid_block_ids == set(ids[2:5])  # reported to vLLM, which recomputes them
    assert b.computed_positions["b"] == list(range(32, 83))
    assert all(b.block_matches_recompute(req, ids, i) for i in range(5))


def test_cross_layer_and_per_layer_engines_share_blocks(extra):
    a = FakeEngine(dict(extra, cross_layer=True), cross_layer=True)
    req = Request("a", PROMPT)
    so = a.step(req)
    ids = so.scheduled_new_reqs[0].block_ids[0]
    assert all(a.block_matches_recompute(req, ids, i) for i in range(5))
    b = FakeEngine(dict(extra, host_id=1, create=False))
    req_b = Request("b", PROMPT)
    so_b = b.step(req_b)
    ids_b = so_b.scheduled_new_reqs[0].block_ids[0]
    assert b.computed_positions["b"] == [80, 81, 82]
    assert all(b.block_matches_recompute(req_b, ids_b, i) for i in range(5))
    c = FakeEngine(dict(extra, cross_layer=True, create=False), cross_layer=True)
    req_c = Request("c", PROMPT)
    so_c = c.step(req_c)
    assert c.computed_positions["c"] == [80, 81, 82]
    assert all(c.block_matches_recompute(req_c, so_c.scheduled_new_reqs[0].block_ids[0], i)
               for i in range(5))


def test_a_prompt_of_whole_blocks_keeps_its_last_block_to_compute(extra):
    a = FakeEngine(extra)
    a.step(Request("a", PROMPT[:64]))
    b = FakeEngine(dict(extra, host_id=1, create=False))
    so = b.step(Request("b", PROMPT[:64]))
    assert so.scheduled_new_reqs[0].num_computed_tokens == 48


def test_a_different_prompt_is_a_miss_and_unknown_cache_shapes_are_refused(extra):
    a = FakeEngine(extra)
    a.step(Request("a", PROMPT))
    other = Request("o", [t + 1 for t in PROMPT])
    assert a.sched.get_num_new_matched_tokens(other, 0) == (0, False)
    import torch

    with pytest.raises(ValueError, match="kv_axes"):
        a.worker.register_kv_caches({f"model.layers.{i}.attn": torch.zeros(3, 4, 5, 6, 7)
                                     for i in range(3)})
    with pytest.raises(ValueError, match="layer index"):
        a.worker.register_kv_caches({"attn": torch.zeros(2, 4, 16, 2, 16)})
