"""cxlkit.msg facing what it cannot trust and how it is left: a comm dropped without close()
frees its process (no barrier in a destructor) and warns; lengths read from rings are checked
against the ring and the sender's buffer before anything is sized from them; every error is
a MsgError naming job, rank and pool; the comm runs on the caller's Pool handle (a named host,
a memfd pool) and that pool refuses to close under it."""
from __future__ import annotations

import gc
import struct
import subprocess
import sys
import textwrap

import pytest

import cxlkit
from cxlkit import msg
from cxlkit.errors import (
    MsgClosedError,
    MsgCorruptError,
    MsgError,
    MsgExistsError,
    MsgNotFoundError,
    PeerLostError,
)

CELL_HDR = 16     # ring cell header: stamp, nbytes, kind (native/ring/ring.h)
LEN_AT = 8        # MsgHdr.len: after ctx and tag (native/msg/msg.h)
CELLS_OFF_AT = 24  # ring Header.cells_off


def _run(code: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """code in a fresh interpreter (a hang or crash there fails the test, not the suite)."""
    return subprocess.run([sys.executable, "-W", "always::ResourceWarning", "-c",
                           textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout)


# ---- a comm dropped without close() -----------------------------------------------------

def test_two_comms_in_one_process_dropped_without_close_return_and_warn(pool_path):
    r = _run(f"""
        import gc, threading
        import cxlkit
        from cxlkit import msg
        pool = cxlkit.Pool({pool_path!r}, size="32M", host_id=0)
        comms = [None, None]
        def join(rank):
            comms[rank] = msg.Comm(pool, rank=rank, size=2, job="dropped", join_ms=20000)
        t = threading.Thread(target=join, args=(1,))
        t.start()
        join(0)
        t.join()
        comms[0].send(b"x", dest=1)
        assert comms[1].recv(source=0)[0] == b"x"
        del comms[:]  # neither closed: each leaves without the closing barrier
        gc.collect()
        pool.close()  # nothing attached any more
        print("returned")
    """)
    assert r.returncode == 0, r.stderr
    assert "returned" in r.stdout
    assert r.stderr.count("was not closed") == 2 and "ResourceWarning" in r.stderr


def test_a_dropped_rank_is_gone_for_its_peer_which_is_not_blocked(pool_path):
    r = _run(f"""
        import gc, threading
        import cxlkit
        from cxlkit import msg
        from cxlkit.errors import PeerLostError
        pool = cxlkit.Pool({pool_path!r}, size="32M", host_id=0)
        comms = [None, None]
        def join(rank):
            comms[rank] = msg.Comm(pool, rank=rank, size=2, job="gone", join_ms=20000)
        t = threading.Thread(target=join, args=(1,))
        t.start()
        join(0)
        t.join()
        keep = comms[0]
        del comms[:]
        gc.collect()  # rank 1 dropped
        try:
            keep.recv(source=1)
        except PeerLostError as e:
            print("lost", e.rank)
        try:
            keep.close()
        except PeerLostError as e:
            print("close lost", e.rank)
        pool.close()
    """)
    assert r.returncode == 0, r.stderr
    assert "lost 1" in r.stdout and "close lost 1" in r.stdout


def test_dropping_an_unclosed_comm_warns_ResourceWarning(pool_path):
    pool = cxlkit.Pool(pool_path, size="16M", host_id=0)
    comm = msg.Comm(pool, rank=0, size=1, job="warned")
    with pytest.warns(ResourceWarning, match="job warned rank 0 was not closed"):
        del comm
        gc.collect()
    pool.close()


# ---- one pool face: the caller's handle --------------------------------------------------

def test_comm_runs_on_a_pool_opened_under_a_host_name(pool_path):
    cxlkit.Pool(pool_path, size="16M", host_id=0, max_hosts=4).close()
    with cxlkit.Pool(pool_path, host_id="hostB") as pool:
        with msg.Comm(pool, rank=0, size=1, job="named") as comm:
            comm.send(b"on hostB", 0)
            assert comm.recv()[0] == b"on hostB"
        objs = [o for o in pool.list() if o.name.startswith("msg.named.")]
        assert objs == []  # close removed what the rank made


def test_comm_runs_on_a_memfd_pool(pool_path):
    with cxlkit.Pool(f"memfd:{pool_path.rsplit('/', 1)[-1]}", size="16M") as pool:
        with msg.Comm(pool, rank=0, size=1, job="anon") as comm:
            comm.send(b"anonymous memory", 0)
            assert comm.recv()[0] == b"anonymous memory"
        with msg.Ring.create(pool, "r", cell_bytes=128, ncells=4) as p, \
                msg.Ring.open(pool, "r") as c:
            assert p.push(b"cell") and c.pop() == (b"cell", 0)


def test_pool_refuses_to_close_under_a_comm_and_closes_after_it(pool_path):
    pool = cxlkit.Pool(pool_path, size="16M", host_id=0)
    comm = msg.Comm(pool, rank=0, size=1, job="held")
    with pytest.raises(BufferError, match=f"pool {pool_path} .*messaging"):
        pool.close()
    comm.send(b"still mapped", 0)
    assert comm.recv()[0] == b"still mapped"
    comm.close()
    pool.close()
    assert pool.closed


# ---- lengths read from the pool ----------------------------------------------------------

def _first_cell(pool: cxlkit.Pool, ring: str) -> tuple[cxlkit.pool.PoolObject, int]:
    """The ring object (writable) and the payload offset of its cell 0 (the first message)."""
    obj = pool.open(ring, writable=True)
    cells_off = struct.unpack_from("<Q", obj.read(CELLS_OFF_AT, 8))[0]
    return obj, cells_off + CELL_HDR


@pytest.mark.parametrize("bad_len", [1536 << 20, 1 << 63])
@pytest.mark.parametrize("from_pool_memory", [False, True])
def test_rewritten_rendezvous_length_raises_MsgCorruptError_before_any_buffer(
        pool_path, bad_len, from_pool_memory):
    with cxlkit.Pool(pool_path, size="32M", host_id=0) as pool:
        comm = msg.Comm(pool, rank=0, size=1, job="rts")
        data = b"r" * 100000  # above the eager limit: a request-to-send in the ring
        mem = comm.alloc_mem(len(data)) if from_pool_memory else None
        if mem is not None:
            mem.view[:] = data
        req = comm.isend(mem if mem is not None else data, dest=0, tag=3)
        obj, cell = _first_cell(pool, "msg.rts.0.ring.0")
        obj.write(cell + LEN_AT, struct.pack("<Q", bad_len))
        obj.close()
        with pytest.raises(MsgCorruptError, match="rank 0 wrote") as ei:
            comm.probe(0, 3)
        assert ei.value.rank == 0 and f"pool {pool_path}" in str(ei.value)
        with pytest.raises(MsgCorruptError):
            comm.recv(0, 3)
        del req, mem
        try:
            comm.close()
        except MsgError:
            pass  # the comm's own ring is broken; it is closed all the same


def test_rewritten_eager_length_raises_MsgCorruptError_not_a_crash(pool_path):
    # a one-cell eager message claiming 2^64-1 bytes: its cell count wraps to one
    r = _run(f"""
        import struct
        import cxlkit
        from cxlkit import msg
        from cxlkit.errors import MsgCorruptError
        with cxlkit.Pool({pool_path!r}, size="32M", host_id=0) as pool:
            comm = msg.Comm(pool, rank=0, size=1, job="eager", cell_bytes=4096)
            comm.send(b"e" * (4096 - 16 - 48), dest=0)  # fills the first cell exactly
            obj = pool.open("msg.eager.0.ring.0", writable=True)
            cells = struct.unpack_from("<Q", obj.read({CELLS_OFF_AT}, 8))[0]
            obj.write(cells + {CELL_HDR} + {LEN_AT}, struct.pack("<Q", 2**64 - 1))
            obj.close()
            try:
                comm.probe(0)
            except MsgCorruptError as e:
                print("corrupt rank", e.rank)
            try:
                comm.close()
            except Exception:
                pass
    """)
    assert r.returncode == 0, r.stderr
    assert "corrupt rank 0" in r.stdout


# ---- typed errors ------------------------------------------------------------------------

def test_restart_over_another_hosts_leftovers_raises_MsgExistsError_naming_them(pool_path):
    with cxlkit.Pool(pool_path, size="16M", host_id=0, max_hosts=2) as pool:
        with cxlkit.Pool(pool_path, host_id=1) as other:  # an earlier run put rank 0 there
            other.create("msg.re.0.ring.0", 4096, publish=True).close()
        with pytest.raises(MsgExistsError, match="msg.re.0.ring.0 \\(host 1\\)") as ei:
            with msg.Comm(pool, rank=0, size=1, job="re") as comm:
                comm.send(b"x", 0)
        assert isinstance(ei.value, FileExistsError)
        assert "job re rank 0" in str(ei.value) and pool_path in str(ei.value)


def test_bare_ring_errors_are_MsgErrors_naming_ring_and_pool(pool_path):
    with cxlkit.Pool(pool_path, size="8M", host_id=0) as pool:
        with pytest.raises(MsgNotFoundError, match=f"ring missing in pool {pool_path}") as ei:
            msg.Ring.open(pool, "missing")
        assert isinstance(ei.value, FileNotFoundError)
        pool.create("plain", 4096, publish=True).close()
        with pytest.raises(MsgCorruptError, match="ring plain in pool .*not a ring"):
            msg.Ring.open(pool, "plain")
        with msg.Ring.create(pool, "r", cell_bytes=128, ncells=4) as p, \
                msg.Ring.open(pool, "r") as c:
            with pytest.raises(MsgError, match="ring r in pool"):
                c.push(b"wrong end")
            p.push(b"last")
            p.close()
            assert c.pop() == (b"last", 0)
            with pytest.raises(MsgClosedError) as ei:
                c.wait(timeout=5)
            assert isinstance(ei.value, BrokenPipeError)


def test_comm_errors_name_job_rank_and_pool(pool_path):
    with cxlkit.Pool(pool_path, size="16M", host_id=0) as pool:
        with pytest.raises(MsgError, match="bad ring geometry") as ei:
            msg.Comm(pool, rank=0, size=1, job="geo", cell_bytes=100)
        assert isinstance(ei.value, ValueError) and "job geo rank 0" in str(ei.value)
        with pytest.raises(PeerLostError, match=f"job late rank 0 on pool {pool_path}"):
            msg.Comm(pool, rank=0, size=2, job="late", join_ms=200)
