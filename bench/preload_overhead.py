"""Overhead of libcxlkit_preload.so on malloc-heavy programs: operations per second without
and with the library (the environment `cxlkit run --stripe` execs with, built by the same
function), variants rotated within each run, medians and spread of --runs paired runs; and
user-space instructions per operation of each variant in the same invocation (a hardware
counter in the C programs, else callgrind): the instruction ratio is the noise-free evidence,
the time ratio the claim. A JSON line per run and a summary per mix.
  .venv/bin/python bench/preload_overhead.py --runs 7 --stripe 0:1 --mix small --mix kvstore
Mixes (bench/preload/):
  small       malloc_loop.c: 16 B-8 KiB blocks only (the library's fast path)
  with_large  the same, one 4 MiB block in every --large-every allocations
  large       malloc_loop.c: only 4 MiB blocks over 16 slots: the free/reallocate loop
  midsize     the same with 1 MiB blocks: below the library's minimum, from glibc's heap
  numpy       numpy_loop.py: 4 MiB arrays and their temporaries
  kvstore     kv_store.c: a small key-value store (SET/GET/DEL of small values); per allocation
  python      py_objects.py: dicts and lists through json round trips; per step
Variants: base (glibc), base_fixed_threshold (glibc with the M_MMAP_THRESHOLD and
M_TRIM_THRESHOLD the library sets, through glibc's environment variables: each large block a
fresh mapping, as under the library without its cache; the malloc settings' share apart from
the library's code), preload_nocache (the library with CXLKIT_PRELOAD_CACHE=0: only the mixes
with large blocks), preload (the library as configured: --cache, --cache-count), and with
--aa base_again (glibc a second time: the noise floor).
Per run and variant: the rate by wall time and by the loop's CPU time (cpu_rate), the
process's page faults (minflt, majflt) and CPU seconds (utime_s, stime_s, start-up included);
with --repeat K, each variant's fastest of K interleaved tries. Per mix: medians, and paired
ratios with a 95 % bootstrap interval (ci95) of preload against each variant (vs_X), of each
extra variant against glibc (X_vs_base), and the same by CPU time (cpu_vs_X, cpu_X_vs_base)."""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
MIXES = ("small", "with_large", "large", "midsize", "numpy", "kvstore", "python")
LARGE_MIXES = ("with_large", "large", "numpy")
PROGRAMS = ("malloc_loop", "kv_store")
# output word of the rate and of the operations counted, per mix
WORDS = {"numpy": ("steps_per_s", "steps"), "python": ("steps_per_s", "steps")}


def build(out: Path) -> dict[str, Path]:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        sys.exit("bench/preload_overhead.py: needs a C compiler (cc)")
    exes = {}
    for name in PROGRAMS:
        exes[name] = out / name
        subprocess.run([cc, "-O2", "-o", str(exes[name]), str(HERE / "preload" / f"{name}.c")],
                       check=True)
    return exes


def command(mix: str, exes: dict, a: argparse.Namespace, seed: int, scale: float = 1.0
            ) -> list[str]:
    """The program of a mix; scale multiplies its operation count (callgrind runs less)."""
    touch = "1" if a.touch_large == "all" else "0"
    ml = str(exes["malloc_loop"])

    def n(v: int) -> str:
        return str(max(1, int(v * scale)))

    if mix == "small":
        return [ml, n(a.iters), str(seed), "0", touch]
    if mix == "with_large":
        return [ml, n(a.iters), str(seed), str(a.large_every), touch]
    if mix == "large":
        return [ml, n(a.large_iters), str(seed), "1", touch, "16"]
    if mix == "midsize":
        return [ml, n(a.large_iters * 4), str(seed), "1", touch, "16", "1024"]
    if mix == "kvstore":
        return [str(exes["kv_store"]), n(a.kv_ops), str(a.kv_keys), str(seed)]
    script = "numpy_loop.py" if mix == "numpy" else "py_objects.py"
    steps = a.numpy_steps if mix == "numpy" else a.py_steps
    return [sys.executable, str(HERE / "preload" / script), n(steps)]


def fields(text: str) -> dict[str, float]:
    """"word value word value ..." of a program's last line."""
    words = text.split()
    return {k: float(v) for k, v in zip(words[::2], words[1::2])}


RUSAGE = ("minflt", "majflt", "utime_s", "stime_s", "cpu_rate")


