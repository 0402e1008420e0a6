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
native call per request). Saves (a pool block holds every layer) are queued in wait_for_save
and copied by a background thread (vllm_saves.py) under vLLM's asynchronous-transfer contract:
request_finished asks vLLM to keep a finished request's blocks until get_finished reports its
saves done, and a step that reuses a block a queued save still reads waits for that save first
(extra_config "async_save": false saves within the step instead; "save_queue_blocks" bounds
the queue, past which a save runs on the engine's thread). Blocks that fail to load go to
vLLM through get_block_ids_with_load_errors, and with kv_load_failure_policy "recompute" vLLM
recomputes them (its default "fail" fails the request).
Device (GPU) caches go through a host staging copy (torch copies between device blocks and
staging buffers; extra_config "staging": true runs the same path on CPU tensors).
With vLLM's hybrid KV cache manager (SupportsHMA: e.g. full-attention and sliding-window
layers) each KV cache group has its own pool blocks under the same keys; a sliding-window group
loads and saves only the blocks inside its window. extra_config "level2" adds the level below
the pool (Mooncake Store: cxlkit.integrations.mooncake): evicted blocks go down to it, pool
misses come up from it.
"""
from __future__ import annotations

import hashlib
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from ..kv import block_hashes
from ..kv.hashing import HASH_ALGOS
from ..kv.layout import BlockLayout
from ..kv.level2 import Level2
from ..kv.store import Store
from .vllm_pages import AttentionGroup, PageEngine, attention_groups, layer_index, page_format
from .vllm_saves import SaveJob, SaveQueue, load_hook
from .vllm_stats import CxlkitConnectorStats

log = logging.getLogger("cxlkit")

from vllm.distributed.kv_transfer.kv_connector.v1.base import (  # type: ignore
    KVConnectorBase_V1, KVConnectorMetadata, KVConnectorRole, SupportsHMA)

try:
    from vllm.v1.metrics.cache_hit_source import CacheHitSource  # type: ignore
except ImportError:  # an older vLLM: no per-tier hit sources
    CacheHitSource = None

SHUTDOWN_FLUSH_S = 5.0  # at most this long for queued saves, then demotions, at shutdown
REUSE_WAIT_S = 30.0  # at most this long for the queue to reach a block vLLM reuses
FINISH_WAIT_S = 0.25  # a step waits at most this long for a finished request's saves
NULL_BLOCK = 0  # vLLM's null block (its block pool's first): stands for freed window blocks


@dataclass
class BlockTransfer:
    req_id: str
    keys: list[bytes]
    block_ids: list[int]
    group: int = 0  # KV cache group (hybrid models have several)


@dataclass
class CxlkitConnectorMetadata(KVConnectorMetadata):
    loads: list[BlockTransfer] = field(default_factory=list)
    saves: list[BlockTransfer] = field(default_factory=list)
    written: list[int] = field(default_factory=list)  # blocks this step may write (new ones)


@dataclass
class _Req:
    request: Any
    block_ids: list[list[int]] = field(default_factory=list)  # per KV cache group
    saved_blocks: int = 0
    load: tuple[int, int] | None = None  # block range to load at the next step
    local_blocks: int = 0  # blocks vLLM's own prefix cache had: read, never written
    saving: bool = False  # saves were sent to the worker: its blocks wait for them


def _tp(vllm_config: Any) -> int:
    return int(getattr(vllm_config.parallel_config, "tensor_parallel_size", 1) or 1)


def _level2(extra: dict) -> Level2 | None:
    cfg = extra.get("level2")
    if not cfg:
        return None
    if not isinstance(cfg, dict):
        raise ValueError(f"kv_connector_extra_config level2: expected a dict, got {cfg!r}")
    from .mooncake import open_level2

    return open_level2(cfg)


class CxlkitConnector(KVConnectorBase_V1, SupportsHMA):
    if CacheHitSource is not None:
        _cache_hit_source = CacheHitSource.HOST  # pool memory: host DRAM or CXL

    def __init__(self, vllm_config: Any, role: Any, kv_cache_config: Any = None) -> None:
        super().__init__(vllm_config, role, kv_cache_config)
        ktc = self._kv_transfer_config
        self._extra: dict = dict(getattr(ktc, "kv_connector_extra_config", None) or {})
        self._groups: list[AttentionGroup] = attention_groups(vllm_config, kv_cache_config)
        self._layout: BlockLayout = self._groups[0].layout
        self._layer_names = self._groups[0].layer_names
        self._block_size = self._layout.block_tokens
        cc = vllm_config.cache_config
        hash_bs = (getattr(kv_cache_config, "hash_block_size", None)
                   or getattr(cc, "hash_block_size", None) or self._block_size)
        if self._block_size % hash_bs:
            raise ValueError(f"hash_block_size {hash_bs} does not divide the block size "
                             f"{self._block_size}")
        self._hashes_per_block = self._block_size // hash_bs
        self._hash_algo = getattr(cc, "prefix_caching_hash_algo", "sha256")
        all_names = [n for g in self._groups for n in g.layer_names]
        self._format = page_format(vllm_config, all_names, self._layout, self._extra)
        self._level2 = _level2(self._extra)
        self._stats_lock = threading.Lock()
        self._async = bool(self._extra.get("async_save", True))
        self._io = threading.Lock()  # the stores and staging buffers: one copy at a time
        self._saves: SaveQueue | None = None
        self._counted = (0, 0, 0, 0)  # the save queue's counts already in _stats
        self._saving: set[str] = set()  # worker: requests with saves sent, not yet reported
        self._finishing: set[str] = set()  # of those, finished in vLLM
        self._held: set[str] = set()  # scheduler: requests whose blocks vLLM keeps for us
        self._stores: list[Store] = []
        try:
            for i in range(len(self._groups)):
                self._stores.append(self._open_store(vllm_config, role, i))
        except BaseException:
            self.shutdown()
            raise
        self._store = self._stores[0]
        self._reqs: dict[str, _Req] = {}
        self._local: dict[str, int] = {}  # request -> locally computed tokens at lookup
        self._engines: list[PageEngine] = []
        self._failed: set[int] = set()
        self._stats = CxlkitConnectorStats()

    def _open_store(self, vllm_config: Any, role: Any, group: int) -> Store:
        mc, x = vllm_config.model_config, self._extra
        # one namespace per (model, TP shard, page format, KV cache group): rank r stores its
        # own heads, and engines whose backends encode pages differently never read each
        # other's blocks
        base_ns = x.get("namespace") or (
            f"{getattr(mc, 'model', 'model')}|tp{_tp(vllm_config)}|{self._format.name}")
        if len(self._groups) > 1:
            base_ns += f"|g{group}"
        rank = 0 if role == KVConnectorRole.SCHEDULER else self._tp_rank()
        pool: Any = x.get("pool", "/dev/shm/cxlkit-kv")
        if group:  # later groups share the first store's pool handle
            pool = self._stores[0].pool
        return Store(pool, self._groups[group].layout, namespace=f"{base_ns}|r{rank}",
                     checksum=bool(x.get("checksum", False)),
                     create=bool(x.get("create", False)) and not group,
                     size=int(x.get("size", 0)), host_id=x.get("host_id"),
                     coherence=x.get("coherence", "host"),
                     capacity_bytes=x.get("capacity_bytes"),
                     max_hosts=int(x.get("max_hosts", 0)), level2=self._level2)

    def _tp_rank(self) -> int:
        if "tp_rank" in self._extra:
            return int(self._extra["tp_rank"])
        try:
            from vllm.distributed import parallel_state as ps
        except ImportError:  # a stand-in vLLM (tests): one rank
            return 0
        # a worker's groups exist before its connector; a connector made outside one (no
        # tensor parallel group) is the only rank
        if ps.model_parallel_is_initialized():
            return ps.get_tensor_model_parallel_rank()
        return 0

    @property
    def store(self) -> Store:
        return self._store

    @property
    def stores(self) -> list[Store]:
        """One store per KV cache group."""
        return list(self._stores)

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
    def _hits(self, keys: list[bytes], local: int) -> int:
        """Leading blocks of keys (those after the `local` ones) that every group can load:
        all of them for full attention, those inside the window for a sliding one."""
        n = len(keys)
        for g, st in zip(self._groups, self._stores):
            if g.window is None:
                n = min(n, st.lookup(keys[:n]) if n else 0)
        for g, st in zip(self._groups, self._stores):
            while g.window is not None and n > 0:
                first = max(0, g.first_needed_block((local + n) * self._block_size) - local)
                if st.lookup(keys[first:n]) == n - first:
                    break
                n -= 1
        return n

    def get_num_new_matched_tokens(self, request: Any,
                                   num_computed_tokens: int) -> tuple[int | None, bool]:
        prompt_len = len(request.prompt_token_ids or [])
        # vLLM must compute at least the last prompt token itself (its logits)
        usable = max(0, (prompt_len - 1) // self._block_size)
        local = num_computed_tokens // self._block_size
        self._local[request.request_id] = num_computed_tokens
        if usable <= local:
            return 0, False
        hits = self._hits(self._keys(request)[local:usable], local)
        return (hits * self._block_size, False) if hits else (0, False)

    def update_state_after_alloc(self, request: Any, blocks: Any, num_external_tokens: int) -> None:
        st = self._reqs.setdefault(request.request_id, _Req(request))
        st.request = request
        st.block_ids = [list(ids) for ids in blocks.get_block_ids()]
        local = self._local.pop(request.request_id, 0) // self._block_size
        st.local_blocks = local
        st.load = None
        if num_external_tokens > 0:
            # the allocation starts with the locally cached blocks, then ours
            st.load = (local, local + num_external_tokens // self._block_size)

    def _transfers(self, rid: str, st: _Req, keys: list[bytes], a: int, b: int,
                   load: bool) -> list[BlockTransfer]:
        """Blocks a..b of each group; a sliding-window group's loads start at its window, and
        window blocks vLLM already freed (the null block) are neither loaded nor saved."""
        out = []
        for gi, g in enumerate(self._groups):
            ids = st.block_ids[gi] if gi < len(st.block_ids) else []
            lo = max(a, g.first_needed_block(b * self._block_size)) if load else a
            pairs = [(keys[i], ids[i]) for i in range(lo, min(b, len(ids)))
                     if g.window is None or ids[i] != NULL_BLOCK]
            if pairs:
                out.append(BlockTransfer(rid, [k for k, _ in pairs], [i for _, i in pairs], gi))
        return out

    def _new_blocks(self, st: _Req, new_ids: Any, resumed: bool) -> list[int]:
        """Adds a step's new blocks to st; returns them (the blocks the step may write)."""
        if resumed:  # after a preemption: the block lists are new
            st.block_ids = [list(ids) for ids in new_ids] if new_ids else []
        elif new_ids:
            while len(st.block_ids) < len(new_ids):
                st.block_ids.append([])
            for have, new in zip(st.block_ids, new_ids):
                have.extend(new)
        return [b for ids in (new_ids or ()) for b in ids]

    def build_connector_meta(self, scheduler_output: Any) -> CxlkitConnectorMetadata:
        meta = CxlkitConnectorMetadata()
        steps: list[tuple[str, int]] = []
        for nr in scheduler_output.scheduled_new_reqs:
            st = self._reqs.get(nr.req_id)
            if st is None:
                continue
            st.block_ids = [list(ids) for ids in nr.block_ids]
            # blocks past vLLM's own prefix-cache hit are new to this request: it writes them
            meta.written += [b for ids in st.block_ids for b in ids[st.local_blocks:]]
            steps.append((nr.req_id, nr.num_computed_tokens
                          + scheduler_output.num_scheduled_tokens.get(nr.req_id, 0)))
        cached = scheduler_output.scheduled_cached_reqs
        resumed = getattr(cached, "resumed_req_ids", set())
        for i, rid in enumerate(cached.req_ids):
            st = self._reqs.get(rid)
            if st is None:
                continue
            meta.written += self._new_blocks(st, cached.new_block_ids[i], rid in resumed)
            steps.append((rid, cached.num_computed_tokens[i]
                          + scheduler_output.num_scheduled_tokens.get(rid, 0)))
        for rid, computed_after in steps:
            st = self._reqs[rid]
            keys = self._keys(st.request)
            if st.load is not None:
                a, b = st.load
                meta.loads += self._transfers(rid, st, keys, a, b, load=True)
                st.saved_blocks = max(st.saved_blocks, b)  # loaded blocks are in the pool
                st.load = None
            # full blocks (prompt or generated: keys exist only for known tokens) whose KV
            # exists once this step ran; wait_for_save stores them
            nblocks = min((len(ids) for ids in st.block_ids), default=0)
            full = min(computed_after // self._block_size, len(keys), nblocks)
            if full > st.saved_blocks:
                saves = self._transfers(rid, st, keys, st.saved_blocks, full, load=False)
                meta.saves += saves
                st.saving |= bool(saves)
                st.saved_blocks = full
        return meta

    def request_finished(self, request: Any, block_ids: list[int]) -> tuple[bool, dict | None]:
        st = self._reqs.pop(request.request_id, None)
        self._local.pop(request.request_id, None)
        if self._async and st is not None and st.saving:
            # the worker reports the request in get_finished once its saves are done, and
            # reports exactly the requests it got saves for: the ones marked here
            self._held.add(request.request_id)
            return True, None
        return False, None

    def update_connector_output(self, connector_output: Any) -> None:
        self._held.difference_update(connector_output.finished_sending or ())

    def has_pending_block_frees(self) -> bool:
        """Blocks of finished requests come back once their saves end: vLLM waits for them
        before it preempts a running request."""
        return bool(self._held)

    def request_finished_all_groups(self, request: Any, block_ids: tuple[list[int], ...]
                                    ) -> tuple[bool, dict | None]:
        return self.request_finished(request, list(block_ids[0]) if block_ids else [])

    def reset_cache(self) -> bool:
        """vLLM's reset_prefix_cache(reset_connector=True), e.g. after a weight update: this
        host's blocks of this model are stale, so they go."""
        for st in self._stores:
            st.clear()
        return True

    # ---- worker side ---------------------------------------------------------------------------
    def register_kv_caches(self, kv_caches: dict[str, Any]) -> None:
        self._engines = []
        for g in self._groups:
            names = g.layer_names or sorted(kv_caches, key=layer_index)
            missing = [n for n in names if n not in kv_caches]
            if missing:
                raise ValueError(f"register_kv_caches: no KV cache for layers {missing[:4]}")
            self._engines.append(PageEngine(
                g.layout, [kv_caches[n] for n in names], self._format,
                staging=self._extra.get("staging"),
                staging_blocks=int(self._extra.get("staging_blocks", 64))))
        if self._async and self._saves is None:
            self._saves = SaveQueue(self._save_job,
                                    max_blocks=int(self._extra.get("save_queue_blocks", 1024)),
                                    hook=load_hook(self._extra.get("save_hook")))

    @property
    def _engine(self) -> PageEngine | None:
        return self._engines[0] if self._engines else None

    def _engine_or_raise(self, group: int) -> PageEngine:
        if not self._engines:
            raise RuntimeError("CxlkitConnector: register_kv_caches was not called")
        return self._engines[group]

    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        meta = self._get_connector_metadata()
        if not meta.loads:
            return
        self._wait_written(meta)  # loads write their blocks too
        t0 = time.perf_counter()
        for t in meta.loads:
            try:
                with self._io:
                    n = self._engine_or_raise(t.group).load(self._stores[t.group], t.keys,
                                                            t.block_ids)
            except (OSError, ValueError, IndexError) as e:
                log.warning("kv load of request %s failed: %s (reported to vLLM)", t.req_id, e)
                n = 0
            self._failed.update(t.block_ids[n:])
            self._count(loaded_blocks=n, load_failed_blocks=len(t.block_ids) - n)
        self._count(load_s=time.perf_counter() - t0)

    def _count(self, **deltas: float) -> None:
        with self._stats_lock:
            for k, v in deltas.items():
                self._stats.data[k] += v

    def _wait_written(self, meta: Any) -> None:
        """Before vLLM writes this step's new blocks: no queued save may still read them
        (a block of a preempted request, or one a sliding window let go, comes back)."""
        written = getattr(meta, "written", None)
        if self._saves is not None and written:
            self._saves.wait_blocks(written, REUSE_WAIT_S)

    def handle_preemptions(self, kv_connector_metadata: Any) -> None:
        self._wait_written(kv_connector_metadata)  # called before the step touches a block

    def bind_connector_metadata(self, connector_metadata: Any) -> None:
        super().bind_connector_metadata(connector_metadata)
        self._wait_written(connector_metadata)

    def wait_for_layer_load(self, layer_name: str) -> None:
        return  # start_load_kv loaded every layer already

    def save_kv_layer(self, layer_name: str, kv_layer: Any, attn_metadata: Any,
                      **kwargs: Any) -> None:
        return  # a pool block holds all layers of its tokens: stored in wait_for_save

    def _save_job(self, job: SaveJob) -> int:
        with self._io:
            return self._engine_or_raise(job.group).save(self._stores[job.group], job.keys,
                                                         job.block_ids)

    def wait_for_save(self) -> None:
        """Queues the step's saves (the blocks stay vLLM's until get_finished says they are
        done); with async_save false, or the queue full, saves them here."""
        meta = self._get_connector_metadata()
        if not meta.saves:
            return
        t0 = time.perf_counter()
        for t in meta.saves:
            job = SaveJob(t.req_id, t.keys, t.block_ids, t.group)
            if self._saves is None:
                try:
                    self._count(saved_blocks=self._save_job(job))
                except (OSError, ValueError, IndexError) as e:
                    log.warning("kv save of request %s failed: %s", t.req_id, e)
                continue
            self._saving.add(t.req_id)
            if not self._saves.submit(job):
                self._saves.save_now(job)
        self._count(save_s=time.perf_counter() - t0)

    def wait_saves(self, timeout_s: float) -> bool:
        """Wait at most timeout_s until every queued save is done; whether it is (benchmarks
        and tests: a second engine reads what this one stored)."""
        return self._saves is None or self._saves.drain(timeout_s)

    def get_finished(self, finished_req_ids: set[str]) -> tuple[set[str] | None, set[str] | None]:
        """Finished requests whose saves are all done: vLLM frees their blocks now. Only
        requests this worker got saves for (those request_finished kept)."""
        if self._saves is None:
            return None, None
        self._finishing |= self._saving & set(finished_req_ids)
        # their tokens are out; waiting here (bounded) for the rest of their saves beats an
        # engine that steps empty, holding the GIL, until the save thread gets through
        self._saves.wait_requests(self._finishing, FINISH_WAIT_S)
        done = {r for r in self._finishing if not self._saves.pending(r)}
        self._finishing -= done
        self._saving -= done
        return done or None, None

    def get_block_ids_with_load_errors(self) -> set[int]:
        failed, self._failed = self._failed, set()
        return failed

    def get_kv_connector_stats(self) -> CxlkitConnectorStats | None:
        if self._saves is not None:
            c = self._saves.counts
            now = (c.saved, c.failed, c.sync, c.cancelled)
            d = [x - y for x, y in zip(now, self._counted)]
            self._counted = now
            self._count(saved_blocks=d[0], save_failed_blocks=d[1], save_sync_blocks=d[2],
                        save_cancelled_blocks=d[3])
        with self._stats_lock:
            if self._stats.is_empty():
                return None
            out, self._stats = self._stats, CxlkitConnectorStats()
        return out

    @classmethod
    def build_kv_connector_stats(cls, data: dict[str, Any] | None = None
                                 ) -> CxlkitConnectorStats:
        return CxlkitConnectorStats(data=dict(data or {}))

    def shutdown(self) -> None:
        saves, self._saves = self._saves, None
        if saves is not None:
            saves.close(SHUTDOWN_FLUSH_S)  # queued saves finish, or are abandoned (misses)
        for st in reversed(self._stores):
            st.close()
        if self._level2 is not None:
            self._level2.flush(SHUTDOWN_FLUSH_S)  # blocks just evicted still go down
            self._level2.close()
