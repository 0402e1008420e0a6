"""The spill planner behind `cxlkit plan train --spill`: given the params, the paths with their
read/write bandwidth and the host memory for the subgroup cache, how many subgroups each path
takes (Eq. 1) and the update time to expect per step (I/O and kernel overlap)."""
from __future__ import annotations

import errno
import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from .. import adam as A
from . import split as S
from . import layout as L
from .paths import HEADER_NBYTES, CapacityError, parse_path, split_capacity


@dataclass(frozen=True)
class PathFigure:
    name: str
    read_Bps: float
    write_Bps: float
    capacity_nbytes: int | None = None  # the most bytes the path keeps (None: no bound)


@dataclass(frozen=True)
class SpillPlan:
    params: int
    subgroup_params: int
    subgroups: int
    cache_subgroups: int
    paths: list[dict]
    io_bytes_per_step: int
    io_s: float
    kernel_s: float
    update_s: float

    def to_dict(self) -> dict:
        return asdict(self)


def measure_paths(specs: Sequence[str], nbytes: int = 64 << 20, *,
                  pool_options: dict[str, Any] | None = None) -> list[PathFigure]:
    """'DIR', 'mem[:NODE]' or 'pool:NAME' measured now; 'SPEC=GBPS' taken as given (both
    directions); either with a ':cap=SIZE' suffix (the path's capacity). pool_options:
    Pool's host_id and coherence for the pool paths."""
    out = []
    for whole in specs:
        s, cap = split_capacity(whole)
        spec, _, gbps = s.partition("=")
        if gbps:
            try:
                b = float(gbps) * 1e9
            except ValueError:
                raise ValueError(f"path {s!r}: bandwidth {gbps!r} is not a number (GB/s)") \
                    from None
            if not math.isfinite(b) or b <= 0:
                raise ValueError(f"path {s!r}: bandwidth must be > 0 GB/s")
            out.append(PathFigure(spec, b, b, cap))
            continue
        p = parse_path(spec, lock="off", pool_options=pool_options)
        try:
            p.open(L.pad(nbytes) + HEADER_NBYTES)
            r, w = p.measure(nbytes)
        finally:
            p.close()
        out.append(PathFigure(p.name, r, w, cap))
    return out


def kernel_rate(n: int = 1 << 22) -> float:
    """Elements per second of cxlkit's AdamW kernel here (bf16 grads, bf16 copy), one thread."""
    p = np.zeros(n, np.float32)
    m, v = np.zeros_like(p), np.zeros_like(p)
    g = np.ones(n, np.uint16)
    c = np.empty(n, np.uint16)
    cfg = A.AdamConfig()
    best = math.inf
    for s in range(1, 4):
        t0 = time.perf_counter()
        A.step_raw([(p, m, v, g, A.DTYPES["bfloat16"], c, A.DTYPES["bfloat16"])], cfg, s)
        best = min(best, time.perf_counter() - t0)
    return n / best


def plan_spill(params: int, paths: Sequence[PathFigure], *, host_cache_bytes: int,
               subgroup_params: int = 100_000_000, kernel_eps: float | None = None) -> SpillPlan:
    """Eq. 1 over min(read, write) per path; per step, the subgroups not in the host cache
    are read and written once; paths work in parallel and the kernel overlaps them, so the
    step takes the longest of the paths' I/O and the kernel. A path with a capacity takes at
    most capacity // (2 slots of a subgroup) subgroups (CapacityError when the paths hold
    fewer than the state has)."""
    if params <= 0 or subgroup_params <= 0:
        raise ValueError("params and subgroup_params must be > 0")
    if not paths:
        raise ValueError("no paths to spill to")
    m = math.ceil(params / subgroup_params)
    sub_bytes = L.pad(12 * min(subgroup_params, params)) + HEADER_NBYTES
    k = min(m, host_cache_bytes // sub_bytes)
    if k < 3 and m > 0:
        raise ValueError(f"host cache of {host_cache_bytes:,} bytes holds {k} subgroups of "
                         f"{sub_bytes:,} bytes; the pipeline needs 3 (give more memory or a "
                         "smaller sub_group_size)")
    bw = [min(p.read_Bps, p.write_Bps) for p in paths]
    foot = 2 * sub_bytes  # two slots: the previous generation survives a crash mid-write
    caps = [None if p.capacity_nbytes is None else p.capacity_nbytes // foot for p in paths]
    if all(c is not None for c in caps) and sum(caps) < m:
        raise CapacityError(errno.ENOSPC, f"capacities hold {sum(caps)} of the {m} subgroups of "
                            f"{foot:,} bytes each (" + ", ".join(
                                f"{p.name} {p.capacity_nbytes:,} bytes = {c} subgroups"
                                for p, c in zip(paths, caps)) + ")",
                            ", ".join(p.name for p in paths))
    # Eq. 1, or a subset when rounding favours it; what a capacity cannot hold moves on
    counts = S.split_counts(m, bw, caps=None if all(c is None for c in caps) else caps)
    moved = max(0, m - k)  # alternating order: k subgroups skip both read and write
    rows, io_s = [], 0.0
    for p, c, b in zip(paths, counts, bw):
        share = moved * c / m if m else 0
        t = share * sub_bytes / p.read_Bps + share * sub_bytes / p.write_Bps
        io_s = max(io_s, t)
        rows.append(dict(path=p.name, subgroups=c, read_GBps=p.read_Bps / 1e9,
                         write_GBps=p.write_Bps / 1e9, io_s=t,
                         capacity_nbytes=p.capacity_nbytes,
                         capacity_subgroups=None if p.capacity_nbytes is None
                         else p.capacity_nbytes // foot, held_nbytes=c * foot))
    eps = kernel_eps if kernel_eps is not None else kernel_rate()
    kernel_s = params / eps
    return SpillPlan(params, subgroup_params, m, k, rows, int(2 * moved * sub_bytes), io_s,
                     kernel_s, max(io_s, kernel_s))
