"""Shared KV recency: blocks hit by other hosts and other processes of the owner's host survive
its eviction; tables of vanished hosts, and bad or short tables, never break eviction; the owner's
own table is created, replaced and re-attached as needed. Uses are ordered by an injected clock
(cxlkit.kv.recency._now), never by sleeping."""
import logging
import multiprocessing as mp
import os
import signal
import time

import numpy as np
import pytest
import torch

from cxlkit import Pool, PoolObject
from cxlkit.kv import BlockLayout, EngineTensors, Store, block_hashes
from cxlkit.kv import recency

LAYOUT = BlockLayout(num_layers=2, num_kv_heads=2, head_dim=16, dtype="float32", block_tokens=16)
# stamps far above every block's creation time (CLOCK_REALTIME now), so uses order the blocks
BASE = time.time_ns() + 10**12


class Clock:
    def __init__(self):
        self.t = BASE

    def at(self, t):
        self.t = BASE + t

    def __call__(self):
        return self.t


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(recency, "_now", c)
    return c


def engine():
    ts = [torch.zeros(2, 4, 16, 2, 16) for _ in range(LAYOUT.num_layers)]
    return EngineTensors.per_layer(LAYOUT, ts)


def open_store(path, host_id, **kw):
    return Store(path, LAYOUT, host_id=host_id, create=True, size=16 << 20, **kw)


def put_in_order(store, clock, keys):
    """Store keys one at a time, keys[i] used at time i."""
    e = engine()
    for i, k in enumerate(keys):
        clock.at(i)
        assert store.put([k], e, [0]) == 1


def present(store, keys):
    return [store.lookup([k]) == 1 for k in keys]


def test_blocks_another_host_keeps_reading_survive_the_owners_eviction(pool_path, clock):
    a, b = open_store(pool_path, 0), open_store(pool_path, 1)
    keys = block_hashes(list(range(16 * 6)))
    put_in_order(a, clock, keys)
    clock.at(100)
    assert b.get(keys[:2], engine(), [0, 1]) == 2  # host 1's hits: only host 1's table
    assert a.evict(3 * a.block_bytes) == 3
    # host 0 evicted its three coldest blocks: keys 2, 3, 4; host 1's hot ones stay
    assert present(a, keys) == [True, True, False, False, False, True]
    assert len(b.blocks()) == 0 and len(a.blocks()) == 3


def test_without_other_hosts_hits_the_oldest_blocks_go_first(pool_path, clock):
    a = open_store(pool_path, 0)
    keys = block_hashes(list(range(16 * 4)))
    put_in_order(a, clock, keys)
    clock.at(50)
    assert a.get(keys[:1], engine(), [0]) == 1  # this process's own hit counts too
    assert a.evict(2 * a.block_bytes) == 2
    assert present(a, keys) == [True, False, False, True]


def _hit(path, host_id, keys, t, q):
    recency._now = lambda: BASE + t  # a spawned process: patch its own module
    s = Store(path, LAYOUT, host_id=host_id)
    q.put(s.get(keys, engine(), list(range(len(keys)))))
    s.close()


def test_hits_by_another_process_of_the_same_host_are_seen(pool_path, clock):
    a = open_store(pool_path, 0)
    keys = block_hashes(list(range(16 * 5)))
    put_in_order(a, clock, keys)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_hit, args=(pool_path, 0, keys[:2], 100, q))
    p.start()
    assert q.get(timeout=60) == 2
    p.join(60)
    assert p.exitcode == 0
    assert a.evict(2 * a.block_bytes) == 2
    assert present(a, keys) == [True, True, False, False, True]


def _hit_and_hang(path, keys, t, ready):
    recency._now = lambda: BASE + t
    s = Store(path, LAYOUT, host_id=1)
    assert s.get(keys, engine(), list(range(len(keys)))) == len(keys)
    ready.set()
    signal.pause()  # killed here, its pool never closed


