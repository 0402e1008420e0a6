"""Shared recency of KV blocks: one table per (namespace, host) in the pool, created and written
only by that host's processes (DESIGN.md: a host writes only its own objects, no cross-host
atomics), read by every owner that evicts. A table is a 64-byte header then `nslots` u64 last-use
times (ns, CLOCK_REALTIME: hosts compare them); a block's slot is the first 8 bytes of its key
(a SHA-256, so uniform) as a little-endian u64, mod nslots. Sizing and collisions: docs/kv.md."""
from __future__ import annotations

import logging
import struct
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import ObjectNotPublishedError as ObjectNotPublished, PoolFullError
from ..pool import ObjectInfo, Pool, PoolObject, PoolStat

log = logging.getLogger("cxlkit")

MAGIC = b"CXKVRECT"
VERSION = 1
HEADER = struct.Struct("<8sIIQ40x")  # magic, version, writer host, nslots; 64 bytes
HEADER_WORDS = HEADER.size // 8
SLOTS_PER_BLOCK = 8  # slots per block the namespace could hold on every host at once
MIN_SLOTS = 64
PARTITION_SHARE = 16  # a table takes at most 1/16 of its host's partition
TAG = "recent."  # table name: <namespace prefix>recent.<host>
SCALAR_TOUCH = 8  # batches up to this many keys are stamped key by key
ATTACH_WAIT_S = 1.0  # how long a store waits for another process of its host to publish it


def _now() -> int:
    """Last-use stamp: CLOCK_REALTIME ns (tests replace this to order uses)."""
    return time.time_ns()


