"""The PMPI shim (native/mpi, libcxlkit_mpi_<mpi>.so) in the real MPIs: tests/mpi/p2p_check.c
gives the same transcript natively and under LD_PRELOAD with every rank's messages through
the pool; MPI_THREAD_MULTIPLE and a pool that cannot be opened turn routing off loudly while
the program still runs on MPI; the default pool (a memfd of rank 0) leaves no file behind. Each installed MPI
(MPICH, Open MPI) is tested; the whole matrix with the OSU programs is `make test-mpi-shim`."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from cxlkit import _native

REPO = Path(__file__).resolve().parent.parent
MPIS = {"mpich": ("mpicc.mpich", "mpiexec.mpich"), "openmpi": ("mpicc.openmpi", "mpiexec.openmpi")}
INSTALLED = [m for m, (cc, run) in MPIS.items() if shutil.which(cc) and shutil.which(run)]
if not INSTALLED:
    pytest.skip("needs MPICH or Open MPI with their compilers (make mpi-deps installs both)",
                allow_module_level=True)

THREADS_C = r"""
#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv) {
    int provided = -1, rank, v = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) { v = 41; MPI_Send(&v, 1, MPI_INT, 1, 3, MPI_COMM_WORLD); }
    else if (rank == 1) { MPI_Recv(&v, 1, MPI_INT, 0, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                          printf("got %d provided %d\n", v + 1, provided); }
    MPI_Finalize();
    return 0;
}
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The shim and the check program of every installed MPI, against the installed libcxlkit."""
    out = tmp_path_factory.mktemp("mpi")
    libdir = Path(_native.__file__).parent
    srcs = sorted(str(p) for p in (REPO / "native" / "mpi").glob("*.c"))
    progs = {}
    for mpi in INSTALLED:
        cc = MPIS[mpi][0]
        shim = out / f"libcxlkit_mpi_{mpi}.so"
        subprocess.run([cc, "-O2", "-shared", "-fPIC", f"-I{REPO / 'include'}",
                        f"-I{REPO / 'native'}", *srcs, f"-L{libdir}", "-lcxlkit",
                        f"-Wl,-rpath,{libdir}", "-o", str(shim)], check=True)
        check = out / f"p2p_check_{mpi}"
        subprocess.run([cc, "-O1", str(REPO / "tests" / "mpi" / "p2p_check.c"), "-o", str(check)],
                       check=True)
        (out / "threads.c").write_text(THREADS_C)
        threads = out / f"threads_{mpi}"
        subprocess.run([cc, str(out / "threads.c"), "-o", str(threads)], check=True)
        progs[mpi] = {"shim": shim, "check": check, "threads": threads}
    return progs


def run(mpi: str, n: int, prog: Path, shim: Path | None = None, **env: str):
    launch = [MPIS[mpi][1], "-n", str(n)]
    if mpi == "openmpi":
        launch[1:1] = ["--oversubscribe", "--mca", "btl", "self,vader"]
    e = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", **env)
    if shim:
        e["LD_PRELOAD"] = str(shim)
    return subprocess.run(launch + [str(prog)], env=e, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("mpi", INSTALLED)
def test_p2p_check_same_transcript_natively_and_through_the_pool(built, mpi):
    native = run(mpi, 3, built[mpi]["check"])
    assert native.returncode == 0, native.stderr
    shim = run(mpi, 3, built[mpi]["check"], built[mpi]["shim"], CXLKIT_MPI_STATS="1",
               CXLKIT_MPI_VERBOSE="1")
    assert shim.returncode == 0, shim.stderr
    assert shim.stdout == native.stdout
    assert "p2p_check: all passed" in shim.stdout
    assert "cxlkit-mpi: on: " in shim.stderr
    routed = [ln for ln in shim.stderr.splitlines() if ": on: pool " in ln]
    assert len(routed) == 3
    assert all(" pool 0 sends" not in ln for ln in routed)


@pytest.mark.parametrize("mpi", INSTALLED)
def test_thread_multiple_turns_routing_off_and_says_so(built, mpi):
    r = run(mpi, 2, built[mpi]["threads"], built[mpi]["shim"], CXLKIT_MPI_STATS="1")
    assert r.returncode == 0, r.stderr
    assert "got 42" in r.stdout
    assert "cxlkit-mpi: off: MPI_THREAD_MULTIPLE" in r.stderr
    assert r.stderr.count(": off: pool 0 sends") == 2


@pytest.mark.parametrize("mpi", INSTALLED)
def test_pool_that_cannot_be_opened_falls_back_to_mpi_loudly(built, mpi, tmp_path):
    bad = tmp_path / "no-such-dir" / "pool"
    r = run(mpi, 3, built[mpi]["check"], built[mpi]["shim"], CXLKIT_MPI_POOL=str(bad),
            CXLKIT_MPI_STATS="1")
    assert r.returncode == 0, r.stderr
    assert "p2p_check: all passed" in r.stdout
    assert f"cxlkit-mpi: off: pool {bad}: No such file or directory" in r.stderr
    assert r.stderr.count(": off: pool 0 sends") == 3


@pytest.mark.parametrize("mpi", INSTALLED[:1])
def test_default_pool_is_anonymous_memory_and_an_explicit_pool_file_is_kept(built, mpi, tmp_path):
    before = set(Path("/dev/shm").iterdir())
    r = run(mpi, 3, built[mpi]["check"], built[mpi]["shim"])
    assert r.returncode == 0, r.stderr
    assert not [p for p in set(Path("/dev/shm").iterdir()) - before if "mpi" in p.name]
    pool = tmp_path / "pool"
    r = run(mpi, 3, built[mpi]["check"], built[mpi]["shim"], CXLKIT_MPI_POOL=str(pool),
            CXLKIT_MPI_VERBOSE="1", CXLKIT_MPI_POOL_MB="64")
    assert r.returncode == 0, r.stderr
    assert f"pool {pool} (coherence host)" in r.stderr
    assert pool.exists()
