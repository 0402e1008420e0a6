"""Prefix reuse for Hugging Face transformers: the KV of a prompt's full 16-token blocks goes
into the pool as blocks (keyed like vLLM), and a later request with the same prefix rebuilds its
DynamicCache from the pool and runs only the suffix. A model on a GPU works the same way: its KV
is staged through host memory on the way into the pool and back (the pool is host memory).

    pc = PrefixCache("/dev/shm/cxlkit-kv", model, create=True, size=1 << 30)
    tokens, info = generate(model, prompt_ids, pc, max_new_tokens=8)
"""
from __future__ import annotations

import hashlib
import inspect
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers import DynamicCache

from ..kv import block_hashes
from ..kv.layout import BlockLayout, EngineTensors
from ..kv.store import Store


def layout_for(config: Any, dtype: torch.dtype, block_tokens: int = 16) -> BlockLayout:
    """The BlockLayout of a decoder-only model config (Llama-style attributes)."""
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return BlockLayout(num_layers=config.num_hidden_layers, num_kv_heads=kv_heads,
                       head_dim=head_dim, dtype=str(dtype).removeprefix("torch."),
                       block_tokens=block_tokens)


def model_namespace(model: Any) -> str:
    """Default namespace: the model's name or path plus a hash of its config. Models with the
    same config but different weights must pass their own namespace."""
    cfg = model.config.to_dict()
    digest = hashlib.sha256(json.dumps(cfg, sort_keys=True, default=str).encode()).hexdigest()
    return f"{getattr(model, 'name_or_path', '') or cfg.get('model_type', 'model')}:{digest[:16]}"


