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
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from .. import _native
from .layout import BlockLayout, EngineTensors
from .recency import RecencyTables, table_slots

log = logging.getLogger("cxlkit")

COHERENCE = {"host": 0, "none": 1}
HDR_BYTES = 128  # CXK_KV_HDR_BYTES: the block header before the image
NT_MIN_BLOCK_BYTES = 64 << 10  # auto streaming stores from this block image size on
STAT_FIELDS = ("lookups", "hits", "misses", "puts", "put_skipped", "bytes_in", "bytes_out",
               "evictions", "load_errors", "put_errors")
_STATS_PREFIX = "kv.stats.h"


@dataclass
class KVStats:
    lookups: int = 0      # keys asked about (lookup and get)
    hits: int = 0         # keys found (lookup) or loaded (get)
    misses: int = 0       # get: first key not loaded (missing, stale or corrupt)
    puts: int = 0         # blocks stored
    put_skipped: int = 0  # blocks already present (immutable, so not rewritten)
    bytes_in: int = 0     # image bytes written into the pool
    bytes_out: int = 0    # image bytes read out of the pool
    evictions: int = 0
    load_errors: int = 0  # get: a block that was found but failed to load (stale/corrupt)
    put_errors: int = 0   # put: blocks not stored for lack of room or another error

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def _open_pool(pool: Any, *, create: bool, size: int, host_id: int | str | None,
               coherence: str | None, max_hosts: int, lease_timeout_ms: int) -> Any:
    """A KVPool over the cxk_pool of a cxlkit.Pool: the caller's own pool when it is one (and
    host_id / coherence, if given, agree with it), else one this store opens and closes."""
    from ..pool import Pool

    if isinstance(pool, _native.KVPool):
        return pool
    if coherence is not None and coherence not in COHERENCE:
        raise ValueError(f"coherence: {coherence!r} is not one of {sorted(COHERENCE)}")
    if isinstance(pool, Pool):
        if (host_id is None or host_id == pool.host_id) and coherence in (None, pool.coherence):
            return _native.KVPool(pool)
        paths: Any = pool.paths  # the same backings, as another host or coherence
        coherence = coherence or pool.coherence
    elif isinstance(pool, (str, os.PathLike)):
        paths = pool  # a bare name is /dev/shm/cxlkit-<name>, as for cxlkit.Pool
    else:
        raise TypeError("pool: expected a path, a pool name, a cxlkit.Pool or a KVPool")
    if isinstance(host_id, int) and not isinstance(host_id, bool) and host_id < 0:
        raise ValueError(f"host_id: expected an int >= 0 or a host name, got {host_id!r}")
    own = Pool(paths, size or None, host_id=host_id, coherence=coherence or "host",
               create=create, max_hosts=max_hosts or None,
               lease_timeout_ms=lease_timeout_ms or None)
    return _native.KVPool(own, owns=True)


