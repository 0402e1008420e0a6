"""bench/subgroups_tmpfs.py — where a subgroup's bytes go on a tmpfs directory: one JSON line
per way of moving a --size buffer to and from a file there, with the wall GB/s and the CPU
seconds per GB this process spent (every thread: the engine's, io-wq kernel workers, copy
workers), and the same for a plain memory copy and the payload checksum as references.

  .venv/bin/python bench/subgroups_tmpfs.py --dir /dev/shm --size 36M --reps 8 --rounds 3

Ways: os.preadv / os.pwrite of the whole buffer (one syscall); the async I/O engine
(io_uring and thread pool, several block sizes / queue depths, O_DIRECT as the store opens
the file, tmpfs takes it since Linux 6.6); the file mapped (MAP_POPULATE) and moved by numpy
copies (the MappedDirPath way); fio is bench/subgroups.py's. On a shared machine wall GB/s
swings with the load; CPU s per GB is what a step on few cores pays.
"""
from __future__ import annotations

import argparse
import json
import mmap
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from subgroups import exit_on_sigterm, parse_count  # noqa: E402

from cxlkit import placement as P  # noqa: E402
from cxlkit.train import aio  # noqa: E402
from cxlkit.train.spill.paths import checksum  # noqa: E402


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def measure(fn, nbytes: int, reps: int) -> tuple[float, float]:
    """(wall GB/s, CPU s per GB) over reps calls of fn, each moving nbytes, after one
    untimed call (pages touched, workers started). bench/subgroups_passes.py uses it too."""
    fn()
    c0, t0 = cpu_seconds(), time.perf_counter()
    for _ in range(reps):
        fn()
    c1, t1 = cpu_seconds(), time.perf_counter()
    gb = nbytes * reps / 1e9
    return gb / (t1 - t0), (c1 - c0) / gb


def ways(fd: int, buf: np.ndarray, other: np.ndarray, mapped: np.ndarray) -> list:
    out = [("memcpy (numpy, reference)", lambda: np.copyto(other, buf)),
           ("checksum (payload sum, reference)", lambda: checksum(buf)),
           ("os.preadv whole buffer", lambda: os.preadv(fd, [buf], 0)),
           ("os.pwrite whole buffer", lambda: os.pwrite(fd, buf, 0)),
           ("mapped copy, read (file -> buffer)", lambda: np.copyto(buf, mapped)),
           ("mapped copy, write (buffer -> file)", lambda: np.copyto(mapped, buf))]
    for be, bs, qd, th in (("io_uring", 1 << 20, 32, 0), ("io_uring", 4 << 20, 8, 0),
                           ("threads", 1 << 20, 32, 4), ("threads", 8 << 20, 4, 1)):
        e = aio.AioEngine(aio.AioConfig(block_size=bs, queue_depth=qd, threads=th,
                                        backend=be))
        tag = f"engine {e.backend} block {bs >> 20} MiB qd {qd}" + (f" threads {th}" if th
                                                                    else "")
        out.append((tag + ", read", lambda e=e: e.wait(e.submit(fd, False, buf, 0))))
        out.append((tag + ", write", lambda e=e: e.wait(e.submit(fd, True, buf, 0))))
    return out


def main() -> None:
    exit_on_sigterm()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default="/dev/shm")
    ap.add_argument("--size", default="36M", help="bytes (decimal suffixes: 36M = 36e6)")
    ap.add_argument("--reps", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds over the ways")
    a = ap.parse_args()
    n = parse_count(a.size) // aio.ALIGN * aio.ALIGN
    d = tempfile.mkdtemp(prefix="cxlkit-tmpfsbench-", dir=a.dir)
    owner = P.alloc(n, P.default())
    buf = owner.numpy()
    buf[:] = 7
    other = np.ones_like(buf)
    fd, direct = aio.open_file(os.path.join(d, "sg"), write=True, create=True, direct=True)
    try:
        os.posix_fallocate(fd, 0, n)
        mm = mmap.mmap(fd, n, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0))
        mapped = np.frombuffer(mm, np.uint8)
        ws = ways(fd, buf, other, mapped)
        res: dict[str, list[tuple[float, float]]] = {name: [] for name, _ in ws}
        print(json.dumps(dict(dir=a.dir, nbytes=n, reps=a.reps, direct=direct,
                              loadavg=os.getloadavg())), flush=True)
        for _ in range(a.rounds):
            for name, fn in ws:
                res[name].append(measure(fn, n, a.reps))
        for name, xs in res.items():
            print(json.dumps(dict(
                way=name, GBps=statistics.median(x[0] for x in xs),
                GBps_min=min(x[0] for x in xs), GBps_max=max(x[0] for x in xs),
                cpu_s_per_GB=statistics.median(x[1] for x in xs),
                cpu_s_per_GB_min=min(x[1] for x in xs),
                cpu_s_per_GB_max=max(x[1] for x in xs))), flush=True)
        print(json.dumps(dict(loadavg_end=os.getloadavg())), flush=True)
        del mapped, ws
        mm.close()
    finally:
        aio.close_file(fd)
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
