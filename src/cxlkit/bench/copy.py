"""`cxlkit bench copy`: the host copy paths the workloads use — memcpy, non-temporal copy,
copy + flush (the pool's publish), invalidate + copy (the read on a non-coherent pool) —
per (source node, destination node) pair and size 64 B .. 64 MiB; and the GPU copy matrix
behind a small CUDA interface that says so when no GPU is present."""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Protocol

from .. import _native
from . import machine as M
from .memory import DOC_VERSION, MiB, Progress, place

METHODS = ("memcpy", "nt", "flush", "invalidate")


@dataclass(frozen=True)
class CopySettings:
    sizes: tuple[int, ...]
    span_bytes: int   # each buffer; copies walk through it so sources are not cache-hot
    target_s: float   # per repetition
    reps: int
    hugepages: bool = True
    quick: bool = False

    def __post_init__(self) -> None:
        if not self.sizes or min(self.sizes) < 1 or max(self.sizes) > self.span_bytes:
            raise ValueError(f"sizes {list(self.sizes)}: expected 1..span_bytes "
                             f"({self.span_bytes})")
        if self.reps < 1:
            raise ValueError(f"reps {self.reps}: expected >= 1")


def copy_settings(quick: bool = False, **override) -> CopySettings:
    if quick:
        base = dict(sizes=tuple(64 << (3 * i) for i in range(7)) + (64 * MiB,),  # 64 B x8 .. 64M
                    span_bytes=64 * MiB, target_s=0.01, reps=3, quick=True)
    else:
        base = dict(sizes=tuple(64 << (2 * i) for i in range(11)),  # 64 B x4 .. 64 MiB
                    span_bytes=256 * MiB, target_s=0.05, reps=5)
    base.update(override)
    return CopySettings(**base)


