"""Run: tests/netns/with_rig.sh 2 .venv/bin/python bench/lammps_netns.py --out build/netns/lammps
(or `make bench-lammps`, which installs Debian's LAMMPS first). LAMMPS's LJ melt
(bench/lammps_melt.in: a small box, many steps, so the halo exchanges bound a run) under
Debian's `lmp` (Open MPI), in interleaved rounds, every variant once per round:
- across the two namespace hosts of tests/netns/rig.sh, 2 and 4 ranks (1 and 2 a host): the
  PMPI shim's pool (CXLKIT_MPI_POOL in /dev/shm) against Open MPI's TCP between the hosts,
  ranks placed on the machine's CPUs as the one-host job places them (placement());
- the same ranks on this host, plain Open MPI (its shared memory: the limit a pool can reach);
- this host at 3 and 4 ranks, the shim preloaded (it routes nothing on one host) against plain.
Per variant the median loop time ("Loop time of ...") and the load; every run's thermo rows
(printed with all digits) compared with the plain run of the same ranks and the same round:
bit-identical energies or the run is reported as differing. One JSON line per run in
OUT/runs.jsonl; medians, ratios and loads in OUT/summary.json and on stdout."""
from __future__ import annotations

import argparse
import functools
import json
import os
import re
import signal
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RIG = ROOT / "tests" / "netns" / "rig.sh"
SHIM = ROOT / "build" / "c" / "libcxlkit_mpi_openmpi.so"
INPUT = ROOT / "bench" / "lammps_melt.in"
OMPI_ROOT = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
LOOP = re.compile(r"^Loop time of ([0-9.eE+-]+) on (\d+) procs for (\d+) steps", re.M)


def load() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def lmp_args(box: int, steps: int, every: int) -> list[str]:
    return ["lmp", "-in", str(INPUT), "-var", "box", str(box), "-var", "steps", str(steps),
            "-var", "every", str(every), "-log", "none"]


def placement(n: int, out: Path, place: str = "machine") -> list[str]:
    """Where the ranks across the hosts run (--placement machine, the default; launcher: as
    each host's launcher binds them). The two hosts share this machine's CPUs, and each
    host's launcher binds its own ranks from core 0 on: left alone, a 2-rank job puts both
    ranks on core 0 (one CPU for the job) while the same job on one host gets a core per rank.
    So they are placed as the one-host job is, over the machine: rank i on the i-th CPU while
    the ranks fit the CPUs (a rankfile, ranks 0..n/2-1 on the first host), else unbound (the
    one-host job, oversubscribed, binds none)."""
    ppn, cpus = n // 2, sorted(os.sched_getaffinity(0))
    if place == "launcher":
        return ["--map-by", f"ppr:{ppn}:node"]
    if n > len(cpus):
        return ["--map-by", f"ppr:{ppn}:node", "--bind-to", "none"]
    path = out / f"rankfile{n}"
    path.write_text("".join(f"rank {i}=10.17.0.{1 + i // ppn} slot={cpus[i]}\n"
                            for i in range(n)))
    return ["--rankfile", str(path)]


def across(n: int, argv: list[str], env: dict, out: Path, place: str = "machine") -> list[str]:
    """Open MPI's launcher on the bridge's side, n ranks over the two hosts (TCP between them,
    its shared memory within one), placed as placement() says, the environment passed with
    -x. Its ranks yield while they poll, as on one host (where --oversubscribe makes it so):
    the hosts share this machine's CPUs, and a rank spinning through its time slice holds up
    the peer it waits for."""
    iface = os.environ.get("NETNS_PREFIX", "cxk") + "0"
    ppn = n // 2
    cmd = [str(RIG), "ctl", "mpiexec.openmpi", "--mca", "plm_rsh_agent",
           str(ROOT / "tests" / "netns" / "launch.sh"), "--host",
           f"10.17.0.1:{ppn},10.17.0.2:{ppn}", *placement(n, out, place),
           "--mca", "pml", "ob1", "--mca", "btl", "self,vader,tcp",
           "--mca", "btl_tcp_if_include", iface, "--mca", "oob_tcp_if_include", f"br0,{iface}",
           "--mca", "mpi_yield_when_idle", "1"]
    for k, v in env.items():
        cmd += ["-x", f"{k}={v}"]
    return cmd + ["-n", str(n), *argv]