def table_slots(pool_stat: PoolStat, block_bytes: int) -> int:
    """Slots for a table: a power of two >= SLOTS_PER_BLOCK x the blocks the namespace could
    hold if every host's partition were full of them, at most 1/PARTITION_SHARE of a partition,
    at least MIN_SLOTS. Every process of every host computes the same number for a pool."""
    per_host = max(1, min(pool_stat.max_objects, pool_stat.partition_bytes // block_bytes))
    want = SLOTS_PER_BLOCK * pool_stat.max_hosts * per_host
    n = 1 << (want - 1).bit_length()
    cap = pool_stat.partition_bytes // (PARTITION_SHARE * 8)
    while n > cap and n > MIN_SLOTS:
        n >>= 1
    return max(n, MIN_SLOTS)


def key_words(keys: Sequence[bytes]) -> np.ndarray:
    """The first 8 bytes of each 32-byte key as little-endian u64 (slot = word mod nslots)."""
    return np.frombuffer(b"".join(keys), dtype="<u8")[::4]


def name_words(names: Sequence[str], prefix_len: int) -> np.ndarray:
    """key_words of block names `<prefix><64 hex digits of the key>`."""
    return np.frombuffer(bytes.fromhex("".join(n[prefix_len:prefix_len + 16] for n in names)),
                         dtype="<u8")


def header(host: int, nslots: int) -> bytes:
    return HEADER.pack(MAGIC, VERSION, host, nslots)


def check(words: np.ndarray, nbytes: int, host: int) -> int:
    """nslots of a table whose payload (nbytes, as u64 words) was written by `host`;
    ValueError saying what is wrong (an older or foreign object under the table's name)."""
    if nbytes < HEADER.size:
        raise ValueError(f"{nbytes} bytes, shorter than its {HEADER.size}-byte header")
    magic, version, writer, nslots = HEADER.unpack(words[:HEADER_WORDS].tobytes())
    if magic != MAGIC:
        raise ValueError(f"magic {magic!r}, expected {MAGIC!r}")
    if version != VERSION:
        raise ValueError(f"version {version} (this cxlkit reads {VERSION})")
    if writer != host:
        raise ValueError(f"header names host {writer}, but host {host} owns it")
    if nslots == 0 or nslots & (nslots - 1):
        raise ValueError(f"{nslots} slots, not a power of two")
    if nbytes != HEADER.size + 8 * nslots:
        raise ValueError(f"{nbytes} bytes for {nslots} slots (expected "
                         f"{HEADER.size + 8 * nslots})")
    return nslots


# Tables are read and written with native word loads and stores by payload offset, never
# through a view: a view would make a close of the pool from another thread refuse (BufferError)
# instead of waiting for the call, and an address kept by Python would dangle after it.
_HEADER_OFFSETS = np.arange(HEADER_WORDS, dtype=np.uint64) * np.uint64(8)


def _slot_offsets(words: np.ndarray, mask: int) -> np.ndarray:
    """Payload offsets of the slots of these key words (u64)."""
    return np.uint64(HEADER.size) + np.uint64(8) * (words & np.uint64(mask))


def _checked(obj: PoolObject) -> tuple[int, str]:
    """(nslots, "") or (0, what is wrong with the table). The closed error of the pool is
    raised, not reported as a bad table."""
    nbytes = obj.nbytes
    words = obj.load_u64(_HEADER_OFFSETS) if nbytes >= HEADER.size else _HEADER_OFFSETS[:0]
    try:
        return check(words, nbytes, obj.host), ""
    except ValueError as e:
        return 0, str(e)


class RecencyTables:
    """This host's table of one namespace (written) and every host's tables (read).

    pool: the store's cxlkit.Pool; prefix: the namespace's object-name prefix;
    nslots: the size a new table gets (existing tables keep theirs: readers use the header)."""

    def __init__(self, pool: Pool, prefix: str, host_id: int, nslots: int, *, nc: bool,
                 make_room: Any) -> None:
        self._pool = pool
        self.prefix = prefix + TAG
        self.name = f"{self.prefix}{host_id}"
        self.host_id = host_id
        self.nslots = nslots
        self._nc = nc
        self._make_room = make_room  # frees this host's blocks when the table finds no room
        self._table: PoolObject | None = None
        self._mask = 0
        self._warned: set[tuple[str, int]] = set()
        self._failed = False  # the last attach gave up (warned once until one succeeds)
        self._attaching = False  # _attach -> make_room -> last_use must not attach again
        self._attach(ATTACH_WAIT_S)

    @property
    def attached(self) -> bool:
        return self._table is not None

    # -- this host's table ------------------------------------------------------------------
    def _attach(self, wait_s: float) -> None:
        """Open this host's table, or create and publish it; on failure warn and run without
        one (recency then comes from the other hosts' tables and creation times)."""
        self._attaching = True
        try:
            self._attach_once(wait_s)
        finally:
            self._attaching = False

    def _attach_once(self, wait_s: float) -> None:
        pool = self._pool
        nbytes = HEADER.size + 8 * self.nslots
        deadline = time.monotonic() + wait_s
        freed = False
        for _ in range(1000):  # bounded: each pass makes progress unless others keep racing
            try:
                obj = pool.open(self.name, writable=True)
            except KeyError:
                try:
                    obj = pool.create(self.name, nbytes)
                except FileExistsError:
                    continue  # another process of this host created it first: open that
                except PoolFullError:
                    if freed:
                        self._give_up("no room for it in this host's partition")
                        return
                    freed = True
                    self._make_room(nbytes)
                    continue
                except OSError as e:
                    self._give_up(f"cannot create it: {e}")
                    return
                try:
                    obj.write(0, header(self.host_id, self.nslots))  # no view: close stays possible
                    obj.publish()  # header first: a published table never changes shape
                except BaseException:
                    obj.close()
                    pool.destroy(self.name)
                    raise
                self._use(obj, self.nslots)
                return
            except ObjectNotPublished:  # another process of this host is creating it now
                if time.monotonic() >= deadline:
                    self._give_up("another process of this host has not published it yet")
                    return
                time.sleep(0.001)
                continue
            except OSError as e:
                self._give_up(f"cannot open it: {e}")
                return
            nslots, bad = _checked(obj)
            if bad:
                obj.close()
                log.warning("kv recency table %s (generation %d) ignored and replaced: %s",
                            self.name, obj.generation, bad)
                try:
                    pool.destroy(self.name)  # our own object: this host may replace it
                except KeyError:
                    pass  # another process of this host replaced it first
                continue
            self._use(obj, nslots)
            return
        self._give_up("other processes kept creating and removing it")

    def _use(self, obj: PoolObject, nslots: int) -> None:
        self._table = obj
        self._mask = nslots - 1
        self._failed = False

    def _give_up(self, why: str) -> None:
        if self._failed:
            return
        self._failed = True
        log.warning("kv recency table %s: %s; this host's hits are not shared until it can "
                    "be created", self.name, why)

    def touch(self, keys: Sequence[bytes]) -> None:
        """Record a use of these blocks now in this host's table."""
        table = self._table  # once: an eviction in another thread may replace it
        if table is None or not keys:
            return
        if len(keys) <= SCALAR_TOUCH:  # per-key Python beats numpy's set-up on small batches
            mask = self._mask
            offsets = np.array([HEADER.size + 8 * (int.from_bytes(k[:8], "little") & mask)
                                for k in keys], dtype=np.uint64)
        else:
            offsets = _slot_offsets(key_words(keys), self._mask)
        # Plain aligned 8-byte stores, no atomics: processes of this host racing on one slot
        # can only leave the slightly older of two stamps (microseconds): harmless for a hint.
        table.store_u64(offsets, _now())
        if self._nc:
            # make the stamps visible to other hosts' evictions: only the lines written
            # (pairs with the invalidate of those slots in _fold_other)
            table.flush_at(offsets)

    # -- every host's tables ----------------------------------------------------------------
    def last_use(self, blocks: list[ObjectInfo], listing: list[ObjectInfo]) -> np.ndarray:
        """Per block (of the pool listing): the latest use any host recorded, at least its
        creation time. Collisions can only make a block look more recent."""
        acc = np.array([o.created_ns for o in blocks], dtype=np.uint64)
        if not blocks:
            return acc
        words = name_words([o.name for o in blocks], len(self.prefix) - len(TAG))
        tables = [o for o in listing if o.name.startswith(self.prefix) and o.live]
        mine = next((o for o in tables if o.name == self.name), None)
        table = self._table  # once: a touch in another thread may be using it
        if table is not None and (mine is None or mine.generation != table.generation):
            table.close()  # replaced or removed since we opened it: attach again
            self._table = table = None
        if table is None and not self._attaching:
            self._attach(0.0)
            table = self._table
        if table is not None:
            acc = self._fold(acc, table, _slot_offsets(words, self._mask))
        for o in tables:
            if o.name == self.name:
                continue
            acc = self._fold_other(acc, o, words)
        return acc

    @staticmethod
    def _fold(acc: np.ndarray, obj: PoolObject, offsets: np.ndarray) -> np.ndarray:
        return np.maximum(acc, obj.load_u64(offsets))

    def _fold_other(self, acc: np.ndarray, o: ObjectInfo, words: np.ndarray) -> np.ndarray:
        try:
            obj = self._pool.open(o.name)  # a lease: its memory is not reused while we read it
        except (KeyError, OSError):
            return acc  # destroyed, replaced or unpublished since the listing: skip it
        with obj:
            if self._nc:
                # drop stale lines of what we read (pairs with the writer's flush in touch):
                # the header, then, once it gives nslots, the slots of these blocks only
                obj.invalidate(0, min(HEADER.size, obj.nbytes))
            nslots, bad = _checked(obj)
            if bad:
                key = (o.name, obj.generation)
                if key not in self._warned:  # once per table, not once per eviction
                    self._warned.add(key)
                    log.warning("kv recency table %s of host %d ignored: %s", o.name,
                                obj.host, bad)
                return acc
            offsets = _slot_offsets(words, nslots - 1)
            if self._nc:
                obj.invalidate_at(offsets)
            return self._fold(acc, obj, offsets)

    def close(self) -> None:
        t, self._table = self._table, None
        if t is not None:
            try:
                t.close()
            except ValueError:
                pass  # the pool was closed first: that dropped the lease


def is_table(name: str) -> bool:
    """A recency table's object name (`kv.<ns>.recent.<host>`), as opposed to a block."""
    parts = name.split(".")
    return len(parts) == 4 and parts[0] == "kv" and parts[2] + "." == TAG
