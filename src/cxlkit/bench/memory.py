"""`cxlkit bench memory`: per memory node (memory bound there, threads on its initiator CPUs)
idle latency over a buffer-size sweep, read/write/copy/nt-write bandwidth over a thread sweep,
loaded latency (latency while generators push increasing bandwidth), a CPU-node x memory-node
matrix when there are several nodes, and a numpy copy measured beside it as a reference."""
from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field, replace

from .. import _native
from .. import placement as P
from .. import topology as T
from . import machine as M

KiB, MiB = 1 << 10, 1 << 20
KINDS = ("read", "write", "copy", "nt_write")
DOC_VERSION = 1
# progress(done_steps, total_steps, what is running now)
Progress = Callable[[int, int, str], None]


@dataclass(frozen=True)
class Settings:
    """The knobs of a run; recorded in the result's parameters."""

    latency_sizes: tuple[int, ...]
    latency_target_s: float  # time per latency repetition
    bandwidth_bytes: int     # per buffer (copy uses two)
    bandwidth_target_s: float
    thread_counts: tuple[int, ...] | None  # None: 1..N by the rule in thread_sweep()
    loaded_fractions: tuple[float, ...]    # of the unthrottled generator bandwidth
    loaded_window_s: float
    loaded_kind: str
    matrix_latency_bytes: int
    reps: int
    stride: int = 64
    hugepages: bool = True
    seed: int = 1
    quick: bool = False

    def __post_init__(self) -> None:
        if not self.latency_sizes or any(s < 2 * self.stride for s in self.latency_sizes):
            raise ValueError(f"latency_sizes {list(self.latency_sizes)}: each must be at least "
                             f"2*stride ({2 * self.stride} bytes)")
        if self.reps < 1:
            raise ValueError(f"reps {self.reps}: expected >= 1")
        if self.bandwidth_bytes < 64 * KiB:
            raise ValueError(f"bandwidth_bytes {self.bandwidth_bytes}: expected >= 64 KiB")
        if self.loaded_kind not in KINDS:
            raise ValueError(f"loaded_kind {self.loaded_kind!r}: expected one of {', '.join(KINDS)}")
        if self.thread_counts is not None and any(t < 1 for t in self.thread_counts):
            raise ValueError(f"thread_counts {list(self.thread_counts)}: expected counts >= 1")


def settings(quick: bool = False, **override) -> Settings:
    """Defaults: quick finishes in well under a minute on a 2-core machine with one node;
    the full run sweeps sizes 4 KiB..512 MiB by factors of two and every thread count."""
    if quick:
        base = dict(latency_sizes=tuple(16 * KiB << (2 * i) for i in range(7)),  # 16K..64M
                    latency_target_s=0.03, bandwidth_bytes=128 * MiB, bandwidth_target_s=0.04,
                    thread_counts=None, loaded_fractions=(0.25, 0.5, 0.75, 1.0),
                    loaded_window_s=0.15, loaded_kind="read", matrix_latency_bytes=64 * MiB,
                    reps=3, quick=True)
    else:
        base = dict(latency_sizes=tuple(4 * KiB << i for i in range(18)),  # 4K..512M
                    latency_target_s=0.1, bandwidth_bytes=512 * MiB, bandwidth_target_s=0.2,
                    thread_counts=None,
                    loaded_fractions=(0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0),
                    loaded_window_s=0.5, loaded_kind="read", matrix_latency_bytes=256 * MiB,
                    reps=5)
    base.update(override)
    return Settings(**base)


def thread_sweep(ncpus: int, counts: Sequence[int] | None = None) -> list[int]:
    """1..N: every count up to 8, then powers of two and N."""
    if counts is not None:
        return sorted({c for c in counts if c <= ncpus} or {1})
    out = {c for c in range(1, min(ncpus, 8) + 1)}
    out |= {1 << k for k in range(3, max(ncpus, 1).bit_length()) if 1 << k <= ncpus}
    out.add(ncpus)
    return sorted(out)


