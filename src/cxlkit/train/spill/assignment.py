"""Assignment: which path each subgroup lives on. Each path's bandwidth (given, or measured
at start: alone, then all at once for the CPU model), the split of the subgroups over the
paths (MLP-Offload's Eq. 1, or the CPU-aware split of split.py, within the paths'
capacities), interleaved so that consecutive subgroups sit on different paths, and moved
towards what every step observed."""
from __future__ import annotations

import concurrent.futures as cf
import errno
from collections.abc import Sequence
from typing import Any

from . import layout as L
from . import split as S
from .config import SpillConfig
from .metrics import StepMetrics
from .path_base import CapacityError, SpillPath

EWMA = 0.5  # weight of the last step's observed throughput in a path's bandwidth


class Assignment:
    def __init__(self, paths: Sequence[SpillPath], config: SpillConfig) -> None:
        self.paths, self.config = paths, config
        self.cpu_per_byte: list[float] | None = None
        self.cpu_rate: float | None = None
        self.together: list[tuple[float, float]] | None = None
        self.bandwidth: list[float] = []
        self.measured: list[tuple[float, float]] = []
        self.of: list[int] = []  # subgroup -> path index

    def measure(self, slot_nbytes: int) -> None:
        """Each path's (read, write) bandwidth: the given figures, else a microbenchmark of
        up to measure_nbytes on each path (and all at once, when there are several)."""
        c = self.config
        if c.bandwidths is not None:
            self.measured = [(float(b), float(b)) for b in c.bandwidths]
            self.cpu_per_byte = list(c.cpu_per_byte) if c.cpu_per_byte is not None else None
            self.cpu_rate = c.cpu_rate
        else:
            n = min(c.measure_nbytes, slot_nbytes)
            self.measured = [p.measure(n) for p in self.paths]
            self.cpu_per_byte = [p.measured_cpu_per_byte for p in self.paths]
            if len(self.paths) > 1:
                self._measure_together(n)
        self.bandwidth = [min(r, w) for r, w in self.measured]

    def _measure_together(self, n: int) -> None:
        """Every path's microbenchmark at once (a thread each): when their sum falls short
        of the sum measured one at a time (by 10 %), the paths contend, and the CPU budget
        of the split is what they used together, sum of c_i * B_i (each path's CPU per byte,
        measured alone, times its bandwidth with the others running); else no CPU bound."""
        with cf.ThreadPoolExecutor(len(self.paths)) as ex:
            self.together = list(ex.map(lambda p: p.measure(n), self.paths))
        alone = sum(min(rw) for rw in self.measured)
        both = [min(rw) for rw in self.together]
        if sum(both) < 0.9 * alone:
            self.cpu_rate = sum(c * b for c, b in zip(self.cpu_per_byte or [], both)) or None
        else:
            self.cpu_rate = None

    def start(self, m: int) -> None:
        """The first assignment of m subgroups, interleaved over the paths."""
        self.of = L.interleave(self.split(m))

    def capacity_subgroups(self) -> list[int | None]:
        """Per path the most subgroups its capacity holds (None: no bound)."""
        return [None if p.capacity_nbytes is None
                else p.capacity_nbytes // max(1, p.footprint_nbytes()) for p in self.paths]

    def check_capacity(self, m: int) -> None:
        """CapacityError (a PathFullError naming every path) when the capacities hold fewer
        than m subgroups."""
        caps = self.capacity_subgroups()
        if any(c is None for c in caps) or sum(caps) >= m:
            return
        held = ", ".join(f"{p.name} {p.capacity_nbytes:,} bytes = {c} subgroups"
                         for p, c in zip(self.paths, caps))
        raise CapacityError(errno.ENOSPC, f"capacities hold {sum(caps)} of the {m} subgroups "
                            f"of {self.paths[0].footprint_nbytes():,} bytes each ({held})",
                            ", ".join(p.name for p in self.paths))

    def split(self, m: int) -> list[int]:
        """How many of m subgroups each path takes."""
        caps = self.capacity_subgroups()
        eq1 = self.config.split == "eq1"
        if all(c is None for c in caps):
            if eq1:
                return L.eq1_counts(m, self.bandwidth)
            return S.split_counts(m, self.bandwidth, self.cpu_per_byte, self.cpu_rate)
        self.check_capacity(m)
        if eq1:  # the paper's split, unless a path cannot hold its share
            counts = L.eq1_counts(m, self.bandwidth)
            if all(c is None or k <= c for k, c in zip(counts, caps)):
                return counts
            return S.split_counts(m, self.bandwidth, caps=caps)
        return S.split_counts(m, self.bandwidth, self.cpu_per_byte, self.cpu_rate, caps=caps)

    def reestimate(self, metrics: StepMetrics) -> None:
        """Each path's bandwidth moves towards what the step observed: the bytes it moved
        (both directions) over the time it was busy (at least one request in flight: a
        path with several requests in flight at once is not under-estimated)."""
        for i in range(len(self.paths)):
            nbytes, busy = metrics.observed(i)
            if busy > 0 and nbytes >= (1 << 20):
                self.bandwidth[i] = (1 - EWMA) * self.bandwidth[i] + EWMA * nbytes / busy
        new = self.split(len(self.of))
        if new != [self.of.count(i) for i in range(len(self.paths))]:
            self.of = L.rebalance(self.of, new)

    def reassign(self, bandwidths: Sequence[float]) -> list[int]:
        """Take these per-path bandwidths (bytes/s) and split again; subgroups whose path
        changes move at their next flush. Returns the new assignment."""
        self.bandwidth = [float(b) for b in bandwidths]
        self.of = L.rebalance(self.of, self.split(len(self.of)))
        return list(self.of)

    def plan(self) -> list[dict[str, Any]]:
        """Per path: its subgroups, bandwidth (bytes/s, min of read and write), the figures
        measured at start (alone; together: with every path running), its CPU seconds per
        byte, the CPU budget of the split (cpu_rate, None: not CPU-bound), its capacity
        (bytes and subgroups, None: no bound) and the bytes its subgroups take."""
        caps = self.capacity_subgroups()
        return [dict(path=p.name, kind=p.kind, subgroups=self.of.count(i),
                     capacity_nbytes=p.capacity_nbytes, capacity_subgroups=caps[i],
                     held_nbytes=self.of.count(i) * p.footprint_nbytes(),
                     bandwidth=self.bandwidth[i], read=self.measured[i][0],
                     write=self.measured[i][1],
                     together=min(self.together[i]) if self.together else None,
                     cpu_per_byte=self.cpu_per_byte[i] if self.cpu_per_byte else None,
                     cpu_rate=self.cpu_rate) for i, p in enumerate(self.paths)]
