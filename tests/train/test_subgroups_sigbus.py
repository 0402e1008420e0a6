"""The zero-copy update under the SIGBUS guard: a tmpfs subgroup file truncated by another
process while the AdamW kernel writes into it (on this thread or on a team's) raises
PathIOError naming the file and subgroup instead of killing the process, and the committed
generation stays readable; aio.RangeGuard on its own."""
from __future__ import annotations

import errno
import json
import mmap
import os
import subprocess
import sys
import tempfile
import textwrap

import numpy as np
import pytest

from cxlkit.train import aio

CHILD = textwrap.dedent(r"""
    import json, os, subprocess, sys
    import numpy as np
    from cxlkit.train import adam as A
    from cxlkit.train.spill.paths import PathIOError
    from cxlkit.train.spill.store import SubgroupStore

    d, team_n, route = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    sizes = [40_000, 60_000]  # one subgroup; two step counts: the kernel is called twice
    kw = dict(subgroup_params=100_000, cache_subgroups=3, bandwidths=[1e9],
              sum_in_kernel=route == "folded")
    bf = lambda x, n: (np.full(n, x, np.float32).view(np.uint32) >> 16).astype(np.uint16)
    grads = [(bf(0.25, n), A.DTYPES["bfloat16"]) for n in sizes]
    st = SubgroupStore([f"map:{d}"], **kw)
    st.bind([sizes])
    st.init_params(lambda pid: np.linspace(-1, 1, sizes[pid], dtype=np.float32))
    # generation 0 committed in slot 0; the update writes slot 1, which the truncation to
    # one slot cuts (a truncation that cuts the committed slot loses it: its bytes are gone)
    committed = {p: [a.copy() for a in v] for p, v in st.read_state().items()}
    f = st.paths[0].file(0)
    slot = st.paths[0].slot_nbytes
    kernel = A.step_raw_into_sum if route == "folded" else A.step_raw_into
    calls = [0]

    def truncating(*a, **k):
        calls[0] += 1
        if calls[0] == 2:  # between the two kernel calls of the update: another process
            subprocess.run(["truncate", "-s", str(slot), f], check=True)
        return kernel(*a, **k)

    setattr(A, kernel.__name__, truncating)
    team = A.AdamTeam(team_n) if team_n else None
    out = {}
    try:
        st.step([A.AdamConfig()], grads, [None, None], [1, 2], team=team)
        out["raised"] = None
    except PathIOError as e:
        out.update(raised=type(e).__name__, errno=e.errno, path=e.path, subgroup=e.subgroup,
                   msg=str(e))
    setattr(A, kernel.__name__, kernel)
    out["calls"] = calls[0]
    out["size"] = os.path.getsize(f)
    st.close()
    # the committed generation is still in its slot: with the file grown back, a new store
    # resumes it bit for bit
    os.truncate(f, 2 * slot)
    st2 = SubgroupStore([f"map:{d}"], **kw)
    st2.bind([sizes])
    st2.resume()
    got = st2.read_state()
    out["resumed_equal"] = all(np.array_equal(a, b) for p in committed
                               for a, b in zip(committed[p], got[p]))
    st2.close()
    if team is not None:
        team.close()
    print(json.dumps(out))
""")


@pytest.mark.parametrize("team,route", [(0, "folded"), (2, "folded"), (0, "separate")])
def test_truncation_during_the_in_place_kernel_raises_path_io_error_and_keeps_the_commit(
        team, route):
    # before: the kernel's store into the truncated page killed the process (SIGBUS, -7)
    with tempfile.TemporaryDirectory(dir="/dev/shm", prefix="cxlkit-sigbus-") as d:
        r = subprocess.run([sys.executable, "-c", CHILD, d, str(team), route],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
        out = json.loads(r.stdout.strip().splitlines()[-1])
        f = os.path.join(d, "sg-default-000000.cxk")
        assert out["raised"] == "PathIOError" and out["errno"] == errno.EFAULT
        assert out["path"] == f and out["subgroup"] == 0 and "truncated" in out["msg"]
        assert out["calls"] == 2 and out["resumed_equal"]


def _mapped_file(d: str, nbytes: int):
    f = os.path.join(d, "guarded")
    fd = os.open(f, os.O_RDWR | os.O_CREAT, 0o600)
    os.ftruncate(fd, nbytes)
    mm = mmap.mmap(fd, nbytes, flags=mmap.MAP_SHARED)
    return f, fd, mm


def test_range_guard_turns_a_fault_in_a_truncated_mapping_into_a_count():
    page = mmap.PAGESIZE
    with tempfile.TemporaryDirectory(dir="/dev/shm", prefix="cxlkit-sigbus-") as d:
        f, fd, mm = _mapped_file(d, 4 * page)
        arr = np.frombuffer(mm, np.uint8)
        arr[:] = 1
        with aio.RangeGuard(arr, f) as g:
            os.ftruncate(fd, page)            # pages 1..3 are now beyond the file
            arr[page:] = 7                    # would be SIGBUS: zero pages take the stores
            assert int(arr[page:].sum()) == 7 * 3 * page
        assert g.faults == 3 and g.close() == 3   # close again: the same count
        assert arr[0] == 1                    # the page inside the file is the file's
        with aio.RangeGuard(arr[:page], f) as g2:
            arr[:page] = 2
        assert g2.faults == 0
        del arr
        mm.close()
        os.close(fd)


def test_range_guard_refuses_bad_ranges_and_a_65th_range():
    with pytest.raises(TypeError):
        aio.RangeGuard([1, 2, 3])
    with pytest.raises(OSError) as ei:
        aio.RangeGuard(np.zeros(0, np.uint8), "empty")
    assert ei.value.errno == errno.EINVAL
    bufs = [np.zeros(64, np.uint8) for _ in range(65)]
    guards = []
    try:
        with pytest.raises(OSError) as ei:
            for b in bufs:
                guards.append(aio.RangeGuard(b, "many"))
        assert ei.value.errno == errno.ENOSPC and len(guards) == 64
    finally:
        for g in guards:
            g.close()
    with aio.RangeGuard(bufs[0]) as g:  # the slots are free again
        assert g.faults == 0
