"""bench/subgroups_cpu.py — where the CPU of a SubgroupStore step goes, per thread: the CPU
seconds (user + system, /proc/self/task/*/stat) each group of this process's threads spent
per step (the store's thread running the AdamW kernel, the copy workers of the copy paths,
the sum threads, the directory helpers, io_uring's owner and io-wq workers), the bytes the
process read and wrote through syscalls (/proc/self/io), and the whole machine's busy CPU
over the same step (/proc/stat). It answers whether a step is CPU-bound: the process's CPU
seconds per wall second against the cores it could get.

  .venv/bin/python bench/subgroups_cpu.py --sets disk,tmpfs,disk+tmpfs,disk+tmpfs+mem

A set is paths joined by '+' as in bench/subgroups_paths.py (disk, tmpfs, mem, pool: an
object area of a one-host pool file on the tmpfs). One JSON line per set and route: medians
over the steps after the first. --routes: 'in-place' (the store as it is, run 7: a memory
path's subgroups updated where they lie, the sums folded into the kernel; run 8: the disk's
sums too), 'in-place-separate' (the sums a pass of their own, the disk's too), 'folded' (the cache route of run 6: a
copy path folds the payload checksum into its copy) and 'separate' (run 5: the same header
work handed to the path as plain functions, the sum a pass of its own on the path's sum
thread), for comparison in the same run; cpu_s_per_GB is the process's CPU per byte the
step moved, io_cpu_s_per_GB the same without the store's thread (the kernel's CPU).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import subgroups as B  # noqa: E402  (bench/subgroups.py: parse_count)

from cxlkit.train import adam as A  # noqa: E402
from cxlkit.train.spill.path_copy import _CopyPath  # noqa: E402
from cxlkit.train.spill.store import SubgroupStore  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def group_of(name: str) -> str:
    """The job of a thread, from its Python thread name (Python threads: the OS name stays
    the interpreter's on 3.11) or its OS name (io-wq workers; native threads otherwise)."""
    for pat, g in ((r"^MainThread$", "store thread (kernel, waits)"),
                   (r"^cxlkit-spill", "copy worker"), (r"^cxlkit-sum", "sum thread"),
                   (r"^cxlkit-check", "fetch check thread"), (r"^iou-wrk", "io-wq worker"),
                   (r"^iou-sqp", "io_uring sq thread")):
        if re.match(pat, name):
            return g
    return "native thread (aio engine, kernel team)"


def threads_cpu() -> dict[str, float]:
    """CPU seconds per thread group of this process, so far (threads that ended are lost:
    the store's threads live as long as it does)."""
    out: dict[str, float] = {}
    py = {t.native_id: t.name for t in threading.enumerate()}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                stat = f.read()
            with open(f"/proc/self/task/{tid}/comm") as f:
                comm = f.read().strip()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        g = group_of(py.get(int(tid)) or comm)
        out[g] = out.get(g, 0.0) + (int(fields[11]) + int(fields[12])) / TICK
    return out


def machine_busy() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far (/proc/stat, all cores)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]
    return (sum(v) - idle) / TICK, sum(v) / TICK


def proc_io() -> dict[str, int]:
    with open("/proc/self/io") as f:
        return {k: int(v) for k, v in (line.split(": ") for line in f)}


# the store's arguments per route: 'in-place' is the store as it is (run 7: a memory path's
# subgroups updated where they lie, the sums folded into the kernel); 'in-place-separate'
# the same with the sums a pass of their own; 'folded' the cache route of run 6 (every
# subgroup fetched into the host cache and flushed back, the sum folded into the copy);
# 'separate' the cache route of run 5 (the sum a pass of its own on the sum thread)
ROUTES = {"in-place": {}, "in-place-separate": {"sum_in_kernel": False},
          "folded": {"zero_copy": False}, "separate": {"zero_copy": False}}


@contextlib.contextmanager
def route(name: str):
    """'separate': a copy path gets the store's header hooks as plain functions (the sum a
    pass of its own, as before the fold); the other routes: the store's arguments only."""
    if name != "separate":
        yield
        return
    real = _CopyPath._submit

    def submit(self, idx, slot, buf, write, hook=None):
        return real(self, idx, slot, buf, write, None if hook is None else (lambda: hook()))
    _CopyPath._submit = submit
    try:
        yield
    finally:
        _CopyPath._submit = real


