"""KV pool benchmark: put/get bandwidth of a Llama-3-8B-shaped block (32 layers, 8 KV heads, 128
dim, bf16: 2 MiB in 64 runs of 32 KiB) as a fraction of memcpy in the same run; per-operation
overhead on tiny blocks; transformers time to first token, pooled prefix hit vs recompute; and
Mooncake Store over TCP on loopback when its wheel is importable (its master started here).

    .venv/bin/python bench/kv.py [--blocks 16] [--reps 5] [--ttft 512,2048,8192]

One JSON line per measurement; medians of --reps runs.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np
import torch

from cxlkit.kv import BlockLayout, EngineTensors, Store, block_hashes


def emit(**kw):
    print(json.dumps(kw), flush=True)


def median_time(fn, reps, setup=None):
    if setup:
        setup()
    fn()  # warm-up: page faults, first-touch of pool and engine pages, lazy init
    ts = []
    for _ in range(reps):
        if setup:
            setup()
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def llama_blocks(args):
    lay = BlockLayout.llama3_8b()
    nb = args.blocks
    per_block = 128 + lay.nbytes + 4096
    path = f"{args.pool}-{os.getpid()}"
    size = 2 * (nb * per_block + (16 << 20))
    engines = {
        "per_layer": EngineTensors.per_layer(lay, [torch.randn(2, nb, 16, 8, 128).to(torch.bfloat16)
                                                   for _ in range(32)]),
        "cross_layer": EngineTensors.cross_layer(lay, torch.randn(nb, 32, 2, 16, 8, 128)
                                                 .to(torch.bfloat16)),
    }
    keys = block_hashes(list(range(nb * 16)))
    ids = list(range(nb))
    # memcpy of the same bytes, block by block, between buffers as large as the engine and pool
    src = np.random.default_rng(0).integers(0, 255, nb * lay.nbytes, dtype=np.uint8)
    dst = np.zeros_like(src)

    def memcpy():
        for b in range(nb):
            s = slice(b * lay.nbytes, (b + 1) * lay.nbytes)
            np.copyto(dst[s], src[s])

    t_mem = median_time(memcpy, args.reps)
    mem_bw = nb * lay.nbytes / t_mem / 1e9
    emit(bench="kv", op="memcpy", block_bytes=lay.nbytes, blocks=nb, GBps=round(mem_bw, 2))

    def pool_view(st):
        # a scratch object in the same pool: memcpy into pool pages (tmpfs, 4 KiB pages) too
        obj = st.pool.create("bench.scratch", nb * lay.nbytes)
        return obj, obj.numpy()

    def paired(op, setup=None):
        # memcpy and op back to back in every repetition: the machine is shared, so the ratio
        # of each pair is steadier than a ratio of medians taken minutes apart
        fr, bws = [], []
        for _ in range(args.reps + 1):
            if setup:
                setup()
            t0 = time.perf_counter()
            memcpy()
            t1 = time.perf_counter()
            op()
            t2 = time.perf_counter()
            fr.append((t1 - t0) / (t2 - t1))
            bws.append(nb * lay.nbytes / (t2 - t1) / 1e9)
        return statistics.median(bws[1:]), statistics.median(fr[1:])  # [0]: warm-up

    try:
        for checksum, nt in ((False, True), (False, False), (True, True)):
            st = Store(path, lay, create=True, size=size, host_id=0, max_hosts=2,
                       checksum=checksum, namespace=f"bench-{checksum}",
                       coherence=args.coherence, nt_stores=nt)
            if checksum is False and nt is True:
                scratch, pdst = pool_view(st)

                def memcpy_pool():
                    for b in range(nb):
                        s = slice(b * lay.nbytes, (b + 1) * lay.nbytes)
                        np.copyto(pdst[s], src[s])

                bw, fr = paired(memcpy_pool)
                emit(bench="kv", op="memcpy_into_pool_pages", block_bytes=lay.nbytes, blocks=nb,
                     GBps=round(bw, 2), fraction_of_memcpy=round(fr, 3))
                del pdst
                scratch.close()
                st.pool.destroy("bench.scratch")
            for name, eng in engines.items():
                put_bw, put_fr = paired(lambda: st.put(keys, eng, ids), setup=st.clear)
                n = st.get(keys, eng, ids)
                assert n == nb, f"get loaded {n} of {nb}"
                get_bw, get_fr = paired(lambda: st.get(keys, eng, ids))
                for op, bw, fr in (("put", put_bw, put_fr), ("get", get_bw, get_fr)):
                    if op == "get" and not nt:
                        continue  # nt_stores only changes puts
                    emit(bench="kv", op=op, layout=name, checksum=checksum, nt_stores=nt,
                         coherence=args.coherence, block_bytes=lay.nbytes, runs=eng.nsegs,
                         blocks=nb, GBps=round(bw, 2), fraction_of_memcpy=round(fr, 3),
                         goal=">= 0.80")
            st.clear()
            st.close()
        return {"keys": keys, "engine": engines["per_layer"], "layout": lay, "mem_bw": mem_bw,
                "paired": paired}
    finally:
        if os.path.exists(path):
            os.unlink(path)


def tiny_blocks(args):
    lay = BlockLayout(num_layers=1, num_kv_heads=1, head_dim=8, dtype="float16")  # 512 B
    n = args.tiny
    path = f"{args.pool}-tiny-{os.getpid()}"
    try:
        st = Store(path, lay, create=True, size=2 * (n * 8192 + (16 << 20)), host_id=0,
                   max_hosts=2)
        eng = EngineTensors.per_layer(lay, [torch.zeros(2, n, 16, 1, 8, dtype=torch.float16)])
        keys = [block_hashes(list(range(i, i + 16)))[0] for i in range(n)]
        ids = list(range(n))
        src = np.ones(lay.nbytes * n, np.uint8)
        dst = np.zeros_like(src)

        def memcpy():
            for b in range(n):
                s = slice(b * lay.nbytes, (b + 1) * lay.nbytes)
                np.copyto(dst[s], src[s])

        base = median_time(memcpy, args.reps) / n
        t_put = median_time(lambda: st.put(keys, eng, ids), args.reps, setup=st.clear) / n
        t_get = median_time(lambda: st.get(keys, eng, ids), args.reps) / n
        t_look = median_time(lambda: st.lookup(keys), args.reps) / n
        for op, t in (("put", t_put), ("get", t_get), ("lookup", t_look)):
            emit(bench="kv", op=op, block_bytes=lay.nbytes, batch=n, us_per_block=round(t * 1e6, 2),
                 python_memcpy_us=round(base * 1e6, 2), goal_us="<= 5")
        st.close()
    finally:
        if os.path.exists(path):
            os.unlink(path)


def ttft(args):
    try:
        from transformers import LlamaConfig, LlamaForCausalLM
    except ImportError:
        emit(bench="kv", op="ttft", skipped="transformers not installed")
        return
    from cxlkit.integrations.transformers import PrefixCache, generate

    cfg = LlamaConfig(vocab_size=2048, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                      num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=16384)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).eval()
    path = f"{args.pool}-ttft-{os.getpid()}"
    try:
        pc = PrefixCache(path, model, create=True, size=512 << 20, host_id=0, max_hosts=2)
        generate(model, list(range(40)), None, max_new_tokens=1)  # warm-up
        for plen in args.ttft:
            prefix = [(31 * i + 7) % 2048 for i in range(plen)]
            generate(model, prefix + [1] * 16, pc, max_new_tokens=1)  # stores the prefix
            prompt = prefix + [2] * 16
            generate(model, prompt, pc, max_new_tokens=1, save=False)  # warm-up of both paths
            generate(model, prompt, None, max_new_tokens=1)
            rec = [generate(model, prompt, None, max_new_tokens=1)[1].ttft_s
                   for _ in range(args.ttft_reps)]
            hit = [generate(model, prompt, pc, max_new_tokens=1, save=False)[1]
                   for _ in range(args.ttft_reps)]
            assert all(h.prefix_tokens == plen for h in hit)
            r, h = statistics.median(rec), statistics.median(x.ttft_s for x in hit)
            emit(bench="kv", op="ttft", prefix_tokens=plen, suffix_tokens=16,
                 model="llama 4x256 fp32 random", threads=torch.get_num_threads(),
                 recompute_ms=round(r * 1e3, 1), hit_ms=round(h * 1e3, 1),
                 hit_over_recompute=round(h / r, 3))
    finally:
        if os.path.exists(path):
            os.unlink(path)


def mooncake(args, llama):
    try:
        from mooncake.store import MooncakeDistributedStore
    except ImportError:
        emit(bench="kv", op="mooncake", skipped="mooncake not importable (pip install "
             "mooncake-transfer-engine-non-cuda, or PYTHONPATH to it)")
        return
    from cxlkit.integrations.mooncake_local import local_mooncake

    lay, nb = llama["layout"], args.blocks
    # the memory holding the objects belongs to another process (a second "node"), so puts
    # and gets cross TCP on loopback; this process mounts no segment of its own
    with local_mooncake(nb * lay.nbytes * 2 + (64 << 20)) as mc:
        meta, master_addr = mc.config["metadata"], mc.config["master"]
        st = MooncakeDistributedStore()
        if st.setup("127.0.0.1", meta, 0, nb * lay.nbytes + (64 << 20), "tcp", "",
                    master_addr) != 0:
            raise RuntimeError("mooncake setup failed")
        # put: the 64 sub-blocks of each block gathered by put_parts (its scatter-gather put)
        eng = torch.randn(32, 2, nb, 16, 8, 128).to(torch.bfloat16)  # per-layer caches stacked
        parts = [[memoryview(eng[lyr, kv, b].view(torch.uint8).reshape(-1).numpy())
                  for lyr in range(32) for kv in range(2)] for b in range(nb)]
        names = [f"blk-{k.hex()}" for k in llama["keys"]]

        def put():
            for nm, p in zip(names, parts):
                assert st.put_parts(nm, *p) == 0

        def clear():
            for nm in names:
                st.remove(nm, True)

        put_bw, put_fr = llama["paired"](put, setup=clear)
        # get: into a registered contiguous staging buffer (no scatter: favours Mooncake)
        stage = np.empty(nb * lay.nbytes, np.uint8)
        st.register_buffer(stage.ctypes.data, stage.nbytes)
        ptrs = [stage.ctypes.data + b * lay.nbytes for b in range(nb)]

        def get():
            r = st.batch_get_into(names, ptrs, [lay.nbytes] * nb)
            assert all(x == lay.nbytes for x in r), r

        get_bw, get_fr = llama["paired"](get)
        for op, bw, fr in (("put", put_bw, put_fr), ("get", get_bw, get_fr)):
            emit(bench="kv", op=op, system="mooncake-store tcp loopback, segment in another process",
                 block_bytes=lay.nbytes, blocks=nb, GBps=round(bw, 2),
                 fraction_of_memcpy=round(fr, 3))
        st.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", type=int, default=16, help="Llama-3-8B blocks per batch")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--tiny", type=int, default=256, help="tiny blocks per batch")
    ap.add_argument("--ttft", default="512,2048,8192", help="prefix lengths, '' to skip")
    ap.add_argument("--ttft-reps", type=int, default=3)
    ap.add_argument("--pool", default="/dev/shm/cxlkit-bench-kv")
    ap.add_argument("--coherence", choices=("host", "none"), default="host")
    ap.add_argument("--no-mooncake", action="store_true")
    args = ap.parse_args()
    args.ttft = [int(x) for x in args.ttft.split(",") if x]
    emit(bench="kv", machine=os.uname().nodename, kernel=os.uname().release,
         cpus=os.cpu_count(), python=sys.version.split()[0])
    llama = llama_blocks(args)
    tiny_blocks(args)
    if not args.no_mooncake:
        mooncake(args, llama)
    if args.ttft:
        ttft(args)


if __name__ == "__main__":
    main()
