"""The PMPI shim in the MPI programs users run: bench/osu's latency and bandwidth programs,
unmodified, under each MPI (MPICH, Open MPI) over
  shm         the MPI's own intra-node shared memory (the baseline),
  tcp         the same MPI forced over TCP loopback,
  shim        LD_PRELOAD=libcxlkit_mpi_<mpi>.so: MPI_COMM_WORLD's messages through the pool,
  shim-off    the shim loaded with CXLKIT_MPI=0 (every call straight to PMPI),
  shim-mpi    the shim live but MPI_COMM_WORLD left on MPI (CXLKIT_MPI_COMMS=derived: the
              per-call cost of a communicator the shim does not route),
  shim-none   the shim loaded with CXLKIT_MPI_COMMS=none (only with --configs),
in interleaved rounds (each round runs every config once, so the machine's load falls on all
alike). Prints one JSON line per (mpi, config, bench, size) with the median over the rounds
and the spread, then the issue's ratios. Needs `make mpi-shim osu-build`.
The one-sided latencies (--benches put_lat,get_lat: 8 B, one operation per fence epoch, rank
0 into rank 1's MPI_Win_allocate window) run shm, tcp and shim only; Open MPI gets the
one-sided components bench/osu/run.sh uses (osc sm,pt2pt over vader, pt2pt over TCP).
Usage: python bench/mpi_shim.py [--rounds 5] [--lat-iters 5000] [--bw-max 4194304]
                                [--benches latency,bw,put_lat,get_lat]
                                [--configs shm,shim] [--paired 60]
--paired N: the overhead of a shim that routes nothing, resolved to a few per cent on a
noisy machine: N rounds of short 8 B latency runs of shm, shim-off and shim-none in a
rotating order; each round gives the ratios shim-off/shm and shim-none/shm of runs taken
seconds apart, and the median of those paired ratios is printed with its 95 % interval
(bootstrap over rounds) and its quartiles; also the ratio of the configs' 10th percentiles
(the runs the scheduler disturbed least) with its interval, and every run's figure."""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAUNCH = {
    "mpich": ["mpiexec.mpich", "-n", "2"],
    "openmpi": ["mpiexec.openmpi", "--oversubscribe", "-n", "2", "--mca", "pml", "ob1"],
}
TRANSPORT = {  # (extra launcher args, extra environment)
    ("mpich", "shm"): ([], {}),
    ("mpich", "tcp"): ([], {"MPIR_CVAR_NOLOCAL": "1", "UCX_TLS": "tcp,self",
                            "UCX_NET_DEVICES": "lo"}),
    ("openmpi", "shm"): (["--mca", "btl", "self,vader"], {}),
    ("openmpi", "tcp"): (["--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", "lo"], {}),
}
CONFIGS = ["shm", "tcp", "shim", "shim-off", "shim-mpi"]
EXTRA_CONFIGS = ["shim-none"]
RMA = ("put_lat", "get_lat")
LATENCY = ("latency",) + RMA


def command(mpi: str, config: str, args) -> tuple[list[str], dict]:
    base = "tcp" if config == "tcp" else "shm"
    extra, env = TRANSPORT[(mpi, base)]
    env = dict(env)
    if config.startswith("shim"):
        env["LD_PRELOAD"] = str(ROOT / args.cbuild / f"libcxlkit_mpi_{mpi}.so")
        env["CXLKIT_MPI_STATS"] = "1"
        # every rank a host of its own: on one machine the shim would leave every peer on
        # the MPI's own path, and these configs measure the pool
        env.setdefault("CXLKIT_MPI_HOSTS", os.environ.get("CXLKIT_MPI_HOSTS", "rank"))
    if config == "shim-off":
        env["CXLKIT_MPI"] = "0"
    if config == "shim-mpi":
        env["CXLKIT_MPI_COMMS"] = "derived"
    if config == "shim-none":
        env["CXLKIT_MPI_COMMS"] = "none"
    prog = ROOT / args.osu_bin / ("osu_mpich" if mpi == "mpich" else "osu_ompi")
    return LAUNCH[mpi][:1] + LAUNCH[mpi][1:] + extra + [str(prog)], env


