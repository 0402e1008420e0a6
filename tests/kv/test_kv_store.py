"""The KV store over a real pool file: round trips, lookup, dedupe, two hosts, eviction under
pressure with concurrent readers (no torn read), a writer killed mid-put, lease expiry,
statistics, and bad input."""
import errno
import multiprocessing as mp
import os
import signal

import numpy as np
import pytest
import torch

from cxlkit import _native
from cxlkit.kv import BlockLayout, EngineTensors, Store, block_hashes, host_stats
from cxlkit.kv.store import STAT_FIELDS
from cxlkit.testing import inject_fault

LAYOUT = BlockLayout(num_layers=2, num_kv_heads=2, head_dim=16, dtype="float32", block_tokens=16)
NBLOCKS = 8


def engine(fill=None, axes="KBTHD"):
    ts = [torch.zeros(2, NBLOCKS, 16, 2, 16) for _ in range(LAYOUT.num_layers)]
    return ts, EngineTensors.per_layer(LAYOUT, ts, axes)


def content(key: bytes) -> torch.Tensor:
    """The block a key stands for: [layers, 2, tokens, heads, dim], derived from the key."""
    rng = np.random.default_rng(int.from_bytes(key[:8], "little"))
    return torch.from_numpy(rng.standard_normal((2, 2, 16, 2, 16), dtype=np.float32))


def write_block(ts, b, key):
    c = content(key)
    for layer, t in enumerate(ts):
        t[:, b] = c[layer]


def read_block(ts, b):
    return torch.stack([t[:, b] for t in ts])


def open_store(path, host_id=0, **kw):
    kw.setdefault("create", True)
    kw.setdefault("size", 32 << 20)
    return Store(path, LAYOUT, host_id=host_id, checksum=True, **kw)


def test_put_get_round_trip_and_lookup_counts_leading_hits(pool_path):
    s = open_store(pool_path)
    keys = block_hashes(list(range(80)))  # 5 blocks
    src, se = engine()
    for b, k in enumerate(keys):
        write_block(src, b, k)
    assert s.put(keys[:3], se, [0, 1, 2]) == 3
    assert s.lookup(keys) == 3
    assert s.lookup(keys[1:]) == 2
    assert s.lookup(block_hashes(list(range(1, 81)))) == 0
    dst, de = engine()
    assert s.get(keys, de, [7, 6, 5, 4, 3]) == 3  # leading hits only
    for b, k in zip([7, 6, 5], keys):
        assert torch.equal(read_block(dst, b), content(k))
    st = s.stats
    assert (st.puts, st.hits, st.misses, st.load_errors) == (3, 3 + 2 + 3, 1, 0)
    assert st.bytes_in == st.bytes_out == 3 * LAYOUT.nbytes


def test_put_of_present_blocks_is_skipped(pool_path):
    s = open_store(pool_path)
    keys = block_hashes(list(range(32)))
    _, se = engine()
    assert s.put(keys, se, [0, 1]) == 2
    assert s.put(keys, se, [2, 3]) == 0
    assert s.stats.put_skipped == 2


def test_cross_layer_engine_round_trip(pool_path):
    s = open_store(pool_path)
    keys = block_hashes(list(range(32)))
    x = torch.randn(NBLOCKS, 2, 2, 16, 2, 16)  # [blocks, layers, K/V, tokens, heads, dim]
    assert s.put(keys, EngineTensors.cross_layer(LAYOUT, x), [5, 2]) == 2
    # the same blocks load into a per-layer engine: the pool format is layout-independent
    dst, de = engine()
    assert s.get(keys, de, [0, 1]) == 2
    assert torch.equal(read_block(dst, 0), x[5]) and torch.equal(read_block(dst, 1), x[2])


def _prefill(path, host_id, tokens, q):
    s = Store(path, LAYOUT, host_id=host_id, checksum=True)
    keys = block_hashes(tokens)
    src, se = engine()
    for b, k in enumerate(keys):
        write_block(src, b, k)
    q.put(s.put(keys, se, range(len(keys))))


def test_a_block_stored_by_one_host_is_hit_by_another(pool_path):
    s0 = open_store(pool_path, host_id=0)
    tokens = list(range(1000, 1064))
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_prefill, args=(pool_path, 1, tokens, q))
    p.start()
    assert q.get(timeout=60) == 4
    p.join(60)
    keys = block_hashes(tokens)
    assert s0.lookup(keys) == 4
    dst, de = engine()
    assert s0.get(keys, de, [0, 1, 2, 3]) == 4
    for b, k in enumerate(keys):
        assert torch.equal(read_block(dst, b), content(k))
    assert {b.host for b in s0.blocks(all_hosts=True)} == {1}
    assert s0.blocks() == []  # host 0 owns none of them


