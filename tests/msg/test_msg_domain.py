"""Coherence domains (cxk_msg_opts.domain, Comm(domain=)): on a pool of coherence "none",
ranks that give one domain (one machine) skip the flushes between them, every other pair
keeps them, and every kind of message arrives intact either way: short, eager over several
cells, rendezvous, one-copy from pool memory, synchronous. Under "host" every pair is
coherent; under the simulator (`pytest --coherence-sim`, a view per host slot) none is but
the rank itself."""
from __future__ import annotations

import pytest

import cxlkit
from cxlkit import msg
from msg_ranks import coherences, make_pool, run_ranks

SIZES = [8, 3000, 20_000, 600_000]  # short, one cell, several cells, rendezvous (4 KiB cells)


def _payload(src: int, dst: int, n: int) -> bytes:
    return bytes((i * 7 + src * 31 + dst * 13 + n) & 0xFF for i in range(n))


def _all_pairs(comm: msg.Comm) -> list[bool]:
    """Every rank sends every size to every other rank (from pool memory too, and one
    synchronous send each) and checks what it receives; returns peer_coherent per rank."""
    me, n, big = comm.rank, comm.size, SIZES[-1]
    mem = comm.alloc_mem(n * big)  # a block of its own per receiver: sends from it overlap
    view = mem.view
    reqs = []
    for dst in range(n):
        if dst == me:
            continue
        for k, size in enumerate(SIZES):
            reqs.append(comm.isend(_payload(me, dst, size), dest=dst, tag=k))
        view[dst * big:(dst + 1) * big] = _payload(me, dst, big)
        reqs.append(comm.isend(view[dst * big:(dst + 1) * big], dest=dst, tag=50))
        reqs.append(comm.isend(b"sync", dest=dst, tag=60, sync=True))
    for src in range(n):
        if src == me:
            continue
        for k, size in enumerate(SIZES):
            got, st = comm.recv(source=src, tag=k)
            assert got == _payload(src, me, size), (src, size)
            assert (st.source, st.count) == (src, size)
        got, _ = comm.recv(source=src, tag=50)
        assert got == _payload(src, me, big)
        assert comm.recv(source=src, tag=60)[0] == b"sync"
    for r in reqs:
        r.wait()
    del reqs
    view.release()
    mem.free()
    return [comm.peer_coherent(p) for p in range(n)]


def _expected(coherence: str, domains: list[int | None]) -> list[list[bool]]:
    n = len(domains)
    if coherence == "host":
        return [[True] * n for _ in range(n)]
    if coherence == "sim":
        return [[False] * n for _ in range(n)]
    return [[a == b or (domains[a] is not None and domains[a] == domains[b])
             for b in range(n)] for a in range(n)]


@pytest.mark.parametrize("coherence", coherences())
def test_ranks_of_one_domain_skip_flushes_and_every_message_arrives(pool_path, coherence):
    domains = [7, 7, 9]  # ranks 0 and 1 on one machine, 2 on another
    make_pool(pool_path, 3, coherence, size="96M")
    got = run_ranks(pool_path, 3, _all_pairs, coherence=coherence, cell_bytes=4096,
                    per_rank=lambda r: {"domain": domains[r]})
    assert got == _expected(coherence, domains)


@pytest.mark.parametrize("coherence", coherences())
def test_a_rank_that_gives_no_domain_pays_the_flushes_with_every_other(pool_path, coherence):
    domains = [5, None]  # as a rank of an older cxlkit, whose rank object says 0
    make_pool(pool_path, 2, coherence)
    got = run_ranks(pool_path, 2, _all_pairs, coherence=coherence, cell_bytes=4096,
                    per_rank=lambda r: {} if domains[r] is None else {"domain": domains[r]})
    assert got == _expected(coherence, domains)


@pytest.mark.parametrize("bad", [0, -1, 2**32, True, 1.0, "a"])
def test_a_bad_domain_is_refused_before_joining(pool_path, bad):
    with cxlkit.Pool(pool_path, size="16M", host_id=0) as pool:
        with pytest.raises(ValueError, match="domain"):
            msg.Comm(pool, rank=0, size=1, job="dom", domain=bad)


@pytest.mark.parametrize("bad", [-1, 1, True, "0"])
def test_peer_coherent_of_no_such_rank_is_refused(pool_path, bad):
    with cxlkit.Pool(pool_path, size="16M", host_id=0) as pool:
        with msg.Comm(pool, rank=0, size=1, job="dom", domain=3) as comm:
            with pytest.raises(ValueError, match="peer"):
                comm.peer_coherent(bad)


def _served_while_waiting_on_another(comm: msg.Comm) -> bool:
    """Rank 0 waits on rank 1, which sends only once rank 2's synchronous send to rank 0 was
    matched, and rank 2 sends only once rank 0 is about to wait: rank 0's wait must keep
    reading rank 2's ring (a wait on one peer of a non-coherent pool looks at the other rings
    less often, never not at all)."""
    big = bytes(range(256)) * 2400  # past the eager limit: a rendezvous
    if comm.rank == 0:
        data, got = bytearray(len(big)), bytearray(5)
        from_2 = comm.irecv(data, source=2, tag=1)
        comm.send(b"post", dest=2, tag=0)
        comm.recv_into(got, source=1, tag=2)  # one wait on rank 1 (no probe first)
        from_2.wait()
        return got == b"go on" and data == big
    if comm.rank == 2:
        comm.recv_into(bytearray(4), source=0, tag=0)
        comm.isend(big, dest=0, tag=1, sync=True).wait()  # done once rank 0 matched it
        comm.send(b"matched", dest=1, tag=3)
        return True
    comm.recv_into(bytearray(7), source=2, tag=3)
    comm.send(b"go on", dest=0, tag=2)
    return True


@pytest.mark.parametrize("coherence", coherences())
def test_a_wait_on_one_peer_still_serves_the_others(pool_path, coherence):
    make_pool(pool_path, 3, coherence)
    assert run_ranks(pool_path, 3, _served_while_waiting_on_another, coherence=coherence,
                     timeout=30, per_rank=lambda r: {"domain": 1 + r}) == [True, True, True]
