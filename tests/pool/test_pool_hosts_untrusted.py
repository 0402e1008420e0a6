"""Another host's slot is untrusted input: bakery registers that stay put while their host
lives make a create raise PoolHostStuckError naming that host (never a hang), registers no host
writes are skipped and reported by fsck, and counters that contradict the block chain are
reported by fsck and rebuilt by the create they would refuse.

A "fake" host is slot 1 kept alive (boot word, fresh heartbeat) by a thread of the child that
writes the mapped pool file directly: no cxlkit code runs for it, so nothing clears its words.
Each case runs in a child with a timeout, so a regression fails instead of hanging."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

import cxlkit

CHILD_TIMEOUT_S = 60

PRELUDE = textwrap.dedent("""
    import ctypes, errno, mmap, os, struct, sys, threading, time
    import cxlkit
    from cxlkit.errors import PoolHostStuckError

    path = sys.argv[1]
    # format.h: host slots of 4096 bytes from the superblock's host_table_off (offset 112)
    BOOT, BEAT, CHOOSING, NUMBER, USED, FREE, LIVE = 32, 40, 64, 72, 192, 200, 208
    p = cxlkit.Pool(path, size="8M", host_id=0, max_hosts=2, max_objects=256,
                    lease_timeout=1)
    f = open(path, "r+b")
    m = mmap.mmap(f.fileno(), 0)
    table = struct.unpack_from("<Q", m, 112)[0]

    def put(h, off, v):
        # one 8-byte store, as a host writes its words: struct.pack_into writes byte by byte,
        # and a reader that catches a torn heartbeat takes the host for dead
        ctypes.c_uint64.from_buffer(m, table + 4096 * h + off).value = v

    def get(h, off):
        return struct.unpack_from("<Q", m, table + 4096 * h + off)[0]

    stop = threading.Event()

    def beat():
        while not stop.is_set():
            put(1, BEAT, time.time_ns())
            stop.wait(0.02)

    m[table + 4096:table + 4096 + 5] = b"fake\\0"
    put(1, BEAT, time.time_ns())
    put(1, BOOT, 0x8000000000000ABC)
    threading.Thread(target=beat, daemon=True).start()
""")


def run_child(path: str, body: str) -> str:
    r = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(body), path],
                       capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_create_behind_stuck_bakery_registers_raises_PoolHostStuckError_naming_the_host(
        pool_path):
    out = run_child(pool_path, """
        put(1, NUMBER, 1)  # a ticket below any we draw, never moving
        try:
            p.create("a", data=b"x" * 100)
            sys.exit("created behind host 1's registers")
        except PoolHostStuckError as e:
            assert isinstance(e, TimeoutError) and e.errno == errno.ETIMEDOUT
            assert e.host == 1, e.host
            print(e)
        assert get(0, CHOOSING) == 0 and get(0, NUMBER) == 0  # ours released
        put(1, NUMBER, 0)
        p.create("b", data=b"y" * 100).close()  # nothing stayed held
        assert "a" not in p and "b" in p
    """)
    assert "host slot 1 (fake)" in out and "bakery registers" in out, out


def test_registers_no_host_writes_are_skipped_and_reported_by_fsck(pool_path):
    out = run_child(pool_path, """
        put(1, CHOOSING, 7)
        put(1, NUMBER, 2**64 - 1)  # a ticket drawn past it wraps to 0
        p.create("a", data=b"x" * 100).close()
        rep = p.fsck(repair=False)
        print(rep.registers_bad, rep.clean, rep.errors)
    """)
    assert out.split() == ["1", "False", "0"], out


def test_counters_that_contradict_the_chain_are_reported_and_rebuilt(pool_path):
    out = run_child(pool_path, """
        for n in ("a", "b", "c"):
            p.create(n, data=b"x" * 1000).close()
        put(0, LIVE, 256)  # the name table full by the counters, not by the chain
        put(0, USED, 2 * 256 * 384)
        put(0, FREE, 0)
        before = p.fsck(repair=False)
        p.create("d", data=b"y" * 1000).close()
        after = p.fsck(repair=False)
        print(before.counters_wrong, before.clean, after.counters_wrong, after.clean,
              p.stat().objects_host)
    """)
    assert out.split() == ["1", "False", "0", "True", "4"], out


def test_fsck_repair_rebuilds_this_hosts_counters(pool_path):
    with cxlkit.Pool(pool_path, size="8M", host_id=0, max_objects=256) as p:
        p.create("a", data=b"x" * 1000).close()
        assert p.fsck(repair=True).counters_rebuilt == 0
    import mmap
    import struct
    with open(pool_path, "r+b") as f:
        m = mmap.mmap(f.fileno(), 0)
        table = struct.unpack_from("<Q", m, 112)[0]
        struct.pack_into("<Q", m, table + 208, 256)       # nlive
        struct.pack_into("<Q", m, table + 192, 200_000)   # used_bytes
        struct.pack_into("<Q", m, table + 200, 0)         # free_bytes
        m.close()
    with cxlkit.Pool(pool_path, host_id=0) as p:
        assert p.fsck(repair=False).counters_wrong == 1
        rep = p.fsck(repair=True)
        assert rep.counters_rebuilt == 1 and rep.counters_wrong == 0 and rep.clean
        assert p.stat().objects_host == 1


@pytest.mark.parametrize("field", ["registers_bad", "counters_wrong"])
def test_fsck_report_is_unclean_with_each_finding(field):
    zero = {k: 0 for k in cxlkit.pool.FsckReport._fields}
    assert cxlkit.pool.FsckReport(**zero).clean
    assert not cxlkit.pool.FsckReport(**{**zero, field: 1}).clean
