"""The torch half of `cxlkit train demo --spill`: a small Llama (transformers, random init, CPU)
trained twice from the same weights, by TieredAdamW and by TieredAdamW spilling its optimizer
subgroups to a SubgroupStore; each step's figures are handed back as plain data and
cxlkit.cli renders them (torch and transformers are imported on this floor only)."""
from __future__ import annotations

import copy
import gc
import time
from collections.abc import Callable, Iterator

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from .torch import SpilledAdamW, TieredAdamW


def llama(layers: int, hidden: int) -> LlamaForCausalLM:
    """A random bf16 Llama with a 512-token vocabulary (seeded: the same weights every call)."""
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=512, hidden_size=hidden, intermediate_size=2 * hidden,
                      num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=256)
    return LlamaForCausalLM(cfg).to(torch.bfloat16)


def spill_demo(store, *, steps: int, layers: int, hidden: int,
               on_start: Callable[[int], None] | None = None) -> Iterator[dict]:
    """Train both copies `steps` steps; on_start(nparams) is called once the model exists.
    Yields per step the spilled optimizer's last_metrics plus "loss", "reference_loss" and
    "equal" (loss and every parameter bitwise equal to the run without spill)."""
    ref_model = llama(layers, hidden)
    model = copy.deepcopy(ref_model)
    ref_opt = TieredAdamW(ref_model.parameters(), lr=3e-3, team=None)
    opt = SpilledAdamW(model.parameters(), lr=3e-3, team=None, spill=store)
    try:
        if on_start is not None:
            on_start(sum(p.numel() for p in model.parameters()))
        # one batch, trained on every step: its loss falls visibly within a few steps (fresh
        # uniform random tokens each step hold nothing to learn, and their loss only wanders)
        ids = torch.randint(0, 512, (4, 64), generator=torch.Generator().manual_seed(1))
        for _ in range(steps):
            t0 = time.perf_counter()
            out = model(input_ids=ids, labels=ids)
            t1 = time.perf_counter()
            out.loss.backward()
            t2 = time.perf_counter()
            store.report_times(forward_s=t1 - t0, backward_s=t2 - t1)
            opt.step()
            opt.zero_grad()
            ref_out = ref_model(input_ids=ids, labels=ids)
            ref_out.loss.backward()
            ref_opt.step()
            ref_opt.zero_grad()
            same = out.loss.item() == ref_out.loss.item() and all(
                torch.equal(a, b) for a, b in zip(model.parameters(), ref_model.parameters()))
            yield {**opt.last_metrics, "loss": out.loss.item(),
                   "reference_loss": ref_out.loss.item(), "equal": same}
    finally:
        opt.close()
        del model, ref_model, opt, ref_opt
        gc.collect()
