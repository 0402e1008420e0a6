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
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time

IMPLS = ("cxlkit", "deepspeed", "traffic")


def parse_size(s: str) -> int:
    mult = {"K": 10**3, "M": 10**6, "G": 10**9}
    return int(float(s[:-1]) * mult[s[-1]]) if s[-1] in mult else int(s)


def make_steps(impls: list[str], n: int, threads: int) -> tuple[dict, list]:
    import torch

    import cxlkit
    from cxlkit.train import adam as A

    torch.set_num_threads(threads)
    bufs = [cxlkit.alloc(n * 4, thp=True) for _ in range(4)]
    p, m, v, g = (torch.from_numpy(b.numpy("float32")) for b in bufs)
    p.fill_(0.02)
    m.zero_()
    v.zero_()
    g.fill_(1e-3)
    team = A.AdamTeam.openmp() if threads > 1 else None
    t = A.AdamTensor(p, m, v, g)
    steps: dict = {}
    count = [0]
    for impl in impls:
        if impl == "cxlkit":
            cfg = A.AdamConfig(lr=1e-4)

            def run(cfg=cfg) -> None:
                count[0] += 1
                A.step_tensors([t], cfg, count[0], team=team)
        elif impl == "deepspeed":
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
            tcfg = A.AdamConfig(traffic_only=True)

            def run(tcfg=tcfg) -> None:  # the values stay as they are
                A.step_tensors([t], tcfg, 1, team=team)
        else:
            raise ValueError(f"--impls: {impl!r} is not one of {', '.join(IMPLS)}")
        steps[impl] = run
    return steps, [bufs, team]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--impls", default="cxlkit,deepspeed,traffic")
    ap.add_argument("--size", default="10M")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=21)
    a = ap.parse_args()
    n = parse_size(a.size)
    impls = a.impls.split(",")
    steps, keep = make_steps(impls, n, a.threads)
    for f in steps.values():  # warm-up: page faults, lazy state, the op's first call
        f()
    times: dict[str, list[float]] = {k: [] for k in impls}
    for r in range(a.rounds):
        for k in impls[r % len(impls):] + impls[:r % len(impls)]:
            t0 = time.perf_counter()
            steps[k]()
            times[k].append(time.perf_counter() - t0)
    out = {"params": n, "threads": a.threads, "rounds": a.rounds,
           "ms": {k: round(statistics.median(v) * 1e3, 3) for k, v in times.items()},
           "ms_spread": {k: [round(min(v) * 1e3, 3), round(max(v) * 1e3, 3)]
                         for k, v in times.items()},
           "gbs_28B": {k: round(28 * n / statistics.median(v) / 1e9, 1)
                       for k, v in times.items()}}
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
