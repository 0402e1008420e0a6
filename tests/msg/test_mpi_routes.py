"""Routes per peer in the PMPI shim (native/mpi/routes.c, anysrc.c, coll.c): on one host every
peer stays on the MPI's own path and the shim routes nothing (collectives straight to the
MPI); with CXLKIT_MPI_HOSTS / CXLKIT_MPI_NOPOOL one machine stands for several hosts, some
sharing the pool and some not, and tests/mpi/routes_check.c (ANY_SOURCE order across routes,
a receive behind a wildcard, probes, sendrecv, collectives) gives the native transcript while
the counters show each route carrying what it should. A shim preloaded into the other MPI's
program says so in one line and exits. Ranks of two hosts bound to one CPU of one machine are
named in one line."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from mpi_shim_build import build_shim
from sleepers import TIMED, sleeping_in

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

BY_ROUTE = re.compile(r"cxlkit-mpi: rank (\d+): sends by route: self-MPI (\d+) messages (\d+) B,"
                      r" pool (\d+) messages (\d+) B, network (\d+) messages (\d+) B")


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
        pods = out / f"pods_check_{mpi}"
        subprocess.run([cc, "-O1", str(REPO / "tests" / "mpi" / "pods_check.c"), "-o",
                        str(pods)], check=True)
        progs[mpi] = {"shim": shim, "check": check, "pods": pods}
    return progs


def run(mpi: str, n: int, prog: Path, shim: Path | None = None, args: tuple = (), **env: str):
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
    return subprocess.run(launch + [str(prog), *args], env=e, capture_output=True, text=True,
                          timeout=120)


def counters(r, n: int) -> dict[int, dict[str, int]]:
    """rank -> its counters (pool sends/receives, MPI-path sends/receives, collectives; sends
    and their bytes by route: host_s to peers on its host, net_s over the MPI's network)."""
    got = {}
    for m in COUNTERS.finditer(r.stderr):
        got[int(m[1])] = {"on": m[2] == "on", "pool_s": int(m[3]), "pool_r": int(m[4]),
                          "mpi_s": int(m[5]), "mpi_r": int(m[6]), "coll_pool": int(m[7]),
                          "coll_polled": int(m[8])}
    assert sorted(got) == list(range(n)), r.stderr
    for m in BY_ROUTE.finditer(r.stderr):
        got[int(m[1])].update(host_s=int(m[2]), host_b=int(m[3]), net_s=int(m[6]),
                              net_b=int(m[7]))
        assert int(m[4]) == got[int(m[1])]["pool_s"]
    assert all("net_s" in c for c in got.values()), r.stderr
    return got


def run_parts(mpi: str, prog: Path, shim: Path, parts: list[tuple[int, dict[str, str]]],
              *args: str, **env: str):
    """One job launched in parts (MPMD): each part's ranks with variables of their own (`env
    K=V prog`) over env, the launcher's own, which the shim's rank 0 reads its settings from."""
    launch = [MPIS[mpi][1]]
    if mpi == "openmpi":
        launch += ["--oversubscribe", "--mca", "pml", "ob1", "--mca", "btl", "self,vader"]
    for k, (n, own) in enumerate(parts):
        launch += ([":"] if k else []) + ["-n", str(n), "env",
                                          *[f"{a}={b}" for a, b in own.items()], str(prog), *args]
    e = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
             LD_PRELOAD=str(shim), CXLKIT_MPI_STATS="1", CXLKIT_MPI_POOL_MB="64", **env)
    e.pop("CXLKIT_MPI_NOPOOL", None)
    return subprocess.run(launch, env=e, capture_output=True, text=True, timeout=120)


def run_pods(mpi: str, prog: Path, shim: Path, pods: list[tuple[int, Path]], *args: str,
             **env: str):
    """One job whose ranks open a different pool per pod: each part's ranks with
    CXLKIT_MPI_POOL of their own (as one path names a different pool on each pod's hosts);
    rank 0's value is the launcher's too, so the shim's settings name a pool."""
    return run_parts(mpi, prog, shim, [(n, {"CXLKIT_MPI_POOL": str(p)}) for n, p in pods],
                     *args, CXLKIT_MPI_POOL=str(pods[0][1]), **env)


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


