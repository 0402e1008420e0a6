"""The connector in the real vLLM engine (make test-vllm) beyond one pod and under vLLM's hybrid
KV cache manager: two pods (two pools, one engine per host) and one Mooncake master, a prefix
served in pod A is a level-2 hit in pod B and then a pool hit for B's other host; a model with
sliding-window layers keeps the hybrid manager on and shares its prefix through the pool."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed in this environment: "
                                   "`make test-vllm` runs these tests in .venv-vllm")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_kv_vllm_engine import BLOCK, engine, make_tiny_model, prompt, same_outputs  # noqa: E402

from cxlkit.kv.store import host_stats  # noqa: E402

@pytest.fixture
def mooncake_level():
    pytest.importorskip("mooncake", reason="needs Mooncake in .venv-vllm: make vllm-mooncake")
    from cxlkit.integrations.mooncake_local import local_mooncake

    with local_mooncake(256 << 20) as mc:  # the store node holds the blocks
        yield dict(mc.config, segment_bytes=0, timeout_s=30)


@pytest.mark.slow
def test_two_pods_a_prefix_from_pod_a_is_a_level_2_hit_in_pod_b_then_a_pool_hit(
        tmp_path, pool_path, mooncake_level):
    model = str(make_tiny_model(tmp_path / "tiny"))
    base, other = prompt(11, 1000), prompt(12, 1000)  # 7 full blocks each
    block_bytes = 128 + 2 * 2 * BLOCK * 2 * 64 * 4  # a pool block of the tiny model
    level = {"level2": mooncake_level}
    # pod A's pool holds 7 blocks: serving `other` demotes `base`'s blocks to Mooncake
    a = engine({"model": model, "pool": pool_path, "create": True, "host_id": 0,
                "extra": dict(level, capacity_bytes=7 * block_bytes),
                "runs": [{"prompt": base}, {"prompt": other}]})
    assert host_stats(pool_path)[0]["demoted"] >= 7
    pod_b = pool_path + "-b"
    b0 = engine({"model": model, "pool": pod_b, "create": True, "host_id": 0, "extra": level,
                 "runs": [{"prompt": base}, {"prompt": base, "skip_cache": True}]})
    b1 = engine({"model": model, "pool": pod_b, "create": False, "host_id": 1, "extra": level,
                 "runs": [{"prompt": base}]})
    stats = host_stats(pod_b)
    assert b0["runs"][0]["cached"] == 7 * BLOCK and stats[0]["promoted"] == 7
    assert b1["runs"][0]["cached"] == 7 * BLOCK and stats[1]["promoted"] == 0
    assert same_outputs(b0["runs"][0], b0["runs"][1])  # level-2 hit = recompute
    assert same_outputs(b1["runs"][0], a["runs"][0])  # pool hit = pod A's recompute


@pytest.mark.slow
def test_a_sliding_window_model_keeps_the_hybrid_manager_and_shares_its_prefix(
        tmp_path, pool_path):
    model = str(make_tiny_model(tmp_path / "swa", layer_types=["full_attention",
                                                               "sliding_attention"],
                                sliding_window=2 * BLOCK))
    base = prompt(21, 1000)
    a = engine({"model": model, "pool": pool_path, "create": True, "host_id": 0,
                "runs": [{"prompt": base}]})
    b = engine({"model": model, "pool": pool_path, "create": False, "host_id": 1,
                "runs": [{"prompt": base}, {"prompt": base, "skip_cache": True}]})
    assert a["hma"] and b["hma"]  # vLLM kept its hybrid KV cache manager with the connector
    hit, recompute = b["runs"]
    assert hit["cached"] == 7 * BLOCK and recompute["cached"] == 0
    assert same_outputs(hit, recompute) and same_outputs(hit, a["runs"][0])