def _churn(path, nkeys, rounds, start, done):
    s = Store(path, LAYOUT, host_id=0, checksum=True)
    src, se = engine()
    keys = [block_hashes(list(range(i, i + 16)))[0] for i in range(nkeys)]
    start.wait()
    for r in range(rounds):
        batch = [keys[(r * 3 + j) % nkeys] for j in range(4)]
        for b, k in enumerate(batch):
            write_block(src, b, k)
        s.put(batch, se, range(4))  # evicts LRU blocks when the partition is full
    done.set()


def _reader(path, host_id, nkeys, start, done, q):
    s = Store(path, LAYOUT, host_id=host_id, checksum=False)  # rely on the seqlock alone
    dst, de = engine()
    keys = [block_hashes(list(range(i, i + 16)))[0] for i in range(nkeys)]
    start.wait()
    loaded = bad = 0
    i = 0
    while not done.is_set() or i < 50:
        k = keys[i % nkeys]
        if s.get([k], de, [0]) == 1:
            loaded += 1
            bad += not torch.equal(read_block(dst, 0), content(k))
        i += 1
    q.put((loaded, bad))


def test_eviction_under_pressure_with_concurrent_readers_never_returns_a_torn_block(pool_path):
    # 512 KiB over 4 hosts: a 256 KiB data region (one host may fill it all, format v2),
    # ~29 blocks of 8.6 KB; 40 keys: puts evict
    s = open_store(pool_path, size=512 << 10, max_hosts=4)
    assert s.pool.stat().partition_bytes < 32 * (128 + LAYOUT.nbytes)
    ctx = mp.get_context("spawn")
    start, done, q = ctx.Barrier(3), ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_churn, args=(pool_path, 40, 150, start, done))] + [
        ctx.Process(target=_reader, args=(pool_path, h, 40, start, done, q)) for h in (0, 1)]
    for p in procs:
        p.start()
    results = [q.get(timeout=120) for _ in range(2)]
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert sum(r[0] for r in results) > 0, "readers never hit: the test proved nothing"
    assert all(r[1] == 0 for r in results), f"torn blocks returned: {results}"
    stats = host_stats(s.pool)
    assert stats[0]["evictions"] > 0


def _killed_writer(path, nblocks):
    lib = _native.__file__.rsplit("/", 1)[0] + "/libcxlkit.so"
    import ctypes

    s = Store(path, LAYOUT, host_id=0, checksum=True)
    src, se = engine()
    keys = [block_hashes(list(range(i, i + 16)))[0] for i in range(nblocks)]
    for b, k in enumerate(keys[:NBLOCKS]):
        write_block(src, b, k)
    s.put(keys[:2], se, [0, 1])
    # die (as if killed) inside the publish of the 2nd block of the next batch
    ctypes.CDLL(lib).cxk_pool_crash_at(b"publish.header", 2)
    s.put(keys[2:6], se, [2, 3, 4, 5])


def test_a_writer_killed_mid_put_leaves_no_visible_partial_block(pool_path):
    s = open_store(pool_path)
    ctx = mp.get_context("spawn")
    p = ctx.Process(target=_killed_writer, args=(pool_path, 8))
    p.start()
    p.join(60)
    assert p.exitcode == 137
    assert s.pool.fsck(repair=True).errors == 0  # recovery after a crashed writer
    keys = [block_hashes(list(range(i, i + 16)))[0] for i in range(8)]
    dst, de = engine()
    visible = [k for k in keys if s.get([k], de, [0]) == 1]
    # blocks 0, 1, the first of the killed batch, and the second one if the crash point lies
    # after its header store; nothing later; every block that loads is complete
    assert visible in (keys[:3], keys[:4])
    for k in visible:
        assert s.get([k], de, [0]) == 1
        assert torch.equal(read_block(dst, 0), content(k))
    assert s.lookup(keys[4:]) == 0
    assert s.stats.load_errors == 0  # misses, not errors


def _pin_and_wait(path, key, ready):
    s = Store(path, LAYOUT, host_id=0)
    with s.pin([key]) as n:
        assert n == 1
        ready.set()
        signal.pause()  # killed here, lease held