PMPI_COUNT = re.compile(r"^pmpi-count: rank (\d+): (\d+) calls$", re.M)


@pytest.mark.parametrize("mpi", INSTALLED)
def test_one_host_the_shim_sends_no_message_of_its_own(built, mpi, tmp_path):
    # a message at start shifts the MPI's shared-memory queues for the whole job (Open MPI's
    # 2-rank barrier ran 12-18 % slower after the shim's one broadcast); on one node the
    # launcher's count decides, with no message. tests/mpi/pmpi_count.c, preloaded behind
    # the shim, counts what reaches the MPI through PMPI_*
    cc = MPIS[mpi][0]
    count, prog = tmp_path / "pmpi_count.so", tmp_path / "init_only"
    subprocess.run([cc, "-O1", "-shared", "-fPIC", str(REPO / "tests" / "mpi" / "pmpi_count.c"),
                    "-o", str(count), "-ldl"], check=True)
    subprocess.run([cc, "-O1", str(REPO / "tests" / "mpi" / "init_only.c"), "-o", str(prog)],
                   check=True)
    stack = f"{built[mpi]['shim']} {count}"
    r = run(mpi, 2, prog, LD_PRELOAD=stack, CXLKIT_MPI_VERBOSE="1")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "cxlkit-mpi: off: no two ranks on different hosts share the pool" in r.stderr
    got = {int(m[1]): int(m[2]) for m in PMPI_COUNT.finditer(r.stderr)}
    assert got == {0: 0, 1: 0}, r.stderr
    # host labels make it two hosts: then the ranks must agree, and do, through the MPI
    r = run(mpi, 2, prog, LD_PRELOAD=stack, CXLKIT_MPI_HOSTS="a,b")
    assert r.returncode == 0, r.stdout + r.stderr
    got = {int(m[1]): int(m[2]) for m in PMPI_COUNT.finditer(r.stderr)}
    assert sorted(got) == [0, 1] and all(n > 0 for n in got.values()), r.stderr


@pytest.mark.parametrize("mpi", INSTALLED)
def test_mixed_routes_same_host_pool_and_network_only(built, native, mpi):
    # ranks 0 and 1 share host a; 2 is host b (pool); 3 is host c, which maps no pool
    r = run(mpi, 4, built[mpi]["check"], built[mpi]["shim"], CXLKIT_MPI_HOSTS="a,a,b,c",
            CXLKIT_MPI_NOPOOL="c")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout == native[mpi]
    c = counters(r, 4)
    assert all(x["on"] for x in c.values())
    # 0 and 1 talk to 2 and to each other (one host, one pod) through the pool; to 3 on the
    # MPI's network
    assert c[2]["pool_s"] > 0 and c[0]["pool_r"] > 0 and c[1]["pool_s"] > 0 and c[1]["pool_r"] > 0
    assert c[0]["mpi_s"] > 0 and c[0]["mpi_r"] > 0
    assert c[0]["host_s"] == 0 and c[1]["host_s"] == 0 and c[0]["net_s"] > 0
    assert c[3]["pool_s"] == 0 and c[3]["pool_r"] == 0 and c[3]["mpi_s"] > 0
    # a job not all on the pool: its collectives stay the MPI's (polled)
    assert all(x["coll_pool"] == 0 and x["coll_polled"] > 0 for x in c.values())


# (CXLKIT_MPI_COHERENCE, CXLKIT_MPI_SAME_HOST) -> the route of a pair of one host: the pool
# where it is coherent (one machine: "auto" opens it so), else the MPI's own; or as set
SAME_HOST = [("", "", "pool"), ("none", "", "mpi"), ("none", "pool", "pool"),
             ("host", "mpi", "mpi"), ("", "auto", "pool")]


