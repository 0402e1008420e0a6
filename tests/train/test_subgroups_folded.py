"""The cache route (zero_copy=False): the payload checksum folded into a copy path's copy
(aio.copy_sum): the same header bytes as the separate pass wrote, the same corruptions caught
on the way back (a flipped payload byte, a foreign header, a torn flush whose header never
landed, random flips and torn tails under hypothesis), one pass over the bytes (no separate
checksum on any thread), verify=False still checking the header, and a path's start-up figure
paying the same header work."""
from __future__ import annotations

import errno
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hst

import cxlkit
from cxlkit.train import aio
from cxlkit.train.spill import path_base as SB
from cxlkit.train.spill import layout as L
from cxlkit.train.spill.path_base import (HEADER_NBYTES, FetchCheck, FlushHeader, PathIOError,
                                     SubgroupCorruptError)
from cxlkit.train.spill.path_copy import PoolPath
from cxlkit.train.spill.path_mapped import MappedDirPath
from cxlkit.train.spill.store import SubgroupStore
from test_subgroups import SIZES, Ref, check_state, make, run_steps


def extent(nparams: int, seed: int = 0) -> np.ndarray:
    raw = np.zeros(HEADER_NBYTES + L.pad(12 * nparams), np.uint8)
    raw[HEADER_NBYTES:] = np.random.default_rng(seed).integers(0, 256, raw.nbytes
                                                                - HEADER_NBYTES, np.uint8)
    return raw


def test_flush_header_folded_equals_the_separate_pass_and_fetch_check_catches_a_flip():
    a = extent(1000)
    b = a.copy()
    FlushHeader(a, 5, 3, 1000, 77, True)()                  # the separate pass
    s = aio.copy_sum(np.empty(a.nbytes - HEADER_NBYTES, np.uint8), b[HEADER_NBYTES:])
    FlushHeader(b, 5, 3, 1000, 77, True).write(s)           # the sum a copy folded in
    assert np.array_equal(a, b)
    chk = FetchCheck(a, 5, 3, 1000, 77, "p", True)
    chk()
    assert chk.header() == 3
    chk.payload(s)
    a[HEADER_NBYTES + 123] ^= 1
    with pytest.raises(SubgroupCorruptError, match="subgroup 5 on p: payload checksum"):
        chk()
    with pytest.raises(SubgroupCorruptError, match="payload checksum"):
        chk.payload(aio.copy_sum(np.empty(a.nbytes - HEADER_NBYTES, np.uint8),
                                 a[HEADER_NBYTES:]))
    FetchCheck(a, 5, 3, 1000, 77, "p", False)()             # no payload check asked for
    with pytest.raises(SubgroupCorruptError, match="generation 3, expected 4"):
        FetchCheck(a, 5, 4, 1000, 77, "p", True).header()
    # a path that keeps no sums (memory tier) writes 0 whatever it is given
    c = extent(1000)
    FlushHeader(c, 5, 3, 1000, 77, False).write(12345)
    assert int.from_bytes(c[48:56].tobytes(), "little") == 0  # the payload sum field


@pytest.fixture(params=["map", "pool"])
def copy_path(request, shm_dir):
    """A checksummed copy path: a mapped tmpfs directory, or a pool object area."""
    if request.param == "map":
        yield lambda: MappedDirPath(shm_dir, lock="off")
        return
    pool = cxlkit.Pool(os.path.join(shm_dir, "pool"), size=16 << 20, host_id=0)
    yield lambda: PoolPath(pool, "sgf", lock="off")
    pool.close()


def slot_bytes(st: SubgroupStore, k: int, slot: int) -> np.ndarray:
    return st.paths[0]._area(k, create=False)[slot * st.slot_nbytes:
                                               (slot + 1) * st.slot_nbytes]


def test_store_on_a_copy_path_sums_in_one_pass_and_gives_the_kernels_bits(copy_path,
                                                                          monkeypatch):
    # the defect: a checksummed copy path read every subgroup twice per move (the copy,
    # then kv_checksum over it on a sum thread); now the sum is the copy's own
    passes: list[int] = []
    real = SB.checksum
    monkeypatch.setattr(SB, "checksum", lambda buf: (passes.append(1), real(buf))[1])
    ref = Ref(41)
    with make([copy_path()], ref, zero_copy=False) as st:
        run_steps(st, ref, 3)
        check_state(st, ref)
    assert passes == []


