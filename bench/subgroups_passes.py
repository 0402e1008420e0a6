"""bench/subgroups_passes.py — the CPU a subgroup fetch and flush spend per byte, pass by pass,
and per path the route the store takes now (the payload's checksum folded into the copy)
against the route before it (a copy, then a separate checksum pass on a second thread), in
the same run. Every figure: wall GB/s and this process's CPU seconds (every thread, from
getrusage) per GB moved; medians over rounds with min..max.

  .venv/bin/python bench/subgroups_passes.py --size 36M --reps 6 --rounds 3

Passes alone (one buffer of --size, the store's thread): the copy (aio.copy, guarded), the
checksum (kv_checksum), the copy with the sum folded in (aio.copy_sum), the copy then the
checksum (the previous route's two passes), and the header's pack + check (4 KiB).
The AdamW kernel (--kernel 1, run 7) over one subgroup's state, per GB of state: in place
on a cache buffer, slot to slot (the zero-copy route), with the two payload sums folded into
it or as two passes of their own.
Paths (a flush then a fetch of one subgroup of --size, with the store's hooks): 'folded' gives
the path the store's FlushHeader / FetchCheck (a copy path folds the sum), 'separate' wraps
the same hooks in plain functions (any path then runs them as a pass of their own: the
previous route), 'no sum' passes no hook (the bytes only: the path's floor).
"""
from __future__ import annotations

import argparse
import json
import mmap
import os
import shutil
import statistics
import sys
import tempfile
from typing import Any, Callable

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from subgroups import exit_on_sigterm, parse_count  # noqa: E402
from subgroups_tmpfs import measure  # noqa: E402

from cxlkit import _native  # noqa: E402
from cxlkit import placement as P  # noqa: E402
from cxlkit.train import adam as A  # noqa: E402
from cxlkit.train import aio  # noqa: E402
from cxlkit.train.spill import paths as SP  # noqa: E402
from cxlkit.train.spill.path_base import FetchCheck, FlushHeader, checksum  # noqa: E402
from cxlkit.train.spill.path_mapped import MappedDirPath  # noqa: E402

H = SP.HEADER_NBYTES


