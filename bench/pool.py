"""bench/pool.py — the pool's hot paths: create+publish+destroy and open+close latency (median,
p99) with 1 and 2 processes (2 = two hosts over one file, or two processes of one host),
payload copy bandwidth (seqlocked read out of an object, numpy write into one) as a fraction of
a plain numpy copy measured in the same run, and name lookup time as the pool fills from 1 k
to 1 M objects (the multi-level hash should stay flat), timed in C per lookup and through
Python (a miss raises there, which dominates), and the share of the data region one host fills
before PoolFullError (format v2 claims extents on demand; v1 stopped at its partition), and
the cost of Pool.stat() and Pool.hosts().
Baseline for latencies: the cost of a trivial native call from Python in the same run. One
JSON line per measurement.

  .venv/bin/python bench/pool.py                        # everything, up to 1M objects
  .venv/bin/python bench/pool.py --lookup-max 100000 --ops 2000 --repeat 3
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import statistics
import time
import uuid

import numpy as np

import cxlkit
from cxlkit import _native

MiB = 1 << 20


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def emit(**kw) -> None:
    kw.setdefault("machine", platform.node())
    kw.setdefault("kernel", platform.release())
    print(json.dumps(kw), flush=True)


def call_overhead_ns(n: int = 20000) -> float:
    f = _native.page_size
    ts = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        f()
        ts.append(time.perf_counter_ns() - t0)
    return statistics.median(ts)


def lat_worker(path: str, host, ops: int, nbytes: int, tag: str, barrier, out) -> None:
    """create+publish+close+destroy, then open+close of a published object; ns per op."""
    pool = cxlkit.Pool(path, host_id=host)
    pool.create(f"{tag}-target", nbytes, publish=True).close()
    cd, op = [], []
    barrier.wait()
    for i in range(ops):
        name = f"{tag}-{i}"
        t0 = time.perf_counter_ns()
        o = pool.create(name, nbytes)
        o.publish()
        o.close()
        pool.destroy(name)
        cd.append(time.perf_counter_ns() - t0)
    barrier.wait()
    for _ in range(ops):
        t0 = time.perf_counter_ns()
        pool.open(f"{tag}-target").close()
        op.append(time.perf_counter_ns() - t0)
    pool.destroy(f"{tag}-target")
    pool.close()
    out.put((cd, op))


def latency(args, nproc: int, same_host: bool) -> None:
    path = f"/dev/shm/cxlkit-bench-{uuid.uuid4().hex[:8]}"
    cxlkit.Pool(path, size=64 * MiB, host_id=0, max_hosts=2).close()
    ctx = mp.get_context("spawn")
    runs_cd, runs_op = [], []
    try:
        for rep in range(args.repeat):
            barrier, out = ctx.Barrier(nproc), ctx.Queue()
            procs = [ctx.Process(target=lat_worker, args=(
                path, 0 if same_host else k, args.ops, args.nbytes, f"r{rep}p{k}", barrier, out))
                for k in range(nproc)]
            for p in procs:
                p.start()
            res = [out.get(timeout=600) for _ in procs]
            for p in procs:
                p.join()
            runs_cd.append([x for cd, _ in res for x in cd])
            runs_op.append([x for _, op in res for x in op])
    finally:
        os.unlink(path)
    mode = "1 process" if nproc == 1 else ("2 processes, one host" if same_host
                                          else "2 processes, two hosts")
    base = call_overhead_ns()
    for what, runs in (("create+publish+destroy", runs_cd), ("open+close", runs_op)):
        emit(bench="pool.latency", op=what, procs=nproc, mode=mode, nbytes=args.nbytes,
             ops_per_proc=args.ops, repeat=args.repeat,
             median_us=round(statistics.median(statistics.median(r) for r in runs) / 1e3, 2),
             p99_us=round(statistics.median(pct(r, 0.99) for r in runs) / 1e3, 2),
             baseline_native_call_us=round(base / 1e3, 3))


def bandwidth(args) -> None:
    n = args.copy_mib * MiB
    path = f"/dev/shm/cxlkit-bench-{uuid.uuid4().hex[:8]}"
    try:
        with cxlkit.Pool(path, size=n + 64 * MiB, host_id=0, max_hosts=1) as pool:
            src = np.random.default_rng(0).integers(0, 255, n, dtype=np.uint8)
            dst = np.empty_like(src)
            obj = pool.create("payload", n)
            view = obj.numpy()
            view[:] = src  # fault the pages in
            obj.publish()

            def best(fn) -> float:
                fn()
                ts = []
                for _ in range(args.repeat):
                    t0 = time.perf_counter()
                    fn()
                    ts.append(time.perf_counter() - t0)
                return n / statistics.median(ts) / 1e9

            plain = best(lambda: np.copyto(dst, src))
            into = best(lambda: np.copyto(view, src))
            out = best(lambda: obj.read_into(dst, 0))
            del view
            obj.close()
        for what, gbs in (("write into object (numpy view)", into),
                          ("seqlocked read out of object", out)):
            emit(bench="pool.copy", op=what, nbytes=n, repeat=args.repeat, gb_s=round(gbs, 2),
                 baseline_numpy_copy_gb_s=round(plain, 2), fraction=round(gbs / plain, 3))
    finally:
        os.unlink(path)


def lookup(args) -> None:
    sizes = [s for s in (1_000, 10_000, 100_000, 1_000_000) if s <= args.lookup_max]
    top = sizes[-1]
    path = f"/dev/shm/cxlkit-bench-{uuid.uuid4().hex[:8]}"
    need = top * 384 + 64 * MiB + top * 48  # blocks + metadata
    try:
        with cxlkit.Pool(path, size=need, host_id=0, max_hosts=1, max_objects=top) as pool:
            created = 0
            rng = np.random.default_rng(1)
            for s in sizes:
                t0 = time.perf_counter()
                while created < s:
                    name = f"key-{created:08d}"
                    pool.create(name, 64, publish=True).close()
                    created += 1
                fill_s = time.perf_counter() - t0
                probes = [f"key-{i:08d}" for i in rng.integers(0, s, args.ops)]
                misses = [f"miss-{i}" for i in range(args.ops)]
                hit_ns, miss_ns = [], []
                for _ in range(args.repeat):
                    ts = []
                    for name in probes:
                        t = time.perf_counter_ns()
                        pool.info(name)
                        ts.append(time.perf_counter_ns() - t)
                    hit_ns.append(statistics.median(ts))
                    ts = []
                    for name in misses:
                        t = time.perf_counter_ns()
                        try:
                            pool.info(name)
                        except KeyError:
                            pass
                        ts.append(time.perf_counter_ns() - t)
                    miss_ns.append(statistics.median(ts))
                native_hit = statistics.median(_native.bench_pool_lookup(pool, probes)
                                               for _ in range(args.repeat))
                native_miss = statistics.median(_native.bench_pool_lookup(pool, misses)
                                                for _ in range(args.repeat))
                emit(bench="pool.lookup", objects=s, probes=args.ops, repeat=args.repeat,
                     native_hit_median_ns=round(native_hit),
                     native_miss_median_ns=round(native_miss),
                     python_hit_median_us=round(statistics.median(hit_ns) / 1e3, 2),
                     python_miss_median_us=round(statistics.median(miss_ns) / 1e3, 2),
                     baseline_native_call_us=round(call_overhead_ns() / 1e3, 3),
                     fill_rate_per_s=round((s - (sizes[sizes.index(s) - 1] if sizes.index(s) else 0))
                                           / fill_s))
    finally:
        os.unlink(path)


def fill(args) -> None:
    """One host of a 4-host pool creates objects until PoolFullError: the share of the data
    region (size - data offset) its blocks (headers included) and its payloads reach."""
    for nbytes in (4096, 64 * 1024, MiB):
        path = f"/dev/shm/cxlkit-bench-{uuid.uuid4().hex[:8]}"
        size = args.fill_mib * MiB
        try:
            with cxlkit.Pool(path, size=size, host_id=0, max_hosts=4,
                             max_objects=size // 4096) as pool:
                st = pool.stat()
                region = st.size - st.data_offset
                n = 0
                t0 = time.perf_counter()
                try:
                    while True:
                        pool.create(f"f{n}", nbytes, publish=True).close()
                        n += 1
                except cxlkit.PoolFullError:
                    pass
                secs = time.perf_counter() - t0
                block = (320 + nbytes + 63) // 64 * 64
                emit(bench="pool.fill", nbytes=nbytes, pool_bytes=size, max_hosts=4,
                     version=st.version, objects=n,
                     fill_blocks=round(n * block / region, 4),
                     fill_payload=round(n * nbytes / region, 4),
                     creates_per_s=round(n / secs))
        finally:
            os.unlink(path)


def stat_calls(args) -> None:
    """Pool.stat() and Pool.hosts() per call (what `cxlkit pool stat` and every monitor pay):
    the binding's conversion of the C structs dominates beside the native call."""
    path = f"/dev/shm/cxlkit-bench-{uuid.uuid4().hex[:8]}"
    try:
        with cxlkit.Pool(path, size=64 * MiB, host_id=0, max_hosts=8) as pool:
            for name, f in (("stat", pool.stat), ("hosts", pool.hosts)):
                runs = []
                for _ in range(args.repeat):
                    ts = []
                    for _ in range(args.ops):
                        t0 = time.perf_counter_ns()
                        f()
                        ts.append(time.perf_counter_ns() - t0)
                    runs.append(statistics.median(ts))
                emit(bench=f"pool.{name}", calls=args.ops, repeat=args.repeat, max_hosts=8,
                     median_us=round(statistics.median(runs) / 1e3, 3),
                     baseline_native_call_us=round(call_overhead_ns() / 1e3, 3))
    finally:
        os.unlink(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", type=int, default=5000, help="operations per process per run")
    ap.add_argument("--nbytes", type=int, default=4096, help="object size for latencies")
    ap.add_argument("--repeat", type=int, default=5, help="runs; medians are reported")
    ap.add_argument("--copy-mib", type=int, default=256, help="object size for bandwidth")
    ap.add_argument("--lookup-max", type=int, default=1_000_000, help="largest object count")
    ap.add_argument("--fill-mib", type=int, default=256, help="pool size for the fill ratio")
    ap.add_argument("--only", choices=["latency", "copy", "lookup", "fill", "stat"], help="one part")
    args = ap.parse_args()
    if args.only in (None, "latency"):
        latency(args, 1, True)
        latency(args, 2, False)
        latency(args, 2, True)
    if args.only in (None, "copy"):
        bandwidth(args)
    if args.only in (None, "lookup"):
        lookup(args)
    if args.only in (None, "fill"):
        fill(args)
    if args.only in (None, "stat"):
        stat_calls(args)


if __name__ == "__main__":
    main()
