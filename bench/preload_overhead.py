"""Overhead of libcxlkit_preload.so on malloc-heavy programs: operations per second without
and with the library (`cxlkit run --stripe` sets the same environment), variants rotated
within each run, medians of --runs; a JSON line per run and a summary per mix.
  .venv/bin/python bench/preload_overhead.py --runs 7 --stripe 0:1
Mixes (bench/preload/malloc_loop.c unless said):
  small       16 B-8 KiB blocks only (the library's fast path: one compare per call)
  with_large  the same, one 4 MiB block in every --large-every allocations
  large       only 4 MiB blocks over 16 slots: the loop that frees and reallocates them
  numpy       bench/preload/numpy_loop.py: 4 MiB arrays and their temporaries
Variants: base (glibc), base_fixed_threshold (glibc with the M_MMAP_THRESHOLD the library pins:
each large block a fresh mapping, as under the library without its cache), preload_nocache
(the library with CXLKIT_PRELOAD_CACHE=0), preload (the library as configured: --cache)."""
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
MIXES = ("small", "with_large", "large", "numpy")


def build(out: Path) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        sys.exit("bench/preload_overhead.py: needs a C compiler (cc)")
    exe = out / "malloc_loop"
    subprocess.run([cc, "-O2", "-o", str(exe), str(HERE / "preload" / "malloc_loop.c")],
                   check=True)
    return exe


def command(mix: str, exe: Path, a: argparse.Namespace, seed: int) -> tuple[list[str], str]:
    """The program of a mix and the word its rate follows in its output."""
    touch = "1" if a.touch_large == "all" else "0"
    if mix == "small":
        return [str(exe), str(a.iters), str(seed), "0", touch], "allocs_per_s"
    if mix == "with_large":
        return [str(exe), str(a.iters), str(seed), str(a.large_every), touch], "allocs_per_s"
    if mix == "large":
        return [str(exe), str(a.large_iters), str(seed), "1", touch, "16"], "allocs_per_s"
    return [sys.executable, str(HERE / "preload" / "numpy_loop.py"), str(a.numpy_steps)], \
        "steps_per_s"


def one(cmd: list[str], word: str, env: dict) -> float:
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    words = r.stdout.split()
    return float(words[words.index(word) + 1])


def summary(mix: str, a, cfg, got_all: dict, ratios: dict) -> dict:
    med = {k: statistics.median(v) for k, v in got_all.items()}
    return {"mix": mix, "summary": True, "runs": a.runs, "stripe": cfg.spec,
            "cache": a.cache, "touch_large": a.touch_large,
            **{f"median_per_s_{k}": v for k, v in med.items()},
            **{f"spread_{k}": [min(v), max(v)] for k, v in got_all.items()},
            "overhead_pct": round(100 * (1 - med["preload"] / med["base"]), 2),
            **{f"paired_ratio_vs_{k}": {"median": round(statistics.median(v), 4),
                                        "min": round(min(v), 4), "max": round(max(v), 4)}
               for k, v in ratios.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7, help="runs; each runs every variant once")
    ap.add_argument("--mix", action="append", choices=MIXES, help="default: all")
    ap.add_argument("--iters", type=int, default=2_000_000, help="allocations, small mixes")
    ap.add_argument("--large-iters", type=int, default=4000, help="allocations, large mix")
    ap.add_argument("--numpy-steps", type=int, default=1500, help="steps of the numpy mix")
    ap.add_argument("--large-every", type=int, default=1000,
                    help="with_large: one 4 MiB block every N allocations")
    ap.add_argument("--stripe", default="0:1", help="the stripe the library places with")
    ap.add_argument("--cache", default=None,
                    help="CXLKIT_PRELOAD_CACHE for the preload variant (default: the library's)")
    ap.add_argument("--touch-large", choices=("all", "16k"), default="all",
                    help="pages written in each 4 MiB block: all (a program using it) or the "
                         "first 16 KiB (the worst case for the library's per-block calls)")
    a = ap.parse_args()
    from cxlkit import preload as PL

    cfg = PL.parse_stripe(a.stripe)
    base = {k: v for k, v in os.environ.items()
            if k not in ("LD_PRELOAD", PL.ENV_STRIPE, PL.ENV_LOG, "MALLOC_MMAP_THRESHOLD_",
                         "CXLKIT_PRELOAD_CACHE", "CXLKIT_PRELOAD_CACHE_COUNT")}
    with_lib = PL.preload_env(cfg, base=base)
    if a.cache is not None:
        with_lib["CXLKIT_PRELOAD_CACHE"] = a.cache
    nocache = dict(with_lib, CXLKIT_PRELOAD_CACHE="0")
    # glibc with the threshold the library pins: each large block a fresh mapping
    fixed = dict(base, MALLOC_MMAP_THRESHOLD_=str(min(cfg.min_bytes, 32 << 20)))
    with tempfile.TemporaryDirectory() as d:
        exe = build(Path(d))
        for mix in a.mix or MIXES:
            variants = [("base", base), ("preload", with_lib)]
            if mix != "small":
                variants[1:1] = [("base_fixed_threshold", fixed), ("preload_nocache", nocache)]
            got_all: dict[str, list[float]] = {name: [] for name, _ in variants}
            ratios: dict[str, list[float]] = {name: [] for name, _ in variants if
                                              name != "preload"}
            for i in range(a.runs):
                # rotate which goes first, so drift on a shared machine hits every variant
                order = variants[i % len(variants):] + variants[:i % len(variants)]
                cmd, word = command(mix, exe, a, 1 + i)
                got = {name: one(cmd, word, env) for name, env in order}
                for name, v in got.items():
                    got_all[name].append(v)
                for name in ratios:  # paired: the variants of one run ran back to back
                    ratios[name].append(got["preload"] / got[name])
                print(json.dumps({"mix": mix, "run": i,
                                  **{f"per_s_{k}": v for k, v in got.items()},
                                  "ratio": got["preload"] / got["base"]}), flush=True)
            print(json.dumps(summary(mix, a, cfg, got_all, ratios)), flush=True)


if __name__ == "__main__":
    main()
