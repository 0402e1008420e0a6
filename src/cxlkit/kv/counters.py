"""A KV store's counters: one pool object per host, shared by that host's processes
(KVStats), and host_stats, which reads every host's."""
from __future__ import annotations

import errno
import logging
import os
import time
from dataclasses import asdict, dataclass

import numpy as np

from ..errors import ObjectNotPublishedError as ObjectNotPublished
from ..errors import PoolError
from ..pool import Pool, PoolObject
from .opening import _open_pool

log = logging.getLogger("cxlkit")

STAT_FIELDS = ("lookups", "hits", "misses", "puts", "put_skipped", "bytes_in", "bytes_out",
               "evictions", "load_errors", "put_errors", "unverifiable", "demoted",
               "promoted")
_STATS_PREFIX = "kv.stats.h"
COUNTERS_WAIT_S = 1.0  # how long a store waits for another process of its host to publish them


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
    unverifiable: int = 0  # get with checksum=True: a block put without one (not loaded)
    demoted: int = 0      # evicted blocks handed to the level below the pool (level2)
    promoted: int = 0     # blocks fetched from that level, checked and stored in the pool

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def _counters(pool: Pool, name: str, nbytes: int) -> PoolObject:
    """This host's counters object, opened writable (its lease keeps the memory while our adds
    write into it, even if it is destroyed meanwhile): created zeroed and published once, then
    shared by the host's processes. One of another size (left by a cxlkit with another field
    count) is replaced, never written past."""
    deadline = time.monotonic() + COUNTERS_WAIT_S
    for _ in range(1000):  # bounded: each pass makes progress unless others keep racing
        try:
            obj = pool.open(name, writable=True)
        except KeyError:
            try:
                pool.create(name, nbytes, publish=True).close()
            except FileExistsError:
                pass  # another process of this host made it first: open that
            continue
        except ObjectNotPublished:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.001)
            continue
        if obj.nbytes == nbytes:
            return obj
        obj.close()
        log.warning("kv counters %s: %d bytes, expected %d (another cxlkit's fields): "
                    "replaced", name, obj.nbytes, nbytes)
        try:
            pool.destroy(name)  # our own object: this host may replace it
        except KeyError:
            pass  # another process of this host replaced it first
    raise PoolError(errno.EBUSY, "other processes kept creating and removing it", name)


def host_stats(pool: Pool | str | os.PathLike[str]) -> dict[int, dict[str, int]]:
    """Counters of every host that used a KV store in this pool (shared by its processes)."""
    p, owns = _open_pool(pool, create=False, size=0, host_id=None, coherence=None, max_hosts=0,
                         lease_timeout=None)
    try:
        nc = p.stat().coherence != "host"
        out = {}
        for o in p.list():
            if o.name.startswith(_STATS_PREFIX) and o.live:
                words = _read_counters(p, o.name, nc)
                if words is not None:
                    out[o.host] = dict(zip(STAT_FIELDS, words))
        return out
    finally:
        if owns:
            p.close()


def _read_counters(pool: Pool, name: str, nc: bool) -> list[int] | None:
    """The counters object's words, read under a lease (its memory cannot be reused meanwhile);
    None when it was destroyed or replaced since the listing."""
    try:
        obj = pool.open(name)
    except (KeyError, ObjectNotPublished):
        return None
    with obj:
        if nc:
            obj.invalidate()  # pairs with the writer host's flush after each add
        n = obj.nbytes // 8
        return [int(x) for x in obj.load_u64(np.arange(n, dtype=np.uint64) * np.uint64(8))]
