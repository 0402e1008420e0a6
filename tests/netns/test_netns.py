"""The namespace rig (tests/netns/rig.sh) and real MPI jobs across its hosts: hosts with their
own hostnames and addresses, pods with their own /dev/shm, tests/mpi/p2p_check.c across two
hosts with and without the PMPI shim (same transcript; the shim's counters per route).
The rig tests make throwaway rigs of their own prefix (root only); the MPI tests need
`make test-netns` (or `make test-netns-pods`), which bring the rig up and down."""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
RIG = HERE / "rig.sh"
WITH_RIG = HERE / "with_rig.sh"
CBUILD = ROOT / "build" / "c"
TMO = 120
IFACE = os.environ.get("NETNS_PREFIX", "cxk") + "0"  # each host's link (rig.sh)

root_only = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("ip"),
                               reason="needs root and iproute2 (network namespaces)")


def rig(*args: str, prefix: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    env = dict(os.environ, **({"NETNS_PREFIX": prefix} if prefix else {}))
    return subprocess.run([str(RIG), *args], env=env, capture_output=True, text=True,
                          timeout=TMO, check=check)


def hosts_up() -> list[list[str]]:
    if os.geteuid() != 0:
        return []
    return [line.split() for line in rig("status").stdout.splitlines()]


def need_rig(n: int) -> list[list[str]]:
    up = hosts_up()
    if len(up) == n:
        return up
    if os.environ.get("CXLKIT_REQUIRE_NETNS") == str(n):
        pytest.fail(f"namespace rig of {n} hosts not up: tests/netns/rig.sh status says {up}")
    pytest.skip(f"needs the namespace rig of {n} hosts: `make test-netns"
                f"{'-pods' if n == 4 else ''}` (root)")


def mpiexec(hosts: list[list[str]], ppn: int, *argv: str, env: dict | None = None,
            mpi: str = "mpich"):
    """The MPI's launcher on the bridge's side, ppn ranks on every host, started there through
    launch.sh; Open MPI over its TCP component between hosts (shared memory within one)."""
    launch = str(HERE / "launch.sh")
    env = dict(env or {})
    if mpi == "mpich":
        cmd = ["mpiexec.mpich", "-launcher", "rsh", "-launcher-exec", launch, "-iface", "br0",
               "-hosts", ",".join(h[2] for h in hosts), "-ppn", str(ppn)]
        for k, v in env.items():
            cmd += ["-genv", k, v]
    else:
        cmd = ["mpiexec.openmpi", "--mca", "plm_rsh_agent", launch, "--host",
               ",".join(f"{h[2]}:{ppn}" for h in hosts), "--map-by", "ppr:%d:node" % ppn,
               "--mca", "pml", "ob1", "--mca", "btl", "self,vader,tcp",
               "--mca", "btl_tcp_if_include", IFACE, "--mca", "oob_tcp_if_include", f"br0,{IFACE}"]
        for k, v in env.items():
            cmd += ["-x", f"{k}={v}"]
    cmd = [str(RIG), "ctl", *cmd, "-n", str(ppn * len(hosts)), *argv]
    run_env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return subprocess.run(cmd, env=run_env, capture_output=True, text=True, timeout=TMO, cwd=ROOT)


# ---- the rig itself (throwaway rigs of their own prefix) ----

@root_only
def test_up_twice_and_down_twice_leave_no_namespace_behind():
    p = "cxkt1"
    try:
        first = rig("up", "2", prefix=p).stdout
        assert rig("up", "2", prefix=p).stdout == first  # idempotent: the same two hosts
        assert [ln.split()[1:3] for ln in first.splitlines()] == [
            ["cxkt1h0", "10.17.0.1"], ["cxkt1h1", "10.17.0.2"]]
        out = rig("exec", "1", "sh", "-c", "hostname; ip -br addr show cxkt10", prefix=p).stdout
        assert out.startswith("cxkt1h1\n") and "10.17.0.2/24" in out, out
    finally:
        rig("down", prefix=p)
    rig("down", prefix=p)
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not re.search(r"^cxkt1-", names, re.M), names
    assert rig("status", prefix=p).stdout == ""


@root_only
def test_up_refuses_a_namespace_of_its_names_that_it_did_not_make():
    p = "cxkt2"
    subprocess.run(["ip", "netns", "add", f"{p}-h1"], check=True)
    try:
        r = rig("up", "2", prefix=p, check=False)
        assert r.returncode != 0
        assert f"network namespace {p}-h1 exists but this rig did not make it" in r.stderr
        rig("down", prefix=p)  # must leave the stranger alone
        names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert re.search(rf"^{p}-h1\b", names, re.M), names
    finally:
        subprocess.run(["ip", "netns", "del", f"{p}-h1"])
        rig("down", prefix=p)


@root_only
def test_with_rig_takes_its_rig_down_when_interrupted():
    p = "cxkt3"
    env = dict(os.environ, NETNS_PREFIX=p)
    proc = subprocess.Popen([str(WITH_RIG), "2", "sh", "-c", "echo ready; exec sleep 60"],
                            env=env, stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stdout.readline().split() == ["0", f"{p}h0", "10.17.0.1", "pod0"]
        assert proc.stdout.readline().split()[1] == f"{p}h1"
        assert proc.stdout.readline() == "ready\n"  # the command runs: the rig is up
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C sends the terminal's process group
        assert proc.wait(timeout=TMO) == 130
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=TMO)
        proc.stdout.close()
        leftover = rig("status", prefix=p).stdout
        rig("down", prefix=p)
    assert leftover == ""


# ---- jobs across the rig's hosts ----

def shim_env(pool: str, mpi: str) -> dict:
    return {"LD_PRELOAD": str(CBUILD / f"libcxlkit_mpi_{mpi}.so"), "CXLKIT_MPI_POOL": pool,
            "CXLKIT_MPI_POOL_MB": "64", "CXLKIT_MPI_STATS": "1", "CXLKIT_MPI_VERBOSE": "1"}


def need_programs(mpi: str) -> None:
    for f in (f"p2p_check_{mpi}", f"libcxlkit_mpi_{mpi}.so"):
        if not (CBUILD / f).exists():
            pytest.skip(f"needs {CBUILD / f}: make mpi-shim")


def pool_path(tag: str) -> str:
    return f"/dev/shm/cxk-netns-{tag}-{os.getpid()}.pool"


@pytest.mark.parametrize("n", [2, 4])
def test_a_rank_on_each_host_runs_there(n):
    hosts = need_rig(n)
    r = mpiexec(hosts, 1, "hostname")
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.split()) == sorted(h[1] for h in hosts)


