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

from mpi_shim_build import build_shim

REPO = Path(__file__).resolve().parents[2]
MPIS = {"mpich": ("mpicc.mpich", "mpiexec.mpich"), "openmpi": ("mpicc.openmpi", "mpiexec.openmpi")}
INSTALLED = [m for m, (cc, run) in MPIS.items() if shutil.which(cc) and shutil.which(run)]
if not INSTALLED:
    pytest.skip("needs MPICH or Open MPI with their compilers (make mpi-deps installs both)",
                allow_module_level=True)

# A window whose info leaves it to MPI takes any op; a pool window refuses MPI_PROD with
# MPI_ERR_OP (MPI_ERRORS_RETURN) and keeps its data; both give the same sums.
RMA_OPS_C = r"""
#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv) {
    int rank, size, *a, *b, two = 2, one = 1, cls = -1;
    MPI_Win wa, wb;
    MPI_Info info;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Info_create(&info);
    MPI_Info_set(info, "cxlkit_rma", "mpi");
    MPI_Win_allocate(sizeof(int), sizeof(int), info, MPI_COMM_WORLD, &a, &wa);
    MPI_Win_allocate(sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &b, &wb);
    MPI_Win_set_errhandler(wb, MPI_ERRORS_RETURN);
    *a = 1, *b = 1;
    MPI_Win_fence(0, wa), MPI_Win_fence(0, wb);
    MPI_Accumulate(&two, 1, MPI_INT, 0, 0, 1, MPI_INT, MPI_PROD, wa);
    int rc = MPI_Accumulate(&two, 1, MPI_INT, 0, 0, 1, MPI_INT, MPI_PROD, wb);
    MPI_Accumulate(&one, 1, MPI_INT, 0, 0, 1, MPI_INT, MPI_SUM, wb);
    MPI_Win_fence(0, wa), MPI_Win_fence(0, wb);
    MPI_Error_class(rc, &cls);
    MPI_Group wg, none;  /* an epoch with nobody: the engine's post/start need a member */
    MPI_Comm_group(MPI_COMM_WORLD, &wg);
    MPI_Group_incl(wg, 0, NULL, &none);
    int flag = 0, e = MPI_Win_post(none, 0, wb) | MPI_Win_start(none, 0, wb);
    e |= MPI_Win_complete(wb) | MPI_Win_test(wb, &flag);
    if (rank == 0) printf("empty pscw %s\n", e == MPI_SUCCESS && flag ? "ok" : "failed");
    if (rank == 0) printf("prod %d sum %d pool prod %s\n", *a, *b,
                          rc == MPI_SUCCESS ? "ok" : cls == MPI_ERR_OP ? "MPI_ERR_OP" : "other");
    /* Win_test says false while rank 1 has not completed (it completes only after a message
     * rank 0 sends after that test), then true. Shim only: MPICH 4.0.2 natively hangs here
     * now and then (ranks 2.. go on to MPI_Win_free meanwhile) */
    MPI_Group g0, g1;
    int r0 = 0, r1 = 1, go = 1, first = -1;
    MPI_Group_incl(wg, 1, &r0, &g0), MPI_Group_incl(wg, 1, &r1, &g1);
    *b = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        MPI_Win_post(g1, 0, wb);
        MPI_Win_test(wb, &first);
        MPI_Send(&go, 1, MPI_INT, 1, 5, MPI_COMM_WORLD);
        flag = 0;
        while (!flag) MPI_Win_test(wb, &flag);
        printf("win_test %d then %d, got %d\n", first, flag, *b);
    } else if (rank == 1) {
        MPI_Win_start(g0, 0, wb);
        MPI_Accumulate(&two, 1, MPI_INT, 0, 0, 1, MPI_INT, MPI_SUM, wb);
        MPI_Recv(&go, 1, MPI_INT, 0, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Win_complete(wb);
    }
    MPI_Group_free(&g0), MPI_Group_free(&g1), MPI_Group_free(&none), MPI_Group_free(&wg);
    MPI_Win_free(&wa), MPI_Win_free(&wb);
    MPI_Info_free(&info);
    MPI_Finalize();
    return 0;
}
"""

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


