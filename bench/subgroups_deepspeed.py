"""bench/subgroups_deepspeed.py — DeepSpeed's side of bench/subgroups.py: its full ZeRO-3
engine (DS_ACCELERATOR=cpu, a gloo world of one) with `offload_optimizer: {device: nvme}` on
one path, a bf16 model of --params params in layers of exactly --subgroup params each (so its
subgroups are the same as cxlkit's), DeepSpeedCPUAdam (what ZeRO-3 picks for AdamW with
offload). Runs in .venv-ds (mk/deepspeed.mk); prints one JSON line.

  DS_ACCELERATOR=cpu .venv-ds/bin/python bench/subgroups_deepspeed.py --path DIR \\
      --params 96M --subgroup 12M --steps 4

update_s is engine.step() (every subgroup: swap in fp32 master, exp_avg, exp_avg_sq and the
fp32 grads, DeepSpeedCPUAdam, swap the three states out); backward_s includes DeepSpeed
writing the fp32 grads to the path (it swaps them out during backward). Medians over the steps
after the first, with min..max."""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time


def parse_count(s: str) -> int:
    s = s.strip().upper()
    mult = {"K": 10**3, "M": 10**6, "G": 10**9}.get(s[-1:], 1)
    return int(float(s[:-1] if mult > 1 else s) * mult)


def shape(subgroup: int) -> tuple[int, int]:
    """(a, b) with a * b == subgroup and a close to b (one Linear's weight)."""
    a = int(subgroup ** 0.5)
    while subgroup % a:
        a -= 1
    return a, subgroup // a


def config(path: str, subgroup: int, pipeline: bool, qd: int, block: int) -> dict:
    return {"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "weight_decay": 0.01}},
            "zero_optimization": {
                "stage": 3, "sub_group_size": subgroup,
                "offload_optimizer": {"device": "nvme", "nvme_path": path, "buffer_count": 4,
                                      "pipeline_read": pipeline, "pipeline_write": pipeline}},
            "aio": {"block_size": block, "queue_depth": qd, "thread_count": 1,
                    "single_submit": False, "overlap_events": True}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--path", required=True, help="nvme_path (a directory)")
    ap.add_argument("--label", default=None, help="the row's name")
    ap.add_argument("--params", default="96M")
    ap.add_argument("--subgroup", default="12M")
    ap.add_argument("--steps", type=int, default=4)
    # DeepSpeed's default (PartitionedOptimizerSwapper). Its PipelinedOptimizerSwapper
    # (1) runs with 8 subgroups here but fails an assertion with 16 (`assert
    # new_alloc_buffers is not None` in _swap_out_optimizer_state, buffer_count 4)
    ap.add_argument("--pipeline", type=int, default=0, help="pipeline_read/pipeline_write")
    ap.add_argument("--queue-depth", type=int, default=32)
    ap.add_argument("--block-size", type=int, default=1 << 20)
    a = ap.parse_args()
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
    for k, v in (("RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0")):
        os.environ.setdefault(k, v)
    import deepspeed
    import torch

    params, subgroup = parse_count(a.params), parse_count(a.subgroup)
    nlayers = params // subgroup
    ia, ib = shape(subgroup)
    torch.manual_seed(0)
    layers = []
    for i in range(nlayers):  # a -> b, b -> a, ...: every weight is one subgroup
        layers.append(torch.nn.Linear(ia, ib, bias=False) if i % 2 == 0
                      else torch.nn.Linear(ib, ia, bias=False))
    model = torch.nn.Sequential(*layers).to(torch.bfloat16)
    deepspeed.init_distributed(dist_backend="gloo")
    t0 = time.perf_counter()
    engine, opt, _, _ = deepspeed.initialize(
        model=model, model_parameters=model.parameters(),
        config=config(a.path, subgroup, bool(a.pipeline), a.queue_depth, a.block_size))
    init_s = time.perf_counter() - t0
    width = ib if nlayers % 2 else ia
    g = torch.Generator().manual_seed(1)
    rows = []
    for _ in range(a.steps):
        x = torch.randn(1, ia, generator=g).bfloat16()
        t0 = time.perf_counter()
        loss = engine(x).float().square().mean() / width
        t1 = time.perf_counter()
        engine.backward(loss)
        t2 = time.perf_counter()
        engine.step()
        t3 = time.perf_counter()
        rows.append(dict(forward_s=t1 - t0, backward_s=t2 - t1, update_s=t3 - t2,
                         loss=float(loss)))
    sub = rows[1:] or rows
    upd = [r["update_s"] for r in sub]
    # per subgroup: 4 fp32 tensors in (master, m, v, grads), 3 out; grads also out in backward
    moved = nlayers * 4 * subgroup * 7
    sg_counts = [len(x) for x in getattr(opt, "fp16_groups", [])]
    print(json.dumps(dict(
        row=a.label or f"DeepSpeed {deepspeed.__version__} ZeRO-3, offload_optimizer nvme: "
        f"{a.path}", engine="ZeRO-3 (deepspeed.initialize)", deepspeed=deepspeed.__version__,
        optimizer=type(opt.optimizer).__name__ if hasattr(opt, "optimizer") else None,
        swapper=type(getattr(opt, "optimizer_swapper", None)).__name__,
        subgroups=len(getattr(opt, "fp16_groups", [])) or None, params_per_subgroup=sg_counts
        or None, pipeline=bool(a.pipeline), init_s=init_s,
        update_s=statistics.median(upd), update_s_min=min(upd), update_s_max=max(upd),
        Mparams_per_s=params / statistics.median(upd) / 1e6,
        io_GBps=moved / statistics.median(upd) / 1e9,
        backward_s=statistics.median(r["backward_s"] for r in sub),
        forward_s=statistics.median(r["forward_s"] for r in sub),
        steps=rows)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
