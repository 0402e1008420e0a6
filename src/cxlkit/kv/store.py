"""The KV block store over a shared pool: put / get / lookup of 16-token blocks by chain-hash key,
eviction of this host's blocks (least recently used by any process of any host: recency.py) when
its partition fills, and statistics shared by every process of a host. The data path (create,
gather, publish; open+lease, scatter, validate) runs in native code (cxk_kv_put / cxk_kv_get),
one call per batch.
"""
from __future__ import annotations

import errno
import hashlib
import logging
import os
import struct
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import _native
from ..errors import _OBJECT_ERRORS, PoolFullError, StaleObjectError, _typed
from ..errors import ObjectNotPublishedError as ObjectNotPublished
from ..pool import ObjectInfo, Pool, PoolObject
from .layout import BlockLayout, EngineTensors
from .level2 import Level2
from .counters import (_STATS_PREFIX, COUNTERS_WAIT_S, STAT_FIELDS,  # noqa: F401 (re-exported)
                       KVStats, _counters, _read_counters, host_stats)
from .opening import COHERENCE, _open_pool, _lease_seconds  # noqa: F401 (re-exported)
from .recency import RecencyTables, table_slots

log = logging.getLogger("cxlkit")

HDR_BYTES = 128  # CXK_KV_HDR_BYTES: the block header before the image
NT_MIN_BLOCK_BYTES = 64 << 10  # auto streaming stores from this block image size on


# How a get stopped: every key loaded, or the first key not loaded and why.
_STOPS = {-errno.ENOENT: "miss", -errno.EAGAIN: "miss", -errno.ESTALE: "stale",
          -errno.EBADMSG: "corrupt", -errno.ENODATA: "unverifiable"}


_HDR = struct.Struct("<Q32s32sQQq")  # struct cxk_kv_block_hdr up to created_ns
_BLOCK_MAGIC = 0x314B4C4256584B43  # CXK_KV_BLOCK_MAGIC


def block_problem(payload: bytes, key: bytes, layout: bytes, image_bytes: int) -> str | None:
    """Why a block payload from outside the pool (the level below it) is not the block
    `key` of this layout, or None: the checks cxk_kv_get makes, done before it enters the
    pool (size, magic, key, layout, and the image checksum when one was recorded)."""
    if len(payload) != HDR_BYTES + image_bytes:
        return f"{len(payload)} bytes, expected {HDR_BYTES + image_bytes}"
    magic, k, lay, nbytes, checksum, _ = _HDR.unpack_from(payload)
    if magic != _BLOCK_MAGIC or nbytes != image_bytes:
        return "not a cxlkit KV block header"
    if k != key:
        return "header names another key"
    if lay != layout.ljust(len(lay), b"\0"):
        return "another block layout"
    if checksum:
        img = np.frombuffer(payload, np.uint8)
        if _native.kv_checksum(img.ctypes.data + HDR_BYTES, image_bytes) != checksum:
            return "image checksum mismatch"
    return None


@dataclass(frozen=True)
class LoadResult:
    """What Store.load did: `loaded` leading blocks are in the engine; `stop` says why the
    next one is not: "complete" (none left), "miss" (absent or not yet published), "stale"
    (replaced while copied), "corrupt" (header or checksum mismatch), "unverifiable" (this
    store verifies checksums and the block was put without one), or "error"; `key` is
    that block's key (None when complete)."""
    loaded: int
    stop: str
    key: bytes | None = None


