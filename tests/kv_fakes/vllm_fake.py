"""A fake of the vLLM v1 engine as the KV connector sees it: the config objects, Request,
KVCacheBlocks, SchedulerOutput, and one engine step making the connector calls in vLLM's order
(scheduler: get_num_new_matched_tokens -> allocate -> update_state_after_alloc, then
build_connector_meta; worker: bind_connector_metadata, start_load_kv, per layer
wait_for_layer_load / attention / save_kv_layer, wait_for_save, get_finished,
get_block_ids_with_load_errors, clear_connector_metadata; request_finished when done).
Paged caches are shaped as vLLM 0.32 hands them to register_kv_caches (checked against the real
engine in tests/engines/test_kv_vllm_engine.py): one 4-D view [num_blocks, kv_heads, block_size,
2 * head_size] per layer, cut out of one flat buffer (layout LBHNC), K and V encoded as CPU_ATTN's
vec kernel does (per head: K transposed [head_size, block_size], then V [block_size, head_size]). The KV cache config carries a
FullAttentionSpec-like spec. Request.block_hashes are computed like vLLM's hasher (sha256 of
pickled (parent, tokens, extra)), written here apart from cxlkit.kv.hashing. The "attention"
writes K/V values that depend only on (layer, prefix tokens), so a loaded block must equal what
recompute would write.
"""
from __future__ import annotations

import hashlib
import pickle
from dataclasses import dataclass, field
from typing import Any

import torch


def vllm_block_hashes(tokens: list[int], block_size: int, seed: str = "0") -> list[bytes]:
    def h(x: Any) -> bytes:  # vllm.utils.hashing.sha256
        return hashlib.sha256(pickle.dumps(x, protocol=pickle.HIGHEST_PROTOCOL)).digest()

    parent, out = h(seed), []  # NONE_HASH for PYTHONHASHSEED=seed
    for i in range(len(tokens) // block_size):
        parent = h((parent, tuple(tokens[i * block_size:(i + 1) * block_size]), None))
        out.append(parent)
    return out


@dataclass
class ModelConfig:
    model: str = "fake/llama-tiny"
    num_layers: int = 3
    num_kv_heads: int = 2
    head_size: int = 16
    dtype: torch.dtype = torch.float32
    use_mla: bool = False

    def get_num_layers(self, parallel_config: Any) -> int:
        return self.num_layers

    def get_num_kv_heads(self, parallel_config: Any) -> int:
        return self.num_kv_heads // parallel_config.tensor_parallel_size

    def get_head_size(self) -> int:
        return self.head_size


@dataclass
class CacheConfig:
    block_size: int = 16
    cache_dtype: str = "auto"
    prefix_caching_hash_algo: str = "sha256"


@dataclass
class ParallelConfig:
    tensor_parallel_size: int = 1


@dataclass
class KVTransferConfig:
    kv_connector: str = "CxlkitConnector"
    kv_connector_module_path: str = "cxlkit.integrations.vllm"
    kv_role: str = "kv_both"
    kv_connector_extra_config: dict = field(default_factory=dict)

    def get_from_extra_config(self, key: str, default: Any) -> Any:
        return self.kv_connector_extra_config.get(key, default)

    @property
    def is_kv_producer(self) -> bool:
        return self.kv_role in ("kv_producer", "kv_both")


@dataclass
class VllmConfig:
    model_config: ModelConfig
    cache_config: CacheConfig
    parallel_config: ParallelConfig
    kv_transfer_config: KVTransferConfig


@dataclass
class Request:
    request_id: str
    prompt_token_ids: list[int]
    block_size: int = 16
    num_computed_tokens: int = 0
    block_hashes: list[bytes] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.block_hashes = vllm_block_hashes(self.prompt_token_ids, self.block_size)

    @property
    def all_token_ids(self) -> list[int]:
        return self.prompt_token_ids

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids)


@dataclass
class KVCacheBlocks:
    ids: list[int]

    def get_block_ids(self) -> tuple[list[int], ...]:
        return (list(self.ids),)


@dataclass
class NewRequestData:
    req_id: str
    prompt_token_ids: list[int]
    block_ids: tuple[list[int], ...]
    num_computed_tokens: int


@dataclass
class CachedRequestData:
    req_ids: list[str] = field(default_factory=list)
    resumed_req_ids: set[str] = field(default_factory=set)
    new_block_ids: list = field(default_factory=list)
    num_computed_tokens: list[int] = field(default_factory=list)


