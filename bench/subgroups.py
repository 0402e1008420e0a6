"""bench/subgroups.py — SubgroupStore: update throughput (Mparams/s) and effective I/O
throughput over 1, 2 and 3 paths of different bandwidths (a directory on the disk, one on
tmpfs, a memory tier), each path's own read/write figure measured in the same run (the
store's own microbenchmark, and fio as the independent reference when installed: `make -f
mk/subgroups.mk bench-subgroups-deps`), and the ablation table (baseline: one path, ascending,
fp32 grads written, no locks; + alternating order and cache; + delayed upcast; + per-path
locks with 2 processes; + multi-path), every row in the same run. One JSON line per row.

  .venv/bin/python bench/subgroups.py --params 96M --subgroup 12M --steps 4

Effective I/O = bytes the step moved to and from the paths / the update's wall time; the
goal compares it with the sum of the used paths' own bandwidths (min of read and write).
A row's figure is the median over its steps after the first (which fills the cache), with
the spread (min..max) beside it.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

from cxlkit.train import adam as A
from cxlkit.train.spill_paths import parse_path
from cxlkit.train.subgroups import SubgroupStore

BF16 = A.DTYPES["bfloat16"]


def parse_count(s: str) -> int:
    s = s.strip().upper()
    mult = {"K": 10**3, "M": 10**6, "G": 10**9}.get(s[-1:], 1)
    return int(float(s[:-1] if mult > 1 else s) * mult)


def fio(path: str, rw: str, nbytes: int, direct: bool) -> float | None:
    """fio's bandwidth (bytes/s) for a sequential 1 MiB read or write of nbytes, or None."""
    if shutil.which("fio") is None:
        return None
    f = os.path.join(path, "cxlkit-fio.tmp")
    cmd = ["fio", "--name=ref", f"--filename={f}", f"--rw={rw}", "--bs=1M",
           f"--size={nbytes}", "--iodepth=32", "--ioengine=io_uring" if direct else
           "--ioengine=psync", f"--direct={int(direct)}", "--output-format=json",
           "--end_fsync=0"]
    try:
        if rw == "read":  # lay the file out first
            subprocess.run(cmd[:3] + ["--rw=write"] + cmd[4:], capture_output=True, check=True)
        out = subprocess.run(cmd, capture_output=True, check=True, text=True).stdout
        job = json.loads(out[out.index("{"):])["jobs"][0]
        return float(job["read" if rw == "read" else "write"]["bw_bytes"])
    except (subprocess.CalledProcessError, ValueError, KeyError):
        return None
    finally:
        if os.path.exists(f):
            os.unlink(f)


def path_figures(specs: list[str], nbytes: int) -> list[dict]:
    out = []
    for s in specs:
        p = parse_path(s, lock="off")
        p.open(nbytes + 4096)
        r, w = p.measure(nbytes)
        direct = getattr(p, "direct", None)
        p.close()
        row = dict(path=s, kind=p.kind, read_GBps=r / 1e9, write_GBps=w / 1e9, direct=direct)
        if p.kind == "dir":
            d = not s.startswith("/dev/shm")
            row["fio_read_GBps"] = (fio(s, "read", nbytes, d) or 0) / 1e9 or None
            row["fio_write_GBps"] = (fio(s, "write", nbytes, d) or 0) / 1e9 or None
        out.append(row)
    return out


def run(paths: list[str], params: int, subgroup: int, steps: int, **kw) -> dict:
    """Steps of a SubgroupStore over one group of `params` bf16 params; per-step metrics."""
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
            ms.append(st.step([A.AdamConfig()], [(g, BF16) for g in grads],
                              [(c, BF16) for c in copies], [s] * len(sizes)))
        plan = st.plan()
    finally:
        st.close()
    return dict(metrics=ms, plan=plan)


