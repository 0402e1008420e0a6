"""Closing a pool while other threads are inside GIL-released pool and KV calls on the same
handle, or between the steps of a KV store call (counters, statistics, recency tables): every
call either completes or raises the closed error naming the pool, nothing touches the unmapped
range (the work runs in a forked child: a crash is its exit code)."""
from __future__ import annotations

import multiprocessing as mp
import os
import threading
import time

import numpy as np
import pytest
import torch

import cxlkit
from cxlkit import _native
from cxlkit.kv import BlockLayout, EngineTensors, Store, block_hashes, host_stats

MiB = 1 << 20
LAYOUT = BlockLayout(num_layers=2, num_kv_heads=2, head_dim=64, dtype="float32", block_tokens=16)


def _is_closed_error(e: BaseException, label: str) -> bool:
    return isinstance(e, ValueError) and "closed" in str(e) and (
        label in str(e) or "object" in str(e) or "KV store" in str(e))


def _until_closed(op, what: str, label: str, started: threading.Barrier,
                  errors: list) -> None:
    """Calls op(i) for i = 1, 2, ... until it raises: the closed error naming the pool ends the
    thread quietly, anything else is recorded. `started` is passed once op has run (or failed)."""
    first = True
    i = 0
    while True:
        i += 1
        try:
            op(i)
        except BaseException as e:  # noqa: BLE001 - the claim is about every exception
            if not _is_closed_error(e, label):
                errors.append(f"{what}: {type(e).__name__}: {e}")
            if first:
                started.wait()
            return
        if first:
            first = False
            started.wait()


def _hammer(pool: cxlkit.Pool, kv, plan, what: str, rnd: int, started: threading.Barrier,
            errors: list) -> None:
    keys = block_hashes(list(range(16 * 4)))
    names = [f"kv-{k.hex()}" for k in keys]
    ids = np.arange(4, dtype=np.int64)
    buf = bytearray(4 * MiB)

    def op(i: int) -> None:
        if what == "create":  # zeroes 2 MiB without the GIL
            with pool.create(f"c{rnd}-{i}", 2 * MiB) as o:
                o.publish()
            pool.destroy(f"c{rnd}-{i}")
        elif what == "read":  # copies 4 MiB without the GIL
            with pool.open("big") as o:
                o.read_into(buf, 0)
                o.verify()
        elif what == "list":
            pool.list()
            pool.stat()
        elif what == "kv":
            _native.kv_put(kv, plan, names, [bytes(k) for k in keys], LAYOUT.pack(), ids, 0)
            _native.kv_get(kv, plan, names, [bytes(k) for k in keys], LAYOUT.pack(), ids, 0)
            _native.kv_lookup(kv, names)
    _until_closed(op, what, pool._h.label, started, errors)


def _close_under_load(path: str, rounds: int) -> None:
    torch.set_num_threads(1)
    errors: list[str] = []
    for r in range(rounds):
        pool = cxlkit.Pool(path, size=64 * MiB, host_id=0, max_hosts=1, create=True)
        if "big" not in pool:
            pool.create("big", 4 * MiB, publish=True, checksum=True).close()
        ts = [torch.zeros(2, 4, 16, 2, 64) for _ in range(LAYOUT.num_layers)]
        plan = EngineTensors.per_layer(LAYOUT, ts, "KBTHD").plan
        kv = pool  # the KV calls take the cxlkit.Pool itself (one pool face)
        kinds = ["create", "read", "list", "kv"]
        started = threading.Barrier(len(kinds) + 1)
        threads = [threading.Thread(target=_hammer, args=(pool, kv, plan, k, r, started, errors))
                   for k in kinds]
        for t in threads:
            t.start()
        started.wait(30)  # every thread has finished one call and is looping
        time.sleep(0.002 * r)  # land the close at different points of the calls
        pool.close()
        assert pool.closed
        for t in threads:
            t.join(30)
            if t.is_alive():
                errors.append("a thread did not finish after close")
        try:
            pool.stat()
            errors.append("stat on a closed pool did not raise")
        except ValueError as e:
            if pool._h.label not in str(e):
                errors.append(f"closed error does not name the pool: {e}")
    if errors:
        print("\n".join(errors[:20]), flush=True)
        os._exit(1)
    os._exit(0)


def _in_forked_child(target, args: tuple, timeout_s: int, what: str) -> None:
    """Runs target in a forked child, so that a SIGSEGV fails the test instead of pytest."""
    child = mp.get_context("fork").Process(target=target, args=args)
    child.start()
    child.join(timeout_s)
    if child.is_alive():
        child.kill()
        child.join()
        pytest.fail(f"{what} hung")
    assert child.exitcode == 0  # -11 would be a SIGSEGV: the pool unmapped under a call


