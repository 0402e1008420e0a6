"""KV level 2 benchmark: demotion (pool eviction -> Mooncake Store) and promotion (Mooncake ->
checked -> pool) throughput of Llama-3-8B blocks (2 MiB), beside Mooncake's own put and get of
the same payloads by the same kind of client in the same run. A master and a store node (the
memory the objects live in, another process) are started here; TCP on loopback.

    .venv-mooncake/bin/python bench/kv_level2.py [--blocks 32] [--reps 5]

One JSON line per measurement; GB/s of block payloads, medians of --reps rounds, each round
running the four operations in turn; the ratios are medians of per-round ratios. The splits
say where the time goes: eviction (validated copy out, queue) vs draining the queue (Mooncake
puts), and Mooncake's exists + get vs the header/checksum check and the pool copy.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from contextlib import ExitStack

import torch

from cxlkit.integrations.mooncake import MooncakeBackend, open_level2
from cxlkit.integrations.mooncake_local import local_mooncake
from cxlkit.kv import BlockLayout, EngineTensors, Store, block_hashes


def emit(**kw):
    print(json.dumps(kw), flush=True)


def timed(fn, setup, reps):
    """Median seconds of fn over reps runs after a warm-up (reps 0: one run), setup before
    each, untimed."""
    ts = []
    for _ in range(reps + 1):
        setup()
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts[1:] or ts)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", type=int, default=32)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--pool", default="/dev/shm/cxlkit-bench-kv-level2")
    args = ap.parse_args()
    lay, nb = BlockLayout.llama3_8b(), args.blocks
    payload_bytes = nb * (128 + lay.nbytes)
    stack = ExitStack()
    cfg = stack.enter_context(local_mooncake(4 * payload_bytes + (64 << 20))).config
    paths = [f"{args.pool}-{os.getpid()}-{x}" for x in "ab"]
    try:
        lv = open_level2(dict(cfg, segment_bytes=0, queue_blocks=nb, timeout_s=60,
                              buffer_bytes=max(64 << 20, 2 * payload_bytes)))
        assert lv.wait_connected(120)
        eng = EngineTensors.per_layer(lay, [torch.randn(2, nb, 16, 8, 128).to(torch.bfloat16)
                                            for _ in range(32)])
        keys, ids = block_hashes(list(range(nb * 16))), list(range(nb))
        size = 4 * payload_bytes + (64 << 20)
        a = Store(paths[0], lay, create=True, size=size, host_id=0, level2=lv, checksum=True)
        b = Store(paths[1], lay, create=True, size=size, host_id=0, level2=lv, checksum=True)
        gb = payload_bytes / 1e9
        raw = MooncakeBackend(cfg["master"], cfg["metadata"], segment_bytes=0,
                              buffer_bytes=max(64 << 20, 2 * payload_bytes))
        names = [a.name(k) for k in keys]

        def put_pool():  # the blocks back in pod A's pool, and not yet in the level
            for nm in names:
                raw._st.remove(nm, True)
            a.put(keys, eng, ids)

        split = []

        def demote():
            t0 = time.perf_counter()
            a.clear()  # each block copied out of the pool, queued, destroyed
            t1 = time.perf_counter()
            assert lv.flush(120)
            split.append((t1 - t0, time.perf_counter() - t1))

        def reset_b():  # pod B's pool empty again; what it drops is not demoted
            b.level2 = None
            b.clear()
            b.level2 = lv

        def promote():
            assert b.lookup(keys) == nb

        a.put(keys[:1], eng, ids[:1])
        with a.pool.open(names[0]) as o:
            data = [o.read()] * nb  # a block's payload, for the plain client
        mk = [f"bench.{i}" for i in range(nb)]

        def raw_put():
            for k, d in zip(mk, data):
                raw.put(k, d)

        def raw_clear():
            for k in mk:
                raw._st.remove(k, True)

        def raw_get():
            assert all(raw.get(k) for k in mk)

        fetch_s = []
        fetch = lv.fetch

        def timed_fetch(names):  # the Mooncake side of a promotion (exists + get)
            t0 = time.perf_counter()
            try:
                return fetch(names)
            finally:
                fetch_s.append(time.perf_counter() - t0)

        lv.fetch = timed_fetch
        # the four operations take turns within each rep, so load that drifts over the run
        # weighs on ours and the baseline alike; the ratios are per rep
        ts = {k: [] for k in ("demote", "put", "promote", "get")}
        for _ in range(args.reps + 1):  # the first is a warm-up
            for op, fn, setup in (("demote", demote, put_pool), ("put", raw_put, raw_clear),
                                  ("promote", promote, reset_b), ("get", raw_get, lambda: None)):
                ts[op].append(timed(fn, setup, 0))
        ts = {k: v[1:] for k, v in ts.items()}
        fetch_s = fetch_s[-args.reps:]
        failed = lv.stats.demote_dropped
        med = {k: statistics.median(v) for k, v in ts.items()}
        common = dict(bench="kv_level2", blocks=nb, block_bytes=lay.nbytes,
                      transport="mooncake tcp loopback, objects in another process",
                      load=os.getloadavg()[0])
        for op in ("demote", "promote"):
            emit(op=op, GBps=round(gb / med[op], 3), **common)
        emit(op="mooncake put", GBps=round(gb / med["put"], 3), **common)
        emit(op="mooncake get", GBps=round(gb / med["get"], 3), **common)
        emit(op="demote split", evict_s=round(statistics.median(x for x, _ in split), 4),
             drain_s=round(statistics.median(y for _, y in split), 4), **common)
        emit(op="promote split", fetch_s=round(statistics.median(fetch_s), 4),
             check_and_pool_s=round(med["promote"] - statistics.median(fetch_s), 4), **common)
        emit(op="level2 counters", demoted=lv.stats.demoted, dropped=failed,
             fetched=lv.stats.fetched, **common)
        emit(op="ratio", demote_vs_put=round(statistics.median(
                 p / d for p, d in zip(ts["put"], ts["demote"])), 3),
             promote_vs_get=round(statistics.median(
                 g / p for g, p in zip(ts["get"], ts["promote"])), 3), **common)
        raw.close()
        a.close()
        b.close()
        lv.close()
    finally:
        stack.close()
        for p in paths:
            if os.path.exists(p):
                os.unlink(p)


if __name__ == "__main__":
    main()
