"""cxlkit.msg windows across forked ranks: each operation against a local reference, the
three kinds of epoch, typed errors for accesses outside a window."""
from __future__ import annotations

import numpy as np
import pytest

from cxlkit import msg
from cxlkit.errors import MsgError, WindowRangeError

from msg_ranks import coherences, make_pool, run_ranks

N = 3


def _ops(comm: msg.Comm) -> dict:
    r, n = comm.rank, comm.size
    win = comm.window(1024)
    win.fence()
    for t in range(n):
        win.put(np.array([100 + r], dtype=np.int64).tobytes(), t, 8 * r)
    win.accumulate(np.array([r + 1, 2 * r], dtype=np.int64), 0, 64, op="sum")
    win.accumulate(np.array([0.5 * r], dtype=np.float64), 0, 80, op="max")
    win.accumulate(np.array([r], dtype=np.int32), 0, 88, op="min")
    win.fence()
    local = np.frombuffer(win.local, dtype=np.int64)
    got = {"slots": local[:n].tolist()}
    if r == 0:
        got["acc"] = local[8:10].tolist()
        got["fmax"] = float(np.frombuffer(win.local, dtype=np.float64)[10])
        got["imin"] = int(np.frombuffer(win.local, dtype=np.int32)[22])
    got["get"] = np.frombuffer(win.get(8 * n, (r + 1) % n, 0), dtype=np.int64).tolist()
    olds = [win.fetch_and_op(1, 0, 200) for _ in range(20)]
    got["fop_increasing"] = olds == sorted(olds) and len(set(olds)) == 20
    win.fence()
    got["fop_total"] = win.fetch_and_op(None, 0, 200, op="no_op")
    won = win.compare_and_swap(0, 7 + r, 1, 256)
    got["cas_won"] = int(comm.allreduce(np.array([won == 0], dtype=np.int64))[0])
    got["fop_f64"] = win.fetch_and_op(1.5, 2, 264, dtype="float64", op="replace") in (0.0, 1.5)
    win.fence()
    # PSCW: everyone else puts into rank 0
    if r == 0:
        win.post(list(range(1, n)))
        win.wait()
        got["pscw"] = local[40:40 + n].tolist()
    else:
        win.start([0])
        win.put(np.array([500 + r], dtype=np.int64).tobytes(), 0, 8 * (40 + r))
        win.complete()
    comm.barrier()
    # exclusive locks: a read-modify-write counter without lost updates
    for _ in range(30):
        win.lock(0)
        v = int(np.frombuffer(win.get(8, 0, 8 * 60), dtype=np.int64)[0])
        win.put(np.array([v + 1], dtype=np.int64).tobytes(), 0, 8 * 60)
        win.unlock(0)
    win.lock(1, exclusive=False)
    win.flush(1)
    win.unlock(1)
    comm.barrier()
    if r == 0:
        got["counter"] = int(local[60])
    with pytest.raises(WindowRangeError):
        win.put(b"x" * 16, 1, 1020)
    with pytest.raises(WindowRangeError):
        win.get(8, 1, 1024)
    with pytest.raises(MsgError, match="epoch"):
        win.unlock(1)
    with pytest.raises(ValueError):
        win.put(b"x", 1, -8)
    with pytest.raises(ValueError):
        win.accumulate(np.zeros(2, dtype=np.int16), 1)
    got["size_of"] = win.size_of((r + 1) % n)
    del local
    win.free()
    return got


@pytest.mark.parametrize("coherence", coherences())
def test_window_operations_match_a_local_reference(pool_path, coherence):
    make_pool(pool_path, N, coherence)
    res = run_ranks(pool_path, N, _ops, coherence=coherence)
    for r, g in enumerate(res):
        assert g["slots"] == [100 + s for s in range(N)]
        assert g["get"] == [100 + s for s in range(N)]
        assert g["fop_increasing"] and g["fop_total"] == 20 * N
        assert g["cas_won"] == 1 and g["fop_f64"] and g["size_of"] == 1024
    g0 = res[0]
    assert g0["acc"] == [sum(s + 1 for s in range(N)), sum(2 * s for s in range(N))]
    assert g0["fmax"] == 0.5 * (N - 1) and g0["imin"] == 0
    assert g0["pscw"] == [0] + [500 + s for s in range(1, N)]
    assert g0["counter"] == 30 * N
