"""vLLM KV connector (KVConnectorBase_V1) over the cxlkit KV pool, loaded out of tree with

    --kv-transfer-config '{"kv_connector": "CxlkitConnector", "kv_role": "kv_both",
      "kv_connector_module_path": "cxlkit.integrations.vllm",
      "kv_connector_extra_config": {"pool": "/dev/shm/cxlkit-kv", "create": true,
                                    "size": 68719476736}}'

Scheduler side: matched tokens = leading pooled blocks of the request's prompt (keys are vLLM's
own request.block_hashes); state after allocation; metadata naming blocks to load and to save.
Worker side: blocks load synchronously in start_load_kv (one batched native call per request),
saves happen in wait_for_save (a block object holds every layer, so it is written once all
layers ran); blocks that fail to load are reported by get_block_ids_with_load_errors and vLLM
recomputes them. The copy engine needs host memory: vLLM's CPU backend, or CPU staging.
Importable without vLLM: a minimal stand-in base class is used then (tests drive it with a fake).
"""
from __future__ import annotations

import enum
import hashlib
import logging
import re
from dataclasses import dataclass, field
from typing import Any

from ..kv import block_hashes
from ..kv.hashing import HASH_ALGOS
from ..kv.layout import BlockLayout, EngineTensors
from ..kv.store import Store

log = logging.getLogger("cxlkit")

try:  # the real base when vLLM is installed
    from vllm.distributed.kv_transfer.kv_connector.v1.base import (  # type: ignore
        KVConnectorBase_V1, KVConnectorMetadata, KVConnectorRole)

    HAVE_VLLM = True
except ImportError:  # the same surface, for use and tests without vLLM
    HAVE_VLLM = False

    class KVConnectorRole(enum.Enum):  # type: ignore[no-redef]
        SCHEDULER = 0
        WORKER = 1

    class KVConnectorMetadata:  # type: ignore[no-redef]
        pass

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


@dataclass
class _Req:
    request: Any
    block_ids: list[int] = field(default_factory=list)
    prompt_len: int = 0
    saved_blocks: int = 0
    load: tuple[int, int] | None = None  # block range to load at the next step


_VLLM_DTYPES = {"fp8": "float8_e4m3fn", "fp8_e4m3": "float8_e4m3fn", "fp8_e5m2": "float8_e5m2"}


def _layout_from_config(cfg: Any, extra: dict) -> BlockLayout:
    if "layout" in extra:  # explicit: {"num_layers":..., "num_kv_heads":..., "head_dim":..., ...}
        return BlockLayout(**extra["layout"])
    mc, pc, cc = cfg.model_config, cfg.parallel_config, cfg.cache_config
    mla = bool(getattr(mc, "use_mla", False))
    dtype = cc.cache_dtype if cc.cache_dtype not in (None, "auto") else mc.dtype
    dtype = _VLLM_DTYPES.get(str(dtype), str(dtype).removeprefix("torch."))
    return BlockLayout(num_layers=mc.get_num_layers(pc),
                       num_kv_heads=1 if mla else mc.get_num_kv_heads(pc),
                       head_dim=mc.get_head_size(), dtype=dtype, block_tokens=cc.block_size,
                       kv_parts=1 if mla else 2)


def _layer_index(name: str) -> int:
    nums = re.findall(r"\.(\d+)\.", f".{name}.")
    if not nums:
        raise ValueError(f"kv cache layer {name!r}: no layer index in the name")
    return int(nums[0])


