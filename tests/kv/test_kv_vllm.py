"""The vLLM connector driven by a fake of vLLM's calls (tests/kv_fakes/vllm_fake.py) for fast
failure cases: call order, a prefix saved by one engine and loaded by another on another host
instead of recomputed, vLLM's own block hashes as keys, load errors degrading to recompute, the
staging path, refused layouts. The truth is the real engine: tests/engines/test_kv_vllm_engine.py
(make test-vllm), which also checks the fake's page layout against vLLM's."""

import pytest
import torch

from cxlkit.integrations import vllm_pages as pages
from cxlkit.kv import BlockLayout, Store
from kv_fakes.vllm_base import have_vllm, import_connector
from kv_fakes.vllm_fake import (FakeEngine, FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec,
                                Request, cpu_attn_pages, vllm_block_hashes)

conn = import_connector()
PROMPT = [(11 * i + 5) % 997 for i in range(83)]  # 5 full blocks + 3 tokens


@pytest.fixture
def extra(pool_path):
    return {"pool": pool_path, "create": True, "size": 32 << 20, "host_id": 0, "checksum": True}


STEP_CALLS = ["get_num_new_matched_tokens", "update_state_after_alloc", "build_connector_meta",
              "bind_connector_metadata", "start_load_kv"] + [
    "wait_for_layer_load", "save_kv_layer"] * 3 + [
    "wait_for_save", "get_finished", "get_block_ids_with_load_errors", "clear_connector_metadata"]


def test_connector_is_a_kv_connector_that_supports_the_hybrid_manager():
    assert issubclass(conn.CxlkitConnector, conn.KVConnectorBase_V1)
    assert issubclass(conn.CxlkitConnector, conn.SupportsHMA)  # keeps vLLM's hybrid manager on
    if have_vllm():  # in .venv-vllm: the real base classes
        from vllm.distributed.kv_transfer.kv_connector.v1.base import (KVConnectorBase_V1,
                                                                       supports_hma)

        assert conn.KVConnectorBase_V1 is KVConnectorBase_V1
        assert supports_hma(conn.CxlkitConnector)