def test_folded_fetch_catches_a_flipped_payload_byte_and_loses_nothing(copy_path):
    ref = Ref(42)
    with make([copy_path()], ref, zero_copy=False) as st:
        run_steps(st, ref, 1)
        st.commit()
        k = next(k for k in range(len(st.subgroups)) if k not in st.cache.where)
        _, slot, _ = st.pipeline.location(k)
        area = slot_bytes(st, k, slot)
        area[HEADER_NBYTES + 100] ^= 0xFF
        with pytest.raises(SubgroupCorruptError, match=f"subgroup {k}.*payload checksum"):
            st.read_state()
        area[HEADER_NBYTES + 100] ^= 0xFF
        del area  # a view of the mapping
        check_state(st, ref)


def test_folded_fetch_rejects_a_foreign_header_before_the_payload_moves(copy_path,
                                                                       monkeypatch):
    ref = Ref(43)
    with make([copy_path()], ref, zero_copy=False) as st:
        run_steps(st, ref, 1)
        k = next(k for k in range(len(st.subgroups)) if k not in st.cache.where)
        _, slot, _ = st.pipeline.location(k)
        area = slot_bytes(st, k, slot)
        area[20] ^= 0x01  # the subgroup index field: the header's crc fails
        del area
        moved: list[int] = []
        real = aio.copy_sum
        monkeypatch.setattr(aio, "copy_sum", lambda d, s, what="": (
            moved.append(what), real(d, s, what))[1])
        with pytest.raises(SubgroupCorruptError, match=f"subgroup {k}.*header checksum"):
            st.read_state()
        assert moved and st.paths[0]._where(k) not in moved  # others moved, k's never


def test_torn_folded_flush_leaves_the_committed_generation_to_resume(shm_dir, monkeypatch):
    # the header is copied after the payload: a flush torn between them leaves the slot's
    # old header over new bytes, which its sum refuses; the committed slot stays readable
    ref = Ref(44)
    with make([f"map:{shm_dir}"], ref, namespace="torn", zero_copy=False) as st:
        run_steps(st, ref, 2)
        st.commit(extra={"at": 2})
        saved = [tuple(a.copy() for a in s) for s in ref.state]
        real, real_write = aio.copy, FlushHeader.write
        armed: list[bool] = []  # one flush torn, the first after the commit

        def write(self, payload_sum):  # the payload moved: the header's copy comes next
            real_write(self, payload_sum)
            if not armed:
                armed.append(True)

        def no_header(d, s, what="aio copy"):
            if armed == [True] and d.nbytes == HEADER_NBYTES:
                armed[0] = False
                raise OSError(errno.EFAULT, "Bad address")
            return real(d, s, what)
        monkeypatch.setattr(FlushHeader, "write", write)
        monkeypatch.setattr(aio, "copy", no_header)
        with pytest.raises(PathIOError, match="write of slot"):
            run_steps(st, ref, 1)
        assert armed == [False]
        monkeypatch.setattr(aio, "copy", real)
        monkeypatch.setattr(FlushHeader, "write", real_write)
    with SubgroupStore([f"map:{shm_dir}"], subgroup_params=700, cache_subgroups=3,
                       bandwidths=[1.0], namespace="torn") as st2:
        st2.bind(SIZES)
        assert st2.resume() == {"at": 2}
        got = st2.read_state()
        for i, s in enumerate(saved):
            for a, b in zip(got[i], s):
                assert np.array_equal(a, b)


