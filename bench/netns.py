"""Run: tests/netns/with_rig.sh 2 .venv/bin/python bench/netns.py --out build/netns
(or `make bench-netns`). The PMPI shim against the MPI's own paths, in interleaved rounds:
- across the two namespace hosts of tests/netns/rig.sh (one rank per host, or two for the
  collectives), the shim's pool (CXLKIT_MPI_POOL in /dev/shm, coherence `none` as between
  machines) against MPICH over TCP on the veths (UCX_TLS=tcp,self: UCX would otherwise find
  its shared memory between the namespaces): OSU latency 8 B, bandwidth 1 MiB, Allreduce and
  Bcast at 8 B and 64 KiB (tests/mpi/netns_coll.c), all with one rank per host;
- on this host, oversubscribed 2x (4 ranks, 2 pairs, on the CPUs this process may use when
  that is 2): OSU multi_lat 8 B, plain MPICH shared memory against the shim, and the shim
  as its wait policy was before jobs counted their ranks per host (MPI_LOCALNRANKS unset);
  with --policies also a shorter spin, yields, an immediate futex sleep, no sleep;
- the CPU an idle waiting rank costs: rank 0 in MPI_Recv while rank 1 sleeps --idle-s;
- with --shim-before SO: another build of the shim in the same rounds (before/after);
- the floor of any flush-based protocol here (bench/nc_floor.c, built into build/c): the
  one-line handshake between two processes one way, an empty poll, a publish, each 1 MiB
  copy of a rendezvous; above it the messaging layer alone (bench/msg_pingpong.c: 8 B one
  way, 1 MiB sends), both SCHED_FIFO when allowed (the protocol's figure, not the
  scheduler's); shim_coherent is the same pool opened coherent (CXLKIT_MPI_COHERENCE
  =host: what memory that hosts keep coherent, CXL 3 back-invalidation, would give).
One JSON line per run in OUT/runs.jsonl (what, variant, round, load, value, unit); the
medians, ratios and loads in OUT/summary.json and on stdout."""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CB = ROOT / "build" / "c"
OSU = ROOT / "build" / "osu" / "osu_mpich"
COLL = CB / "netns_coll_mpich"
RIG = ROOT / "tests" / "netns" / "rig.sh"
SHIM = CB / "libcxlkit_mpi_mpich.so"
TCP = {"UCX_TLS": "tcp,self", "UCX_NET_DEVICES": "cxk0"}