def time_copy(dst, src, size: int, method: str, *, cpu: int, target_s: float,
              reps: int) -> list[float]:
    """ns per copy of `size` bytes, one value per repetition (each about target_s)."""
    if method not in METHODS:
        raise ValueError(f"method {method!r}: expected one of {', '.join(METHODS)}")
    m = _native.BENCH_COPY_METHODS[method]
    calib = max(1, (1 * MiB) // size)
    est = _native.bench_copy(dst, src, size, m, calib, cpu) / calib
    n = max(1, min(int(target_s * 1e9 / max(est, 1.0)), 1 << 30))
    return [_native.bench_copy(dst, src, size, m, n, cpu) / n for _ in range(reps)]


def _checked(pairs: Sequence[tuple[int, int]] | None, cpu: int | None
             ) -> tuple[Sequence[tuple[int, int]], int]:
    """(pairs, cpu) with their defaults, each node one with memory, the CPU one we may use."""
    have = [f.node for f in M.nodes()]
    if pairs is None:
        pairs = [(s, d) for s in have for d in have]
    for s, d in pairs:
        for n in (s, d):
            if n not in have:
                raise ValueError(f"node {n} has no memory on this machine (nodes with "
                                 f"memory: {','.join(map(str, have))})")
    if cpu is None:
        cpu = next(iter(M.cpu_nodes().values()))[0]
    elif cpu not in M.allowed_cpus():
        raise ValueError(f"cpu {cpu}: not one this process may run on "
                         f"({','.join(map(str, M.allowed_cpus()))})")
    return pairs, cpu


def run(pairs: Sequence[tuple[int, int]] | None = None, *, quick: bool = False,
        config: CopySettings | None = None, cpu: int | None = None,
        progress: Progress | None = None, gpu: bool = True,
        gpu_backend: CudaCopier | None = None) -> dict:
    """Every (src, dst) pair of memory nodes (or `pairs`); the copying thread runs on `cpu`
    (default: the first CPU of the first node with CPUs, where an application would run)."""
    cfg = config or copy_settings(quick)
    pairs, cpu = _checked(pairs, cpu)
    steps: list[tuple[str, Callable[[], None]]] = []
    out_pairs: list[dict] = []
    for s, d in pairs:
        entry = {"src": s, "dst": d, "methods": {m: [] for m in METHODS}}
        out_pairs.append(entry)
        bufs: dict = {}

        def alloc(s: int = s, d: int = d, bufs: dict = bufs) -> None:
            bufs["src"] = place(cfg.span_bytes, s, hugepages=cfg.hugepages)
            bufs["dst"] = place(cfg.span_bytes, d, hugepages=cfg.hugepages)
            bufs["src"].numpy()[:] = 1  # sources hold data, not the zero page's promise
        steps.append((f"{s}->{d}: placing", alloc))
        for method in METHODS:
            def measure(method: str = method, entry: dict = entry, bufs: dict = bufs) -> None:
                for size in cfg.sizes:
                    ns = time_copy(bufs["dst"], bufs["src"], size, method, cpu=cpu,
                                   target_s=cfg.target_s, reps=cfg.reps)
                    med = float(statistics.median(ns))
                    entry["methods"][method].append(
                        {"bytes": size, "ns_per_copy": med, "gbps": size / med,
                         "samples_ns": ns})
            steps.append((f"{s}->{d}: {method}", measure))

        def free(bufs: dict = bufs) -> None:
            for b in bufs.values():
                b.close()
        steps.append((f"{s}->{d}: freeing", free))
    t0 = time.perf_counter()
    for i, (what, fn) in enumerate(steps):
        if progress:
            progress(i, len(steps), what)
        fn()
    if progress:
        progress(len(steps), len(steps), "done")
    params = asdict(cfg)
    params.update(cpu=cpu, pairs=[list(p) for p in pairs],
                  elapsed_s=round(time.perf_counter() - t0, 2),
                  gbps="1e9 bytes copied per second (each byte counted once)")
    figures = {"pairs": out_pairs,
               "gpu": gpu_matrix([f.node for f in M.nodes()], backend=gpu_backend)
               if gpu else None}
    return {"kind": "copy", "version": DOC_VERSION, "machine": M.machine(),
            "kernel": M.kernel(), "date": M.now(), "parameters": params, "figures": figures}


# ---- GPU copies: host node <-> device, one device at a time and all at once ----

class CudaCopier(Protocol):
    """What the GPU matrix needs from a CUDA runtime."""

    def devices(self) -> list[int]: ...
    # Seconds for one copy of nbytes between a host buffer and device `dev`;
    # direction "h2d" or "d2h". Concurrent: one copy per listed device at the same time.
    def copy_seconds(self, host, devs: Sequence[int], nbytes: int, direction: str) -> float: ...


def no_gpu_reason(backend: CudaCopier | None = None) -> str | None:
    """None when a GPU can be used through backend; else why not. The copier over torch.cuda
    lives with the torch integration (cxlkit.integrations.cuda.torch_copier): torch is above
    this floor, so the caller (the CLI) passes it in."""
    if backend is not None:
        return None
    if not _native.pin_available():
        return "no GPU present: the CUDA runtime (libcudart) is not loadable or reports no device"
    return ("a CUDA device is present but no copier was given to drive it "
            "(cxlkit.integrations.cuda.torch_copier() needs torch with CUDA)")


def gpu_matrix(host_nodes: Sequence[int], *, backend: CudaCopier | None = None,
               nbytes: int = 64 * MiB, reps: int = 3) -> dict:
    """{available, reason} or {available, devices, rows: [{node, device|"all", h2d_gbps,
    d2h_gbps}]}; host memory bound to each node and page-locked."""
    reason = no_gpu_reason(backend)
    if backend is None:
        return {"available": False, "reason": reason}
    devs = backend.devices()
    if not devs:
        return {"available": False, "reason": "the CUDA runtime reports no device"}
    rows = []
    for n in host_nodes:
        with place(nbytes * len(devs), n, hugepages=False) as host:
            pinned = _pin(host)
            for target in [[d] for d in devs] + ([devs] if len(devs) > 1 else []):
                row = {"node": n, "device": target[0] if len(target) == 1 else "all",
                       "pinned": pinned}
                row.update(copy_point(backend, host, target, nbytes, reps))
                rows.append(row)
            if pinned:
                host.unpin()
    return {"available": True, "devices": devs, "bytes": nbytes, "rows": rows}


def copy_point(backend: CudaCopier, host, devs: Sequence[int], nbytes: int,
               reps: int) -> dict:
    """{h2d_gbps, d2h_gbps}: the median of reps timed copies of nbytes per listed device (one
    stream each, all at once), counted over every device's bytes."""
    out = {}
    for direction in ("h2d", "d2h"):
        secs = [backend.copy_seconds(host, devs, nbytes, direction) for _ in range(reps)]
        out[f"{direction}_gbps"] = nbytes * len(devs) / statistics.median(secs) / 1e9
    return out


def gpu_sweep(backend: CudaCopier, host, *, device: int, sizes: Sequence[int],
              streams: Sequence[int], reps: int = 3,
              deadline: float | None = None) -> dict:
    """The copy matrix of one host buffer and one device over sizes x concurrent streams (k
    streams copy k disjoint ranges of the buffer at once, so it needs max(sizes) *
    max(streams) bytes). Points run in order until `deadline` (time.monotonic()); {rows:
    [{bytes, streams, h2d_gbps, d2h_gbps}], stopped: None or why the rest did not run}."""
    need = max(sizes) * max(streams)
    if len(host) < need:
        raise ValueError(f"host buffer of {len(host)} bytes: the sweep needs {need} "
                         "(largest size x most streams)")
    rows: list[dict] = []
    points = [(b, k) for b in sizes for k in streams]
    for i, (nbytes, k) in enumerate(points):
        if deadline is not None and time.monotonic() >= deadline:
            return {"rows": rows, "stopped": f"time budget spent: {len(points) - i} of "
                                              f"{len(points)} points not run"}
        row = {"bytes": nbytes, "streams": k}
        row.update(copy_point(backend, host, [device] * k, nbytes, reps))
        rows.append(row)
    return {"rows": rows, "stopped": None}


def _pin(host) -> bool:
    try:
        host.pin()
        return True
    except OSError:
        return False  # pageable copies still work; the row says they were not pinned


def summary(doc: dict) -> list[dict]:
    """Per pair and method: GB/s at the largest size and ns per copy at the smallest."""
    out = []
    for p in doc["figures"]["pairs"]:
        for m, pts in p["methods"].items():
            if pts:
                out.append({"src": p["src"], "dst": p["dst"], "method": m,
                            "small_bytes": pts[0]["bytes"], "small_ns": pts[0]["ns_per_copy"],
                            "large_bytes": pts[-1]["bytes"], "large_gbps": pts[-1]["gbps"]})
    return out