class Store:
    """KV blocks of one model (layout + namespace) in a pool.

    pool: a pool path ("/dev/shm/x"), a bare name (/dev/shm/cxlkit-<name>) or a cxlkit.Pool
    (used as is: one handle; another host_id or coherence opens its backings again).
    create/size (bytes or "64M")/host_id/coherence open it as cxlkit.Pool does: a size creates
    the pool when it does not exist (create=False refuses to);
    host_id None means CXLKIT_HOST_ID, else this machine's slot (DESIGN: derived id).
    checksum: record a checksum with every block and verify it on every get (costs one pass
    over the image on put; on get it is folded into the copy). A block put by a store
    without checksum has none to verify: a checksum=True store does not load it, counts it
    in stats.unverifiable, logs it, and load() says "unverifiable" (open every store of a
    namespace with the same checksum setting).
    level2: the level below the pool (cxlkit.kv.level2.Level2, shared by stores, not closed
    by them): evicted blocks are demoted to it, lookup/load promote the blocks they miss."""

    def __init__(self, pool: Any, layout: BlockLayout, *, namespace: str = "default",
                 checksum: bool = False, capacity_bytes: int | None = None,
                 create: bool | None = None, size: int | str = 0,
                 host_id: int | str | None = None, coherence: str | None = None,
                 max_hosts: int = 0, lease_timeout: float | None = None,
                 nt_stores: bool | None = None, level2: Level2 | None = None,
                 lease_timeout_ms: int = 0) -> None:
        if not isinstance(layout, BlockLayout):
            raise TypeError("layout: expected a BlockLayout")
        if not isinstance(namespace, str) or not namespace:
            raise ValueError("namespace: expected a non-empty str (e.g. the model name)")
        if capacity_bytes is not None and (not isinstance(capacity_bytes, int)
                                           or capacity_bytes <= 0):
            raise ValueError(f"capacity_bytes: expected a positive int, got {capacity_bytes!r}")
        self.layout = layout
        self.namespace = namespace
        self.checksum = bool(checksum)
        # streaming stores on put: a block is written once and read by other processes, so
        # caching it here only evicts the engine's working set; since put skips zeroing the
        # object, they beat plain copies on 2 MiB blocks (docs/kv.md). None = on for blocks
        # of NT_MIN_BLOCK_BYTES and more (small ones gain nothing from them).
        self.nt_stores = (layout.nbytes >= NT_MIN_BLOCK_BYTES if nt_stores is None
                          else bool(nt_stores))
        self.capacity_bytes = capacity_bytes
        self.level2 = level2
        self._pool, self._owns_pool = _open_pool(
            pool, create=create, size=size, host_id=host_id, coherence=coherence,
            max_hosts=max_hosts, lease_timeout=_lease_seconds(lease_timeout, lease_timeout_ms))
        st = self._pool.stat()
        self.host_id = st.host_id
        self._nc = st.coherence != "host"  # "none" or "sim"
        # one namespace per (model name, block layout): keys are token hashes only
        self._prefix = ("kv." + hashlib.sha256(namespace.encode() + layout.pack()).hexdigest()[:8]
                        + ".")
        self._layout_bytes = layout.pack()
        self.block_bytes = HDR_BYTES + layout.nbytes
        self.stats = KVStats()
        self._shared: PoolObject | None = None
        self._recency: RecencyTables | None = None
        try:
            self._shared = _counters(self._pool, f"{_STATS_PREFIX}{self.host_id}",
                                     8 * len(STAT_FIELDS))
            # last uses of this namespace's blocks by this host's processes, shared with the
            # owners that evict them (one table per host; every host's tables are read)
            self._recency = RecencyTables(self._pool, self._prefix, self.host_id,
                                          table_slots(st, self.block_bytes), nc=self._nc,
                                          make_room=self._make_room)
        except BaseException:
            self.close()
            raise

    @property
    def pool(self) -> Pool:
        """The pool the store lives in (the caller's, or the one it opened)."""
        return self._pool

    # -- keys ------------------------------------------------------------------------------
    def name(self, key: bytes) -> str:
        return self._prefix + key.hex()

    def _names(self, keys: Sequence[bytes]) -> list[str]:
        out = []
        for k in keys:
            if not isinstance(k, (bytes, bytearray)) or len(k) != 32:
                raise ValueError("keys: each key must be 32 bytes (from cxlkit.kv.block_hashes)")
            out.append(self._prefix + bytes(k).hex())
        return out

    def _count(self, **deltas: int) -> None:
        shared = self._shared
        if shared is None:
            raise ValueError("KV store is closed")
        for k, v in deltas.items():
            if v:
                setattr(self.stats, k, getattr(self.stats, k) + v)
                shared.add_u64(8 * STAT_FIELDS.index(k), v)  # checked against the object

    def _check(self, keys: Sequence[bytes], engine: EngineTensors, block_ids: Sequence[int]):
        if not isinstance(engine, EngineTensors):
            raise TypeError("engine: expected cxlkit.kv.EngineTensors")
        if engine.layout != self.layout:
            raise ValueError(f"engine layout {engine.layout} differs from the store's "
                             f"{self.layout}")
        names = self._names(keys)
        ids = engine.check_blocks(block_ids)
        if len(ids) != len(names):
            raise ValueError(f"{len(names)} keys but {len(ids)} block ids")
        return names, ids

    def _batch(self, fn: Any, plan: Any, names: list[str], keys: list[bytes], ids: Any,
               flags: int) -> tuple[int, list[int]]:
        try:
            return fn(self._pool, plan, names, keys, self._layout_bytes, ids, flags)
        except OSError as e:
            raise _typed(e, _OBJECT_ERRORS) from None

    # -- data path ---------------------------------------------------------------------------
    def put(self, keys: Sequence[bytes], source: EngineTensors, block_ids: Sequence[int]) -> int:
        """Store source's blocks block_ids[i] under keys[i]; returns how many were new."""
        names, ids = self._check(keys, source, block_ids)
        flags = (_native.KV_CHECKSUM if self.checksum else 0) | (
            _native.KV_NT if self.nt_stores else 0)
        if self.capacity_bytes is not None:
            self._make_room(len(names) * self.block_bytes, budget=True)
        todo = list(range(len(names)))
        stored = skipped = 0
        used: list[bytes] = []
        for attempt in range(3):
            n, status = self._batch(_native.kv_put, source.plan, [names[i] for i in todo],
                                    [bytes(keys[i]) for i in todo], ids[todo], flags)
            stored += n
            retry = []
            for i, s in zip(todo, status):
                if s == 0:
                    used.append(keys[i])
                elif s == -errno.EEXIST:
                    skipped += 1
                    used.append(keys[i])  # wanted again: as good as a hit
                elif s == -errno.ENOSPC and attempt < 2:
                    retry.append(i)
                else:
                    log.warning("kv put %s: %s", names[i], os.strerror(-s))
            if not retry:
                todo = []
                break
            todo = retry
            if self._make_room(len(todo) * self.block_bytes) == 0:
                break
        self._recency.touch(used)
        self._count(puts=stored, put_skipped=skipped, bytes_in=stored * self.layout.nbytes,
                    put_errors=len(names) - stored - skipped)
        return stored

    def get(self, keys: Sequence[bytes], dest: EngineTensors, block_ids: Sequence[int]) -> int:
        """Load the leading blocks keys[0..k) into dest's block_ids; returns k. Blocks after k
        (a miss, or one that failed validation) are untouched or garbage: recompute them.
        load() says why block k was not loaded."""
        return self.load(keys, dest, block_ids).loaded

    def load(self, keys: Sequence[bytes], dest: EngineTensors,
             block_ids: Sequence[int]) -> LoadResult:
        """As get, with why the loading stopped (LoadResult)."""
        names, ids = self._check(keys, dest, block_ids)
        flags = (_native.KV_CHECKSUM if self.checksum else 0) | (
            _native.KV_INVALIDATE if self._nc else 0)
        keys = [bytes(k) for k in keys]
        n, status = self._batch(_native.kv_get, dest.plan, names, keys, ids, flags)
        if (n < len(names) and _STOPS.get(status[n]) == "miss" and self.level2 is not None
                and self.promote(keys[n:])):
            m, rest = self._batch(_native.kv_get, dest.plan, names[n:], keys[n:], ids[n:],
                                  flags)
            n, status = n + m, list(status[:n]) + list(rest)
        self._recency.touch(keys[:n])
        if n == len(names):
            self._count(lookups=len(names), hits=n, bytes_out=n * self.layout.nbytes)
            return LoadResult(n, "complete")
        stop = _STOPS.get(status[n], "error")
        if stop == "unverifiable":
            log.warning("kv get %s: put without a checksum, and this store verifies them "
                        "(checksum=True): not loaded; open the storing side with "
                        "checksum=True too", names[n])
        elif stop != "miss":
            log.warning("kv get %s: %s (treated as a miss)", names[n], os.strerror(-status[n]))
        self._count(lookups=len(names), hits=n, misses=1, bytes_out=n * self.layout.nbytes,
                    load_errors=int(stop not in ("miss", "unverifiable")),
                    unverifiable=int(stop == "unverifiable"))
        return LoadResult(n, stop, bytes(keys[n]))

    def lookup(self, keys: Sequence[bytes]) -> int:
        """Number of leading keys whose blocks are in the pool now (they may be evicted later:
        get reports what it actually loaded)."""
        names = self._names(keys)
        try:
            n = _native.kv_lookup(self._pool, names)
        except OSError as e:
            raise _typed(e, _OBJECT_ERRORS) from None
        self._count(lookups=len(names), hits=n)
        if n < len(names) and self.level2 is not None:
            n += self.promote(keys[n:])
        return n

    def promote(self, keys: Sequence[bytes]) -> int:
        """Fetch the leading keys' blocks from the level below the pool (level2), check them
        as a get would, and store them in this host's partition; returns how many leading
        blocks are now in the pool. Any failure is a miss (Level2 logs it once)."""
        if self.level2 is None or not keys:
            return 0
        names = self._names(keys)
        done = 0
        for nm, key, payload in zip(names, keys, self.level2.fetch(names)):
            why = block_problem(payload, bytes(key), self._layout_bytes, self.layout.nbytes)
            if why is not None:
                log.warning("kv promote %s from %s: %s (treated as a miss)", nm,
                            self.level2.name, why)
                break
            if not self._store_payload(nm, payload):
                break
            done += 1
        self._recency.touch(keys[:done])
        self._count(promoted=done)
        return done

    def _store_payload(self, name: str, payload: bytes) -> bool:
        for attempt in range(2):
            try:
                self._pool.create(name, data=payload, checksum=False).close()
                return True
            except FileExistsError:
                return True  # put or promoted meanwhile: equal keys, equal blocks
            except PoolFullError:
                if attempt or self._make_room(len(payload)) == 0:
                    return False
        return False

    def _demote(self, name: str) -> None:
        """Copy an own block about to be evicted to the level below (queued, never waited
        for); skipped when the queue is full or the block went meanwhile."""
        if self.level2 is None or not self.level2.accepts():
            return
        try:
            with self._pool.open(name) as obj:
                # one validated copy (the block as published) into memory nobody zeroes;
                # the level's backend reads it as a buffer
                payload = np.empty(obj.nbytes, np.uint8)
                try:
                    obj.read_into(payload, 0)
                except OSError as e:
                    raise _typed(e, _OBJECT_ERRORS) from None
        except (KeyError, ObjectNotPublished, StaleObjectError):
            return
        if self.level2.demote(name, memoryview(payload)):
            self._count(demoted=1)

    @contextmanager
    def pin(self, keys: Sequence[bytes]) -> Iterator[int]:
        """Hold reader leases on the leading present blocks of keys for the duration of the
        block (their memory is not reused even if the owner evicts them); yields how many."""
        held: list[PoolObject] = []
        try:
            for nm in self._names(keys):
                try:
                    held.append(self._pool.open(nm))
                except (KeyError, ObjectNotPublished):
                    break
            yield len(held)
        finally:
            for obj in held:
                obj.close()

    # -- capacity ------------------------------------------------------------------------------
    def blocks(self, *, all_hosts: bool = False) -> list[ObjectInfo]:
        """This namespace's blocks (of this host unless all_hosts)."""
        return self._blocks(self._pool.list(), all_hosts)

    def _blocks(self, listing: list[ObjectInfo], all_hosts: bool = False) -> list[ObjectInfo]:
        n = len(self._prefix) + 64  # prefix + key hex; recency tables have other names
        return [o for o in listing if len(o.name) == n and o.name.startswith(self._prefix)
                and (all_hosts or o.host == self.host_id) and o.live]

    def used_bytes(self) -> int:
        return sum(o.nbytes for o in self.blocks())

    def _make_room(self, need: int, budget: bool = False) -> int:
        listing = self._pool.list()
        own = self._blocks(listing)
        if budget:  # stay within capacity_bytes of this namespace on this host
            excess = sum(o.nbytes for o in own) + need - self.capacity_bytes
        else:  # the partition is full: free need bytes
            excess = need
        if excess <= 0:
            return 0
        # least recently used first: the latest use any process of any host recorded in its
        # recency table, else the block's creation (stable: ties keep partition order)
        if self._recency is not None:
            last = self._recency.last_use(own, listing)
            own = [own[i] for i in np.argsort(last, kind="stable")]
        else:  # the table is being attached (it made room for itself): creation order
            own.sort(key=lambda o: o.created_ns)
        freed = evicted = 0
        for o in own:
            if freed >= excess:
                break
            self._demote(o.name)
            try:
                self._pool.destroy(o.name)  # readers holding a lease keep the memory
            except KeyError:
                continue  # another process of this host evicted it first
            freed += o.nbytes
            evicted += 1
        self._count(evictions=evicted)
        return evicted

    def evict(self, nbytes: int) -> int:
        """Evict at least nbytes of this host's blocks, least recently used (by any process of
        any host) first; returns how many blocks."""
        return self._make_room(nbytes)

    def clear(self) -> int:
        """Destroy every block of this namespace on this host."""
        return self._make_room(1 << 62)

    def close(self) -> None:
        recency, self._recency = self._recency, None
        if recency is not None:
            recency.close()
        shared, self._shared = self._shared, None
        if shared is not None:
            try:
                shared.close()
            except ValueError:
                pass  # the pool was closed first: that dropped the lease
        if self._owns_pool:
            self._pool.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
