"""bench/adam.py — the CPU Adam step: params/s and effective GB/s of cxlkit's kernel for fp32
grads, bf16 grads, and with a bf16 param copy written back, beside torch.optim.AdamW
(fused=True) and, when importable, DeepSpeed's DeepSpeedCPUAdam, all in the same run, and
against the memory-bandwidth bound (bytes per element / copy bandwidth measured here).
One JSON line per (size, threads, variant, implementation).

  .venv/bin/python bench/adam.py --sizes 10M,50M,200M --threads 1,2
  .venv/bin/python bench/adam.py --deepspeed-path /tmp/dslib   # DeepSpeed installed there
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

# (name, grad dtype, copy dtype): bytes per element from cxlkit.train.adam.bytes_per_element
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


def median_time(fn, reps: int) -> float:
    fn()  # warm: page faults, thread start
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def _native_copy(dst, src, threads: int, reps: int) -> float:
    """cxlkit's own copy kernel (cxlkit.bench.memory, AVX streaming loads and stores, threads
    pinned), read + write GB/s, median of reps."""
    from cxlkit.bench import machine, memory

    cpus = list(machine.allowed_cpus())[:threads]
    runs = memory.bandwidth(dst, src, "copy", threads, cpus, target_s=0.2, reps=reps)
    return statistics.median(runs) / 1e9


def copy_bandwidth(footprint: int, threads: int, reps: int) -> dict[str, float]:
    """Read+write GB/s of streaming copies whose footprint equals the Adam step's (so neither
    gets more help from the cache); the best is the bound. cxlkit_copy is the project's
    native copy benchmark (cxlkit bench memory), np.copyto is glibc memcpy
    (non-temporal stores past a size); torch copy_ and the in-place multiply use ordinary
    stores, the in-place one reading and writing the same lines as Adam does."""
    import torch

    import cxlkit

    torch.set_num_threads(threads)
    half = footprint // 8 * 4  # bytes per array, a multiple of 4
    out = {}
    with cxlkit.alloc(half) as a, cxlkit.alloc(half) as b:
        src, dst = a.numpy("float32"), b.numpy("float32")
        src[:] = 1.0
        ts, td = torch.from_numpy(src), torch.from_numpy(dst)
        out["torch_copy"] = 2 * half / median_time(lambda: td.copy_(ts), reps) / 1e9
        out["cxlkit_copy"] = _native_copy(b, a, threads, reps)
        if threads == 1:
            out["memcpy"] = 2 * half / median_time(lambda: np.copyto(dst, src), reps) / 1e9
        del src, dst, ts, td
    with cxlkit.alloc(2 * half) as a:
        x = a.numpy("float32")
        x[:] = 1.0
        tx = torch.from_numpy(x)
        out["torch_inplace_mul"] = 2 * 2 * half / median_time(lambda: tx.mul_(1.0), reps) / 1e9
        del x, tx
    return out


def bench_cxlkit(n: int, threads: int, reps: int, simd: str | None, nt: str) -> dict[str, float]:
    import torch

    import cxlkit
    from cxlkit.train import adam as A

    bufs = {k: cxlkit.alloc(n * 4) for k in ("p", "m", "v", "g")}
    b16 = {k: cxlkit.alloc(n * 2) for k in ("g", "c")}
    p, m, v, g = (bufs[k].numpy("float32") for k in "pmvg")
    g16, c16 = b16["g"].numpy("uint16"), b16["c"].numpy("uint16")
    p[:] = 1.0
    m[:] = 0.0
    v[:] = 0.0
    g[:] = np.float32(0.01)
    g16[:] = torch.from_numpy(g).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    cfg = A.AdamConfig(simd=simd, nt_state=nt in ("state", "both"),
                       nt_copy=nt in ("copy", "both"))
    out = {}
    with A.AdamTeam(threads) as team:
        for name, (gdt, cdt) in VARIANTS.items():
            t = A.AdamTensor(p, m, v, g if gdt == "float32" else g16,
                             c16 if cdt else None, grad_dtype=gdt,
                             copy_dtype=cdt)
            step = [0]

            def run():
                step[0] += 1
                A.step_tensors([t], cfg, step[0], team=team)

            out[name] = median_time(run, reps)
    return out  # the buffers are unmapped when the last view goes with this frame


def bench_torch(n: int, threads: int, reps: int) -> dict[str, float]:
    """torch.optim.AdamW(fused=True): fp32 as is; bf16 grads upcast first (it needs one
    dtype); the bf16 copy as a separate copy_ after the step."""
    import torch

    torch.set_num_threads(threads)
    p = torch.nn.Parameter(torch.ones(n))
    p.grad = torch.full((n,), 0.01)
    g16 = p.grad.to(torch.bfloat16)
    c16 = torch.empty(n, dtype=torch.bfloat16)
    opt = torch.optim.AdamW([p], fused=True)
    out = {"fp32": median_time(opt.step, reps)}

    def upcast_step():
        p.grad.copy_(g16)
        opt.step()

    def step_copy():
        opt.step()
        c16.copy_(p.detach())

    def upcast_step_copy():
        upcast_step()
        c16.copy_(p.detach())

    out["bf16_grads"] = median_time(upcast_step, reps)
    out["fp32+bf16_copy"] = median_time(step_copy, reps)
    out["bf16_grads+bf16_copy"] = median_time(upcast_step_copy, reps)
    return out


def bench_deepspeed_worker(n: int, reps: int) -> dict[str, float]:
    """Runs in a child with OMP_NUM_THREADS set (DeepSpeed's op takes its threads from
    OpenMP). It needs fp32 grads for fp32 params, so bf16 grads are not measured; the bf16
    copy is a separate copy_ after the step, as ZeRO-Offload does."""
    import torch
    from deepspeed.ops.adam import DeepSpeedCPUAdam

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    p = torch.nn.Parameter(torch.ones(n))
    p.grad = torch.full((n,), 0.01)
    c16 = torch.empty(n, dtype=torch.bfloat16)
    opt = DeepSpeedCPUAdam([p], adamw_mode=True)

    def step_copy():
        opt.step()
        c16.copy_(p.detach())

    return {"fp32": median_time(opt.step, reps), "fp32+bf16_copy": median_time(step_copy, reps)}


def bench_deepspeed(n: int, threads: int, reps: int, path: str | None) -> dict[str, float] | str:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    if path:
        env["PYTHONPATH"] = path + os.pathsep + env.get("PYTHONPATH", "")
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")  # ninja
    r = subprocess.run([sys.executable, __file__, "--ds-worker", str(n), "--reps", str(reps)],
                       capture_output=True, text=True, env=env, timeout=1800)
    if r.returncode != 0:
        return (r.stderr.strip().splitlines() or ["failed"])[-1]
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sizes", default="10M,50M,200M", help="params per step, e.g. 10M,50M")
    ap.add_argument("--threads", default="1,2", help="thread counts")
    ap.add_argument("--reps", type=int, default=5, help="timed steps per figure (median)")
    ap.add_argument("--simd", default=None, help="force a level: scalar, avx2, avx512")
    ap.add_argument("--nt", choices=("none", "state", "copy", "both"), default="none",
                    help="non-temporal stores for the state, the copy, or both")
    ap.add_argument("--no-torch", action="store_true", help="skip torch.optim.AdamW(fused)")
    ap.add_argument("--deepspeed-path", default=None,
                    help="a directory holding deepspeed (prepended to PYTHONPATH of the child)")
    ap.add_argument("--no-deepspeed", action="store_true", help="skip DeepSpeedCPUAdam")
    ap.add_argument("--ds-worker", type=int, default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.ds_worker is not None:
        print(json.dumps(bench_deepspeed_worker(a.ds_worker, a.reps)))
        return

    from cxlkit.train import adam as A

    simd = A.simd_level() if a.simd is None else a.simd
    for n in parse_sizes(a.sizes):
        for threads in [int(t) for t in a.threads.split(",")]:
            # The copies run right before and right after the kernel (p, m, v and the fp32
            # grad: the same footprint) and the best of them is the bound, so a shared
            # machine's noise does not hand the kernel a low bar.
            bw = copy_bandwidth(16 * n, threads, a.reps)
            results = {"cxlkit": bench_cxlkit(n, threads, a.reps, a.simd, a.nt)}
            after = copy_bandwidth(16 * n, threads, a.reps)
            bw = {k: max(v, after[k]) for k, v in bw.items()}
            bound_gbps = max(bw.values())
            if not a.no_torch:
                results["torch_fused"] = bench_torch(n, threads, a.reps)
            ds_note = None
            if not a.no_deepspeed:
                ds = bench_deepspeed(n, threads, a.reps, a.deepspeed_path)
                if isinstance(ds, str):
                    ds_note = ds
                else:
                    results["deepspeed"] = ds
            for variant, (gdt, cdt) in VARIANTS.items():
                nbytes = A.bytes_per_element(gdt, cdt)
                bound = bound_gbps * 1e9 / nbytes
                ref = results["cxlkit"][variant]
                for impl, times in results.items():
                    if variant not in times:
                        continue
                    s = times[variant]
                    row = {"bench": "adam", "params": n, "threads": threads, "variant": variant,
                           "impl": impl, "seconds": round(s, 6),
                           "params_per_s": round(n / s), "gbps": round(n * nbytes / s / 1e9, 2),
                           "bytes_per_param": nbytes, "pct_of_bound": round(100 * n / s / bound, 1)}
                    row["cxlkit_speedup"] = round(s / ref, 3)
                    if impl == "cxlkit":
                        row["simd"] = simd
                        row["nt"] = a.nt
                        row["copy_gbps"] = {k: round(v, 2) for k, v in bw.items()}
                        row["bound_params_per_s"] = round(bound)
                    print(json.dumps(row), flush=True)
            if ds_note is not None:
                print(json.dumps({"bench": "adam", "params": n, "threads": threads,
                                  "impl": "deepspeed", "unavailable": ds_note}), flush=True)


if __name__ == "__main__":
    main()
