"""SubgroupStore: bitwise equality with the kernel over whole arrays, on every path kind; the
host cache in alternating order; typed errors and retry after injected ENOSPC / EIO, a
vanished directory and a corrupt file; resume from the last commit; per-host path locks."""
from __future__ import annotations

import errno
import multiprocessing as mp
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

import cxlkit
from cxlkit import _native
from cxlkit.train import adam as A
from cxlkit.train import aio
from cxlkit.train.spill import layout as L
from cxlkit.train.spill.paths import (DirPath, MemoryPath, PathFullError, PathIOError,
                                      PathVanishedError,
                                      PoolPath, SubgroupCorruptError)
from cxlkit.train.spill.store import SubgroupStore

from sleepers import LOCK_WAIT, wait_asleep

BF16 = A.DTYPES["bfloat16"]
SIZES = [[1000, 3000, 17], [2500]]
GROUP = [0, 0, 0, 1]
CFGS = [A.AdamConfig(lr=1e-2), A.AdamConfig(lr=5e-3, weight_decay=0.0)]


class Ref:
    """The same params updated by the kernel over whole arrays: what the store must give."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.p0 = [self.rng.standard_normal(n).astype(np.float32) for g in SIZES for n in g]
        self.state = [(p.copy(), np.zeros_like(p), np.zeros_like(p)) for p in self.p0]
        self.step = 0

    def grads(self) -> list[np.ndarray]:
        return [(self.rng.standard_normal(p.size).astype(np.float32).view(np.uint32) >> 16)
                .astype(np.uint16) for p in self.p0]

    def advance(self, g16: list[np.ndarray]) -> list[np.ndarray]:
        self.step += 1
        out = []
        for i, (p, m, v) in enumerate(self.state):
            c = np.empty(p.size, np.uint16)
            A.step_raw([(p, m, v, g16[i], BF16, c, BF16)], CFGS[GROUP[i]], self.step)
            out.append(c)
        return out


def run_steps(store: SubgroupStore, ref: Ref, n: int) -> list[dict]:
    ms = []
    for _ in range(n):
        g16 = ref.grads()
        want = ref.advance(g16)
        copies = [np.empty(p.size, np.uint16) for p in ref.p0]
        ms.append(store.step(CFGS, [(g, BF16) for g in g16], [(c, BF16) for c in copies],
                             [ref.step] * 4))
        for c, w in zip(copies, want):
            assert np.array_equal(c, w)
    return ms


def check_state(store: SubgroupStore, ref: Ref) -> None:
    got = store.read_state()
    for i, (p, m, v) in enumerate(ref.state):
        for a, b in zip(got[i], (p, m, v)):
            assert np.array_equal(a, b)


def make(paths, ref: Ref, **kw) -> SubgroupStore:
    kw.setdefault("subgroup_params", 700)
    kw.setdefault("cache_subgroups", 3)
    kw.setdefault("bandwidths", [1.0] * len(paths))
    st = SubgroupStore(paths, **kw)
    st.bind(SIZES)
    st.init_params(lambda pid: ref.p0[pid])
    return st


@pytest.fixture
def dirs(tmp_path):
    out = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        out.append(str(tmp_path / name))
    return out


def test_layout_cut_covers_every_element_once_and_never_spans_groups():
    sgs = L.cut(SIZES, 700)
    seen = {}
    for sg in sgs:
        assert sum(pc.hi - pc.lo for pc in sg.pieces) == sg.nparams <= 700
        assert len({GROUP[pc.pid] for pc in sg.pieces}) == 1
        for pc in sg.pieces:
            seen.setdefault(pc.pid, []).append((pc.lo, pc.hi))
    for pid, n in enumerate([n for g in SIZES for n in g]):
        spans = sorted(seen[pid])
        assert spans[0][0] == 0 and spans[-1][1] == n
        assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
    with pytest.raises(ValueError, match="subgroup_params"):
        L.cut(SIZES, 0)


def test_eq1_counts_sum_to_m_and_follow_bandwidth():
    assert L.eq1_counts(10, [3, 1, 1]) == [6, 2, 2]
    assert sum(L.eq1_counts(7, [1, 1, 1])) == 7
    assert L.eq1_counts(5, [1, 0]) == [5, 0]
    assert L.eq1_counts(4, [0, 0]) == [2, 2]
    assert L.eq1_counts(8, [10, 1, 0.2]) == [6, 1, 1]  # every path with bandwidth keeps one
    assert L.eq1_counts(2, [10, 1, 0.2]) == [1, 1, 0]
    seq = L.interleave([6, 2, 2])
    assert [seq.count(i) for i in range(3)] == [6, 2, 2]
    assert seq[:2] != [0, 0]  # consecutive subgroups go to different paths
    new = L.rebalance(seq, [4, 4, 2])
    assert [new.count(i) for i in range(3)] == [4, 4, 2]
    assert sum(a != b for a, b in zip(seq, new)) == 2  # only the surplus moved


def _round_trip(fd: int, buf: cxlkit.Buffer) -> None:
    src = buf.numpy()  # page-aligned, as O_DIRECT wants
    src[:] = np.arange(src.size, dtype=np.uint8)
    want = src.copy()
    with aio.AioEngine(aio.AioConfig(block_size=65536, queue_depth=4)) as e:
        assert e.backend in ("io_uring", "threads")
        assert e.wait(e.submit(fd, True, src, 0)) >= 0
        aio.sync_file(fd)
        src[:] = 0
        e.wait(e.submit(fd, False, src, 0))
        assert np.array_equal(want, src)
        assert e.stats()["bytes_written"] == src.size


def test_aio_engine_round_trip_and_bad_config(tmp_path):
    with pytest.raises(ValueError, match="block_size"):
        aio.AioConfig(block_size=1000)
    with pytest.raises(ValueError, match="backend"):
        aio.AioConfig(backend="spdk")
    fd, _ = aio.open_file(str(tmp_path / "f"), write=True, create=True)
    buf = cxlkit.alloc(1 << 20)
    try:
        _round_trip(fd, buf)
    finally:
        aio.close_file(fd)
        buf.close()


def test_store_updates_bitwise_equal_to_the_kernel_over_dirs_tmpfs_and_memory(dirs):
    import tempfile

    ref = Ref()
    # a directory of its own on tmpfs: the store's files and manifest go with it
    with tempfile.TemporaryDirectory(dir="/dev/shm" if os.path.isdir("/dev/shm") else dirs[1]) \
            as shm, make([dirs[0], shm, "mem"], ref, namespace=f"t{os.getpid()}") as st:
        run_steps(st, ref, 4)
        check_state(st, ref)


def test_pool_path_holds_subgroups(pool_path, dirs):
    ref = Ref(1)
    with cxlkit.Pool(pool_path, size=8 << 20, host_id=0) as pool:
        with make([PoolPath(pool, "sgtest"), dirs[0]], ref, bandwidths=[1.0, 0.0]) as st:
            assert st.assignment.count(0) == len(st.subgroups)
            run_steps(st, ref, 3)
            check_state(st, ref)
            assert "sgtest.default.0" in pool


def test_alternating_order_skips_io_for_cached_subgroups(dirs):
    ref = Ref(2)
    with make([dirs[0]], ref, cache_subgroups=4) as st:
        ms = run_steps(st, ref, 3)
        m = len(st.subgroups)
        assert [x["order"] for x in ms] == ["ascending", "descending", "ascending"]
        assert [x["cache_hits"] for x in ms[1:]] == [4, 4]
        assert ms[1]["fetches"] == m - 4
    ref = Ref(2)
    with make([dirs[1]], ref, cache_subgroups=4, order="ascending") as st:
        ms = run_steps(st, ref, 3)
        assert all(x["order"] == "ascending" for x in ms)
        assert ms[2]["fetches"] > len(st.subgroups) - 4


def test_eager_upcast_baseline_gives_the_same_bits_and_writes_fp32_grads(dirs):
    ref = Ref(3)
    with make([dirs[0]], ref, upcast="eager") as st:
        ms = run_steps(st, ref, 2)
        check_state(st, ref)
    ref = Ref(3)
    with make([dirs[1]], ref) as st2:
        ms2 = run_steps(st2, ref, 2)
    assert ms[1]["paths"][0]["write_bytes"] > ms2[1]["paths"][0]["write_bytes"]


def test_enospc_on_flush_raises_PathFullError_and_the_step_can_be_retried(dirs):
    ref = Ref(4)
    with make([dirs[0]], ref) as st:
        run_steps(st, ref, 1)
        g16 = ref.grads()
        want = ref.advance(g16)
        copies = [np.empty(p.size, np.uint16) for p in ref.p0]
        args = (CFGS, [(g, BF16) for g in g16], [(c, BF16) for c in copies], [ref.step] * 4)
        _native.fault_inject("pwrite", 2, errno.ENOSPC)
        with pytest.raises(PathFullError) as ei:
            st.step(*args)
        assert ei.value.errno == errno.ENOSPC and dirs[0] in str(ei.value)
        assert ei.value.subgroup is not None
        st.step(*args)  # retry: finishes the step, no subgroup updated twice
        for c, w in zip(copies, want):
            assert np.array_equal(c, w)
        check_state(st, ref)
        run_steps(st, ref, 1)


def test_eio_on_fetch_raises_PathIOError_and_retry_completes(dirs):
    ref = Ref(5)
    with make([dirs[0]], ref) as st:
        g16 = ref.grads()
        want = ref.advance(g16)
        copies = [np.empty(p.size, np.uint16) for p in ref.p0]
        args = (CFGS, [(g, BF16) for g in g16], [(c, BF16) for c in copies], [1] * 4)
        _native.fault_inject("pread", 3, errno.EIO)
        with pytest.raises(PathIOError) as ei:
            st.step(*args)
        assert ei.value.errno == errno.EIO and ei.value.path.startswith(dirs[0])
        st.step(*args)
        for c, w in zip(copies, want):
            assert np.array_equal(c, w)
        check_state(st, ref)


def test_vanished_directory_raises_PathVanishedError(dirs):
    ref = Ref(6)
    st = make([dirs[0]], ref)
    try:
        for name in os.listdir(dirs[0]):
            os.unlink(os.path.join(dirs[0], name))
        os.rmdir(dirs[0])
        with pytest.raises(PathVanishedError, match="vanished"):
            run_steps(st, ref, 1)
    finally:
        st.close()
    with pytest.raises(PathVanishedError):
        DirPath(dirs[0])


def test_corrupt_payload_raises_SubgroupCorruptError(dirs):
    ref = Ref(7)
    with make([dirs[0]], ref) as st:
        run_steps(st, ref, 1)
        st.commit()
        k = next(k for k in range(len(st.subgroups)) if k not in st.cache.where)
        pi, slot, _ = st.pipeline.location(k)
        with open(st.paths[pi].file(k), "r+b") as f:
            f.seek(slot * st.slot_nbytes + L.ALIGN + 100)
            b = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([b[0] ^ 0xFF]))
        with pytest.raises(SubgroupCorruptError, match=f"subgroup {k}.*checksum"):
            st.read_state()


def test_torn_write_after_commit_leaves_the_committed_generation_to_resume(dirs):
    ref = Ref(8)
    with make(dirs, ref, namespace="resume") as st:
        run_steps(st, ref, 2)
        st.commit(extra={"steps": [2, 2, 2, 2]})
        saved = [tuple(a.copy() for a in s) for s in ref.state]
        run_steps(st, ref, 1)
        # a crash mid-flush: garbage over every non-committed slot
        for k, (pi, slot, _) in enumerate(st.ledger.committed):
            with open(st.paths[pi].file(k), "r+b") as f:
                f.seek((1 - slot) * st.slot_nbytes)
                f.write(os.urandom(L.ALIGN + 64))
    with SubgroupStore(dirs, subgroup_params=700, cache_subgroups=3, bandwidths=[1.0, 1.0],
                       namespace="resume") as st2:
        st2.bind(SIZES)
        assert st2.resume() == {"steps": [2, 2, 2, 2]}
        assert st2.steps_done == 2
        got = st2.read_state()
        for i, s in enumerate(saved):
            for a, b in zip(got[i], s):
                assert np.array_equal(a, b)


def test_resume_refuses_memory_tier_state_and_missing_manifest(dirs):
    ref = Ref(9)
    with make([dirs[0], "mem"], ref, namespace="m") as st:
        st.commit()
    with SubgroupStore([dirs[0], "mem"], subgroup_params=700, bandwidths=[1, 1],
                       namespace="m") as st2:
        st2.bind(SIZES)
        with pytest.raises(ValueError, match="memory tier"):
            st2.resume()
    with SubgroupStore([dirs[1]], subgroup_params=700, bandwidths=[1]) as st3:
        st3.bind(SIZES)
        with pytest.raises(FileNotFoundError):
            st3.resume()


def test_reassign_migrates_at_next_flush_and_commit_removes_old_files(dirs):
    ref = Ref(10)
    with make(dirs, ref, bandwidths=[1.0, 0.0], reestimate=False) as st:
        assert set(st.assignment) == {0}
        st.reassign([0.0, 1.0])
        ms = run_steps(st, ref, 1)
        assert ms[0]["migrations"] > 0
        st.commit()
        assert not [f for f in os.listdir(dirs[0]) if f.startswith("sg")]
        assert len([f for f in os.listdir(dirs[1]) if f.startswith("sg")]) == len(st.subgroups)
        check_state(st, ref)


def test_bad_arguments_raise_clear_errors(dirs):
    with pytest.raises(ValueError, match="cache_subgroups"):
        SubgroupStore([dirs[0]], cache_subgroups=2)
    with pytest.raises(ValueError, match="order"):
        SubgroupStore([dirs[0]], order="random")
    with pytest.raises(ValueError, match="given twice"):
        SubgroupStore([dirs[0], dirs[0]])
    with pytest.raises(ValueError, match="lock"):
        SubgroupStore([dirs[0]], lock="maybe")
    with pytest.raises(ValueError, match="paths"):
        SubgroupStore([])
    st = SubgroupStore([dirs[0]], subgroup_params=700, bandwidths=[1])
    with pytest.raises(cxlkit.SpillUsageError, match="call bind"):  # a RuntimeError too
        st.step(CFGS, [], [], [])
    st.bind(SIZES)
    with pytest.raises(cxlkit.SpillUsageError, match="already bound"):
        st.bind(SIZES)
    with pytest.raises(ValueError, match="fill"):
        st.init_params(lambda pid: np.zeros(3, np.float32))
    with pytest.raises(ValueError, match="one per param"):
        st.step(CFGS, [None], [None], [1])
    st.close()


def _hold_lock(path: str, ready, go) -> None:
    fd, _ = aio.open_file(os.path.join(path, ".cxlkit-subgroups.lock"), write=True, create=True,
                          direct=False)
    aio.lock_file(fd, "exclusive", wait=True)
    ready.set()
    if go.wait(30):
        aio.lock_file(fd, "unlock", wait=False)
    os._exit(0)  # dies holding nothing, or holding the lock when not told to release


_WAIT_FOR_LOCK = """
import signal, sys
from cxlkit.train import aio
signal.signal(signal.SIGTERM, lambda n, f: sys.exit(128 + n))
fd, _ = aio.open_file(sys.argv[1], write=True, create=True, direct=False)
print("waiting", flush=True)
try:
    aio.lock_file(fd, "exclusive", wait=True)
