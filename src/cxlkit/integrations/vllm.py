"""vLLM KV connector (KVConnectorBase_V1, vLLM >= 0.32) over the cxlkit KV pool, loaded out of
tree with

    --kv-transfer-config '{"kv_connector": "CxlkitConnector", "kv_role": "kv_both",
      "kv_connector_module_path": "cxlkit.integrations.vllm",
      "kv_load_failure_policy": "recompute",
      "kv_connector_extra_config": {"pool": "/dev/shm/cxlkit-kv", "create": true,
                                    "size": 8589934592, "host_id": 0}}'

Scheduler side (vLLM's EngineCore process): matched tokens = the leading pooled blocks of the
prompt past the engine's own prefix-cache hit; keys are vLLM's request.block_hashes (one per
vLLM block, the chain hash ending at its boundary), so engines that share a pool share hits.
Worker side (vLLM's Worker process): the layout comes from the engine itself — the attention
KV cache spec in kv_cache_config (block size, KV heads, head size, dtype), the per-layer page
views vLLM hands to register_kv_caches (their strides carry the physical layout) and the
attention backend's page encoding (vllm_pages.py). Loads are synchronous in start_load_kv (one
native call per request), saves happen in wait_for_save (a pool block holds every layer);
blocks that fail to load go to vLLM through get_block_ids_with_load_errors, and with
kv_load_failure_policy "recompute" vLLM recomputes them (its default "fail" fails the request).
Device (GPU) caches go through a host staging copy (torch copies between device blocks and
staging buffers; extra_config "staging": true runs the same path on CPU tensors).
Importable without vLLM: a minimal stand-in base class is used then (tests drive it with a fake).
"""
from __future__ import annotations

import enum
import hashlib
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from ..kv import block_hashes
from ..kv.hashing import HASH_ALGOS
from ..kv.layout import BlockLayout
from ..kv.store import Store
from .vllm_pages import PageEngine, attention_spec, layer_index, page_format

log = logging.getLogger("cxlkit")

try:  # the real base when vLLM is installed
    from vllm.distributed.kv_transfer.kv_connector.v1.base import (  # type: ignore
        KVConnectorBase_V1, KVConnectorMetadata, KVConnectorRole)
    from vllm.distributed.kv_transfer.kv_connector.v1.metrics import (  # type: ignore
        KVConnectorStats)

    try:
        from vllm.v1.metrics.cache_hit_source import CacheHitSource  # type: ignore
    except ImportError:  # an older vLLM: no per-tier hit sources
        CacheHitSource = None
    HAVE_VLLM = True
except ImportError:  # the same surface, for use and tests without vLLM
    HAVE_VLLM = False
    CacheHitSource = None

    class KVConnectorRole(enum.Enum):  # type: ignore[no-redef]
        SCHEDULER = 0
        WORKER = 1

    class KVConnectorMetadata:  # type: ignore[no-redef]
        pass

    @dataclass
    class KVConnectorStats:  # type: ignore[no-redef]
        data: dict[str, Any] = field(default_factory=dict)

    class KVConnectorBase_V1:  # type: ignore[no-redef]
        def __init__(self, vllm_config: Any, role: Any, kv_cache_config: Any = None) -> None:
            if vllm_config.kv_transfer_config is None:
                raise ValueError("kv_transfer_config must be set for KVConnectorBase_V1")
            self._connector_metadata = None
            self._vllm_config = vllm_config
            self._kv_transfer_config = vllm_config.kv_transfer_config
            self._kv_cache_config = kv_cache_config
            self._role = role

        @property
        def role(self) -> Any:
            return self._role

        def bind_connector_metadata(self, connector_metadata: Any) -> None:
            self._connector_metadata = connector_metadata

        def clear_connector_metadata(self) -> None:
            self._connector_metadata = None

        def _get_connector_metadata(self) -> Any:
            assert self._connector_metadata is not None
            return self._connector_metadata

        def has_connector_metadata(self) -> bool:
            return self._connector_metadata is not None


@dataclass
class BlockTransfer:
    req_id: str
    keys: list[bytes]
    block_ids: list[int]


