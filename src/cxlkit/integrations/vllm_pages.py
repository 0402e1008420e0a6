"""vLLM's paged KV cache as cxlkit sees it (vLLM >= 0.32): the block layout from the engine's
attention KV cache spec, the page encoding of its attention backend, and PageEngine, which
copies blocks between those pages and the pool (directly for host memory, through a host
staging buffer for device memory).

vLLM hands each layer's cache to the connector as a 4-D view [B, H, N, C]: block, KV head,
token in block, content, with C = head_size + head_size_v elements; the view's strides carry the
physical layout (LBHNC, LBNHC, ...), so cxlkit reads them instead of assuming one. What the
C elements of a row hold is the attention backend's page encoding: FlashAttention and the other
dense backends keep [K | V] per token, but CPU_ATTN's kernels keep, per head, K transposed
([D, N]) and then V ([N, D]), and may pack by ISA (checked against vLLM's own kernel in
tests/engines/test_kv_vllm_engine.py). So a pool block holds the pages in the backend's encoding, as
vLLM's own offloading does: each row's first and second halves go to the image's K and V parts
([layers][2][tokens][heads][dim]; for dense backends these are K and V), and the page format
(backend name, and the ISA for CPU_ATTN) is part of the pool namespace, so engines that encode
pages differently never read each other's blocks.
"""
from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..kv.layout import BlockLayout, EngineTensors

log = logging.getLogger("cxlkit")

_VLLM_DTYPES = {"fp8": "float8_e4m3fn", "fp8_e4m3": "float8_e4m3fn", "fp8_e5m2": "float8_e5m2"}
AXES = "BHTKD"  # a [B, H, N, C] view with C cut into two halves of head_size


@dataclass(frozen=True)
class PageFormat:
    name: str  # e.g. "CPU_ATTN.vec", "FLASH_ATTN": part of the pool namespace


def layer_index(name: str) -> int:
    nums = re.findall(r"\.(\d+)\.", f".{name}.")
    if not nums:
        raise ValueError(f"kv cache layer {name!r}: no layer index in the name")
    return int(nums[0])


def _dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def attention_spec(vllm_config: Any, kv_cache_config: Any) -> tuple[BlockLayout, list[str]]:
    """The BlockLayout of one vLLM block and the layer names in layer order, from the engine's
    KV cache config (both roles get it); from the model config when there is none."""
    groups = list(getattr(kv_cache_config, "kv_cache_groups", None) or [])
    if not groups:
        return _layout_from_model(vllm_config), []
    if len(groups) != 1:
        raise ValueError(f"kv_cache_config: {len(groups)} KV cache groups (a hybrid model); "
                         "the cxlkit connector handles one full-attention group")
    group = groups[0]
    spec = group.kv_cache_spec
    per_layer = getattr(spec, "kv_cache_specs", None)  # UniformTypeKVCacheSpecs
    if per_layer:
        distinct = {repr(s) for s in per_layer.values()}
        if len(distinct) != 1:
            raise ValueError("kv_cache_config: layers with different KV cache specs")
        spec = next(iter(per_layer.values()))
    kind = type(spec).__name__
    if "MLA" in kind or not hasattr(spec, "num_kv_heads"):
        raise ValueError(f"kv cache spec {kind}: the cxlkit connector handles K/V attention "
                         "caches (not MLA, Mamba or other states)")
    for attr in ("num_head_slots", "state_content_bytes"):
        if getattr(spec, attr, None) is not None:
            raise ValueError(f"kv cache spec {kind}: packed pages ({attr} set) are not supported")
    if getattr(spec, "tokens_per_state", 1) != 1:
        raise ValueError(f"kv cache spec {kind}: compressed states are not supported")
    hv = getattr(spec, "head_size_v", None) or spec.head_size
    if hv != spec.head_size:
        raise ValueError(f"kv cache spec {kind}: head_size {spec.head_size} != head_size_v {hv}")
    names = sorted(group.layer_names, key=layer_index)
    return BlockLayout(num_layers=len(names), num_kv_heads=spec.num_kv_heads,
                       head_dim=spec.head_size, dtype=_dtype_name(spec.dtype),
                       block_tokens=spec.block_size, kv_parts=2), names


def _layout_from_model(cfg: Any) -> BlockLayout:
    mc, pc, cc = cfg.model_config, cfg.parallel_config, cfg.cache_config
    if getattr(mc, "use_mla", False):
        raise ValueError("model uses MLA: the cxlkit connector handles K/V attention caches")
    dtype = cc.cache_dtype if cc.cache_dtype not in (None, "auto") else mc.dtype
    dtype = _VLLM_DTYPES.get(str(dtype), _dtype_name(dtype))
    return BlockLayout(num_layers=mc.get_num_layers(pc), num_kv_heads=mc.get_num_kv_heads(pc),
                       head_dim=mc.get_head_size(), dtype=dtype, block_tokens=cc.block_size,
                       kv_parts=2)


def _backend_name(vllm_config: Any, layer_names: list[str]) -> str:
    from vllm.distributed.kv_transfer.kv_connector.utils import get_current_attn_backends

    names = {b.get_name() for b in get_current_attn_backends(vllm_config, layer_names or None)}
    if len(names) != 1:
        raise ValueError(f"attention backends {sorted(names)}: the cxlkit connector needs one")
    return names.pop()