def test_a_pinned_block_survives_eviction_until_its_reader_dies(pool_path):
    s = open_store(pool_path)
    key = block_hashes(list(range(16)))[0]
    src, se = engine()
    write_block(src, 0, key)
    s.put([key], se, [0])
    used = s.pool.stat().used_bytes
    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    p = ctx.Process(target=_pin_and_wait, args=(pool_path, key, ready))
    p.start()
    assert ready.wait(60)
    assert s.evict(1) == 1 and s.lookup([key]) == 0
    # destroyed but leased: the memory is still held (pending), not reused
    assert s.pool.fsck(repair=True).leases_live >= 1
    assert s.pool.stat().used_bytes == used
    os.kill(p.pid, signal.SIGKILL)
    p.join(60)
    report = s.pool.fsck(repair=True)  # the dead reader's lease expires; memory reclaimed
    assert report.errors == 0
    assert s.pool.stat().used_bytes < used


def test_stats_are_shared_by_processes_of_a_host(pool_path):
    s = open_store(pool_path)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_prefill, args=(pool_path, 0, list(range(32)), q))
    p.start()
    assert q.get(timeout=60) == 2
    p.join(60)
    s.lookup(block_hashes(list(range(32))))
    assert host_stats(pool_path)[0]["puts"] == 2 and host_stats(pool_path)[0]["hits"] == 2


def test_capacity_bytes_bounds_this_hosts_blocks(pool_path):
    s = open_store(pool_path, capacity_bytes=3 * (128 + LAYOUT.nbytes))
    src, se = engine()
    keys = block_hashes(list(range(16 * 6)))
    for i, k in enumerate(keys):
        s.put([k], se, [i % NBLOCKS])
    assert len(s.blocks()) == 3 and s.stats.evictions == 3
    assert s.lookup(keys[3:]) == 3  # the three most recent survive


def test_get_with_a_different_layout_is_a_load_error_not_garbage(pool_path):
    s = open_store(pool_path, namespace="m")
    keys = block_hashes(list(range(16)))
    src, se = engine()
    s.put(keys, se, [0])
    # same namespace string and key, other layout: other object names, so a plain miss
    other = BlockLayout(2, 2, 16, "float32", 16, 2)
    s2 = Store(pool_path, other, namespace="m2", host_id=0)
    dst, de = engine()
    assert s2.get(keys, de, [0]) == 0
    # force the name of a block of another layout: the header check refuses it
    small = BlockLayout(1, 2, 16, "float32", 16)
    s3 = Store(pool_path, small, namespace="m", host_id=0)
    s3._prefix = s._prefix
    t = [torch.zeros(2, NBLOCKS, 16, 2, 16)]
    assert s3.get(keys, EngineTensors.per_layer(small, t), [0]) == 0
    assert s3.stats.load_errors == 1


def test_bad_input_raises_typed_errors(pool_path):
    s = open_store(pool_path)
    _, se = engine()
    with pytest.raises(ValueError, match="32 bytes"):
        s.put([b"short"], se, [0])
    with pytest.raises(ValueError, match="keys but"):
        s.put(block_hashes(list(range(32))), se, [0])
    with pytest.raises(TypeError, match="EngineTensors"):
        s.get(block_hashes(list(range(16))), "engine", [0])
    with pytest.raises(IndexError):
        s.get(block_hashes(list(range(16))), se, [NBLOCKS])
    other = EngineTensors.per_layer(BlockLayout(2, 2, 16, "float16"),
                                    [torch.zeros(2, 2, 16, 2, 16, dtype=torch.float16)] * 2)
    with pytest.raises(ValueError, match="layout"):
        s.put(block_hashes(list(range(16))), other, [0])
    with pytest.raises(TypeError, match="layout"):
        Store(pool_path, "layout")
    with pytest.raises(ValueError, match="coherence"):
        Store(pool_path, LAYOUT, coherence="maybe")
    with pytest.raises(ValueError, match="namespace"):
        Store(pool_path, LAYOUT, namespace="")
    with pytest.raises(ValueError, match="capacity_bytes"):
        Store(pool_path, LAYOUT, capacity_bytes=0)
    with pytest.raises(FileNotFoundError, match="nonexistent"):
        Store("/dev/shm/cxlkit-test-kv-nonexistent", LAYOUT)
    with pytest.raises(TypeError, match="pool"):
        Store(42, LAYOUT)
    s.close()
    with pytest.raises(ValueError, match="closed"):
        s.lookup(block_hashes(list(range(16))))


def test_failed_pool_open_syscall_raises_OSError_naming_the_pool(pool_path):
    open_store(pool_path).close()
    with inject_fault("open", 1, errno.EACCES):
        with pytest.raises(PermissionError, match=os.path.basename(pool_path)):
            Store(pool_path, LAYOUT, host_id=0)


