"""bench/adam.py — the CPU Adam step: params/s and effective GB/s of cxlkit's kernel for fp32
grads, bf16 grads, and with a bf16 param copy written back, beside torch.optim.AdamW
(fused=True) and, when importable, DeepSpeed's DeepSpeedCPUAdam, and against the
memory-bandwidth bound (bytes per element / copy bandwidth), all measured in the same run.
One JSON line per (size, threads, variant, implementation).

  .venv/bin/python bench/adam.py --sizes 10M,50M,200M --threads 1,2
  .venv/bin/python bench/adam.py --deepspeed-path /tmp/dslib   # DeepSpeed installed there

Each thread count runs in a child with OMP_NUM_THREADS set (DeepSpeed's op takes its
threads from OpenMP). Inside it every repetition times every implementation and every copy
once, round robin in an order rotated per repetition, so a shared machine's noise falls on
all of them alike; figures are medians over the repetitions, with the best repetition beside them
(best_*: on a machine others are loading, the best is the steadier estimate), and *_paired are
medians of per-repetition ratios (against cxlkit's time, or the best copy, of the same round),
which a machine whose load drifts from round to round leaves least disturbed.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

# name -> (grad dtype, copy dtype); bytes per element from cxlkit.train.adam.bytes_per_element
VARIANTS = {"fp32": ("float32", None), "bf16_grads": ("bfloat16", None),
            "fp32+bf16_copy": ("float32", "bfloat16"),
            "bf16_grads+bf16_copy": ("bfloat16", "bfloat16")}


def parse_sizes(text: str) -> list[int]:
    out = []
    for s in text.split(","):
        s = s.strip().upper()
        mult = {"K": 10**3, "M": 10**6, "G": 10**9}.get(s[-1:], 1)
        out.append(int(float(s[:-1] if mult > 1 else s) * mult))
    return out


def cxlkit_runs(n: int, threads: int, simd: str | None, nt: str, thp: bool, keep: list,
                shared: dict) -> dict:
    """{variant: step function} over placed fp32 p, m, v and fp32/bf16 grads; the params,
    grads and copy go into `shared` for the other implementations (their moments are their
    own), which keeps a run within 52 bytes per param of memory (with the bound's 16)."""
    import torch

    import cxlkit
    from cxlkit.train import adam as A

    bufs = ([cxlkit.alloc(n * 4, thp=thp) for _ in range(4)]
            + [cxlkit.alloc(n * 2, thp=thp) for _ in range(2)])
    p, m, v, g = (b.numpy("float32") for b in bufs[:4])
    g16, c16 = bufs[4].numpy("uint16"), bufs[5].numpy("uint16")
    p[:] = 1.0
    m[:] = 0.0
    v[:] = 0.0
    g[:] = np.float32(0.01)
    g16[:] = torch.from_numpy(g).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    cfg = A.AdamConfig(simd=simd, nt_state=nt in ("state", "both"),
                       nt_copy=nt in ("copy", "both"))
    # 1 thread: the calling thread, as torch and DeepSpeed do with one OpenMP thread; a team
    # of one would add a wake-up and a hand-off per step (2-3 % of a 10M-param step here)
    team = A.AdamTeam(threads) if threads > 1 else None
    keep += [bufs, team]
    shared.update(p=torch.from_numpy(p), g=torch.from_numpy(g),
                  g16=torch.from_numpy(g16.view(np.int16)).view(torch.bfloat16),
                  c16=torch.from_numpy(c16.view(np.int16)).view(torch.bfloat16))
    out = {}
    for name, (gdt, cdt) in VARIANTS.items():
        t = A.AdamTensor(p, m, v, g if gdt == "float32" else g16, c16 if cdt else None,
                         grad_dtype=gdt, copy_dtype=cdt)
        step = [0]

        def run(t=t, step=step):
            step[0] += 1
            A.step_tensors([t], cfg, step[0], team=team)

        out[name] = run
    return out


def torch_runs(shared: dict) -> dict:
    """torch.optim.AdamW(fused=True): fp32 as is; bf16 grads upcast into the fp32 grad first
    (it takes one dtype); the bf16 copy as a copy_ after the step."""
    import torch

    p = torch.nn.Parameter(shared["p"])
    p.grad = shared["g"]
    g16, c16 = shared["g16"], shared["c16"]
    opt = torch.optim.AdamW([p], fused=True)

    def upcast():
        p.grad.copy_(g16)
        opt.step()

    def step_copy():
        opt.step()
        c16.copy_(p.detach())

    def upcast_copy():
        upcast()
        c16.copy_(p.detach())

    return {"fp32": opt.step, "bf16_grads": upcast, "fp32+bf16_copy": step_copy,
            "bf16_grads+bf16_copy": upcast_copy}


def deepspeed_runs(shared: dict) -> dict:
    """DeepSpeedCPUAdam (AdamW mode) needs fp32 grads for fp32 params, so bf16 grads are not
    run; the bf16 copy is a copy_ after the step, as ZeRO-Offload does."""
    import contextlib

    import torch

    with contextlib.redirect_stdout(sys.stderr):  # its logger writes to stdout: keep JSON clean
        from deepspeed.ops.adam import DeepSpeedCPUAdam

    p = torch.nn.Parameter(shared["p"])
    p.grad = shared["g"]
    c16 = shared["c16"]
    opt = DeepSpeedCPUAdam([p], adamw_mode=True)

    def step_copy():
        opt.step()
        c16.copy_(p.detach())

    return {"fp32": opt.step, "fp32+bf16_copy": step_copy}


def copy_runs(n: int, threads: int, thp: bool, keep: list) -> dict:
    """The bound's candidates, over Adam's own footprint (four 4n-byte buffers, as p, m, v and
    fp32 g: a smaller one would let the last-level cache serve part of it and flatter the
    bound): cxlkit's native copy kernel (`cxlkit bench memory`, threads pinned), torch copy_
    and glibc memcpy (np.copyto, 1 thread) between two of them, and an in-place multiply over
    all four, which reads and writes the same lines as Adam does. Each returns its GB/s
    (bytes read + bytes written)."""
    import torch

    import cxlkit
    from cxlkit.bench import machine, memory

    bufs = [cxlkit.alloc(n * 4, thp=thp) for _ in range(4)]
    arrays = [b.numpy("float32") for b in bufs]
    for x in arrays:
        x[:] = 1.0
    tensors = [torch.from_numpy(x) for x in arrays]
    keep += [bufs, arrays, tensors]
    a, b = bufs[:2]
    src, dst = arrays[:2]
    ts, td = tensors[:2]
    cpus = list(machine.allowed_cpus())[:threads]
    moved = 2 * n * 4

    def timed(fn, nbytes):
        def run():
            t0 = time.perf_counter()
            fn()
            return nbytes / (time.perf_counter() - t0) / 1e9
        return run

    def inplace() -> None:
        for x in tensors:
            x.mul_(1.0)

    # cxlkit's kernel times itself (after a calibration pass of its own)
    out = {"cxlkit_copy": lambda: memory.bandwidth(b, a, "copy", threads, cpus, target_s=0.0,
                                                   reps=1)[0] / 1e9,
           "torch_copy": timed(lambda: td.copy_(ts), moved),
           "torch_inplace_mul": timed(inplace, 4 * moved)}
    if threads == 1:
        out["memcpy"] = timed(lambda: np.copyto(dst, src), moved)
    return out


def last_level_cache_bytes() -> int:
    """The largest cache of CPU 0 (sysfs), 32 MiB when sysfs does not say."""
    import glob

    best = 0
    for d in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*"):
        try:
            with open(os.path.join(d, "size")) as f:
                s = f.read().strip()
        except OSError:
            continue
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1:], 1)
        best = max(best, int(s.rstrip("KMG")) * mult)
    return best or 32 << 20


