"""The disk's payload checksums folded into the AdamW kernel (a mixin of SubgroupStore): a
subgroup read from a directory through the async I/O engine (no user-space copy moves its
bytes, so its sums were passes of their own) is fetched with its header checked only; its
update runs the kernel in place over the cache buffer with the sums folded into the kernel's
loads and stores (cxk_adam_step_into_sum, out == in), checks the old payload's sum against
the header, and hands the new payload's sum to the flush, which writes it without a pass.
The kernel writes the user's param copies of such a subgroup into a scratch buffer first:
they reach the user's arrays only after the payload's sum matched, so a corrupt payload
never reaches the user's bf16 params (the copies staged out, and in with resync: 2 or 4 bytes
per param read and written, instead of two passes of 12 bytes per param). The zero-copy
route (subgroup_inplace) stages its copies the same way when its old generation's sum is
folded into the kernel."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import _native
from . import adam as A
from .spill_base import HEADER_NBYTES, FlushHeader, check_payload


class StoreFold:
    """Needs SubgroupStore's fields (_unchecked, _sums per host buffer); never used alone."""

    def _fold_path(self, path: Any) -> bool:
        """Sums on this path are folded into the kernel: sum_in_kernel, delayed upcast, and a
        path that keeps sums by a pass of their own (a directory through the engine)."""
        return self.sum_in_kernel and self.upcast == "delayed" and path.checksummed \
            and path.sum_by_pass

    def _check_resident(self, bi: int, sg: Any) -> None:
        """A fetched buffer whose payload sum the fold deferred, read by something other than
        the kernel (read_state, write_state): its sum checked now, by a pass."""
        if self._unchecked[bi]:
            raw = self._io_extent(bi, sg)
            pi = self._location(sg.idx)[0]
            try:
                check_payload(raw, raw[HEADER_NBYTES:], sg.idx, self.paths[pi].name)
            except OSError:
                self._drop(bi)
                raise
            self._unchecked[bi] = False

    def _flush_prepare(self, bi: int, k: int, prepare: FlushHeader, path: Any) -> Any:
        """The flush's header hook: the sum the update folded, when it describes these bytes
        (same subgroup, same version) and the path would take it by a pass; else prepare."""
        known = self._sums[bi]
        if known is not None and known[:2] == (k, self.ver[k]) and self._fold_path(path):
            self._step_stats["folded_flushes"] += 1
            return lambda: prepare.write(known[2])
        return prepare

    def _update_folded(self, bi: int, sg: Any, configs: Sequence[A.AdamConfig],
                       grads: Sequence[Any], copies: Sequence[Any], steps: Sequence[int],
                       grad_scale: float, team: A.AdamTeam | None) -> bool:
        """The update of a cached subgroup with its sums in the kernel, when its payload sum
        is still to check (a folded fetch) or its flush goes to a folding path; False: not
        this route (the caller runs the plain kernel). Raises SubgroupCorruptError (the
        buffer dropped, the user's copies untouched) when the old payload's sum fails."""
        k = sg.idx
        check_in = self._unchecked[bi]
        sum_out = self._fold_path(self.paths[self.assignment[k]])
        if not (check_in or sum_out):
            return False
        master, m, v, raw = self._buf_views(bi, sg)
        payload = self._io_extent(bi, sg)[HEADER_NBYTES:]
        n = sg.nparams
        pin = np.zeros(8, np.uint64) if check_in else None
        pout = np.zeros(8, np.uint64) if sum_out else None
        staged = self._stage_copies(sg, copies, configs[sg.group].resync) \
            if check_in else None
        ins = (master, m, v)
        for s, args, o, offs in self._kernel_args(sg, ins, ins, grads,
                                                  staged[0] if staged else copies, steps,
                                                  with_offs=True):
            A.step_raw_into_sum(args, o, offs, configs[sg.group], s, in_parts=pin,
                                out_parts=pout, grad_scale=grad_scale, team=team)
        # the bytes the kernel does not touch (params without a grad, the padding) are the
        # same before and after: their sums go to both
        spans = [(4 * (j * n + pc.at), 4 * (pc.hi - pc.lo)) for pc in sg.pieces
                 if grads[pc.pid] is None for j in range(3)] + \
            [(12 * n, payload.nbytes - 12 * n)]
        for off, nbytes in spans:
            for parts in (pin, pout):
                if parts is not None and nbytes:
                    _native.sum_parts_add(parts, payload[off:off + nbytes], off)
        if pin is not None:
            got = int(_native.sum_parts_finish(pin, payload.nbytes))
            pi = self._location(k)[0]
            try:
                    check_payload(raw, None, k, self.paths[pi].name, payload_sum=got)
            except OSError:
                self._drop(bi)  # its state was computed from corrupt bytes
                raise
            self._unchecked[bi] = False
            for dst, src in staged[1]:
                dst[:] = src
        self._sums[bi] = (k, self.ver[k] + 1, int(_native.sum_parts_finish(
            pout, payload.nbytes))) if pout is not None else None
        return True

    def _stage_copies(self, sg: Any, copies: Sequence[Any],
                      resync: bool = True) -> tuple[list, list]:
        """copies for _kernel_args with each piece's slice redirected to a scratch buffer
        (a piece of param pid at [lo, hi) lands at scratch[at:at + hi - lo]), and the
        (user's slice, scratch slice) pairs to copy once the payload checked out. resync:
        the kernel reads the copies too (AdamConfig.resync), so the scratch starts as the
        user's values; else the kernel only writes it."""
        need = 4 * max(s.nparams for s in self.subgroups)
        if getattr(self, "_copy_stage", None) is None or self._copy_stage.nbytes < need:
            self._copy_stage = np.empty(need, np.uint8)
        out: list[Any] = list(copies)
        pairs = []
        for pc in sg.pieces:
            c = copies[pc.pid]
            if c is None:
                continue
            arr, code = c
            width = arr.dtype.itemsize
            scratch = self._copy_stage[width * pc.at:width * (pc.at + pc.hi - pc.lo)].view(
                arr.dtype)
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