@dataclass
class SchedulerOutput:
    scheduled_new_reqs: list[NewRequestData]
    scheduled_cached_reqs: CachedRequestData
    num_scheduled_tokens: dict[str, int]
    finished_req_ids: set[str] = field(default_factory=set)
    kv_connector_metadata: Any = None


@dataclass
class ForwardContext:
    attn_metadata: dict
    no_compile_layers: dict


@dataclass(frozen=True)
class FullAttentionSpec:  # the fields of vllm.v1.kv_cache_interface.FullAttentionSpec used
    block_size: int
    num_kv_heads: int
    head_size: int
    dtype: torch.dtype
    head_size_v: int | None = None


@dataclass(frozen=True)
class SlidingWindowSpec:  # vllm.v1.kv_cache_interface.SlidingWindowSpec: blocks outside the
    block_size: int       # window are freed (the null block takes their place)
    num_kv_heads: int
    head_size: int
    dtype: torch.dtype
    sliding_window: int
    head_size_v: int | None = None


@dataclass
class KVCacheGroupSpec:
    layer_names: list[str]
    kv_cache_spec: Any


@dataclass
class KVCacheConfig:
    num_blocks: int
    kv_cache_groups: list[KVCacheGroupSpec]
    hash_block_size: int | None = None


def cpu_attn_pages(layers: int, num_blocks: int, heads: int, block_size: int, dim: int,
                   dtype: torch.dtype) -> list[torch.Tensor]:
    """Per-layer [B, H, N, 2D] views of one flat buffer, layer-major (vLLM's LBHNC)."""
    page = heads * block_size * 2 * dim
    flat = torch.zeros(layers * num_blocks * page, dtype=dtype)
    return [flat[i * num_blocks * page:(i + 1) * num_blocks * page].view(
        num_blocks, heads, block_size, 2 * dim) for i in range(layers)]


def cpu_attn_kv(page: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """K and V of a [B, H, N, 2D] page as CPU_ATTN's vec kernel stores them, each viewed as
    [B, H, N, D]: per head, K transposed ([D, N]) then V ([N, D])."""
    B, H, N, _ = page.shape
    halves = page.view(B, H, 2, N * dim)
    return halves[:, :, 0].view(B, H, dim, N).transpose(2, 3), halves[:, :, 1].view(B, H, N, dim)


class Recorder:
    """Wraps a connector; records every call the engine makes, in order."""

    def __init__(self, inner: Any, log: list) -> None:
        self._inner, self._log = inner, log

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr):
            return attr

        def call(*a: Any, **kw: Any) -> Any:
            self._log.append(name)
            return attr(*a, **kw)

        return call


def kv_value(layer: int, part: int, prefix: tuple, heads: int, dim: int) -> torch.Tensor:
    """The K (part 0) or V (part 1) of the last token of prefix at one layer: [heads, dim]."""
    seed = int.from_bytes(hashlib.sha256(repr((layer, part, prefix)).encode()).digest()[:8],
                          "little")
    g = torch.Generator().manual_seed(seed)
    return torch.randn(heads, dim, generator=g)


