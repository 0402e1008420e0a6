"""Messaging and RPC across two guests (two machines that share no cache: their QEMUs map one
backing file) on the shared devdax pool with coherence="none": guest a is rank 0, guest b
rank 1. A ping-pong over eager and rendezvous sizes, one-sided operations checked against a
reference computed locally, and an RPC call from b to a server on a."""
from __future__ import annotations

import os
import struct
import time

import numpy as np
import pytest

import cxlkit
from cxlkit import msg
from cxlkit.msg import rpc

pytestmark = [pytest.mark.vm, pytest.mark.topology("two-hosts")]
DAX = "/dev/dax0.0"
WAIT_S = 240.0  # host b boots ~10 s after a; python under TCG is slow to start
SIZES = [0, 1, 8, 4000, 70000, 1 << 20]


def _pool() -> cxlkit.Pool:
    me = os.environ["CXLKIT_VM_HOST"]
    if me == "a":
        return cxlkit.Pool(DAX, create=True, host_id=0, coherence="none")
    deadline = time.monotonic() + WAIT_S
    while True:  # a formats the device first
        try:
            return cxlkit.Pool(DAX, host_id=1, coherence="none")
        except (cxlkit.PoolFormatError, cxlkit.PoolCorruptError, FileNotFoundError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _comm(pool: cxlkit.Pool) -> msg.Comm:
    rank = 0 if os.environ["CXLKIT_VM_HOST"] == "a" else 1
    # another machine's rank is dead only after its heartbeat stopped for dead_timeout: TCG
    # guests stall for seconds at a time
    return msg.Comm(pool, rank=rank, size=2, job="vm2", join_timeout=WAIT_S,
                    dead_timeout=60, timeout=WAIT_S)


def test_pingpong_and_rma_across_two_guests_without_shared_caches():
    with _pool() as pool, _comm(pool) as comm:
        for n in SIZES:
            payload = bytes((i * 13 + n) & 0xFF for i in range(n))
            if comm.rank == 0:
                comm.send(payload, dest=1, tag=n % 1000)
                back, st = comm.recv(source=1, tag=n % 1000)
                assert back == payload[::-1] and st.count == n
            else:
                data, st = comm.recv(source=0)
                assert data == payload
                comm.send(data[::-1], dest=0, tag=st.tag)
        with comm.window(4096) as win:
            other = 1 - comm.rank
            win.fence()
            win.put(struct.pack("<q", 100 + comm.rank), other, 8 * comm.rank)
            win.accumulate(np.arange(4, dtype=np.int64) * (comm.rank + 1), 0, 64, op="sum")
            win.accumulate(np.array([comm.rank * 10 - 3], dtype=np.int64), 0, 96, op="max")
            win.fence()
            local = np.frombuffer(win.local, dtype=np.int64).copy()  # no view kept: free() needs none
            assert local[other] == 100 + other
            if comm.rank == 0:
                assert local[8:12].tolist() == [0, 3, 6, 9]  # (1 + 2) * arange(4)
                assert local[12] == 7
            old = win.fetch_and_op(5, 0, 200, op="sum")
            win.fence()
            assert old in (0, 5)
            got = win.get(8, 0, 200)
            assert struct.unpack("<q", got)[0] == 10
            win.fence()


def test_rpc_call_from_one_guest_to_a_server_on_the_other():
    with _pool() as pool:
        if os.environ["CXLKIT_VM_HOST"] == "a":
            with rpc.Server(pool, "vmsvc", max_clients=2) as srv:
                srv.add_handler("sq", lambda d: struct.pack("<q", struct.unpack("<q", d)[0] ** 2))
                srv.add_handler("bye", lambda d: srv.stop())
                assert srv.serve(timeout=WAIT_S) == 3
        else:
            with rpc.Client(pool, "vmsvc", timeout=WAIT_S) as c:
                assert c.call("sq", struct.pack("<q", 12)) == struct.pack("<q", 144)
                assert c.call_many("sq", [struct.pack("<q", 3)]) == [struct.pack("<q", 9)]
                assert c.call("bye") == b""