def test_streaming_store_puts_round_trip(pool_path):
    s = open_store(pool_path, nt_stores=True)
    keys = block_hashes(list(range(32)))
    src, se = engine()
    for b, k in enumerate(keys):
        write_block(src, b, k)
    assert s.put(keys, se, [0, 1]) == 2
    dst, de = engine()
    assert s.get(keys, de, [1, 0]) == 2
    assert torch.equal(read_block(dst, 1), content(keys[0]))
    assert torch.equal(read_block(dst, 0), content(keys[1]))


def test_a_store_over_a_cxlkit_Pool_uses_its_file_and_host(pool_path):
    import cxlkit.pool

    with cxlkit.pool.Pool(pool_path, size=16 << 20, host_id=2) as pool:
        s = Store(pool, LAYOUT)
        assert s.host_id == 2
        keys = block_hashes(list(range(16)))
        _, se = engine()
        assert s.put(keys, se, [0]) == 1
        assert [b.host for b in s.blocks()] == [2]
        s.close()
    named = Store(pool_path, LAYOUT, host_id="host-b")
    assert named.host_id != 2 and named.lookup(keys) == 1


def test_a_store_shares_the_handle_of_a_cxlkit_Pool_and_leaves_it_open(pool_path):
    import cxlkit.pool

    with cxlkit.pool.Pool(pool_path, size=16 << 20, host_id=1) as pool:
        s = Store(pool, LAYOUT)
        assert s.pool is pool  # one cxk_pool, not a second mapping
        keys = block_hashes(list(range(16)))
        _, se = engine()
        assert s.put(keys, se, [0]) == 1
        assert pool.info(s.name(keys[0])).state == "live"
        s.close()
        assert not pool.closed  # the caller's pool stays open
        other = Store(pool, LAYOUT, host_id=3)  # another host: its own handle, closed with it
        assert other.pool is not pool and other.host_id == 3
        other.close()
        assert other.pool.closed and not pool.closed
    with pytest.raises(ValueError, match="closed"):
        Store(pool, LAYOUT)
    own = Store(pool_path, LAYOUT, host_id=1)
    own.close()
    assert own.pool.closed  # a store that opened the pool closes it


def test_a_store_over_a_striped_pool_round_trips(pool_path):
    import cxlkit.pool

    paths = [pool_path, pool_path + ".s1"]
    with cxlkit.pool.Pool(paths, size=16 << 20, host_id=0) as pool:
        s = Store(pool, LAYOUT, checksum=True)
        keys = block_hashes(list(range(16)))
        src, se = engine()
        write_block(src, 0, keys[0])
        assert s.put(keys, se, [0]) == 1
        dst, de = engine()
        assert s.get(keys, de, [1]) == 1
        assert torch.equal(read_block(dst, 1), content(keys[0]))


def test_non_coherent_mode_round_trips_with_flush_and_invalidate(pool_path):
    s = open_store(pool_path, coherence="none")
    assert s._nc
    keys = block_hashes(list(range(48)))
    src, se = engine()
    for b, k in enumerate(keys):
        write_block(src, b, k)
    assert s.put(keys, se, [0, 1, 2]) == 3
    reader = Store(pool_path, LAYOUT, host_id=1, coherence="none", checksum=True)
    dst, de = engine()
    assert reader.get(keys, de, [5, 6, 7]) == 3
    for b, k in zip([5, 6, 7], keys):
        assert torch.equal(read_block(dst, b), content(k))


def _put_forever(path, started):
    s = Store(path, LAYOUT, host_id=1, checksum=True)
    src, se = engine()
    keys = [block_hashes(list(range(i, i + 16)))[0] for i in range(400)]
    for b, k in enumerate(keys[:NBLOCKS]):
        write_block(src, b, k)
    s.put(keys[:1], se, [0])
    started.set()
    i = 1
    while True:  # killed somewhere in here: mid-gather, mid-publish, between blocks
        batch = keys[i % 400:i % 400 + 4]
        for b, k in enumerate(batch):
            write_block(src, b, k)
        s.put(batch, se, range(len(batch)))
        i += 4