def summarize(name: str, res: dict, params: int, figs: dict[str, dict], **extra) -> dict:
    ms = res["metrics"][1:] or res["metrics"]
    upd = [m["update_s"] for m in ms]
    io = [m["io_bytes"] / m["update_s"] / 1e9 for m in ms]
    used = [p["path"] for p in ms[-1]["paths"] if p["subgroups"]]
    own = sum(min(figs[p]["read_GBps"], figs[p]["write_GBps"]) for p in used if p in figs)
    row = dict(row=name, update_s=statistics.median(upd), update_s_min=min(upd),
               update_s_max=max(upd), Mparams_per_s=params / statistics.median(upd) / 1e6,
               io_GBps=statistics.median(io), io_GBps_min=min(io), io_GBps_max=max(io),
               paths_sum_GBps=own or None,
               io_of_paths=statistics.median(io) / own if own else None,
               cache_hits=[m["cache_hits"] for m in res["metrics"]],
               fetches=[m["fetches"] for m in res["metrics"]],
               subgroups=ms[-1]["subgroups"], io_wait_s=statistics.median(
                   m["io_wait_s"] for m in ms),
               compute_s=statistics.median(m["compute_s"] for m in ms),
               per_path=[dict(path=p["path"], subgroups=p["subgroups"],
                              read_GBps=p["read_GBps"], write_GBps=p["write_GBps"],
                              lock_wait_s=p["lock_wait_s"]) for p in ms[-1]["paths"]],
               **extra)
    print(json.dumps(row), flush=True)
    return row


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


