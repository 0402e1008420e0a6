"""bench/ds_parity.py — how closely ZeRO-Offload with CxlkitCPUAdam trains like DeepSpeed's own
DeepSpeedCPUAdam, and which of the two is nearer exact Adam. Runs in .venv-ds (make
deepspeed-env) with DS_ACCELERATOR=cpu, a gloo world of one:

  DS_ACCELERATOR=cpu .venv-ds/bin/python bench/ds_parity.py --stage 3 --steps 20

Trains the small bf16 model of tests/test_deepspeed.py with each optimizer for --steps steps
(same seed, same batches), and, inside each run, replays every step's fp32 gradient partition
through Adam's moment update in float64. Prints one JSON line: the losses of both runs, the
largest loss difference (and at step 5), and per optimizer the relative error of its
exp_avg_sq against the float64 reference (median, min, max, the share of elements below it).
Raw output goes where -o says (default build/ds_parity.json)."""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np


def world_of_one(deepspeed) -> None:
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
    for k, v in (("RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0")):
        os.environ.setdefault(k, v)
    deepspeed.init_distributed(dist_backend="gloo")


class Float64Moments:
    """Adam's second moment of every optimizer param in float64, fed the grads the optimizer
    steps on (its step is wrapped, so ZeRO calls it as it calls the original). The params are
    kept as seen at each step: ZeRO-3 puts a sub-group's partition into the param group only
    for the length of its step."""

    def __init__(self, opt) -> None:
        self.opt, self.v, self.params = opt, {}, {}
        step = opt.step

        def wrapped(*a, **k):
            self.record()
            return step(*a, **k)
        opt.step = wrapped

    def record(self) -> None:
        for group in self.opt.param_groups:
            beta2 = group["betas"][1]
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = p.grad.detach().double().numpy().ravel()
                v = self.v.get(id(p), np.zeros_like(g))
                self.v[id(p)] = beta2 * v + (1.0 - beta2) * g * g
                self.params[id(p)] = p

    def errors(self) -> dict[str, float]:
        rel = []
        for key, p in self.params.items():
            got = self.opt.state[p]["exp_avg_sq"].detach().double().numpy().ravel()
            ref = self.v[key]
            keep = ref > 0
            rel.append(got[keep] / ref[keep] - 1.0)
        r = np.concatenate(rel)
        return {"elements": int(r.size), "median_rel": float(np.median(r)),
                "min_rel": float(r.min()), "max_rel": float(r.max()),
                "share_below": float((r < 0).mean())}


def run(deepspeed, torch, opt_cls, stage: int, steps: int) -> tuple[list[float], dict]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.GELU(), torch.nn.Linear(64, 4))
    opt = opt_cls(model.parameters(), lr=1e-3)
    moments = Float64Moments(opt)
    config = {"train_micro_batch_size_per_gpu": 8, "bf16": {"enabled": True},
              "zero_optimization": {"stage": stage, "offload_optimizer": {"device": "cpu"}}}
    engine, *_ = deepspeed.initialize(model=model, optimizer=opt, config=config)
    g = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(steps):
        x = torch.randn(8, 16, generator=g).bfloat16()
        y = torch.randn(8, 4, generator=g).bfloat16()
        loss = ((engine(x) - y).float() ** 2).mean()
        engine.backward(loss)
        engine.step()
        losses.append(loss.item())
    return losses, moments.errors()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stage", type=int, default=3, choices=(1, 2, 3))
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("-o", "--output", default="build/ds_parity.json")
    a = ap.parse_args(argv)
    if os.environ.get("DS_ACCELERATOR") != "cpu":
        print("ds_parity: run with DS_ACCELERATOR=cpu in .venv-ds (make deepspeed-env)",
              file=sys.stderr)
        return 2
    import deepspeed
    import torch
    from deepspeed.ops.adam import DeepSpeedCPUAdam

    from cxlkit.integrations.deepspeed import CxlkitCPUAdam
    world_of_one(deepspeed)
    ds_losses, ds_err = run(deepspeed, torch, DeepSpeedCPUAdam, a.stage, a.steps)
    cx_losses, cx_err = run(deepspeed, torch, CxlkitCPUAdam, a.stage, a.steps)
    diffs = [abs(x - y) for x, y in zip(ds_losses, cx_losses)]
    out = {"stage": a.stage, "steps": a.steps, "deepspeed": deepspeed.__version__,
           "losses_deepspeed": ds_losses, "losses_cxlkit": cx_losses,
           "max_loss_diff": max(diffs), "max_loss_diff_first_5": max(diffs[:5]),
           "exp_avg_sq_vs_float64": {"deepspeed": ds_err, "cxlkit": cx_err}}
    line = json.dumps(out)
    Path(a.output).parent.mkdir(parents=True, exist_ok=True)
    Path(a.output).write_text(line + "\n")
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