def run(mpi: str, config: str, bench: str, args) -> dict[int, float]:
    cmd, env = command(mpi, config, args)
    # one-sided: a 16-byte window (rows 1..16, the 8 B one kept): MPICH 4.0.2 loses every put
    # into an 8-byte MPI_Win_allocate window of 2 ranks (osu put_lat -m 8 fails its check
    # natively: "put: 1 bytes: byte 0 wrong"), 16 bytes and up work
    iters = args.rma_tcp_iters if bench in RMA and config == "tcp" else args.lat_iters
    opts = (["-m", "16" if bench in RMA else "8", "-i", str(iters)] if bench in LATENCY
            else ["-m", str(args.bw_max), "-i", str(args.bw_iters)])
    if mpi == "openmpi" and bench in RMA:
        cmd[-1:-1] = ["--mca", "osc", "pt2pt" if config == "tcp" else "sm,pt2pt"]
    e = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", **env)
    top = 8 if bench in LATENCY else args.bw_max
    try:
        r = subprocess.run(cmd + [bench] + opts, env=e, capture_output=True, text=True,
                           timeout=args.timeout)
        out, err, rc = r.stdout, r.stderr, r.returncode
    except subprocess.TimeoutExpired as t:  # whole table, then a hang: MPICH+UCX TCP finalize
        out = t.stdout.decode() if isinstance(t.stdout, bytes) else (t.stdout or "")
        err, rc = f"timed out after {args.timeout} s", 124
    rows = {}
    for line in out.splitlines():
        m = re.match(r"^(\d+)\s+([0-9.]+)\s*$", line)
        if m:
            rows[int(m.group(1))] = float(m.group(2))
    if args.raw:
        with open(Path(args.raw) / f"{mpi}.{config}.{bench}.txt", "a") as f:
            f.write(f"# rc {rc}\n{out}{err[-2000:]}\n")
    if rc == 124 and top in rows:
        print(f"# {mpi} {config} {bench}: hung after its whole table (figures kept)",
              file=sys.stderr)
    elif rc != 0:
        sys.exit(f"{mpi} {config} {bench} failed ({rc}): {err[-800:]}")
    if config == "shim" and err.count(": on: pool 0 sends") > 0:
        if bench not in RMA:
            sys.exit(f"{mpi} shim {bench}: a rank sent nothing through the pool:\n{err}")
    if config == "shim" and bench in RMA and err.count(": rma: pool 1 windows, ") != 2:
        sys.exit(f"{mpi} shim {bench}: the window was not on the pool on both ranks:\n{err}")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--lat-iters", type=int, default=5000)
    ap.add_argument("--rma-tcp-iters", type=int, default=200,
                    help="put/get over TCP: one fence epoch costs milliseconds there")
    ap.add_argument("--bw-max", type=int, default=4 << 20)
    ap.add_argument("--bw-iters", type=int, default=100)
    ap.add_argument("--mpis", default="mpich,openmpi")
    ap.add_argument("--benches", default="latency,bw")
    ap.add_argument("--cbuild", default="build/c")
    ap.add_argument("--osu-bin", default="build/osu")
    ap.add_argument("--timeout", type=int, default=90)
    ap.add_argument("--raw", default="", help="directory for every run's output")
    ap.add_argument("--configs", default=",".join(CONFIGS),
                    help="subset of " + ",".join(CONFIGS + EXTRA_CONFIGS))
    ap.add_argument("--paired", type=int, default=0,
                    help="rounds of the paired overhead measurement (see the docstring)")
    args = ap.parse_args()
    mpis = args.mpis.split(",")
    configs = args.configs.split(",")
    bad = [c for c in configs if c not in CONFIGS + EXTRA_CONFIGS]
    if bad or not configs:
        sys.exit(f"--configs: unknown {bad}; known: {CONFIGS + EXTRA_CONFIGS}")
    if args.raw:
        Path(args.raw).mkdir(parents=True, exist_ok=True)
    if args.paired:
        paired(mpis, args)
        return
    got: dict = {}
    for rnd in range(args.rounds):
        for mpi in mpis:
            for config in configs:
                for bench in args.benches.split(","):
                    if bench != "latency" and config in ("shim-off", "shim-mpi", "shim-none"):
                        continue
                    for size, v in run(mpi, config, bench, args).items():
                        got.setdefault((mpi, config, bench, size), []).append(v)
        print(f"# round {rnd + 1}/{args.rounds} done, load {os.getloadavg()[0]:.2f}",
              file=sys.stderr)
    med = {}
    for (mpi, config, bench, size), vals in sorted(got.items()):
        med[(mpi, config, bench, size)] = statistics.median(vals)
        if bench in LATENCY and size != 8 or bench == "bw" and size < 65536:
            continue
        print(json.dumps({"mpi": mpi, "config": config, "bench": bench, "bytes": size,
                          "unit": "us" if bench in LATENCY else "MB/s",
                          "median": round(statistics.median(vals), 3),
                          "min": min(vals), "max": max(vals), "rounds": len(vals),
                          "time": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}))
    print("# ratios of medians (goals: shim/shm 8 B latency <= 1.5; tcp/shim >= 10; "
          "bandwidth shim/shm >= 1 from 64 KiB; shim-off and shim-mpi / shm < 1.05)")
    for mpi in mpis:
        if "latency" not in args.benches or set(CONFIGS) - set(configs):
            break
        lat = {c: med.get((mpi, c, "latency", 8)) for c in CONFIGS}
        low = {c: min(got[(mpi, c, "latency", 8)]) for c in CONFIGS}
        print(f"{mpi}: 8 B latency us, medians: " + ", ".join(f"{c} {v:.2f}" for c, v in lat.items()))
        print(f"{mpi}: 8 B latency us, minima:  " + ", ".join(f"{c} {v:.2f}" for c, v in low.items()))
        print(f"{mpi}: shim/shm {lat['shim'] / lat['shm']:.2f}, tcp/shim "
              f"{lat['tcp'] / lat['shim']:.1f}, shim-off/shm {lat['shim-off'] / lat['shm']:.3f}, "
              f"shim-mpi/shm {lat['shim-mpi'] / lat['shm']:.3f}")
    for mpi in mpis if {"shm", "tcp", "shim"} <= set(configs) else []:
        for bench in (b for b in RMA if b in args.benches):
            lat = {c: med[(mpi, c, bench, 8)] for c in ("shm", "tcp", "shim")}
            low = {c: min(got[(mpi, c, bench, 8)]) for c in lat}
            print(f"{mpi}: 8 B {bench} us, medians: " + ", ".join(f"{c} {v:.2f}" for c, v in lat.items())
                  + "; minima: " + ", ".join(f"{c} {v:.2f}" for c, v in low.items()))
            print(f"{mpi}: {bench} shim/shm {lat['shim'] / lat['shm']:.2f}, "
                  f"tcp/shim {lat['tcp'] / lat['shim']:.1f}")
    for mpi in mpis if "bw" in args.benches and {"shm", "shim"} <= set(configs) else []:
        sizes = sorted(s for (m, c, b, s) in med if m == mpi and c == "shm" and b == "bw"
                       and s >= 65536)
        tcp = "tcp" in configs
        print(f"{mpi}: bandwidth MB/s shm / shim{' / tcp' if tcp else ''}, shim/shm: " + "; ".join(
            f"{s >> 10} KiB {med[(mpi, 'shm', 'bw', s)]:.0f} / {med[(mpi, 'shim', 'bw', s)]:.0f}"
            + (f" / {med[(mpi, 'tcp', 'bw', s)]:.0f}" if tcp else "") + ", "
            f"{med[(mpi, 'shim', 'bw', s)] / med[(mpi, 'shm', 'bw', s)]:.2f}" for s in sizes))
        # the same ratio round by round (each round's runs were seconds apart)
        for s in sizes:
            r = [b / a for a, b in zip(got[(mpi, "shm", "bw", s)], got[(mpi, "shim", "bw", s)])]
            print(f"{mpi}: {s >> 10} KiB shim/shm per round: median {statistics.median(r):.2f}"
                  f" (min {min(r):.2f}, max {max(r):.2f}, {len(r)} rounds)")