def test_a_vanished_hosts_table_still_counts_and_never_breaks_eviction(pool_path, clock):
    a = open_store(pool_path, 0)
    keys = block_hashes(list(range(16 * 5)))
    put_in_order(a, clock, keys)
    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    p = ctx.Process(target=_hit_and_hang, args=(pool_path, keys[:2], 100, ready))
    p.start()
    assert ready.wait(60)
    os.kill(p.pid, signal.SIGKILL)
    p.join(60)
    # its last uses were real uses: they still rank host 0's blocks
    assert a.evict(2 * a.block_bytes) == 2
    assert present(a, keys) == [True, True, False, False, True]
    # the host's table disappears between the owner's listing and its read: skipped
    listing = a.pool.list()
    with Pool(pool_path, host_id=1) as p1:
        p1.destroy(a._prefix + "recent.1")
    own = a._blocks(listing)
    last = a._recency.last_use(own, listing)
    created = np.array([o.created_ns for o in own], dtype=np.uint64)
    assert (last >= created).all()
    assert a.evict(a.block_bytes) == 1 and present(a, keys)[:2] == [False, True]


def _table(host, nslots, magic=recency.MAGIC, version=recency.VERSION):
    return (recency.HEADER.pack(magic, version, host, nslots)
            + np.arange(1, nslots + 1, dtype="<u8").tobytes())


def test_bad_or_short_tables_of_other_hosts_are_ignored_with_one_warning(pool_path, clock,
                                                                         caplog):
    a = open_store(pool_path, 0)
    keys = block_hashes(list(range(16 * 4)))
    put_in_order(a, clock, keys)
    bad = {1: b"x" * 44,                           # short, not even whole words
           2: _table(2, 64, magic=b"NOTATABL"),    # another object under the name
           3: _table(3, 64, version=2)}            # a later format
    for host, data in bad.items():
        with Pool(pool_path, host_id=host) as p:
            p.create(f"{a._prefix}recent.{host}", data=data).close()
    with Pool(pool_path, host_id=1) as p:  # a table of 64 slots in a 72-slot object
        p.create(f"{a._prefix}recent.1x", data=_table(1, 64) + bytes(64)).close()
    caplog.set_level(logging.WARNING, logger="cxlkit")
    assert a.evict(a.block_bytes) == 1
    assert a.evict(a.block_bytes) == 1
    assert present(a, keys) == [False, False, True, True]  # creation/own order only
    msgs = [r.getMessage() for r in caplog.records if "recency table" in r.getMessage()]
    assert len(msgs) == 4, msgs  # each once, not once per eviction
    assert any("shorter than its 64-byte header" in m and "recent.1 " in m for m in msgs)
    assert any("magic" in m and "recent.2" in m for m in msgs)
    assert any("version 2" in m and "recent.3" in m for m in msgs)
    assert any("expected 576" in m and "recent.1x" in m for m in msgs)


def test_a_table_whose_header_disagrees_with_its_size_or_owner_is_refused():
    words = np.frombuffer(_table(1, 64) + bytes(64), dtype="<u8")
    with pytest.raises(ValueError, match="expected 576"):
        recency.check(words, words.nbytes, 1)
    words = np.frombuffer(_table(1, 64), dtype="<u8")
    assert recency.check(words, words.nbytes, 1) == 64
    with pytest.raises(ValueError, match="host 2 owns it"):
        recency.check(words, words.nbytes, 2)
    words = np.frombuffer(_table(1, 48)[:64] + bytes(8 * 48), dtype="<u8")
    with pytest.raises(ValueError, match="not a power of two"):
        recency.check(words, words.nbytes, 1)


def test_a_bad_own_table_is_replaced_with_a_warning(pool_path, clock, caplog):
    other = open_store(pool_path, 1)
    prefix = other._prefix
    other.close()
    with Pool(pool_path, host_id=0) as p:  # e.g. left by an older version: 40 bytes
        p.create(prefix + "recent.0", data=bytes(40)).close()
    caplog.set_level(logging.WARNING, logger="cxlkit")
    a = open_store(pool_path, 0)
    assert any("ignored and replaced" in r.getMessage() for r in caplog.records)
    assert a._recency.attached
    info = a.pool.info(prefix + "recent.0")
    assert info.nbytes == recency.HEADER.size + 8 * a._recency.nslots
    keys = block_hashes(list(range(16 * 3)))
    put_in_order(a, clock, keys)
    clock.at(10)
    a.get(keys[:1], engine(), [0])
    assert a.evict(a.block_bytes) == 1 and present(a, keys) == [True, False, True]