def test_pods_each_see_their_own_pool_file():
    need_rig(4)
    name = f"cxk-netns-pods-{os.getpid()}"
    try:
        for writer in (0, 2):
            rig("exec", str(writer), "sh", "-c", f"echo {writer} > /dev/shm/{name}")
        seen = [rig("exec", str(i), "cat", f"/dev/shm/{name}").stdout.strip() for i in range(4)]
        assert seen == ["0", "0", "2", "2"], seen  # one file per pod at one path
    finally:
        for i in (0, 2):
            rig("exec", str(i), "rm", "-f", f"/dev/shm/{name}", check=False)


def run_p2p(hosts: list[list[str]], tag: str, mpi: str):
    need_programs(mpi)
    prog = str(CBUILD / f"p2p_check_{mpi}")
    native = mpiexec(hosts, 2, prog, mpi=mpi)
    assert native.returncode == 0, native.stderr
    pool = pool_path(tag)
    try:
        shim = mpiexec(hosts, 2, prog, env=shim_env(pool, mpi), mpi=mpi)
    finally:
        for i in range(0, len(hosts), 2):  # the pool file of each pod
            rig("exec", str(i), "rm", "-f", pool, check=False)
    assert shim.returncode == 0, shim.stderr
    assert shim.stdout == native.stdout  # p2p_check's transcript: every call's results
    print("\n".join(ln for ln in shim.stderr.splitlines() if "by route" in ln or ": on: " in ln))
    return routes(shim.stderr, 2 * len(hosts))