def scrubber(keep: list):
    """Reads a buffer twice the last-level cache before each timed task: a task leaves up to
    a cache's worth of dirty lines behind, and the next one would pay for writing them back
    (about 10 % of a 10M-param step here), whoever it is. Untimed."""
    import cxlkit

    buf = cxlkit.alloc(2 * last_level_cache_bytes(), thp=True)
    view = buf.numpy("uint64")
    keep += [buf, view]
    return lambda: int(view.sum())


def worker(a: argparse.Namespace) -> None:
    import torch

    from cxlkit.train import adam as A

    threads = int(os.environ.get("OMP_NUM_THREADS", "1"))
    torch.set_num_threads(threads)
    simd = A.simd_level() if a.simd is None else a.simd
    thp = a.thp == "on"
    for n in parse_sizes(a.sizes):
        keep: list = []
        shared: dict = {}
        impls = {"cxlkit": cxlkit_runs(n, threads, a.simd, a.nt, thp, keep, shared)}
        if not a.no_torch:
            impls["torch_fused"] = torch_runs(shared)
        ds_note = None
        if not a.no_deepspeed:
            try:
                impls["deepspeed"] = deepspeed_runs(shared)
            except Exception as e:  # noqa: BLE001 (any failure: report it, run the rest)
                ds_note = f"{type(e).__name__}: {e}"
        copies = copy_runs(n, threads, thp, keep)
        times: dict[tuple[str, str], list[float]] = {}
        gbps: dict[str, list[float]] = {k: [] for k in copies}
        tasks = [(impl, variant, fn) for impl, runs in impls.items()
                 for variant, fn in runs.items()] + [("copy", k, fn) for k, fn in copies.items()]
        scrub = scrubber(keep) if a.scrub else (lambda: None)
        for rep in range(a.reps + 1):  # repetition 0 warms (page faults, thread start)
            # rotate the order, so that no task always follows the same one
            for impl, name, fn in tasks[rep % len(tasks):] + tasks[:rep % len(tasks)]:
                scrub()
                t0 = time.perf_counter()
                g = fn()
                dt = time.perf_counter() - t0
                if rep and impl == "copy":
                    gbps[name].append(g)
                elif rep:
                    times.setdefault((impl, name), []).append(dt)
        bw = {k: round(statistics.median(v), 2) for k, v in gbps.items()}
        bw_best = {k: round(max(v), 2) for k, v in gbps.items()}
        bound_gbps = max(bw.values())
        # the same repetition's best copy: the bound under the machine's load of that moment
        rep_bound = [max(gbps[k][r] for k in gbps) for r in range(a.reps)]
        for variant, (gdt, cdt) in VARIANTS.items():
            nbytes = A.bytes_per_element(gdt, cdt)
            bound = bound_gbps * 1e9 / nbytes
            ours = times[("cxlkit", variant)]
            ref = statistics.median(ours)
            for impl in impls:
                if (impl, variant) not in times:
                    continue
                ts = times[(impl, variant)]
                s = statistics.median(ts)
                best = min(ts)
                row = {"bench": "adam", "params": n, "threads": threads, "variant": variant,
                       "impl": impl, "seconds": round(s, 6), "params_per_s": round(n / s),
                       "best_params_per_s": round(n / best),
                       "gbps": round(n * nbytes / s / 1e9, 2), "bytes_per_param": nbytes,
                       "pct_of_bound": round(100 * n / s / bound, 1),
                       # medians of per-repetition ratios: each pair ran within one round
                       "pct_of_bound_paired": round(statistics.median(
                           100 * n * nbytes / t_ / 1e9 / b for t_, b in zip(ts, rep_bound)), 1),
                       "cxlkit_speedup": round(s / ref, 3),
                       "cxlkit_speedup_paired": round(statistics.median(
                           x / y for x, y in zip(ts, ours)), 3),
                       "cxlkit_speedup_best": round(best / min(ours), 3)}
                if impl == "cxlkit":
                    row.update(simd=simd, nt=a.nt, thp=a.thp, scrub=a.scrub,
                               omp_wait_policy=os.environ.get("OMP_WAIT_POLICY", "unset"),
                               copy_gbps=bw, copy_gbps_best=bw_best,
                               bound_params_per_s=round(bound), reps=a.reps,
                               best_pct_of_best_bound=round(
                                   100 * n / best / (max(bw_best.values()) * 1e9 / nbytes), 1))
                print(json.dumps(row), flush=True)
        if ds_note is not None:
            print(json.dumps({"bench": "adam", "params": n, "threads": threads,
                              "impl": "deepspeed", "unavailable": ds_note}), flush=True)
        del impls, copies, keep, shared


