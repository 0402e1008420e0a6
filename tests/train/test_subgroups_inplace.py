"""The zero-copy route of SubgroupStore (subgroup_inplace): subgroups on a mapped tmpfs
directory, a pool object area or a memory tier are updated where they lie, with the kernel's
bits; no payload is copied; the disk's subgroups keep the host cache (K hits per step); a
torn update leaves the previous generation (retry in the process, resume after it); a flipped
byte, a vanished directory and a shrunk file are typed errors naming path and subgroup; a
hypothesis fuzz of the slot a zero-copy update reads (the on-media header and payload)."""
from __future__ import annotations

import errno
import os
import shutil

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cxlkit
from cxlkit.train import adam as A
from cxlkit.train import aio
from cxlkit.train.spill import path_base as SB
from cxlkit.train.spill import update_inplace as I
from cxlkit.train.spill.paths import (HEADER_NBYTES, MemoryPath, PathIOError,
                                      PathVanishedError, PoolPath, SubgroupCorruptError)
from cxlkit.train.spill.store import SubgroupStore
from test_subgroups import CFGS, SIZES, Ref, check_state, make, run_steps

BF16 = A.DTYPES["bfloat16"]


@pytest.fixture
def disk(tmp_path):
    d = tmp_path / "disk"
    d.mkdir()
    return str(d)


def one_step(st, ref, g16):
    want = ref.advance(g16)
    copies = [np.empty(p.size, np.uint16) for p in ref.p0]
    m = st.step(CFGS, [(g, BF16) for g in g16], [(c, BF16) for c in copies], [ref.step] * 4)
    for c, w in zip(copies, want):
        assert np.array_equal(c, w)
    return m


def assert_resumes(shm_dir, namespace, at, saved):
    """A new store on the same directory resumes at step `at` with the state `saved`."""
    with SubgroupStore([f"map:{shm_dir}"], subgroup_params=700, cache_subgroups=3,
                       bandwidths=[1.0], namespace=namespace) as st2:
        st2.bind(SIZES)
        assert st2.resume() == {"at": at}
        got = st2.read_state()
        for i, s in enumerate(saved):
            for a, b in zip(got[i], s):
                assert np.array_equal(a, b)


@pytest.mark.parametrize("fold", [True, False])
@pytest.mark.parametrize("kind", ["map", "pool", "mem"])
def test_in_place_route_gives_the_kernels_bits_and_copies_no_payload(kind, fold, shm_dir,
                                                                     pool_path, monkeypatch):
    moved: list[int] = []
    real_copy, real_sum = aio.copy, aio.copy_sum
    monkeypatch.setattr(aio, "copy", lambda d, s, what="": (moved.append(d.nbytes),
                                                           real_copy(d, s, what))[1])
    monkeypatch.setattr(aio, "copy_sum", lambda d, s, what="": (moved.append(d.nbytes),
                                                               real_sum(d, s, what))[1])
    ref = Ref(3)
    pool = cxlkit.Pool(pool_path, size=8 << 20, host_id=0) if kind == "pool" else None
    path = {"map": f"map:{shm_dir}", "mem": MemoryPath()}.get(kind) or PoolPath(pool, "ip")
    try:
        with make([path], ref, sum_in_kernel=fold) as st:
            moved.clear()
            ms = run_steps(st, ref, 4)
            during = list(moved)
            if st.paths[0].checksummed:
                # each newest slot's header carries kv_checksum of its payload (the fold's
                # parts finish to it; a separate pass computes it)
                for k, sg in enumerate(st.subgroups):
                    pi, slot, _ = st.pipeline.location(k)
                    area = st.paths[pi]._area(k, create=False)
                    lo = slot * st.paths[pi].slot_nbytes
                    raw = area[lo:lo + HEADER_NBYTES + sg.state_nbytes]
                    want = int.from_bytes(bytes(raw[48:56]), "little")
                    assert SB.checksum(raw[HEADER_NBYTES:]) == want
                    del area, raw
            check_state(st, ref)  # read_state streams through the cache: copies
        # step 1: the subgroups init_params left cached leave the cache (clean: no write);
        # from then on every subgroup is updated where it lies
        nsub = ms[0]["subgroups"]
        for m in ms:
            assert m["in_place"] == nsub and m["fetches"] == m["flushes"] == 0
            assert m["cache_hits"] == 0
            assert m["paths"][0]["read_bytes"] > 0 and m["in_place_s"] > 0
        # only headers moved by a copy (4 KiB each): no payload
        assert during and set(during) == {HEADER_NBYTES}
    finally:
        if pool is not None:
            pool.close()


