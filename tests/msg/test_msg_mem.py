"""cxlkit.msg pool-resident memory (Comm.alloc_mem): a send above the eager limit from it
travels in one copy (the receiver copies straight out of the sender's block), beside sends
from ordinary memory: both paths, wildcards, truncation, free and close refused while in use,
a forged request-to-send naming bytes outside the block, a receiver killed mid-rendezvous."""
from __future__ import annotations

import errno
import multiprocessing as mp
import signal
import struct
from typing import Any

import numpy as np
import pytest

import cxlkit
from cxlkit import msg
from cxlkit.errors import MsgError, PeerLostError, TruncationError

from msg_ranks import coherences, make_pool, run_ranks

BIG = 300 * 1024  # above the eager limit: rendezvous


def _pattern(n: int, seed: int) -> np.ndarray:
    return ((np.arange(n, dtype=np.uint64) * 7 + seed * 131 + 1) & 0xFF).astype(np.uint8)


def _both_paths(comm: msg.Comm) -> list[str]:
    seen = []
    with comm.alloc_mem(2 * BIG) as mem:
        a = np.frombuffer(mem.view, dtype=np.uint8)
        assert a.size == mem.nbytes == 2 * BIG and not a.any()  # zeroed
        assert comm.is_pool_mem(mem) and comm.is_pool_mem(a[BIG:])
        assert not comm.is_pool_mem(bytearray(BIG))
        if comm.rank == 1:
            a[:BIG] = _pattern(BIG, 1)
            a[BIG:] = _pattern(BIG, 2)
            comm.send(a[:BIG], dest=0, tag=1)              # one copy, posted at rank 0
            comm.send(_pattern(BIG, 3).tobytes(), 0, tag=2)  # ordinary memory: two copies
            req = comm.isend(a[BIG:], dest=0, tag=3)        # one copy, unexpected at rank 0
            with pytest.raises(BufferError):
                mem.free()  # views are alive: the array, and the send's (rank 0 receives it
                            # only after the barrier); the C test checks free's own -EBUSY
            comm.barrier()
            req.wait()
            del req
            comm.send(a[:BIG], dest=0, tag=4)               # truncated at rank 0
        else:
            buf = bytearray(BIG)
            for tag in (1, 2):
                st = comm.recv_into(buf, msg.ANY_SOURCE, msg.ANY_TAG)
                assert st == msg.Status(1, tag, BIG)
                assert np.array_equal(np.frombuffer(buf, np.uint8), _pattern(BIG, 1 if tag == 1 else 3))
                seen.append(f"tag {tag}")
            comm.barrier()
            while comm.iprobe(1, 3) is None:
                pass
            a[:] = 0  # receive into pool memory too: any buffer works
            st = comm.recv_into(a[:BIG], 1, 3)
            assert st.count == BIG and np.array_equal(a[:BIG], _pattern(BIG, 2))
            small = bytearray(1000)
            with pytest.raises(TruncationError):
                comm.recv_into(small, 1, 4)
            assert np.array_equal(np.frombuffer(small, np.uint8), _pattern(BIG, 1)[:1000])
            seen.append("unexpected and truncated")
        del a
    return seen


@pytest.mark.parametrize("coherence", coherences())
def test_sends_from_pool_memory_and_from_the_heap_deliver_every_byte(pool_path, coherence):
    make_pool(pool_path, 2, coherence)
    res = run_ranks(pool_path, 2, _both_paths, coherence=coherence)
    assert res[0] == ["tag 1", "tag 2", "unexpected and truncated"]


def _lifetime(comm: msg.Comm) -> str:
    with pytest.raises(ValueError, match="nbytes 0"):
        comm.alloc_mem(0)
    mem = comm.alloc_mem(4096)
    v = mem.view
    with pytest.raises(BufferError):
        mem.free()
    with pytest.raises(BufferError):
        comm.close()
    v.release()
    mem.free()
    mem.free()  # a second free does nothing
    with pytest.raises(BufferError, match="freed"):
        memoryview(mem._m)
    return "ok"


def test_free_and_close_refuse_while_the_memory_is_viewed(pool_path):
    make_pool(pool_path, 2)
    assert run_ranks(pool_path, 1, _lifetime) == ["ok"]


