"""bench/subgroups.py — SubgroupStore: update throughput (Mparams/s) and effective I/O
throughput over 1, 2, 3 and 4 paths of different bandwidths (a directory on the disk, one on
tmpfs, a memory tier, an object area of a cxlkit pool: `pool:FILE`, here a pool file made on
the tmpfs for the run, on a CXL machine --pool /dev/daxX.Y), each path's own read/write figure measured in the same run (the
store's own microbenchmark, and fio, with the same O_DIRECT choice and io_uring, as the
independent reference: `make -f mk/subgroups.mk bench-subgroups-deps`); the ablation table
(baseline: one path, ascending, fp32 grads written, no locks; + alternating order and cache;
+ delayed upcast; + per-path locks with 2 processes; + multi-path); and DeepSpeed's ZeRO-3
engine with offload_optimizer nvme on each single path (bench/subgroups_deepspeed.py, run in
.venv-ds: --deepspeed-python). Every row in the same run; one JSON line per row.

  .venv/bin/python bench/subgroups.py --params 48M --subgroup 3M --steps 3 --runs 3 \
      --cache 6 --deepspeed-python .venv-ds/bin/python

Effective I/O (the issue's "2 x subgroup bytes / (read + write time)"): the bytes a step
moved to and from the paths / the time at least one request was in flight (io_busy_s, the
union of the requests' submit-to-completion intervals over all paths: several paths busy at
once count once). It is compared with the sum of the used paths' own bandwidths (min of read
and write; store and fio figures both). io_wall_GBps = the same bytes / the update's wall time.
Each row also splits effective / sum into contention (the paths' figures in the step itself,
each over its own busy time, against their own figures alone) times occupancy (the effective
figure against the in-step sum: a path idle while another is busy), see decompose().
Run 7: a subgroup on a memory path (mapped tmpfs, pool object area, memory tier) is updated
where it lies (zero-copy route): no request moves it, so its "read + write time" is the time
its in-place update took on the path (the kernel reading the old generation and writing the
new one, with the header check and the sums), counted in io_busy_s beside the other paths'
requests, and its bytes are the slot's bytes read and written. A path that copies nothing
then shows the kernel's own traffic as its throughput: read the row's update_s and
Mparams_per_s beside the ratio (and the '..., cache route' rows: the store of run 6, in
the same run).
Run 8, `--only capacity`: the multi-path goal under a capacity bound. Each memory path
(tmpfs, memory tier, pool) may hold only --capacity of the state (a fraction of the
subgroups, as the store's `capacities=`), so the disk must carry the rest (half or more
with two memory paths at 0.25); 1, 2 and 3 paths, each on the zero-copy route (the store's
default) and the copying route (zero_copy=False), where a memory path's "read + write time"
is that of real copies through the host cache; 'sums separate' (sum_in_kernel=False) takes
the payload checksums by passes of their own, on the disk too (the default folds the disk's
into the kernel). Each row gives its split (plan: subgroups and capacity per path), the
disk's share (disk_share) and the ceiling the split itself allows (capacity_ceiling_GBps).
Rows repeat --runs times, round-robin (the machine's load drifts); a figure is the median
over every step after the first (which fills the cache) of every run, with min..max.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile

import numpy as np

from cxlkit.train import adam as A
from cxlkit.train.spill import split as S
from cxlkit.train.spill.path_mapped import MEMORY_FS, fs_type
from cxlkit.train.spill.paths import parse_path
from cxlkit.train.spill.store import SubgroupStore

BF16 = A.DTYPES["bfloat16"]
HERE = os.path.dirname(os.path.abspath(__file__))


def parse_count(s: str) -> int:
    s = s.strip().upper()
    mult = {"K": 10**3, "M": 10**6, "G": 10**9}.get(s[-1:], 1)
    return int(float(s[:-1] if mult > 1 else s) * mult)


def _fio_cmd(path: str, rw: str, nbytes: int, direct: bool, engine: str) -> list[str]:
    f = os.path.join(path, "cxlkit-fio.tmp")
    return ["fio", "--name=ref", f"--filename={f}", f"--rw={rw}", "--bs=1M",
            f"--size={nbytes}", "--iodepth=32" if engine == "io_uring" else "--iodepth=1",
            f"--ioengine={engine}", f"--direct={int(direct)}", "--output-format=json",
            "--end_fsync=0"]


def fio_many(jobs: list[tuple[str, str, int, bool, str]]) -> list[float | None]:
    """fio's bandwidth (bytes/s) for each (dir, 'read'|'write', nbytes, direct, ioengine):
    a sequential 1 MiB pass, all the jobs at once (one fio process each, started together),
    None where fio is missing or failed. Reads get their file laid out first."""
    if shutil.which("fio") is None:
        return [None] * len(jobs)
    cmds = [_fio_cmd(*j) for j in jobs]
    try:
        for c, j in zip(cmds, jobs):
            if j[1] == "read":
                subprocess.run(c[:3] + ["--rw=write"] + c[4:], capture_output=True, check=True)
        procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                  text=True) for c in cmds]
        outs = [p.communicate()[0] if p.wait() == 0 else None for p in procs]
        res: list[float | None] = []
        for out, j in zip(outs, jobs):
            try:
                job = json.loads(out[out.index("{"):])["jobs"][0] if out else None
                res.append(float(job[j[1]]["bw_bytes"]) if job else None)
            except (ValueError, KeyError):
                res.append(None)
        return res
    except subprocess.CalledProcessError:
        return [None] * len(jobs)
    finally:
        for j in jobs:
            f = os.path.join(j[0], "cxlkit-fio.tmp")
            if os.path.exists(f):
                os.unlink(f)


def fio(path: str, rw: str, nbytes: int, direct: bool, engine: str = "io_uring") -> float | None:
    """fio's bandwidth (bytes/s) for a sequential 1 MiB read or write of nbytes, or None."""
    return fio_many([(path, rw, nbytes, direct, engine)])[0]


