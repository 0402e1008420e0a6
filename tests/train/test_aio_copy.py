"""The guarded copy (aio.copy, cxk_aio_copy) and the SIGBUS window of the mapped paths: a
file truncated by another process after the size check, during the copy, gives a typed
PathIOError naming the file, never a crash. The scenarios that can fault run in a child
process, so that a regression shows as a failed test (the child killed by SIGBUS) and not
as a dead pytest."""
from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from cxlkit.train import aio


def run_child(code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args],
                          capture_output=True, text=True, timeout=120)


def test_copy_moves_the_bytes_and_refuses_bad_arguments():
    src = np.arange(1 << 16, dtype=np.uint32)
    dst = np.zeros_like(src)
    aio.copy(dst, src)
    assert np.array_equal(dst, src)
    aio.copy(np.zeros(0, np.uint8), np.zeros(0, np.uint8))  # nothing to move
    with pytest.raises(ValueError, match="copy of 8 bytes into 4"):
        aio.copy(np.zeros(4, np.uint8), np.zeros(8, np.uint8), "x")
    with pytest.raises(TypeError, match="dst: expected a C-contiguous numpy array"):
        aio.copy(np.zeros((4, 4), np.uint8)[:, 1], np.zeros(4, np.uint8))
    with pytest.raises(TypeError, match="src: expected a C-contiguous numpy array"):
        aio.copy(np.zeros(4, np.uint8), b"abcd")
    ro = np.frombuffer(b"abcdefgh", np.uint8)  # a read-only source is fine
    out = np.zeros(8, np.uint8)
    aio.copy(out, ro)
    assert out.tobytes() == b"abcdefgh"


@pytest.mark.parametrize("fn", ["copy", "copy_sum"])
def test_copy_from_or_to_a_mapping_truncated_by_another_process_raises_EFAULT(tmp_path, fn):
    # the defect: np.copyto over a shared mapping whose file another process truncated
    # killed the process with SIGBUS; copy_sum (the copy with the payload sum folded in)
    # runs under the same guard
    r = run_child("""
        import errno, mmap, os, subprocess, sys
        import numpy as np
        from cxlkit.train import aio
        f, copy = sys.argv[1], getattr(aio, sys.argv[2])
        with open(f, "wb") as fh:
            fh.truncate(4 << 20)
        fd = os.open(f, os.O_RDWR)
        mm = mmap.mmap(fd, 4 << 20, flags=mmap.MAP_SHARED)
        area = np.frombuffer(mm, np.uint8)
        subprocess.run(["truncate", "-s", "0", f], check=True)   # a second process
        buf = np.zeros(4 << 20, np.uint8)
        for dst, src in ((buf, area), (area, buf)):
            try:
                copy(dst, src, f)
            except OSError as e:
                assert e.errno == errno.EFAULT and f in str(e), e
            else:
                raise AssertionError("no fault")
        copy(buf[:8], np.ones(8, np.uint8))  # the guard is reusable after a fault
        print("survived", buf[:8].sum())
    """, str(tmp_path / "victim"), fn)
    assert r.returncode == 0, (r.returncode, r.stderr)
    assert r.stdout.split() == ["survived", "8"]


def test_a_sigbus_outside_the_copy_still_kills_the_process():
    # the handler hands every SIGBUS it does not own to the one before it (here the
    # default action): a real crash stays a crash
    r = run_child("""
        import os, signal
        import numpy as np
        from cxlkit.train import aio
        aio.copy(np.zeros(8, np.uint8), np.ones(8, np.uint8))   # installs the handler
        os.kill(os.getpid(), signal.SIGBUS)
        print("not reached")
    """)
    assert r.returncode == -signal.SIGBUS, (r.returncode, r.stdout, r.stderr)
    assert "not reached" not in r.stdout


def test_mapped_file_truncated_after_the_size_check_raises_PathIOError_naming_it(shm_dir):
    # the window the size check leaves: the file passes it, then another process truncates
    # it before the copy. Made deterministic by a size check that sees the old size.
    r = run_child("""
        import os, subprocess, sys
        import numpy as np
        from cxlkit.train.spill import path_mapped as spill_mapped
        from cxlkit.train.spill.path_mapped import MappedDirPath
        from cxlkit.train.spill.paths import PathIOError
        p = MappedDirPath(sys.argv[1], lock="off")
        p.open(1 << 20)
        p.write(5, 0, np.full(1 << 20, 3, np.uint8)).wait()
        real_fstat = os.fstat
        class Old:
            st_size = 2 << 20
        def fstat_then_truncate(fd):
            real_fstat(fd)
            subprocess.run(["truncate", "-s", "4096", p.file(5)], check=True)
            return Old()
        spill_mapped.os.fstat = fstat_then_truncate
        for op in ("read", "write"):
            try:
                getattr(p, op)(5, 1, np.zeros(1 << 20, np.uint8)).wait()
            except PathIOError as e:
                assert e.path == p.file(5) and e.subgroup == 5 and e.errno == 5, e
                print(op, "PathIOError")
            else:
                print(op, "no error")
        spill_mapped.os.fstat = real_fstat
        p.close()
    """, shm_dir)
    assert r.returncode == 0, (r.returncode, r.stderr)
    assert r.stdout.split("\n")[:2] == ["read PathIOError", "write PathIOError"]