def one(cmd: list[str], env: dict) -> dict[str, float]:
    """The program's fields, and what the kernel counted for it (the whole process, start-up
    included): page faults, user and system CPU seconds. The bench runs one child at a time,
    so the change of RUSAGE_CHILDREN across the run is this child's."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        sys.exit(f"bench/preload_overhead.py: {cmd[0]} failed ({r.returncode}): {r.stderr}")
    return {**fields(r.stdout),
            "minflt": after.ru_minflt - before.ru_minflt,
            "majflt": after.ru_majflt - before.ru_majflt,
            "utime_s": after.ru_utime - before.ru_utime,
            "stime_s": after.ru_stime - before.ru_stime}


def rusage_of(f: dict, rate: str) -> dict[str, float]:
    """What one() adds, and the loop's rate by CPU time (cpu_rate)."""
    return {**{u: f[u] for u in RUSAGE[:-1]}, "cpu_rate": f[rate.replace("_per_s", "_per_cpu_s")]}


def callgrind(cmd: list[str], env: dict, out: Path) -> tuple[int, dict[str, float]]:
    """Instructions (callgrind's Ir) of the whole run, and the program's fields."""
    # a fixed hash seed: Python's str hashes (and so its dict probing) are otherwise random
    # per process, and the counts would vary by a few tenths of a percent between runs
    r = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *cmd],
                       env=dict(env, PYTHONHASHSEED="0"), capture_output=True, text=True)
    m = re.search(r"Collected : (\d+)", r.stderr)
    if r.returncode != 0 or not m:
        sys.exit(f"bench/preload_overhead.py: callgrind of {cmd[0]} failed: {r.stderr[-500:]}")
    return int(m.group(1)), fields(r.stdout)


def insns_per_op(mix: str, exes, a, variants, d: Path) -> dict[str, float]:
    """Instructions per operation of each variant under callgrind: two runs of the program at
    scales s and 2s, (Ir2 - Ir1) / (ops2 - ops1), so start-up (Python, numpy import, the
    library's own setup) cancels and only the loop remains."""
    unit = WORDS.get(mix, (None, "allocs"))[1]
    got = {}
    for name, env in variants:
        (i1, f1), (i2, f2) = (callgrind(command(mix, exes, a, 1, a.insn_scale * k), env,
                                        d / f"cg.{mix}.{name}.{k}") for k in (1, 2))
        got[name] = (i2 - i1) / (f2[unit] - f1[unit])
    return got


def median_ci(v: list[float], resamples: int = 2000) -> list[float]:
    """A 95 % bootstrap interval of the median of v (percentiles of the medians of resamples
    drawn with replacement; a fixed seed, so a summary reads the same twice): how far this
    machine's noise lets the median move, next to the median itself."""
    rng = random.Random(0)
    meds = sorted(statistics.median(rng.choices(v, k=len(v))) for _ in range(resamples))
    return [round(meds[int(0.025 * resamples)], 4), round(meds[int(0.975 * resamples) - 1], 4)]


def summary(mix: str, a, spec: str, got_all: dict, ratios: dict, insns: dict, source: str,
            usage: dict) -> dict:
    med = {k: statistics.median(v) for k, v in got_all.items()}
    doc = {"mix": mix, "summary": True, "runs": a.runs, "repeat": a.repeat, "stripe": spec,
           "cache": a.cache,
           "cache_count": a.cache_count, "touch_large": a.touch_large,
           "load": os.getloadavg()[0],
           **{f"median_per_s_{k}": v for k, v in med.items()},
           **{f"spread_{k}": [min(v), max(v)] for k, v in got_all.items()}}
    if med:
        doc["overhead_pct"] = round(100 * (1 - med["preload"] / med["base"]), 2)
    doc.update({f"paired_ratio_{k}": {"median": round(statistics.median(v), 4),
                                      "min": round(min(v), 4), "max": round(max(v), 4),
                                      "ci95": median_ci(v)}
                for k, v in ratios.items() if v})
    # per variant: medians of page faults and CPU seconds of the whole process
    doc.update({f"median_{f}_{k}": round(statistics.median(v), 4)
                for k, per in usage.items() for f, v in per.items() if v})
    if insns:
        doc["insns_source"] = source
        doc.update({f"insns_per_op_{k}": round(v, 2) for k, v in insns.items()})
        doc["insn_ratio_preload_vs_base"] = round(insns["preload"] / insns["base"], 4)
        if "base_fixed_threshold" in insns:
            doc["insn_ratio_base_fixed_threshold_vs_base"] = round(
                insns["base_fixed_threshold"] / insns["base"], 4)
    return doc


