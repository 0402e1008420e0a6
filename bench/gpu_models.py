"""The parts of bench/gpu_check.py that run models, on Ctx.device: a training step with
TieredAdamW offload against torch's CPU-offload pattern, and PrefixCache TTFT (a pooled hit
against a recompute) with a random-weight Llama built from a config."""
from __future__ import annotations

import statistics
import time
from typing import Any

from gpu_parts import Ctx, check, memfd_pool, same_bits, timed


# ---- a training step: TieredAdamW offload vs torch's CPU-offload pattern ----

def _tiny_lm(cfg: dict, device: str, dtype: Any) -> Any:
    import torch
    from torch import nn

    class TinyLM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            w = cfg["width"]
            self.emb = nn.Embedding(cfg["vocab"], w)
            layer = nn.TransformerEncoderLayer(w, cfg["heads"], 4 * w, dropout=0.0,
                                               batch_first=True, norm_first=True)
            self.body = nn.TransformerEncoder(layer, cfg["layers"], enable_nested_tensor=False)
            self.head = nn.Linear(w, cfg["vocab"])

        def forward(self, ids: Any) -> Any:  # [batch, seq] -> [batch, seq, vocab]
            return self.head(self.body(self.emb(ids)))

    torch.manual_seed(0)
    return TinyLM().to(device=device, dtype=dtype)


def _batch(cfg: dict, device: str) -> tuple[Any, Any]:
    import torch

    g = torch.Generator().manual_seed(1)
    ids = torch.randint(cfg["vocab"], (cfg["batch"], cfg["seq"] + 1), generator=g)
    return ids[:, :-1].to(device), ids[:, 1:].to(device)


def _train_arm(ctx: Ctx, cfg: dict, dtype: Any, arm: str) -> dict:
    """cfg["steps"] steps of one arm; step and optimizer times, step-1 grads, final params."""
    import torch
    import torch.nn.functional as F

    from cxlkit.integrations.torch import TieredAdamW

    model = _tiny_lm(cfg, ctx.device, dtype)
    params = list(model.parameters())
    x, y = _batch(cfg, ctx.device)
    pin = ctx.device == "cuda"
    if arm == "cxlkit":
        opt = TieredAdamW(params, lr=1e-3, weight_decay=0.01)
    else:  # torch's pattern: fp32 masters and grads in (pinned) host memory, AdamW on the CPU
        host = [p.detach().to("cpu", torch.float32, copy=True) for p in params]
        host = [m.pin_memory() if pin else m for m in host]
        grads = [torch.empty_like(m, pin_memory=pin) for m in host]
        for m, g in zip(host, grads):
            m.grad = g
        opt = torch.optim.AdamW(host, lr=1e-3, weight_decay=0.01)

    def masters() -> list:
        return ([opt.state[p]["master"].clone() for p in params] if arm == "cxlkit"
                else [m.detach().clone() for m in host])

    step_s, opt_s, grads1, master1, exact = [], [], None, None, True
    for step in range(cfg["steps"]):
        if ctx.left() <= 0:
            break
        ctx.sync()
        t0 = time.perf_counter()
        loss = F.cross_entropy(model(x).float().flatten(0, 1), y.flatten())
        loss.backward()
        ctx.sync()
        t1 = time.perf_counter()
        if arm == "cxlkit":
            opt.step()
        else:
            for p, g in zip(params, grads):
                g.copy_(p.grad, non_blocking=pin)  # upcast to fp32 on the way
            ctx.sync()
            opt.step()
            with torch.no_grad():
                for p, m in zip(params, host):
                    p.copy_(m, non_blocking=pin)
        ctx.sync()
        t2 = time.perf_counter()
        step_s.append(t2 - t0)
        opt_s.append(t2 - t1)
        if step == 0:
            grads1, master1 = [p.grad.detach().clone() for p in params], masters()
        model.zero_grad(set_to_none=True)
        if arm == "cxlkit":  # params back on the device: each its master rounded, bit for bit
            exact &= all(same_bits(p.detach(), opt.state[p]["master"].to(ctx.device, p.dtype))
                         for p in params)
    return {"step_s": step_s, "opt_s": opt_s, "grads1": grads1, "master1": master1,
            "master": masters(), "exact": exact, "params": sum(p.numel() for p in params)}


