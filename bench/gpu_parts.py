"""The parts of bench/gpu_check.py, each on a device chosen by Ctx.device ("cuda" or "cpu": the
same code with CPU tensors): host<->device copies by source tier, a TieredAdamW training step
against torch's CPU-offload pattern, PrefixCache TTFT, the vLLM connector's staging copies.
Each returns a dict: figures, "checks" [{name, ok, detail}], "skipped" [{what, reason}] and
"stopped" (why the rest did not run in the part's time) when its budget ran out."""
from __future__ import annotations

import hashlib
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30


@dataclass(frozen=True)
class Sizes:
    copy_sizes: tuple[int, ...]
    copy_streams: tuple[int, ...]
    copy_reps: int
    train: dict            # TinyLM shape, batch, seq, steps, dtypes
    ttft_tokens: tuple[int, ...]
    ttft_model: dict       # LlamaConfig fields
    ttft_dtype: str
    ttft_reps: int
    kv: dict               # layers, kv_heads, head_dim, dtype, blocks, staging_blocks


PRESETS = {
    "full": Sizes(  # the GPU machine
        copy_sizes=(64 * KiB, 1 * MiB, 16 * MiB, 256 * MiB, 1 * GiB), copy_streams=(1, 2, 4),
        copy_reps=3,
        train=dict(vocab=16384, width=1024, layers=8, heads=16, batch=8, seq=512, steps=6,
                   dtypes=("float32", "bfloat16")),
        ttft_tokens=(2048, 8192),
        ttft_model=dict(vocab_size=32000, hidden_size=1024, intermediate_size=2816,
                        num_hidden_layers=8, num_attention_heads=16, num_key_value_heads=8),
        ttft_dtype="bfloat16", ttft_reps=3,
        kv=dict(layers=32, kv_heads=8, head_dim=128, dtype="bfloat16", blocks=256,
                staging_blocks=64)),
    "cpu": Sizes(  # `make gpu-check` without a GPU: the CPU halves in well under a minute
        copy_sizes=(64 * KiB, 1 * MiB, 16 * MiB), copy_streams=(1, 2), copy_reps=3,
        train=dict(vocab=512, width=64, layers=2, heads=4, batch=2, seq=32, steps=3,
                   dtypes=("float32", "bfloat16")),
        ttft_tokens=(256, 1024),
        ttft_model=dict(vocab_size=1024, hidden_size=128, intermediate_size=256,
                        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2),
        ttft_dtype="float32", ttft_reps=2,
        kv=dict(layers=4, kv_heads=2, head_dim=64, dtype="bfloat16", blocks=32,
                staging_blocks=8)),
    "tiny": Sizes(  # tests/test_gpu_check.py
        copy_sizes=(64 * KiB, 256 * KiB), copy_streams=(1, 2), copy_reps=1,
        train=dict(vocab=64, width=32, layers=1, heads=2, batch=1, seq=16, steps=2,
                   dtypes=("float32",)),
        ttft_tokens=(40, 72),
        ttft_model=dict(vocab_size=128, hidden_size=32, intermediate_size=64,
                        num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1),
        ttft_dtype="float32", ttft_reps=1,
        kv=dict(layers=2, kv_heads=2, head_dim=8, dtype="bfloat16", blocks=6,
                staging_blocks=4)),
}


@dataclass
class Ctx:
    device: str       # "cuda" or "cpu"
    sizes: Sizes
    deadline: float   # time.monotonic() by which the part should be done
    skipped: list[dict] = field(default_factory=list)

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def skip(self, what: str, reason: str) -> None:
        self.skipped.append({"what": what, "reason": reason})

    def sync(self) -> None:
        if self.device == "cuda":
            import torch

            torch.cuda.synchronize()


def check(name: str, ok: bool, detail: str = "") -> dict:
    return {"name": name, "ok": bool(ok), "detail": detail}


def same_bits(a: Any, b: Any) -> bool:
    """The two tensors hold the same bytes (NaN payloads and -0.0 included)."""
    import torch

    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


def _timed(ctx: Ctx, fn: Callable[[], Any]) -> tuple[float, Any]:
    ctx.sync()
    t0 = time.perf_counter()
    out = fn()
    ctx.sync()
    return time.perf_counter() - t0, out


def _memfd_pool(tag: str, nbytes: int) -> Any:
    from cxlkit.pool import Pool

    # anonymous shared memory: the same tmpfs pages as the /dev/shm default, without a file
    # to leave behind or a /dev/shm size limit to hit
    return Pool(f"memfd:cxlkit-gpu-check-{tag}-{os.getpid()}", nbytes + 64 * MiB, host_id=0)


# ---- host <-> device copies by source tier, pinned vs pageable ----