def test_verify_off_moves_a_copy_paths_payload_by_a_plain_copy_and_still_checks_headers(
        copy_path, monkeypatch):
    summed: list[int] = []
    real = aio.copy_sum
    monkeypatch.setattr(aio, "copy_sum", lambda d, s, what="": (
        summed.append(1), real(d, s, what))[1])
    ref = Ref(45)
    with make([copy_path()], ref, verify=False, zero_copy=False) as st:
        run_steps(st, ref, 2)
        assert summed  # flushes still write the sum: a later store may verify
        check_state(st, ref)
        st.commit()
        summed.clear()
        k = next(k for k in range(len(st.subgroups)) if k not in st.cache.where)
        _, slot, _ = st.pipeline.location(k)
        area = slot_bytes(st, k, slot)
        area[HEADER_NBYTES + 8] ^= 0xFF  # not checked with verify off
        del area
        st.read_state()
        assert summed == []              # fetches: a plain copy
        k = next(k for k in range(len(st.subgroups)) if k not in st.cache.where)
        _, slot, _ = st.pipeline.location(k)
        area = slot_bytes(st, k, slot)
        area[40] ^= 0x01                 # the payload length field: the header's crc fails
        del area
        with pytest.raises(SubgroupCorruptError, match=f"subgroup {k}.*header checksum"):
            st.read_state()


def test_measure_pays_the_same_payload_sum_as_the_stores_requests(tmp_path, shm_dir,
                                                                  monkeypatch):
    # the defect: a path's start-up microbenchmark moved bare bytes, so its CPU per byte
    # (the CPU-aware split's input) left out the payload sum the store's requests pay: a
    # directory's (a pass of its own) was understated by about half against the copy paths'
    passes: list[int] = []
    folded: list[int] = []
    real, real_fold = SB.checksum, aio.copy_sum
    monkeypatch.setattr(SB, "checksum", lambda buf: (passes.append(1), real(buf))[1])
    monkeypatch.setattr(aio, "copy_sum", lambda d, s, what="": (
        folded.append(1), real_fold(d, s, what))[1])
    from cxlkit.train.spill.paths import DirPath, MemoryPath
    d = DirPath(str(tmp_path), lock="off")
    try:
        r, w = d.measure(1 << 20)
        assert r > 0 and w > 0 and d.measured_cpu_per_byte >= 0
        assert len(passes) == 4 and folded == []  # 2 rounds of a flush sum and a fetch check
    finally:
        d.close()
    passes.clear()
    m = MappedDirPath(shm_dir, lock="off")
    try:
        m.measure(1 << 20)
        assert passes == [] and len(folded) == 4  # folded into the copies
    finally:
        m.close()
    folded.clear()
    mem = MemoryPath()
    try:
        mem.measure(1 << 20)
        assert passes == [] and folded == []      # a memory tier keeps no sum
    finally:
        mem.close()
    assert not os.listdir(shm_dir) and not list(tmp_path.iterdir())


@settings(max_examples=60, deadline=None)
@given(flips=hst.lists(hst.tuples(hst.integers(0, HEADER_NBYTES + 12 * 1000 - 1),
                                hst.integers(1, 255)), min_size=1, max_size=4),
       cut=hst.one_of(hst.none(), hst.integers(0, HEADER_NBYTES + 12 * 1000 - 1)))
def test_fuzz_a_slot_fetched_through_the_fold_gives_its_bytes_or_a_typed_error(flips, cut):
    # random byte flips anywhere in a slot (header fields, header padding, payload) and a
    # torn tail (the bytes from `cut` on left from an older write): the folded fetch either
    # returns exactly the bytes flushed or raises SubgroupCorruptError; never other bytes
    raw = extent(1000, seed=len(flips))
    want = raw[HEADER_NBYTES:].copy()
    FlushHeader(raw, 2, 5, 1000, 11, True).write(
        aio.copy_sum(np.empty(raw.nbytes - HEADER_NBYTES, np.uint8), raw[HEADER_NBYTES:]))
    area = raw.copy()
    for off, x in flips:
        area[off] ^= x
    if cut is not None:
        area[cut:] = extent(1000, seed=99)[cut:]
    got = np.zeros_like(raw)
    chk = FetchCheck(got, 2, 5, 1000, 11, "fuzz", True)
    try:
        aio.copy(got[:HEADER_NBYTES], area[:HEADER_NBYTES])
        chk.header()
        chk.payload(aio.copy_sum(got[HEADER_NBYTES:], area[HEADER_NBYTES:]))
    except SubgroupCorruptError:
        return
    assert np.array_equal(got[HEADER_NBYTES:], want)