def test_disk_subgroups_keep_the_cache_hits_beside_a_zero_copy_path(disk, shm_dir):
    ref = Ref(4)
    with make([disk, f"map:{shm_dir}"], ref, cache_subgroups=3, bandwidths=[1.0, 1.0],
              split="eq1") as st:
        on_disk = st.assignment.count(0)
        ms = run_steps(st, ref, 4)
        check_state(st, ref)
    for m in ms[1:]:
        assert m["in_place"] == m["subgroups"] - on_disk
        # the K buffers hold disk subgroups only: up to K of them skip I/O per step
        assert m["cache_hits"] == min(3, on_disk)
        assert m["fetches"] + m["cache_hits"] == on_disk


def test_zero_copy_false_is_the_cache_route_with_the_same_bits(shm_dir):
    a, b = Ref(5), Ref(5)
    with make([f"map:{shm_dir}"], a, namespace="zc") as st1, \
            make([f"map:{shm_dir}"], b, namespace="cc", zero_copy=False) as st2:
        m1, m2 = run_steps(st1, a, 3), run_steps(st2, b, 3)
        check_state(st1, a)
        check_state(st2, b)
    assert m1[-1]["in_place"] > 0 and m2[-1]["in_place"] == 0 and m2[-1]["fetches"] > 0


def test_torn_in_place_update_leaves_the_previous_generation(shm_dir, monkeypatch):
    # a failure after the kernel wrote the new slot and before its header: the slot that
    # holds the previous generation is untouched; calling step again finishes the step
    # with the kernel's bits, and a new store resumes the committed generation
    ref = Ref(6)
    with make([f"map:{shm_dir}"], ref, namespace="torn") as st:
        run_steps(st, ref, 1)
        st.commit({"at": 1})
        saved = [tuple(a.copy() for a in s) for s in ref.state]
        g16 = ref.grads()
        real = I.pack_header
        calls = []

        def torn(*a, **kw):
            calls.append(1)
            if len(calls) == 2:
                raise OSError(errno.EIO, "power cut")
            return real(*a, **kw)
        monkeypatch.setattr(I, "pack_header", torn)
        copies = [np.empty(p.size, np.uint16) for p in ref.p0]
        args = (CFGS, [(g, BF16) for g in g16], [(c, BF16) for c in copies], [2] * 4)
        with pytest.raises(OSError, match="power cut"):
            st.step(*args)
        assert st.retrying
        monkeypatch.setattr(I, "pack_header", real)
        st.step(*args)  # the same step again, with the same grads and copies
        for c, w in zip(copies, ref.advance(g16)):
            assert np.array_equal(c, w)
        check_state(st, ref)
    assert_resumes(shm_dir, "torn", 1, saved)


def _newest_slot_file(st, k):
    pi, slot, _ = st.pipeline.location(k)
    return st.paths[pi].file(k), slot * st.paths[pi].slot_nbytes


@pytest.mark.parametrize("fold", [True, False])
@pytest.mark.parametrize("where", ["payload", "padding", "header"])
def test_flipped_byte_in_the_slot_an_update_reads_raises_naming_file_and_subgroup(
        shm_dir, where, fold):
    ref = Ref(7)
    with make([f"map:{shm_dir}"], ref, sum_in_kernel=fold) as st:
        run_steps(st, ref, 2)
        f, lo = _newest_slot_file(st, 0)
        pad = HEADER_NBYTES + st.subgroups[0].state_nbytes - 1
        off = lo + {"payload": HEADER_NBYTES + 123, "padding": pad, "header": 30}[where]
        with open(f, "r+b") as fh:
            fh.seek(off)
            b = fh.read(1)
            fh.seek(off)
            fh.write(bytes([b[0] ^ 0x10]))
        with pytest.raises(SubgroupCorruptError) as ei:
            run_steps(st, ref, 1)
        assert ei.value.subgroup == 0 and ei.value.path == f


