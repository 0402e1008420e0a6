"""Where an optimizer step's time goes, as a user runs it (a torch forward/backward right
before every step): TieredAdamW's whole step, the native call inside it (the rest is Python:
per-param checks, the kernel's tuples), torch.optim.AdamW(fused=True) on the same param, and
the fixed cost of each (the same optimizers over a tiny param: Python plus waking the threads).
Rounds alternate the implementations; one JSON line with medians and [min, max] in ms.

    .venv/bin/python bench/adam_phases.py --size 10M --threads 2 --reps 21
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time


def parse_size(s: str) -> int:
    mult = {"K": 10**3, "M": 10**6, "G": 10**9}
    return int(float(s[:-1]) * mult[s[-1]]) if s[-1] in mult else int(s)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="10M")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=21)
    ap.add_argument("--tensors", type=int, default=1,
                    help="split the params over this many tensors (a model's per-param costs)")
    ap.add_argument("--team", default="auto", help="TieredAdamW's team= ('auto', 'openmp', "
                    "'none' for the calling thread, or a thread count for a pinned team)")
    ap.add_argument("--no-fwd", dest="fwd", action="store_false",
                    help="leave out the forward/backward between steps")
    a = ap.parse_args()
    if a.team not in ("none", "auto", "openmp") and not a.team.isdigit():
        ap.error(f"--team {a.team!r}: expected auto, openmp, none or a thread count")
    n = parse_size(a.size)
    import torch

    from cxlkit.integrations.torch import TieredAdamW
    from cxlkit.train import adam as A

    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    small = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(),
                                torch.nn.Linear(2048, 512))
    x = torch.randn(64, 512)

    def fwd_bwd() -> None:
        if a.fwd:
            small.zero_grad()
            small(x).square().mean().backward()

    team = {"none": None, "auto": "auto", "openmp": "openmp"}.get(a.team)
    if a.team not in ("none", "auto", "openmp"):
        team = int(a.team)

    def make(k: int, parts: int = 1) -> list[torch.Tensor]:
        out = []
        for j in range(parts):
            p = torch.nn.Parameter(torch.randn(k // parts + (j < k % parts)) * 0.02)
            p.grad = torch.randn(p.numel()) * 1e-3
            out.append(p)
        return out

    big, tiny = make(n, a.tensors), make(1000)
    native: list[float] = []
    raw = A.step_raw

    def timed_raw(*args, **kw):  # the native call alone, inside TieredAdamW.step
        t0 = time.perf_counter()
        r = raw(*args, **kw)
        native.append(time.perf_counter() - t0)
        return r

    A.step_raw = timed_raw
    tasks = {
        "cxlkit": TieredAdamW(big, lr=1e-4, team=team).step,
        "torch_fused": torch.optim.AdamW(big, lr=1e-4, fused=True).step,
        # team="openmp" on the tiny param: the fixed cost of a region (auto would stay on
        # the calling thread below 1M params)
        "cxlkit_tiny": TieredAdamW(tiny, lr=1e-4,
                                   team="openmp" if team == "auto" else team).step,
        "torch_fused_tiny": torch.optim.AdamW(tiny, lr=1e-4, fused=True).step,
    }
    names = list(tasks)
    times: dict[str, list[float]] = {k: [] for k in names}
    for k in names:
        fwd_bwd()
        tasks[k]()
    native.clear()
    for r in range(a.reps):
        for k in names[r % len(names):] + names[:r % len(names)]:
            fwd_bwd()
            t0 = time.perf_counter()
            tasks[k]()
            dt = time.perf_counter() - t0
            times[k].append(dt)
            if k == "cxlkit":
                times.setdefault("cxlkit_native", []).append(native[-1])
            native.clear()
    times["cxlkit_python"] = [t - s for t, s in zip(times["cxlkit"], times["cxlkit_native"])]
    out = {"size": a.size, "params": n, "tensors": a.tensors, "threads": a.threads,
           "team": a.team, "fwd": a.fwd,
           "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "default"), "reps": a.reps,
           "ms": {k: round(statistics.median(v) * 1e3, 3) for k, v in times.items()},
           "ms_spread": {k: [round(min(v) * 1e3, 3), round(max(v) * 1e3, 3)]
                         for k, v in times.items()},
           "vs_torch_fused": round(statistics.median(
               f / c for f, c in zip(times["torch_fused"], times["cxlkit"])), 3),
           "cxlkit_gbs": round(statistics.median(28 * n / t for t in times["cxlkit"]) / 1e9, 1),
           "loadavg_1m": round(os.getloadavg()[0], 1)}
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
