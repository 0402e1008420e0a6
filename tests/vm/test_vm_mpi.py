"""An MPI job across the two-hosts guests (two machines that share no cache, their QEMUs map
one backing file): one rank per guest, launched by MPICH's Hydra over the rig's private link
between the guests (eth0; tests/vm/mpi_link.py as its remote shell), the shim preloaded, the
ranks' point-to-point traffic and their one-sided window through the shared devdax pool with
coherence "none". Guest a
launches and checks; guest b serves the launcher until a is done. Needs the shim and the OSU
programs built on the host (make mpi-shim osu-build)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import rig  # noqa: E402

pytestmark = [pytest.mark.vm, pytest.mark.topology("two-hosts")]
ROOT = Path(__file__).resolve().parent.parent.parent
LINK = Path(__file__).resolve().parent / "mpi_link.py"
SHIM = ROOT / "build" / "c" / "libcxlkit_mpi_mpich.so"
OSU = ROOT / "build" / "osu" / "osu_mpich"
WAIT_S = 400


def _link_up(me: str) -> None:
    for cmd in (["ip", "addr", "add", f"{rig.LINK_ADDR[me]}/24", "dev", "eth0"],
                ["ip", "link", "set", "eth0", "up"]):
        subprocess.run(cmd, check=True)


def _launch(prog: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, LD_PRELOAD=str(SHIM), CXLKIT_MPI_POOL="/dev/dax0.0",
               CXLKIT_MPI_COHERENCE="none", CXLKIT_MPI_POOL_MB="64", CXLKIT_MPI_STATS="1",
               CXLKIT_MPI_VERBOSE="1", CXLKIT_MSG_DEAD_MS="60000",
               CXLKIT_MSG_TIMEOUT_MS=str(WAIT_S * 1000),
               # both guests report the kernel's default hostname: name their hosts (one
               # rank each), or the shim takes them for one host and leaves every peer to MPI
               CXLKIT_MPI_HOSTS="a,b",
               UCX_TLS="tcp,self", UCX_NET_DEVICES="eth0")
    hosts = ",".join(rig.LINK_ADDR[h] for h in ("a", "b"))
    cmd = ["mpiexec.mpich", "-launcher", "rsh", "-launcher-exec", str(LINK), "-iface", "eth0",
           "-hosts", hosts, "-ppn", "1", "-n", "2", prog, *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=WAIT_S)


def test_mpi_job_one_rank_per_guest_through_the_shared_pool():
    if not (SHIM.exists() and OSU.exists()):
        pytest.skip(f"{SHIM} or {OSU} missing: build them on the host (make mpi-shim osu-build)")
    me = os.environ["CXLKIT_VM_HOST"]
    _link_up(me)
    if me == "b":  # the launcher's remote shell until a says stop
        r = subprocess.run([sys.executable, str(LINK), "serve"], timeout=WAIT_S * 3)
        assert r.returncode == 0
        return
    local = subprocess.Popen([sys.executable, str(LINK), "serve"])
    try:
        where = _launch("ip", "-o", "-4", "addr", "show", "dev", "eth0")
        lat = _launch(str(OSU), "latency", "-m", "8", "-i", "200")
        bw = _launch(str(OSU), "bw", "-m", "262144", "-i", "20")
        # one-sided: 16 B puts and gets in an MPI_Win_allocate window carried by the pool
        rma = [_launch(str(OSU), b, "-m", "16", "-i", "50") for b in ("put_lat", "get_lat")]
    finally:
        for h in ("b", "a"):
            subprocess.run([sys.executable, str(LINK), "stop", rig.LINK_ADDR[h]], timeout=60)
        local.wait(timeout=60)
    # one rank on each guest: each reports its own guest's address on the link
    assert where.returncode == 0, where.stdout + where.stderr
    assert sorted(re.findall(r"inet (10\.17\.0\.\d)/", where.stdout)) == sorted(rig.LINK_ADDR.values())
    for r in (lat, bw):
        out = r.stdout + r.stderr
        assert r.returncode == 0, out
        assert ("cxlkit-mpi: on: MPICH, 2 ranks (2 on the pool), pool /dev/dax0.0 "
                "(coherence none)") in out, out
        # both ranks' counters: every rank sent through the pool
        sends = re.findall(r"cxlkit-mpi: rank (\d): on: pool (\d+) sends", out)
        assert sorted(k for k, _ in sends) == ["0", "1"] and all(int(n) > 0 for _, n in sends), out
    for r in rma:
        out = r.stdout + r.stderr
        assert r.returncode == 0, out
        assert re.search(r"^16\s+[0-9.]+\s*$", r.stdout, re.M), out
        assert out.count(": rma: pool 1 windows, ") == 2, out  # both ranks' window on the pool
    assert re.search(r"^8\s+[0-9.]+\s*$", lat.stdout, re.M), lat.stdout
    assert re.search(r"^262144\s+[0-9.]+\s*$", bw.stdout, re.M), bw.stdout
    print(lat.stdout, bw.stdout, lat.stderr, sep="\n")