# MPI_Alloc_mem buffers (one copy): rank 0 sends 1 MiB from one to rank 1, which
# receives into one and into malloc'd memory; the same transcript natively and under the shim.
ALLOC_MEM_C = r"""
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
    int rank, n = 1 << 20, bad = 0;
    unsigned char *a, *b, *h = malloc(1 << 20);
    MPI_Request rq;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Alloc_mem(n, MPI_INFO_NULL, &a);
    MPI_Alloc_mem(n, MPI_INFO_NULL, &b);
    if (rank == 0) {
        for (int i = 0; i < n; ++i) a[i] = (unsigned char)(i * 7 + 3);
        MPI_Isend(a, n, MPI_BYTE, 1, 1, MPI_COMM_WORLD, &rq);
        MPI_Wait(&rq, MPI_STATUS_IGNORE);
        MPI_Send(a + 4096, n - 4096, MPI_BYTE, 1, 2, MPI_COMM_WORLD);
    } else if (rank == 1) {
        MPI_Recv(b, n, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Recv(h, n, MPI_BYTE, 0, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        for (int i = 0; i < n; ++i) bad += b[i] != (unsigned char)(i * 7 + 3);
        for (int i = 0; i < n - 4096; ++i) bad += h[i] != (unsigned char)((i + 4096) * 7 + 3);
        printf("alloc_mem: %d wrong bytes\n", bad);
    }
    MPI_Free_mem(a);
    MPI_Free_mem(b);
    free(h);
    MPI_Finalize();
    return 0;
}
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The shim and the check program of every installed MPI, against the installed libcxlkit."""
    out = tmp_path_factory.mktemp("mpi")
    progs = {}
    for mpi in INSTALLED:
        cc = MPIS[mpi][0]
        shim = build_shim(cc, out, mpi)
        check = out / f"p2p_check_{mpi}"
        subprocess.run([cc, "-O1", str(REPO / "tests" / "mpi" / "p2p_check.c"), "-o", str(check)],
                       check=True)
        (out / "threads.c").write_text(THREADS_C)
        threads = out / f"threads_{mpi}"
        subprocess.run([cc, str(out / "threads.c"), "-o", str(threads)], check=True)
        rma = out / f"rma_check_{mpi}"
        subprocess.run([cc, "-O1", str(REPO / "tests" / "mpi" / "rma_check.c"), "-o", str(rma)],
                       check=True)
        (out / "rma_ops.c").write_text(RMA_OPS_C)
        rma_ops = out / f"rma_ops_{mpi}"
        subprocess.run([cc, str(out / "rma_ops.c"), "-o", str(rma_ops)], check=True)
        (out / "alloc_mem.c").write_text(ALLOC_MEM_C)
        alloc_mem = out / f"alloc_mem_{mpi}"
        subprocess.run([cc, str(out / "alloc_mem.c"), "-o", str(alloc_mem)], check=True)
        progs[mpi] = {"shim": shim, "check": check, "threads": threads, "rma": rma,
                      "rma_ops": rma_ops, "alloc_mem": alloc_mem}
    return progs


def run(mpi: str, n: int, prog: Path, shim: Path | None = None, osc: bool = False, **env: str):
    launch = [MPIS[mpi][1], "-n", str(n)]
    if mpi == "openmpi":
        launch[1:1] = ["--oversubscribe", "--mca", "btl", "self,vader"]
        if osc:  # Open MPI 4.1's osc rdma crashes natively in MPI_Compare_and_swap over vader
            launch[1:1] = ["--mca", "osc", "sm,pt2pt"]
    e = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", **env)
    if shim:
        e["LD_PRELOAD"] = str(shim)
        # every rank a host of its own: each peer through the pool (on one real host every
        # peer would stay on the MPI's own path)
        e.setdefault("CXLKIT_MPI_HOSTS", "rank")
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