class Store:
    """KV blocks of one model (layout + namespace) in a pool.

    pool: a pool path ("/dev/shm/x"), a bare name (/dev/shm/cxlkit-<name>), a cxlkit.Pool (used
    as is: one handle; another host_id or coherence opens its backings again), or a
    _native.KVPool. create/size/host_id/coherence open it;
    host_id None means CXLKIT_HOST_ID, else this machine's slot (DESIGN: derived id).
    checksum: record a checksum with every block and verify it on every get (costs one pass
    over the image on put; on get it is folded into the copy)."""

    def __init__(self, pool: Any, layout: BlockLayout, *, namespace: str = "default",
                 checksum: bool = False, capacity_bytes: int | None = None,
                 create: bool = False, size: int = 0, host_id: int | str | None = None,
                 coherence: str | None = None, max_hosts: int = 0, lease_timeout_ms: int = 0,
                 nt_stores: bool | None = None) -> None:
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
        self._pool = _open_pool(pool, create=create, size=size, host_id=host_id,
                                coherence=coherence, max_hosts=max_hosts,
                                lease_timeout_ms=lease_timeout_ms)
        st = self._pool.stat()
        self.host_id = st["host_id"]
        self._nc = st["coherence"] == COHERENCE["none"]
        # one namespace per (model name, block layout): keys are token hashes only
        self._prefix = ("kv." + hashlib.sha256(namespace.encode() + layout.pack()).hexdigest()[:8]
                        + ".")
        self._layout_bytes = layout.pack()
        self.block_bytes = HDR_BYTES + layout.nbytes
        self.stats = KVStats()
        self._shared = None
        self._recency: RecencyTables | None = None
        try:
            name = f"{_STATS_PREFIX}{self.host_id}"
            self._pool.create_counters(name, 8 * len(STAT_FIELDS))
            # a reader's lease for the store's life: if the object is destroyed meanwhile, its
            # block is not reused while our atomics still write into it
            self._shared = self._pool.hold(name)
            # last uses of this namespace's blocks by this host's processes, shared with the
            # owners that evict them (one table per host; every host's tables are read)
            self._recency = RecencyTables(self._pool, self._prefix, self.host_id,
                                          table_slots(st, self.block_bytes), nc=self._nc,
                                          make_room=self._make_room)
        except BaseException:
            self.close()
            raise

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
        off = self._shared["offset"]  # an offset, not an address: each add holds the pool
        for k, v in deltas.items():
            if v:
                setattr(self.stats, k, getattr(self.stats, k) + v)
                self._pool.atomic_add(off + 8 * STAT_FIELDS.index(k), v)

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
            n, status = self._pool.put(source.plan, [names[i] for i in todo],
                                       [bytes(keys[i]) for i in todo], self._layout_bytes,
                                       ids[todo], flags)
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
        (a miss, or one that failed validation) are untouched or garbage: recompute them."""
        names, ids = self._check(keys, dest, block_ids)
        flags = (_native.KV_CHECKSUM if self.checksum else 0) | (
            _native.KV_INVALIDATE if self._nc else 0)
        n, status = self._pool.get(dest.plan, names, [bytes(k) for k in keys],
                                   self._layout_bytes, ids, flags)
        self._recency.touch(keys[:n])
        failed = n < len(names) and status[n] not in (-errno.ENOENT, -errno.EAGAIN)
        if failed:
            log.warning("kv get %s: %s (treated as a miss)", names[n], os.strerror(-status[n]))
        self._count(lookups=len(names), hits=n, misses=int(n < len(names)),
                    bytes_out=n * self.layout.nbytes, load_errors=int(failed))
        return n

    def lookup(self, keys: Sequence[bytes]) -> int:
        """Number of leading keys whose blocks are in the pool now (they may be evicted later:
        get reports what it actually loaded)."""
        names = self._names(keys)
        n = self._pool.lookup(names)
        self._count(lookups=len(names), hits=n)
        return n

    @contextmanager
    def pin(self, keys: Sequence[bytes]) -> Iterator[int]:
        """Hold reader leases on the leading present blocks of keys for the duration of the
        block (their memory is not reused even if the owner evicts them); yields how many."""
        held = []
        try:
            for nm in self._names(keys):
                try:
                    held.append(self._pool.hold(nm)["offset"])
                except (FileNotFoundError, BlockingIOError):
                    break
            yield len(held)
        finally:
            for off in held:
                self._pool.release(off)

    # -- capacity ------------------------------------------------------------------------------
    def blocks(self, *, all_hosts: bool = False) -> list[dict]:
        """This namespace's blocks (of this host unless all_hosts)."""
        return self._blocks(self._pool.list(), all_hosts)

    def _blocks(self, listing: list[dict], all_hosts: bool = False) -> list[dict]:
        n = len(self._prefix) + 64  # prefix + key hex; recency tables have other names
        return [o for o in listing if len(o["name"]) == n and o["name"].startswith(self._prefix)
                and (all_hosts or o["host"] == self.host_id) and o["state"] == 2]

    def used_bytes(self) -> int:
        return sum(o["nbytes"] for o in self.blocks())

    def _make_room(self, need: int, budget: bool = False) -> int:
        listing = self._pool.list()
        own = self._blocks(listing)
        if budget:  # stay within capacity_bytes of this namespace on this host
            excess = sum(o["nbytes"] for o in own) + need - self.capacity_bytes
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
            own.sort(key=lambda o: o["created_ns"])
        freed = evicted = 0
        for o in own:
            if freed >= excess:
                break
            try:
                self._pool.destroy(o["name"])  # readers holding a lease keep the memory
            except FileNotFoundError:
                continue  # another process of this host evicted it first
            freed += o["nbytes"]
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
                self._pool.release(shared["offset"])
            except ValueError:
                pass  # the pool was closed first: that dropped the lease
        self._pool.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def host_stats(pool: Any) -> dict[int, dict[str, int]]:
    """Counters of every host that used a KV store in this pool (shared by its processes)."""
    kp = pool if isinstance(pool, _native.KVPool) else _open_pool(
        pool, create=False, size=0, host_id=None, coherence=None, max_hosts=0,
        lease_timeout_ms=0)
    out = {}
    for o in kp.list():
        if o["name"].startswith(_STATS_PREFIX) and o["state"] == 2:
            raw = np.frombuffer(_read(kp, o["name"]), dtype="<u8")
            if raw.size:
                out[o["host"]] = dict(zip(STAT_FIELDS, (int(x) for x in raw)))
    return out


def _read(kp: Any, name: str) -> bytes:
    """The counters object's bytes, read under a lease (its block cannot be reused meanwhile);
    b"" when it was destroyed since the listing."""
    try:
        o = kp.hold(name)
    except (FileNotFoundError, BlockingIOError):
        return b""
    try:
        return kp.read(o["offset"], o["nbytes"])  # holds the pool: a close waits for it
    finally:
        kp.release(o["offset"])