def test_vanished_directory_and_shrunk_file_raise_typed_errors(shm_dir):
    ref = Ref(8)
    d = os.path.join(shm_dir, "sub")
    os.mkdir(d)
    with make([f"map:{d}"], ref) as st:
        run_steps(st, ref, 1)
        f, _ = _newest_slot_file(st, 0)
        os.truncate(f, 4096)
        with pytest.raises(PathIOError) as ei:
            run_steps(st, ref, 1)
        assert ei.value.subgroup == 0 and "shrank" in str(ei.value)
    ref = Ref(8)
    with make([f"map:{d}"], ref, namespace="gone") as st:
        run_steps(st, ref, 1)
        shutil.rmtree(d)
        with pytest.raises(PathVanishedError) as ei:
            run_steps(st, ref, 1)
        assert ei.value.errno == errno.ENOENT and ei.value.path == d


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzzed_slot_is_refused_or_gives_the_kernels_bits(shm_dir, data):
    # random flips, anywhere in the slot the next update reads (the header's fields, its
    # unused tail, the payload): the update raises SubgroupCorruptError, or (a flip in bytes
    # no check covers: the header's unused tail) gives the kernel's bits
    ref = Ref(9)
    ns = f"fz{data.draw(st.integers(0, 1 << 30))}"
    with make([f"map:{shm_dir}"], ref, namespace=ns) as st_:
        run_steps(st_, ref, 1)
        k = data.draw(st.integers(0, len(st_.subgroups) - 1))
        f, lo = _newest_slot_file(st_, k)
        ext = HEADER_NBYTES + st_.subgroups[k].state_nbytes
        flips = data.draw(st.lists(st.tuples(st.integers(0, ext - 1), st.integers(1, 255)),
                                   min_size=1, max_size=4))
        with open(f, "r+b") as fh:
            for off, x in flips:
                fh.seek(lo + off)
                b = fh.read(1)
                fh.seek(lo + off)
                fh.write(bytes([b[0] ^ x]))
        net: dict[int, int] = {}
        for off, x in flips:
            net[off] = net.get(off, 0) ^ x
        hdr = SB._HDR.size + SB._HDR_CRC.size  # the bytes the header's crc covers
        covered = any(x and (off < hdr or off >= HEADER_NBYTES) for off, x in net.items())
        try:
            run_steps(st_, ref, 1)
        except SubgroupCorruptError as e:
            assert covered and e.path == f and e.subgroup == k
        else:
            assert not covered
            check_state(st_, ref)


def test_a_param_without_grad_keeps_its_state_through_an_out_of_place_update(shm_dir):
    # defect: the kernel skips a param whose grad is None, and the new slot kept whatever
    # an older generation left there for it (the update wrote the other params only)
    ref = Ref(10)
    with make([f"map:{shm_dir}"], ref) as st:
        for step in range(4):
            g16 = ref.grads()
            ref.step += 1
            skip = step % 4  # another param skipped each step
            for i, (p, m, v) in enumerate(ref.state):
                if i != skip:
                    A.step_raw([(p, m, v, g16[i], BF16, None, -1)], CFGS[[0, 0, 0, 1][i]],
                               ref.step)
            m = st.step(CFGS, [None if i == skip else (g, BF16) for i, g in enumerate(g16)],
                        [None] * 4, [ref.step] * 4)
            assert m["in_place"] > 0
        check_state(st, ref)