RTOL, ATOL = 1e-5, 1e-6


def _max_diff(a: list, b: list) -> tuple[float, float]:
    """(max |a-b|, max |a-b| / (atol + rtol |b|)): the second is at most 1 within tolerance."""
    ab = max(float((x.float() - y.float()).abs().max()) for x, y in zip(a, b))
    worst = max(float(((x.float() - y.float()).abs() / (ATOL + RTOL * y.float().abs())).max())
                for x, y in zip(a, b))
    return ab, worst


TOL_REASON = ("cxlkit's AdamW kernel and torch.optim.AdamW round differently (about 1e-6 "
              "relative per step, tests/train/test_adam.py); compared after the first step, whose "
              "gradients are checked bit-identical in both arms, so only the optimizer differs")


def run_train(ctx: Ctx) -> dict:
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    cfg = ctx.sizes.train
    out: dict = {"model": {k: cfg[k] for k in ("vocab", "width", "layers", "heads")},
                 "batch": cfg["batch"], "seq": cfg["seq"], "steps": cfg["steps"],
                 "tolerance": {"rtol": RTOL, "atol": ATOL, "why": TOL_REASON},
                 "attention": "math SDPA, deterministic algorithms (so both arms' gradients "
                              "can be compared bit for bit)", "runs": []}
    checks = []
    was = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        with sdpa_kernel(SDPBackend.MATH):
            for name in cfg["dtypes"]:
                if ctx.left() <= 0:
                    out["stopped"] = f"time budget spent before the {name} model"
                    break
                dtype = getattr(torch, name)
                a = _train_arm(ctx, cfg, dtype, "cxlkit")
                b = _train_arm(ctx, cfg, dtype, "torch")
                run, more = _compare_arms(name, a, b)
                out["runs"].append(run)
                checks += more
                if len(a["step_s"]) < cfg["steps"] or len(b["step_s"]) < cfg["steps"]:
                    out["stopped"] = f"time budget spent during the {name} model's steps"
    finally:
        torch.use_deterministic_algorithms(was)
    out["checks"] = checks
    return out


def _compare_arms(name: str, a: dict, b: dict) -> tuple[dict, list[dict]]:
    def med_ms(xs: list[float]) -> float | None:
        xs = xs[1:] or xs  # the first step allocates the optimizer state
        return round(statistics.median(xs) * 1e3, 3) if xs else None

    run = {"dtype": name, "params": a["params"],
           "cxlkit": {"step_ms": med_ms(a["step_s"]), "opt_ms": med_ms(a["opt_s"]),
                      "steps": len(a["step_s"])},
           "torch_cpu_offload": {"step_ms": med_ms(b["step_s"]), "opt_ms": med_ms(b["opt_s"]),
                                 "steps": len(b["step_s"])}}
    if run["cxlkit"]["step_ms"] and run["torch_cpu_offload"]["step_ms"]:
        run["step_ratio"] = round(run["cxlkit"]["step_ms"] / run["torch_cpu_offload"]["step_ms"],
                                  3)
    checks = [check(f"{name}: params back on the device are their fp32 masters rounded, bit "
                    "for bit (every TieredAdamW step)", a["exact"])]
    if a["grads1"] is None or b["grads1"] is None:
        return run, checks
    same = all(same_bits(x, y) for x, y in zip(a["grads1"], b["grads1"]))
    checks.append(check(f"{name}: step-1 gradients identical in both arms", same,
                        "" if same else "forward/backward not deterministic here: the step-1 "
                        "comparison then includes their difference"))
    ab, worst = _max_diff(a["master1"], b["master1"])
    run["masters_after_step1"] = {"max_abs": ab, "of_tolerance": worst}
    checks.append(check(f"{name}: fp32 masters after step 1 match torch.optim.AdamW within "
                        f"rtol {RTOL}, atol {ATOL}", worst <= 1.0,
                        f"max abs {ab:.3g}, worst {worst:.3g} of the tolerance"))
    ab, worst = _max_diff(a["master"], b["master"])
    # later steps start from slightly different params: Adam's normalised update can turn a
    # last-bit difference of a near-zero gradient into a step of up to lr, so these are figures
    run["masters_after_last_step"] = {"max_abs": ab, "of_tolerance": worst}
    return run, checks