def run_set(paths: list[str], params: int, subgroup: int, steps: int, cache: int,
            **kw) -> dict:
    sizes = [subgroup] * (params // subgroup)
    rng = np.random.default_rng(0)
    grads = [(rng.standard_normal(n, np.float32).view(np.uint32) >> 16).astype(np.uint16)
             for n in sizes]
    copies = [np.empty(n, np.uint16) for n in sizes]
    rows = []
    with SubgroupStore(paths, subgroup_params=subgroup, cache_subgroups=cache, **kw) as st:
        st.bind([sizes])
        st.init_params(lambda pid: np.full(sizes[pid], 0.5, np.float32))
        for s in range(1, steps + 1):
            c0, m0, io0, t0 = threads_cpu(), machine_busy(), proc_io(), time.perf_counter()
            m = st.step([A.AdamConfig()], [(g, BF16) for g in grads],
                        [(c, BF16) for c in copies], [s] * len(sizes))
            wall = time.perf_counter() - t0
            c1, m1, io1 = threads_cpu(), machine_busy(), proc_io()
            cpu = {g: c1.get(g, 0.0) - c0.get(g, 0.0) for g in c1}
            rows.append(dict(update_s=m["update_s"], wall_s=wall, compute_s=m["compute_s"],
                             in_place=m["in_place"], in_place_s=m["in_place_s"],
                             cache_hits=m["cache_hits"],
                             io_bytes=m["io_bytes"], io_busy_s=m["io_busy_s"],
                             cpu_s=cpu, process_cores=sum(cpu.values()) / wall,
                             machine_busy_s=m1[0] - m0[0], machine_total_s=m1[1] - m0[1],
                             syscall_read=io1["rchar"] - io0["rchar"],
                             syscall_write=io1["wchar"] - io0["wchar"]))
        plan = st.plan()
    later = rows[1:] or rows
    gb = [r["io_bytes"] / 1e9 for r in later]
    later_wall = sum(r["wall_s"] for r in later)
    groups = sorted({g for r in later for g in r["cpu_s"]})
    return dict(
        update_s=statistics.median(r["update_s"] for r in later),
        update_s_range=[min(r["update_s"] for r in later), max(r["update_s"] for r in later)],
        Mparams_per_s=params / statistics.median(r["update_s"] for r in later) / 1e6,
        in_place=statistics.median(r["in_place"] for r in later),
        in_place_s=statistics.median(r["in_place_s"] for r in later),
        cache_hits=statistics.median(r["cache_hits"] for r in later),
        compute_s=statistics.median(r["compute_s"] for r in later),
        io_GBps=statistics.median(r["io_bytes"] / r["io_busy_s"] / 1e9 for r in later
                                  if r["io_busy_s"]),
        cpu_s_per_step={g: statistics.median(r["cpu_s"].get(g, 0.0) for r in later)
                        for g in groups},
        process_cores=statistics.median(r["process_cores"] for r in later),
        cpu_s_per_GB=statistics.median(sum(r["cpu_s"].values()) / g
                                       for r, g in zip(later, gb) if g),
        # per GB of optimizer state the step updated (the same for every route: a route
        # that moves no bytes has no 'per GB moved'): the whole process, kernel included
        cpu_s_per_state_GB=statistics.median(sum(r["cpu_s"].values()) for r in later)
        / (len(sizes) * (4096 + 12 * subgroup) / 1e9),
        io_cpu_s_per_GB=statistics.median(
            sum(v for k, v in r["cpu_s"].items() if not k.startswith("store")) / g
            for r, g in zip(later, gb) if g),
        # /proc/stat counts in ticks (10 ms): a step shorter than a few ticks reads 0 or one
        # tick, so the machine's figures are taken over all the later steps together; the
        # total over the wall time is the count of online CPUs, read directly when the steps
        # together saw no tick
        machine_cores_busy=sum(r["machine_busy_s"] for r in later) / later_wall,
        machine_cores=(sum(r["machine_total_s"] for r in later) / later_wall
                       if sum(r["machine_total_s"] for r in later) else os.cpu_count()),
        syscall_GB_per_step=statistics.median((r["syscall_read"] + r["syscall_write"]) / 1e9
                                              for r in later),
        subgroups=[q["subgroups"] for q in plan], steps=len(later))


BF16 = A.DTYPES["bfloat16"]


def main() -> None:
    B.exit_on_sigterm()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", default="disk,tmpfs,disk+tmpfs,disk+tmpfs+mem")
    ap.add_argument("--params", default="48M")
    ap.add_argument("--subgroup", default="3M")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--cache", type=int, default=6)
    ap.add_argument("--disk", default="/var/tmp")
    ap.add_argument("--tmpfs", default="/dev/shm")
    ap.add_argument("--routes", default="folded,in-place",
                    help=f"of {', '.join(ROUTES)}, comma-separated (run in turn per set)")
    ap.add_argument("--rounds", type=int, default=1, help="rounds over every set and route")
    a = ap.parse_args()
    params, subgroup = B.parse_count(a.params), B.parse_count(a.subgroup)
    params -= params % subgroup
    tmp = [tempfile.mkdtemp(prefix="cxlkit-sgcpu-", dir=d) for d in (a.disk, a.tmpfs)]
    try:
        spec = {"disk": tmp[0], "tmpfs": tmp[1], "mem": "mem", "pool": "pool"}
        sets = a.sets.split(",")
        for s in sets:
            if any(n not in spec for n in s.split("+")):
                ap.error(f"--sets {s!r}: paths are {', '.join(spec)}")
        if any("pool" in s.split("+") for s in sets):
            spec["pool"] = B.bench_pool("auto", tmp[1], params, subgroup)
        for _ in range(a.rounds):
            for s in sets:
                for r in a.routes.split(","):
                    if r not in ROUTES:
                        ap.error(f"--routes {r!r}: expected one of {', '.join(ROUTES)}")
                    with route(r):
                        row = run_set([spec[n] for n in s.split("+")], params, subgroup,
                                      a.steps, a.cache, **ROUTES[r])
                    print(json.dumps(dict(set=s, route=r, loadavg=os.getloadavg(), **row)),
                          flush=True)
    finally:
        for d in tmp:
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
