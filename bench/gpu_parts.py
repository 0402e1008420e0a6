"""The parts of bench/gpu_check.py, each on a device chosen by Ctx.device ("cuda" or "cpu": the
same code with CPU tensors): the sizes, the context, host<->device copies by source tier and
the vLLM connector's staging copies (the parts that run models are in gpu_models.py). Each
part returns a dict: figures, "checks" [{name, ok, detail}], "skipped" [{what, reason}] in
Ctx.skipped, and "stopped" (why the rest did not run in the part's time) when its budget ran
out."""
from __future__ import annotations

import hashlib
import os
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
    "tiny": Sizes(  # tests/bench/test_gpu_check.py
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


def timed(ctx: Ctx, fn: Callable[[], Any]) -> tuple[float, Any]:
    ctx.sync()
    t0 = time.perf_counter()
    out = fn()
    ctx.sync()
    return time.perf_counter() - t0, out


def memfd_pool(tag: str, nbytes: int) -> Any:
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
        from cxlkit import placement as P

        if self.node is not None:
            self.host = P.alloc(self.nbytes, P.bind(self.node), thp=False)
            return
        self.pool = memfd_pool("copy", self.nbytes)
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
    pool = memfd_pool("kv", n * lay.nbytes * 5 // 4)
    try:
        with Store(pool, lay, namespace=f"gpu-check:{fmt.name}") as st:
            save = PageEngine(lay, src, fmt, staging=True, staging_blocks=kv["staging_blocks"])
            load = PageEngine(lay, dst, fmt, staging=True, staging_blocks=kv["staging_blocks"])
            save_s, saved = timed(ctx, lambda: save.save(st, keys, src_ids))
            load_s, loaded = timed(ctx, lambda: load.load(st, keys, dst_ids))
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