def test_file_truncated_by_another_process_during_a_store_read_never_crashes(shm_dir):
    # a real race: a second process truncates the file while the copy worker reads a 128 MiB
    # slot; the read either finished first or fails typed, and the next read is refused
    r = run_child("""
        import os, subprocess, sys
        import numpy as np
        from cxlkit.train.spill.path_mapped import MappedDirPath
        from cxlkit.train.spill.paths import PathIOError
        n = 128 << 20
        p = MappedDirPath(sys.argv[1], lock="off")
        p.open(n)
        p.write(1, 0, np.full(n, 9, np.uint8)).wait()
        child = subprocess.Popen(
            [sys.executable, "-c", "import os, sys; print('ready', flush=True); "
             "sys.stdin.read(1); os.truncate(sys.argv[1], 0)", p.file(1)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert child.stdout.readline() == b"ready\\n"   # the barrier: it is up
        buf = np.zeros(n, np.uint8)
        pend = p.read(1, 0, buf)
        child.stdin.write(b"g"); child.stdin.close()    # truncate now, mid-copy or after
        assert child.wait() == 0
        try:
            pend.wait()
            print("first: done")
        except PathIOError as e:
            assert e.path == p.file(1), e
            print("first: PathIOError")
        try:
            p.read(1, 0, buf).wait()
            print("second: done")
        except PathIOError as e:
            assert e.path == p.file(1) and "shrank" in str(e), e
            print("second: PathIOError")
        p.close()
    """, shm_dir)
    assert r.returncode == 0, (r.returncode, r.stderr)
    first, second = r.stdout.split("\n")[:2]
    assert first in ("first: done", "first: PathIOError")
    assert second == "second: PathIOError"


def test_a_fault_outside_the_copy_with_sigbus_ignored_still_kills_instead_of_looping(tmp_path):
    # with SIGBUS ignored before the handler came, a fault outside the copy must not return
    # into the faulting instruction forever: it takes the default action, as the kernel does
    r = run_child("""
        import mmap, os, signal, sys
        import numpy as np
        signal.signal(signal.SIGBUS, signal.SIG_IGN)
        from cxlkit.train import aio
        aio.copy(np.zeros(8, np.uint8), np.ones(8, np.uint8))   # installs the handler
        f = sys.argv[1]
        with open(f, "wb") as fh:
            fh.truncate(1 << 20)
        fd = os.open(f, os.O_RDWR)
        mm = mmap.mmap(fd, 1 << 20, flags=mmap.MAP_SHARED)
        os.truncate(f, 0)
        np.frombuffer(mm, np.uint8).sum()   # faults outside the guarded copy
        print("not reached")
    """, str(tmp_path / "victim"))
    assert r.returncode == -signal.SIGBUS, (r.returncode, r.stdout, r.stderr)


def test_copy_sum_copies_and_returns_kv_checksum_for_every_length_and_offset():
    from cxlkit import _native
    rng = np.random.default_rng(5)
    base = rng.integers(0, 256, 5000, np.uint8)
    for n in (0, 1, 7, 8, 9, 31, 32, 33, 63, 64, 65, 100, 4096, 4999 - 3):
        for off in (0, 1, 3):
            src = base[off:off + n]
            dst = np.zeros(n, np.uint8)
            s = aio.copy_sum(dst, src)
            assert np.array_equal(dst, src)
            if n:
                assert s == _native.kv_checksum(src.ctypes.data, n)
                flipped = src.copy()
                flipped[n // 2] ^= 0x40
                assert aio.copy_sum(dst, flipped) != s
    with pytest.raises(ValueError, match="copy of 8 bytes into 4"):
        aio.copy_sum(np.zeros(4, np.uint8), np.zeros(8, np.uint8), "x")
    with pytest.raises(TypeError, match="dst: expected a C-contiguous numpy array"):
        aio.copy_sum(np.zeros((4, 4), np.uint8)[:, 1], np.zeros(4, np.uint8))