def test_writers_killed_at_arbitrary_points_leave_only_whole_blocks(pool_path):
    s = open_store(pool_path, size=64 << 20)
    ctx = mp.get_context("spawn")
    keys = [block_hashes(list(range(i, i + 16)))[0] for i in range(400)]
    for _ in range(3):
        started = ctx.Event()
        p = ctx.Process(target=_put_forever, args=(pool_path, started))
        p.start()
        assert started.wait(60)
        os.kill(p.pid, signal.SIGKILL)
        p.join(30)
    assert s.pool.fsck(repair=False).errors == 0
    dst, de = engine()
    loaded = 0
    for k in keys:
        if s.get([k], de, [0]) == 1:
            loaded += 1
            assert torch.equal(read_block(dst, 0), content(k))
    assert loaded >= 1 and s.stats.load_errors == 0


def test_streaming_stores_default_on_for_large_blocks_only(pool_path):
    from cxlkit.kv.store import NT_MIN_BLOCK_BYTES

    s = open_store(pool_path)
    assert s.nt_stores is (LAYOUT.nbytes >= NT_MIN_BLOCK_BYTES)
    s.close()
    big = BlockLayout(num_layers=32, num_kv_heads=8, head_dim=128, dtype="bfloat16")
    assert big.nbytes == 2 << 20
    s = Store(pool_path, big, host_id=0)
    assert s.nt_stores
    s.close()
    s = Store(pool_path, big, host_id=0, nt_stores=False)
    assert not s.nt_stores
    s.close()


def test_destroying_the_stats_object_never_lets_counters_write_into_a_reused_block(pool_path):
    from cxlkit import Pool

    s = open_store(pool_path)
    stats_name = f"kv.stats.h{s.host_id}"
    with Pool(pool_path, host_id=0) as p:
        nbytes = p.info(stats_name).nbytes
        p.destroy(stats_name)  # e.g. `cxlkit pool rm`: the store still counts into it
        other = p.create("victim", nbytes, data=bytes(nbytes))  # same size: first fit
        keys = block_hashes(list(range(32)))
        _, se = engine()
        s.put(keys, se, [0, 1])
        assert s.lookup(keys) == 2
        assert other.read() == bytes(nbytes)  # a published object never changes
        other.close()
    s.close()


def test_closing_stores_over_a_shared_pool_returns_their_leases(pool_path):
    from cxlkit import Pool

    with Pool(pool_path, 32 << 20, host_id=0, lease_slots=8) as p:
        for _ in range(20):  # more stores than lease entries
            Store(p, LAYOUT).close()
        assert p.fsck(repair=False).leases_live == 0


def test_counters_are_added_by_word_offset_within_their_object_only(pool_path):
    from cxlkit import Pool

    with Pool(pool_path, 32 << 20, host_id=1, max_hosts=2) as p:
        s = Store(p, LAYOUT)
        obj = s._shared
        i = 8 * list(STAT_FIELDS).index("evictions")
        assert obj.add_u64(i, 5) == 5  # the new value
        assert obj.add_u64(i, 2) == 7
        assert host_stats(p)[1]["evictions"] == 7
        end = 8 * len(STAT_FIELDS)
        for bad in (end, end + 8, 1 << 40, (1 << 63) - 8):
            with pytest.raises(ValueError, match=f"outside object kv.stats.h1 of {end} bytes"):
                obj.add_u64(bad, 1)
        with pytest.raises(ValueError, match="offset 4 in object kv.stats.h1: not a multiple"):
            obj.add_u64(4, 1)
        with pytest.raises(TypeError):
            obj.add_u64(0, -1)  # counters only grow
        with p.open("kv.stats.h1") as ro:
            with pytest.raises(PermissionError, match="read-only"):
                ro.add_u64(0, 1)
        s.close()
        with pytest.raises(ValueError, match="KV store is closed"):
            s._count(puts=1)
        with pytest.raises(ValueError, match="closed"):
            obj.add_u64(0, 1)


def test_a_counters_object_of_another_size_is_replaced_and_no_neighbour_is_overwritten(
        pool_path):
    """A 16-byte kv.stats.h0 (another build's field count) was written past its end
    by the counter adds, so the next object in the partition lost its header."""
    from cxlkit import Pool

    with Pool(pool_path, 32 << 20, host_id=0) as p:
        p.create("kv.stats.h0", 16, publish=True).close()
        p.create("neighbour", 4096, data=b"\xab" * 4096).close()
        s = Store(p, LAYOUT)
        for _ in range(3):
            s._count(load_errors=1, put_errors=1)
        assert p.open("neighbour").read() == b"\xab" * 4096
        assert p.info("kv.stats.h0").nbytes == 8 * len(STAT_FIELDS)
        assert host_stats(p)[0]["load_errors"] == 3
        assert p.fsck(repair=False).clean
        s.close()
