"""cxlkit's memory measurements beside independent references taken in the same run: the
pointer-chase latency against tests/c/ref_chase.c (its own shuffle, loop and timer, built with
cc here), copy bandwidth against numpy's copyto on the same buffers, plus read / write /
nt-write bandwidth at 1 and all threads. One JSON line per run, then a summary line of medians.

  .venv/bin/python bench/memory.py --runs 5 --latency-bytes 64M --bw-bytes 128M
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path

from cxlkit import _native, topology
from cxlkit.bench import machine as M
from cxlkit.bench import memory as BM
from cxlkit.units import parse_count

REF = Path(__file__).resolve().parent.parent / "tests" / "c" / "ref_chase.c"


def size(text: str) -> int:
    """Buffer sizes are binary: 64M = 64 MiB, 512K = 512 KiB."""
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
    return parse_count(t.rstrip("KMG") if mult > 1 else t, "size") * mult


def build_ref(tmp: Path) -> Path | None:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    exe = tmp / "ref_chase"
    subprocess.run([cc, "-O2", "-o", str(exe), str(REF)], check=True)
    return exe


def ref_latency(exe: Path, nbytes: int, loads: int, reps: int, cpu: int, huge: bool) -> float:
    out = subprocess.run([str(exe), str(nbytes), str(loads), str(reps), str(cpu), str(int(huge))],
                         check=True, capture_output=True, text=True).stdout.splitlines()
    return statistics.median(float(line.split()[0]) for line in out)


def one_run(a, exe: Path | None, cpus: list[int]) -> dict:
    cpu = cpus[0]
    rec: dict = {"node": a.node, "cpu": cpu, "threads": len(cpus)}
    with BM.place(a.latency_bytes, a.node, hugepages=a.hugepages) as buf:
        _native.bench_chase_init(buf, 64, a.seed)
        ns = statistics.median(BM.chase_latency(buf, cpu=cpu, target_s=a.target_s, reps=a.reps,
                                                prepared=True))
    rec["latency_ns"] = ns
    if exe is not None:
        loads = max(100_000, int(a.target_s * 1e9 / ns))
        rec["ref_latency_ns"] = ref_latency(exe, a.latency_bytes, loads, a.reps, cpu,
                                            a.hugepages)
        rec["latency_ratio"] = ns / rec["ref_latency_ns"]
    with BM.place(a.bw_bytes, a.node, hugepages=a.hugepages) as d, \
            BM.place(a.bw_bytes, a.node, hugepages=a.hugepages) as s:
        s.numpy()[:] = 1
        for kind in BM.KINDS:
            for t in sorted({1, len(cpus)}):
                oncpu: list[float] = []
                bw = BM.bandwidth(d, s, kind, t, cpus, target_s=a.target_s, reps=a.reps,
                                  oncpu_out=oncpu)
                rec[f"{kind}_gbps_x{t}"] = statistics.median(bw) / 1e9
                rec[f"{kind}_oncpu_gbps_x{t}"] = statistics.median(oncpu) / 1e9
        ref = BM.copy_vs_numpy(d, s, cpu=cpu, pairs=max(5, 2 * a.reps + 1))
        rec["numpy_copy_gbps"] = statistics.median(ref["numpy"]) / 1e9
        rec["numpy_copy_oncpu_gbps"] = statistics.median(ref["numpy_oncpu"]) / 1e9
        rec["copy_ratio"] = ref["ratio"]  # medians of adjacent pairs on one CPU
        rec["copy_oncpu_ratio"] = ref["oncpu_ratio"]
    return rec


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--node", type=int, default=topology.memory_nodes()[0])
    p.add_argument("--latency-bytes", type=size, default=size("64M"),
                   help="chase buffer (e.g. 64M = 64 MiB)")
    p.add_argument("--bw-bytes", type=size, default=size("128M"), help="each bandwidth buffer")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--reps", type=int, default=3, help="repetitions per figure in a run")
    p.add_argument("--target-s", type=float, default=0.05, help="seconds per repetition")
    p.add_argument("--no-hugepages", dest="hugepages", action="store_false")
    p.add_argument("--seed", type=int, default=9)
    a = p.parse_args()
    facts = {f.node: f for f in M.nodes()}
    if a.node not in facts:
        p.error(f"node {a.node} has no memory here ({','.join(map(str, facts))})")
    cpus = list(facts[a.node].initiator_cpus)
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        exe = build_ref(Path(tmp))
        for i in range(a.runs):
            rec = {"run": i, **one_run(a, exe, cpus)}
            runs.append(rec)
            print(json.dumps(rec), flush=True)
    keys = [k for k, v in runs[0].items() if isinstance(v, float)]
    print(json.dumps({"summary": "median of runs", "runs": a.runs, "machine": M.machine()["cpu"],
                      "kernel": os.uname().release, "hugepages": a.hugepages,
                      "latency_bytes": a.latency_bytes, "bw_bytes": a.bw_bytes,
                      **{k: statistics.median(r[k] for r in runs) for k in keys}}))


if __name__ == "__main__":
    main()