# ---- PrefixCache (transformers): TTFT of a pooled hit vs a recompute ----

def _llama(ctx: Ctx) -> Any:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    S = ctx.sizes
    cfg = LlamaConfig(max_position_embeddings=max(S.ttft_tokens) + 64, **S.ttft_model)
    torch.manual_seed(0)
    with torch.device(ctx.device):  # random weights made where they run: no hub download
        model = LlamaForCausalLM(cfg)
    return model.to(getattr(torch, S.ttft_dtype)).eval()


def _cache_from(kvs: list) -> Any:
    """A DynamicCache holding the given per-layer (keys, values) [1, kv_heads, tokens, dim]
    (built as PrefixCache.load builds its own: from empty views, then handed the tensors)."""
    from transformers import DynamicCache

    cache = DynamicCache(ddp_cache_data=[(k[:, :, :0], v[:, :, :0]) for k, v in kvs])
    for layer, (k, v) in zip(cache.layers, kvs):
        layer.keys, layer.values = k, v
    return cache


def _kv(cache: Any, n: int | None = None) -> list:
    return [(layer.keys[:, :, :n], layer.values[:, :, :n]) for layer in cache.layers]


class _Fwd:
    """model(ids, cache) -> (last position's fp32 logits, cache), under the model's own name
    for the cache argument, asking for the last position's logits only where it can."""

    def __init__(self, model: Any) -> None:
        import inspect

        from cxlkit.integrations.transformers import _cache_arg

        self.model, self.name = model, _cache_arg(model)
        params = inspect.signature(model.forward).parameters
        self.extra = {"logits_to_keep": 1} if "logits_to_keep" in params else {}

    def __call__(self, ids: Any, cache: Any) -> tuple[Any, Any]:
        import torch

        with torch.no_grad():
            out = self.model(input_ids=ids, use_cache=True, **{self.name: cache}, **self.extra)
        return out.logits[0, -1].float(), getattr(out, self.name)


def run_prefix_cache(ctx: Ctx) -> dict:
    import torch

    from cxlkit.integrations.transformers import PrefixCache, layout_for

    S = ctx.sizes
    model = _llama(ctx)
    fwd = _Fwd(model)
    lay = layout_for(model.config, getattr(torch, S.ttft_dtype))
    per_token = lay.nbytes // lay.block_tokens
    pool = memfd_pool("prefix", 2 * per_token * sum(S.ttft_tokens))
    out: dict = {"model": dict(S.ttft_model), "dtype": S.ttft_dtype, "reps": S.ttft_reps,
                 "kv_bytes_per_token": per_token, "runs": []}
    checks = []
    try:
        pc = PrefixCache(pool, model, namespace="gpu-check")
        fwd(torch.tensor([[1, 2, 3]], device=ctx.device), None)  # kernels loaded, untimed
        for i, n in enumerate(S.ttft_tokens):
            if ctx.left() <= 0:
                out["stopped"] = f"time budget spent: {list(S.ttft_tokens[i:])} tokens not run"
                break
            run, more = _ttft(ctx, fwd, pc, n)
            out["runs"].append(run)
            checks += more
        checks.append(_device_api_check(ctx, fwd, pc))
        pc.store.close()
    finally:
        pool.close()
    out["checks"] = checks
    return out