def _median(xs: Sequence[float]) -> float:
    return float(statistics.median(xs))


def place(nbytes: int, node: int, *, hugepages: bool) -> P.Buffer:
    """nbytes bound to node, huge pages asked for (when wanted) before the first touch."""
    buf = P.alloc(nbytes, P.bind(node), populate=False)
    if hugepages:
        try:
            _native.bench_hugepages(buf)
        except OSError:
            pass  # THP not built into this kernel: the run records thp=unknown/never
    buf.populate()
    return buf


# ---- the measurements (each returns plain numbers; the document is assembled in run()) ----

def chase_latency(buf: P.Buffer, *, cpu: int, target_s: float, reps: int, stride: int = 64,
                  seed: int = 1, prepared: bool = False,
                  wall_out: list[float] | None = None) -> list[float]:
    """ns per dependent load over the whole buffer, one value per repetition, from the chasing
    thread's on-CPU time (a shared machine's other tasks do not inflate it); wall_out, when
    given, receives the wall-clock figures. One pass through the chain warms the caches first
    (capped for large buffers), then a short calibration sizes each repetition to target_s."""
    if not prepared:
        _native.bench_chase_init(buf, stride, seed)
    slots = len(buf) // stride
    # Each call walks on from where the last stopped: restarted from the buffer's start, every
    # repetition would revisit the lines the one before left in the last-level cache.
    _, _, at = _native.bench_chase_from(buf, 0, min(slots, 1 << 20), cpu)
    est, _, at = _native.bench_chase_from(buf, at, 20_000, cpu)
    nloads = int(min(max(target_s * 1e9 / max(est, 0.1), 50_000), 1 << 31))
    runs = []
    for _ in range(reps):
        ns, wall, at = _native.bench_chase_from(buf, at, nloads, cpu)
        runs.append((ns, wall))
    if wall_out is not None:
        wall_out.extend(w for _, w in runs)
    return [ns for ns, _ in runs]


def bandwidth(dst: P.Buffer, src: P.Buffer | None, kind: str, nthreads: int, cpus: Sequence[int],
              *, target_s: float, reps: int, oncpu_out: list[float] | None = None) -> list[float]:
    """Bytes per second of `kind` with nthreads pinned over cpus, one value per repetition
    (wall clock, the first thread's start to the last one's end). oncpu_out, when given,
    receives the on-CPU estimate (sum of each thread's bytes / its on-CPU time). A calibration
    pass sizes the passes per repetition to about target_s."""
    if kind not in KINDS:
        raise ValueError(f"kind {kind!r}: expected one of {', '.join(KINDS)}")
    k = _native.BENCH_KINDS[kind]
    first = _native.bench_bandwidth(dst, src, k, nthreads, list(cpus), 1, 1)[0][0]
    moved = len(dst) // 64 * 64 * (2 if kind == "copy" else 1)
    passes = max(1, math.ceil(target_s * first / moved))
    wall, oncpu = _native.bench_bandwidth(dst, src, k, nthreads, list(cpus), reps, passes)
    if oncpu_out is not None:
        oncpu_out.extend(oncpu)
    return wall


def numpy_copy(dst: P.Buffer, src: P.Buffer, *, reps: int,
               oncpu_out: list[float] | None = None) -> list[float]:
    """The reference: np.copyto on the same buffers from this thread, counted like ours
    (bytes read + bytes written), wall clock; oncpu_out receives the figures from this
    thread's on-CPU time (time.thread_time), comparable with bandwidth()'s on-CPU ones."""
    import numpy as np

    a, b = dst.numpy(), src.numpy()
    np.copyto(a, b)
    out = []
    for _ in range(reps):
        t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
        np.copyto(a, b)
        c1, t1 = time.thread_time_ns(), time.perf_counter_ns()
        out.append(2 * a.nbytes * 1e9 / max(t1 - t0, 1))
        if oncpu_out is not None:
            oncpu_out.append(2 * a.nbytes * 1e9 / max(c1 - c0, 1))
    return out


