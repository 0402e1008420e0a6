"""The torch halves of `cxlkit demo`'s training and KV sections: they run the model and return
plain figures; cxlkit.cli renders them (torch is imported on this floor only)."""
from __future__ import annotations

import gc
import multiprocessing as mp
import os
import time
from collections.abc import Callable
from typing import Any

import torch

from ..train import plan as TP
from .torch import ActivationOffload, TieredAdamW, param_count


def train_demo(show_plan: Callable[[TP.TrainPlan, int], None], steps: int = 5) -> dict:
    """Train a tiny bf16 transformer `steps` steps with TieredAdamW (state placed by a plan for
    this model on this machine) and activation offload. show_plan(plan, nparams) is called
    before training; returns {"steps": [...], "audits": [...], "simd": str}."""
    from ..train.adam import simd_level

    torch.manual_seed(0)
    vocab, dim, nlayers, seq, batch = 256, 64, 2, 64, 8
    layer = torch.nn.TransformerEncoderLayer(dim, 4, 4 * dim, dropout=0.0, batch_first=True)
    model = torch.nn.Sequential(torch.nn.Embedding(vocab, dim),
                                torch.nn.TransformerEncoder(layer, nlayers,
                                                            enable_nested_tensor=False),
                                torch.nn.Linear(dim, vocab)).to(torch.bfloat16)
    nparams = param_count(model)
    plan = TP.plan_training(TP.Footprint(nparams, nlayers, dim, seq, batch, 1, fp32_grads=False))
    show_plan(plan, nparams)
    opt = TieredAdamW(model.parameters(), lr=3e-3, plan=plan, place_grads=True,
                      place_params=True)
    # Without checkpointing every saved tensor is offloaded, far more than the plan's
    # checkpoint estimate: use the plan's activation policy, sized for this model.
    off = ActivationOffload(64 << 20, tier=plan.policy("activations"))
    x = torch.randint(0, vocab, (batch, seq))
    y = torch.roll(x, 1, dims=1)  # learn to predict the previous token
    rows = []
    for step in range(1, steps + 1):
        t0 = time.perf_counter()
        with off:
            loss = torch.nn.functional.cross_entropy(model(x).float().flatten(0, 1),
                                                     y.flatten())
        loss.backward()
        t1 = time.perf_counter()
        opt.step()
        opt.zero_grad()
        t2 = time.perf_counter()
        rows.append({"step": step, "loss": loss.item(), "fwd_bwd_ms": (t1 - t0) * 1e3,
                     "optimizer_ms": (t2 - t1) * 1e3, "offloaded_mib": off.peak_bytes / 2**20})
    audits = []
    for cls, buf in opt.buffers() + [("activations", off.buffer)]:
        au = buf.audit()
        audits.append({"class": cls, "policy": str(buf.policy), "pages": dict(au.actual.pages),
                       "ok": au.ok, "problems": list(au.problems)})
    # The model's params and the optimizer's state are views of placed buffers: drop them
    # now rather than at interpreter exit, after the native module is gone.
    off.close()
    del model, opt, off, buf
    gc.collect()
    return {"steps": rows, "audits": audits, "simd": simd_level()}


def _demo_model() -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=2048, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                      num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=4096)
    torch.manual_seed(1234)  # same weights in both processes
    return LlamaForCausalLM(cfg).eval()


def _demo_prompt(prefix_len: int, tail: int) -> list[int]:
    return [(31 * i + 7) % 2048 for i in range(prefix_len)] + [(i * 13) % 2048 for i in range(tail)]


def _demo_prefill(path: str, prefix_len: int, q: Any) -> None:
    from .transformers import PrefixCache, generate

    torch.set_num_threads(1)
    model = _demo_model()
    pc = PrefixCache(path, model, host_id=1, checksum=True)
    toks, info = generate(model, _demo_prompt(prefix_len, 5), pc, max_new_tokens=1)
    q.put((info.stored_blocks, info.ttft_s))


def kv_demo(prefix_len: int = 512) -> dict:
    """A prefix stored by another process (host 1) is hit by this one (host 0): TTFT of the
    hit vs a recompute, and whether the greedy tokens agree. The pool is removed after."""
    from .transformers import PrefixCache, generate

    path = f"/dev/shm/cxlkit-demo-kv-{os.getpid()}"
    torch.set_num_threads(1)
    try:
        model = _demo_model()
        pc = PrefixCache(path, model, create=True, size=64 << 20, host_id=0, checksum=True)
        ctx = mp.get_context("spawn")
        q = ctx.Queue()
        p = ctx.Process(target=_demo_prefill, args=(path, prefix_len, q))
        p.start()
        stored, _ = q.get(timeout=300)
        p.join(60)
        prompt = _demo_prompt(prefix_len, 9)  # same prefix, another question
        generate(model, prompt, None, max_new_tokens=1)  # warm-up (allocator, kernels)
        full, ref = generate(model, prompt, None, max_new_tokens=4)
        hit_toks, info = generate(model, prompt, pc, max_new_tokens=4, save=False)
        return {"path": path, "prefix_len": prefix_len, "writer_pid": p.pid, "stored": stored,
                "recompute": {"tokens": 0, "ttft_s": ref.ttft_s, "greedy": full},
                "hit": {"tokens": info.prefix_tokens, "ttft_s": info.ttft_s,
                        "greedy": hit_toks}}
    finally:
        if os.path.exists(path):
            os.unlink(path)