def test_a_removed_own_table_is_created_again_at_the_next_eviction(pool_path, clock):
    a = open_store(pool_path, 0)
    keys = block_hashes(list(range(16 * 4)))
    put_in_order(a, clock, keys)
    gen = a.pool.info(a._recency.name).generation
    with Pool(pool_path, host_id=0) as p:
        p.destroy(a._recency.name)  # e.g. `cxlkit pool rm`: the store still holds it
    assert a.evict(a.block_bytes) == 1  # ranks by creation (the table's stamps are gone)
    assert a.pool.info(a._recency.name).generation != gen
    clock.at(20)
    a.get(keys[1:2], engine(), [0])  # stamps go to the new table
    assert a.evict(a.block_bytes) == 1
    assert present(a, keys) == [False, True, False, True]


def test_a_store_makes_room_for_its_table_in_a_full_partition(pool_path, clock):
    from cxlkit.pool import PoolFullError

    a = Store(pool_path, LAYOUT, host_id=0, create=True, size=768 << 10, max_hosts=4)
    e = engine()
    for i in range(200):  # fill host 0's partition with blocks (puts evict once it is full)
        a.put(block_hashes(list(range(i, i + 16))), e, [0])
    n = len(a.blocks())
    table = a._recency.name
    a.close()
    with Pool(pool_path, host_id=0) as p:
        p.destroy(table)  # unleased now: its room is free again
        fillers = 0
        while True:  # ... and taken by small objects, so no table fits
            try:
                p.create(f"filler{fillers}", 1024, publish=True).close()
            except PoolFullError:
                break
            fillers += 1
        assert fillers >= 1
    b = Store(pool_path, LAYOUT, host_id=0)  # ENOSPC for the table: evicts blocks first
    assert b._recency.attached and b.stats.evictions >= 1
    assert 0 < len(b.blocks()) < n


def test_collisions_only_make_a_block_look_more_recent(pool_path, clock):
    a, b = open_store(pool_path, 0), open_store(pool_path, 1)
    n = a._recency.nslots
    x = os.urandom(32)
    word = int.from_bytes(x[:8], "little")
    y = ((word + n) % 2**64).to_bytes(8, "little") + os.urandom(24)  # x's slot, another key
    z = ((word + 1) % 2**64).to_bytes(8, "little") + os.urandom(24)  # the next slot
    e = engine()
    clock.at(1)
    a.put([y], e, [0])
    clock.at(2)
    a.put([z], e, [0])
    clock.at(3)
    a.put([x], e, [0])
    clock.at(50)
    b.get([x], e, [0])
    own = a.blocks()
    last = dict(zip((o.name for o in own), a._recency.last_use(own, a.pool.list())))
    assert last[a.name(y)] == last[a.name(x)] == BASE + 50  # y borrows x's later use
    assert last[a.name(z)] == BASE + 2  # z's own, never older
    for o in own:
        assert last[o.name] >= o.created_ns


def test_non_coherent_pools_share_recency_through_flush_and_invalidate(pool_path, clock):
    a = open_store(pool_path, 0, coherence="none")
    b = open_store(pool_path, 1, coherence="none")
    keys = block_hashes(list(range(16 * 4)))
    put_in_order(a, clock, keys)
    clock.at(100)
    assert b.get(keys[:1], engine(), [0]) == 1
    assert a.evict(2 * a.block_bytes) == 2
    assert present(a, keys) == [True, False, False, True]


def test_tables_are_not_blocks_and_survive_clear(pool_path, clock):
    a = open_store(pool_path, 0)
    keys = block_hashes(list(range(32)))
    put_in_order(a, clock, keys)
    assert {o.name for o in a.blocks()} == {a.name(k) for k in keys}
    assert a.clear() == 2 and a.blocks() == [] and a.used_bytes() == 0
    assert a.pool.info(a._recency.name).live


def test_table_size_keeps_slots_per_block_and_stays_a_small_share_of_a_partition():
    from types import SimpleNamespace as Stat  # the PoolStat fields table_slots reads

    big = Stat(max_objects=1 << 20, partition_bytes=16 << 30, max_hosts=4)
    n = recency.table_slots(big, 2 << 20)  # Llama-3-8B blocks: 8192 per host
    assert n & (n - 1) == 0 and n >= recency.SLOTS_PER_BLOCK * 4 * 8192
    small = Stat(max_objects=511, partition_bytes=128 << 10, max_hosts=4)
    n = recency.table_slots(small, 512)
    assert 8 * n <= (128 << 10) // recency.PARTITION_SHARE and n >= recency.MIN_SLOTS