def copy_vs_numpy(dst: P.Buffer, src: P.Buffer, *, cpu: int, pairs: int) -> dict:
    """Our one-thread copy against np.copyto on the same buffers, in `pairs` adjacent pairs on
    the same CPU (the calling thread is pinned to it meanwhile), the order alternating from
    pair to pair: on a shared machine the memory bandwidth other tenants leave swings by 2x
    within a second, and only measurements taken side by side see the same share. Returns the
    figures (bytes/s; wall and on-CPU) and the medians of the per-pair ratios (ours/numpy)."""
    if pairs < 1:
        raise ValueError(f"pairs {pairs}: expected at least 1")
    k = _native.BENCH_KINDS["copy"]
    out: dict[str, list[float]] = {"ours": [], "ours_oncpu": [], "numpy": [], "numpy_oncpu": []}

    def ours() -> None:
        wall, oncpu = _native.bench_bandwidth(dst, src, k, 1, [cpu], 1, 1)
        out["ours"] += wall
        out["ours_oncpu"] += oncpu

    def theirs() -> None:
        out["numpy"] += numpy_copy(dst, src, reps=1, oncpu_out=out["numpy_oncpu"])

    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    try:
        for i in range(pairs):
            for f in ((ours, theirs) if i % 2 == 0 else (theirs, ours)):
                f()
    finally:
        os.sched_setaffinity(0, before)

    def ratio(a: str, b: str) -> float:
        return statistics.median(x / y for x, y in zip(out[a], out[b]))
    return {**out, "ratio": ratio("ours", "numpy"), "oncpu_ratio": ratio("ours_oncpu", "numpy_oncpu")}


def loaded_latency(chase: P.Buffer, gen: P.Buffer, *, chase_cpu: int, gen_cpus: Sequence[int],
                   kind: str, fractions: Sequence[float], window_s: float, reps: int,
                   idle_ns: float) -> list[dict]:
    """The hockey stick: (generator bandwidth, chase latency) points from no load through
    throttled rates to unthrottled. The chase buffer must be prepared (chase_init)."""
    k = _native.BENCH_KINDS[kind]
    ng = len(gen_cpus)
    dur = int(window_s * 1e9)

    def point(rate: float) -> tuple[float, float]:
        runs = [_native.bench_loaded_latency(chase, gen, chase_cpu, k, ng, list(gen_cpus), rate,
                                             dur) for _ in range(reps)]
        return _median([r[0] for r in runs]), _median([r[1] for r in runs])

    ns_max, bw_max = point(0.0)
    points = [{"target_gbps": 0.0, "gbps": 0.0, "ns": idle_ns}]
    for f in fractions:
        # rate 0 would mean unthrottled to the kernel: with no measured maximum (generators
        # never ran in the window, e.g. descheduled) there is nothing to take a fraction of
        if f >= 1.0 or bw_max <= 0:
            continue
        ns, bw = point(f * bw_max)
        points.append({"target_gbps": f * bw_max / 1e9, "gbps": bw / 1e9, "ns": ns})
    points.append({"target_gbps": None, "gbps": bw_max / 1e9, "ns": ns_max})
    return points


# ---- a run ----

@dataclass
class _Plan:
    steps: list[tuple[str, Callable[[], None]]] = field(default_factory=list)

    def add(self, what: str, fn: Callable[[], None]) -> None:
        self.steps.append((what, fn))


