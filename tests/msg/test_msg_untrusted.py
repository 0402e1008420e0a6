"""cxlkit.msg facing what it cannot trust and how it is left: a comm dropped without close()
frees its process (no barrier in a destructor) and warns; lengths read from rings are checked
against the ring and the sender's buffer before anything is sized from them; every error is
a MsgError naming job, rank and pool; the comm runs on the caller's Pool handle (a named host,
a memfd pool) and that pool refuses to close under it."""
from __future__ import annotations

import gc
import os
import struct
import subprocess
import sys
import textwrap

import pytest

import cxlkit
from cxlkit import msg
from msg_ranks import coherences, make_pool, run_ranks
from cxlkit.errors import (
    MsgClosedError,
    MsgCorruptError,
    MsgError,
    MsgExistsError,
    MsgNotFoundError,
    MsgVersionError,
    PeerLostError,
)

CELL_HDR = 16     # ring cell header: stamp, nbytes, kind (native/ring/ring.h)
LEN_AT = 8        # MsgHdr.len: after ctx and tag (native/msg/msg.h)
CELLS_OFF_AT = 24  # ring Header.cells_off
RANK_MAGIC = 0x314B4E41524B5843  # a rank object's RankHdr.magic (native/msg/msg.h)


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
            comms[rank] = msg.Comm(pool, rank=rank, size=2, job="dropped", join_timeout=20)
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
            comms[rank] = msg.Comm(pool, rank=rank, size=2, job="gone", join_timeout=20)
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


def test_a_rank_whose_barrier_failed_does_not_run_ahead_of_a_late_peer(pool_path):
    # rank 0 gives up on a late rank 1 three times; its later barriers return that failure
    # without entering again, so the late rank finds rank 0 in the barrier it gave up on
    # (rank 0 arrived: rank 1 passes) and never two ahead (which reads as corruption)
    r = _run(f"""
        import gc, threading
        import cxlkit
        from cxlkit import msg
        from cxlkit.errors import PeerLostError
        pool = cxlkit.Pool({pool_path!r}, size="32M", host_id=0)
        comms = [None, None]
        def join(rank, timeout):
            comms[rank] = msg.Comm(pool, rank=rank, size=2, job="late", join_timeout=20,
                                   timeout=timeout)
        t = threading.Thread(target=join, args=(1, 20))
        t.start()
        join(0, 0.2)
        t.join()
        for _ in range(3):
            try:
                comms[0].barrier()
            except PeerLostError as e:
                print("rank 0 gave up on", e.rank)
        comms[1].barrier()
        print("late rank passed")
        del comms[:]  # dropped: each leaves without the closing barrier rank 0 cannot pass
        gc.collect()
        pool.close()
    """)
    assert r.stdout.count("rank 0 gave up on 1") == 3, r.stdout + r.stderr
    assert "late rank passed" in r.stdout, r.stdout + r.stderr


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


def test_an_error_leaving_a_pool_block_is_not_hidden_by_the_comm_still_using_the_pool(
        pool_path):
    # a failed step leaves the block with the comm still open: the step's error is the one
    # raised, not the pool's refusal to close under the comm (which a clean exit still gets)
    with pytest.raises(msg.MsgError, match="nobody"):
        with cxlkit.Pool(pool_path, size="16M", host_id=0) as pool:
            comm = msg.Comm(pool, rank=0, size=1, job="failing")
            raise msg.MsgError(0, "a step failed: nobody answered")
    comm.close()
    with pytest.raises(BufferError, match="messaging"):
        with cxlkit.Pool(pool_path, host_id=0) as pool:
            comm = msg.Comm(pool, rank=0, size=1, job="clean")
    comm.close()
    pool.close()


# ---- lengths read from the pool (every wait bounded: timeout) ------------------------

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
        comm = msg.Comm(pool, rank=0, size=1, job="rts", timeout=20)
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
            comm = msg.Comm(pool, rank=0, size=1, job="eager", cell_bytes=4096,
                                timeout=20)
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


def test_a_rank_of_another_format_version_is_named_when_the_join_gives_up(pool_path):
    # rank 0's object as a library of another messaging format writes it: magic, version 1,
    # rank 0 of 2 (RankHdr: magic, version, nranks, rank), live pid; rank 1 gives up its join
    # with that reason, not a bare timeout
    hdr = struct.pack("<QIIIIQ", RANK_MAGIC, 1, 2, 0, 1, os.getpid())
    with cxlkit.Pool(pool_path, size="16M", host_id=0, max_hosts=2) as pool:
        with cxlkit.Pool(pool_path, host_id=1) as other:
            other.create("msg.vj.0.rank", 65536, data=hdr.ljust(65536, b"\0")).close()
            with pytest.raises(MsgVersionError, match="same cxlkit version") as ei:
                msg.Comm(pool, rank=1, size=2, job="vj", join_timeout=0.5)
        assert "job vj rank 1" in str(ei.value) and pool_path in str(ei.value)
        assert isinstance(ei.value, MsgError)


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
            msg.Comm(pool, rank=0, size=2, job="late", join_timeout=0.2)


