"""bench/subgroups_paths.py — SubgroupStore steps over sets of paths, one flat JSON line per
set (float fields are figures), for bench/ab.py to compare two builds in interleaved rounds:

  .venv/bin/python bench/ab.py --side before=BEFORE/python --side after=.venv/bin/python \\
      --rounds 5 -- bench/subgroups_paths.py --sets disk+tmpfs+mem,disk+tmpfs,mem,pool

BEFORE/python: an interpreter importing the other build (docs/subgroups.md says how one was
made from an earlier commit). A set is paths joined by '+': disk (a directory under --disk),
tmpfs (under --tmpfs, mapped), tmpfsaio (the same directory through the
async I/O engine), mem (a memory tier), pool (a one-host pool file on the tmpfs). Figures
per set, medians over the steps after the first: update_s, compute_s, io_wait_s, io_busy_GBps
(bytes moved / the time at least one request was in flight: the effective I/O), and
paths_sum_GBps (the used paths' own min(read, write), measured in the same process just
before) with io_of_paths = io_busy_GBps / paths_sum_GBps.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import subgroups as B  # noqa: E402  (bench/subgroups.py: run, parse_count, bench_pool)

from cxlkit.train.spill.paths import parse_path  # noqa: E402


def own(spec: str, nbytes: int) -> float:
    """min(read, write) bytes/s of the store's own microbenchmark on the path."""
    p = parse_path(spec, lock="off")
    try:
        p.open(nbytes + 4096)
        return min(p.measure(nbytes))
    finally:
        p.close()


def main() -> None:
    B.exit_on_sigterm()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", default="disk+tmpfs+mem,disk+tmpfs,mem,pool")
    ap.add_argument("--params", default="48M")
    ap.add_argument("--subgroup", default="3M")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--cache", type=int, default=6)
    ap.add_argument("--disk", default="/var/tmp")
    ap.add_argument("--tmpfs", default="/dev/shm")
    a = ap.parse_args()
    params, sub = B.parse_count(a.params), B.parse_count(a.subgroup)
    params -= params % sub
    tmp = [tempfile.mkdtemp(prefix="cxlkit-sgpaths-", dir=d) for d in (a.disk, a.tmpfs)]
    try:
        # tmpfs: the directory as the store takes it by default (mapped, user-space copy);
        # tmpfsaio: the same directory through the async I/O engine (the earlier default)
        spec = {"disk": tmp[0], "tmpfs": tmp[1], "tmpfsaio": f"aio:{tmp[1]}", "mem": "mem"}
        if "pool" in a.sets:
            spec["pool"] = B.bench_pool("auto", tmp[1], params, sub)
        for s in a.sets.split(","):
            names = s.split("+")
            if any(n not in spec for n in names):
                raise SystemExit(f"--sets {s!r}: paths are disk, tmpfs, tmpfsaio, mem, pool")
            ps = [spec[n] for n in names]
            bw = sum(own(p, 12 * sub) for p in ps) / 1e9
            res = B.run(ps, params, sub, a.steps, cache_subgroups=a.cache)
            ms = res["metrics"][1:] or res["metrics"]
            io = statistics.median(m["io_bytes"] / m["io_busy_s"] / 1e9 for m in ms
                                   if m["io_busy_s"])
            print(json.dumps({"set": s, "update_s": statistics.median(m["update_s"] for m in ms),
                              "compute_s": statistics.median(m["compute_s"] for m in ms),
                              "io_wait_s": statistics.median(m["io_wait_s"] for m in ms),
                              "io_busy_GBps": io, "paths_sum_GBps": bw,
                              "io_of_paths": io / bw}), flush=True)
        print(json.dumps({"loadavg": os.getloadavg()[0] * 1.0}), flush=True)
    finally:
        for d in tmp:
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
