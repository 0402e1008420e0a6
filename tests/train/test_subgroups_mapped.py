"""MappedDirPath (a directory on tmpfs, files mapped and moved by a user-space copy): chosen
for tmpfs by default, the same bits and the same files as DirPath (a state written through
one resumes through the other), typed errors for ENOSPC, a vanished directory and a file
truncated behind the store's back (never a SIGBUS)."""
from __future__ import annotations

import errno
import os

import numpy as np
import pytest

from cxlkit.train import aio
from cxlkit.train.spill.path_mapped import MappedDirPath, fs_type
from cxlkit.train.spill.paths import (DirPath, PathFullError, PathIOError, PathVanishedError,
                                      parse_path)
from cxlkit.train.spill.store import SubgroupStore
from test_subgroups import CFGS, SIZES, BF16, Ref, check_state, make, run_steps


def test_fs_type_takes_the_longest_mount_prefix_and_unescapes(tmp_path):
    m = tmp_path / "mounts"
    m.write_text("/dev/vda / ext4 rw 0 0\n"
                 "tmpfs /dev/shm tmpfs rw 0 0\n"
                 "tmpfs /mnt/with\\040blank tmpfs rw 0 0\n"
                 "short\n")
    assert fs_type("/dev/shm/x/y", str(m)) == "tmpfs"
    assert fs_type("/dev/shmother", str(m)) == "ext4"
    assert fs_type("/mnt/with blank/z", str(m)) == "tmpfs"
    assert fs_type("/etc", str(tmp_path / "missing")) is None


def test_parse_path_maps_tmpfs_and_keeps_the_engine_elsewhere(shm_dir, tmp_path):
    # the defect: a tmpfs directory went through the async I/O engine (io-wq kernel
    # copies, about 1.5x the CPU per byte of a user-space copy)
    p = parse_path(shm_dir, lock="off")
    try:
        assert isinstance(p, MappedDirPath) and p.kind == "dir"
    finally:
        p.close()
    for spec, cls in ((f"aio:{shm_dir}", DirPath), (f"map:{tmp_path}", MappedDirPath)):
        p = parse_path(spec, lock="off")
        try:
            assert type(p) is cls
        finally:
            p.close()
    if fs_type(str(tmp_path)) not in ("tmpfs", "ramfs"):
        p = parse_path(str(tmp_path), lock="off")
        try:
            assert type(p) is DirPath
        finally:
            p.close()
    p = parse_path(str(tmp_path), lock="off", config=aio.AioConfig(backend="map"))
    try:
        assert type(p) is MappedDirPath
    finally:
        p.close()
    with pytest.raises(ValueError, match="backend 'map'"):
        aio.AioEngine(aio.AioConfig(backend="map"))
    with pytest.raises(ValueError, match="map"):
        aio.AioConfig(backend="mmap")


def test_mapped_store_gives_the_kernels_bits_and_resumes_through_the_engine(shm_dir):
    ref = Ref(21)
    with make([f"map:{shm_dir}", "mem"], ref, namespace="mp") as st:
        assert type(st.paths[0]) is MappedDirPath
        ms = run_steps(st, ref, 3)
        assert ms[-1]["paths"][0]["read_bytes"] > 0 and ms[-1]["paths"][0]["write_bytes"] > 0
        check_state(st, ref)
    # the same files through DirPath (async I/O engine): a store written mapped resumes
    ref = Ref(25)
    with make([shm_dir], ref, namespace="mp2") as st:
        assert type(st.paths[0]) is MappedDirPath
        run_steps(st, ref, 1)
        st.commit(extra={"n": 1})
        saved = [tuple(a.copy() for a in s) for s in ref.state]
    with SubgroupStore([f"aio:{shm_dir}"], subgroup_params=700, cache_subgroups=3,
                       bandwidths=[1.0], namespace="mp2") as st2:
        st2.bind(SIZES)
        assert type(st2.paths[0]) is DirPath
        assert st2.resume() == {"n": 1}
        got = st2.read_state()
        for i, s in enumerate(saved):
            for a, b in zip(got[i], s):
                assert np.array_equal(a, b)


def test_enospc_at_allocation_raises_PathFullError_and_a_later_store_works(shm_dir,
                                                                          monkeypatch):
    real = os.posix_fallocate
    calls = []

    def full(fd, off, n):
        calls.append(n)
        if len(calls) == 2:  # the second subgroup's file: the filesystem is full
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, off, n)
    monkeypatch.setattr(os, "posix_fallocate", full)
    ref = Ref(22)
    with pytest.raises(PathFullError) as ei:
        make([f"map:{shm_dir}"], ref, namespace="full")
    assert ei.value.errno == errno.ENOSPC and ei.value.subgroup is not None
    assert ei.value.path.startswith(shm_dir)
    monkeypatch.setattr(os, "posix_fallocate", real)
    with make([f"map:{shm_dir}"], ref, namespace="full") as st:
        run_steps(st, ref, 2)
        check_state(st, ref)


def test_truncated_file_raises_PathIOError_not_a_fault(shm_dir):
    ref = Ref(23)
    with make([f"map:{shm_dir}"], ref, cache_subgroups=3) as st:
        run_steps(st, ref, 1)
        k = next(k for k in range(len(st.subgroups)) if k not in st.cache.where)
        os.truncate(st.paths[0].file(k), 4096)
        with pytest.raises(PathIOError, match="shrank"):
            st.read_state()
    p = MappedDirPath(shm_dir, lock="off")
    try:
        p.open(8192)
        with open(p.file(3), "wb") as f:
            f.write(b"x" * 100)
        with pytest.raises(PathIOError, match="holds 100 bytes"):
            p.read(3, 0, np.zeros(8192, np.uint8)).wait()
        with pytest.raises(PathVanishedError, match="no such subgroup file"):
            p.read(99, 0, np.zeros(8192, np.uint8)).wait()
    finally:
        p.close()


def test_vanished_directory_raises_PathVanishedError(shm_dir):
    d = os.path.join(shm_dir, "gone")
    os.mkdir(d)
    ref = Ref(24)
    st = make([f"map:{d}"], ref)
    try:
        run_steps(st, ref, 1)
        for name in os.listdir(d):
            os.unlink(os.path.join(d, name))
        os.rmdir(d)
        with pytest.raises(PathVanishedError, match="vanished"):
            run_steps(st, ref, 1)
    finally:
        st.close()
    with pytest.raises(PathVanishedError):
        MappedDirPath(d)
