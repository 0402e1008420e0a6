"""Where the end-to-end step loses to its bound: one TieredAdamW built as bench/adam_e2e.py
builds it (own param, the shared grad), and the same kernel reached in several ways, each
paired with the bound reached the same way, timed in rounds in a rotated order:

    kern / traf     A.step_raw on the optimizer's own kernel arguments, team and config
                    (the step's bookkeeping left out), the step and its traffic kernel
    kern0 / traf0   the same on the calling thread (no team: what bench/adam_kernel_perf.py
                    times at one thread)
    step / tstep    TieredAdamW.step() and TieredAdamW.traffic_step() (what adam_e2e times)

A `fb:` prefix runs the forward/backward of adam_e2e's small MLP right before the task (as
adam_e2e does before every task); without it the task follows the previous one directly.
--thp-user puts the grad and the model's param (the arrays the optimizer does not own) in
2 MiB-aligned MADV_HUGEPAGE buffers, as the optimizer's own moments are; without it they are
torch's (4 KiB pages unless THP_MEM_ALLOC_ENABLE=1; an fp32 param of THP_MOVE_BYTES or more
TieredAdamW moves into its own huge-page buffer either way). One JSON line: medians, spreads and per
pair the bound's time over the step's in the same round (pct), median over rounds.

    .venv-ds/bin/python bench/adam_gap.py --size 10M --threads 1 --model bf16 --rounds 21
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time

PAIRS = (("kern", "traf"), ("kern0", "traf0"), ("step", "tstep"))


def parse_size(s: str) -> int:
    mult = {"K": 10**3, "M": 10**6, "G": 10**9}
    return int(float(s[:-1]) * mult[s[-1]]) if s[-1] in mult else int(s)


def build(n: int, threads: int, model: str, thp_user: bool) -> tuple[dict, object, list]:
    import torch

    import cxlkit
    from cxlkit.integrations.torch import TieredAdamW
    from cxlkit.train import adam as A

    torch.set_num_threads(threads)
    dt = torch.bfloat16 if model == "bf16" else torch.float32
    torch.manual_seed(0)
    small = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(),
                                torch.nn.Linear(2048, 512))
    x = torch.randn(64, 512)

    def fwd_bwd() -> None:
        small.zero_grad()
        small(x).square().mean().backward()

    keep: list = []

    def tensor(init: torch.Tensor) -> torch.Tensor:
        if not thp_user:
            return init.clone()
        buf = cxlkit.alloc(max(init.numel() * init.element_size(), 1), thp=True)
        keep.append(buf)
        t = torch.frombuffer(buf, dtype=torch.uint8)[:init.numel() * init.element_size()]
        t = t.view(init.dtype).view(init.shape)
        t.copy_(init)
        return t

    p = torch.nn.Parameter(tensor((torch.randn(n) * 0.02).to(dt)))
    p.grad = tensor((torch.randn(n) * 1e-3).to(dt))
    opt = TieredAdamW([p], lr=1e-4)
    opt.step()  # lazy team, config cache
    group = opt.param_groups[0]
    args = [opt._kernel_args(p)[0]]
    cfg = opt._config(group)
    import dataclasses
    tcfg = dataclasses.replace(cfg, traffic_only=True)
    team = opt._auto_team()
    count = [10]

    def kern(team=team) -> None:
        count[0] += 1
        A.step_raw(args, cfg, count[0], team=team)

    tasks = {"kern": kern, "traf": lambda: A.step_raw(args, tcfg, 1, team=team),
             "kern0": lambda: kern(None), "traf0": lambda: A.step_raw(args, tcfg, 1),
             "step": opt.step, "tstep": opt.traffic_step}
    keep += [opt, small, p]
    return tasks, fwd_bwd, keep


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="10M")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--model", choices=("fp32", "bf16"), default="bf16")
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--tasks", default="kern,traf,kern0,traf0,step,tstep,"
                    "fb:kern,fb:traf,fb:kern0,fb:traf0,fb:step,fb:tstep")
    ap.add_argument("--thp-user", action="store_true",
                    help="grad and param in MADV_HUGEPAGE buffers (not torch's)")
    a = ap.parse_args()
    n = parse_size(a.size)
    names = a.tasks.split(",")
    tasks, fwd_bwd, keep = build(n, a.threads, a.model, a.thp_user)
    for k in names:
        if k.removeprefix("fb:") not in tasks:
            raise SystemExit(f"--tasks: {k!r} is not one of {', '.join(tasks)} (fb: prefix)")
    times: dict[str, list[float]] = {k: [] for k in names}
    for k in names:  # warm-up
        fwd_bwd()
        tasks[k.removeprefix("fb:")]()
    for r in range(a.rounds):
        for k in names[r % len(names):] + names[:r % len(names)]:
            f = tasks[k.removeprefix("fb:")]
            if k.startswith("fb:"):
                fwd_bwd()
            t0 = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t0)
    bpp = 30 if a.model == "bf16" else 28
    out = {"params": n, "threads": a.threads, "model": a.model, "rounds": a.rounds,
           "thp_user": a.thp_user, "thp_mem_alloc": os.environ.get("THP_MEM_ALLOC_ENABLE"),
           "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "default"),
           "ms": {k: round(statistics.median(v) * 1e3, 3) for k, v in times.items()},
           "ms_spread": {k: [round(min(v) * 1e3, 3), round(max(v) * 1e3, 3)]
                         for k, v in times.items()},
           "gbs": {k: round(bpp * n / statistics.median(v) / 1e9, 1) for k, v in times.items()},
           "pct": {}}
    for pre in ("", "fb:"):
        for s, b in PAIRS:
            if pre + s in times and pre + b in times:
                out["pct"][pre + s] = round(100 * statistics.median(
                    tb / ts for tb, ts in zip(times[pre + b], times[pre + s])), 1)
    out["loadavg_1m"] = round(os.getloadavg()[0], 1)
    print(json.dumps(out), flush=True)
    del keep


if __name__ == "__main__":
    main()