def interval(ratios: list[float], reps: int = 2000) -> tuple[float, float]:
    """95 % bootstrap interval of the median of ratios (resampling the rounds)."""
    import random
    rng = random.Random(17)
    meds = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(reps))
    return meds[int(0.025 * reps)], meds[int(0.975 * reps) - 1]


def p10(v: list[float]) -> float:
    return statistics.quantiles(v, n=10)[0]


def p10_ratio(base: list[float], other: list[float], reps: int = 2000) -> tuple[float, float, float]:
    """Ratio of the 10th percentiles (the runs the scheduler left alone) with a 95 % bootstrap
    interval (resampling the rounds, pairs kept)."""
    import random
    rng = random.Random(17)
    idx = range(len(base))
    rs = []
    for _ in range(reps):
        pick = rng.choices(idx, k=len(base))
        rs.append(p10([other[i] for i in pick]) / p10([base[i] for i in pick]))
    rs.sort()
    return p10(other) / p10(base), rs[int(0.025 * reps)], rs[int(0.975 * reps) - 1]


def paired(mpis: list[str], args) -> None:
    """8 B latency of shm, shim-off and shim-none, N rounds in a rotating order; the median
    of the per-round ratios against shm, with its bootstrap interval and quartiles."""
    trio = ["shm", "shim-off", "shim-none"]
    for mpi in mpis:
        vals: dict[str, list[float]] = {c: [] for c in trio}
        for rnd in range(args.paired):
            order = trio[rnd % 3:] + trio[:rnd % 3]
            for c in order:
                vals[c].append(run(mpi, c, "latency", args)[8])
        for c in trio[1:]:
            r = [b / a for a, b in zip(vals["shm"], vals[c])]
            lo, hi = interval(r)
            q = statistics.quantiles(r, n=4)
            print(json.dumps({"mpi": mpi, "config": c, "baseline": "shm", "bench": "latency",
                              "bytes": 8, "paired_rounds": len(r),
                              "median_ratio": round(statistics.median(r), 4),
                              "ci95": [round(lo, 4), round(hi, 4)],
                              "quartiles": [round(q[0], 4), round(q[2], 4)],
                              "p10_ratio": [round(x, 4) for x in p10_ratio(vals["shm"], vals[c])],
                              "p10_us": round(p10(vals[c]), 3), "shm_p10_us": round(p10(vals["shm"]), 3),
                              "values": vals[c], "shm_values": vals["shm"],
                              "median_us": round(statistics.median(vals[c]), 3),
                              "shm_median_us": round(statistics.median(vals["shm"]), 3),
                              "load": round(os.getloadavg()[0], 2),
                              "time": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}))
        print(f"# {mpi}: paired rounds done, load {os.getloadavg()[0]:.2f}", file=sys.stderr)


if __name__ == "__main__":
    main()