def page_format(vllm_config: Any, layer_names: list[str], layout: BlockLayout,
                extra: dict) -> PageFormat:
    """The page encoding of the engine's attention backend (extra_config "attn_backend" names
    the backend instead of asking vLLM)."""
    name = extra.get("attn_backend") or _backend_name(vllm_config, layer_names)
    if name == "CPU_ATTN":
        isa = extra.get("cpu_attn_isa")
        if isa is None:
            from vllm.v1.attention.backends.cpu_attn import _get_attn_isa

            isa = _get_attn_isa(getattr(torch, layout.dtype), layout.block_tokens,
                                layout.head_dim, vllm_config.cache_config.cache_dtype)
        return PageFormat(f"CPU_ATTN.{isa}")
    return PageFormat(str(name))


def split_kv(t: Any, layout: BlockLayout, what: str = "KV cache") -> Any:
    """A 5-D view [B, H, N, 2, D] of one layer's [B, H, N, C] page view: each row's two halves
    (K and V for dense backends; the backend's own encoding otherwise). Any strides, as long
    as a row is contiguous."""
    if not isinstance(t, torch.Tensor) or t.dim() != 4:
        raise ValueError(f"{what}: expected vLLM's 4-D [blocks, heads, tokens, K+V] view, got "
                         f"{tuple(getattr(t, 'shape', ()))}")
    B, H, N, C = t.shape
    D = layout.head_dim
    want = (layout.num_kv_heads, layout.block_tokens, 2 * D)
    if (H, N, C) != want:
        raise ValueError(f"{what}: page shape {(H, N, C)}, the KV cache spec gives {want}")
    if _dtype_name(t.dtype) != layout.dtype:
        raise ValueError(f"{what}: dtype {_dtype_name(t.dtype)}, the spec gives {layout.dtype}")
    sB, sH, sN, sC = t.stride()
    if sC != 1:
        raise ValueError(f"{what}: content (K+V) axis is not contiguous (stride {sC})")
    return t.as_strided((B, H, N, 2, D), (sB, sH, sN, D, 1), t.storage_offset())


class PageEngine:
    """Block copies between vLLM's per-layer pages and the pool.

    Host pages: one native copy plan over the pages themselves. Device pages (or staging=True):
    a host staging buffer of staging_blocks blocks per layer (pinned when CUDA is there); a load
    fills it from the pool, then torch copies it into the device blocks; a save copies device
    blocks into it, then puts it into the pool. Same code for CPU tensors, which is how it is
    tested here: it has not met a GPU."""

    def __init__(self, layout: BlockLayout, tensors: Sequence[Any], fmt: PageFormat, *,
                 staging: bool | None = None, staging_blocks: int = 64) -> None:
        if len(tensors) != layout.num_layers:
            raise ValueError(f"{len(tensors)} KV cache tensors for {layout.num_layers} layers")
        if staging_blocks <= 0:
            raise ValueError(f"staging_blocks: must be > 0, got {staging_blocks}")
        self.layout, self.format = layout, fmt
        self.pages = list(tensors)
        views = [split_kv(t, layout, f"KV cache of layer {i}") for i, t in enumerate(tensors)]
        on_device = any(t.device.type != "cpu" for t in tensors)
        self.num_blocks = min(t.shape[0] for t in tensors)
        self.staged = bool(staging) or on_device
        if not self.staged:
            self.engine = EngineTensors.per_layer(layout, views, AXES)
            return
        pin = on_device and torch.cuda.is_available()
        shape = (staging_blocks, *tensors[0].shape[1:])
        self.stage = [torch.empty(shape, dtype=t.dtype, pin_memory=pin) for t in tensors]
        self.engine = EngineTensors.per_layer(
            layout, [split_kv(s, layout, "staging buffer") for s in self.stage], AXES)

    def _check(self, keys: Sequence[bytes], block_ids: Sequence[int]) -> list[int]:
        ids = [int(b) for b in block_ids]
        if len(ids) != len(keys):
            raise ValueError(f"{len(keys)} keys but {len(ids)} block ids")
        if ids and (min(ids) < 0 or max(ids) >= self.num_blocks):
            raise IndexError(f"block ids must be in [0, {self.num_blocks})")
        return ids

    def load(self, store: Any, keys: Sequence[bytes], block_ids: Sequence[int]) -> int:
        """Load the leading pooled blocks keys[0..k) into block_ids; returns k."""
        if not self.staged:
            return store.get(keys, self.engine, block_ids)
        ids, step, done = self._check(keys, block_ids), self.stage[0].shape[0], 0
        for a in range(0, len(ids), step):
            chunk = ids[a:a + step]
            n = store.get(keys[a:a + len(chunk)], self.engine, range(len(chunk)))
            if n:
                dev = self.pages[0].device
                idx = torch.tensor(chunk[:n], dtype=torch.long, device=dev)
                for page, st in zip(self.pages, self.stage):
                    page.index_copy_(0, idx, st[:n].to(dev))  # blocking: the buffer is reused
            done += n
            if n < len(chunk):
                break
        return done

    def save(self, store: Any, keys: Sequence[bytes], block_ids: Sequence[int]) -> int:
        """Store block_ids under keys; returns how many blocks were new."""
        if not self.staged:
            return store.put(keys, self.engine, block_ids)
        ids, step, stored = self._check(keys, block_ids), self.stage[0].shape[0], 0
        for a in range(0, len(ids), step):
            chunk = ids[a:a + step]
            idx = torch.tensor(chunk, dtype=torch.long, device=self.pages[0].device)
            for page, st in zip(self.pages, self.stage):
                st[:len(chunk)].copy_(page.index_select(0, idx))
            stored += store.put(keys[a:a + len(chunk)], self.engine, range(len(chunk)))
        return stored