def test_large_batches_stamp_the_same_slots_as_single_keys(pool_path, clock):
    a, b = open_store(pool_path, 0), open_store(pool_path, 1)
    keys = block_hashes(list(range(16 * 20)))
    big = EngineTensors.per_layer(LAYOUT, [torch.zeros(2, 20, 16, 2, 16) for _ in range(2)])
    clock.at(1)
    assert a.put(keys, big, range(20)) == 20  # one batch: the vectorised path
    clock.at(100)
    hot = keys[:9] + keys[11:]  # two gets of 9 keys each, both above SCALAR_TOUCH
    assert len(keys[11:]) > recency.SCALAR_TOUCH
    assert b.get(keys[:9], big, range(9)) == 9
    assert b.get(keys[11:], big, range(9)) == 9
    assert a.evict(2 * a.block_bytes) == 2
    assert present(a, keys) == [k in hot for k in keys]


class SyncLog:
    """Records the range flushes / invalidates of pool objects (then runs them)."""

    def __init__(self, monkeypatch):
        self.calls = []
        cls = PoolObject
        for name in ("flush", "invalidate", "flush_at", "invalidate_at"):
            native = getattr(cls, name)

            def record(obj, *args, _name=name, _native=native, **kw):
                self.calls.append((_name, obj.name, args))
                return _native(obj, *args, **kw)

            monkeypatch.setattr(cls, name, record)

    def ranges(self, what, table):
        """(offset, nbytes) of every `what` range on object `table`."""
        out = []
        for name, obj, args in self.calls:
            if obj != table:
                continue
            if name == what:
                out.append(tuple(args))
            elif name == what + "_at":
                out += [(int(o), args[1] if len(args) > 1 else 8) for o in args[0]]
        return out


def slot_offset(key, nslots):
    return recency.HEADER.size + 8 * (int.from_bytes(key[:8], "little") % nslots)


@pytest.mark.parametrize("nkeys", [1, recency.SCALAR_TOUCH, 40])
def test_non_coherent_touch_flushes_only_the_slots_it_stamped(pool_path, clock, monkeypatch,
                                                              nkeys):
    a = open_store(pool_path, 0, coherence="none")
    t = a._recency
    nslots = t._mask + 1
    keys = block_hashes(list(range(16 * nkeys)))
    log = SyncLog(monkeypatch)
    clock.at(7)
    t.touch(keys)
    got = log.ranges("flush", t.name)
    assert sorted(got) == sorted((slot_offset(k, nslots), 8) for k in keys)
    assert not any(c[0] == "flush" and c[2] == () for c in log.calls)  # never the whole table
    stamps = t._table.load_u64(np.array([slot_offset(k, nslots) for k in keys], np.uint64))
    assert (stamps == BASE + 7).all()
    a.close()


def test_coherent_touch_flushes_nothing(pool_path, clock, monkeypatch):
    a = open_store(pool_path, 0, coherence="host")  # named: --coherence-sim changes the default
    log = SyncLog(monkeypatch)
    a._recency.touch(block_hashes(list(range(16 * 40))))
    a._recency.touch(block_hashes(list(range(16))))
    assert log.calls == []
    a.close()


def test_non_coherent_eviction_invalidates_the_header_and_the_ranked_blocks_slots(
        pool_path, clock, monkeypatch):
    a = open_store(pool_path, 0, coherence="none")
    b = open_store(pool_path, 1, coherence="none")
    keys = block_hashes(list(range(16 * 4)))
    put_in_order(a, clock, keys)
    clock.at(100)
    assert b.get(keys[:1], engine(), [0]) == 1
    log = SyncLog(monkeypatch)
    assert a.evict(2 * a.block_bytes) == 2
    nslots = b._recency._mask + 1
    got = log.ranges("invalidate", b._recency.name)
    hdr = (0, recency.HEADER.size)
    assert got[0] == hdr and sorted(got[1:]) == sorted((slot_offset(k, nslots), 8) for k in keys)
    assert present(a, keys) == [True, False, False, True]