def load() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def run(cmd: list[str], env: dict, timeout: float) -> str | None:
    """CMD's stdout, or None (said on stderr) when it failed or ran past timeout: one slow run
    on a loaded machine must not end the others. The launcher and its ranks are one process
    group, ended together on a timeout."""
    p = subprocess.Popen(cmd, env=dict(os.environ, **env), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, cwd=ROOT, start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        print(f"bench/netns.py: {' '.join(cmd[-8:])}: past {timeout} s, left out", file=sys.stderr)
        return None
    if p.returncode != 0:
        print(f"bench/netns.py: {' '.join(cmd[-8:])} exited {p.returncode}: {err[-800:]}",
              file=sys.stderr)
        return None
    return out


def across(ppn: int, argv: list[str]) -> list[str]:
    return [str(RIG), "ctl", "mpiexec.mpich", "-launcher", "rsh", "-launcher-exec",
            str(ROOT / "tests/netns/launch.sh"), "-iface", "br0",
            "-hosts", "10.17.0.1,10.17.0.2", "-ppn", str(ppn), "-n", str(2 * ppn), *argv]


def shim_env(pool: str | None) -> dict:
    env = {"LD_PRELOAD": str(SHIM)}
    if pool:
        env.update(CXLKIT_MPI_POOL=pool, CXLKIT_MPI_POOL_MB="256")
    return env


def osu_value(out: str | None, size: int) -> float | None:
    m = re.search(rf"^{size}\s+([0-9.]+)\s*$", out or "", re.M)
    return float(m.group(1)) if m else None


def cross_host(a, rnd: int, emit) -> None:
    pool = f"/dev/shm/cxk-bench-netns-{os.getpid()}.pool"
    variants = {"tcp": dict(TCP), "shim": {**TCP, **shim_env(pool)},
                "shim_coherent": {**TCP, **shim_env(pool), "CXLKIT_MPI_COHERENCE": "host"}}
    if a.shim_before:  # another build of the shim (and the libcxlkit beside it), same rounds
        variants["shim_before"] = {**TCP, **shim_env(pool), "LD_PRELOAD": a.shim_before}
    try:
        for name, env in variants.items():
            out = run(across(1, [str(OSU), "latency", "-n", "8", "-m", "8", "-i",
                                 str(a.lat_iters)]), env, a.timeout)
            emit("lat8_2hosts", name, rnd, osu_value(out, 8), "us")
            out = run(across(1, [str(OSU), "bw", "-n", "1048576", "-m", "1048576", "-i",
                                 str(a.bw_iters)]), env, a.timeout)
            emit("bw1m_2hosts", name, rnd, osu_value(out, 1048576), "MB/s")
            # one rank per host: with two per host MPICH over UCX's TCP did not come back
            # from MPI_Finalize here (after printing its figures), shim or not
            out = run(across(1, [str(COLL), "coll", str(a.coll_iters)]), env, a.timeout)
            for op, nbytes, us in re.findall(r"^(\w+) (\d+) ([0-9.]+)$", out or "", re.M):
                emit(f"{op}{nbytes}_2hosts", name, rnd, float(us), "us")
    finally:
        Path(pool).unlink(missing_ok=True)


def oversubscribed(a, rnd: int, emit) -> None:
    base = ["mpiexec.mpich", "-n", str(2 * len(os.sched_getaffinity(0)))]
    prog = [str(OSU), "multi_lat", "-n", "8", "-m", "8", "-i", str(a.lat_iters)]
    uncounted = base + ["env", "-u", "MPI_LOCALNRANKS"] + prog
    runs = {"mpich_shm": (base + prog, {}),
            "shim": (base + prog, shim_env(None)),
            "shim_uncounted": (uncounted, shim_env(None))}
    # the other policies the wait variables give, each against the cliff's suspects: a
    # shorter spin, yields after the spin instead of sleeps, the futex sleep at once, no
    # sleep at all (each on the policy before the job's ranks were counted)
    for name, var in (("spin20", {"CXLKIT_MSG_SPIN_US": "20"}),
                      ("yield_after_spin", {"CXLKIT_MSG_YIELD_US": "forever"}),
                      ("futex_at_once", {"CXLKIT_MSG_SPIN_US": "0"}),
                      ("spin_forever", {"CXLKIT_MSG_SPIN_US": "forever"})):
        if a.policies:
            runs["shim_uncounted_" + name] = (uncounted, {**shim_env(None), **var})
    for name, (cmd, env) in runs.items():
        emit("lat8_oversub2x", name, rnd, osu_value(run(cmd, env, a.timeout), 8), "us")


def idle_cost(a, rnd: int, emit) -> None:
    cmd = ["mpiexec.mpich", "-n", "2", str(COLL), "idle", str(a.idle_s)]
    for name, env in {"mpich_shm": {}, "shim": shim_env(None)}.items():
        m = re.search(r"^idle ([0-9.]+) ([0-9.]+)$", run(cmd, env, a.timeout + a.idle_s) or "",
                      re.M)
        emit("idle_cpu_share", name, rnd, float(m[2]) / float(m[1]) if m else None,
             "CPU s per s")


def built(name: str, *flags: str) -> Path:
    """build/c/NAME from bench/NAME.c, compiled again when the source is newer."""
    src, exe = ROOT / "bench" / f"{name}.c", CB / name
    newest = max(src.stat().st_mtime, (ROOT / "bench" / "bench_rt.h").stat().st_mtime)
    if not exe.exists() or exe.stat().st_mtime < newest:
        subprocess.run(["cc", "-O2", "-o", str(exe), str(src), *flags], check=True)
    return exe


def floor(a, rnd: int, emit) -> None:
    exe = built("nc_floor")
    pingpong = built("msg_pingpong", f"-I{ROOT / 'include'}", f"-L{CB}", "-lcxlkit",
                     f"-Wl,-rpath,{CB}")
    libs = {"msg": {}}
    if a.shim_before:  # the libcxlkit.so beside that shim
        libs["msg_before"] = {"LD_LIBRARY_PATH": str(Path(a.shim_before).resolve().parent)}
    for name, env in libs.items():
        m = re.search(r'"lat8_us": ([0-9.]+), "bw1m_MBps": ([0-9.]+)',
                      run([str(pingpong), str(a.floor_iters), "1"], env, a.timeout) or "")
        emit("msg_lat8_fifo", name, rnd, float(m[1]) if m else None, "us")
        emit("msg_bw1m_fifo", name, rnd, float(m[2]) if m else None, "MB/s")
    out = run([str(exe), str(a.floor_iters), "1"], {}, a.timeout) or ""
    for line in out.splitlines():
        r = json.loads(line)
        if r["what"] == "copy1m":
            emit("copy1m_alone", r["variant"], rnd, r["GB_per_s"], "GB/s")
            continue
        emit("floor_oneway", r["variant"], rnd, r["oneway_ns"] / 1000, "us")
        emit("floor_poll", r["variant"], rnd, r["poll_ns"], "ns")
        emit("floor_publish", r["variant"], rnd, r["publish_ns"], "ns")


def summarize(rows: list[dict]) -> dict:
    out: dict = {}
    for r in rows:  # a run left out (None) counts in "left_out", not in the figures
        out.setdefault(r["what"], {}).setdefault(r["variant"], [])
        if r["value"] is not None:
            out[r["what"]][r["variant"]].append(r["value"])
    left = [f"{r['what']} {r['variant']} round {r['round']}" for r in rows if r["value"] is None]
    summary = {}
    for what, vs in out.items():
        vs = {v: x for v, x in vs.items() if x}
        if not vs:
            continue
        med = {v: statistics.median(x) for v, x in vs.items()}
        base = "tcp" if "tcp" in med else "mpich_shm"
        summary[what] = {"median": med, "min": {v: min(x) for v, x in vs.items()},
                         "max": {v: max(x) for v, x in vs.items()},
                         "runs": {v: len(x) for v, x in vs.items()},
                         "ratio_to_" + base: {v: m / med[base] for v, m in med.items()
                                               if med.get(base) and v != base}}
    loads = [r["load"] for r in rows]
    summary["load"] = {"min": min(loads), "max": max(loads)} if loads else {}
    summary["left_out"] = left
    return summary


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="build/netns")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--lat-iters", type=int, default=5000)
    ap.add_argument("--bw-iters", type=int, default=20)
    ap.add_argument("--coll-iters", type=int, default=500)
    ap.add_argument("--idle-s", type=float, default=2.0)
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--floor-iters", type=int, default=20000)
    ap.add_argument("--shim-before", metavar="SO",
                    help="hosts: also this build of libcxlkit_mpi_mpich.so (its libcxlkit.so "
                         "beside it), interleaved with the current one")
    ap.add_argument("--only", choices=["hosts", "oversub", "idle", "floor"], action="append")
    ap.add_argument("--policies", action="store_true",
                    help="oversub: also the wait policies the CXLKIT_MSG_* variables give")
    a = ap.parse_args()
    for f in (OSU, COLL, SHIM):
        if not f.exists():
            sys.exit(f"bench/netns.py: {f} missing: run make bench-netns (it builds them)")
    parts = {"hosts": cross_host, "oversub": oversubscribed, "idle": idle_cost, "floor": floor}
    todo = a.only or list(parts)
    if "hosts" in todo and len(subprocess.run([str(RIG), "status"], capture_output=True,
                                               text=True).stdout.splitlines()) != 2:
        sys.exit("bench/netns.py: the 2-host namespace rig is not up: make netns-up "
                 "(or make bench-netns)")
    outdir = ROOT / a.out
    outdir.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=ROOT).stdout.strip()
    with open(outdir / "runs.jsonl", "a") as log:
        def emit(what, variant, rnd, value, unit):
            row = {"what": what, "variant": variant, "round": rnd, "load": load(),
                   "value": value, "unit": unit, "commit": commit, "time": time.time()}
            rows.append(row)
            log.write(json.dumps(row) + "\n")
            log.flush()
            print(json.dumps(row), flush=True)
        for rnd in range(1, a.rounds + 1):
            for name in todo:
                parts[name](a, rnd, emit)
    summary = summarize(rows)
    summary.update(commit=commit, cpus=len(os.sched_getaffinity(0)), rounds=a.rounds)
    (outdir / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