BY_ROUTE = re.compile(r"cxlkit-mpi: rank (\d+): sends by route: self-MPI (\d+) messages \d+ B,"
                      r" pool (\d+) messages \d+ B, network (\d+) messages \d+ B")


def routes(stderr: str, n: int) -> dict[int, dict[str, int]]:
    """rank -> its sends by route (CXLKIT_MPI_STATS): host (the MPI's own path to a peer on
    its host), pool, net (the MPI's network)."""
    got = {int(m[1]): {"host": int(m[2]), "pool": int(m[3]), "net": int(m[4])}
           for m in BY_ROUTE.finditer(stderr)}
    assert sorted(got) == list(range(n)), stderr
    return got


@pytest.mark.slow
@pytest.mark.parametrize("mpi", ["mpich", "openmpi"])
def test_p2p_check_across_two_hosts_goes_through_the_pool_with_the_same_transcript(mpi):
    sends = run_p2p(need_rig(2), "p2p", mpi)
    # two ranks a host: the other host's through the pool, nothing on the network
    assert all(c["pool"] > 0 and c["net"] == 0 for c in sends.values()), sends


@pytest.mark.slow
@pytest.mark.parametrize("mpi", ["mpich", "openmpi"])
def test_p2p_check_across_two_pods_goes_through_each_pods_pool_and_the_network(mpi):
    # ranks 0-3 on h0, h1 (pod 0), 4-7 on h2, h3 (pod 1), one pool path naming a pool per
    # pod; p2p_check's rings pair 1-2 and 5-6 (across hosts inside a pod) and 3-4, 7-0
    # (across the pods)
    sends = run_p2p(need_rig(4), "pods", mpi)
    for r in (1, 2, 5, 6):
        assert sends[r]["pool"] > 0, (r, sends)
    for r in (0, 3, 4, 7):
        assert sends[r]["net"] > 0, (r, sends)
    assert sends[0]["host"] > 0  # to rank 1 on its host


@pytest.mark.slow
def test_lammps_melt_across_two_hosts_gives_the_same_energies_through_the_pool():
    # Debian's lmp (Open MPI), 2 ranks a host: every thermo row (all digits) the same with
    # the shim as over Open MPI's TCP, and the shim's sends across the hosts on the pool
    hosts = need_rig(2)
    if not shutil.which("lmp") or not (CBUILD / "libcxlkit_mpi_openmpi.so").exists():
        pytest.skip("needs Debian's lmp and the Open MPI shim: make mpi-shim (mpi-deps installs lmp)")
    argv = ["lmp", "-in", str(ROOT / "bench" / "lammps_melt.in"), "-var", "box", "4",
            "-var", "steps", "60", "-var", "every", "10", "-log", "none"]
    native = mpiexec(hosts, 2, *argv, mpi="openmpi")
    assert native.returncode == 0, native.stdout + native.stderr
    pool = pool_path("lammps")
    try:
        shim = mpiexec(hosts, 2, *argv, env=shim_env(pool, "openmpi"), mpi="openmpi")
    finally:
        rig("exec", "0", "rm", "-f", pool, check=False)
    assert shim.returncode == 0, shim.stdout + shim.stderr
    rows = [thermo(r.stdout) for r in (native, shim)]
    assert len(rows[0]) == 7 and rows[0] == rows[1], rows
    sends = routes(shim.stderr, 4)
    assert all(c["pool"] > 0 and c["net"] == 0 for c in sends.values()), sends


def thermo(out: str) -> list[list[str]]:
    """LAMMPS's thermo rows (step, temperature, energies, pressure) as printed."""
    lines = out.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.split()[:1] == ["Step"])
    end = next(i for i, ln in enumerate(lines) if ln.startswith("Loop time"))
    return [ln.split() for ln in lines[start + 1:end] if ln.strip()]