@pytest.mark.parametrize("coherence,same_host,route", SAME_HOST)
@pytest.mark.parametrize("mpi", INSTALLED)
def test_two_hosts_sharing_the_pool_collectives_through_it(built, native, mpi, coherence,
                                                            same_host, route):
    # hosts a (ranks 0, 2) and b (1, 3): the pairs across the hosts through the pool, those of
    # one host by `route`
    env = {k: v for k, v in (("CXLKIT_MPI_COHERENCE", coherence),
                             ("CXLKIT_MPI_SAME_HOST", same_host)) if v}
    r = run(mpi, 4, built[mpi]["check"], built[mpi]["shim"], CXLKIT_MPI_HOSTS="a,b,a,b", **env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout == native[mpi]
    c = counters(r, 4)
    assert all(x["pool_s"] > 0 and x["coll_pool"] > 0 for x in c.values())
    if route == "pool":  # nothing of the program's on the MPI
        assert all(x["mpi_s"] == 0 and x["mpi_r"] == 0 and x["host_s"] == 0
                   for x in c.values()), c
    else:
        assert c[0]["mpi_r"] > 0, c  # rank 2's messages to rank 0, its host peer
        assert all(x["net_s"] == 0 for x in c.values()), c  # the other host: the pool's


@pytest.mark.parametrize("mpi", INSTALLED)
@pytest.mark.parametrize("who", [0, 2])
def test_same_host_setting_is_rank_0s_for_every_rank(built, native, mpi, tmp_path, who):
    # the ranks must agree on each pair's route: rank 0's setting decides, as for every
    # CXLKIT_MPI* variable (an MPMD launch: rank `who` alone has CXLKIT_MPI_SAME_HOST=mpi)
    parts = [(1, {"CXLKIT_MPI_SAME_HOST": "mpi"} if k == who else {}) for k in range(4)]
    r = run_parts(mpi, built[mpi]["check"], built[mpi]["shim"], parts,
                  CXLKIT_MPI_HOSTS="a,b,a,b", CXLKIT_MPI_POOL=str(tmp_path / "p.pool"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout == native[mpi]
    c = counters(r, 4)
    on_mpi = who == 0
    assert (c[0]["mpi_r"] > 0 and c[3]["mpi_r"] > 0) == on_mpi, c  # from 2 and 1, host peers
    assert all(x["pool_s"] > 0 for x in c.values()), c


@pytest.mark.parametrize("mpi", INSTALLED)
def test_two_pods_of_different_sizes_each_through_its_own_pool(built, native, mpi, tmp_path):
    # hosts a (ranks 0, 1) and b (2) map pool A; hosts c (3) and d (4) map pool B at their
    # own path: 0-1 (one host), 1-2 and 3-4 through their pools, every pair across the pods
    # on the network
    r = run_pods(mpi, built[mpi]["check"], built[mpi]["shim"],
                 [(3, tmp_path / "a.pool"), (2, tmp_path / "b.pool")],
                 CXLKIT_MPI_HOSTS="a,a,b,c,d", CXLKIT_MPI_VERBOSE="1")
    assert r.returncode == 0, r.stdout + r.stderr
    native5 = run(mpi, 5, built[mpi]["check"])
    assert native5.returncode == 0, native5.stderr
    assert r.stdout == native5.stdout
    assert "ranks (5 on the pools of 2 pods)" in r.stderr
    c = counters(r, 5)
    assert all(x["on"] for x in c.values())
    assert c[1]["host_s"] == 0 and c[1]["pool_s"] > 0  # to 0 on its host and to 2: the pool
    for k in (2, 3, 4):  # to its pod peer through the pool, to the other pod on the network
        assert c[k]["pool_s"] > 0 and c[k]["net_s"] > 0 and c[k]["net_b"] > 0, (k, c[k])
    assert c[0]["net_s"] > 0 and c[0]["pool_s"] > 0  # rank 0 sends to 4 (network) and 1 (pool)
    # no communicator of this job lies in one pod: collectives the MPI's own (polled)
    assert all(x["coll_pool"] == 0 and x["coll_polled"] > 0 for x in c.values())
    # each pool is sized for the job's 5 ranks but sparse: what is backed is its own pod's
    # (a few MiB of rings), below its pod's share of the size (the whole size before)
    for name, ranks in (("a.pool", 3), ("b.pool", 2)):
        st = (tmp_path / name).stat()
        assert st.st_blocks * 512 < st.st_size * ranks // 5, (name, st.st_blocks, st.st_size)


@pytest.mark.parametrize("mpi", INSTALLED)
def test_a_pool_only_one_host_maps_carries_nothing(built, native, mpi, tmp_path):
    # pod {a, b} shares pool A; host c's two ranks map pool B alone: they talk to each other
    # on the MPI's own path and to a, b over the network, and join no engine
    r = run_pods(mpi, built[mpi]["check"], built[mpi]["shim"],
                 [(2, tmp_path / "a.pool"), (2, tmp_path / "b.pool")],
                 CXLKIT_MPI_HOSTS="a,b,c,c", CXLKIT_MPI_VERBOSE="1")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout == native[mpi]
    assert "4 ranks (2 on the pool)" in r.stderr
    c = counters(r, 4)
    assert c[0]["pool_s"] > 0 and c[1]["pool_s"] > 0
    assert c[2]["pool_s"] == 0 and c[3]["pool_s"] == 0
    assert c[2]["host_s"] > 0 and c[3]["net_s"] > 0  # 2 -> 3 on its host, 3 -> 0 (ring)


@pytest.mark.parametrize("mpi", INSTALLED)
def test_a_communicator_of_one_pod_takes_its_pool_for_collectives(built, mpi, tmp_path):
    # pods {a, a, b} and {c, d}: each pod's split runs Barrier, Bcast, Allreduce, Allgather
    # through its own pool; the world's four and the final Allreduce span both pools: the MPI's
    native = run(mpi, 5, built[mpi]["pods"], args=("3",))
    assert native.returncode == 0, native.stdout + native.stderr
    assert native.stdout.strip().endswith("pods_check: all passed")
    r = run_pods(mpi, built[mpi]["pods"], built[mpi]["shim"],
                 [(3, tmp_path / "a.pool"), (2, tmp_path / "b.pool")], "3",
                 CXLKIT_MPI_HOSTS="a,a,b,c,d")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout == native.stdout
    c = counters(r, 5)
    assert all(x["coll_pool"] == 4 and x["coll_polled"] == 5 for x in c.values()), c


@pytest.mark.parametrize("mpi", INSTALLED)
def test_pod_whose_pool_cannot_be_opened_talks_over_the_network(built, native, mpi, tmp_path):
    # pod {c, d}'s pool path lies in a folder that is not there: its ranks use the network
    # for every other host (one line each), pod {a, b} still through its pool
    r = run_pods(mpi, built[mpi]["check"], built[mpi]["shim"],
                 [(2, tmp_path / "a.pool"), (2, tmp_path / "missing" / "b.pool")],
                 CXLKIT_MPI_HOSTS="a,b,c,d", CXLKIT_MPI_VERBOSE="1")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout == native[mpi]
    for k in (2, 3):
        assert f"cxlkit-mpi: rank {k}: pool {tmp_path / 'missing' / 'b.pool'}: No such file or " \
            "directory: " \
            "MPI's network to every other host" in r.stderr
    c = counters(r, 4)
    assert c[0]["pool_s"] > 0 and c[1]["pool_s"] > 0
    assert c[2]["pool_s"] == 0 and c[3]["pool_s"] == 0 and c[2]["net_s"] > 0


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
    assert len(lines) == 1, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    assert f"libcxlkit_mpi_{mpi}.so instead" in lines[0]
    assert "Segmentation fault" not in r.stderr and "Invalid communicator" not in r.stderr


def _sleeping_or_gone(marker: str, done: Path, launcher: subprocess.Popen,
                      bound_s: float = 60) -> str:
    """Wait (bounded) until the process whose environment holds marker sleeps in a timed
    sleep (sleepers.TIMED), its wrapper wrote done (it exited), or the launcher ended: which
    one."""
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        if launcher.poll() is not None:
            return "launcher ended"
        if done.exists():
            return "gone"
        for d in Path("/proc").iterdir():
            try:
                if (d.name.isdigit() and marker.encode() in (d / "environ").read_bytes()
                        and any(w in sleeping_in(int(d.name)) for w in TIMED)):
                    return "sleeping"
            except OSError:
                continue
        time.sleep(0.01)  # a poll interval: the sleep we look for lasts until we act
    return "bound"


@pytest.mark.skipif(len(INSTALLED) < 2, reason="needs both MPICH and Open MPI")
@pytest.mark.parametrize("mpi", INSTALLED)
def test_the_wrong_mpi_line_is_said_when_rank_0_reaches_it_after_the_others(built, mpi,
                                                                             tmp_path):
    # rank 0 is held before it starts until rank 1 has met the mismatch and done what it
    # does: it must wait for rank 0's line (under Open MPI's launcher a rank 1 that exits at
    # once has the job ended before rank 0 speaks; Hydra could die of SIGPIPE)
    other = next(m for m in INSTALLED if m != mpi)
    gate, done = tmp_path / "gate", tmp_path / "rank1-exited"
    os.mkfifo(gate)
    token = f"{os.getpid()}-{mpi}"
    prog, shim = str(built[mpi]["check"]), str(built[other]["shim"])
    hold = ["sh", "-c", 'read x < "$0"; LD_PRELOAD="$2" exec "$1"', str(gate), prog, shim]
    mark = ["sh", "-c", 'CXK_WRONG_MPI_RANK1="$3" LD_PRELOAD="$2" "$1"; rc=$?; '
            'echo $rc > "$4"; exit $rc', "sh", prog, shim, token, str(done)]
    launch = [MPIS[mpi][1], *(["--oversubscribe"] if mpi == "openmpi" else [])]
    cmd = [*launch, "-n", "1", *hold, ":", "-n", "1", *mark]
    e = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    e.pop("LD_PRELOAD", None)
    p = subprocess.Popen(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        state = _sleeping_or_gone(f"CXK_WRONG_MPI_RANK1={token}", done, p)
        try:
            fd = os.open(gate, os.O_WRONLY | os.O_NONBLOCK)  # ENXIO: rank 0 already ended
            os.write(fd, b"go\n")
            os.close(fd)
        except OSError:
            pass
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, 9)
            p.communicate()
    # rank 1 waits for rank 0 (an exit at once lets the launcher end the job first)
    assert state == "sleeping", (state, out[-2000:], err[-2000:])
    assert p.returncode != 0
    lines = [ln for ln in err.splitlines() if ln.startswith("cxlkit-mpi: wrong MPI")]
    assert len(lines) == 1, (p.returncode, out[-2000:], err[-2000:])
    assert f"libcxlkit_mpi_{mpi}.so instead" in lines[0]


CPUS = sorted(os.sched_getaffinity(0))
CLASH = re.compile(r"^cxlkit-mpi: ranks 0 and 1: on different hosts but bound to the same CPUs "
                   r"of one machine .*: the job's 2 ranks there run on 1 of its \d+ CPUs; bind "
                   r"them apart", re.M)


def run_bound(mpi: str, prog: Path, shim: Path, cpus: tuple[int, int], **env: str):
    """Two ranks, each pinned by taskset to its CPU (an MPMD launch, as two hosts' launchers
    would each place their own)."""
    launch = [MPIS[mpi][1]]
    if mpi == "openmpi":
        launch += ["--oversubscribe", "--mca", "pml", "ob1", "--mca", "btl", "self,vader"]
    for k, cpu in enumerate(cpus):
        launch += ([":"] if k else []) + ["-n", "1", "taskset", "-c", str(cpu), str(prog)]
    e = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
             LD_PRELOAD=str(shim), **env)
    for k in ("CXLKIT_MPI_HOSTS", "CXLKIT_MPI_NOPOOL"):
        if k not in env:
            e.pop(k, None)
    return subprocess.run(launch, env=e, capture_output=True, text=True, timeout=120)


@pytest.mark.skipif(len(CPUS) < 2 or not shutil.which("taskset"),
                    reason="needs two CPUs and taskset")
@pytest.mark.parametrize("mpi", INSTALLED)
def test_ranks_of_two_hosts_bound_to_one_cpu_of_one_machine_are_named_in_one_line(built, mpi):
    b = built[mpi]
    r = run_bound(mpi, b["check"], b["shim"], (CPUS[0], CPUS[0]), CXLKIT_MPI_HOSTS="a,b")
    assert r.returncode == 0, r.stdout + r.stderr
    assert len(CLASH.findall(r.stderr)) == 1, r.stderr
    # apart, or one host's own placement: nothing to say
    for cpus, env in (((CPUS[0], CPUS[1]), {"CXLKIT_MPI_HOSTS": "a,b"}), ((CPUS[0], CPUS[0]), {})):
        r = run_bound(mpi, b["check"], b["shim"], cpus, **env)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "bound to the same CPUs" not in r.stderr, r.stderr
