"""cxlkit.msg.Ring against a bounded deque (hypothesis): the same pushes and pops give the
same results, full and empty included; geometry and role errors."""
from __future__ import annotations

from collections import deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cxlkit
from cxlkit import msg

OPS = st.lists(st.one_of(st.tuples(st.just("push"), st.binary(max_size=112),
                                   st.integers(0, 2**32 - 1)),
                         st.tuples(st.just("pop"))), max_size=120)


@pytest.fixture(scope="module")
def shared_pool(tmp_path_factory):
    path = f"/dev/shm/cxlkit-test-ring-{id(tmp_path_factory)}"
    with cxlkit.Pool(path, size="16M", host_id=0, max_hosts=2) as pool:
        yield pool
    cxlkit.pool.remove(path)


@settings(max_examples=60, deadline=None)
@given(ncells=st.sampled_from([2, 4, 8]), coherence=st.sampled_from(["host", "none"]), ops=OPS)
def test_ring_behaves_as_a_bounded_deque(shared_pool, ncells, coherence, ops):
    name = f"hyp.{ncells}.{coherence}"
    if name in shared_pool:
        shared_pool.destroy(name)
    with cxlkit.Pool(shared_pool.path, host_id=1, coherence=coherence) as pool:
        prod = msg.Ring.create(pool, name, cell_bytes=128, ncells=ncells)
        cons = msg.Ring.open(pool, name)
        model: deque = deque()
        for op in ops:
            if op[0] == "push":
                ok = prod.push(op[1], op[2])
                assert ok == (len(model) < ncells)
                if ok:
                    model.append((op[1], op[2]))
            else:
                got = cons.pop()
                assert got == (model.popleft() if model else None)
            assert prod.space() == ncells - len(model)  # head published per cell below 16 cells
        cons.close()
        prod.close()
        pool.destroy(name)


def test_ring_geometry_and_roles_are_checked(pool_path):
    with cxlkit.Pool(pool_path, size="8M", host_id=0) as pool:
        with pytest.raises(ValueError, match="cell_bytes"):
            msg.Ring.create(pool, "r", cell_bytes=100)
        with pytest.raises(ValueError, match="ncells"):
            msg.Ring.create(pool, "r", ncells=3)
        with pytest.raises(ValueError, match="role"):
            msg.Ring.create(pool, "r", role="both")
        with pytest.raises(FileNotFoundError):
            msg.Ring.open(pool, "missing")
        pool.create("plain", 4096, publish=True).close()
        with pytest.raises(OSError, match="not a ring"):
            msg.Ring.open(pool, "plain")
        with msg.Ring.create(pool, "r", cell_bytes=64, ncells=2) as p, msg.Ring.open(pool, "r") as c:
            assert (p.payload_max, p.ncells) == (48, 2)
            with pytest.raises(ValueError, match="cell holds 48"):
                p.push(b"x" * 49)
            assert p.push(b"a", 1) and p.push(b"b", 2) and not p.push(b"c")
            assert c.pop() == (b"a", 1)
            assert p.space() >= 0
            with pytest.raises(OSError):
                c.push(b"wrong role")
