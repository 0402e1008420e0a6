"""A pool file's blocks exist before anything touches them: a pool is reserved whole when made,
so a filesystem that fills up afterwards cannot kill its users with SIGBUS; an overcommitted
(sparse) pool reserves its metadata when made and each extent when a host claims it, and a
full filesystem is a typed error naming the pool. Real on a small tmpfs (a private mount
namespace) where this machine allows it; the fault hook's ENOSPC everywhere."""
from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

import cxlkit
from cxlkit import _native

MiB = 1 << 20

# Runs inside a mount namespace with an 8 MiB tmpfs at sys.argv[1]: each case prints one
# line; a SIGBUS ends the process with signal 7 instead.
SCENARIO = textwrap.dedent("""
    import errno, os, sys
    import cxlkit
    d = sys.argv[1]
    MiB = 1 << 20

    def fill(name):
        with open(os.path.join(d, name), "wb") as f:
            try:
                while True:
                    f.write(b"f" * 65536)
                    f.flush()
            except OSError as e:
                assert e.errno == errno.ENOSPC, e

    def case(label, fn):
        try:
            print(label, "ok", fn(), flush=True)
        except cxlkit.PoolError as e:
            print(label, type(e).__name__, e.errno, e, flush=True)

    a = os.path.join(d, "cxlkit-a")
    with cxlkit.Pool(a, size=6 * MiB, host_id=0, max_hosts=2, coherence="host") as p:
        fill("filler")
        def use():
            p.create("x", 4 * MiB).close()
            with cxlkit.Pool(a, host_id=1, coherence="host") as q:
                q.create("y", 256 * 1024).close()
            return "created"
        case("reserved", use)
    os.unlink(a)
    os.unlink(os.path.join(d, "filler"))

    b = os.path.join(d, "cxlkit-b")
    with cxlkit.Pool(b, size=6 * MiB, host_id=0, max_hosts=2, overcommit=True,
                     coherence="host") as p:
        fill("filler")
        case("attach", lambda: cxlkit.Pool(b, host_id=1, coherence="host").close())
        case("sparse", lambda: p.create("x", 4 * MiB).close())
        os.unlink(os.path.join(d, "filler"))
        case("after", lambda: p.create("x", 4 * MiB).close() or "created")
""")


def _namespace_ok() -> str | None:
    """None when a private mount namespace with a tmpfs can be made here, else why not."""
    if shutil.which("unshare") is None:
        return "no unshare(1) on this machine"
    r = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=1M tmpfs /mnt"],
                       capture_output=True, text=True, timeout=30)
    return None if r.returncode == 0 else f"cannot mount a tmpfs in a mount namespace: {r.stderr}"


def test_a_full_filesystem_is_a_typed_error_not_SIGBUS_on_a_real_8M_tmpfs(tmp_path):
    why = _namespace_ok()
    if why:
        pytest.skip(why)
    script = tmp_path / "scenario.py"
    script.write_text(SCENARIO)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    r = subprocess.run(["unshare", "-m", "sh", "-c", 'mount -t tmpfs -o size=8M tmpfs "$1" && '
                        'exec "$2" "$3" "$1"', "sh", str(mnt), sys.executable, str(script)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"rc {r.returncode} (-7/135: SIGBUS)\n{r.stdout}\n{r.stderr}"
    lines = dict(line.split(" ", 1) for line in r.stdout.splitlines())
    # made whole: the filler got only what the pool left; both hosts use it freely
    assert lines["reserved"] == "ok created", r.stdout
    # overcommitted: the metadata was reserved when made, a new host attaches
    assert lines["attach"].startswith("ok"), r.stdout
    # the extents the object needs are not there: a typed error naming the pool
    assert lines["sparse"].startswith(f"PoolNoSpaceError {errno.ENOSPC}"), r.stdout
    assert str(mnt / "cxlkit-b") in lines["sparse"] and "overcommit" in lines["sparse"]
    # the claim was withdrawn: once there is room the same create succeeds
    assert lines["after"] == "ok created", r.stdout


def test_a_pool_file_is_reserved_whole_when_made(pool_path):
    with cxlkit.Pool(pool_path, size=8 * MiB, host_id=0):
        pass
    assert os.stat(pool_path).st_blocks * 512 >= 8 * MiB


def test_an_overcommitted_pool_file_reserves_only_its_metadata(pool_path):
    with cxlkit.Pool(pool_path, size=64 * MiB, host_id=0, overcommit=True) as p:
        data_off = p.stat().data_offset
        held = os.stat(pool_path).st_blocks * 512
        assert data_off <= held < 64 * MiB
        p.create("x", 4 * MiB).close()  # its extents are reserved as they are claimed
        assert os.stat(pool_path).st_blocks * 512 >= held + 4 * MiB


def test_no_room_when_made_is_PoolNoSpaceError_and_leaves_nothing(pool_path):
    _native.fault_inject("fallocate", 1, errno.ENOSPC)
    with pytest.raises(cxlkit.PoolNoSpaceError) as ei:
        cxlkit.Pool(pool_path, size=8 * MiB, host_id=0)
    assert pool_path in str(ei.value)
    assert not [p for p in os.listdir("/dev/shm") if p.startswith(os.path.basename(pool_path))]


def test_no_room_for_a_claimed_extent_is_PoolNoSpaceError_and_the_claim_is_withdrawn(pool_path):
    with cxlkit.Pool(pool_path, size=16 * MiB, host_id=0, overcommit=True) as p:
        _native.fault_inject("fallocate", 1, errno.ENOSPC)
        with pytest.raises(cxlkit.PoolNoSpaceError) as ei:
            p.create("x", 4 * MiB)
        assert ei.value.errno == errno.ENOSPC and pool_path in str(ei.value)
        assert "x" not in p and p.stat().extents_held == 0
        p.create("x", 4 * MiB).close()
        assert p.fsck(repair=False).clean


def test_no_room_for_the_metadata_of_a_sparse_pool_fails_the_open_typed(pool_path):
    cxlkit.Pool(pool_path, size=8 * MiB, host_id=0, overcommit=True).close()
    _native.fault_inject("fallocate", 1, errno.ENOSPC)
    with pytest.raises(cxlkit.PoolNoSpaceError, match="metadata") as ei:
        cxlkit.Pool(pool_path, host_id=1)
    assert pool_path in str(ei.value)
    with cxlkit.Pool(pool_path, host_id=1):
        pass