@dataclass
class CxlkitConnectorMetadata(KVConnectorMetadata):
    loads: list[BlockTransfer] = field(default_factory=list)
    saves: list[BlockTransfer] = field(default_factory=list)


_STAT_KEYS = ("loaded_blocks", "load_failed_blocks", "saved_blocks", "load_s", "save_s")


@dataclass
class CxlkitConnectorStats(KVConnectorStats):
    """Worker-side transfer counters of one logging interval (vLLM sums them over workers and
    logs them; `vllm serve` shows them in its periodic stats line)."""

    def __post_init__(self) -> None:
        for k in _STAT_KEYS:
            self.data.setdefault(k, 0)

    def reset(self) -> None:
        self.data = {k: 0 for k in _STAT_KEYS}

    def aggregate(self, other: Any) -> CxlkitConnectorStats:
        for k in _STAT_KEYS:
            self.data[k] = self.data.get(k, 0) + other.data.get(k, 0)
        return self

    def reduce(self) -> dict[str, int | float]:
        return {k: self.data.get(k, 0) for k in _STAT_KEYS}

    def is_empty(self) -> bool:
        return not any(self.data.get(k) for k in _STAT_KEYS[:3])


@dataclass
class _Req:
    request: Any
    block_ids: list[int] = field(default_factory=list)
    saved_blocks: int = 0
    load: tuple[int, int] | None = None  # block range to load at the next step


def _tp(vllm_config: Any) -> int:
    return int(getattr(vllm_config.parallel_config, "tensor_parallel_size", 1) or 1)