@pytest.mark.parametrize("mpi", INSTALLED[:1])
def test_malformed_shim_variable_turns_routing_off_naming_it(built, mpi):
    # refused, never read as its default (1024 MiB a rank)
    r = run(mpi, 3, built[mpi]["check"], built[mpi]["shim"], CXLKIT_MPI_POOL_MB="lots")
    assert r.returncode == 0, r.stderr
    assert "p2p_check: all passed" in r.stdout
    assert ("cxlkit-mpi: off: CXLKIT_MPI_POOL_MB=lots: expected decimal digits within "
            "1..1073741824") in r.stderr


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


@pytest.mark.parametrize("mpi", INSTALLED)
def test_rma_check_same_transcript_natively_and_through_the_pool(built, mpi):
    native = run(mpi, 3, built[mpi]["rma"], osc=True)
    assert native.returncode == 0, native.stderr
    shim = run(mpi, 3, built[mpi]["rma"], built[mpi]["shim"], osc=True, CXLKIT_MPI_STATS="1")
    assert shim.returncode == 0, shim.stderr
    assert shim.stdout == native.stdout
    assert "rma_check: all passed" in shim.stdout
    rma = [ln for ln in shim.stderr.splitlines() if ": rma: pool " in ln]
    assert len(rma) == 3
    # 9 windows of MPI_Win_allocate on the pool; the half-ranks one, MPI_Win_create,
    # _allocate_shared and _create_dynamic on MPI
    assert all(" rma: pool 9 windows, " in ln and " MPI 4 windows, " in ln for ln in rma)
    assert all(" 0 puts " not in ln.split("; MPI")[0] for ln in rma)


@pytest.mark.parametrize("mpi", INSTALLED)
def test_rma_access_past_the_window_end_is_mpi_err_rma_range(built, mpi):
    r = run(mpi, 2, built[mpi]["rma"], built[mpi]["shim"], osc=True, RMA_CHECK_BEYOND="1")
    assert r.returncode == 0, r.stderr
    assert ("out of range: put of 4 ints at 62 of 64: MPI_ERR_RMA_RANGE; "
            "get at 64: MPI_ERR_RMA_RANGE") in r.stdout


@pytest.mark.parametrize("mpi", INSTALLED)
def test_rma_unsupported_op_refused_info_key_leaves_window_to_mpi_empty_pscw(built, mpi):
    # MPI's window: 1 * 2 * 2 * 2; the pool window: PROD refused, 1 + 1 + 1 + 1
    r = run(mpi, 3, built[mpi]["rma_ops"], built[mpi]["shim"], osc=True, CXLKIT_MPI_STATS="1")
    assert r.returncode == 0, r.stderr
    assert "prod 8 sum 4 pool prod MPI_ERR_OP" in r.stdout
    assert "empty pscw ok" in r.stdout
    assert "win_test 0 then 1, got 2" in r.stdout
    assert "create this window with info cxlkit_rma=mpi" in r.stderr
    assert r.stderr.count(": rma: pool 1 windows, ") == 3
    assert r.stderr.count(" MPI 1 windows, ") == 3


@pytest.mark.parametrize("mpi", INSTALLED)
def test_alloc_mem_buffers_come_from_the_pool_and_large_sends_take_one_copy(built, mpi):
    native = run(mpi, 2, built[mpi]["alloc_mem"])
    assert native.returncode == 0, native.stderr
    assert "alloc_mem: 0 wrong bytes" in native.stdout
    r = run(mpi, 2, built[mpi]["alloc_mem"], built[mpi]["shim"], CXLKIT_MPI_STATS="1")
    assert r.returncode == 0, r.stderr
    assert r.stdout == native.stdout
    assert r.stderr.count(": pool memory: 2 MPI_Alloc_mem blocks (0 from the MPI") == 2
    assert "rank 0: pool memory: 2 MPI_Alloc_mem blocks (0 from the MPI: partition full), " \
           "2 one-copy sends" in r.stderr