except KeyboardInterrupt:
    sys.exit(99)
sys.exit(3)  # granted: the holder let go, which the test does not do
"""


@pytest.mark.parametrize("sig, rc", [(signal.SIGINT, 99), (signal.SIGTERM, 128 + 15)],
                         ids=["ctrl-c", "sigterm"])
def test_a_process_waiting_for_a_held_path_lock_stops_on_a_signal(tmp_path, sig, rc, wchan):
    # Found by the bench's SIGTERM test hanging under load: the wait retried fcntl on EINTR
    # inside native code, so Python's handlers never ran and neither Ctrl-C nor SIGTERM
    # stopped a process waiting for another process's lock.
    lock = str(tmp_path / "held.lock")
    fd, _ = aio.open_file(lock, write=True, create=True, direct=False)
    aio.lock_file(fd, "exclusive", wait=True)
    p = subprocess.Popen([sys.executable, "-c", _WAIT_FOR_LOCK, lock], stdout=subprocess.PIPE,
                         text=True)
    try:
        assert p.stdout.readline().strip() == "waiting"
        wait_asleep(p.pid, LOCK_WAIT)  # in the blocking fcntl
        p.send_signal(sig)
        assert p.wait(20) == rc
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        aio.lock_file(fd, "unlock", wait=False)
        os.close(fd)


def test_path_lock_excludes_another_process_and_a_dead_holder_releases(dirs):
    ctx = mp.get_context("fork")
    ready, go = ctx.Event(), ctx.Event()
    child = ctx.Process(target=_hold_lock, args=(dirs[0], ready, go))
    child.start()
    assert ready.wait(30)
    p = DirPath(dirs[0])
    try:
        assert p.acquire(False) is False
        go.set()
        child.join(30)
        assert p.acquire(True)
        p._unlock()
        # a holder that dies without unlocking
        ready2, never = ctx.Event(), ctx.Event()
        child2 = ctx.Process(target=_hold_lock, args=(dirs[0], ready2, never))
        child2.start()
        assert ready2.wait(30)
        child2.kill()
        child2.join(30)
        assert p.acquire(False)
        p._unlock()
        assert p.lock_acquired == 2
    finally:
        p.close()
    ref = Ref(11)
    with make([dirs[0]], ref, lock="exclusive") as st:
        m = run_steps(st, ref, 1)[0]
        assert m["paths"][0]["lock"] == "exclusive" and m["paths"][0]["lock_wait_s"] >= 0
        assert st.paths[0].lock_acquired > 0
    ref = Ref(12)
    with make([dirs[1]], ref, lock="off") as st:
        assert run_steps(st, ref, 1)[0]["paths"][0]["lock"] == "off"
        assert st.paths[0].lock_acquired == 0


def test_busy_seconds_is_the_union_of_request_intervals():
    from cxlkit.train.spill.metrics import busy_seconds
    assert busy_seconds([]) == 0.0
    assert busy_seconds([(0.0, 1.0)]) == 1.0
    # two paths in flight at once count once; a gap does not count; nested spans add nothing
    assert busy_seconds([(2.0, 3.0), (0.0, 1.0), (0.5, 1.5), (2.2, 2.4)]) == pytest.approx(2.5)


@pytest.mark.parametrize("upcast", ["delayed", "eager"])
def test_step_metrics_give_io_busy_time_per_path_and_overall(dirs, upcast):
    ref = Ref(3)
    with make([dirs[0], "mem"], ref, upcast=upcast) as st:
        m = run_steps(st, ref, 2)[-1]
    paths_busy = [p["busy_s"] for p in m["paths"]]
    assert all(b > 0 for b in paths_busy)
    # overall busy time: at least the busiest path's, at most their sum, within the step
    assert max(paths_busy) <= m["io_busy_s"] <= sum(paths_busy) + 1e-9
    assert m["io_busy_s"] <= m["update_s"]
    # blocked on reads / on writes: parts of the step's I/O wait
    assert m["read_wait_s"] >= 0 and m["write_wait_s"] >= 0
    assert m["read_wait_s"] + m["write_wait_s"] <= m["io_wait_s"] + 1e-6
    assert m["io_busy_GBps"] == pytest.approx(m["io_bytes"] / m["io_busy_s"] / 1e9)
    for p in m["paths"]:
        assert p["busy_GBps"] == pytest.approx((p["read_bytes"] + p["write_bytes"])
                                               / p["busy_s"] / 1e9)


class _HeldPath(MemoryPath):
    """A memory path that records how many reads were outstanding (submitted, not yet
    waited for) at once; held=True: its requests stay 'in flight' until waited for
    (ready() is False), the worst case for read-ahead; held=False: ready() is always True."""

    def __init__(self, held: bool) -> None:
        super().__init__()
        self.held = held
        self.reads_out, self.most_reads_out = 0, 0

    def _submit(self, idx, slot, buf, write, hook=None):
        p = super()._submit(idx, slot, buf, write, hook)
        inner = p._waiter
        if not write:
            self.reads_out += 1
            self.most_reads_out = max(self.most_reads_out, self.reads_out)

        def waiter():
            if not write:
                self.reads_out -= 1
            return inner()
        p._waiter = waiter
        # held: in flight until waited for; else done at once as far as ready() tells (the
        # copy thread's own timing would make the read-ahead depth vary from run to run)
        p._poll = (lambda: False) if self.held else (lambda: True)
        return p


def test_pending_ready_never_blocks_and_turns_true_when_done(dirs):
    p = DirPath(dirs[0], lock="off")
    p.open(1 << 20)
    mem = cxlkit.alloc(1 << 20)
    try:
        w = p.write(3, 0, mem.numpy())
        while not w.ready():  # polled, never waited: the request finishes on its own
            pass
        assert w.wait() >= 0 and w.ready()
    finally:
        p.close()
        mem.close()


@pytest.mark.parametrize("cache", [5, 6])
@pytest.mark.parametrize("held", [False, True])
def test_read_ahead_keeps_up_to_cache_minus_two_reads_in_flight_and_the_same_bits(cache,
                                                                                  held):
    ref = Ref(5)
    path = _HeldPath(held)
    with make([path], ref, cache_subgroups=cache, zero_copy=False) as st:
        run_steps(st, ref, 3)
        check_state(st, ref)
    # K buffers: the one updated, K-2 read ahead, one written back; buffers whose flush is
    # still in flight are not taken without waiting (held), so fewer reads go ahead then;
    # the store before read-ahead kept one read in flight
    if held:
        assert path.most_reads_out >= 2
    else:
        assert path.most_reads_out == cache - 2


def test_measuring_a_pool_path_too_small_raises_the_real_error_not_BufferError(tmp_path):
    # defect (found trying `plan train --spill pool:X`): the probe's buffer was closed while the
    # error's traceback still held views of it, so BufferError replaced PathFullError
    import cxlkit
    from cxlkit.train.spill import planner as SP
    from cxlkit.train.spill.paths import PathFullError

    path = str(tmp_path / "small")
    cxlkit.Pool(path, size="16M").close()
    with pytest.raises(PathFullError, match="no room"):
        SP.measure_paths([f"pool:{path}"], nbytes=32 << 20)


class _InstantPath(MemoryPath):
    """A memory path whose requests are finished when submit returns (the copy is done at
    once): the fastest path there is. Records, at every update, how many reads the store had
    submitted and not yet waited for (the read-ahead depth)."""

    def __init__(self) -> None:
        super().__init__()
        self.reads_out = 0

    def _submit(self, idx, slot, buf, write, hook=None):
        p = super()._submit(idx, slot, buf, write, hook)
        dt = p._waiter()  # the copy, now

        def waiter():
            if not write:
                self.reads_out -= 1
            return dt
        p._waiter, p._poll = waiter, (lambda: True)
        self.reads_out += not write
        return p


@pytest.mark.parametrize("cache", [4, 5, 6])
def test_steady_state_read_ahead_is_cache_minus_two(cache):
    # defect: the flush of a done subgroup began only when its buffer was taken for a read,
    # and that read then went in one update later: K-3 reads ahead instead of K-2
    n = 20
    path = _InstantPath()
    st = SubgroupStore([path], subgroup_params=100, cache_subgroups=cache, bandwidths=[1.0],
                       zero_copy=False)
    depth: list[tuple[int, int]] = []
    try:
        st.bind([[100] * n])
        update = st.copy.run
        st.copy.run = lambda bi, sg, inp: (depth.append((sg.idx, path.reads_out)),
                                           update(bi, sg, inp))
        st.init_params(lambda pid: np.full(100, 0.5, np.float32))
        g = [(np.ones(100, np.uint16), BF16)] * n
        for s in range(1, 4):
            depth.clear()
            m = st.step([A.AdamConfig()], g, [None] * n, [s] * n)
            if s == 1:
                continue
            assert m["cache_hits"] == cache
            # steady state: past the cache hits, with K-2 subgroups still ahead
            steady = [d for pos, (_, d) in enumerate(depth) if cache <= pos < n - (cache - 2)]
            assert steady and all(d == cache - 2 for d in steady), depth
    finally:
        st.close()


class _PairedPath(MemoryPath):
    """A memory path whose requests report a known timing: the n-th request of the path is
    in flight from T0 + (n // 2) * D for D seconds, so requests go in overlapping pairs (a
    queue depth of 2) and the path is busy ceil(n / 2) * D seconds for n requests."""

    T0, D = 1000.0, 0.25

    def __init__(self) -> None:
        super().__init__()
        self.requests = 0

    def _submit(self, idx, slot, buf, write, hook=None):
        p = super()._submit(idx, slot, buf, write, hook)
        p._waiter()  # the copy, now
        t = self.T0 + (self.requests // 2) * self.D
        self.requests += 1
        return type(p)(lambda: self.D, p.nbytes, self, idx, write, t, lambda: True)


def test_reestimate_takes_the_paths_busy_time_not_summed_request_durations():
    # defect: the observed bandwidth divided by the sum of the requests' durations, so two
    # requests in flight at once on a path counted twice: a path with a queue depth > 1 was
    # under-estimated (here by half) and Eq. 1 gave it too few subgroups
    path = _PairedPath()
    b0 = 4e6  # bytes/s, of the order the path shows here: the EWMA moves visibly
    st = SubgroupStore([path], subgroup_params=100_000, cache_subgroups=3, bandwidths=[b0],
                       zero_copy=False)
    try:
        st.bind([[100_000] * 6])
        st.init_params(lambda pid: np.full(100_000, 0.5, np.float32))
        n = 6
        path.requests = 0
        m = st.step([A.AdamConfig()], [(np.ones(100_000, np.uint16), BF16)] * n, [None] * n,
                    [1] * n)
        nreq = path.requests
        assert nreq == m["fetches"] + m["flushes"] >= 4
        p = m["paths"][0]
        busy = -(-nreq // 2) * _PairedPath.D
        assert p["busy_s"] == pytest.approx(busy)
        observed = (p["read_bytes"] + p["write_bytes"]) / busy
        assert st.bandwidth[0] == pytest.approx(0.5 * b0 + 0.5 * observed)
    finally:
        st.close()


def test_memory_tier_skips_payload_sums_copy_paths_fold_them_dirs_sum_off_the_store_thread(
        pool_path, dirs, monkeypatch):
    # the cache route (zero_copy=False; the in-place route: tests/train/test_subgroups_inplace.py).
    # The payload sum is a pass over every subgroup moved: a memory tier's bytes never leave
    # the process, so it keeps none; a pool object's sum is folded into its copy (aio.copy_sum
    # on the path's copy worker: no separate pass over the bytes, no sum thread); a
    # directory's (no user-space copy to fold it into) is a pass on its two helper threads
    # with sum_in_kernel=False (the default folds it into the kernel: test_subgroups_fold.py)
    import threading

    from cxlkit.train.spill import path_base as SP
    calls: list[str] = []
    folded: list[str] = []
    real, real_fold = SP.checksum, aio.copy_sum
    monkeypatch.setattr(SP, "checksum", lambda buf: (
        calls.append(threading.current_thread().name), real(buf))[1])
    monkeypatch.setattr(aio, "copy_sum", lambda d, s, what="": (
        folded.append(threading.current_thread().name), real_fold(d, s, what))[1])
    ref = Ref(8)
    with make([MemoryPath()], ref, zero_copy=False) as st:
        run_steps(st, ref, 3)
        check_state(st, ref)
    assert calls == [] and folded == []
    ref = Ref(8)
    with cxlkit.Pool(pool_path, size=8 << 20, host_id=0) as pool, \
            make([PoolPath(pool, "sgsum")], ref, zero_copy=False) as st:
        run_steps(st, ref, 3)
        check_state(st, ref)
    assert calls == []
    assert folded and all(n.startswith("cxlkit-spill") for n in folded)
    folded.clear()
    ref = Ref(8)
    with make([dirs[0]], ref, sum_in_kernel=False) as st:
        run_steps(st, ref, 3)
        check_state(st, ref)
    assert {n.split("_")[0] for n in calls} == {"cxlkit-sum", "cxlkit-check"}
    assert folded == []


def test_corrupt_pool_object_raises_SubgroupCorruptError_from_its_check(pool_path):
    ref = Ref(9)
    with cxlkit.Pool(pool_path, size=8 << 20, host_id=0) as pool, \
            make([PoolPath(pool, "sgbad")], ref) as st:
        run_steps(st, ref, 1)
        st.commit()
        k = next(k for k in range(len(st.subgroups)) if k not in st.cache.where)
        pi, slot, _ = st.pipeline.location(k)
        obj = st.paths[0]._area(k, create=False)
        obj[slot * st.slot_nbytes + L.ALIGN + 100] ^= 0xFF
        with pytest.raises(SubgroupCorruptError, match=f"subgroup {k}.*payload checksum"):
            st.read_state()
        obj[slot * st.slot_nbytes + L.ALIGN + 100] ^= 0xFF
        del obj  # a view of the pool's mapping: the pool closes only without views
        check_state(st, ref)  # the buffer it was read into was given back: nothing lost


def test_store_options_build_a_spill_config_and_an_unknown_one_raises_TypeError_naming_it():
    from cxlkit.train import SpillConfig
    st = SubgroupStore(["mem"], subgroup_params=300, cache_subgroups=5, bandwidths=[1])
    try:
        assert st.config == SpillConfig(subgroup_params=300, cache_subgroups=5,
                                        bandwidths=(1,))
        assert st.cache_subgroups == 5 and st.lock == "exclusive"  # options read as before
    finally:
        st.close()
    with SubgroupStore(["mem"], SpillConfig(subgroup_params=300, bandwidths=[1])) as st:
        st.bind([[600]])
        assert len(st.subgroups) == 2
    with pytest.raises(TypeError, match="cache_subgroup .*known: .*cache_subgroups"):
        SubgroupStore(["mem"], cache_subgroup=5)
    with pytest.raises(TypeError, match="not both"):
        SubgroupStore(["mem"], SpillConfig(), verify=False)
    with pytest.raises(ValueError, match="cache_subgroups 2"):
        SpillConfig(cache_subgroups=2)


OLD_PATHS = {"spill_base": "path_base", "spill_paths": "paths", "spill_copy": "path_copy",
             "spill_mapped": "path_mapped", "subgroup_layout": "layout", "spill_split": "split",
             "spill_plan": "planner", "spill_config": "offload_config", "subgroups": "store"}


def test_old_module_paths_import_the_moved_modules_with_a_DeprecationWarning():
    code = ("import importlib, json, warnings\n"
            f"old = {OLD_PATHS!r}\n"
            "out = {}\n"
            "for o, n in old.items():\n"
            "    with warnings.catch_warnings(record=True) as w:\n"
            "        warnings.simplefilter('always')\n"
            "        a = importlib.import_module('cxlkit.train.' + o)\n"
            "    b = importlib.import_module('cxlkit.train.spill.' + n)\n"
            "    out[o] = [a is b, any(issubclass(x.category, DeprecationWarning)\n"
            "                          and n in str(x.message) for x in w)]\n"
            "print(json.dumps(out))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    import json
    assert json.loads(r.stdout) == {o: [True, True] for o in OLD_PATHS}
    from cxlkit.train.spill.store import DEFAULT_SUBGROUP_PARAMS, busy_seconds  # noqa: F401