def deepspeed_child(path: str, params: int, subgroup: int, steps: int, qd: int) -> None:
    """DeepSpeed 0.19's aio op (aio_handle, the op its PartitionedOptimizerSwapper drives)
    in that swapper's sequence, one path: per subgroup, swap in fp32 master, exp_avg,
    exp_avg_sq and the fp32 grads (one file each), wait, update (cxlkit's kernel, the same
    for both), swap the three states out, wait; ascending, no cache. The fp32 grads are
    swapped out before the step (DeepSpeed writes them during backward): timed apart."""
    import torch
    from deepspeed.ops.op_builder import AsyncIOBuilder
    from deepspeed.runtime.swap_tensor.utils import swap_in_tensors, swap_out_tensors

    import cxlkit

    h = AsyncIOBuilder().load().aio_handle(1 << 20, qd, False, True, 1)
    m = params // subgroup
    bufs = [cxlkit.alloc(4 * subgroup) for _ in range(4)]  # page-aligned, as O_DIRECT wants
    tens = [torch.frombuffer(b, dtype=torch.float32) for b in bufs]
    names = ["master", "m", "v", "g"]
    files = [[os.path.join(path, f"ds-{k}-{n}.swp") for n in names] for k in range(m)]
    for k in range(m):  # initial state
        tens[0].fill_(0.5)
        tens[1].zero_()
        tens[2].zero_()
        tens[3].zero_()
        swap_out_tensors(h, tens, files[k])
        assert h.wait() == 4
    rng = np.random.default_rng(0)
    g16 = (rng.standard_normal(subgroup, np.float32).view(np.uint32) >> 16).astype(np.uint16)
    copy = np.empty(subgroup, np.uint16)
    cfg = A.AdamConfig()
    rows = []
    for step in range(1, steps + 1):
        t0 = time.perf_counter()
        for k in range(m):  # the grads, upcast and swapped out (backward's part)
            tens[3].numpy().view(np.uint32)[:] = g16.astype(np.uint32) << 16
            swap_out_tensors(h, [tens[3]], [files[k][3]])
            assert h.wait() == 1
        t1 = time.perf_counter()
        for k in range(m):
            swap_in_tensors(h, tens, files[k])
            assert h.wait() == 4
            p, mm, v, g = (t.numpy() for t in tens)
            A.step_raw([(p, mm, v, g, A.DTYPES["float32"], copy, BF16)], cfg, step)
            swap_out_tensors(h, tens[:3], files[k][:3])
            assert h.wait() == 3
        t2 = time.perf_counter()
        rows.append((t1 - t0, t2 - t1))
    for k in range(m):
        for f in files[k]:
            os.unlink(f)
    del tens
    for b in bufs:
        b.close()
    upd = [r[1] for r in rows[1:] or rows]
    moved = m * 4 * subgroup * 7  # 4 tensors in, 3 out
    print(json.dumps(dict(
        row="DeepSpeed 0.19 aio op in its swapper's sequence, 1 path (disk)",
        update_s=statistics.median(upd), update_s_min=min(upd), update_s_max=max(upd),
        Mparams_per_s=params / statistics.median(upd) / 1e6,
        io_GBps=moved / statistics.median(upd) / 1e9,
        grad_swap_out_s=statistics.median(r[0] for r in rows[1:] or rows))), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", default="96M", help="params (decimal suffixes)")
    ap.add_argument("--subgroup", default="12M", help="params per subgroup")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--cache", type=int, default=4, help="host cache (subgroups), rows 2+")
    ap.add_argument("--disk", default="/var/tmp", help="a directory on the disk")
    ap.add_argument("--tmpfs", default="/dev/shm", help="a directory on tmpfs")
    ap.add_argument("--mem", default="mem", help="memory tier path spec")
    ap.add_argument("--only", default="paths,ablation", help="paths, ablation, deepspeed")
    ap.add_argument("--deepspeed-path", default=None,
                    help="a directory DeepSpeed is installed in (pip --target), for its row")
    ap.add_argument("--deepspeed-child", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.deepspeed_child:
        deepspeed_child(a.deepspeed_child, parse_count(a.params), parse_count(a.subgroup),
                        a.steps, 32)
        return
    params, subgroup = parse_count(a.params), parse_count(a.subgroup)
    params -= params % subgroup
    tmp = [tempfile.mkdtemp(prefix="cxlkit-sgbench-", dir=d) for d in (a.disk, a.tmpfs)]
    try:
        disk, shm = tmp
        load = os.getloadavg()
        print(json.dumps(dict(machine=dict(cpus=os.cpu_count(), loadavg=load,
                                           kernel=os.uname().release),
                              params=params, subgroup=subgroup, steps=a.steps)), flush=True)
        figs = {f["path"]: f for f in path_figures([disk, shm, a.mem], 12 * subgroup)}
        for f in figs.values():
            print(json.dumps(dict(path_figure=f)), flush=True)
        best = dict(cache_subgroups=a.cache, order="alternate", upcast="delayed",
                    lock="exclusive")
        if "paths" in a.only:
            for name, ps in (("1 path: disk", [disk]), ("2 paths: disk+tmpfs", [disk, shm]),
                             ("3 paths: disk+tmpfs+mem", [disk, shm, a.mem])):
                summarize(name, run(ps, params, subgroup, a.steps, **best), params, figs)
        if "ablation" in a.only:
            base = dict(cache_subgroups=3, order="ascending", upcast="eager", lock="off")
            rows = [("baseline: 1 path, ascending, fp32 grads written, no locks", base),
                    ("+ alternating order and cache", {**base, "order": "alternate",
                                                       "cache_subgroups": a.cache}),
                    ("+ delayed upcast", {**base, "order": "alternate", "cache_subgroups": a.cache,
                                          "upcast": "delayed"})]
            for name, kw in rows:
                summarize(name, run([disk], params, subgroup, a.steps, **kw), params, figs)
            last = rows[-1][1]
            for lock in ("off", "exclusive"):
                # each process has the whole model's subgroups (a cache smaller than them)
                res = two_procs([disk], params, subgroup, a.steps, {**last, "lock": lock})
                for i, r in enumerate(res):
                    summarize(f"+ per-path locks, 2 processes (lock {lock}, process {i})", r,
                              params, figs)
            summarize("+ multi-path (disk+tmpfs+mem)",
                      run([disk, shm, a.mem], params, subgroup, a.steps,
                          **{**last, "lock": "exclusive"}), params, figs)
        if a.deepspeed_path and "deepspeed" in a.only:
            env = {**os.environ, "PYTHONPATH": a.deepspeed_path,
                   "TORCH_EXTENSIONS_DIR": os.environ.get(
                       "TORCH_EXTENSIONS_DIR", os.path.join(a.deepspeed_path, "_ext")),
                   "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]}
            subprocess.run([sys.executable, __file__, "--deepspeed-child", disk, "--params",
                            str(params), "--subgroup", str(subgroup), "--steps", str(a.steps)],
                           env=env, check=False)
            for name, ps in (("cxlkit 1 path (disk), same run", [disk]),
                             ("cxlkit 2 paths (disk+tmpfs), same run", [disk, shm])):
                summarize(name, run(ps, params, subgroup, a.steps, **best), params, figs)
        print(json.dumps(dict(loadavg_end=os.getloadavg())), flush=True)
    finally:
        for d in tmp:
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