def one_host(n: int, argv: list[str], env: dict, out: Path) -> list[str]:
    cmd = ["mpiexec.openmpi", "--oversubscribe", "--mca", "pml", "ob1",
           "--mca", "btl", "self,vader"]
    for k, v in env.items():
        cmd += ["-x", f"{k}={v}"]
    return cmd + ["-n", str(n), *argv]


def run(cmd: list[str], timeout: float) -> str | None:
    """stdout of cmd (LAMMPS writes its log there), or None, said on stderr, when it failed
    or ran past timeout (the launcher's process group is ended then)."""
    p = subprocess.Popen(cmd, env=dict(os.environ, **OMPI_ROOT), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, cwd=ROOT, start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        print(f"bench/lammps_netns.py: past {timeout} s: {' '.join(cmd[-12:])}", file=sys.stderr)
        return None
    if p.returncode != 0:
        print(f"bench/lammps_netns.py: exit {p.returncode}: {' '.join(cmd[-12:])}: {err[-600:]}",
              file=sys.stderr)
        return None
    return out + err


def thermo(out: str) -> list[str]:
    """The thermo rows (step and energies, as printed) of a LAMMPS log."""
    rows, on = [], False
    for line in out.splitlines():
        if line.split()[:1] == ["Step"]:
            on = True
        elif on and line.startswith("Loop time"):
            on = False
        elif on and line.strip():
            rows.append(line.split())
    return rows


def pool_env(spec: str) -> tuple[str, dict]:
    """--pool-env NAME:K=V[,K=V...] -> (NAME, {K: V}): one more pool variant."""
    name, sep, pairs = spec.partition(":")
    kv = [p.partition("=") for p in pairs.split(",") if p]
    if not sep or not name.isalnum() or not kv or any(not k or not e for k, e, _ in kv):
        raise SystemExit(f"bench/lammps_netns.py: --pool-env {spec!r}: want NAME:K=V[,K=V]")
    return name, {k: v for k, _, v in kv}


def variants(ranks_across: list[int], ranks_one: list[int], pool: str,
             coherent: bool = False, place: str = "machine",
             extra: list[tuple[str, dict]] = ()) -> list[tuple]:
    """(name, ranks, command maker, environment, name of the plain variant it is checked
    against). Every shim run across the hosts makes a pool of its own (pool is removed after
    each: a pool is made for the ranks of the job that creates it). extra: more pool variants
    across the hosts, (label, environment added to the shim's), named pool<ranks>+<label>."""
    shim = {"LD_PRELOAD": str(SHIM), "CXLKIT_MPI_POOL": pool, "CXLKIT_MPI_POOL_MB": "256",
            "CXLKIT_MPI_STATS": "1"}
    out, across_p = [], functools.partial(across, place=place)
    for n in ranks_across:
        out += [(f"tcp{n}", n, across_p, {}, f"tcp{n}"),
                (f"pool{n}", n, across_p, shim, f"tcp{n}"),
                *([(f"poolcoh{n}", n, across_p, {**shim, "CXLKIT_MPI_COHERENCE": "host"},
                    f"tcp{n}")] if coherent else []),
                *[(f"pool{n}+{label}", n, across_p, {**shim, **e}, f"tcp{n}")
                  for label, e in extra],
                (f"shm{n}", n, one_host, {}, f"tcp{n}")]
    for n in ranks_one:
        if n not in ranks_across:
            out.append((f"shm{n}", n, one_host, {}, f"shm{n}"))
        out.append((f"shm{n}+shim", n, one_host, {"LD_PRELOAD": str(SHIM)}, f"shm{n}"))
    return out


def remove(pool: str) -> None:
    """The pool file of a shim run (the two hosts are one pod: pod 0 sees this machine's
    /dev/shm)."""
    Path(pool).unlink(missing_ok=True)


def summarize(rows: list[dict], vs: list[tuple]) -> dict:
    def med(name):
        xs = [r["loop_s"] for r in rows if r["variant"] == name and r["loop_s"] is not None]
        return statistics.median(xs) if xs else None

    def ratio(a, b):
        per = {}
        for r in rows:
            if r["loop_s"] is not None:
                per.setdefault(r["round"], {})[r["variant"]] = r["loop_s"]
        xs = [p[a] / p[b] for p in per.values() if a in p and b in p]
        return statistics.median(xs) if xs else None

    s = {"loads": [r["load"] for r in rows], "median_loop_s": {v[0]: med(v[0]) for v in vs},
         "differing": [f"{r['variant']} round {r['round']}" for r in rows if r["same"] is False],
         "pool_sends_min": {v[0]: min((min(r["pool_sends"], default=0) for r in rows
                                       if r["variant"] == v[0]), default=None)
                            for v in vs if v[0].startswith("pool")},
         "ratios": {}}
    for name, n, *_ in vs:
        if name.startswith("pool"):
            s["ratios"][f"{name}/tcp{n}"] = ratio(name, f"tcp{n}")
            s["ratios"][f"{name}/shm{n}"] = ratio(name, f"shm{n}")
        if name.endswith("+shim"):
            s["ratios"][f"{name}/shm{n}"] = ratio(name, f"shm{n}")
    return s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="build/netns/lammps")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--box", type=int, default=5, help="fcc cells a side (4 atoms each)")
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--every", type=int, default=50, help="steps between thermo rows")
    ap.add_argument("--across", default="2,4", help="ranks over the two hosts")
    ap.add_argument("--one", default="3,4", help="ranks on this host, shim against plain")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--coherent", action="store_true",
                    help="also the pool opened coherent (poolcohN: what coherent CXL memory "
                         "would give, no flushes)")
    ap.add_argument("--placement", choices=["machine", "launcher"], default="machine",
                    help="ranks across the hosts placed as one host's job over the machine's "
                         "CPUs, or as each host's launcher binds them (both hosts from core 0)")
    ap.add_argument("--pool-env", action="append", default=[], metavar="NAME:K=V[,K=V]",
                    help="one more pool variant across the hosts (pool<ranks>+NAME): the "
                         "shim's environment plus these, e.g. yield:CXLKIT_MSG_SLEEP_US=0")
    a = ap.parse_args()
    out = ROOT / a.out
    out.mkdir(parents=True, exist_ok=True)
    pool = f"/dev/shm/cxk-bench-lammps-{os.getpid()}.pool"
    vs = variants([int(x) for x in a.across.split(",") if x],
                  [int(x) for x in a.one.split(",") if x], pool, a.coherent, a.placement,
                  [pool_env(x) for x in a.pool_env])
    if len({v[0] for v in vs}) != len(vs):
        raise SystemExit("bench/lammps_netns.py: --pool-env: a NAME given twice")
    argv = lmp_args(a.box, a.steps, a.every)
    rows = []
    try:
        with open(out / "runs.jsonl", "w") as f:
            for rnd in range(a.rounds):
                seen = {}
                order = vs[rnd % len(vs):] + vs[:rnd % len(vs)]  # a different first each round
                for name, n, make, env, base in order:
                    before = load()
                    text = run(make(n, argv, env, out), a.timeout)
                    remove(pool)
                    m = LOOP.search(text or "")
                    seen[name] = thermo(text or "")
                    pools = [int(x) for x in re.findall(r": on: pool (\d+) sends", text or "")]
                    row = {"variant": name, "ranks": n, "round": rnd, "load": before,
                           "loop_s": float(m[1]) if m else None, "thermo_rows": len(seen[name]),
                           "pool_sends": pools, "same": None}
                    rows.append(row)
                for row in rows[-len(vs):]:  # each against its plain run of this round
                    base = next(v[4] for v in vs if v[0] == row["variant"])
                    if row["variant"] != base and seen[row["variant"]] and seen.get(base):
                        row["same"] = seen[row["variant"]] == seen[base]
                    f.write(json.dumps(row) + "\n")
                    f.flush()
    finally:
        remove(pool)
    s = summarize(rows, vs)
    s.update(box=a.box, steps=a.steps, rounds=a.rounds, atoms=4 * a.box ** 3,
             placement={f"across{n}": placement(n, out, a.placement)
                        for n in sorted({v[1] for v in vs if v[0].startswith("tcp")})})
    (out / "summary.json").write_text(json.dumps(s, indent=1) + "\n")
    print(json.dumps(s, indent=1))


if __name__ == "__main__":
    main()