def run(nodes: Sequence[int] | None = None, *, quick: bool = False,
        config: Settings | None = None, progress: Progress | None = None,
        matrix: bool = True) -> dict:
    """Measure every memory node (or `nodes`) and return the result document:
    {kind, version, machine, kernel, date, parameters, figures}."""
    cfg = config or settings(quick)
    facts = {f.node: f for f in M.nodes()}
    chosen = list(facts) if nodes is None else list(nodes)
    if len(set(chosen)) != len(chosen):
        raise ValueError(f"nodes {chosen}: a node is named twice")
    for n in chosen:
        if n not in facts:
            raise ValueError(f"node {n} has no memory on this machine (nodes with memory: "
                             f"{','.join(map(str, facts))})")
    figures: dict = {"nodes": {}, "matrix": None, "reference": {}}
    plan = _Plan()
    stack = ExitStack()

    for n in chosen:
        f = facts[n]
        cpus = list(f.initiator_cpus)
        entry: dict = {"kind": f.kind, "cpus": list(f.cpus), "initiator_cpus": cpus,
                       "total_bytes": f.total_bytes, "free_bytes": f.free_bytes, "hmat": f.hmat,
                       "latency": [], "bandwidth": {k: [] for k in KINDS}, "peak_gbps": {},
                       "loaded_latency": None, "loaded_latency_note": None}
        figures["nodes"][str(n)] = entry
        _plan_node(plan, stack, cfg, n, cpus, entry, figures["reference"])

    cpu_nodes = M.cpu_nodes()
    if matrix and len(facts) > 1:
        figures["matrix"] = _plan_matrix(plan, stack, cfg, cpu_nodes, chosen)
    else:
        figures["matrix_note"] = ("one node with memory: no cross-node matrix"
                                  if len(facts) <= 1 else "matrix not requested")
    t0 = time.perf_counter()
    with stack:
        total = len(plan.steps)
        for i, (what, fn) in enumerate(plan.steps):
            if progress:
                progress(i, total, what)
            fn()
        if progress:
            progress(total, total, "done")
    params = asdict(cfg)
    params.update(nodes=chosen, elapsed_s=round(time.perf_counter() - t0, 2),
                  latency_clock="on-CPU time of the chasing thread (wall_ns: wall clock)",
                  bandwidth_clock="wall clock (oncpu_gbps: sum of per-thread bytes / on-CPU "
                                  "time, an estimate free of other tasks' share)",
                  copy_counts="bytes read + bytes written (STREAM convention)",
                  gbps="1e9 bytes per second")
    return {"kind": "memory", "version": DOC_VERSION, "machine": M.machine(),
            "kernel": M.kernel(), "date": M.now(), "parameters": params, "figures": figures}


def fit(cfg: Settings, node: int, available: int | None = None) -> tuple[Settings, str | None]:
    """cfg with its buffers shrunk (by halves, to 8 MiB at least) so that a node's peak — two
    bandwidth buffers, or a chase buffer beside a load buffer — stays within half of what the
    node has available (a 256 MiB CXL node bound with 2 x 128 MiB was killed by the OOM
    killer); (cfg, a note saying what changed) or (cfg, None) when it fits as it is."""
    avail = T.node_available_bytes(node) if available is None else available
    if avail is None:
        return cfg, None
    budget, floor = avail // 2, 8 * MiB
    bw = cfg.bandwidth_bytes
    while bw > floor and 2 * bw > budget:
        bw //= 2
    lat = cfg.matrix_latency_bytes
    while lat > floor and lat + min(bw, 256 * MiB) > budget:
        lat //= 2
    sizes = tuple(s for s in cfg.latency_sizes if s <= max(budget, floor)) \
        or cfg.latency_sizes[:1]
    if (bw, lat, sizes) == (cfg.bandwidth_bytes, cfg.matrix_latency_bytes, cfg.latency_sizes):
        return cfg, None
    note = (f"node {node} has {_fmt(avail)} available: bandwidth buffers {_fmt(bw)}, chase "
            f"buffer {_fmt(lat)}, latency sizes up to {_fmt(max(sizes))}")
    return replace(cfg, bandwidth_bytes=bw, matrix_latency_bytes=lat, latency_sizes=sizes), note


