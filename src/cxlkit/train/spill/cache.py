"""HostCache: the K host buffers subgroups are read into, updated in and flushed from. Per
buffer: the subgroup it holds, whether that is dirty, its I/O in flight, when it was last
used, and the fold's bookkeeping (a payload sum still to check, the sum the update made).
Layout of a buffer: [header | master | exp_avg | exp_avg_sq | pad] [fp32 grads (eager)]."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ... import placement as P
from . import layout as L
from .path_base import HEADER_NBYTES, Pending


class HostCache:
    def __init__(self, nbufs: int, slot_nbytes: int, grad_nbytes: int,
                 policy: P.Policy | None) -> None:
        self.slot_nbytes = slot_nbytes
        self.bufs = [P.alloc(slot_nbytes + grad_nbytes, policy or P.default())
                     for _ in range(nbufs)]
        self.raw = [b.numpy() for b in self.bufs]
        self.held: list[int | None] = [None] * nbufs
        self.dirty = [False] * nbufs
        self.unchecked = [False] * nbufs  # a fetched payload whose sum the update checks (fold)
        self.sums: list[tuple[int, int, int] | None] = [None] * nbufs  # (k, version, sum)
        self.io: list[Pending | None] = [None] * nbufs
        self.stamp = [0] * nbufs
        self.where: dict[int, int] = {}  # subgroup -> buffer
        self.clock = 0

    def __len__(self) -> int:
        return len(self.bufs)

    def views(self, bi: int, sg: L.Subgroup) -> tuple[Any, Any, Any, Any]:
        """(master, exp_avg, exp_avg_sq) as flat fp32 views of buffer bi, and its raw bytes."""
        raw = self.raw[bi]
        fl = raw[HEADER_NBYTES:HEADER_NBYTES + 12 * sg.nparams].view(np.float32)
        n = sg.nparams
        return fl[:n], fl[n:2 * n], fl[2 * n:3 * n], raw

    def extent(self, bi: int, sg: L.Subgroup) -> Any:
        """The bytes a read or write of sg moves: header and payload."""
        return self.raw[bi][:HEADER_NBYTES + sg.state_nbytes]

    def grad_area(self, bi: int, sg: L.Subgroup) -> Any:
        lo = self.slot_nbytes
        return self.raw[bi][lo:lo + L.pad(4 * sg.nparams)]

    def hold(self, bi: int, k: int, dirty: bool) -> None:
        self.held[bi], self.dirty[bi] = k, dirty
        self.where[k] = bi

    def touch(self, bi: int) -> None:
        """Buffer bi was just used (the order victim() evicts in)."""
        self.clock += 1
        self.stamp[bi] = self.clock

    def drop(self, bi: int) -> None:
        k = self.held[bi]
        if k is not None:
            self.where.pop(k, None)
        self.held[bi], self.dirty[bi] = None, False
        self.unchecked[bi], self.sums[bi] = False, None

    def victim(self, keep: set[int], gen: Sequence[int], target: int, pos: dict[int, int],
               ready_only: bool = False) -> int | None:
        """A buffer to reuse: a free one, else the one whose subgroup is needed last
        (Belady): subgroups done for this step (gen >= target) come next step, the least
        recently updated last (alternating order); those still to do, by their position in
        this step. ready_only: skip buffers whose I/O is still in flight (taking one would
        block)."""
        best, best_d = None, None
        for bi, k in enumerate(self.held):
            if ready_only and self.io[bi] is not None and not self.io[bi].ready():
                continue
            if k is None and self.io[bi] is None:
                return bi
            if k is None or k in keep:
                continue
            d = (1, -self.stamp[bi]) if gen[k] >= target else (0, pos.get(k, 1 << 62))
            if best_d is None or d > best_d:
                best, best_d = bi, d
        return best

    def oldest(self) -> int:
        return min(range(len(self.bufs)), key=lambda b: self.stamp[b])

    def close(self) -> None:
        self.raw = []
        for b in self.bufs:
            try:
                b.close()
            except BufferError:
                # views of it live on in a raised error's traceback (a request's hooks,
                # the copy of a failed fetch): it is unmapped with them
                pass
