"""The connector in the real vLLM engine (make test-vllm) beyond one pod and under vLLM's hybrid
KV cache manager: two pods (two pools, one engine per host) and one Mooncake master, a prefix
served in pod A is a level-2 hit in pod B and then a pool hit for B's other host; a model with
sliding-window layers keeps the hybrid manager on and shares its prefix through the pool."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="vLLM is not installed in this environment: "
                                   "`make test-vllm` runs these tests in .venv-vllm")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_kv_vllm_engine import BLOCK, engine, make_tiny_model, prompt, same_outputs  # noqa: E402

from cxlkit.kv.store import host_stats  # noqa: E402

# a Mooncake store node: lends the level its memory until stdin closes
_NODE = """
import sys
from cxlkit.integrations.mooncake import open_level2
lv = open_level2({"master": sys.argv[1], "metadata": sys.argv[2],
                  "segment_bytes": 256 << 20, "timeout_s": 30})
print("ready" if lv.wait_connected(120) else "down", flush=True)
sys.stdin.read()
lv.close()
"""


def _port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def mooncake_level():
    mc = pytest.importorskip("mooncake", reason="needs Mooncake in .venv-vllm: make vllm-mooncake")
    http, rpc, metrics = _port(), _port(), _port()
    master = subprocess.Popen([os.path.join(os.path.dirname(mc.__file__), "mooncake_master"),
                               "-enable_http_metadata_server=true",
                               "-http_metadata_server_host=127.0.0.1",
                               f"-http_metadata_server_port={http}", "-rpc_address=127.0.0.1",
                               f"-rpc_port={rpc}", f"-metrics_port={metrics}"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    cfg = {"master": f"127.0.0.1:{rpc}", "metadata": f"http://127.0.0.1:{http}/metadata",
           "segment_bytes": 0, "timeout_s": 30}
    node = subprocess.Popen([sys.executable, "-c", _NODE, cfg["master"], cfg["metadata"]],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    try:
        assert node.stdout.readline().strip() == "ready", "the Mooncake store node did not start"
        yield cfg
    finally:
        node.stdin.close()
        try:
            node.wait(60)
        except subprocess.TimeoutExpired:
            node.kill()
        master.kill()
        master.wait(10)


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
