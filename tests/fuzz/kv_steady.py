"""A KV store at steady state under eviction: one writer (host 0) puts new blocks without
end into a partition that holds a few dozen, so every put evicts; two readers (hosts 0 and 1)
get recent blocks all the while and compare every loaded block with what its key stands for.
Reports the fraction of put blocks stored (or already present) per half-second window after a
warm-up, and the torn blocks the readers saw. One JSON line.

  .venv/bin/python tests/fuzz/kv_steady.py --seconds 20
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import time

import numpy as np

MiB = 1 << 20


def _layout():
    from cxlkit.kv import BlockLayout

    return BlockLayout(num_layers=2, num_kv_heads=2, head_dim=16, dtype="float32",
                       block_tokens=16)


def _engine(layout):
    import torch

    from cxlkit.kv import EngineTensors

    ts = [torch.zeros(2, 4, 16, 2, 16) for _ in range(layout.num_layers)]
    return ts, EngineTensors.per_layer(layout, ts, "KBTHD")


def _content(i: int):
    import torch

    rng = np.random.default_rng(i)
    return torch.from_numpy(rng.standard_normal((2, 2, 16, 2, 16), dtype=np.float32))


def _key(i: int) -> bytes:
    from cxlkit.kv import block_hashes

    return block_hashes(list(range(i, i + 16)))[0]


def writer(path, seconds, head, windows, start):
    from cxlkit.kv import Store

    layout = _layout()
    s = Store(path, layout, host_id=0, checksum=True)
    src, se = _engine(layout)
    start.wait()
    t0 = time.monotonic()
    i = 0
    win = []  # (stored or present, asked) per half second
    asked = ok = 0
    t_win = t0 + 0.5
    while time.monotonic() - t0 < seconds:
        batch = list(range(i, i + 4))
        for b, k in enumerate(batch):
            c = _content(k)
            for layer, t in enumerate(src):
                t[:, b] = c[layer]
        before = s.stats.put_errors
        s.put([_key(k) for k in batch], se, range(4))
        asked += 4
        ok += 4 - (s.stats.put_errors - before)
        i += 4
        head.value = i
        if time.monotonic() >= t_win:
            win.append((ok, asked))
            ok = asked = 0
            t_win += 0.5
    windows.put((win, s.stats.as_dict()))


def reader(path, host, head, done, start, out):
    from cxlkit.kv import Store

    layout = _layout()
    s = Store(path, layout, host_id=host, checksum=False)  # the seqlock alone
    dst, de = _engine(layout)
    rng = np.random.default_rng(host)
    start.wait()
    loaded = torn = gets = 0
    while not done.is_set():
        h = head.value
        if h < 8:
            continue
        k = int(h - 1 - rng.integers(0, min(h, 48)))
        gets += 1
        if s.get([_key(k)], de, [0]) == 1:
            loaded += 1
            import torch

            got = torch.stack([t[:, 0] for t in dst])
            torn += not torch.equal(got, _content(k))
    out.put((gets, loaded, torn))


def run(seconds: float, warmup_windows: int = 4) -> dict:
    from cxlkit.kv import Store

    path = f"/dev/shm/cxlkit-kvsteady-{os.getpid()}"
    try:
        Store(path, _layout(), host_id=0, create=True, size=768 << 10, max_hosts=2,
              checksum=True).close() if hasattr(Store, "close") else Store(
            path, _layout(), host_id=0, create=True, size=768 << 10, max_hosts=2, checksum=True)
        ctx = mp.get_context("fork")  # children run the cxlkit this process loaded
        head = ctx.Value("q", 0, lock=False)
        done, start, windows, out = ctx.Event(), ctx.Barrier(3), ctx.Queue(), ctx.Queue()
        w = ctx.Process(target=writer, args=(path, seconds, head, windows, start))
        rs = [ctx.Process(target=reader, args=(path, h, head, done, start, out)) for h in (0, 1)]
        for p in [w, *rs]:
            p.start()
        win, stats = windows.get(timeout=seconds + 120)
        done.set()
        reads = [out.get(timeout=120) for _ in rs]
        for p in [w, *rs]:
            p.join(60)
        steady = win[warmup_windows:]
        fr = [ok / asked for ok, asked in steady if asked]
        ok = sum(o for o, _ in steady)
        asked = sum(a for _, a in steady)
        return {"seconds": seconds, "windows": len(steady),
                "put_success_steady": round(ok / asked, 4) if asked else None,
                "put_success_window_median": round(statistics.median(fr), 4) if fr else None,
                "put_success_window_min": round(min(fr), 4) if fr else None,
                "puts_asked_steady": asked, "evictions": stats["evictions"],
                "reader_gets": sum(r[0] for r in reads),
                "reader_loaded": sum(r[1] for r in reads),
                "torn_blocks": sum(r[2] for r in reads)}
    finally:
        if os.path.exists(path):
            os.unlink(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=20.0)
    a = ap.parse_args()
    print(json.dumps(run(a.seconds)))


if __name__ == "__main__":
    main()
