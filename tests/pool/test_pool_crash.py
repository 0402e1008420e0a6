"""Crashes: a process killed at each crash point of create / publish / destroy / the host lock
and while taking a host slot over, and a kill -9 loop (bounded in time) over a process doing
random pool work, leave the pool consistent: fsck finds nothing broken, half-created objects
are reclaimed, dead processes' leases expire, every object whose publish returned is still
there and intact, and the next opener of a half-taken-over slot takes it over itself."""
from __future__ import annotations

import multiprocessing as mp
import os
import random
import signal
import struct
import sys
import time
from pathlib import Path

import pytest

import cxlkit
from cxlkit import _native

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fuzz"))
from harness import journal_state, payload  # noqa: E402

MiB = 1 << 20
POINTS = ["create.alloc", "create.entry", "publish.header", "destroy.header", "destroy.free",
          "locked"]


@pytest.fixture
def path(pool_path):  # conftest: a private /dev/shm path, removed afterwards
    return pool_path


def _crash_child(path, point):
    pool = cxlkit.Pool(path, host_id=0)
    _native.pool_crash_at(point, 1)
    obj = pool.create("victim", 5000, data=payload("victim", 5000))
    obj.close()
    pool.destroy("victim")
    os._exit(0)  # not reached: every point is on this path


def assert_consistent(pool: cxlkit.Pool, expected: set[str], in_flight: str | None = None,
                      other_hosts_used: int = 0):
    rep = pool.fsck(repair=True)
    assert rep.clean, rep
    assert rep.objects_creating == 0 and rep.objects_dead == 0, rep
    names = {o.name for o in pool.list()}
    assert names - {in_flight} == expected - {in_flight}, (names, expected, in_flight)
    for name in names:
        with pool.open(name) as o:
            assert o.read() == payload(name, o.nbytes)
            o.verify()
    st = pool.stat()
    assert st.used_bytes + st.free_bytes == st.extents_held * st.extent_bytes
    assert st.used_bytes + other_hosts_used == rep.bytes_used


@pytest.mark.parametrize("point", POINTS)
def test_process_killed_at_crash_point_leaves_pool_consistent(path, point):
    with cxlkit.Pool(path, size=8 * MiB, host_id=0, max_hosts=2) as pool:
        pool.create("keep", data=payload("keep", 3000)).close()
    child = mp.get_context("fork").Process(target=_crash_child, args=(path, point))
    child.start()
    child.join(60)
    assert child.exitcode == 137  # died at the point, as if killed
    with cxlkit.Pool(path, host_id=0) as pool:
        assert_consistent(pool, {"keep"}, in_flight="victim")


def _nozero_child(path, ready, go):
    pool = cxlkit.Pool(path, host_id=0)
    obj = pool.create("unwritten", 8192, zero=False)
    memoryview(obj)[:100] = b"\xee" * 100  # part of the payload, never published
    ready.set()
    go.wait()
    os._exit(9)  # dies before publish, holding the creator's lease


def test_unzeroed_object_of_a_dead_creator_is_never_visible_and_is_reclaimed(path):
    with cxlkit.Pool(path, size=8 * MiB, host_id=0, max_hosts=2) as pool:
        pool.create("old", data=b"\x5a" * 8192).close()
        pool.destroy("old")  # the block the child will get back, full of old bytes
    ctx = mp.get_context("fork")
    ready, go = ctx.Event(), ctx.Event()
    child = ctx.Process(target=_nozero_child, args=(path, ready, go))
    child.start()
    assert ready.wait(30)
    with cxlkit.Pool(path, host_id=1) as other:
        with pytest.raises(cxlkit.ObjectNotPublishedError):
            other.open("unwritten")  # alive and writing: not readable
        go.set()
        child.join(30)
        assert child.exitcode == 9
        with pytest.raises(cxlkit.ObjectNotPublishedError):
            other.open("unwritten")  # dead before publish: still not readable
    with cxlkit.Pool(path, host_id=0) as pool:
        # reclaimed by the first opener of host 0 (or by this fsck): nothing left in use
        rep = pool.fsck(repair=True)
        assert rep.clean and rep.objects_creating == 0, rep
        assert "unwritten" not in pool and pool.stat().used_bytes == 0
        with pytest.raises(KeyError):
            pool.open("unwritten")
        assert_consistent(pool, set())