class FakeEngine:
    """One vLLM engine (scheduler + one worker) with a paged KV cache."""

    def __init__(self, extra: dict, num_blocks: int = 24, model: ModelConfig | None = None,
                 block_size: int = 16, with_kv_cache_config: bool = True) -> None:
        from kv_fakes.vllm_base import import_connector

        conn = import_connector()
        CxlkitConnector, KVConnectorRole = conn.CxlkitConnector, conn.KVConnectorRole

        self.model = m = model or ModelConfig()
        self.bs = block_size
        extra = {"attn_backend": "CPU_ATTN", "cpu_attn_isa": "vec", **extra}
        self.cfg = VllmConfig(m, CacheConfig(block_size=block_size), ParallelConfig(),
                              KVTransferConfig(kv_connector_extra_config=extra))
        self.layer_names = [f"model.layers.{i}.self_attn.attn" for i in range(m.num_layers)]
        spec = FullAttentionSpec(block_size, m.num_kv_heads, m.head_size, m.dtype)
        kcc = (KVCacheConfig(num_blocks, [KVCacheGroupSpec(list(self.layer_names), spec)])
               if with_kv_cache_config else None)
        self.calls: list[str] = []
        self.sched = Recorder(CxlkitConnector(self.cfg, KVConnectorRole.SCHEDULER, kcc),
                              self.calls)
        self.worker = Recorder(CxlkitConnector(self.cfg, KVConnectorRole.WORKER, kcc), self.calls)
        pages = cpu_attn_pages(m.num_layers, num_blocks, m.num_kv_heads, block_size,
                               m.head_size, m.dtype)
        self.kv = dict(zip(self.layer_names, pages))
        self.worker.register_kv_caches(self.kv)
        self.free = list(range(num_blocks - 1, -1, -1))
        self.computed_positions: dict[str, list[int]] = {}
        self.invalid_block_ids: set[int] = set()
        self.before_worker = None  # test hook: runs between scheduling and the worker step
        self.settle = True  # step() waits for the saves it queued

    def step(self, req: Request) -> SchedulerOutput:
        """Schedule req's whole prompt in one step (local prefix cache off), run the worker."""
        ext, is_async = self.sched.get_num_new_matched_tokens(req, 0)
        assert not is_async and ext % self.bs == 0
        nblk = -(-req.num_tokens // self.bs)
        ids = [self.free.pop() for _ in range(nblk)]
        self.sched.update_state_after_alloc(req, KVCacheBlocks(ids), ext)
        req.num_computed_tokens = ext
        so = SchedulerOutput([NewRequestData(req.request_id, req.prompt_token_ids, (ids,), ext)],
                             CachedRequestData(), {req.request_id: req.num_tokens - ext})
        so.kv_connector_metadata = self.sched.build_connector_meta(so)
        if self.before_worker:
            self.before_worker()
        self._execute(so, {req.request_id: (req, ids)})
        if self.settle:  # the step's saves land before the test looks at the pool
            assert self.worker._inner.wait_saves(30)
        return so

    def _execute(self, so: SchedulerOutput, reqs: dict) -> None:
        w, m = self.worker, self.model
        w.bind_connector_metadata(so.kv_connector_metadata)
        ctx = ForwardContext({n: object() for n in self.layer_names}, {})
        w.start_load_kv(ctx)
        positions = {}
        for rid, (req, ids) in reqs.items():
            start = so.scheduled_new_reqs[0].num_computed_tokens
            positions[rid] = list(range(start, req.num_tokens))
        for li, name in enumerate(self.layer_names):
            w.wait_for_layer_load(name)
            for rid, (req, ids) in reqs.items():
                self._attend(li, name, req, ids, positions[rid])
            w.save_kv_layer(name, self.kv[name], ctx.attn_metadata[name])
        w.wait_for_save()
        w.get_finished(so.finished_req_ids)
        bad = w.get_block_ids_with_load_errors()
        w.clear_connector_metadata()
        if bad:  # vLLM recomputes from the first invalid block on (next step); same effect
            self.invalid_block_ids |= bad
            for rid, (req, ids) in reqs.items():
                first = min(i for i, b in enumerate(ids) if b in bad) * self.bs
                redo = list(range(first, positions[rid][0]))
                for li, name in enumerate(self.layer_names):
                    self._attend(li, name, req, ids, redo)
                positions[rid] = redo + positions[rid]
        self.computed_positions.update(positions)

    def _attend(self, li, name, req, ids, positions) -> None:
        m = self.model
        for p in positions:
            blk, off = ids[p // self.bs], p % self.bs
            kv = cpu_attn_kv(self.kv[name], m.head_size)
            for part in (0, 1):
                kv[part][blk, :, off] = kv_value(li, part, tuple(req.prompt_token_ids[:p + 1]),
                                                   m.num_kv_heads, m.head_size)

    def finish(self, req: Request, ids: list[int] | None = None) -> None:
        self.sched.request_finished(req, ids or [])

    def block_matches_recompute(self, req: Request, ids: list[int], i: int) -> bool:
        m = self.model
        for li, name in enumerate(self.layer_names):
            kv = cpu_attn_kv(self.kv[name], m.head_size)
            for off in range(self.bs):
                p = i * self.bs + off
                for part in (0, 1):
                    want = kv_value(li, part, tuple(req.prompt_token_ids[:p + 1]),
                                    m.num_kv_heads, m.head_size)
                    if not torch.equal(kv[part][ids[i], :, off], want):
                        return False
        return True