class PrefixCache:
    """A Store for one model's DynamicCache blocks (batch size 1, full-attention layers)."""

    def __init__(self, pool: Any, model: Any, *, namespace: str | None = None,
                 dtype: torch.dtype | None = None, **store_kwargs: Any) -> None:
        param = next(model.parameters())
        self.dtype = dtype or param.dtype
        self.device = param.device  # where load() puts the KV: the model's device
        self.layout = layout_for(model.config, self.dtype)
        self.store = Store(pool, self.layout, namespace=namespace or model_namespace(model),
                           **store_kwargs)

    @property
    def block_tokens(self) -> int:
        return self.layout.block_tokens

    def _engine(self, keys: Sequence[torch.Tensor], values: Sequence[torch.Tensor],
                nblocks: int) -> EngineTensors:
        bt = self.block_tokens
        # [1, kv_heads, seq, head_dim] -> [kv_heads, blocks, block_tokens, head_dim] (a view)
        def blocked(t: torch.Tensor) -> torch.Tensor:
            return t[0, :, : nblocks * bt].view(t.shape[1], nblocks, bt, t.shape[3])

        return EngineTensors.per_layer_kv(self.layout, [blocked(k) for k in keys],
                                          [blocked(v) for v in values], axes="HBTD")

    def save(self, token_ids: Sequence[int], cache: DynamicCache) -> int:
        """Store the full blocks of token_ids whose KV is in cache; returns blocks newly stored."""
        keys = block_hashes(token_ids, self.block_tokens)
        n = min(len(keys), cache.get_seq_length() // self.block_tokens)
        if n == 0:
            return 0
        # staged in host memory when the model runs on a device (a no-op for CPU tensors)
        ks = [layer.keys.to("cpu").contiguous() for layer in cache.layers]
        vs = [layer.values.to("cpu").contiguous() for layer in cache.layers]
        if ks[0].shape[0] != 1:
            raise ValueError("PrefixCache.save: batch size must be 1")
        return self.store.put(keys[:n], self._engine(ks, vs, n), range(n))

    def load(self, token_ids: Sequence[int]) -> tuple[DynamicCache | None, int]:
        """A DynamicCache holding the longest pooled prefix of token_ids (whole blocks, always
        leaving at least one token to run) and its length in tokens; (None, 0) on a miss."""
        usable = (len(token_ids) - 1) // self.block_tokens
        keys = block_hashes(list(token_ids)[: usable * self.block_tokens], self.block_tokens)
        n = self.store.lookup(keys) if keys else 0
        if n == 0:
            return None, 0
        lay = self.layout
        shape = (1, lay.num_kv_heads, n * lay.block_tokens, lay.head_dim)
        ks = [torch.empty(shape, dtype=self.dtype) for _ in range(lay.num_layers)]
        vs = [torch.empty(shape, dtype=self.dtype) for _ in range(lay.num_layers)]
        got = self.store.get(keys[:n], self._engine(ks, vs, n), range(n))
        if got == 0:  # evicted or failed since lookup: a miss
            return None, 0
        ntok = got * lay.block_tokens
        if self.device.type != "cpu":  # into the model's device memory, in one copy per tensor
            ks = [k[:, :, :ntok].to(self.device) for k in ks]
            vs = [v[:, :, :ntok].to(self.device) for v in vs]
        # built from empty views, then handed the loaded tensors: DynamicCache(ddp_cache_data)
        # would torch.cat them onto empty ones, copying the whole prefix once more
        cache = DynamicCache(ddp_cache_data=[(k[:, :, :0], v[:, :, :0]) for k, v in zip(ks, vs)])
        for layer, k, v in zip(cache.layers, ks, vs):
            layer.keys, layer.values = k[:, :, :ntok], v[:, :, :ntok]
        return cache, ntok


@dataclass
class GenerateInfo:
    prefix_tokens: int         # tokens taken from the pool (or recomputed apart: split_at)
    ttft_s: float              # prompt in -> first token's logits out
    first_logits: torch.Tensor  # [vocab] fp32 logits of the first generated token
    stored_blocks: int         # blocks this call added to the pool


def _cache_arg(model: Any) -> str:
    """The name model.forward takes the KV cache by: "cache" from transformers 5.24 (where
    "past_key_values" is deprecated, to go in 5.40), "past_key_values" before."""
    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return "past_key_values"
    return "cache" if "cache" in params else "past_key_values"


def _forward(model: Any, ids: torch.Tensor, cache: Any,
             name: str | None = None) -> tuple[Any, Any]:
    """One forward with the cache passed and returned under the model's own name for it
    (`name`: _cache_arg(model), looked up once by a caller that runs many forwards)."""
    name = name or _cache_arg(model)
    out = model(input_ids=ids, use_cache=True, **{name: cache})
    return out, getattr(out, name)


@torch.no_grad()
def generate(model: Any, prompt_ids: Sequence[int], prefix_cache: PrefixCache | None,
             max_new_tokens: int = 8, *, save: bool = True,
             split_at: int = 0) -> tuple[list[int], GenerateInfo]:
    """Greedy decoding that takes the prompt's cached prefix from the pool (if any), runs only
    the rest, and stores the prompt's full blocks for later requests. Without a prefix cache,
    split_at > 0 recomputes the first split_at tokens in a forward of their own: the chunking a
    pooled hit of that length uses, so the two agree bit for bit (one forward over the whole
    prompt differs from any chunked prefill in the last bits of fp32 sums)."""
    prompt = [int(t) for t in prompt_ids]
    name = _cache_arg(model)
    device = next(model.parameters()).device
    t0 = time.perf_counter()
    cache, n = prefix_cache.load(prompt) if prefix_cache is not None else (None, 0)
    if cache is None:
        cache = DynamicCache()
        if split_at > 0:
            _forward(model, torch.tensor([prompt[:split_at]], device=device), cache, name)
            n = split_at
    ids = torch.tensor([prompt[n:]], dtype=torch.long, device=device)
    out, cache = _forward(model, ids, cache, name)
    logits = out.logits[0, -1].float()
    ttft = time.perf_counter() - t0
    stored = prefix_cache.save(prompt, cache) if (save and prefix_cache is not None) else 0
    tokens = []
    nxt = int(torch.argmax(logits))
    for _ in range(max_new_tokens):
        tokens.append(nxt)
        if len(tokens) == max_new_tokens:
            break
        out, cache = _forward(model, torch.tensor([[nxt]], device=device), cache, name)
        nxt = int(torch.argmax(out.logits[0, -1]))
    return tokens, GenerateInfo(n, ttft, logits, stored)