def _worker(path, seed, counter, journal):
    rng = random.Random(seed)
    fd = os.open(journal, os.O_WRONLY | os.O_APPEND)
    pool = cxlkit.Pool(path, host_id=0)
    mine = [o.name for o in pool.list() if o.host == 0]
    held = []
    i = 0
    while True:
        i += 1
        r = rng.random()
        if len(mine) > 60:
            r = 0.6  # keep within the partition: destroy
        if r < 0.5 or not mine:
            name = f"c{seed}-{i}"
            n = rng.choice([1, 100, 4096, 50_000, 200_000])
            os.write(fd, f"B {name}\n".encode())
            obj = pool.create(name, n)
            memoryview(obj)[:] = payload(name, n)
            obj.publish(checksum=True)
            obj.close()
            os.write(fd, f"P {name}\n".encode())
            mine.append(name)
        elif r < 0.8:
            name = mine.pop(rng.randrange(len(mine)))
            os.write(fd, f"B {name}\n".encode())
            pool.destroy(name)
            os.write(fd, f"D {name}\n".encode())
        else:
            held.append(pool.open(f"stable{rng.randrange(4)}"))  # another host's object
            if len(held) > 4:
                held.pop(0).close()
        counter.value += 1


def test_kill9_loop_leaves_pool_consistent(path, tmp_path):
    budget_s, max_rounds = 10.0, 40
    journal = tmp_path / "journal"
    journal.write_text("")
    with cxlkit.Pool(path, size=32 * MiB, host_id=1, max_hosts=2) as other:
        for k in range(4):
            other.create(f"stable{k}", data=payload(f"stable{k}", 10_000)).close()
        other_used = other.stat().used_bytes
    ctx = mp.get_context("fork")
    counter = ctx.Value("q", 0, lock=False)
    rng = random.Random(1234)
    t0, rounds = time.monotonic(), 0
    while rounds < max_rounds and time.monotonic() - t0 < budget_s:
        rounds += 1
        counter.value = 0
        target = rng.randrange(1, 120)
        child = ctx.Process(target=_worker, args=(path, rounds, counter, str(journal)))
        child.start()
        while counter.value < target and child.is_alive():
            os.sched_yield()  # kill after `target` operations, at whatever point it is in
        os.kill(child.pid, signal.SIGKILL)
        child.join()
        assert child.exitcode == -signal.SIGKILL
        live, in_flight = journal_state(str(journal))
        with cxlkit.Pool(path, host_id=0) as pool:
            assert_consistent(pool, live | {f"stable{k}" for k in range(4)}, in_flight,
                              other_used)
            if in_flight and in_flight in {o.name for o in pool.list()}:
                pool.destroy(in_flight)  # resolve the uncertain one so the journal is exact
            with open(journal, "a") as f:
                f.write(f"D {in_flight}\n" if in_flight else "")
    assert rounds >= 5
    with cxlkit.Pool(path, host_id=1) as other:
        rep = other.fsck(repair=True)
        assert rep.clean and rep.leases_live == 0
        other.destroy("stable0")  # no dead reader's lease holds it back
        assert other.fsck(repair=False).objects_dead == 0


def _takeover_child(path, host):
    _native.pool_crash_at("takeover", 1)
    cxlkit.Pool(path, host_id=host)
    os._exit(0)  # not reached: the open takes the slot over


def _boot_word(path: str, host: int) -> int:
    with open(path, "rb") as f:
        f.seek(4096 + host * 4096 + 32)  # host slot h, line 0: tag[32], then boot
        return struct.unpack("<Q", f.read(8))[0]


@pytest.mark.parametrize("slot", ["fresh", "previous-boot"])
def test_process_killed_while_taking_a_host_slot_over_leaves_it_recoverable(path, slot):
    with cxlkit.Pool(path, size=8 * MiB, host_id=0, max_hosts=2) as pool:
        pool.create("keep", data=payload("keep", 3000)).close()
    host = 1 if slot == "fresh" else 0
    if slot == "previous-boot":
        # host 0 "rebooted" while one of its processes held the lock: another boot hash in
        # the boot word and a mutex owned by a thread id that no longer exists
        with open(path, "r+b") as f:
            f.seek(4096 + 32)
            f.write(struct.pack("<Q", 0x8000_0000_0000_1234))
            f.seek(4096 + 128)
            f.write(struct.pack("<i", 0x3FFF_FFF0))
    child = mp.get_context("fork").Process(target=_takeover_child, args=(path, host))
    child.start()
    child.join(60)
    assert child.exitcode == 137  # died in the middle of the takeover
    assert _boot_word(path, host) == 2  # left busy (kBootBusy)
    # the next opener of that host takes over itself instead of waiting for the dead taker
    with cxlkit.Pool(path, host_id=host) as pool:
        assert pool.host_id == host
        keep_block = (320 + 3000 + 63) // 64 * 64  # header + payload, in 64-byte lines
        assert_consistent(pool, {"keep"}, other_hosts_used=keep_block if host == 1 else 0)
        pool.create("after", data=payload("after", 100)).close()
    assert _boot_word(path, host) not in (1, 2)