def _ttft(ctx: Ctx, fwd: _Fwd, pc: Any, ntok: int) -> tuple[dict, list[dict]]:
    """One prompt of ntok random tokens: stored once, then timed as recompute and as a hit."""
    import torch

    g = torch.Generator().manual_seed(ntok)
    prompt = torch.randint(fwd.model.config.vocab_size, (ntok,), generator=g).tolist()
    ids = torch.tensor([prompt], device=ctx.device)
    from transformers import DynamicCache

    recompute, full = [], None
    for _ in range(ctx.sizes.ttft_reps):
        s, (logits, cache) = timed(ctx, lambda: fwd(ids, DynamicCache()))
        recompute.append(s)
        full = full or (logits, cache)
    save_s, stored = timed(ctx, lambda: pc.save(prompt, _cache_from(
        [(k.to("cpu"), v.to("cpu")) for k, v in _kv(full[1])])))
    hits, parts = [], {}
    for _ in range(ctx.sizes.ttft_reps):
        s, (logits, cache, n) = timed(ctx, lambda: _hit(ctx, fwd, pc, prompt, ids, parts))
        hits.append(s)
    # the same suffix forward over the K/V the device computed, never through the pool
    ref, _ = fwd(ids[:, n:], _cache_from([(k.clone(), v.clone()) for k, v in _kv(full[1], n)]))
    kv_same = all(same_bits(a, b) and same_bits(c, d) for (a, c), (b, d)
                  in zip(parts["kv"], _kv(full[1], n)))
    run = {"tokens": ntok, "pooled_tokens": n, "stored_blocks": stored,
           "recompute_ms": round(statistics.median(recompute) * 1e3, 3),
           "hit_ms": round(statistics.median(hits) * 1e3, 3),
           "hit_parts_ms": {k: round(v * 1e3, 3) for k, v in parts.items() if k != "kv"},
           "save_ms": round(save_s * 1e3, 3),
           "logits_max_abs_diff_vs_full_recompute": float((logits - full[0]).abs().max())}
    run["hit_over_recompute"] = round(run["hit_ms"] / run["recompute_ms"], 3)
    return run, [
        check(f"{ntok} tokens: {n} pooled tokens' K/V back on {ctx.device} byte for byte", kv_same),
        check(f"{ntok} tokens: hit's first logits equal, bit for bit, a suffix forward over the "
              "K/V that never left the device", same_bits(logits, ref))]


def _hit(ctx: Ctx, fwd: _Fwd, pc: Any, prompt: list, ids: Any, parts: dict) -> tuple:
    t0 = time.perf_counter()
    cache, n = pc.load(prompt)
    t1 = time.perf_counter()
    kvs = [(k.to(ctx.device), v.to(ctx.device)) for k, v in _kv(cache)]
    ctx.sync()
    t2 = time.perf_counter()
    logits, cache = fwd(ids[:, n:], _cache_from(kvs))
    ctx.sync()
    parts.update(load=t1 - t0, to_device=t2 - t1, forward=time.perf_counter() - t2,
                 kv=[(k.clone(), v.clone()) for k, v in _kv(cache, n)])
    return logits, cache, n


def _device_api_check(ctx: Ctx, fwd: _Fwd, pc: Any) -> dict:
    """The library's own calls with the model and its cache on ctx.device: PrefixCache.save of
    the cache a forward left there, then generate() (which loads it)."""
    import torch
    from transformers import DynamicCache

    from cxlkit.integrations.transformers import generate

    name = f"PrefixCache.save and generate() with the model and its cache on {ctx.device}"
    prompt = list(range(1, 2 * pc.block_tokens + 3))
    step = "PrefixCache.save"
    try:
        _, cache = fwd(torch.tensor([prompt], device=ctx.device), DynamicCache())
        pc.save(prompt, cache)
        step = "generate()"
        _, info = generate(fwd.model, prompt, pc, max_new_tokens=1)
    except Exception as e:  # noqa: BLE001 - the check reports whatever it raised
        return check(name, False, f"{step}: {type(e).__name__}: {str(e).splitlines()[0][:300]}")
    return check(name, info.prefix_tokens == 2 * pc.block_tokens,
                 f"{info.prefix_tokens} pooled tokens")
