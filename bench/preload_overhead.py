"""Overhead of libcxlkit_preload.so on a malloc-heavy program (bench/preload/malloc_loop.c):
allocations per second without and with the library (`cxlkit run --stripe` sets the same
environment), interleaved in one run, medians of --runs; a JSON line per pair and a summary.
  .venv/bin/python bench/preload_overhead.py --runs 7 --stripe 0:1
Two mixes: small blocks only (the library's fast path: one compare per call), and one 4 MiB
block in every --large-every allocations (placed: mbind per run of chunks)."""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def build(out: Path) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        sys.exit("bench/preload_overhead.py: needs a C compiler (cc)")
    exe = out / "malloc_loop"
    subprocess.run([cc, "-O2", "-o", str(exe), str(HERE / "preload" / "malloc_loop.c")],
                   check=True)
    return exe


def one(exe: Path, iters: int, seed: int, large_every: int, env: dict) -> float:
    r = subprocess.run([str(exe), str(iters), str(seed), str(large_every)], env=env,
                       capture_output=True, text=True, check=True)
    words = r.stdout.split()
    return float(words[words.index("allocs_per_s") + 1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7, help="pairs (with/without), interleaved")
    ap.add_argument("--iters", type=int, default=2_000_000, help="allocations per run")
    ap.add_argument("--large-every", type=int, default=1000,
                    help="the mixed run: one 4 MiB block every N allocations")
    ap.add_argument("--stripe", default="0:1", help="the stripe the library places with")
    a = ap.parse_args()
    from cxlkit import preload as PL

    cfg = PL.parse_stripe(a.stripe)
    base = {k: v for k, v in os.environ.items()
            if k not in ("LD_PRELOAD", PL.ENV_STRIPE, PL.ENV_LOG)}
    with_lib = PL.preload_env(cfg, base=base)
    with tempfile.TemporaryDirectory() as d:
        exe = build(Path(d))
        for mix, every in (("small", 0), ("with_large", a.large_every)):
            base_r, lib_r = [], []
            for i in range(a.runs):
                # alternate which goes first, so drift on a shared machine hits both
                order = [("base", base), ("lib", with_lib)]
                if i % 2:
                    order.reverse()
                got = {name: one(exe, a.iters, 1 + i, every, env) for name, env in order}
                base_r.append(got["base"])
                lib_r.append(got["lib"])
                print(json.dumps({"mix": mix, "run": i, "allocs_per_s_base": got["base"],
                                  "allocs_per_s_preload": got["lib"],
                                  "ratio": got["lib"] / got["base"]}), flush=True)
            mb, ml = statistics.median(base_r), statistics.median(lib_r)
            print(json.dumps({
                "mix": mix, "summary": True, "runs": a.runs, "iters": a.iters,
                "large_every": every, "stripe": cfg.spec,
                "median_allocs_per_s_base": mb, "median_allocs_per_s_preload": ml,
                "spread_base": [min(base_r), max(base_r)],
                "spread_preload": [min(lib_r), max(lib_r)],
                "overhead_pct": round(100 * (1 - ml / mb), 2)}), flush=True)


if __name__ == "__main__":
    main()