def _plan_node(plan: _Plan, stack: ExitStack, cfg: Settings, n: int, cpus: list[int],
               entry: dict, reference: dict) -> None:
    """Queue node n's measurements on the plan, in order: latency per buffer size, bandwidth
    per kind and thread count with the numpy reference, then the loaded latency."""
    cfg, note = fit(cfg, n)
    if note:
        entry["sized_to_fit"] = note
    _plan_latency(plan, cfg, n, cpus[0], entry)
    _plan_bandwidth(plan, stack, cfg, n, cpus, entry, reference)
    _plan_loaded(plan, cfg, n, cpus, entry)


def _plan_latency(plan: _Plan, cfg: Settings, n: int, chase_cpu: int, entry: dict) -> None:
    for size in cfg.latency_sizes:
        def lat(size: int = size) -> None:
            wall: list[float] = []
            with place(size, n, hugepages=cfg.hugepages) as buf:
                ns = chase_latency(buf, cpu=chase_cpu, target_s=cfg.latency_target_s,
                                   reps=cfg.reps, stride=cfg.stride, seed=cfg.seed,
                                   wall_out=wall)
                if size == max(cfg.latency_sizes):
                    entry["placement_ok"] = buf.audit().ok
            entry["latency"].append({"bytes": size, "ns": _median(ns), "wall_ns": _median(wall),
                                     "samples": ns})
        plan.add(f"node {n}: latency {_fmt(size)}", lat)


def _plan_bandwidth(plan: _Plan, stack: ExitStack, cfg: Settings, n: int, cpus: list[int],
                    entry: dict, reference: dict) -> None:
    bufs: dict[str, P.Buffer] = {}

    def alloc_bw() -> None:
        bufs["dst"] = stack.enter_context(place(cfg.bandwidth_bytes, n, hugepages=cfg.hugepages))
        bufs["src"] = stack.enter_context(place(cfg.bandwidth_bytes, n, hugepages=cfg.hugepages))
    plan.add(f"node {n}: placing {_fmt(2 * cfg.bandwidth_bytes)}", alloc_bw)

    for kind in KINDS:
        for t in thread_sweep(len(cpus), cfg.thread_counts):
            def bw(kind: str = kind, t: int = t) -> None:
                oncpu: list[float] = []
                s = bandwidth(bufs["dst"], bufs["src"], kind, t, cpus,
                              target_s=cfg.bandwidth_target_s, reps=cfg.reps, oncpu_out=oncpu)
                entry["bandwidth"][kind].append({"threads": t, "gbps": _median(s) / 1e9,
                                                 "best_gbps": max(s) / 1e9,
                                                 "oncpu_gbps": _median(oncpu) / 1e9,
                                                 "samples": [x / 1e9 for x in s]})
                entry["peak_gbps"][kind] = max(p["gbps"] for p in entry["bandwidth"][kind])
            plan.add(f"node {n}: {kind} x{t}", bw)

    def ref() -> None:
        r = copy_vs_numpy(bufs["dst"], bufs["src"], cpu=cpus[0], pairs=max(5, 2 * cfg.reps + 1))
        reference[str(n)] = {"copy_1thread_gbps": _median(r["ours"]) / 1e9,
                             "numpy_copy_gbps": _median(r["numpy"]) / 1e9,
                             "ratio": r["ratio"], "oncpu_ratio": r["oncpu_ratio"],
                             "note": f"{len(r['ours'])} adjacent pairs on CPU {cpus[0]}, "
                                     "order alternating; ratios are medians of the pairs'"}
    plan.add(f"node {n}: numpy copy reference", ref)

    def free() -> None:  # before the next node's buffers: one node's worth mapped at a time
        for b in bufs.values():
            b.close()
    plan.add(f"node {n}: freeing", free)