class CxlkitConnector(KVConnectorBase_V1):
    def __init__(self, vllm_config: Any, role: Any, kv_cache_config: Any = None) -> None:
        super().__init__(vllm_config, role, kv_cache_config)
        ktc = self._kv_transfer_config
        self._extra: dict = dict(getattr(ktc, "kv_connector_extra_config", None) or {})
        self._block_size = vllm_config.cache_config.block_size
        self._hash_algo = getattr(vllm_config.cache_config, "prefix_caching_hash_algo", "sha256")
        self._layout = _layout_from_config(vllm_config, self._extra)
        mc = vllm_config.model_config
        tp = vllm_config.parallel_config.tensor_parallel_size
        # one namespace per tensor-parallel shard: rank r stores its own heads
        base_ns = self._extra.get("namespace") or f"{getattr(mc, 'model', 'model')}|tp{tp}"
        rank = 0 if role == KVConnectorRole.SCHEDULER else self._tp_rank()
        self._store = Store(self._extra.get("pool", "/dev/shm/cxlkit-kv"), self._layout,
                            namespace=f"{base_ns}|r{rank}",
                            checksum=bool(self._extra.get("checksum", False)),
                            create=bool(self._extra.get("create", False)),
                            size=int(self._extra.get("size", 0)),
                            host_id=self._extra.get("host_id"),
                            coherence=self._extra.get("coherence", "host"),
                            capacity_bytes=self._extra.get("capacity_bytes"))
        self._reqs: dict[str, _Req] = {}
        self._local: dict[str, int] = {}  # request -> locally computed tokens at lookup
        self._engine: EngineTensors | None = None
        self._failed: set[int] = set()

    def _tp_rank(self) -> int:
        if "tp_rank" in self._extra:
            return int(self._extra["tp_rank"])
        if HAVE_VLLM:
            from vllm.distributed.parallel_state import get_tensor_model_parallel_rank

            return get_tensor_model_parallel_rank()
        return 0

    @property
    def store(self) -> Store:
        return self._store

    @property
    def prefer_cross_layer_blocks(self) -> bool:
        return bool(self._extra.get("cross_layer", False))

    # ---- keys --------------------------------------------------------------------------------
    def _keys(self, request: Any) -> list[bytes]:
        engine = list(getattr(request, "block_hashes", None) or [])
        if engine and all(isinstance(h, (bytes, bytearray)) for h in engine):
            # vLLM's own chain hashes: hits line up with its prefix cache; hashes that are not
            # 32 bytes (xxhash) still chain, so their SHA-256 is a key as good
            return [bytes(h) if len(h) == 32 else hashlib.sha256(h).digest() for h in engine]
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
        keys = self._keys(request)[:usable]
        hits = self._store.lookup(keys) if keys else 0
        new = hits * self._block_size - num_computed_tokens
        # vLLM sets request.num_computed_tokens only after update_state_after_alloc
        self._local[request.request_id] = num_computed_tokens
        return (new, False) if new > 0 else (0, False)

    def update_state_after_alloc(self, request: Any, blocks: Any, num_external_tokens: int) -> None:
        st = self._reqs.setdefault(request.request_id, _Req(request))
        st.prompt_len = len(request.prompt_token_ids or [])
        st.block_ids = list(blocks.get_block_ids()[0])
        local = self._local.pop(request.request_id, 0) // self._block_size
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
            if rid in resumed:
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
                st.load = None
            # prompt blocks whose KV exists once this step ran
            full = min(computed_after, st.prompt_len) // self._block_size
            full = min(full, len(keys), len(st.block_ids))
            if full > st.saved_blocks:
                meta.saves.append(BlockTransfer(rid, keys[st.saved_blocks:full],
                                                st.block_ids[st.saved_blocks:full]))
                st.saved_blocks = full
        return meta

    def request_finished(self, request: Any, block_ids: list[int]) -> tuple[bool, dict | None]:
        self._reqs.pop(request.request_id, None)
        return False, None  # saves are synchronous: vLLM may free the blocks now

    # ---- worker side ---------------------------------------------------------------------------
    def register_kv_caches(self, kv_caches: dict[str, Any]) -> None:
        names = sorted(kv_caches, key=_layer_index)
        tensors = [kv_caches[n] for n in names]
        self._engine = EngineTensors.per_layer(self._layout, tensors,
                                               self._extra.get("kv_axes") or self._axes(tensors[0]))

    def register_cross_layers_kv_cache(self, kv_cache: Any, attn_backend: Any) -> None:
        axes = self._extra.get("kv_axes")
        if not axes:
            lay = self._layout
            logical = "L" + ("KBTHD" if lay.kv_parts == 2 else "BTD")
            order = attn_backend.get_kv_cache_stride_order(include_num_layers_dimension=True)
            axes = "".join(logical[i] for i in order)  # kv_cache is in physical order
        self._engine = EngineTensors.cross_layer(self._layout, kv_cache, axes)

    def _axes(self, t: Any) -> str:
        lay = self._layout
        if t.dim() == 3:
            return "BTD"  # MLA: [num_blocks, block_size, head_size]
        if t.shape[0] == 2 and tuple(t.shape[2:]) == (lay.block_tokens, lay.num_kv_heads,
                                                      lay.head_dim):
            return "KBTHD"  # FlashAttention: [2, num_blocks, block_size, heads, head_size]
        if t.shape[0] == 2 and tuple(t.shape[2:]) == (lay.num_kv_heads, lay.block_tokens,
                                                      lay.head_dim):
            return "KBHTD"  # HND: [2, num_blocks, heads, block_size, head_size]
        if t.shape[1] == 2:
            return "BKTHD"  # [num_blocks, 2, block_size, heads, head_size]
        raise ValueError(f"kv cache shape {tuple(t.shape)}: unknown layout, set kv_axes in "
                         "kv_connector_extra_config")

    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        meta = self._get_connector_metadata()
        for t in meta.loads:
            try:
                n = self._store.get(t.keys, self._engine, t.block_ids)
            except (OSError, ValueError, IndexError) as e:
                log.warning("kv load of request %s failed: %s (recomputed)", t.req_id, e)
                n = 0
            self._failed.update(t.block_ids[n:])

    def wait_for_layer_load(self, layer_name: str) -> None:
        return  # start_load_kv loaded every layer already

    def save_kv_layer(self, layer_name: str, kv_layer: Any, attn_metadata: Any,
                      **kwargs: Any) -> None:
        return  # a pool block holds all layers of its tokens: stored in wait_for_save

    def wait_for_save(self) -> None:
        meta = self._get_connector_metadata()
        for t in meta.saves:
            try:
                self._store.put(t.keys, self._engine, t.block_ids)
            except (OSError, ValueError, IndexError) as e:
                log.warning("kv save of request %s failed: %s", t.req_id, e)

    def get_finished(self, finished_req_ids: set[str]) -> tuple[set[str] | None, set[str] | None]:
        return None, None  # loads and saves complete within the step

    def get_block_ids_with_load_errors(self) -> set[int]:
        failed, self._failed = self._failed, set()
        return failed

    def shutdown(self) -> None:
        self._store.close()