def test_extra_config_max_hosts_sizes_each_hosts_partition(extra):
    """extra_config "max_hosts" reaches the pool it makes: two servers on a pool of `size` get
    size/2 each (without it, the default host count left each a small partition, and a
    benchmark's early prompts were evicted before the second engine read them)."""
    from cxlkit import Pool

    a = FakeEngine(dict(extra, max_hosts=2))
    st = Pool(extra["pool"], host_id=1).stat()
    assert st.max_hosts == 2 and st.partition_bytes >= (extra["size"] // 2) * 9 // 10
    b = FakeEngine(dict(extra, max_hosts=2, host_id=1, create=False))
    assert b.worker.store.stats.hits == 0 and a.worker.store is not b.worker.store


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


def test_staged_and_direct_engines_share_blocks(extra):
    a = FakeEngine(dict(extra, staging=True, staging_blocks=2))  # 5 blocks: chunks 2, 2, 1
    assert a.worker._engine.staged
    req = Request("a", PROMPT)
    so = a.step(req)
    ids = so.scheduled_new_reqs[0].block_ids[0]
    assert all(a.block_matches_recompute(req, ids, i) for i in range(5))
    b = FakeEngine(dict(extra, host_id=1, create=False))
    so_b = b.step(Request("b", PROMPT))
    assert b.computed_positions["b"] == [80, 81, 82]
    c = FakeEngine(dict(extra, staging=True, staging_blocks=3, create=False))
    req_c = Request("c", PROMPT)
    so_c = c.step(req_c)
    assert c.computed_positions["c"] == [80, 81, 82]
    assert all(c.block_matches_recompute(req_c, so_c.scheduled_new_reqs[0].block_ids[0], i)
               for i in range(5))
    assert a.worker.store.stats.puts == 5 and c.worker.store.stats.hits == 5


def test_layout_comes_from_the_kv_cache_spec_and_matches_the_model_config(extra):
    a = FakeEngine(extra)
    b = FakeEngine(dict(extra, create=False), with_kv_cache_config=False)
    want = BlockLayout(num_layers=3, num_kv_heads=2, head_dim=16, dtype="float32",
                       block_tokens=16)
    assert a.worker.layout == want and b.worker.layout == want
    a.step(Request("a", PROMPT))
    assert b.step(Request("b", PROMPT)).scheduled_new_reqs[0].num_computed_tokens == 80


@pytest.mark.parametrize("bad, match", [
    ("hybrid", "hybrid"), ("v_size", "head_size_v"), ("mla", "MLA")])
def test_unsupported_kv_cache_specs_are_refused_by_name(bad, match):
    spec = FullAttentionSpec(16, 2, 16, torch.float32, head_size_v=8 if bad == "v_size" else None)
    names = [f"model.layers.{i}.attn" for i in range(3)]
    groups = [KVCacheGroupSpec(names, spec)]
    if bad == "hybrid":
        groups.append(KVCacheGroupSpec(["model.layers.3.attn"], spec))
    if bad == "mla":
        class MLAAttentionSpec:
            pass
        groups = [KVCacheGroupSpec(names, MLAAttentionSpec())]
    with pytest.raises(ValueError, match=match):
        pages.attention_spec(None, KVCacheConfig(8, groups))


def test_page_views_split_each_row_in_halves_and_refuse_other_shapes():
    lay = BlockLayout(num_layers=1, num_kv_heads=2, head_dim=4, dtype="float32", block_tokens=3)
    page = cpu_attn_pages(1, 5, 2, 3, 4, torch.float32)[0]
    page.copy_(torch.arange(page.numel(), dtype=torch.float32).view(page.shape))
    halves = pages.split_kv(page, lay)
    assert torch.equal(halves[:, :, :, 0], page[..., :4])
    assert torch.equal(halves[:, :, :, 1], page[..., 4:])
    strided = torch.zeros(5, 3, 2, 8).transpose(1, 2)  # heads inside tokens (layout LBNHC)
    assert pages.split_kv(strided, lay).shape == (5, 2, 3, 2, 4)
    with pytest.raises(ValueError, match="page shape"):
        pages.split_kv(torch.zeros(5, 2, 3, 6), lay)
    with pytest.raises(ValueError, match="4-D"):
        pages.split_kv(torch.zeros(2, 5, 3, 2, 4), lay)
    with pytest.raises(ValueError, match="not contiguous"):
        pages.split_kv(torch.zeros(5, 2, 8, 3).transpose(2, 3), lay)
    with pytest.raises(ValueError, match="dtype"):
        pages.split_kv(torch.zeros(5, 2, 3, 8, dtype=torch.float16), lay)
    fmt = pages.page_format(None, [], lay, {"attn_backend": "CPU_ATTN", "cpu_attn_isa": "amx"})
    assert fmt.name == "CPU_ATTN.amx"  # the ISA's packing is part of the namespace
    assert pages.page_format(None, [], lay, {"attn_backend": "FLASH_ATTN"}).name == "FLASH_ATTN"


def test_keys_take_the_hash_at_each_vllm_block_end_when_hashes_are_finer(extra):
    a = FakeEngine(extra)
    req = Request("r", PROMPT, block_size=8)  # hashes every 8 tokens, blocks of 16
    a.sched._inner._hashes_per_block = 2
    assert a.sched._keys(req) == vllm_block_hashes(PROMPT, 8)[1::2]


def test_connector_stats_and_reset_cache(extra):
    a = FakeEngine(extra)
    a.step(Request("a", PROMPT))
    st = a.worker.get_kv_connector_stats()
    assert st.data["saved_blocks"] == 5 and st.data["loaded_blocks"] == 0
    assert a.worker.get_kv_connector_stats() is None  # reset after each interval
    b = FakeEngine(dict(extra, host_id=1, create=False))
    b.step(Request("b", PROMPT))
    st_b = b.worker.get_kv_connector_stats()
    assert st_b.reduce()["loaded_blocks"] == 5 and not st_b.is_empty()
    agg = conn.CxlkitConnector.build_kv_connector_stats(dict(st.data)).aggregate(st_b)
    assert agg.data["saved_blocks"] == 5 and agg.data["loaded_blocks"] == 5
    assert not a.sched.requires_kv_delivery  # a cache: a dropped save is a later miss
    assert a.sched.reset_cache() is True  # vLLM's reset_prefix_cache(reset_connector=True)
    assert a.sched.get_num_new_matched_tokens(Request("c", PROMPT), 0) == (0, False)


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
    with pytest.raises(ValueError, match="no KV cache for layers"):
        a.worker.register_kv_caches({"model.layers.0.attn": torch.zeros(4, 2, 16, 32)})
    with pytest.raises(ValueError, match="4-D"):  # the pre-0.32 FlashAttention shape
        a.worker.register_kv_caches({n: torch.zeros(2, 4, 16, 2, 16) for n in a.layer_names})
    with pytest.raises(ValueError, match="layer index"):
        pages.layer_index("attn")


def test_page_engine_checks_its_input(pool_path):
    lay = BlockLayout(num_layers=2, num_kv_heads=2, head_dim=4, dtype="float32", block_tokens=3)
    fmt = pages.PageFormat("CPU_ATTN.vec")
    two = cpu_attn_pages(2, 4, 2, 3, 4, torch.float32)
    with pytest.raises(ValueError, match="2 layers"):
        pages.PageEngine(lay, two[:1], fmt)
    with pytest.raises(ValueError, match="staging_blocks"):
        pages.PageEngine(lay, two, fmt, staging=True, staging_blocks=0)
    eng = pages.PageEngine(lay, two, fmt, staging=True, staging_blocks=2)
    keys = [bytes([7]) * 32, bytes([8]) * 32]
    with Store(pool_path, lay, create=True, size=8 << 20, host_id=0) as st:
        with pytest.raises(ValueError, match="2 keys but 1 block ids"):
            eng.save(st, keys, [0])
        with pytest.raises(IndexError, match=r"\[0, 4\)"):
            eng.load(st, keys, [0, 4])
        two[1][3].fill_(5.0)
        assert eng.save(st, keys, [3, 2]) == 2 and eng.save(st, keys, [3, 2]) == 0  # immutable
        two[1].zero_()
        assert eng.load(st, keys + [bytes([9]) * 32], [0, 1, 2]) == 2  # a miss ends the prefix
        assert torch.equal(two[1][0], torch.full((2, 3, 8), 5.0))
        assert not two[1][1].any()


def _hybrid(extra, host_id, create):
    """Scheduler and worker connectors of an engine under vLLM's hybrid KV cache manager:
    layers 0 and 2 full attention (group 0), layer 1 a 32-token sliding window (group 1)."""
    from kv_fakes.vllm_fake import (CacheConfig, KVTransferConfig, ModelConfig, ParallelConfig,
                                    SlidingWindowSpec, VllmConfig)

    m = ModelConfig()
    cfg = VllmConfig(m, CacheConfig(), ParallelConfig(), KVTransferConfig(
        kv_connector_extra_config={"attn_backend": "CPU_ATTN", "cpu_attn_isa": "vec",
                                   **extra, "host_id": host_id, "create": create}))
    names = [f"model.layers.{i}.self_attn.attn" for i in range(3)]
    kcc = KVCacheConfig(32, [
        KVCacheGroupSpec([names[0], names[2]], FullAttentionSpec(16, 2, 16, torch.float32)),
        KVCacheGroupSpec([names[1]], SlidingWindowSpec(16, 2, 16, torch.float32, 32))])
    sched = conn.CxlkitConnector(cfg, conn.KVConnectorRole.SCHEDULER, kcc)
    worker = conn.CxlkitConnector(cfg, conn.KVConnectorRole.WORKER, kcc)
    kv = dict(zip(names, cpu_attn_pages(3, 32, 2, 16, 16, torch.float32)))
    worker.register_kv_caches(kv)
    return sched, worker, kv


def _hybrid_step(sched, worker, req, ids, ext):
    from kv_fakes.vllm_fake import (CachedRequestData, KVCacheBlocks, NewRequestData,
                                    SchedulerOutput)

    sched.update_state_after_alloc(req, type("B", (), {"get_block_ids": lambda s: ids})(), ext)
    so = SchedulerOutput([NewRequestData(req.request_id, req.prompt_token_ids, ids, ext)],
                         CachedRequestData(), {req.request_id: req.num_tokens - ext})
    meta = sched.build_connector_meta(so)
    worker.bind_connector_metadata(meta)
    worker.start_load_kv(None)
    worker.wait_for_save()
    worker.clear_connector_metadata()
    assert worker.wait_saves(30)  # the saves land before the test reads the pool
    return meta


def test_hybrid_model_loads_full_groups_whole_and_sliding_groups_inside_their_window(extra):
    """Under vLLM's hybrid manager a sliding-window group holds the null block (0) for blocks
    out of its window: those are neither loaded nor written, the window's are."""
    sa, wa, kva = _hybrid(extra, 0, True)
    for t in kva.values():
        t.copy_(torch.randn(t.shape))
    full_a, slide_a = list(range(1, 7)), list(range(7, 13))
    req = Request("a", PROMPT)  # 83 tokens: 5 full blocks
    assert sa.get_num_new_matched_tokens(req, 0) == (0, False)
    meta = _hybrid_step(sa, wa, req, (full_a, slide_a), 0)
    assert sorted((t.group, len(t.keys)) for t in meta.saves) == [(0, 5), (1, 5)]
    sb, wb, kvb = _hybrid(extra, 1, False)
    req_b = Request("b", PROMPT)
    assert sb.get_num_new_matched_tokens(req_b, 0) == (80, False)
    # 80 tokens computed: the window (32) of the next token reaches back into block 3
    full_b, slide_b = [11, 12, 13, 14, 15, 16], [0, 0, 0, 20, 21, 22]
    meta = _hybrid_step(sb, wb, req_b, (full_b, slide_b), 80)
    assert {(t.group, tuple(t.block_ids)) for t in meta.loads} == {
        (0, (11, 12, 13, 14, 15)), (1, (20, 21))}
    names = list(kva)
    for name in (names[0], names[2]):
        assert torch.equal(kvb[name][11:16], kva[name][1:6])
    assert torch.equal(kvb[names[1]][20:22], kva[names[1]][10:12])
    assert not kvb[names[1]][0].any()  # the null block was never written
    assert wb.get_block_ids_with_load_errors() == set()


def test_hybrid_hit_stops_where_a_sliding_window_block_is_missing(extra):
    sa, wa, kva = _hybrid(extra, 0, True)
    req = Request("a", PROMPT)
    sa.get_num_new_matched_tokens(req, 0)
    _hybrid_step(sa, wa, req, (list(range(1, 7)), list(range(7, 13))), 0)
    sliding = wa.stores[1]
    sliding.pool.destroy(sliding.name(req.block_hashes[4]))  # the window's last block
    sb, _, _ = _hybrid(extra, 1, False)
    # 5 blocks would need sliding blocks 3-4; 4 blocks need 2-3, all there
    assert sb.get_num_new_matched_tokens(Request("b", PROMPT), 0) == (64, False)
