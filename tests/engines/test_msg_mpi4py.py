"""cxlkit.msg.Comm.from_mpi4py under the real launchers: MPICH's and Open MPI's mpiexec each
start ranks that bootstrap a cxlkit job from MPI.COMM_WORLD (tests/msg_mpi4py_rank.py).
mpi4py lives in the MPI engine environment (mk/mpi.mk: `make mpi4py-env`, a pip --target
folder, build/mpi4py, apart from the core dependencies); this test skips only when that
folder holds no mpi4py, and fails instead under CXLKIT_REQUIRE_MPI4PY=1 (`make test-mpi`)
unless pip could not install it (build/mpi4py.unavailable says why). Fast failure cases without a launcher use a stand-in communicator."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import cxlkit
from cxlkit import msg

from msg_ranks import make_pool

ROOT = Path(__file__).resolve().parents[2]
MPI4PY_DIR = Path(os.environ.get("CXLKIT_MPI4PY_DIR", ROOT / "build" / "mpi4py"))
# Debian's MPICH names its library libmpich.so.12; mpi4py's MPICH build loads it as
# libmpi.so.12, a link mk/mpi.mk makes in this folder.
MPICH_LIBS = MPI4PY_DIR.parent / "mpi4py-lib"
LAUNCHERS = {
    "mpich": (["mpiexec.mpich"], {"MPI4PY_MPIABI": "mpich"}),
    "openmpi": (["mpiexec.openmpi", "--allow-run-as-root", "--oversubscribe"],
                {"MPI4PY_MPIABI": "openmpi", "OMPI_ALLOW_RUN_AS_ROOT": "1",
                 "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}),
}


def _env(extra: dict[str, str]) -> dict[str, str]:
    env = dict(os.environ, **extra)
    env["PYTHONPATH"] = os.pathsep.join([str(MPI4PY_DIR), str(ROOT / "tests"),
                                         env.get("PYTHONPATH", "")])
    if MPICH_LIBS.is_dir():
        env["LD_LIBRARY_PATH"] = os.pathsep.join([str(MPICH_LIBS),
                                                  env.get("LD_LIBRARY_PATH", "")])
    return env


def _need(mpi: str) -> list[str]:
    cmd, extra = LAUNCHERS[mpi]
    why = None
    if shutil.which(cmd[0]) is None:
        why = f"{cmd[0]} not installed (make mpi-deps installs MPICH and Open MPI)"
    elif (MPI4PY_DIR.parent / "mpi4py.unavailable").exists():
        pytest.skip((MPI4PY_DIR.parent / "mpi4py.unavailable").read_text().strip())
    elif not (MPI4PY_DIR / "mpi4py" / "__init__.py").exists():
        why = f"mpi4py is not installed in {MPI4PY_DIR} (make mpi4py-env)"
    if why:
        if os.environ.get("CXLKIT_REQUIRE_MPI4PY") == "1":
            pytest.fail(why)
        pytest.skip(why)
    return cmd


@pytest.mark.slow
@pytest.mark.parametrize("hosts", ["rank", "machine"])
@pytest.mark.parametrize("mpi", ["mpich", "openmpi"])
def test_from_mpi4py_bootstraps_a_job_under_mpiexec(pool_path, mpi, hosts):
    cmd = _need(mpi)
    r = subprocess.run([*cmd, "-n", "2", sys.executable, str(ROOT / "tests" / "msg_mpi4py_rank.py"),
                        pool_path, hosts], env=_env(LAUNCHERS[mpi][1]), capture_output=True,
                       text=True, timeout=180)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    assert "OK rank 0 of 2" in out and "OK rank 1 of 2" in out, out[-3000:]


class _OneRank:
    """A stand-in for an mpi4py communicator of one rank (the launcher-free failure cases)."""

    def __init__(self, uuid_override: str | None = None) -> None:
        self.uuid_override = uuid_override

    def Get_rank(self) -> int:
        return 0

    def Get_size(self) -> int:
        return 1

    def bcast(self, obj, root=0):
        return obj

    def allgather(self, obj):
        if self.uuid_override is None:
            return [obj]
        return [obj, (obj[0], self.uuid_override)]


def test_from_mpi4py_refuses_what_is_not_a_communicator_or_a_pool(pool_path):
    make_pool(pool_path, 2)
    with cxlkit.Pool(pool_path, host_id=0) as pool:
        with pytest.raises(TypeError, match="Get_rank"):
            msg.Comm.from_mpi4py(object(), pool)
        with pytest.raises(TypeError, match="cxlkit.Pool"):
            msg.Comm.from_mpi4py(_OneRank(), pool_path)


def test_from_mpi4py_names_ranks_that_opened_another_pool(pool_path):
    make_pool(pool_path, 2)
    with cxlkit.Pool(pool_path, host_id=0) as pool:
        with pytest.raises(ValueError, match=r"ranks \[1\].*another pool"):
            msg.Comm.from_mpi4py(_OneRank("0" * 32), pool)


def test_from_mpi4py_agrees_on_a_fresh_job_name(pool_path, monkeypatch):
    monkeypatch.delenv("CXLKIT_JOB", raising=False)
    make_pool(pool_path, 2)
    with cxlkit.Pool(pool_path, host_id=0) as pool:
        with msg.Comm.from_mpi4py(_OneRank(), pool) as c:
            assert c.job.startswith("mpi-") and (c.rank, c.size) == (0, 1)
        monkeypatch.setenv("CXLKIT_JOB", "fromenv")
        with msg.Comm.from_mpi4py(_OneRank(), pool, timeout=5) as c:
            assert c.job == "fromenv"