# ---- checksum mode -----------------------------------------------------------------------

def _checksummed_pingpong(comm: msg.Comm) -> list[int]:
    sizes = [0, 1, 3000, 4032, 8000, 9000, 70000, 1 << 20]
    for n in sizes:
        payload = bytes((i * 13 + n) & 0xFF for i in range(n))
        if comm.rank == 0:
            comm.send(payload, dest=1, tag=1)
            comm.send(payload, dest=1, tag=2)
            mem = comm.alloc_mem(max(n, 1))
            mem.view[:n] = payload
            comm.send(memoryview(mem.view)[:n], dest=1, tag=3)
            mem.free()
        else:
            assert comm.recv(source=0, tag=1)[0] == payload
            short = bytearray(n // 2)  # truncated: the checksum still covers every byte
            if n >= 2:
                with pytest.raises(cxlkit.errors.TruncationError):
                    comm.recv_into(short, source=0, tag=2)
                assert bytes(short) == payload[:n // 2]
            else:
                comm.recv(source=0, tag=2)
            assert comm.recv(source=0, tag=3)[0] == payload
    comm.barrier()
    return sizes


@pytest.mark.parametrize("coherence", coherences())
def test_checksum_mode_passes_intact_messages_of_every_path(pool_path, coherence):
    make_pool(pool_path, 2, coherence)
    res = run_ranks(pool_path, 2, _checksummed_pingpong, coherence=coherence, checksum=True,
                    cell_bytes=1024, ncells=16, eager_bytes=8000)
    assert res[0] == res[1]


def _corrupt(pool: cxlkit.Pool, name: str, pos: int) -> None:
    with pool.open(name, writable=True) as obj:
        obj.write(pos, bytes([obj.read(pos, 1)[0] ^ 0x5A]))


def test_checksum_mode_catches_a_flipped_byte_in_a_ring_cell(pool_path):
    with cxlkit.Pool(pool_path, size="32M", host_id=0) as pool:
        comm = msg.Comm(pool, rank=0, size=1, job="ck", checksum=True, cell_bytes=1024,
                        ncells=16, eager_bytes=3000, timeout=20)
        for k in range(4):
            comm.send(bytes([k]) * 2500, dest=0, tag=k)  # three cells each
        obj, cell0 = _first_cell(pool, "msg.ck.0.ring.0")
        obj.close()
        _corrupt(pool, "msg.ck.0.ring.0", cell0 + 4 * 1024 + 200)  # message 1's second cell
        assert comm.recv(0, 0)[0] == bytes([0]) * 2500
        with pytest.raises(MsgCorruptError, match="rank 0 wrote") as ei:
            comm.recv(0, 1)
        assert ei.value.rank == 0
        try:
            comm.close()
        except MsgError:
            pass


@pytest.mark.parametrize("from_pool_memory", [False, True])
def test_checksum_mode_catches_a_flipped_byte_of_a_rendezvous(pool_path, from_pool_memory):
    with cxlkit.Pool(pool_path, size="32M", host_id=0) as pool:
        comm = msg.Comm(pool, rank=0, size=1, job="ckr", checksum=True, timeout=20)
        data = bytes(range(256)) * 400
        mem = comm.alloc_mem(len(data)) if from_pool_memory else None
        if mem is not None:
            mem.view[:] = data
        req = comm.isend(mem if mem is not None else data, dest=0, tag=7)
        name = "msg.ckr.0.mem.0" if from_pool_memory else "msg.ckr.0.rdv.0"
        _corrupt(pool, name, 64 + 5000)  # past the buffer's header line
        with pytest.raises(MsgCorruptError, match="rank 0"):
            comm.recv(0, 7)
        del req, mem  # its FIN came back on the broken ring (a rank sending to itself)
        try:
            comm.close()
        except MsgError:
            pass


def test_checksum_mode_refuses_a_message_without_a_checksum(pool_path):
    with cxlkit.Pool(pool_path, size="16M", host_id=0) as pool:
        comm = msg.Comm(pool, rank=0, size=1, job="mixed", timeout=20)
        comm.send(b"unchecked", dest=0)
        comm._c.set_checksum(True)  # as a peer in checksum mode would receive it
        with pytest.raises(MsgCorruptError):
            comm.recv(0)
        try:
            comm.close()
        except MsgError:
            pass


def test_a_closed_comm_or_ring_raises_a_MsgError_that_is_still_a_ValueError(pool_path):
    with cxlkit.Pool(pool_path, size="16M", host_id=0) as pool:
        comm = msg.Comm(pool, rank=0, size=1, job="shut")
        comm.close()
        with pytest.raises(msg.MsgError, match="job shut rank 0 .*communicator is closed") as ei:
            comm.send(b"x", 0)
        assert isinstance(ei.value, ValueError)
        ring = msg.Ring.create(pool, "shut-ring", cell_bytes=128, ncells=4)
        ring.close()
        with pytest.raises(msg.MsgError, match="ring is closed") as ei:
            ring.push(b"x")
        assert isinstance(ei.value, ValueError)
