"""The disk's payload checksums folded into the AdamW kernel (FoldedUpdate): a
subgroup read from a directory through the async I/O engine (no user-space copy moves its
bytes, so its sums were passes of their own) is fetched with its header checked only; its
update runs the kernel in place over the cache buffer with the sums folded into the kernel's
loads and stores (cxk_adam_step_into_sum, out == in), checks the old payload's sum against
the header, and hands the new payload's sum to the flush, which writes it without a pass.
The kernel writes the user's param copies of such a subgroup into a scratch buffer first:
they reach the user's arrays only after the payload's sum matched, so a corrupt payload
never reaches the user's bf16 params (the copies staged out, and in with resync: 2 or 4 bytes
per param read and written, instead of two passes of 12 bytes per param). The zero-copy
route (update_inplace) stages its copies the same way when its old generation's sum is
folded into the kernel."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ... import _native
from .. import adam as A
from .cache import HostCache
from .config import SpillConfig
from .kernel import StepInputs, kernel_args
from .path_base import HEADER_NBYTES, check_payload


class FoldedUpdate:
    def __init__(self, config: SpillConfig, cache: HostCache, pipeline: Any,
                 stage: CopyStage) -> None:
        self.config, self.cache, self.pipeline, self.stage = config, cache, pipeline, stage

    def check_resident(self, bi: int, sg: Any) -> None:
        """A fetched buffer whose payload sum the fold deferred, read by something other than
        the kernel (read_state, write_state): its sum checked now, by a pass."""
        c = self.cache
        if c.unchecked[bi]:
            raw = c.extent(bi, sg)
            pi = self.pipeline.location(sg.idx)[0]
            try:
                check_payload(raw, raw[HEADER_NBYTES:], sg.idx, self.pipeline.paths[pi].name)
            except OSError:
                c.drop(bi)
                raise
            c.unchecked[bi] = False

    def run(self, bi: int, sg: Any, inp: StepInputs) -> bool:
        """The update of a cached subgroup with its sums in the kernel, when its payload sum
        is still to check (a folded fetch) or its flush goes to a folding path; False: not
        this route (the caller runs the plain kernel). Raises SubgroupCorruptError (the
        buffer dropped, the user's copies untouched) when the old payload's sum fails."""
        k, c, pl = sg.idx, self.cache, self.pipeline
        check_in = c.unchecked[bi]
        sum_out = self.config.folds(pl.paths[pl.assignment.of[k]])
        if not (check_in or sum_out):
            return False
        master, m, v, raw = c.views(bi, sg)
        payload = c.extent(bi, sg)[HEADER_NBYTES:]
        pin = np.zeros(8, np.uint64) if check_in else None
        pout = np.zeros(8, np.uint64) if sum_out else None
        cfg = inp.configs[sg.group]
        staged = self.stage.redirect(sg, inp.copies, cfg.resync) if check_in else None
        ins = (master, m, v)
        for s, args, o, offs in kernel_args(sg, ins, ins, inp.grads,
                                            staged[0] if staged else inp.copies, inp.steps,
                                            with_offs=True):
            A.step_raw_into_sum(args, o, offs, cfg, s, in_parts=pin, out_parts=pout,
                                grad_scale=inp.grad_scale, team=inp.team)
        _sum_untouched(sg, inp.grads, payload, pin, pout)
        if pin is not None:
            got = int(_native.sum_parts_finish(pin, payload.nbytes))
            pi = pl.location(k)[0]
            try:
                check_payload(raw, None, k, pl.paths[pi].name, payload_sum=got)
            except OSError:
                c.drop(bi)  # its state was computed from corrupt bytes
                raise
            c.unchecked[bi] = False
            for dst, src in staged[1]:
                dst[:] = src
        c.sums[bi] = (k, pl.ledger.ver[k] + 1, int(_native.sum_parts_finish(
            pout, payload.nbytes))) if pout is not None else None
        return True


def _sum_untouched(sg: Any, grads: Sequence[Any], payload: Any, pin: Any, pout: Any) -> None:
    """The bytes the kernel does not touch (params without a grad, the padding) are the
    same before and after: their sums go to both."""
    n = sg.nparams
    spans = [(4 * (j * n + pc.at), 4 * (pc.hi - pc.lo)) for pc in sg.pieces
             if grads[pc.pid] is None for j in range(3)] + \
        [(12 * n, payload.nbytes - 12 * n)]
    for off, nbytes in spans:
        for parts in (pin, pout):
            if parts is not None and nbytes:
                _native.sum_parts_add(parts, payload[off:off + nbytes], off)


class CopyStage:
    """A scratch buffer for the param copies the kernel writes while a payload's sum is
    still unchecked (shared by the folded and the in-place updates)."""

    def __init__(self, subgroups: Sequence[Any]) -> None:
        self.need = 4 * max((s.nparams for s in subgroups), default=1)
        self.buf: Any = None

    def redirect(self, sg: Any, copies: Sequence[Any], resync: bool = True) -> tuple[list, list]:
        """copies for kernel_args with each piece's slice redirected to the scratch buffer
        (a piece of param pid at [lo, hi) lands at scratch[at:at + hi - lo]), and the
        (user's slice, scratch slice) pairs to copy once the payload checked out. resync:
        the kernel reads the copies too (AdamConfig.resync), so the scratch starts as the
        user's values; else the kernel only writes it."""
        if self.buf is None:
            self.buf = np.empty(self.need, np.uint8)
        out: list[Any] = list(copies)
        pairs = []
        for pc in sg.pieces:
            c = copies[pc.pid]
            if c is None:
                continue
            arr, code = c
            width = arr.dtype.itemsize
            scratch = self.buf[width * pc.at:width * (pc.at + pc.hi - pc.lo)].view(arr.dtype)
            if resync:  # a param the user changed since the last step becomes the master
                scratch[:] = arr[pc.lo:pc.hi]
            out[pc.pid] = (_Shifted(scratch, pc.lo), code)
            pairs.append((arr[pc.lo:pc.hi], scratch))
        return out, pairs


class _Shifted:
    """An array whose [lo:hi] is scratch[0:hi - lo]: a param's piece staged in scratch."""

    def __init__(self, scratch: Any, lo: int) -> None:
        self.scratch, self.lo = scratch, lo

    def __getitem__(self, s: slice) -> Any:
        return self.scratch[s.start - self.lo:s.stop - self.lo]
