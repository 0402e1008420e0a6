"""Routes per peer in the PMPI shim (native/mpi/routes.c, anysrc.c, coll.c): on one host every
peer stays on the MPI's own path and the shim routes nothing (collectives straight to the
MPI); with CXLKIT_MPI_HOSTS / CXLKIT_MPI_NOPOOL one machine stands for several hosts, some
sharing the pool and some not, and tests/mpi/routes_check.c (ANY_SOURCE order across routes,
a receive behind a wildcard, probes, sendrecv, collectives) gives the native transcript while
the counters show each route carrying what it should. A shim preloaded into the other MPI's
program says so in one line and exits."""
from __future__ import annotations

import os
import re
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
pytestmark = pytest.mark.slow  # each runs MPI jobs of 4 ranks (4-8 s on a loaded VM)
COUNTERS = re.compile(r"cxlkit-mpi: rank (\d+): (on|off): pool (\d+) sends \d+ B, (\d+) receives"
                      r" \d+ B; [^;]*'s path (\d+) sends, (\d+) receives .*; collectives (\d+)"
                      r" through the pool, (\d+) polled")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("mpi_routes")
    progs = {}
    for mpi in INSTALLED:
        cc = MPIS[mpi][0]
        shim = build_shim(cc, out, mpi)
        check = out / f"routes_check_{mpi}"
        subprocess.run([cc, "-O1", str(REPO / "tests" / "mpi" / "routes_check.c"), "-o",
                        str(check)], check=True)
        progs[mpi] = {"shim": shim, "check": check}
    return progs


def run(mpi: str, n: int, prog: Path, shim: Path | None = None, **env: str):
    launch = [MPIS[mpi][1], "-n", str(n)]
    if mpi == "openmpi":
        launch[1:1] = ["--oversubscribe", "--mca", "pml", "ob1", "--mca", "btl", "self,vader"]
    e = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", **env)
    for k in ("LD_PRELOAD", "CXLKIT_MPI_HOSTS", "CXLKIT_MPI_NOPOOL"):
        if k not in env:
            e.pop(k, None)
    if shim:
        e["LD_PRELOAD"] = str(shim)
        e["CXLKIT_MPI_STATS"] = "1"
    return subprocess.run(launch + [str(prog)], env=e, capture_output=True, text=True,
                          timeout=120)


def counters(r, n: int) -> dict[int, dict[str, int]]:
    """rank -> its counters (pool sends/receives, MPI-path sends/receives, collectives)."""
    got = {}
    for m in COUNTERS.finditer(r.stderr):
        got[int(m[1])] = {"on": m[2] == "on", "pool_s": int(m[3]), "pool_r": int(m[4]),
                          "mpi_s": int(m[5]), "mpi_r": int(m[6]), "coll_pool": int(m[7]),
                          "coll_polled": int(m[8])}
    assert sorted(got) == list(range(n)), r.stderr
    return got


@pytest.fixture(scope="module")
def native(built):
    out = {}
    for mpi in INSTALLED:
        r = run(mpi, 4, built[mpi]["check"])
        assert r.returncode == 0, r.stdout + r.stderr
        assert r.stdout.strip().endswith("routes_check: all passed")
        out[mpi] = r.stdout
    return out


@pytest.mark.parametrize("mpi", INSTALLED)
def test_one_host_every_peer_on_the_mpis_path_and_collectives_straight_to_it(built, native, mpi):
    r = run(mpi, 4, built[mpi]["check"], built[mpi]["shim"], CXLKIT_MPI_VERBOSE="1")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout == native[mpi]
    assert "cxlkit-mpi: off: no two ranks on different hosts share the pool" in r.stderr
    for c in counters(r, 4).values():
        assert not c["on"] and c["pool_s"] == 0 and c["coll_pool"] == 0
        assert c["coll_polled"] == 0  # blocking, as the program called them


@pytest.mark.parametrize("mpi", INSTALLED)
def test_mixed_routes_same_host_pool_and_network_only(built, native, mpi):
    # ranks 0 and 1 share host a; 2 is host b (pool); 3 is host c, which maps no pool
    r = run(mpi, 4, built[mpi]["check"], built[mpi]["shim"], CXLKIT_MPI_HOSTS="a,a,b,c",
            CXLKIT_MPI_NOPOOL="c")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout == native[mpi]
    c = counters(r, 4)
    assert all(x["on"] for x in c.values())
    # 0 and 1 talk to 2 through the pool; to each other and to 3 on the MPI's path
    assert c[2]["pool_s"] > 0 and c[0]["pool_r"] > 0 and c[1]["pool_s"] > 0 and c[1]["pool_r"] > 0
    assert c[0]["mpi_s"] > 0 and c[0]["mpi_r"] > 0
    assert c[3]["pool_s"] == 0 and c[3]["pool_r"] == 0 and c[3]["mpi_s"] > 0
    # a job not all on the pool: its collectives stay the MPI's (polled)
    assert all(x["coll_pool"] == 0 and x["coll_polled"] > 0 for x in c.values())


@pytest.mark.parametrize("mpi", INSTALLED)
def test_two_hosts_sharing_the_pool_collectives_through_it(built, native, mpi):
    # hosts a (ranks 0, 2) and b (1, 3): same-host pairs on the MPI's path, the others pool
    r = run(mpi, 4, built[mpi]["check"], built[mpi]["shim"], CXLKIT_MPI_HOSTS="a,b,a,b")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout == native[mpi]
    c = counters(r, 4)
    assert all(x["pool_s"] > 0 and x["coll_pool"] > 0 for x in c.values())
    assert c[0]["mpi_r"] > 0  # rank 2's messages to rank 0, its host peer


def test_hosts_list_shorter_than_the_job_turns_routing_off_loudly(built, native):
    mpi = INSTALLED[0]
    r = run(mpi, 4, built[mpi]["check"], built[mpi]["shim"], CXLKIT_MPI_HOSTS="a,b")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout == native[mpi]
    assert "cxlkit-mpi: off: CXLKIT_MPI_HOSTS names fewer hosts than there are ranks" in r.stderr


@pytest.mark.skipif(len(INSTALLED) < 2, reason="needs both MPICH and Open MPI")
@pytest.mark.parametrize("mpi", INSTALLED)
def test_shim_of_the_other_mpi_says_so_in_one_line_and_exits(built, mpi):
    other = next(m for m in INSTALLED if m != mpi)
    r = run(mpi, 2, built[mpi]["check"], built[other]["shim"])
    assert r.returncode != 0
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("cxlkit-mpi: wrong MPI")]
    assert len(lines) == 1, r.stderr
    assert f"libcxlkit_mpi_{mpi}.so instead" in lines[0]
    assert "Segmentation fault" not in r.stderr and "Invalid communicator" not in r.stderr
