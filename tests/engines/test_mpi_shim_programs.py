"""Unmodified MPI programs of three kinds under the PMPI shim, each MPI installed:
- Fortran (tests/mpi/p2p_check.f90, built with the MPI's mpif90): MPICH's Fortran library
  calls the C MPI_* the shim defines; Open MPI's calls PMPI_* and is taken over by
  native/mpi/fortran.c. Same transcript natively, under the shim and with the world on MPI
  but its dup and split through the pool; the counters show every rank's pool traffic.
- Debian's NetPIPE (NPmpich2, NPopenmpi) in its integrity mode (-i: every message's bytes
  checked), with preposted receives (-a), synchronous sends (-S) and MPI_ANY_SOURCE (-z).
- mpi4py (build/mpi4py, `make mpi4py-env`): tests/mpi/mpi4py_p2p.py, numpy buffers and
  pickled objects. mpi4py asks for MPI_THREAD_MULTIPLE by default, which turns the shim off
  (loudly; results unchanged); MPI4PY_RC_THREAD_LEVEL=serialized routes it.
Under CXLKIT_REQUIRE_MPI_PROGRAMS=1 (`make test-mpi-shim`) a missing compiler, NetPIPE or
mpi4py fails instead of skipping."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from cxlkit import _native
from mpi_shim_build import build_shim

REPO = Path(__file__).resolve().parents[2]
MPIS = {"mpich": ("mpicc.mpich", "mpiexec.mpich", "mpif90.mpich", "NPmpich2"),
        "openmpi": ("mpicc.openmpi", "mpiexec.openmpi", "mpif90.openmpi", "NPopenmpi")}
INSTALLED = [m for m, t in MPIS.items() if shutil.which(t[0]) and shutil.which(t[1])]
if not INSTALLED:
    pytest.skip("needs MPICH or Open MPI with their compilers (make mpi-deps installs both)",
                allow_module_level=True)
MPI4PY_DIR = Path(os.environ.get("CXLKIT_MPI4PY_DIR", REPO / "build" / "mpi4py"))
COUNTERS = re.compile(r"cxlkit-mpi: rank (\d+): (on|off): pool (\d+) sends \d+ B, (\d+) receives")


def need(what: str, ok: bool) -> None:
    if ok:
        return
    why = f"{what} is not installed (make mpi-deps / make mpi4py-env install it)"
    if os.environ.get("CXLKIT_REQUIRE_MPI_PROGRAMS") == "1":
        pytest.fail(why)
    pytest.skip(why)


@pytest.fixture(scope="module")
def shims(tmp_path_factory):
    """The shim of every installed MPI against the installed libcxlkit."""
    out = tmp_path_factory.mktemp("shim")
    return {mpi: build_shim(MPIS[mpi][0], out, mpi) for mpi in INSTALLED}


def run(mpi: str, n: int, argv: list[str], shim: Path | None = None, **env: str):
    launch = [MPIS[mpi][1], "-n", str(n)]
    if mpi == "openmpi":
        launch[1:1] = ["--oversubscribe", "--mca", "pml", "ob1", "--mca", "btl", "self,vader"]
    e = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", **env)
    e.pop("LD_PRELOAD", None)
    if shim:
        e["LD_PRELOAD"] = str(shim)
        # every rank a host of its own: each peer through the pool (on one real host every
        # peer would stay on the MPI's own path)
        e.setdefault("CXLKIT_MPI_HOSTS", "rank")
        e.setdefault("CXLKIT_MPI_STATS", "1")
    return subprocess.run(launch + argv, env=e, capture_output=True, text=True, timeout=180)


def assert_routed(r, n: int) -> None:
    assert r.returncode == 0, r.stdout + r.stderr
    # a program's own stderr may share a line with a counter line: search, not split
    counters = COUNTERS.findall(r.stderr)
    assert sorted(int(c[0]) for c in counters) == list(range(n)), r.stderr
    assert all(on == "on" and int(sends) + int(recvs) > 0
               for _, on, sends, recvs in counters), r.stderr


@pytest.mark.slow
@pytest.mark.parametrize("mpi", INSTALLED)
def test_fortran_program_same_transcript_and_routed_through_the_pool(shims, mpi, tmp_path):
    fc = MPIS[mpi][2]
    need(fc, shutil.which(fc) is not None and shutil.which("gfortran") is not None)
    prog = tmp_path / f"p2p_check_f_{mpi}"
    subprocess.run([fc, "-O1", str(REPO / "tests" / "mpi" / "p2p_check.f90"), "-o", str(prog)],
                   check=True, cwd=tmp_path)
    native = run(mpi, 4, [str(prog)])
    assert native.returncode == 0, native.stdout + native.stderr
    assert native.stdout.strip().endswith("p2p_check.f90: all passed")
    assert "reversed split: persistent and request_free checked" in native.stdout
    shim = run(mpi, 4, [str(prog)], shims[mpi], CXLKIT_MPI_VERBOSE="1")
    assert_routed(shim, 4)
    assert "cxlkit-mpi: on: " in shim.stderr
    assert shim.stdout == native.stdout
    # the world on MPI, its dup and split through the pool: the Fortran calls take both routes
    mixed = run(mpi, 4, [str(prog)], shims[mpi], CXLKIT_MPI_COMMS="derived")
    assert_routed(mixed, 4)
    assert mixed.stdout == native.stdout
    not_routed = [int(m) for m in re.findall(r"'s path (\d+) sends",
                                              mixed.stderr)]
    assert len(not_routed) == 4 and all(k > 0 for k in not_routed), mixed.stderr


NETPIPE_MODES = {"preposted": ["-a"], "synchronous": ["-S"], "any-source": ["-z"]}


@pytest.mark.slow
@pytest.mark.parametrize("mode", list(NETPIPE_MODES))
@pytest.mark.parametrize("mpi", INSTALLED)
def test_netpipe_integrity_check_natively_and_under_the_shim(shims, mpi, mode, tmp_path):
    np_bin = MPIS[mpi][3]
    need(np_bin, shutil.which(np_bin) is not None)
    if mpi == "mpich" and mode == "any-source":
        pytest.skip("NetPIPE 3.7.2's -z hangs under Debian's MPICH 4.0 without the shim too "
                    "(after its first size); Open MPI runs it")
    argv = [np_bin, "-i", "-n", "3", "-u", "1048576", *NETPIPE_MODES[mode]]
    results = {}
    for how, shim in (("native", None), ("shim", shims[mpi])):
        r = run(mpi, 2, argv + ["-o", str(tmp_path / f"np.{how}")], shim)
        assert r.returncode == 0, r.stdout + r.stderr
        # NetPIPE writes a line per size to its output file (rank 0's own) and its verdicts
        # to stderr, which mpiexec merges from both ranks: count the verdicts there
        sizes = [ln.split()[0] for ln in (tmp_path / f"np.{how}").read_text().splitlines()
                 if ln.strip()]
        assert r.stderr.count("Integrity check passed") == len(sizes), r.stderr
        assert "fail" not in (r.stdout + r.stderr).lower()
        results[how] = sizes
        if shim:
            assert_routed(r, 2)
    # every size from 1 B to 1 MiB (with NetPIPE's +-3 B perturbations) checked both ways
    assert len(results["native"]) >= 30
    assert results["shim"] == results["native"]
    assert max(int(s) for s in results["shim"]) > 786_000


def mpi4py_run(mpi: str, shim: Path | None, **env: str):
    libs = MPI4PY_DIR.parent / "mpi4py-lib"
    pypath = os.pathsep.join([str(MPI4PY_DIR), os.environ.get("PYTHONPATH", "")])
    ld = os.pathsep.join([str(libs), os.environ.get("LD_LIBRARY_PATH", "")])
    return run(mpi, 3, [os.sys.executable, "-m", "mpi4py",
                        str(REPO / "tests" / "mpi" / "mpi4py_p2p.py")], shim,
               MPI4PY_MPIABI=mpi, PYTHONPATH=pypath, LD_LIBRARY_PATH=ld, **env)


@pytest.mark.slow
@pytest.mark.parametrize("mpi", INSTALLED)
def test_mpi4py_numpy_and_pickled_messages_same_with_and_without_the_shim(shims, mpi):
    need(f"mpi4py in {MPI4PY_DIR}", (MPI4PY_DIR / "mpi4py" / "__init__.py").exists())
    native = mpi4py_run(mpi, None)
    assert native.returncode == 0, native.stdout + native.stderr
    assert "mpi4py_p2p: all passed on 3 ranks" in native.stdout
    routed = mpi4py_run(mpi, shims[mpi], MPI4PY_RC_THREAD_LEVEL="serialized")
    assert_routed(routed, 3)
    assert routed.stdout == native.stdout
    # mpi4py's default thread level (multiple): the shim steps aside and says why
    default = mpi4py_run(mpi, shims[mpi])
    assert default.returncode == 0, default.stderr
    assert default.stdout == native.stdout
    assert "cxlkit-mpi: off: MPI_THREAD_MULTIPLE" in default.stderr
    assert default.stderr.count(": off: pool 0 sends") == 3


HANDLES_C = r"""
#include <mpi.h>
#include <stdio.h>
/* Open MPI's Fortran binding, called from C as a Fortran program would */
void mpi_wait_(MPI_Fint *req, MPI_Fint *status, MPI_Fint *ierr);
int main(int argc, char **argv) {
    int rank, v = 0, w = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Request r;
    if (rank == 0) { v = 5; MPI_Isend(&v, 1, MPI_INT, 1, 1, MPI_COMM_WORLD, &r); }
    else MPI_Irecv(&w, 1, MPI_INT, 0, 1, MPI_COMM_WORLD, &r);
    MPI_Fint f = MPI_Request_c2f(r), f0 = f;
    MPI_Request back = MPI_Request_f2c(f);
    MPI_Fint ierr = -1;
    mpi_wait_(&f, MPI_F_STATUS_IGNORE, &ierr);     /* waits on the request through Fortran */
    MPI_Fint stale = MPI_Request_c2f(back), ierr2 = -1;  /* back: the completed request */
    mpi_wait_(&stale, MPI_F_STATUS_IGNORE, &ierr2); /* its slot is gone: a user's error */
    printf("rank %d: f %s, round trip %d, wait %d, after %d, value %d, stale wait %s\n", rank,
           f0 >= 0x40000000 ? "shim" : "mpi", back == r, ierr, f == MPI_Request_c2f(MPI_REQUEST_NULL),
           rank ? w : v, ierr2 == MPI_ERR_REQUEST ? "MPI_ERR_REQUEST" : "other");
    MPI_Finalize();
    return 0;
}
"""


@pytest.mark.skipif("openmpi" not in INSTALLED, reason="Open MPI is not installed")
def test_open_mpi_fortran_request_handles_of_the_shim(shims, tmp_path):
    """The shim's requests get Fortran integers of their own (Open MPI's c2f would write into
    the shim's table): c2f / f2c round-trip, a Fortran wait completes the request, a stale
    Fortran handle is MPI_ERR_REQUEST, not a lookup of a freed slot."""
    (tmp_path / "handles.c").write_text(HANDLES_C)
    prog = tmp_path / "handles"
    subprocess.run(["mpicc.openmpi", str(tmp_path / "handles.c"), "-lmpi_mpifh", "-o", str(prog)],
                   check=True)
    r = run("openmpi", 2, [str(prog)], shims["openmpi"])
    assert_routed(r, 2)
    for rank in (0, 1):
        assert (f"rank {rank}: f shim, round trip 1, wait 0, after 1, value 5, "
                "stale wait MPI_ERR_REQUEST") in r.stdout, r.stdout + r.stderr


ABI_DIR = Path(os.environ.get("CXLKIT_MPICH_ABI_DIR", REPO / "build" / "mpich-abi"))


def test_mpi5_standard_abi_build_same_transcript_through_the_pool(tmp_path):
    """The shim compiled against mpi_abi.h (the MPI-5 standard ABI, MPICH 5's libmpi_abi.so
    from the mpich wheel, `make mpi-shim-abi`) runs tests/mpi/p2p_check.c built for the ABI:
    the same transcript natively and through the pool."""
    unavailable = ABI_DIR.parent / "mpich-abi.unavailable"
    if unavailable.exists():
        pytest.skip(unavailable.read_text().strip())
    need(f"the mpich wheel (MPI-5 ABI) in {ABI_DIR}",
         (ABI_DIR / "include" / "mpi_abi.h").exists() and (ABI_DIR / "bin" / "mpiexec").exists())
    inc, lib = ABI_DIR / "abi-include", ABI_DIR / "lib"
    libdir = Path(_native.__file__).parent
    shim, prog = tmp_path / "libcxlkit_mpi_abi.so", tmp_path / "p2p_check_abi"
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", f"-I{REPO / 'include'}", f"-I{REPO / 'native'}",
                    f"-I{inc}", *sorted(str(p) for p in (REPO / "native" / "mpi").glob("*.c")),
                    f"-L{libdir}", "-lcxlkit", f"-Wl,-rpath,{libdir}", "-o", str(shim)], check=True)
    subprocess.run(["cc", "-O1", f"-I{inc}", str(REPO / "tests" / "mpi" / "p2p_check.c"),
                    f"-L{lib}", "-lmpi_abi", f"-Wl,-rpath,{lib}", "-o", str(prog)], check=True)
    env = dict(os.environ, PATH=f"{ABI_DIR / 'bin'}{os.pathsep}{os.environ['PATH']}")
    env.pop("LD_PRELOAD", None)
    launch = [str(ABI_DIR / "bin" / "mpiexec"), "-n", "3", str(prog)]
    native = subprocess.run(launch, env=env, capture_output=True, text=True, timeout=180)
    assert native.returncode == 0, native.stdout + native.stderr
    assert "p2p_check: all passed" in native.stdout
    routed = subprocess.run(launch, env=dict(env, LD_PRELOAD=str(shim), CXLKIT_MPI_STATS="1",
                                             CXLKIT_MPI_HOSTS="rank",
                                             CXLKIT_MPI_VERBOSE="1"),
                            capture_output=True, text=True, timeout=180)
    assert_routed(routed, 3)
    assert "cxlkit-mpi: on: MPI (standard ABI), 3 ranks" in routed.stderr
    assert routed.stdout == native.stdout