def test_close_while_threads_are_in_gil_released_calls_never_unmaps_under_them(pool_path):
    _in_forked_child(_close_under_load, (pool_path, 8), 120, "close under load")


def _store_hammer(store: Store, what: str, started: threading.Barrier, errors: list,
                  label: str) -> None:
    keys = block_hashes(list(range(16 * 4)))
    ts = [torch.zeros(2, 4, 16, 2, 64) for _ in range(LAYOUT.num_layers)]
    eng = EngineTensors.per_layer(LAYOUT, ts, "KBTHD")

    def op(i: int) -> None:
        if what == "put":  # new blocks, then evictions: counters, touches, table reads
            fresh = block_hashes(list(range(16 * 4 * i, 16 * 4 * (i + 1))))
            store.put(fresh, eng, range(4))
            if i % 8 == 0:
                store.evict(4 * store.block_bytes)
        elif what == "get":
            store.get(keys, eng, range(4))
            store.lookup(keys)
        elif what == "stats":  # reads every host's counters by offset under a lease
            host_stats(store.pool)
            store.blocks(all_hosts=True)
        elif what == "touch":  # stamps (store_u64) and range flushes
            store._recency.touch(keys[:1])
            store._recency.touch(keys * 4)
    _until_closed(op, what, label, started, errors)


def _close_store_under_load(path: str, rounds: int) -> None:
    torch.set_num_threads(1)
    errors: list[str] = []
    for r in range(rounds):
        coherence = ("host", "none")[r % 2]  # "none": range flushes and invalidates too
        pool = cxlkit.Pool(path, size=64 * MiB, host_id=0, max_hosts=2, create=True,
                           coherence=coherence)
        # another host with its own table and counters: evictions read them, stats list them
        other = Store(path, LAYOUT, host_id=1, coherence=coherence)
        keys = block_hashes(list(range(16 * 4)))
        eng = EngineTensors.per_layer(LAYOUT, [torch.zeros(2, 4, 16, 2, 64)
                                               for _ in range(LAYOUT.num_layers)], "KBTHD")
        other.put(keys, eng, range(4))
        store = Store(pool, LAYOUT)  # shares the pool's handle: the close below is its close
        store.put(keys, eng, range(4))
        kinds = ["put", "get", "stats", "touch"]
        started = threading.Barrier(len(kinds) + 1)
        label = pool._h.label
        threads = [threading.Thread(target=_store_hammer, args=(store, k, started, errors, label))
                   for k in kinds]
        for t in threads:
            t.start()
        started.wait(30)
        time.sleep(0.002 * r)
        try:
            pool.close()  # waits for calls in flight: the store holds no view to refuse for
        except BufferError as e:
            errors.append(f"close refused: {e}")
            break
        assert pool.closed
        for t in threads:
            t.join(30)
            if t.is_alive():
                errors.append("a thread did not finish after close")
        for call in (lambda: store.get(keys, eng, range(4)), lambda: store.put(keys[:1], eng, [0]),
                     lambda: host_stats(store.pool), lambda: store._recency.touch(keys)):
            try:
                call()
                errors.append("a store call on a closed pool did not raise")
            except ValueError as e:
                if not _is_closed_error(e, label):
                    errors.append(f"closed error does not say so: {e}")
        store.close()
        other.clear()
        other.close()
        cxlkit.pool.remove(path)
    if errors:
        print("\n".join(errors[:20]), flush=True)
        os._exit(1)
    os._exit(0)


def test_closing_the_pool_under_a_kv_stores_threads_never_touches_the_unmapped_range(pool_path):
    _in_forked_child(_close_store_under_load, (pool_path, 8), 180,
                     "close under a KV store's threads")


def test_closing_twice_and_from_two_threads_is_harmless(pool_path):
    pool = cxlkit.Pool(pool_path, size=8 * MiB, host_id=0)
    ts = [threading.Thread(target=pool.close) for _ in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
    assert pool.closed
    pool.close()
    with pytest.raises(ValueError, match=f"pool {pool_path} is closed"):
        pool.create("x", 64)
    with pytest.raises(ValueError, match="closed"):
        _native.kv_lookup(pool, ["x"])


def test_an_object_kept_open_after_its_pool_closed_says_closed(pool_path):
    pool = cxlkit.Pool(pool_path, size=8 * MiB, host_id=0)
    obj = pool.create("kept", 64, publish=True)
    view = memoryview(obj)
    with pytest.raises(BufferError, match="views"):
        pool.close()  # views still refuse the close, as before
    view.release()
    pool.close()
    assert obj.closed
    with pytest.raises(ValueError, match="closed"):
        obj.read()
    with pytest.raises(BufferError, match="closed"):
        memoryview(obj)
