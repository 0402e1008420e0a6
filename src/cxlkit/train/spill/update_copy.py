"""The update of a subgroup resident in the host cache (CopyUpdate: its bytes were copied in
by a fetch and go back by a flush), with the checksums folded into the kernel where the fold
applies; and the eager-upcast baseline's grads (EagerGrads: every subgroup's grads upcast to
fp32 and written to its path before the update reads them back, as DeepSpeed does)."""
from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from ... import placement as P
from .. import adam as A
from . import layout as L
from .cache import HostCache
from .kernel import StepInputs, kernel_args
from .update_folded import FoldedUpdate

F32 = A.DTYPES["float32"]
BF16 = A.DTYPES["bfloat16"]


class CopyUpdate:
    def __init__(self, cache: HostCache, folded: FoldedUpdate, eager: bool) -> None:
        self.cache, self.folded, self.eager = cache, folded, eager

    def run(self, bi: int, sg: L.Subgroup, inp: StepInputs) -> None:
        if self.folded.run(bi, sg, inp):
            return
        master, m, v, _ = self.cache.views(bi, sg)
        gf = self.cache.grad_area(bi, sg).view(np.float32) if self.eager else None
        for s, args, _ in kernel_args(sg, (master, m, v), None, inp.grads, inp.copies,
                                      inp.steps, gf):
            A.step_raw(args, inp.configs[sg.group], s, grad_scale=inp.grad_scale,
                       team=inp.team)


class EagerGrads:
    """The baseline's path: every subgroup's grads upcast to fp32 in a staging buffer and
    written to slot 2 of the path holding the subgroup, waited for one by one."""

    def __init__(self, pipeline: Any, grad_nbytes: int, policy: P.Policy | None) -> None:
        self.pipeline, self.grad_nbytes, self.policy = pipeline, grad_nbytes, policy
        self.buf: P.Buffer | None = None

    def spill(self, order: Sequence[int], grads: Sequence[Any]) -> None:
        pl = self.pipeline
        if self.buf is None:
            self.buf = P.alloc(self.grad_nbytes, self.policy or P.default())
        stage = self.buf.numpy()
        for k in order:
            sg = pl.subgroups[k]
            area = stage[:L.pad(4 * sg.nparams)]
            _upcast(sg, grads, area.view(np.float32))
            bi = pl.cache.where.get(k)
            if bi is not None:  # resident: its buffer's grad area is what the update reads
                pl.cache.grad_area(bi, sg)[:] = area
            pi = pl.location(k)[0] if pl.ledger.has_copy(k) else pl.assignment.of[k]
            path = pl.paths[pi]
            pl.acquire(path)
            pend = path.write(k, 2, area)
            t_block = time.perf_counter()
            dt = pend.wait()
            pl.metrics.stats["write_wait_s"] += time.perf_counter() - t_block
            pl.metrics.account(pi, True, pend.nbytes, pend.t_submit, dt)

    def close(self) -> None:
        if self.buf is not None:
            self.buf.close()
            self.buf = None


def _upcast(sg: L.Subgroup, grads: Sequence[Any], f: Any) -> None:
    """sg's grads as fp32 into f (zeros for a param without a grad)."""
    for pc in sg.pieces:
        g = grads[pc.pid]
        dst = f[pc.at:pc.at + pc.hi - pc.lo]
        if g is None:
            dst[:] = 0
        elif g[1] == F32:
            dst[:] = g[0][pc.lo:pc.hi]
        else:
            bits = g[0][pc.lo:pc.hi].view(np.uint16).astype(np.uint32)
            dst[:] = (bits << 16).view(np.float32) if g[1] == BF16 \
                else g[0][pc.lo:pc.hi].view(np.float16).astype(np.float32)