def _plan_loaded(plan: _Plan, cfg: Settings, n: int, cpus: list[int], entry: dict) -> None:
    chase_cpu = cpus[0]
    if len(cpus) < 2:
        entry["loaded_latency_note"] = (f"needs 2 CPUs near node {n} (one chases, others load); "
                                        f"has {len(cpus)}")
        return

    def loaded() -> None:
        gen_bytes = min(cfg.bandwidth_bytes, 256 * MiB)
        with place(cfg.matrix_latency_bytes, n, hugepages=cfg.hugepages) as chase, \
                place(gen_bytes, n, hugepages=cfg.hugepages) as gen:
            _native.bench_chase_init(chase, cfg.stride, cfg.seed)
            idle_ns = _median(chase_latency(chase, cpu=chase_cpu, target_s=cfg.latency_target_s,
                                            reps=cfg.reps, prepared=True))
            entry["loaded_latency"] = loaded_latency(
                chase, gen, chase_cpu=chase_cpu, gen_cpus=cpus[1:], kind=cfg.loaded_kind,
                fractions=cfg.loaded_fractions, window_s=cfg.loaded_window_s,
                reps=cfg.reps, idle_ns=idle_ns)
        entry["loaded_latency_buffer_bytes"] = cfg.matrix_latency_bytes
    plan.add(f"node {n}: loaded latency", loaded)


def _plan_matrix(plan: _Plan, stack: ExitStack, cfg: Settings, cpu_nodes: dict[int, tuple],
                 mem_nodes: list[int]) -> dict:
    out = {"cpu_nodes": list(cpu_nodes), "mem_nodes": mem_nodes,
           "latency_ns": [[None] * len(mem_nodes) for _ in cpu_nodes],
           "read_gbps": [[None] * len(mem_nodes) for _ in cpu_nodes],
           "latency_bytes": cfg.matrix_latency_bytes}
    for j, m in enumerate(mem_nodes):
        bufs: dict[str, P.Buffer] = {}

        def alloc(m: int = m) -> None:
            mcfg = fit(cfg, m)[0]  # one node's matrix buffers within half its available memory
            bufs["chase"] = place(mcfg.matrix_latency_bytes, m, hugepages=cfg.hugepages)
            _native.bench_chase_init(bufs["chase"], cfg.stride, cfg.seed)
            bufs["bw"] = place(mcfg.bandwidth_bytes, m, hugepages=cfg.hugepages)
        plan.add(f"matrix: placing on node {m}", alloc)
        for i, (c, cpus) in enumerate(cpu_nodes.items()):
            def cell(i: int = i, j: int = j, cpus: tuple = cpus) -> None:
                ns = chase_latency(bufs["chase"], cpu=cpus[0], target_s=cfg.latency_target_s,
                                   reps=cfg.reps, prepared=True)
                bw = bandwidth(bufs["bw"], None, "read", len(cpus), cpus,
                               target_s=cfg.bandwidth_target_s, reps=cfg.reps)
                out["latency_ns"][i][j] = _median(ns)
                out["read_gbps"][i][j] = _median(bw) / 1e9
            plan.add(f"matrix: CPUs of node {c} -> memory of node {m}", cell)

        def free() -> None:
            for b in bufs.values():
                b.close()
        plan.add(f"matrix: freeing node {m}", free)
    return out


def _fmt(nbytes: int) -> str:
    for unit, div in (("GiB", 1 << 30), ("MiB", MiB), ("KiB", KiB)):
        if nbytes >= div and nbytes % div == 0:
            return f"{nbytes // div} {unit}"
    return f"{nbytes} B"


def summary(doc: dict) -> dict[int, dict]:
    """Per node: idle latency (largest buffer), peak bandwidth per kind, reference ratio."""
    out = {}
    for n, e in doc["figures"]["nodes"].items():
        lat = e["latency"][-1]["ns"] if e["latency"] else None
        out[int(n)] = {"kind": e["kind"], "latency_ns": lat, **{
            f"{k}_gbps": e["peak_gbps"].get(k) for k in KINDS}}
    return out
