"""The per-host lock files of subgroup paths (a pool path's in /dev/shm, a directory's in it):
a store's close removes its path's lock file when no other process holds the lock, and
leaves it while one does; a store that opened the file before another removed it locks the
file at the path, so two stores never hold "the" lock at once through different files."""
from __future__ import annotations

import os
import subprocess
import sys

import cxlkit
from cxlkit.train.spill.path_copy import PoolPath
from cxlkit.train.spill.path_dir import DirPath

_HOLDER = r"""
import fcntl, os, struct, sys
fd = os.open(sys.argv[1], os.O_RDWR)
# an OFD lock of byte 0, as the stores take (struct flock: type, whence, start, len, pid)
fcntl.fcntl(fd, fcntl.F_OFD_SETLK, struct.pack("hhqqi", fcntl.F_WRLCK, 0, 0, 1, 0))
print("held", flush=True)
sys.stdin.readline()
"""


def _use(path) -> str:
    assert path.acquire(wait=True)
    path._unlock()
    return path._lock_path()


def test_close_removes_the_pool_paths_lock_file(pool_path):
    with cxlkit.Pool(pool_path, size=8 << 20, host_id=0) as pool:
        p = PoolPath(pool, "sglock")
        lp = _use(p)
        assert lp.startswith("/dev/shm/") and os.path.exists(lp)
        p.close()
        assert not os.path.exists(lp)


def test_close_leaves_a_lock_file_another_process_holds(tmp_path):
    d = DirPath(str(tmp_path))
    lp = _use(d)
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, lp], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        d.close()
        assert os.path.exists(lp)  # held elsewhere: not ours to remove
    finally:
        holder.communicate("", timeout=30)
    again = DirPath(str(tmp_path))
    assert _use(again) == lp
    again.close()
    assert not os.path.exists(lp)


def test_a_store_holding_a_removed_file_locks_the_one_at_the_path(tmp_path):
    first, second = DirPath(str(tmp_path)), DirPath(str(tmp_path))
    lp = _use(first)
    _use(second)  # both have the file open; first's close removes it (nobody holds the lock)
    first.close()
    assert not os.path.exists(lp)
    assert second.acquire(wait=True)
    try:
        # second's lock is on the file now at the path: a third store cannot take it
        third = DirPath(str(tmp_path))
        assert os.path.exists(lp) and not third.acquire(wait=False)
        third.close()
        assert os.path.exists(lp)  # second holds it
    finally:
        second._unlock()
    second.close()
    assert not os.path.exists(lp)