def _forged(comm: msg.Comm, path: str, seen: Any) -> str:
    mem = comm.alloc_mem(BIG)
    if comm.rank == 0:
        comm.send(b"x", dest=1, tag=0)  # the ring to rank 1 exists
        # a request-to-send (kind 3) naming my block (index 0, flag "in pool") with an offset
        # past its end: the layout of native/msg/msg.h's MsgHdr
        hdr = struct.pack("<IiQQIIQII", 0, 9, BIG, 77, 2, 1, BIG - 10, 0, 0)
        with cxlkit.Pool(path, host_id=0) as pool:
            ring = msg.Ring.open(pool, f"msg.{comm.job}.0.ring.1", role="producer")
            assert ring.push(hdr, kind=3)
            ring.close()
        comm.barrier()
        # my comm's producer still stands where the forged cell is: anything it sends (the
        # drop that free queues, finalize's traffic) would overwrite that cell, so wait until
        # rank 1 has read it. Not a barrier: rank 1's failed one fails every later one.
        assert seen.wait(60), "rank 1 never reported the forged request"
        mem.free()
        try:  # rank 1 leaves without the closing barrier (its barriers failed): lost to me
            comm.close()
        except PeerLostError as e:
            assert e.rank == 1
        return "forged"
    assert comm.recv(0, 0)[0] == b"x"
    with pytest.raises(MsgError) as e:  # checked on arrival: the barrier's progress may see it
        comm.barrier()
        comm.recv_into(bytearray(BIG), 0, 9)
    assert e.value.errno == errno.EBADMSG and "rank 0" in str(e.value)
    seen.set()
    try:  # the broken peer stays broken: finalize may report it again (as the C test allows)
        comm.close()
    except MsgError as e2:
        assert e2.errno == errno.EBADMSG and "rank 0" in str(e2)
    return "refused"


def test_forged_request_to_send_outside_the_block_raises_naming_the_sender(pool_path):
    make_pool(pool_path, 2)
    seen = mp.get_context("fork").Event()  # the ranks are forked: both hold it

    def fn(comm: msg.Comm) -> str:
        return _forged(comm, pool_path, seen)

    assert run_ranks(pool_path, 2, fn, job="forge") == ["forged", "refused"]


def _killed_rank(path: str, rank: int, conn) -> None:
    import os

    try:
        pool = cxlkit.Pool(path, host_id=rank)
        comm = msg.Comm(pool, rank=rank, size=2, job="killmem", join_timeout=20, dead_timeout=2)
        mem = comm.alloc_mem(BIG)
        if rank == 1:
            comm.barrier()
            os.kill(os.getpid(), signal.SIGKILL)
        req = comm.isend(mem, dest=1, tag=5)
        comm.barrier()
        out = "no error"
        try:
            req.wait()
        except PeerLostError as e:
            out = f"lost {e.rank}"
        del req  # never completes; its view of the pool memory is let go all the same
        try:
            comm.close()  # its barrier needs the dead rank too; the comm is closed anyway
        except PeerLostError as e:
            out += f", close lost {e.rank}"
        pool.close()
        conn.send(out)
    except BaseException as e:  # reported by the parent
        conn.send(f"{type(e).__name__}: {e}")
    os._exit(0)


def test_receiver_killed_mid_rendezvous_fails_the_senders_wait_naming_it(pool_path):
    make_pool(pool_path, 2)
    ctx = mp.get_context("fork")
    procs, conns = [], []
    for r in range(2):
        a, b = ctx.Pipe(duplex=False)
        p = ctx.Process(target=_killed_rank, args=(pool_path, r, b))
        p.start()
        procs.append(p)
        conns.append(a)
    assert conns[0].poll(30)
    assert conns[0].recv() == "lost 1, close lost 1"
    for p in procs:
        p.join(10)
    assert procs[1].exitcode == -signal.SIGKILL


def _rdv_sizes(comm: msg.Comm) -> int:
    for n in (5000, BIG, 1 << 20):
        if comm.rank == 0:
            comm.send(_pattern(n, n % 251).tobytes(), dest=1, tag=1)
        else:
            data, st = comm.recv(0, 1)
            assert st.count == n and data == _pattern(n, n % 251).tobytes()
    return 3


@pytest.mark.parametrize("switches", [{"CXLKIT_MSG_RDV_NT": "1"}, {"CXLKIT_MSG_RDV_CHUNK": "4096"},
                                      {"CXLKIT_MSG_RDV_NT": "1", "CXLKIT_MSG_RDV_CHUNK": "8192"}])
def test_rendezvous_copy_switches_deliver_every_byte(pool_path, monkeypatch, switches):
    # the A/B switches of docs/msg.md's fifth round: non-temporal stores into the rendezvous
    # buffer, the ready chunk (at least 4096 bytes)
    for k, v in switches.items():
        monkeypatch.setenv(k, v)
    make_pool(pool_path, 2)
    assert run_ranks(pool_path, 2, _rdv_sizes) == [3, 3]