def summary(paths: list[str]) -> str:
    """A markdown table of the cxlkit rows of several runs' JSON lines: medians over the runs
    of the paired figures, with each run's value beside them."""
    runs = []
    for path in paths:
        with open(path) as f:
            runs.append([json.loads(x) for x in f if x.startswith("{")])

    def row(rs: list, key: tuple, impl: str) -> dict | None:
        return next((r for r in rs if (r.get("params"), r.get("threads"), r.get("variant"))
                     == key and r.get("impl") == impl), None)

    out = ["| params | threads | variant | cxlkit GB/s | % of bound | vs DeepSpeed | vs torch "
           "fused | % of bound per run | vs DeepSpeed per run |", "|---" * 9 + "|"]
    for r0 in runs[0]:
        if r0.get("impl") != "cxlkit":
            continue
        key = (r0["params"], r0["threads"], r0["variant"])
        ours = [row(rs, key, "cxlkit") for rs in runs]
        pct = [r["pct_of_bound_paired"] for r in ours if r]
        ds = [r["cxlkit_speedup_paired"] for rs in runs if (r := row(rs, key, "deepspeed"))]
        th = [r["cxlkit_speedup_paired"] for rs in runs if (r := row(rs, key, "torch_fused"))]

        def med(xs: list, fmt: str = "{:.2f}") -> str:
            return fmt.format(statistics.median(xs)) if xs else "-"
        out.append(f"| {key[0] / 1e6:g}M | {key[1]} | {key[2]} | "
                   f"{med([r['gbps'] for r in ours if r], '{:.1f}')} | {med(pct, '{:.1f}')} | "
                   f"{med(ds)} | {med(th)} | {', '.join(f'{x:.0f}' for x in pct)} | "
                   f"{', '.join(f'{x:.2f}' for x in ds) or '-'} |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10M,50M,200M", help="params per step, e.g. 10M,50M")
    ap.add_argument("--threads", default="1,2", help="thread counts")
    ap.add_argument("--reps", type=int, default=5, help="timed repetitions (medians)")
    ap.add_argument("--simd", default=None, help="force a level: scalar, avx2, avx512, avx512bf16")
    ap.add_argument("--nt", choices=("none", "state", "copy", "both"), default="copy",
                    help="non-temporal stores for the state, the copy (default, as TieredAdamW "
                    "does for large models), or both")
    ap.add_argument("--thp", choices=("on", "off"), default="on",
                    help="transparent huge pages for every buffer: cxlkit's (alloc thp=True), "
                    "the shared params and grads, the copies of the bound, and torch's own "
                    "(THP_MEM_ALLOC_ENABLE=1, so torch's and DeepSpeed's moments get them too)")
    ap.add_argument("--omp-wait-policy", choices=("passive", "default"), default="passive",
                    help="OMP_WAIT_POLICY for the run: passive (default) makes the OpenMP threads "
                    "of torch and DeepSpeed sleep when idle; 'default' leaves libgomp's spin "
                    "after every parallel region, which takes the cores cxlkit's pinned team "
                    "needs for its next step (docs/train.md has the A/B)")
    ap.add_argument("--no-scrub", dest="scrub", action="store_false",
                    help="do not read a 2x last-level-cache buffer before each timed task")
    ap.add_argument("--no-torch", action="store_true", help="skip torch.optim.AdamW(fused)")
    ap.add_argument("--deepspeed-path", default=None,
                    help="a directory holding deepspeed (prepended to the child's PYTHONPATH)")
    ap.add_argument("--no-deepspeed", action="store_true", help="skip DeepSpeedCPUAdam")
    ap.add_argument("--summary", nargs="+", metavar="RUN.jsonl",
                    help="print a markdown table of saved runs (medians over them) and exit")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.summary:
        print(summary(a.summary))
        return
    if a.worker:
        worker(a)
        return
    for threads in [int(t) for t in a.threads.split(",")]:
        env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
        if a.omp_wait_policy == "passive":
            env["OMP_WAIT_POLICY"] = "PASSIVE"
        if a.thp == "on":
            env["THP_MEM_ALLOC_ENABLE"] = "1"  # torch's CPU allocator: MADV_HUGEPAGE >= 2 MiB
        if a.deepspeed_path:
            env["PYTHONPATH"] = a.deepspeed_path + os.pathsep + env.get("PYTHONPATH", "")
        env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")  # ninja
        r = subprocess.run([sys.executable, __file__, "--worker"] + sys.argv[1:], env=env,
                           timeout=3600)
        if r.returncode != 0:
            sys.exit(r.returncode)


if __name__ == "__main__":
    main()
