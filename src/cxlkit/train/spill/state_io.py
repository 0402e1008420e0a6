"""StateIO: the state of chosen params, (master, exp_avg, exp_avg_sq) as flat fp32 arrays,
read or overwritten subgroup by subgroup through the host cache (state_dict and
load_state_dict stream it this way)."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import layout as L
from .pipeline import Pipeline
from .update_folded import FoldedUpdate


class StateIO:
    def __init__(self, pipeline: Pipeline, folded: FoldedUpdate,
                 param_sizes: Sequence[int]) -> None:
        self.pipeline, self.folded, self.param_sizes = pipeline, folded, param_sizes

    def read(self, pids: Sequence[int] | None = None) -> dict[int, tuple[Any, Any, Any]]:
        want = set(range(len(self.param_sizes)) if pids is None else pids)
        out = {pid: tuple(np.empty(self.param_sizes[pid], np.float32) for _ in range(3))
               for pid in want}

        def get(pc: L.Piece, views: tuple) -> None:
            for dst, src in zip(out[pc.pid], views):
                dst[pc.lo:pc.hi] = src[pc.at:pc.at + pc.hi - pc.lo]
        self._visit(want, get)
        return out

    def write(self, state: dict[int, tuple[Any, Any, Any]]) -> None:
        for pid, arrs in state.items():
            for a in arrs:
                if np.asarray(a).size != self.param_sizes[pid]:
                    raise ValueError(f"param {pid}: {np.asarray(a).size} elements, expected "
                                     f"{self.param_sizes[pid]}")

        def put(pc: L.Piece, views: tuple) -> None:
            for dst, src in zip(views, state[pc.pid]):
                dst[pc.at:pc.at + pc.hi - pc.lo] = np.asarray(src, np.float32).reshape(-1)[
                    pc.lo:pc.hi]
        self._visit(set(state), put, dirty=True)

    def _visit(self, pids: set[int], fn: Callable[[L.Piece, tuple], Any],
               dirty: bool = False) -> None:
        pl = self.pipeline
        c = pl.cache
        pl.metrics.begin()
        pl.begin(max(pl.ledger.gen, default=0))
        for sg in pl.subgroups:
            if not any(pc.pid in pids for pc in sg.pieces):
                continue
            if not pl.fetch(sg.idx, {sg.idx}, wait=True):
                raise RuntimeError("host cache has no buffer")
            bi = c.where[sg.idx]
            pl.finish(bi)
            self.folded.check_resident(bi, sg)  # a folded fetch's payload sum, now by a pass
            master, m, v, _ = c.views(bi, sg)
            for pc in sg.pieces:
                if pc.pid in pids:
                    fn(pc, (master, m, v))
            if dirty:
                c.dirty[bi] = True
                pl.ledger.ver[sg.idx] += 1
            c.touch(bi)
        pl.drain()
