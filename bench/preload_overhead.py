"""Overhead of libcxlkit_preload.so on a malloc-heavy program (bench/preload/malloc_loop.c):
allocations per second without and with the library (`cxlkit run --stripe` sets the same
environment), interleaved in one run, medians of --runs; a JSON line per pair and a summary.
  .venv/bin/python bench/preload_overhead.py --runs 7 --stripe 0:1
Two mixes: small blocks only (the library's fast path: one compare per call), and one 4 MiB
block in every --large-every allocations (placed: mbind per run of chunks); the second also
against glibc with the M_MMAP_THRESHOLD the library sets (MALLOC_MMAP_THRESHOLD_), which
separates the library's own cost from glibc's heap reuse of large blocks."""
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


def one(exe: Path, iters: int, seed: int, large_every: int, touch: int, env: dict) -> float:
    r = subprocess.run([str(exe), str(iters), str(seed), str(large_every), str(touch)], env=env,
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
    ap.add_argument("--touch-large", choices=("all", "16k"), default="all",
                    help="pages written in each 4 MiB block: all (a program using it) or the "
                         "first 16 KiB (the worst case for the library's per-block calls)")
    a = ap.parse_args()
    from cxlkit import preload as PL

    cfg = PL.parse_stripe(a.stripe)
    base = {k: v for k, v in os.environ.items()
            if k not in ("LD_PRELOAD", PL.ENV_STRIPE, PL.ENV_LOG, "MALLOC_MMAP_THRESHOLD_")}
    with_lib = PL.preload_env(cfg, base=base)
    # glibc with the threshold the library sets: each large block is then a fresh mapping,
    # as under the library, so this baseline isolates the library's own cost (its mbind calls)
    fixed = dict(base, MALLOC_MMAP_THRESHOLD_=str(min(cfg.min_bytes, 32 << 20)))
    touch = 1 if a.touch_large == "all" else 0
    with tempfile.TemporaryDirectory() as d:
        exe = build(Path(d))
        for mix, every in (("small", 0), ("with_large", a.large_every)):
            variants = [("base", base), ("preload", with_lib)]
            if every:
                variants.insert(1, ("base_fixed_threshold", fixed))
            got_all: dict[str, list[float]] = {name: [] for name, _ in variants}
            ratios: dict[str, list[float]] = {name: [] for name, _ in variants[:-1]}
            for i in range(a.runs):
                # rotate which goes first, so drift on a shared machine hits every variant
                order = variants[i % len(variants):] + variants[:i % len(variants)]
                got = {name: one(exe, a.iters, 1 + i, every, touch, env) for name, env in order}
                for name, v in got.items():
                    got_all[name].append(v)
                for name in ratios:  # paired: the variants of one run ran back to back
                    ratios[name].append(got["preload"] / got[name])
                print(json.dumps({"mix": mix, "run": i,
                                  **{f"allocs_per_s_{k}": v for k, v in got.items()},
                                  "ratio": got["preload"] / got["base"]}), flush=True)
            med = {k: statistics.median(v) for k, v in got_all.items()}
            doc = {"mix": mix, "summary": True, "runs": a.runs, "iters": a.iters,
                   "large_every": every, "touch_large": a.touch_large, "stripe": cfg.spec,
                   **{f"median_allocs_per_s_{k}": v for k, v in med.items()},
                   **{f"spread_{k}": [min(v), max(v)] for k, v in got_all.items()},
                   "overhead_pct": round(100 * (1 - med["preload"] / med["base"]), 2),
                   **{f"paired_ratio_vs_{k}": {"median": round(statistics.median(v), 4),
                                               "min": round(min(v), 4),
                                               "max": round(max(v), 4)}
                      for k, v in ratios.items()}}
            if every:
                doc["overhead_vs_fixed_threshold_pct"] = round(
                    100 * (1 - med["preload"] / med["base_fixed_threshold"]), 2)
            print(json.dumps(doc), flush=True)

if __name__ == "__main__":
    main()
