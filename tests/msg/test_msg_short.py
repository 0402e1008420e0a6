"""Messages of at most 16 bytes travel whole in their cell's first line (ShortHdr in
native/msg/msg.h): every size around that bound arrives intact, in order, with its tag, a
synchronous one is acknowledged, under every coherence (the simulator under --coherence-sim);
a short header rewritten in the pool (a length past the bound or past the cell) is a
MsgCorruptError naming the rank that wrote it, before any byte is copied."""
from __future__ import annotations

import struct

import pytest

import cxlkit
from cxlkit import msg
from cxlkit.errors import MsgCorruptError
from msg_ranks import coherences, make_pool, run_ranks

SIZES = [0, 1, 7, 8, 15, 16, 17, 24, 33, 48, 49, 64]  # both sides of 16 and of a line
CELLS_OFF_AT = 24  # ring Header.cells_off (native/ring/ring.h)
CELL_HDR = 16      # stamp, nbytes, kind
KIND_AT = 12       # CellHdr.kind
SHORT_LEN_AT = 8   # ShortHdr.len: after ctx and tag
KIND_SHORT = 9


def _exchange(comm: msg.Comm) -> list[int]:
    peer = 1 - comm.rank
    got = []
    for n in SIZES:
        payload = bytes((i * 31 + n) & 0xFF for i in range(n))
        if comm.rank == 0:
            comm.send(payload, dest=peer, tag=n)
            comm.isend(payload[::-1], dest=peer, tag=100 + n, sync=True).wait()
        else:
            a, st = comm.recv(source=peer, tag=n)
            b, st2 = comm.recv(source=peer, tag=100 + n)
            assert a == payload and b == payload[::-1]
            assert (st.count, st.tag, st2.count, st2.tag) == (n, n, n, 100 + n)
            got.append(n)
    return got


@pytest.mark.parametrize("coherence", coherences())
def test_sizes_around_the_short_bound_arrive_whole_with_their_tags(pool_path, coherence):
    make_pool(pool_path, 2, coherence)
    res = run_ranks(pool_path, 2, _exchange, coherence=coherence)
    assert res[1] == SIZES


def _short_cell(pool: cxlkit.Pool, ring: str) -> tuple[cxlkit.pool.PoolObject, int]:
    """The ring object (writable) and the offset of its cell 0, which holds a short message."""
    obj = pool.open(ring, writable=True)
    cell = struct.unpack_from("<Q", obj.read(CELLS_OFF_AT, 8))[0]
    assert struct.unpack_from("<I", obj.read(cell + KIND_AT, 4))[0] == KIND_SHORT
    return obj, cell


@pytest.mark.parametrize("bad_len", [17, 1 << 31])
def test_rewritten_short_length_raises_MsgCorruptError_naming_the_rank(pool_path, bad_len):
    with cxlkit.Pool(pool_path, size="32M", host_id=0) as pool:
        comm = msg.Comm(pool, rank=0, size=1, job="short", timeout=20)
        comm.send(b"12345678", dest=0, tag=4)
        obj, cell = _short_cell(pool, "msg.short.0.ring.0")
        obj.write(cell + CELL_HDR + SHORT_LEN_AT, struct.pack("<I", bad_len))
        obj.close()
        with pytest.raises(MsgCorruptError, match="rank 0 wrote") as ei:
            comm.probe(0, 4)
        assert ei.value.rank == 0 and f"pool {pool_path}" in str(ei.value)
        try:
            comm.close()
        except cxlkit.errors.MsgError:
            pass  # the comm's own ring is broken; it is closed all the same