def environments(a: argparse.Namespace) -> tuple[str, list[tuple[str, dict]]]:
    from cxlkit.placement import preload as PL
    from cxlkit.cli.stripe import stripe_env

    drop = ("LD_PRELOAD", PL.ENV_STRIPE, PL.ENV_LOG, "MALLOC_MMAP_THRESHOLD_",
            "MALLOC_TRIM_THRESHOLD_",
            "CXLKIT_PRELOAD_CACHE", "CXLKIT_PRELOAD_CACHE_COUNT", "CXLKIT_STRIPE_CHUNK",
            "CXLKIT_MIN_SIZE")
    base = {k: v for k, v in os.environ.items() if k not in drop}
    # what `cxlkit run --stripe` sets, with its checks: a stripe it refuses (a node without
    # memory) ends the bench with its one line on stderr and exit 2, as `cxlkit run` does
    import typer

    try:
        with_lib = dict(base, **stripe_env(a.stripe, "2M", "2M", None, True))
    except typer.Exit as e:
        sys.exit(e.exit_code)
    if a.cache is not None:
        with_lib["CXLKIT_PRELOAD_CACHE"] = a.cache
    if a.cache_count is not None:
        with_lib["CXLKIT_PRELOAD_CACHE_COUNT"] = a.cache_count
    nocache = dict(with_lib, CXLKIT_PRELOAD_CACHE="0")
    cfg = PL.parse_stripe(a.stripe)
    # glibc set as the library sets it (hooks.c setup_malloc), without the library: the mmap
    # threshold pinned at the minimum (each large block a fresh mapping) and the trim
    # threshold at twice that; the environment's share of the overhead apart from the code's
    t = min(cfg.min_bytes, 32 << 20)
    fixed = dict(base, MALLOC_MMAP_THRESHOLD_=str(t), MALLOC_TRIM_THRESHOLD_=str(2 * t))
    # base_again: glibc a second time, the A/A pair that shows what this machine's noise
    # alone makes of a paired ratio (--aa)
    return cfg.spec, [("base", base), ("base_fixed_threshold", fixed),
                      ("preload_nocache", nocache), ("preload", with_lib),
                      ("base_again", dict(base))]


def paired(got: dict, rate: str) -> dict[str, float]:
    """The ratios of one run (its variants ran back to back), each by wall time and by the
    loop's CPU time ("cpu_"): preload's rate against each other variant's ("vs_X"), and each
    extra variant's against glibc's ("X_vs_base": for base_fixed_threshold, the share of the
    malloc settings alone)."""
    out = {}
    for pre, r in (("", rate), ("cpu_", rate.replace("_per_s", "_per_cpu_s"))):
        for k, f in got.items():
            if k == "preload":
                continue
            out[f"{pre}vs_{k}"] = got["preload"][r] / f[r]
            if k != "base":
                out[f"{pre}{k}_vs_base"] = f[r] / got["base"][r]
    return out


def best_of(tries: list[dict], rate: str) -> dict[str, float]:
    """One variant's result in a run of --repeat K tries: its fastest try by wall time (with
    that try's page faults and CPU seconds), and its fastest loop by CPU time. Interference
    on a shared machine only ever slows a try, so the fastest of K is the least disturbed."""
    cpu = rate.replace("_per_s", "_per_cpu_s")
    best = dict(max(tries, key=lambda f: f[rate]))
    best[cpu] = max(f[cpu] for f in tries)
    return best


