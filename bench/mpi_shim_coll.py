"""Small collectives on one host, the shim preloaded against the plain MPI: bench/osu/coll_lat.c
(Barrier, Bcast, Reduce, Allreduce, Allgather of 8 B) or, with --prog sizes,
tests/mpi/netns_coll.c (Allreduce and Bcast at 8 B and 64 KiB, every result checked), built
here with each MPI's mpicc, run in interleaved rounds at each of --ranks: plain, shim and a
second plain run (the noise floor: what the same program gives against itself), in an order
that turns each round; per collective the median of the plain runs, of the shim runs, of the
per-round ratios shim / plain and plain again / plain, each ratio with its 95 % bootstrap
interval (the rounds resampled), and the load average before and after. After `make mpi-shim`:

    python bench/mpi_shim_coll.py --mpis mpich,openmpi --ranks 4 --rounds 9 --iters 2000
    python bench/mpi_shim_coll.py --prog sizes --ranks 2,4 --rounds 7 --iters 200
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
from pathlib import Path

from mpi_shim import interval  # bench/: the 95 % bootstrap interval of a median ratio

REPO = Path(__file__).resolve().parent.parent
CC = {"mpich": "mpicc.mpich", "openmpi": "mpicc.openmpi"}
PROGS = {"coll_lat": ("bench/osu/coll_lat.c", []), "sizes": ("tests/mpi/netns_coll.c", ["coll"])}


def launch(mpi: str, n: int) -> list[str]:
    if mpi == "mpich":
        return ["mpiexec.mpich", "-n", str(n)]
    return ["mpiexec.openmpi", "--oversubscribe", "-n", str(n), "--mca", "btl", "self,vader"]


def once(mpi: str, n: int, prog: list[str], iters: int, shim: Path | None, timeout: int) -> dict:
    """collective (and bytes) -> µs per call, from the program's lines "<name> [bytes] <us>"."""
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    env.pop("LD_PRELOAD", None)
    if shim:
        env["LD_PRELOAD"] = str(shim)
    r = subprocess.run(launch(mpi, n) + prog + [str(iters)], env=env, capture_output=True,
                       text=True, timeout=timeout, check=True)
    return {" ".join(ln.split()[:-1]): float(ln.split()[-1])
            for ln in r.stdout.splitlines() if ln.strip()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mpis", default="mpich,openmpi")
    ap.add_argument("--ranks", default="4", help="comma-separated rank counts")
    ap.add_argument("--prog", choices=sorted(PROGS), default="coll_lat")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--iters", type=int, default=2000)
    ap.add_argument("--timeout", type=int, default=120)
    a = ap.parse_args()
    out = REPO / "build" / "osu"
    out.mkdir(parents=True, exist_ok=True)
    src, args = PROGS[a.prog]
    for mpi in a.mpis.split(","):
        prog = out / f"{a.prog}_{mpi}"
        subprocess.run([CC[mpi], "-O2", str(REPO / src), "-o", str(prog)], check=True)
        shim = REPO / "build" / "c" / f"libcxlkit_mpi_{mpi}.so"
        for n in (int(x) for x in a.ranks.split(",")):
            load0 = os.getloadavg()[0]
            runs = {"plain": [], "shim": [], "again": []}
            for k in range(a.rounds):
                order = ["plain", "shim", "again"]
                for name in order[k % 3:] + order[:k % 3]:
                    runs[name].append(once(mpi, n, [str(prog)] + args, a.iters,
                                           shim if name == "shim" else None, a.timeout))
            plain, shimmed, again = runs["plain"], runs["shim"], runs["again"]
            load1 = os.getloadavg()[0]
            print(f"{mpi}, {n} ranks, {a.rounds} rounds of {a.iters}, load {load0:.1f}-{load1:.1f}")
            print("collective     plain_us  shim_us  shim/plain [95 % interval]"
                  "    plain again/plain [95 %]")
            for name in plain[0]:
                p = statistics.median(x[name] for x in plain)
                s = statistics.median(x[name] for x in shimmed)
                cols = []
                for other in (shimmed, again):
                    ratios = [y[name] / x[name] for x, y in zip(plain, other)]
                    lo, hi = interval(ratios)
                    cols.append(f"{statistics.median(ratios):.3f} [{lo:.3f}, {hi:.3f}]")
                print(f"{name:<14} {p:9.3f} {s:8.3f}  {cols[0]}    {cols[1]}")


if __name__ == "__main__":
    main()