class CxlkitConnector(KVConnectorBase_V1):
    if CacheHitSource is not None:
        _cache_hit_source = CacheHitSource.HOST  # pool memory: host DRAM or CXL

    def __init__(self, vllm_config: Any, role: Any, kv_cache_config: Any = None) -> None:
        super().__init__(vllm_config, role, kv_cache_config)
        ktc = self._kv_transfer_config
        self._extra: dict = dict(getattr(ktc, "kv_connector_extra_config", None) or {})
        spec, self._layer_names = attention_spec(vllm_config, kv_cache_config)
        self._layout: BlockLayout = spec
        self._block_size = spec.block_tokens
        cc = vllm_config.cache_config
        hash_bs = (getattr(kv_cache_config, "hash_block_size", None)
                   or getattr(cc, "hash_block_size", None) or self._block_size)
        if self._block_size % hash_bs:
            raise ValueError(f"hash_block_size {hash_bs} does not divide the block size "
                             f"{self._block_size}")
        self._hashes_per_block = self._block_size // hash_bs
        self._hash_algo = getattr(cc, "prefix_caching_hash_algo", "sha256")
        self._format = page_format(vllm_config, self._layer_names, spec, self._extra)
        mc = vllm_config.model_config
        # one namespace per (model, TP shard, page format): rank r stores its own heads, and
        # engines whose backends encode pages differently never read each other's blocks
        base_ns = self._extra.get("namespace") or (
            f"{getattr(mc, 'model', 'model')}|tp{_tp(vllm_config)}|{self._format.name}")
        rank = 0 if role == KVConnectorRole.SCHEDULER else self._tp_rank()
        self._store = Store(self._extra.get("pool", "/dev/shm/cxlkit-kv"), self._layout,
                            namespace=f"{base_ns}|r{rank}",
                            checksum=bool(self._extra.get("checksum", False)),
                            create=bool(self._extra.get("create", False)),
                            size=int(self._extra.get("size", 0)),
                            host_id=self._extra.get("host_id"),
                            coherence=self._extra.get("coherence", "host"),
                            capacity_bytes=self._extra.get("capacity_bytes"),
                            max_hosts=int(self._extra.get("max_hosts", 0)))
        self._reqs: dict[str, _Req] = {}
        self._local: dict[str, int] = {}  # request -> locally computed tokens at lookup
        self._engine: PageEngine | None = None
        self._failed: set[int] = set()
        self._stats = CxlkitConnectorStats()

    def _tp_rank(self) -> int:
        if "tp_rank" in self._extra:
            return int(self._extra["tp_rank"])
        if HAVE_VLLM:
            from vllm.distributed import parallel_state as ps

            # a worker's groups exist before its connector; a connector made outside one
            # (no tensor parallel group) is the only rank
            if ps.model_parallel_is_initialized():
                return ps.get_tensor_model_parallel_rank()
        return 0

    @property
    def store(self) -> Store:
        return self._store

    @property
    def layout(self) -> BlockLayout:
        return self._layout

    @property
    def requires_kv_delivery(self) -> bool:
        return False  # a cache: a save that did not happen is a later miss, nothing more

    # ---- keys --------------------------------------------------------------------------------
    def _keys(self, request: Any) -> list[bytes]:
        hashes = list(getattr(request, "block_hashes", None) or [])
        if hashes and all(isinstance(h, (bytes, bytearray)) for h in hashes):
            # vLLM's chain hash ending at each vLLM block's last token: hits line up with its
            # prefix cache; hashes that are not 32 bytes (xxhash) still chain, so their
            # SHA-256 is as good a key
            hpb = self._hashes_per_block
            ends = hashes[hpb - 1::hpb]
            return [bytes(h) if len(h) == 32 else hashlib.sha256(h).digest() for h in ends]
        if self._hash_algo not in HASH_ALGOS:
            raise ValueError(f"prefix_caching_hash_algo {self._hash_algo!r}: cxlkit computes "
                             f"{HASH_ALGOS} itself; others need the request's block_hashes")
        seed = str(self._extra.get("hash_seed", "0"))
        return block_hashes(request.all_token_ids, self._block_size, hash_algo=self._hash_algo,
                            seed=seed)

    # ---- scheduler side ------------------------------------------------------------------------
    def get_num_new_matched_tokens(self, request: Any,
                                   num_computed_tokens: int) -> tuple[int | None, bool]:
        prompt_len = len(request.prompt_token_ids or [])
        # vLLM must compute at least the last prompt token itself (its logits)
        usable = max(0, (prompt_len - 1) // self._block_size)
        local = num_computed_tokens // self._block_size
        self._local[request.request_id] = num_computed_tokens
        if usable <= local:
            return 0, False
        keys = self._keys(request)[local:usable]
        hits = self._store.lookup(keys) if keys else 0
        return (hits * self._block_size, False) if hits else (0, False)

    def update_state_after_alloc(self, request: Any, blocks: Any, num_external_tokens: int) -> None:
        st = self._reqs.setdefault(request.request_id, _Req(request))
        st.request = request
        st.block_ids = list(blocks.get_block_ids()[0])
        local = self._local.pop(request.request_id, 0) // self._block_size
        st.load = None
        if num_external_tokens > 0:
            # the allocation starts with the locally cached blocks, then ours
            st.load = (local, local + num_external_tokens // self._block_size)

    def build_connector_meta(self, scheduler_output: Any) -> CxlkitConnectorMetadata:
        meta = CxlkitConnectorMetadata()
        steps: list[tuple[str, int]] = []
        for nr in scheduler_output.scheduled_new_reqs:
            st = self._reqs.get(nr.req_id)
            if st is None:
                continue
            st.block_ids = list(nr.block_ids[0])
            steps.append((nr.req_id, nr.num_computed_tokens
                          + scheduler_output.num_scheduled_tokens.get(nr.req_id, 0)))
        cached = scheduler_output.scheduled_cached_reqs
        resumed = getattr(cached, "resumed_req_ids", set())
        for i, rid in enumerate(cached.req_ids):
            st = self._reqs.get(rid)
            if st is None:
                continue
            new_ids = cached.new_block_ids[i]
            if rid in resumed:  # after a preemption: the block list is new
                st.block_ids = list(new_ids[0]) if new_ids else []
            elif new_ids:
                st.block_ids.extend(new_ids[0])
            steps.append((rid, cached.num_computed_tokens[i]
                          + scheduler_output.num_scheduled_tokens.get(rid, 0)))
        for rid, computed_after in steps:
            st = self._reqs[rid]
            keys = self._keys(st.request)
            if st.load is not None:
                a, b = st.load
                meta.loads.append(BlockTransfer(rid, keys[a:b], st.block_ids[a:b]))
                st.saved_blocks = max(st.saved_blocks, b)  # loaded blocks are in the pool
                st.load = None
            # full blocks (prompt or generated: keys exist only for known tokens) whose KV
            # exists once this step ran; wait_for_save stores them
            full = min(computed_after // self._block_size, len(keys), len(st.block_ids))
            if full > st.saved_blocks:
                meta.saves.append(BlockTransfer(rid, keys[st.saved_blocks:full],
                                                st.block_ids[st.saved_blocks:full]))
                st.saved_blocks = full
        return meta

    def request_finished(self, request: Any, block_ids: list[int]) -> tuple[bool, dict | None]:
        self._reqs.pop(request.request_id, None)
        self._local.pop(request.request_id, None)
        return False, None  # saves are synchronous: vLLM may free the blocks now

    def reset_cache(self) -> bool:
        """vLLM's reset_prefix_cache(reset_connector=True), e.g. after a weight update: this
        host's blocks of this model are stale, so they go."""
        self._store.clear()
        return True

    # ---- worker side ---------------------------------------------------------------------------
    def register_kv_caches(self, kv_caches: dict[str, Any]) -> None:
        names = self._layer_names or sorted(kv_caches, key=layer_index)
        missing = [n for n in names if n not in kv_caches]
        if missing:
            raise ValueError(f"register_kv_caches: no KV cache for layers {missing[:4]}")
        self._engine = PageEngine(self._layout, [kv_caches[n] for n in names], self._format,
                                  staging=self._extra.get("staging"),
                                  staging_blocks=int(self._extra.get("staging_blocks", 64)))

    def _engine_or_raise(self) -> PageEngine:
        if self._engine is None:
            raise RuntimeError("CxlkitConnector: register_kv_caches was not called")
        return self._engine

    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        meta = self._get_connector_metadata()
        if not meta.loads:
            return
        engine = self._engine_or_raise()
        t0 = time.perf_counter()
        for t in meta.loads:
            try:
                n = engine.load(self._store, t.keys, t.block_ids)
            except (OSError, ValueError, IndexError) as e:
                log.warning("kv load of request %s failed: %s (reported to vLLM)", t.req_id, e)
                n = 0
            self._failed.update(t.block_ids[n:])
            self._stats.data["loaded_blocks"] += n
            self._stats.data["load_failed_blocks"] += len(t.block_ids) - n
        self._stats.data["load_s"] += time.perf_counter() - t0

    def wait_for_layer_load(self, layer_name: str) -> None:
        return  # start_load_kv loaded every layer already

    def save_kv_layer(self, layer_name: str, kv_layer: Any, attn_metadata: Any,
                      **kwargs: Any) -> None:
        return  # a pool block holds all layers of its tokens: stored in wait_for_save

    def wait_for_save(self) -> None:
        meta = self._get_connector_metadata()
        if not meta.saves:
            return
        engine = self._engine_or_raise()
        t0 = time.perf_counter()
        for t in meta.saves:
            try:
                self._stats.data["saved_blocks"] += engine.save(self._store, t.keys, t.block_ids)
            except (OSError, ValueError, IndexError) as e:
                log.warning("kv save of request %s failed: %s", t.req_id, e)
        self._stats.data["save_s"] += time.perf_counter() - t0

    def get_finished(self, finished_req_ids: set[str]) -> tuple[set[str] | None, set[str] | None]:
        return None, None  # loads and saves complete within the step

    def get_block_ids_with_load_errors(self) -> set[int]:
        failed, self._failed = self._failed, set()
        return failed

    def get_kv_connector_stats(self) -> CxlkitConnectorStats | None:
        if self._stats.is_empty():
            return None
        out, self._stats = self._stats, CxlkitConnectorStats()
        return out

    @classmethod
    def build_kv_connector_stats(cls, data: dict[str, Any] | None = None
                                 ) -> CxlkitConnectorStats:
        return CxlkitConnectorStats(data=dict(data or {}))

    def shutdown(self) -> None:
        self._store.close()