def path_figures(specs: list[str], nbytes: int) -> list[dict]:
    """Each path's own figures: the store's microbenchmark (read, write, CPU s per GB),
    fio as the store does the I/O (a DirPath: io_uring, O_DIRECT where it took; a mapped
    directory: fio's mmap engine), and fio on every directory at once (fio_together_*: the
    concurrent ceiling of the directories on this machine, what a sum can reach at once)."""
    out = []
    for s in specs:
        p = parse_path(s, lock="off")
        p.open(nbytes + 4096)
        r, w = p.measure(nbytes)
        cpu = p.measured_cpu_per_byte
        direct = getattr(p, "direct", None)
        p.close()
        engine = "mmap" if type(p).__name__ == "MappedDirPath" else "io_uring"
        row = dict(path=p.name, spec=s, kind=p.kind, read_GBps=r / 1e9, write_GBps=w / 1e9,
                   direct=direct, cpu_s_per_GB=cpu * 1e9, io=engine if p.kind == "dir" else
                   "copy")
        if p.kind == "dir":
            d = s.split(":", 1)[1] if s.startswith(("aio:", "map:")) else s
            row["dir"] = d
            row["fio_read_GBps"] = (fio(d, "read", nbytes, bool(direct), engine) or 0) / 1e9 \
                or None
            row["fio_write_GBps"] = (fio(d, "write", nbytes, bool(direct), engine) or 0) / 1e9 \
                or None
        out.append(row)
    dirs = [r for r in out if r["kind"] == "dir" and not r["spec"].startswith("aio:")]
    for rw in ("read", "write"):
        got = fio_many([(r["dir"], rw, nbytes, bool(r["direct"]), r["io"]) for r in dirs])
        for r, g in zip(dirs, got):
            r[f"fio_together_{rw}_GBps"] = g / 1e9 if g else None
    return out


TEAM = 0  # --team: threads of an AdamTeam each step's kernel runs on (0: the store's thread)


def run(paths: list[str], params: int, subgroup: int, steps: int, **kw) -> dict:
    """Steps of a SubgroupStore over one group of `params` bf16 params; per-step metrics."""
    team = A.AdamTeam(TEAM) if TEAM else None
    try:
        return _run(paths, params, subgroup, steps, team, **kw)
    finally:
        if team is not None:
            team.close()


