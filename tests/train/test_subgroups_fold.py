"""The disk's payload checksums folded into the AdamW kernel (subgroup_fold): the state and
the param copies are bit for bit those of the separate passes, the flushes take the sums of
the kernel's stores (which a store checking by passes accepts on resume), no payload pass
runs on a directory's check thread during the steps, and a corrupt payload on the disk is
caught before the user's param copies of that subgroup are written."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from cxlkit.train import adam as A
from cxlkit.train.spill import path_base as SB
from cxlkit.train.spill.paths import HEADER_NBYTES, SubgroupCorruptError
from cxlkit.train.spill.store import SubgroupStore

BF16 = A.DTYPES["bfloat16"]
SG = 3000
SIZES = [SG] * 8  # param k is subgroup k


def _bf16(x: np.ndarray) -> np.ndarray:
    return (np.asarray(x, np.float32).view(np.uint32) >> 16).astype(np.uint16)


def _grads(step: int, skip: int | None = None) -> list:
    g = [(_bf16(np.sin(np.arange(n) * 0.01 + step + i)), BF16) for i, n in enumerate(SIZES)]
    if skip is not None:
        g[skip] = None  # a param without a grad keeps its state (and its sum)
    return g


def _store(paths, **kw) -> SubgroupStore:
    st = SubgroupStore(paths, subgroup_params=SG, cache_subgroups=3,
                       bandwidths=[1e9] * len(paths), **kw)
    st.bind([SIZES])
    st.init_params(lambda pid: np.linspace(-1, 1, SIZES[pid], dtype=np.float32))
    return st


def _flip_payload(st, k: int) -> str:
    """Flip a bit of subgroup k's newest payload in its file; the file's path."""
    pi, slot, _ = st.pipeline.location(k)
    f = st.paths[pi].file(k)
    with open(f, "r+b") as fh:
        fh.seek(slot * st.paths[pi].slot_nbytes + HEADER_NBYTES + 4 * 100)
        b = fh.read(1)
        fh.seek(-1, 1)
        fh.write(bytes([b[0] ^ 0x40]))
    return f


def _train(st, copies, steps, cfg):
    ms = []
    for s in range(1, steps + 1):
        ms.append(st.step([cfg], _grads(s, skip=3 if s == 2 else None),
                          [(c, BF16) for c in copies], [s] * len(SIZES)))
    return ms


@pytest.mark.parametrize("mem", [False, True])
def test_folded_sums_give_the_separate_passes_state_copies_and_resumable_headers(
        tmp_path, mem, monkeypatch):
    cfg = A.AdamConfig(lr=1e-2, resync=True)  # the copies are read too (resync)
    out = {}
    for fold in (False, True):
        d = tmp_path / f"d{fold}"
        d.mkdir()
        paths = [f"aio:{d}"] + (["mem"] if mem else [])
        copies = [_bf16(np.linspace(-1, 1, n)) for n in SIZES]
        names: list[str] = []
        real = SB.checksum
        monkeypatch.setattr(SB, "checksum", lambda buf: (
            names.append(threading.current_thread().name), real(buf))[1])
        with _store(paths, sum_in_kernel=fold) as st:
            names.clear()
            ms = _train(st, copies, 4, cfg)
            steps_names = list(names)
            st.commit()
            out[fold] = (st.read_state(), copies, ms, steps_names)
        monkeypatch.setattr(SB, "checksum", real)
        # the headers the folded flushes wrote: a store that checks by passes resumes them
        with SubgroupStore(paths[:1], subgroup_params=SG, cache_subgroups=3,
                           bandwidths=[1e9], sum_in_kernel=False) as st2:
            if not mem:
                st2.bind([SIZES])
                st2.resume()
                got = st2.read_state()
                assert all(np.array_equal(a, b) for p in got
                           for a, b in zip(got[p], out[fold][0][p]))
    (s0, c0, m0, n0), (s1, c1, m1, n1) = out[False], out[True]
    assert all(np.array_equal(a, b) for p in s0 for a, b in zip(s0[p], s1[p]))
    assert all(np.array_equal(a, b) for a, b in zip(c0, c1))
    assert sum(m["folded_flushes"] for m in m1) > 0 and sum(m["folded_flushes"] for m in m0) == 0
    # separate passes: the fetch checks on the directory's check thread; folded: none there
    assert any(n.startswith("cxlkit-check") for n in n0)
    assert not any(n.startswith("cxlkit-check") for n in n1)


def test_a_corrupt_disk_payload_is_caught_before_the_users_copies_are_written(tmp_path):
    cfg = A.AdamConfig(lr=1e-2)
    copies = [np.zeros(n, np.uint16) for n in SIZES]
    with _store([f"aio:{tmp_path}"]) as st:
        _train(st, copies, 1, cfg)
        st.commit()
        k = 2  # step 2 runs descending: 7, 6, 5 are cache hits, 2 is fetched from the disk
        assert k not in st.cache.where
        f = _flip_payload(st, k)
        for c in copies:
            c[:] = 0x1234  # sentinel: what the user's params hold before the step
        with pytest.raises(SubgroupCorruptError) as ei:
            st.step([cfg], _grads(2), [(c, BF16) for c in copies], [2] * len(SIZES))
        assert ei.value.subgroup == k and ei.value.path == st.paths[0].name
        assert "payload checksum" in str(ei.value)
        assert (copies[k] == 0x1234).all()           # never written from the corrupt bytes
        assert not (copies[7] == 0x1234).all()       # updated before it: written
        assert k not in st.cache.where                    # the buffer computed from it is dropped


def test_zero_copy_route_a_corrupt_payload_leaves_the_users_copies_of_it_unwritten(tmp_path):
    # defect (run 7's doubt): on the zero-copy route with the sums in the kernel, the old
    # generation's sum was checked after the kernel had written the user's param copies
    # from the corrupt bytes
    import tempfile
    cfg = A.AdamConfig(lr=1e-2)
    copies = [np.zeros(n, np.uint16) for n in SIZES]
    with tempfile.TemporaryDirectory(dir="/dev/shm", prefix="cxlkit-fold-") as shm:
        with _store([f"map:{shm}"]) as st:
            _train(st, copies, 1, cfg)
            k = 2  # updated where it lies (no cache buffer), descending order at step 2
            assert k not in st.cache.where
            f = _flip_payload(st, k)
            for c in copies:
                c[:] = 0x1234
            with pytest.raises(SubgroupCorruptError) as ei:
                st.step([cfg], _grads(2), [(c, BF16) for c in copies], [2] * len(SIZES))
            assert ei.value.subgroup == k and ei.value.path == f
            assert (copies[k] == 0x1234).all()
            assert not (copies[7] == 0x1234).all()