def run_copy(ctx: Ctx) -> dict:
    from cxlkit import topology
    from cxlkit.integrations.cuda import torch_copier

    S = ctx.sizes
    backend = torch_copier(ctx.device)
    need = max(S.copy_sizes) * max(S.copy_streams)
    out: dict = {"sizes": list(S.copy_sizes), "streams": list(S.copy_streams),
                 "reps": S.copy_reps, "host_bytes": need, "tiers": []}
    tiers = [(f"node {n}", n) for n in topology.memory_nodes()] + [("pool", None)]
    for i, (name, node) in enumerate(tiers):
        if ctx.left() <= 0:
            out["stopped"] = f"time budget spent: tiers {[t for t, _ in tiers[i:]]} not run"
            break
        mem = _HostMemory(node, need)
        try:
            mem.open()
        except (OSError, MemoryError, ValueError) as e:  # a node too full for the sweep
            ctx.skip(name, f"{need} bytes not placed there: {type(e).__name__}: {e}")
            continue
        try:
            for pinned in (True, False):
                arm = _sweep_arm(ctx, backend, mem, name, pinned)
                if arm is not None:
                    out["tiers"].append(arm)
                    if arm["stopped"]:
                        out["stopped"] = f"{name}: {arm['stopped']}"
        finally:
            mem.close()
    if ctx.device == "cpu":
        out["note"] = ("device cpu: copies into CPU tensors, 'streams' run one after another; "
                       "figures are memcpy through torch, not host<->GPU")
    return out


def _sweep_arm(ctx: Ctx, backend: Any, mem: _HostMemory, name: str,
               pinned: bool) -> dict | None:
    """One tier's sweep, page-locked or pageable; None (and a skip) when it cannot be pinned."""
    from cxlkit.bench import copy as BC

    S = ctx.sizes
    arm: dict = {"tier": name, "node": mem.node, "pinned": pinned,
                 "memory": (f"cxlkit.alloc bound to node {mem.node}" if mem.node is not None
                            else "an object in a memfd pool (tmpfs pages, as /dev/shm pools)")}
    if pinned:
        how, why = mem.pin(ctx)
        if how is None:
            ctx.skip(f"{name} pinned", why)
            return None
        arm.update(how)
    try:
        arm.update(BC.gpu_sweep(backend, mem.host, device=0, sizes=S.copy_sizes,
                                streams=S.copy_streams, reps=S.copy_reps,
                                deadline=ctx.deadline))
    finally:
        if pinned:
            mem.unpin()
    return arm


class _HostMemory:
    """Host memory of one tier for the sweep: a cxlkit.alloc buffer bound to a node (pinned by
    cxlkit's hook, Buffer.pin) or, node None, a pool object (pinned by torch's
    cudaHostRegister: the hook pins cxlkit.alloc buffers only)."""

    def __init__(self, node: int | None, nbytes: int) -> None:
        self.node, self.nbytes = node, nbytes
        self.pool = self.host = None
        self.registered: int | None = None

    def open(self) -> None:
        from cxlkit import policy as P

        if self.node is not None:
            self.host = P.alloc(self.nbytes, P.bind(self.node), thp=False)
            return
        self.pool = _memfd_pool("copy", self.nbytes)
        self.host = self.pool.create("copy", self.nbytes)  # zeroed: every page faulted in

    def close(self) -> None:
        if self.host is not None:
            self.host.close()
        if self.pool is not None:
            self.pool.close()

    def pin(self, ctx: Ctx) -> tuple[dict | None, str]:
        return self._pin_buffer() if self.node is not None else self._pin_pool(ctx)

    def unpin(self) -> None:
        if self.node is not None:
            self.host.unpin()
        elif self.registered is not None:
            import torch

            torch.cuda.cudart().cudaHostUnregister(self.registered)
            self.registered = None

    def _pin_buffer(self) -> tuple[dict | None, str]:
        from cxlkit.integrations.views import tensor

        t0 = time.perf_counter()
        try:
            self.host.pin()
        except OSError as e:
            from cxlkit.bench.copy import no_gpu_reason

            return None, f"cxlkit's pinning hook (Buffer.pin): {e}; {no_gpu_reason()}"
        pin_s = time.perf_counter() - t0
        return {"pin": "cxlkit Buffer.pin (cudaHostRegister)", "pin_s": round(pin_s, 4),
                "torch_sees_pinned": bool(tensor(self.host).is_pinned())}, ""

    def _pin_pool(self, ctx: Ctx) -> tuple[dict | None, str]:
        if ctx.device != "cuda":
            return None, "no CUDA device: no page-locking to compare against"
        import torch

        from cxlkit.integrations.views import tensor

        reg = getattr(torch.cuda.cudart(), "cudaHostRegister", None)
        if reg is None:
            return None, "this torch exposes no cudaHostRegister (torch.cuda.cudart())"
        t = tensor(self.host)
        ptr = t.data_ptr()
        t0 = time.perf_counter()
        rc = int(reg(ptr, self.nbytes, 0))
        pin_s = time.perf_counter() - t0
        if rc != 0:
            return None, f"cudaHostRegister of the pool object: CUDA error {rc}"
        self.registered = ptr
        return {"pin": "torch.cuda.cudart().cudaHostRegister (cxlkit's hook pins "
                       "cxlkit.alloc buffers only; a pool object has none)",
                "pin_s": round(pin_s, 4), "torch_sees_pinned": bool(t.is_pinned())}, ""


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
              "relative per step, tests/test_adam.py); compared after the first step, whose "
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
    pool = _memfd_pool("prefix", 2 * per_token * sum(S.ttft_tokens))
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
        s, (logits, cache) = _timed(ctx, lambda: fwd(ids, DynamicCache()))
        recompute.append(s)
        full = full or (logits, cache)
    save_s, stored = _timed(ctx, lambda: pc.save(prompt, _cache_from(
        [(k.to("cpu"), v.to("cpu")) for k, v in _kv(full[1])])))
    hits, parts = [], {}
    for _ in range(ctx.sizes.ttft_reps):
        s, (logits, cache, n) = _timed(ctx, lambda: _hit(ctx, fwd, pc, prompt, ids, parts))
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