def _run(paths: list[str], params: int, subgroup: int, steps: int, team: A.AdamTeam | None,
         **kw) -> dict:
    sizes = [subgroup] * (params // subgroup)
    rng = np.random.default_rng(0)
    grads = [(rng.standard_normal(n, np.float32).view(np.uint32) >> 16).astype(np.uint16)
             for n in sizes]
    copies = [np.empty(n, np.uint16) for n in sizes]
    st = SubgroupStore(paths, subgroup_params=subgroup, **kw)
    try:
        st.bind([sizes])
        st.init_params(lambda pid: np.full(sizes[pid], 0.5, np.float32))
        ms = []
        for s in range(1, steps + 1):
            stop_if_asked()
            ms.append(st.step([A.AdamConfig()], [(g, BF16) for g in grads],
                              [(c, BF16) for c in copies], [s] * len(sizes), team=team))
        plan = st.plan()
    finally:
        st.close()
    return dict(metrics=ms, plan=plan)


def med(xs: list[float]) -> dict:
    return dict(median=statistics.median(xs), min=min(xs), max=max(xs), n=len(xs))


def own_sum(used: list[str], figs: dict[str, list[dict]]) -> float | None:
    """Sum over the used paths of min(read, write) from the store's own microbenchmark
    (median over rounds), GB/s."""
    tot = 0.0
    for p in used:
        rows = figs.get(p)
        if not rows:
            return None
        tot += min(statistics.median(f["read_GBps"] for f in rows),
                   statistics.median(f["write_GBps"] for f in rows))
    return tot


def summarize(name: str, results: list[dict], params: int, figs: dict[str, list[dict]],
              key: str = "row") -> dict:
    """One row from the runs of one configuration (steps after each run's first)."""
    ms = [m for res in results for m in (res["metrics"][1:] or res["metrics"])]
    upd = [m["update_s"] for m in ms]
    busy = [m["io_bytes"] / m["io_busy_s"] / 1e9 for m in ms if m["io_busy_s"]]
    wall = [m["io_bytes"] / m["update_s"] / 1e9 for m in ms]
    last = results[-1]["metrics"][-1]
    used = [p["path"] for p in last["paths"] if p["subgroups"]]
    store_sum = own_sum(used, figs)
    fio_sum = sum_with_fio(used, figs)
    io = statistics.median(busy) if busy else None
    # the store's own start-up figures with all the row's paths busy at once (its split's
    # input): the concurrent ceiling of exactly these paths; one path: its own figure
    tog = [sum(q["together"] if q["together"] else q["bandwidth"]
               for q in res["plan"] if q["path"] in used) / 1e9 for res in results]
    together = statistics.median(tog) if tog else None
    parts = [d for d in (decompose(m, used) for m in ms) if d]
    in_step = statistics.median(d["in_step_GBps"] for d in parts) if parts else None
    row = {key: name, "runs": len(results), "update_s": med(upd)}
    # the paths' figures in the step itself (each over its own busy time, the others
    # running) and the two factors of effective / sum (decompose)
    row.update(paths_in_step_GBps=in_step,
               contention=in_step / store_sum if in_step and store_sum else None,
               occupancy=med([d["occupancy"] for d in parts]) if parts else None,
               overlap=med([d["overlap"] for d in parts]) if parts else None,
               busy_of_update=[statistics.median(d["busy_of_update"][i] for d in parts)
                               for i in range(len(used))] if parts else None,
               paths_sum_fio_together_GBps=sum_fio_together(used, figs))
    ceil = [c for c in (cpu_ceiling(res["plan"], used) for res in results) if c]
    row.update(cpu_ceiling_GBps=med(ceil) if ceil else None,
               cpu_rate=[res["plan"][0]["cpu_rate"] for res in results],
               io_of_cpu_ceiling=io / statistics.median(ceil) if io and ceil else None)
    cc = capacity_ceiling(results[-1]["plan"], figs)
    row.update(capacity_ceiling_GBps=cc,
               io_of_capacity_ceiling=io / cc if io and cc else None)
    row.update(dict(
               Mparams_per_s=params / statistics.median(upd) / 1e6,
               io_GBps=med(busy) if busy else None, io_wall_GBps=med(wall),
               paths_sum_GBps=store_sum, paths_sum_fio_GBps=fio_sum,
               io_of_paths=io / store_sum if io and store_sum else None,
               io_of_paths_fio=io / fio_sum if io and fio_sum else None,
               paths_together_GBps=together,
               io_of_together=io / together if io and together else None,
               # the subgroups on directories that are not memory (the disk)
               disk_share=sum(q["subgroups"] for q in results[-1]["plan"]
                              if q["kind"] == "dir" and fs_type(q["path"]) not in MEMORY_FS)
               / max(1, sum(q["subgroups"] for q in results[-1]["plan"])),
               plan=[dict(path=q["path"], subgroups=q["subgroups"],
                          capacity_subgroups=q.get("capacity_subgroups"),
                          cpu_s_per_GB=(q["cpu_per_byte"] or 0) * 1e9,
                          together_GBps=(q["together"] or 0) / 1e9 or None,
                          cpu_rate=q["cpu_rate"]) for q in results[-1]["plan"]],
               cache_hits=[[m["cache_hits"] for m in res["metrics"]] for res in results],
               # run 7: subgroups updated where they lie, the time those updates took
               # (kernel, checks, sums: the memory path's busy time) and the bytes they
               # read and wrote on the path over it
               in_place=[[m["in_place"] for m in res["metrics"]] for res in results],
               in_place_s=statistics.median(m["in_place_s"] for m in ms),
               in_place_check_s=statistics.median(m["in_place_check_s"] for m in ms),
               fetches=[[m["fetches"] for m in res["metrics"]] for res in results],
               subgroups=last["subgroups"],
               io_wait_s=statistics.median(m["io_wait_s"] for m in ms),
               compute_s=statistics.median(m["compute_s"] for m in ms),
               per_path=[dict(path=p["path"], subgroups=p["subgroups"],
                              busy_GBps=statistics.median(
                                  q["busy_GBps"] for m in ms for q in m["paths"]
                                  if q["path"] == p["path"] and q["busy_GBps"]) if any(
                                  q["busy_GBps"] for m in ms for q in m["paths"]
                                  if q["path"] == p["path"]) else None,
                              lock=p["lock"], lock_wait_s=statistics.median(
                                  q["lock_wait_s"] for m in ms for q in m["paths"]
                                  if q["path"] == p["path"]))
                         for p in last["paths"]]))
    print(json.dumps(row), flush=True)
    return row


def capacity_ceiling(plan: list[dict], figs: dict[str, list[dict]]) -> float | None:
    """GB/s the split itself allows: every path moving its n_i subgroups at its own
    bandwidth B_i (the store's figure, median over rounds), the step lasting as long as the
    slowest, sum n_i / max_i (n_i / B_i) in subgroup units times B. Under a binding capacity
    the disk carries more than its Eq. 1 share and the memory paths finish early, so this
    is below the sum of the bandwidths; without one it equals that sum up to rounding."""
    worst, total = 0.0, 0
    for q in plan:
        n = q["subgroups"]
        if not n:
            continue
        rows = figs.get(q["path"])
        if not rows:
            return None
        b = min(statistics.median(f["read_GBps"] for f in rows),
                statistics.median(f["write_GBps"] for f in rows))
        worst, total = max(worst, n / b), total + n
    return total / worst if worst else None


def decompose(m: dict, used: list[str]) -> dict | None:
    """Why one step's effective I/O (bytes over the union of every request's interval) is
    below the sum of the paths' own bandwidths B_i, split in two exact factors:
    effective = sum_i b_i * (busy_i / union), with b_i = bytes_i / busy_i, path i's
    throughput over its own busy time in this step (the others running). So
    effective / sum B_i = (sum b_i / sum B_i) * (effective / sum b_i): contention (each path
    delivers less while the others and the kernel run: b_i < B_i) times occupancy (a path
    idle while another is busy: busy_i < union). overlap = sum busy_i / union: how many
    paths are busy at once on average (1 = one at a time; N = every path all the time)."""
    qs = [q for q in m["paths"] if q["path"] in used]
    if not m.get("io_busy_s") or not qs or any(not q["busy_s"] for q in qs):
        return None
    eff = m["io_bytes"] / m["io_busy_s"] / 1e9
    in_step = sum(q["busy_GBps"] for q in qs)
    return dict(in_step_GBps=in_step, occupancy=eff / in_step,
                overlap=sum(q["busy_s"] for q in qs) / m["io_busy_s"],
                busy_of_update=[q["busy_s"] / m["update_s"] for q in qs])


def sum_with_fio(used: list[str], figs: dict[str, list[dict]]) -> float | None:
    """Sum of min(read, write) with fio's figure for directories, the store's own for a
    memory tier or pool (fio has no engine for those)."""
    tot = 0.0
    for p in used:
        rows = figs.get(p) or []
        if not rows:
            return None
        key = "fio_" if rows[0]["kind"] == "dir" else ""
        r = [f.get(f"{key}read_GBps") for f in rows]
        w = [f.get(f"{key}write_GBps") for f in rows]
        if None in r or None in w:
            return None
        tot += min(statistics.median(r), statistics.median(w))
    return tot


def cpu_ceiling(plan: list[dict], used: list[str]) -> float | None:
    """GB/s the used paths can carry at once with the CPU this process got while all of them
    were busy (the store's start-up figures: each path's min(read, write) alone, its CPU
    seconds per byte, and cpu_rate, the CPU seconds per second with every path busy): the
    split's fractional knapsack (spill_split). cpu_rate None (the paths together reached
    90 % of their sum alone): the sum alone. The AdamW kernel's own CPU is not counted, so
    this is an upper bound for a step."""
    qs = [q for q in plan if q["path"] in used]
    if not qs or any(q["cpu_per_byte"] is None for q in qs):
        return None
    bw = [min(q["read"], q["write"]) for q in qs]
    return sum(S.knapsack_throughput(bw, [q["cpu_per_byte"] for q in qs],
                                     qs[0]["cpu_rate"])) / 1e9


def sum_fio_together(used: list[str], figs: dict[str, list[dict]]) -> float | None:
    """Sum of min(read, write) of fio on every directory at once (the directories'
    concurrent ceiling here), over the used paths; None when a used path is not a
    directory fio measured together (a memory tier, a pool, the engine on tmpfs)."""
    tot = 0.0
    for p in used:
        rows = figs.get(p) or []
        r = [f.get("fio_together_read_GBps") for f in rows]
        w = [f.get("fio_together_write_GBps") for f in rows]
        if not rows or None in r or None in w:
            return None
        tot += min(statistics.median(r), statistics.median(w))
    return tot


def _child(q, paths, params, subgroup, steps, kw, barrier) -> None:
    barrier.wait()
    q.put(run(paths, params, subgroup, steps, **kw))


def two_procs(paths: list[str], params: int, subgroup: int, steps: int, kw: dict) -> list:
    """Two processes, each with its own store on the same paths."""
    ctx = mp.get_context("spawn")
    q, barrier = ctx.Queue(), ctx.Barrier(2)
    # the same paths, files apart by namespace: the lock (one per path) is what they share
    procs = [ctx.Process(target=_child, args=(q, paths, params, subgroup, steps,
                                               {**kw, "namespace": f"p{i}"}, barrier))
             for i in range(2)]
    for p in procs:
        p.start()
    out = [q.get(timeout=1800) for _ in procs]
    for p in procs:
        p.join()
    return out


def deepspeed_row(py: str, path: str, label: str, params: int, subgroup: int,
                  steps: int) -> dict | None:
    """bench/subgroups_deepspeed.py in DeepSpeed's environment; its JSON row, or None (the
    reason on stderr)."""
    env = {**os.environ, "DS_ACCELERATOR": "cpu",
           "TORCH_EXTENSIONS_DIR": os.environ.get(
               "TORCH_EXTENSIONS_DIR", os.path.join(os.path.dirname(HERE), "build", "ds-ext")),
           "PATH": os.path.dirname(py) + os.pathsep + os.environ["PATH"]}
    r = subprocess.run([py, os.path.join(HERE, "subgroups_deepspeed.py"), "--path", path,
                        "--label", label, "--params", str(params), "--subgroup",
                        str(subgroup), "--steps", str(steps)],
                       env=env, capture_output=True, text=True, check=False)
    rows = [json.loads(x) for x in r.stdout.splitlines() if x.startswith('{"row"')]
    if r.returncode or not rows:
        print(f"DeepSpeed row {label!r} failed (rc {r.returncode}): {r.stderr[-3000:]}",
              file=sys.stderr)
        return None
    return rows[0]


def summarize_ds(label: str, rows: list[dict], params: int, key: str = "row") -> dict:
    upd = [st["update_s"] for r in rows for st in r["steps"][1:] or r["steps"]]
    bwd = [st["backward_s"] for r in rows for st in r["steps"][1:] or r["steps"]]
    out = {key: label}
    out.update(runs=len(rows), engine=rows[0]["engine"],
               deepspeed=rows[0]["deepspeed"], optimizer=rows[0]["optimizer"],
               swapper=rows[0]["swapper"], subgroups=rows[0]["subgroups"],
               update_s=med(upd), Mparams_per_s=params / statistics.median(upd) / 1e6,
               io_wall_GBps=rows[0]["io_GBps"] * rows[0]["update_s"] / statistics.median(upd),
               backward_s=med(bwd))
    print(json.dumps(out), flush=True)
    return out


def configs(a: argparse.Namespace, disk: str, shm: str, pool: str | None = None,
            shm_aio: str | None = None) -> list[tuple[str, str, list, dict]]:
    """(row, 'one' or 'two' processes, paths, store kwargs), in the order they run. pool: a
    'pool:FILE' path spec, or None (no pool rows). shm: the tmpfs directory as the store
    takes it (mapped); shm_aio: 'aio:DIR', a tmpfs directory through the async I/O engine
    (the rows of the store before the mapped path)."""
    shm_aio = shm_aio or f"aio:{shm}"
    best = dict(cache_subgroups=a.cache, order="alternate", upcast="delayed",
                lock="exclusive")
    out = []
    if "paths" in a.only:
        eq1 = {**best, "split": "eq1"}
        out += [("1 path: disk", "one", [disk], best),
                ("1 path: tmpfs", "one", [shm], best),
                ("1 path: tmpfs, async I/O engine", "one", [shm_aio], best),
                ("2 paths: disk+tmpfs", "one", [disk, shm], best),
                ("2 paths: disk+tmpfs, async I/O engine on tmpfs", "one", [disk, shm_aio], best),
                ("3 paths: disk+tmpfs+mem", "one", [disk, shm, a.mem], best),
                ("3 paths: disk+tmpfs+mem, Eq. 1 split", "one", [disk, shm, a.mem], eq1)]
        if pool:
            out += [("1 path: pool", "one", [pool], best),
                    ("2 paths: disk+pool", "one", [disk, pool], best),
                    ("3 paths: disk+tmpfs+pool", "one", [disk, shm, pool], best),
                    ("4 paths: disk+tmpfs+mem+pool", "one", [disk, shm, a.mem, pool], best)]
        # run 7: the store updates a memory path's subgroups in place (zero_copy, sums folded
        # into the kernel); 'cache route' is the store of run 6 (every subgroup fetched into
        # the host cache and flushed back, the sum folded into the copy), 'sums separate'
        # the zero-copy route with the checksums a pass of their own
        cache = {**best, "zero_copy": False}
        sep = {**best, "sum_in_kernel": False}
        out += [("1 path: tmpfs, cache route", "one", [shm], cache),
                ("1 path: tmpfs, in place, sums separate", "one", [shm], sep),
                ("2 paths: disk+tmpfs, cache route", "one", [disk, shm], cache),
                ("3 paths: disk+tmpfs+mem, cache route", "one", [disk, shm, a.mem], cache),
                ("1 path: mem", "one", [a.mem], best),
                ("1 path: mem, cache route", "one", [a.mem], cache)]
        if pool:
            out += [("1 path: pool, cache route", "one", [pool], cache),
                    ("2 paths: disk+pool, cache route", "one", [disk, pool], cache),
                    ("3 paths: disk+tmpfs+pool, cache route", "one", [disk, shm, pool],
                     cache)]
    if "capacity" in a.only:
        out += capacity_rows(a, disk, shm, pool, best)
    if "ablation" in a.only:
        base = dict(cache_subgroups=3, order="ascending", upcast="eager", lock="off")
        alt = {**base, "order": "alternate", "cache_subgroups": a.cache}
        up = {**alt, "upcast": "delayed"}
        out += [("baseline: 1 path, ascending, fp32 grads written, no locks", "one", [disk],
                 base),
                ("+ alternating order and cache", "one", [disk], alt),
                ("+ delayed upcast", "one", [disk], up),
                # two processes, each with the whole model's subgroups, on the same path
                ("+ delayed upcast, 2 processes, no locks", "two", [disk], up),
                ("+ per-path locks, 2 processes", "two", [disk], {**up, "lock": "exclusive"}),
                ("+ multi-path (disk+tmpfs+mem), 2 processes", "two", [disk, shm, a.mem],
                 {**up, "lock": "exclusive"})]
    return out


def capacity_rows(a: argparse.Namespace, disk: str, shm: str, pool: str | None,
                  best: dict) -> list[tuple[str, str, list, dict]]:
    """Run 8's rows: the memory paths capped at a.cap_bytes each (--capacity of the state),
    the disk unbounded; zero-copy and copying routes."""
    cap = a.cap_bytes
    sets = [("1 path: disk", [disk]), ("2 paths: disk+tmpfs", [disk, shm]),
            ("3 paths: disk+tmpfs+mem", [disk, shm, a.mem])]
    if pool:
        sets += [("2 paths: disk+pool", [disk, pool]),
                 ("3 paths: disk+tmpfs+pool", [disk, shm, pool])]
    out = []
    for name, ps in sets:
        caps = [None] + [cap] * (len(ps) - 1)
        routes = [("zero-copy", dict(zero_copy=True)), ("copying", dict(zero_copy=False))]
        if name.startswith(("1 path", "3 paths: disk+tmpfs+mem")):
            # the checksums as passes of their own (run 7's disk route; the default folds the
            # disk's into the kernel, run 8)
            routes.append(("zero-copy, sums separate", dict(sum_in_kernel=False)))
        for route, kw in routes:
            out.append((f"capped {a.capacity:g}: {name}, {route}", "one", ps,
                        {**best, "capacities": caps, **kw}))
    return out


def bench_pool(spec: str, shm: str, params: int, subgroup: int) -> str | None:
    """The 'pool:...' path spec of the pool rows, or None ('off'). 'auto': a pool file in the
    run's tmpfs directory (removed with it), one host, room for every subgroup's two slots in
    each of two processes plus the start-up probe (tmpfs only allocates what is written)."""
    if spec == "off":
        return None
    if spec != "auto":
        return f"pool:{spec}"
    from cxlkit import Pool
    from cxlkit.train.spill import layout as L
    from cxlkit.train.spill.paths import HEADER_NBYTES
    slot = HEADER_NBYTES + L.pad(12 * subgroup)
    nbytes = 2 * (2 * (params // subgroup) + 2) * (slot + (1 << 20)) + (64 << 20)
    path = os.path.join(shm, "pool")
    Pool(path, size=nbytes, max_hosts=1).close()
    return f"pool:{path}"


_STOPPED: list[int] = []  # the signal SIGTERM's handler saw, for stop_if_asked


def exit_on_sigterm() -> None:
    """SIGTERM (`timeout`, as the documented commands run these benches) raises SystemExit,
    so the scripts' finally blocks remove their scratch directories: killed by the default
    action, a run left gigabytes of subgroup files in /dev/shm. The handler runs wherever the
    main thread is; where that is a __del__ or a weakref callback, Python prints the
    SystemExit and drops it, so the loops call stop_if_asked between steps as well."""
    def stop(signum: int, _frame: object) -> None:
        _STOPPED.append(signum)
        sys.exit(128 + signum)
    signal.signal(signal.SIGTERM, stop)


def stop_if_asked() -> None:
    """Exit as SIGTERM asked if its handler's SystemExit was dropped (see exit_on_sigterm)."""
    if _STOPPED:
        sys.exit(128 + _STOPPED[0])


def main() -> None:
    exit_on_sigterm()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", default="96M", help="params (decimal suffixes)")
    ap.add_argument("--subgroup", default="12M", help="params per subgroup")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--runs", type=int, default=3, help="rounds over every row")
    ap.add_argument("--cache", type=int, default=4, help="host cache (subgroups), rows 2+")
    ap.add_argument("--disk", default="/var/tmp", help="a directory on the disk")
    ap.add_argument("--tmpfs", default="/dev/shm", help="a directory on tmpfs")
    ap.add_argument("--mem", default="mem", help="memory tier path spec")
    ap.add_argument("--pool", default="auto",
                    help="a cxlkit pool for the pool rows: 'auto' (a pool file made on --tmpfs "
                    "for the run and removed after), a pool path or name, or 'off'")
    ap.add_argument("--only", default="paths,ablation,deepspeed",
                    help="paths, ablation, deepspeed, capacity")
    ap.add_argument("--capacity", type=float, default=0.25,
                    help="capacity rows: the fraction of the state's subgroups each memory "
                    "path (tmpfs, mem, pool) may hold; the disk carries the rest")
    ap.add_argument("--deepspeed-python", default=None,
                    help="the python of an environment with DeepSpeed (.venv-ds/bin/python, "
                    "mk/deepspeed.mk), for its rows")
    ap.add_argument("--rows", default=None,
                    help="only these rows, by name, '|'-separated (and the DeepSpeed rows "
                    "when deepspeed is in --only): to split the matrix into commands that "
                    "each hold the bench lock a few minutes")
    ap.add_argument("--team", type=int, default=0,
                    help="run each step's kernel on an AdamTeam of this many threads (as "
                    "SpilledAdamW does for large models); 0: on the store's thread")
    a = ap.parse_args()
    global TEAM
    TEAM = a.team
    params, subgroup = parse_count(a.params), parse_count(a.subgroup)
    params -= params % subgroup
    if not 0 <= a.capacity <= 1:
        ap.error(f"--capacity {a.capacity}: expected a fraction of the state in 0..1")
    # bytes for floor(capacity * M) subgroups of two slots each on a memory path
    from cxlkit.train.spill import layout as L
    from cxlkit.train.spill.paths import HEADER_NBYTES
    a.cap_bytes = int(a.capacity * (params // subgroup)) * 2 * (HEADER_NBYTES +
                                                                L.pad(12 * subgroup))
    tmp = [tempfile.mkdtemp(prefix="cxlkit-sgbench-", dir=d) for d in (a.disk, a.tmpfs)]
    try:
        disk, shm = tmp
        pool = bench_pool(a.pool, shm, params, subgroup)
        print(json.dumps(dict(machine=dict(cpus=os.cpu_count(), loadavg=os.getloadavg(),
                                           kernel=os.uname().release),
                              params=params, subgroup=subgroup, steps=a.steps,
                              runs=a.runs, team=a.team)), flush=True)
        shm_aio = os.path.join(shm, "aio")
        os.mkdir(shm_aio)
        shm_aio = f"aio:{shm_aio}"
        rows = configs(a, disk, shm, pool, shm_aio)
        if a.rows:
            want = a.rows.split("|")
            unknown = set(want) - {r[0] for r in rows}
            if unknown:
                ap.error(f"--rows: no such row {sorted(unknown)} (with --only {a.only})")
            rows = [r for r in rows if r[0] in want]
        ds = [(f"DeepSpeed ZeRO-3, nvme_path = {n}", p) for n, p in
              (("disk", disk), ("tmpfs", shm))] \
            if a.deepspeed_python and "deepspeed" in a.only else []
        figs: dict[str, list[dict]] = {}
        res: dict[str, list[dict]] = {r[0]: [] for r in rows + [(n, "") for n, _ in ds]}
        for rnd in range(a.runs):
            for f in path_figures([disk, shm, shm_aio, a.mem] + ([pool] if pool else []),
                                  12 * subgroup):
                figs.setdefault(f["path"], []).append(f)
                print(json.dumps(dict(path_figure=f, round=rnd)), flush=True)
            for name, procs, ps, kw in rows:
                print(f"round {rnd}: {name}", file=sys.stderr, flush=True)  # progress
                if procs == "one":
                    res[name].append(run(ps, params, subgroup, a.steps, **kw))
                else:
                    res[name] += two_procs(ps, params, subgroup, a.steps, kw)
            for name, p in ds:
                print(f"round {rnd}: {name}", file=sys.stderr, flush=True)
                r = deepspeed_row(a.deepspeed_python, p, name, params, subgroup, a.steps)
                if r is not None:
                    res[name].append(r)
            print(json.dumps(dict(round=rnd, loadavg=os.getloadavg())), flush=True)
            # every round's rows so far (the last round's are the result: "row"; the earlier
            # ones, "partial_row", are there for a run that is cut short)
            key = "row" if rnd == a.runs - 1 else "partial_row"
            out = {name: summarize(name, res[name], params, figs, key)
                   for name, *_ in rows}
            out.update({n: summarize_ds(n, res[n], params, key) for n, _ in ds if res[n]})
            compare(out, "compare" if key == "row" else "partial_compare")
        print(json.dumps(dict(loadavg_end=os.getloadavg())), flush=True)
    finally:
        for d in tmp:
            shutil.rmtree(d, ignore_errors=True)


def compare(out: dict[str, dict], key: str = "compare") -> None:
    """cxlkit against DeepSpeed, update time ratios (medians of the same run)."""
    pairs = [("1 path: disk", "DeepSpeed ZeRO-3, nvme_path = disk"),
             ("1 path: tmpfs", "DeepSpeed ZeRO-3, nvme_path = tmpfs"),
             ("1 path: tmpfs, async I/O engine", "DeepSpeed ZeRO-3, nvme_path = tmpfs"),
             ("2 paths: disk+tmpfs", "DeepSpeed ZeRO-3, nvme_path = disk"),
             ("2 paths: disk+tmpfs", "DeepSpeed ZeRO-3, nvme_path = tmpfs")]
    for mine, theirs in pairs:
        if mine in out and theirs in out:
            x = out[theirs]["update_s"]["median"] / out[mine]["update_s"]["median"]
            print(json.dumps({key: f"{mine} vs {theirs}", "speedup": x}), flush=True)


if __name__ == "__main__":
    sys.exit(main())
