"""Adam kernels alone, side by side: cxlkit's fp32 step, DeepSpeed's cpu_adam op (`adam_update`,
what DeepSpeedCPUAdam.step calls, without the optimizer object) and the step's traffic alone
(AdamConfig(traffic_only=True): cxlkit's loop, prefetch and threads reading p, m, v, g and
writing p, m, v, 28 B/param, without the arithmetic: the bandwidth bound of the same access
pattern), over the same four n-param buffers, no forward/backward, no Python optimizer. Every
round runs each implementation once in an order rotated per round; one JSON line with medians,
spreads, and paired ratios (the others' time over cxlkit's in the same round; cxlkit's
bandwidth as a fraction of the traffic kernel's in the same round). One implementation per
process gives `perf stat` its own counters:

    .venv-ds/bin/python bench/adam_kernel_perf.py --impls cxlkit,deepspeed,traffic --size 10M
    perf stat -e instructions,cycles -- .venv-ds/bin/python bench/adam_kernel_perf.py --impls cxlkit

--threads: torch.set_num_threads (DeepSpeed's OpenMP loop) and cxlkit on torch's OpenMP
threads (AdamTeam.openmp, TieredAdamW's default); 1 thread runs cxlkit on the caller.
--model bf16: TieredAdamW's bf16-model step instead (bf16 grads, the bf16 param copy re-read
and written: 30 B/param; DeepSpeed's op has no such step); `cxlkit:LEVEL` runs cxlkit at a
forced SIMD level beside the default one, e.g. the avx512 level's integer bf16 rounding
against avx512bf16's vcvtneps2bf16:

    .venv/bin/python bench/adam_kernel_perf.py --model bf16 --impls cxlkit,cxlkit:avx512,traffic
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time

IMPLS = ("cxlkit", "cxlkit:LEVEL", "deepspeed", "traffic")


def parse_size(s: str) -> int:
    mult = {"K": 10**3, "M": 10**6, "G": 10**9}
    return int(float(s[:-1]) * mult[s[-1]]) if s[-1] in mult else int(s)


def make_steps(impls: list[str], n: int, threads: int, model: str) -> tuple[dict, list]:
    import torch

    import cxlkit
    from cxlkit.train import adam as A

    torch.set_num_threads(threads)
    bf16 = model == "bf16"
    bufs = [cxlkit.alloc(n * 4, thp=True) for _ in range(4 if not bf16 else 3)]
    p, m, v = (torch.from_numpy(b.numpy("float32")) for b in bufs[:3])
    p.fill_(0.02)
    m.zero_()
    v.zero_()
    if bf16:  # [n] bf16 grad and param copy (the copy the master's rounding: nothing re-read)
        bufs.append(cxlkit.alloc(n * 4, thp=True))
        g = torch.from_numpy(bufs[3].numpy("float32")).view(torch.bfloat16)[:n]
        copy = torch.from_numpy(bufs[3].numpy("float32")).view(torch.bfloat16)[n:]
        g.fill_(1e-3)
        copy.copy_(p)
    else:
        g = torch.from_numpy(bufs[3].numpy("float32"))
        g.fill_(1e-3)
        copy = None
    team = A.AdamTeam.openmp() if threads > 1 else None
    t = A.AdamTensor(p, m, v, g, copy)
    steps: dict = {}
    count = [0]
    for impl in impls:
        if impl == "cxlkit" or impl.startswith("cxlkit:"):
            level = impl.partition(":")[2] or None
            cfg = A.AdamConfig(lr=1e-4, simd=level, resync=bf16)

            def run(cfg=cfg) -> None:
                count[0] += 1
                A.step_tensors([t], cfg, count[0], team=team)
        elif impl == "deepspeed":
            if bf16:
                raise ValueError("--impls deepspeed: DeepSpeed's op has no bf16-model step")
            with contextlib.redirect_stdout(sys.stderr):  # its logger writes to stdout
                from deepspeed.ops.adam import DeepSpeedCPUAdam
            q = torch.nn.Parameter(p)
            q.grad = g
            opt = DeepSpeedCPUAdam([q], lr=1e-4, adamw_mode=True)

            def run(opt=opt) -> None:
                count[0] += 1
                opt.ds_opt_adam.adam_update(opt.opt_id, count[0], 1e-4, 0.9, 0.999, 1e-8,
                                            1e-2, True, p, g, m, v)
        elif impl == "traffic":
            tcfg = A.AdamConfig(traffic_only=True, resync=bf16)

            def run(tcfg=tcfg) -> None:  # the values stay as they are
                A.step_tensors([t], tcfg, 1, team=team)
        else:
            raise ValueError(f"--impls: {impl!r} is not one of {', '.join(IMPLS)}")
        steps[impl] = run
    return steps, [bufs, team]


def main() -> None:
    from cxlkit.train import adam as A

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--impls", default="cxlkit,deepspeed,traffic")
    ap.add_argument("--size", default="10M")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--model", choices=("fp32", "bf16"), default="fp32")
    a = ap.parse_args()
    n = parse_size(a.size)
    impls = a.impls.split(",")
    steps, keep = make_steps(impls, n, a.threads, a.model)
    bpp = 30 if a.model == "bf16" else 28
    for f in steps.values():  # warm-up: page faults, lazy state, the op's first call
        f()
    times: dict[str, list[float]] = {k: [] for k in impls}
    for r in range(a.rounds):
        for k in impls[r % len(impls):] + impls[:r % len(impls)]:
            t0 = time.perf_counter()
            steps[k]()
            times[k].append(time.perf_counter() - t0)
    out = {"params": n, "threads": a.threads, "rounds": a.rounds, "model": a.model,
           "simd": A.simd_level(),
           "ms": {k: round(statistics.median(v) * 1e3, 3) for k, v in times.items()},
           "ms_spread": {k: [round(min(v) * 1e3, 3), round(max(v) * 1e3, 3)]
                         for k, v in times.items()},
           "bytes_per_param": bpp,
           "gbs": {k: round(bpp * n / statistics.median(v) / 1e9, 1) for k, v in times.items()}}
    if "cxlkit" in times:
        for k in impls:
            if k != "cxlkit":
                out[f"{k}_over_cxlkit"] = round(statistics.median(
                    o / c for o, c in zip(times[k], times["cxlkit"])), 3)
        if "traffic" in times:  # the step's bandwidth as a fraction of its own pattern's
            out["cxlkit_pct_of_traffic"] = round(100 * statistics.median(
                t / c for t, c in zip(times["traffic"], times["cxlkit"])), 1)
            out["best_pct_of_traffic"] = round(
                100 * min(times["traffic"]) / min(times["cxlkit"]), 1)
    out["loadavg_1m"] = round(os.getloadavg()[0], 1)
    print(json.dumps(out), flush=True)
    del keep


if __name__ == "__main__":
    main()