# ---- the vLLM connector's staging copies (PageEngine), without vLLM ----

def _pages(kv: dict, blocks: int, device: str, seed: int | None) -> list:
    """Per layer, the [blocks, kv_heads, 16, 2*head_dim] view vLLM hands the connector over a
    FlashAttention-ordered [blocks, 16, kv_heads, 2*head_dim] tensor; random or zeros."""
    import torch

    dtype = getattr(torch, kv["dtype"])
    shape = (blocks, 16, kv["kv_heads"], 2 * kv["head_dim"])
    out = []
    for layer in range(kv["layers"]):
        if seed is None:
            raw = torch.zeros(shape, dtype=dtype, device=device)
        else:
            g = torch.Generator(device=device).manual_seed(seed + layer)
            raw = torch.randn(shape, generator=g, device=device).to(dtype)
        out.append(raw.permute(0, 2, 1, 3))
    return out


def run_vllm_staging(ctx: Ctx) -> dict:
    from cxlkit.integrations.vllm_pages import PageEngine, PageFormat
    from cxlkit.kv.layout import BlockLayout
    from cxlkit.kv.store import Store

    kv = ctx.sizes.kv
    n = kv["blocks"]
    lay = BlockLayout(num_layers=kv["layers"], num_kv_heads=kv["kv_heads"],
                      head_dim=kv["head_dim"], dtype=kv["dtype"], block_tokens=16, kv_parts=2)
    src = _pages(kv, n, ctx.device, seed=7)
    dst = _pages(kv, n + 2, ctx.device, seed=None)  # two blocks the load must not touch
    keys = [hashlib.sha256(b"gpu-check %d" % i).digest() for i in range(n)]
    src_ids, dst_ids = list(range(n))[::-1], list(range(2, n + 2))
    fmt = PageFormat("FLASH_ATTN")
    pool = _memfd_pool("kv", n * lay.nbytes * 5 // 4)
    try:
        with Store(pool, lay, namespace=f"gpu-check:{fmt.name}") as st:
            save = PageEngine(lay, src, fmt, staging=True, staging_blocks=kv["staging_blocks"])
            load = PageEngine(lay, dst, fmt, staging=True, staging_blocks=kv["staging_blocks"])
            save_s, saved = _timed(ctx, lambda: save.save(st, keys, src_ids))
            load_s, loaded = _timed(ctx, lambda: load.load(st, keys, dst_ids))
            again = save.save(st, keys, src_ids)
            pinned = bool(save.stage[0].is_pinned())
    finally:
        pool.close()
    import torch

    si, di = (torch.tensor(x, device=ctx.device) for x in (src_ids, dst_ids))
    same = all(same_bits(d[di], s[si]) for d, s in zip(dst, src))
    untouched = all(not d[:2].any() for d in dst)
    nbytes = n * lay.nbytes
    checks = [check(f"{n} blocks saved from {ctx.device} pages, then stored again: none new",
                    saved == n and again == 0, f"saved {saved}, again {again}"),
              check(f"{n} blocks loaded into other {ctx.device} block ids, byte for byte",
                    loaded == n and same, f"loaded {loaded}"),
              check("blocks outside the load's ids untouched", untouched)]
    if ctx.device == "cuda":
        checks.append(check("staging buffers page-locked (torch pin_memory)", pinned))
    return {"layout": dict(kv), "block_bytes": lay.nbytes, "blocks": n,
            "staging_pinned": pinned, "save_ms": round(save_s * 1e3, 3),
            "load_ms": round(load_s * 1e3, 3), "save_gbps": round(nbytes / save_s / 1e9, 3),
            "load_gbps": round(nbytes / load_s / 1e9, 3), "checks": checks}


PARTS: dict[str, Callable[[Ctx], dict]] = {
    "vllm_staging": run_vllm_staging, "train": run_train, "prefix_cache": run_prefix_cache,
    "copy": run_copy}