def run_mix(mix: str, exes, a, all_variants, spec: str, d: Path) -> None:
    variants = [v for v in all_variants if (mix in LARGE_MIXES or v[0] != "preload_nocache")
                and (a.aa or v[0] != "base_again")]
    if a.variants:
        variants = [v for v in variants
                    if v[0] in a.variants or v[0] in ("base", "preload", "base_again")]
    rate, unit = WORDS.get(mix, ("allocs_per_s", "allocs"))
    got_all: dict[str, list[float]] = {name: [] for name, _ in variants} if a.runs else {}
    ratios: dict[str, list[float]] = {}
    counter: dict[str, list[float]] = {name: [] for name, _ in variants}
    usage = {name: {f: [] for f in RUSAGE} for name, _ in variants}
    for i in range(a.runs):
        # rotate which goes first, so drift on a shared machine hits every variant
        order = variants[i % len(variants):] + variants[:i % len(variants)]
        cmd = command(mix, exes, a, 1 + i)
        tries: dict[str, list[dict]] = {name: [] for name, _ in order}
        for _ in range(a.repeat):  # interleaved: A B C A B C ...
            for name, env in order:
                tries[name].append(one(cmd, env))
        got = {name: best_of(t, rate) for name, t in tries.items()}
        for name, f in got.items():
            got_all[name].append(f[rate])
            for u, v in rusage_of(f, rate).items():
                usage[name][u].append(v)
            if f.get("instructions", -1) >= 0:
                counter[name].append(f["instructions"] / f[unit])
        for k, v in paired(got, rate).items():
            ratios.setdefault(k, []).append(v)
        print(json.dumps({"mix": mix, "run": i, **{f"per_s_{k}": f[rate] for k, f in got.items()},
                          "ratio": got["preload"][rate] / got["base"][rate],
                          **({f"tries_per_s_{k}": [f[rate] for f in t] for k, t in tries.items()}
                             if a.repeat > 1 else {}),
                          **{f"{u}_{k}": round(v, 4) for k, f in got.items()
                             for u, v in rusage_of(f, rate).items()}}), flush=True)
    insns, source = {}, ""
    if a.insns in ("auto", "counter") and all(counter.values()) and a.runs:
        insns, source = {k: statistics.median(v) for k, v in counter.items()}, "perf counter"
    elif a.insns == "callgrind" or (a.insns == "auto" and shutil.which("valgrind")):
        # glibc with the library's settings too: the instructions the settings add, apart
        # from the library's code
        pick = [v for v in variants if v[0] in ("base", "base_fixed_threshold", "preload")]
        insns, source = insns_per_op(mix, exes, a, pick, d), "callgrind"
    print(json.dumps(summary(mix, a, spec, got_all, ratios, insns, source, usage)), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7,
                    help="paired runs; each runs every variant once (0: instructions only)")
    ap.add_argument("--mix", action="append", choices=MIXES, help="default: all")
    ap.add_argument("--iters", type=int, default=2_000_000, help="allocations, small mixes")
    ap.add_argument("--large-iters", type=int, default=4000, help="allocations, large mix")
    ap.add_argument("--numpy-steps", type=int, default=1500, help="steps of the numpy mix")
    ap.add_argument("--kv-ops", type=int, default=600_000, help="operations, kvstore mix")
    ap.add_argument("--kv-keys", type=int, default=100_000, help="keys, kvstore mix")
    ap.add_argument("--py-steps", type=int, default=600, help="steps of the python mix")
    ap.add_argument("--large-every", type=int, default=1000,
                    help="with_large: one 4 MiB block every N allocations")
    ap.add_argument("--stripe", default="0:1", help="the stripe the library places with")
    ap.add_argument("--cache", default=None,
                    help="CXLKIT_PRELOAD_CACHE for the preload variant (default: the library's)")
    ap.add_argument("--cache-count", default=None,
                    help="CXLKIT_PRELOAD_CACHE_COUNT for the preload variant")
    ap.add_argument("--variants", action="append",
                    choices=("base_fixed_threshold", "preload_nocache", "none"),
                    help="the extra variants to run (default: base_fixed_threshold for every mix, "
                         "preload_nocache for the large mixes; none: base and preload only, as "
                         "for a sweep of the cache bounds)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="tries of every variant per run, interleaved; each variant's fastest "
                         "counts (1: one try, as a single run of the program)")
    ap.add_argument("--aa", action="store_true",
                    help="run glibc twice per run (base_again): the paired ratio of two "
                         "identical variants, the noise floor of this machine")
    ap.add_argument("--touch-large", choices=("all", "16k"), default="all",
                    help="pages written in each 4 MiB block: all (a program using it) or the "
                         "first 16 KiB (the worst case for the library's per-block calls)")
    ap.add_argument("--insns", choices=("auto", "counter", "callgrind", "off"), default="auto",
                    help="instructions per operation: the programs' hardware counter, else "
                         "(auto) callgrind when valgrind is installed")
    ap.add_argument("--insn-scale", type=float, default=0.05,
                    help="callgrind runs at this fraction of the operation counts (and twice "
                         "it: the difference cancels start-up)")
    a = ap.parse_args()
    if a.repeat < 1:
        ap.error(f"--repeat {a.repeat}: expected at least 1")
    spec, variants = environments(a)
    with tempfile.TemporaryDirectory() as d:
        exes = build(Path(d))
        for mix in a.mix or MIXES:
            run_mix(mix, exes, a, variants, spec, Path(d))


if __name__ == "__main__":
    main()