def test_torn_update_in_its_own_slot_is_caught_and_the_commit_resumes(shm_dir, monkeypatch):
    # the second update after a commit runs in the subgroup's own slot (the committed one is
    # the other): a failure between the kernel and the header leaves that slot's old header
    # over new bytes; the next step raises SubgroupCorruptError naming it, and the commit
    # resumes in a new store
    ref = Ref(11)
    with make([f"map:{shm_dir}"], ref, namespace="own") as st:
        st.commit({"at": 0})
        saved = [tuple(a.copy() for a in s) for s in ref.state]
        run_steps(st, ref, 1)  # out of place: into the slot the commit does not hold
        assert all(st.pipeline.location(k)[1] != st.ledger.committed[k][1] for k in range(len(st.subgroups)))
        real = I.pack_header

        def torn(*a, **kw):
            raise OSError(errno.EIO, "power cut")
        monkeypatch.setattr(I, "pack_header", torn)
        with pytest.raises(OSError, match="power cut"):
            run_steps(st, ref, 1)
        monkeypatch.setattr(I, "pack_header", real)
        with pytest.raises(SubgroupCorruptError) as ei:
            run_steps(st, ref, 1)
        assert ei.value.subgroup is not None
    assert_resumes(shm_dir, "own", 0, saved)


def test_config_block_sets_zero_copy_and_sum_in_kernel(shm_dir):
    from cxlkit.train import from_config
    cfg = from_config({"offload_optimizer": {"device": "nvme", "nvme_path": [shm_dir]},
                       "cxlkit": {"zero_copy": False, "sum_in_kernel": False,
                                  "bandwidths": [1.0]}})
    st = cfg.make_store()
    try:
        assert st.zero_copy is False and st.sum_in_kernel is False
    finally:
        st.close()
    with pytest.raises(ValueError, match="zero_cpy"):
        from_config({"offload_optimizer": {"device": "nvme", "nvme_path": [shm_dir]},
                     "cxlkit": {"zero_cpy": True}})


def test_in_place_route_on_a_team_gives_the_kernels_bits_and_valid_sums(shm_dir):
    # the team's chunks each fold their own sums (parts that add): the header's sum must
    # still be kv_checksum of the payload, checked by the next update's verify
    ref = Ref(12)
    with A.AdamTeam(2, chunk_bytes=4096) as team, make([f"map:{shm_dir}"], ref) as st:
        for _ in range(3):
            g16 = ref.grads()
            want = ref.advance(g16)
            copies = [np.empty(p.size, np.uint16) for p in ref.p0]
            m = st.step(CFGS, [(g, BF16) for g in g16], [(c, BF16) for c in copies],
                        [ref.step] * 4, team=team)
            assert m["in_place"] == m["subgroups"]
            for c, w in zip(copies, want):
                assert np.array_equal(c, w)
        check_state(st, ref)


def _crash_mid_update(directory: str, ns: str) -> None:
    """Child: commit, one step (out of place), then die (os._exit, no cleanup) in the
    second step's first update after the kernel wrote its slot and before its header."""
    ref = Ref(13)
    st = make([f"map:{directory}"], ref, namespace=ns)
    st.commit({"at": 0})
    run_steps(st, ref, 1)
    st.commit({"at": 1})
    run_steps(st, ref, 1)  # now every subgroup's newest generation is in the uncommitted slot
    I.pack_header = lambda *a, **kw: os._exit(3)
    run_steps(st, ref, 1)


def test_a_process_killed_mid_update_resumes_the_committed_generation(shm_dir):
    import multiprocessing as mp
    ctx = mp.get_context("fork")
    p = ctx.Process(target=_crash_mid_update, args=(shm_dir, "crash"))
    p.start()
    p.join(60)
    assert p.exitcode == 3
    ref = Ref(13)
    with make([f"map:{shm_dir}"], ref, namespace="scratch") as st0:
        run_steps(st0, ref, 1)  # the same grads as the child's first step: the commit "at 1"
    with SubgroupStore([f"map:{shm_dir}"], subgroup_params=700, cache_subgroups=3,
                       bandwidths=[1.0], namespace="crash") as st2:
        st2.bind(SIZES)
        assert st2.resume() == {"at": 1}
        check_state(st2, ref)