def passes(src: np.ndarray, dst: np.ndarray) -> list[tuple[str, Callable[[], Any], int]]:
    payload = src[H:]
    hdr = FlushHeader(src, 3, 1, (src.nbytes - H) // 12, 99, True)
    chk = FetchCheck(src, 3, 1, (src.nbytes - H) // 12, 99, "bench", False)

    def header() -> None:
        hdr.write(12345)
        chk.header()
    return [("copy (aio.copy)", lambda: aio.copy(dst, src), src.nbytes),
            ("checksum (kv_checksum)", lambda: checksum(src), src.nbytes),
            ("copy with the sum folded in (aio.copy_sum)", lambda: aio.copy_sum(dst, src),
             src.nbytes),
            ("copy, then checksum (two passes)",
             lambda: (aio.copy(dst, src), checksum(dst)), src.nbytes),
            ("header pack + check (per request)", header, payload.nbytes)]


def kernel_passes(a: np.ndarray, b: np.ndarray,
                  where: str) -> list[tuple[str, Callable[[], Any], int]]:
    """Run 7: the AdamW kernel over one subgroup's state (fp32 master, exp_avg, exp_avg_sq
    past a 4 KiB header; bf16 grads and param copies), per GB of state: in place on one
    buffer (a cache buffer: the route of run 6, whose fetch and flush are the path rows),
    out of place from slot a to slot b (the zero-copy route), and the same with the two
    payload checksums (the old generation's check, the new one's sum) folded into the
    kernel's pass or as two passes of their own; and in its own slot (the route's steady
    state: out of place only for the first update after a commit), sums folded or not."""
    n = (a.nbytes - H) // 12
    rng = np.random.default_rng(0)
    for x in (a, b):
        f = x[H:H + 12 * n].view(np.float32)
        f[:n] = rng.standard_normal(n)
        f[n:2 * n] = 0.01
        f[2 * n:] = 1e-4
    g = (rng.standard_normal(n, np.float32).view(np.uint32) >> 16).astype(np.uint16)
    c = np.empty(n, np.uint16)
    cfg = A.AdamConfig()
    bf = A.DTYPES["bfloat16"]

    def arrays(x: np.ndarray) -> tuple:
        f = x[H:H + 12 * n].view(np.float32)
        return f[:n], f[n:2 * n], f[2 * n:]
    ta = [(*arrays(a), g, bf, c, bf)]
    offs = [0, 4 * n, 8 * n]

    def folded(dst: np.ndarray) -> Callable[[], None]:
        def run() -> None:
            pin, pout = np.zeros(8, np.uint64), np.zeros(8, np.uint64)
            A.step_raw_into_sum(ta, [arrays(dst)], offs, cfg, 5, in_parts=pin, out_parts=pout)
            _native.sum_parts_add(pin, a[H + 12 * n:], 12 * n)
            _native.sum_parts_add(pout, dst[H + 12 * n:], 12 * n)
            _native.sum_parts_finish(pin, a.nbytes - H)
            _native.sum_parts_finish(pout, dst.nbytes - H)
        return run

    def separate() -> None:
        checksum(a[H:])
        A.step_raw_into(ta, [arrays(b)], cfg, 5)
        checksum(b[H:])
    nb = 12 * n
    ways = [("AdamW kernel in place (a cache buffer)", lambda: A.step_raw(ta, cfg, 5), nb),
            ("AdamW kernel out of place (slot to slot)",
             lambda: A.step_raw_into(ta, [arrays(b)], cfg, 5), nb),
            ("AdamW kernel out of place, sums folded into it", folded(b), nb),
            # the zero-copy route's steady state: a subgroup updated in its own slot (the
            # committed generation is in the other one), both sums folded
            ("AdamW kernel in its own slot, sums folded into it", folded(a), nb),
            ("AdamW kernel in its own slot, sums as two passes",
             lambda: (checksum(a[H:]), A.step_raw(ta, cfg, 5), checksum(a[H:])), nb),
            ("AdamW kernel out of place, sums as two passes", separate, nb)]
    return [(f"{name}, {where}", fn, nbytes) for name, fn, nbytes in ways]


def path_ways(path: SP.SpillPath, buf: np.ndarray) -> list[tuple[str, Callable[[], Any]]]:
    n = (buf.nbytes - H) // 12
    summed = path.checksummed

    def flush_fetch(route: str) -> Callable[[], Any]:
        def run() -> None:
            fh = FlushHeader(buf, 0, 1, n, 99, summed)
            fc = FetchCheck(buf, 0, 1, n, 99, path.name, summed)
            w = {"folded": fh, "separate": lambda: fh(), "no sum": None}[route]
            r = {"folded": fc, "separate": lambda: fc(), "no sum": None}[route]
            path.acquire(True)
            path.write(0, 0, buf, w).wait()
            path.acquire(True)
            path.read(0, 0, buf, r).wait()
        return run
    label = getattr(path, "bench_label", path.kind)
    return [(f"{label}: flush + fetch, {route}", flush_fetch(route))
            for route in ("folded", "separate", "no sum")]


def run_ways(ways: list[tuple[str, Callable[[], Any], int]], reps: int,
             rounds: int) -> dict[str, list[tuple[float, float]]]:
    """Every way, round after round (interleaved: a slow moment of the machine spreads
    over all of them): (GB/s, CPU s per GB) per round."""
    res: dict[str, list[tuple[float, float]]] = {name: [] for name, _, _ in ways}
    for _ in range(rounds):
        for name, fn, nb in ways:
            res[name].append(measure(fn, nb, reps))
    return res


def make_paths(a: argparse.Namespace, slot: int, tmp: list[str]) -> list[Any]:
    out: list[Any] = []
    for spec in a.paths.split(","):
        if spec == "mem":
            p: Any = SP.MemoryPath()
        elif spec == "pool":
            from cxlkit import Pool
            d = tempfile.mkdtemp(prefix="cxlkit-passes-", dir="/dev/shm")
            tmp.append(d)
            Pool(os.path.join(d, "pool"), size=4 * slot + (64 << 20), max_hosts=1).close()
            p = SP.parse_path(f"pool:{os.path.join(d, 'pool')}", lock="off")
        else:
            kind, _, d = spec.partition(":")
            d, _, block = d.partition("@")
            d = tempfile.mkdtemp(prefix="cxlkit-passes-", dir=d)
            tmp.append(d)
            cfg = aio.AioConfig(block_size=parse_count(block) // aio.ALIGN * aio.ALIGN,
                                queue_depth=max(1, (32 << 20) // parse_count(block))) \
                if block else None
            p = MappedDirPath(d, lock="off") if kind == "map" else \
                SP.DirPath(d, lock="off", config=cfg)
        p.bench_label = f"{p.kind} [{spec}]"  # aio: the engine, map: mapped
        p.open(slot, 2, "bench")
        out.append(p)
    return out


def main() -> None:
    exit_on_sigterm()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="36M", help="bytes per subgroup (decimal suffixes)")
    ap.add_argument("--reps", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds over the ways")
    ap.add_argument("--paths", default="aio:/var/tmp,map:/dev/shm,mem,pool",
                    help="aio:DIR[@BLOCK] (DirPath; BLOCK bytes per chunk, queue depth "
                         "32 MiB / BLOCK), map:DIR (MappedDirPath), mem, pool")
    ap.add_argument("--tmpfs", default="/dev/shm", help="where the kernel's mapped slots live")
    ap.add_argument("--kernel", type=int, default=1,
                    help="1: also the AdamW kernel's passes (run 7: in place, slot to slot, "
                    "sums folded or separate)")
    a = ap.parse_args()
    n = H + parse_count(a.size) // aio.ALIGN * aio.ALIGN
    owners = [P.alloc(n, P.default()) for _ in range(2)]
    src, dst = (o.numpy() for o in owners)
    src[:] = np.arange(n, dtype=np.uint64).astype(np.uint8)
    dst[:] = 1
    tmp: list[str] = []
    paths = make_paths(a, n, tmp)
    ways: list[tuple[str, Callable[[], Any], int]] = []
    try:
        ways += passes(src, dst)
        if a.kernel:
            # the store's slots are mapped files (tmpfs, a pool file); the memory tier's
            # and the cache's buffers placed anonymous memory: the tiled fold differs there
            d = tempfile.mkdtemp(prefix="cxlkit-passes-", dir=a.tmpfs)
            tmp.append(d)
            fd = os.open(os.path.join(d, "slots"), os.O_RDWR | os.O_CREAT, 0o600)
            os.posix_fallocate(fd, 0, 2 * n)
            slots = mmap.mmap(fd, 2 * n, flags=mmap.MAP_SHARED | mmap.MAP_POPULATE)
            os.close(fd)
            whole = np.frombuffer(slots, np.uint8)
            ways += kernel_passes(whole[:n], whole[n:], "mapped tmpfs file")
            kbufs = [P.alloc(n, P.default()) for _ in range(2)]
            owners += kbufs
            ways += kernel_passes(*(o.numpy() for o in kbufs), "placed anonymous memory")
        for p in paths:
            # a flush and a fetch move the subgroup twice
            ways += [(name, fn, 2 * n) for name, fn in path_ways(p, src)]
        print(json.dumps(dict(nbytes=n, reps=a.reps, rounds=a.rounds,
                              loadavg=os.getloadavg(), native=_native.__name__)), flush=True)
        res = run_ways(ways, a.reps, a.rounds)
        for name, xs in res.items():
            g, c = [x[0] for x in xs], [x[1] for x in xs]
            print(json.dumps(dict(way=name, GBps=round(statistics.median(g), 3),
                                  GBps_min=round(min(g), 3), GBps_max=round(max(g), 3),
                                  cpu_s_per_GB=round(statistics.median(c), 4),
                                  cpu_s_per_GB_min=round(min(c), 4),
                                  cpu_s_per_GB_max=round(max(c), 4))), flush=True)
        print(json.dumps(dict(loadavg_end=os.getloadavg())), flush=True)
    finally:
        for p in paths:
            p.remove(0)
            p.close()
        for t in tmp:
            if os.path.isdir(t):
                shutil.rmtree(t, ignore_errors=True)
            elif os.path.exists(t):
                os.unlink(t)
        # every closure and hook holds views of the buffers: gone before they are unmapped
        ways.clear()
        del src, dst, ways
        for o in owners:
            o.close()


if __name__ == "__main__":
    main()
