"""The zero-copy update of a SubgroupStore (InPlaceUpdate): a subgroup on a memory-semantic
path (a mapped tmpfs directory, a pool object area, a memory tier) is updated where it lies,
the kernel reading the slot that holds its newest generation and writing the next one
straight into the other slot (cxk_adam_step_into), then the new slot's header (generation,
length, payload sum) after the bytes it names. No fetch copy, no flush copy, no cache buffer."""
from __future__ import annotations

import errno
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from ... import _native
from .. import adam as A
from .. import aio
from .cache import HostCache
from .config import SpillConfig
from .kernel import StepInputs, kernel_args
from .path_base import (HEADER_NBYTES, PathIOError, check_header, check_payload, checksum,
                        pack_header, typed)
from .update_folded import CopyStage


class InPlaceUpdate:
    def __init__(self, config: SpillConfig, cache: HostCache, pipeline: Any,
                 stage: CopyStage) -> None:
        self.config, self.cache, self.pipeline, self.stage = config, cache, pipeline, stage

    def on_path(self, k: int) -> bool:
        """Subgroup k's assigned path moves bytes by a CPU copy the kernel can skip."""
        pl = self.pipeline
        return self.config.in_place(pl.paths[pl.assignment.of[k]])

    def ready(self, k: int) -> bool:
        """k can be updated in place now: not in the host cache and its newest durable
        generation on its assigned zero-copy path (else the cache route: a fetch from the
        old path, a flush to the new one, the migration)."""
        pl = self.pipeline
        return k not in self.cache.where and self.on_path(k) and pl.ledger.has_copy(k) \
            and pl.location(k)[0] == pl.assignment.of[k]

    def leave_cache(self, k: int) -> None:
        """A cached subgroup of a zero-copy path leaves the host cache (written back first
        when dirty): from then on it is updated in place and its buffer serves the paths
        that copy. A clean one whose durable copy is still on another path (a migration
        pending) stays: the cache route moves it."""
        bi = self.cache.where.get(k)
        pl = self.pipeline
        if bi is None or not self.on_path(k):
            return
        if not self.cache.dirty[bi] and pl.location(k)[0] != pl.assignment.of[k]:
            return
        pl.free(bi)

    def run(self, k: int, inp: StepInputs) -> None:
        """Check the newest generation's header (and payload sum: verify, a path that keeps
        sums) in its slot, run the kernel from it into the same slot, or into the other one
        when its slot holds the committed generation (the first update after a commit), sum
        the new payload and write its header last. A crash mid-update leaves the committed
        generation intact in its slot (what resume reads; the slot being updated is torn,
        its header's sum fails). Errors are SubgroupError naming the path (file, object)
        and subgroup."""
        pl = self.pipeline
        sg = pl.subgroups[k]
        pi, slot, g = pl.location(k)
        path = pl.paths[pi]
        # the slot it lies in, unless that one holds the committed generation (the one a
        # resume reads): then the other slot, once per commit. In place on its own slot the
        # kernel writes lines it has just read (out of place, every store first read the
        # other slot's line: 0.10 against 0.06 CPU s per GB of state)
        keep = pl.ledger.committed[k]
        out = 1 - slot if keep and tuple(keep[:2]) == (pi, slot) else slot
        pl.acquire(path)
        t0 = time.perf_counter()
        try:
            t1, t2 = self._update_slots(path, sg, slot, out, g, inp)
        finally:
            path._unlock()
        t3 = time.perf_counter()
        ext = HEADER_NBYTES + sg.state_nbytes
        # the path's traffic is the kernel's: the old generation read, the new one written,
        # over the update's interval (checks and sums included)
        m = pl.metrics
        m.account(pi, False, ext, t0, t3 - t0)
        m.account(pi, True, ext, t0, t3 - t0)
        st = m.stats
        st["in_place"] += 1
        st["in_place_s"] += t3 - t0
        st["in_place_check_s"] += (t1 - t0) + (t3 - t2)
        st["compute_s"] += t2 - t1  # the kernel, with the sums it folds
        ver = pl.ledger.ver[k] + 1
        pl.ledger.record(k, pi, out, ver)
        pl.ledger.ver[k] = ver

    def _update_slots(self, path: Any, sg: Any, slot: int, out: int, g: int,
                      inp: StepInputs) -> tuple[float, float]:
        """The kernel from slot into slot out of sg's area on path, checks and header
        included; returns the times the kernel started and ended."""
        k, key = sg.idx, self.pipeline.key
        size, ext = path.slot_nbytes, HEADER_NBYTES + sg.state_nbytes
        where = path._where(k)
        try:
            area = path._area(k, create=False)
        except OSError as e:
            raise typed(e, where, k) from None
        src, dst = area[slot * size:slot * size + ext], area[out * size:out * size + ext]
        summed = path.checksummed
        verify = self.config.verify and summed
        fold = self.config.sum_in_kernel
        # the old generation's sum folded into the kernel is known only after the kernel
        # wrote the param copies: they go to a scratch buffer first, and to the user's
        # arrays once the sum matched (update_folded)
        staged = self.stage.redirect(sg, inp.copies, inp.configs[sg.group].resync) \
            if verify and fold else None
        # the file may be truncated by another process at any moment after the size check
        # of _area: under the range guard a fault on any thread (the team's too) maps a
        # zero page instead of killing the process, and is raised here
        with _TruncationGuard(area, where, k, path):
            check_header(src, k, g, sg.nparams, sg.state_nbytes, key, where)
            if verify and not fold:
                check_payload(src, src[HEADER_NBYTES:], k, where)  # a pass of its own
            t1 = time.perf_counter()
            sums = _kernel_in_place(sg, src[HEADER_NBYTES:], dst[HEADER_NBYTES:], out == slot,
                                    verify and fold, summed and fold, inp,
                                    staged[0] if staged else inp.copies, where)
            t2 = time.perf_counter()
            out_sum = sums[1] if sums[1] is not None else \
                checksum(dst[HEADER_NBYTES:]) if summed else 0
        if sums[0] is not None:  # the old generation's sum, folded into the kernel's loads
            check_payload(src, None, k, where, payload_sum=sums[0])
        for user, scratch in staged[1] if staged else ():
            user[:] = scratch
        hdr = np.zeros(HEADER_NBYTES, np.uint8)
        raw = pack_header(k, self.pipeline.ledger.ver[k] + 1, sg.nparams, dst[HEADER_NBYTES:],
                          key, payload_sum=out_sum)
        hdr[:len(raw)] = np.frombuffer(raw, np.uint8)
        try:
            aio.copy(dst[:HEADER_NBYTES], hdr, where)  # guarded: a truncated mapping
        except OSError as e:
            raise typed(e, where, k) from None
        return t1, t2


def _kernel_in_place(sg: Any, src: Any, dst: Any, same: bool, sum_in: bool, sum_out: bool,
                     inp: StepInputs, copies: Sequence[Any],
                     where: str) -> tuple[int | None, int | None]:
    """The kernel from payload src into payload dst (uint8 views of the two slots past
    their headers; the same bytes when same), params without a grad carried over.
    sum_in / sum_out: fold the payload checksum of src as read / dst as written into
    the kernel's pass (cxk_adam_step_into_sum, parts that add; the pieces it does not
    touch and the padding added beside it); returns those sums (None: not taken)."""
    n = sg.nparams
    fin, fout = src[:12 * n].view(np.float32), dst[:12 * n].view(np.float32)
    ins = (fin[:n], fin[n:2 * n], fin[2 * n:])
    outs = (fout[:n], fout[n:2 * n], fout[2 * n:])
    pin = np.zeros(8, np.uint64) if sum_in else None
    pout = np.zeros(8, np.uint64) if sum_out else None
    for s, args, o, offs in kernel_args(sg, ins, outs, inp.grads, copies, inp.steps,
                                        with_offs=True):
        if pin is None and pout is None:
            A.step_raw_into(args, o, inp.configs[sg.group], s, grad_scale=inp.grad_scale,
                            team=inp.team)
        else:
            A.step_raw_into_sum(args, o, offs, inp.configs[sg.group], s, in_parts=pin,
                                out_parts=pout, grad_scale=inp.grad_scale, team=inp.team)
    # a param without a grad is skipped by the step (as torch does): its state goes to
    # the new slot unchanged
    for pc in sg.pieces:
        if inp.grads[pc.pid] is not None:
            continue
        a, b = pc.at, pc.at + pc.hi - pc.lo
        for j, (x, y) in enumerate(zip(ins, outs)):
            off = 4 * (j * n + a)
            if pin is not None:
                _native.sum_parts_add(pin, x[a:b].view(np.uint8), off)
            if not same:
                aio.copy(y[a:b], x[a:b], where)
            if pout is not None:
                _native.sum_parts_add(pout, y[a:b].view(np.uint8), off)
    if pin is not None:
        _native.sum_parts_add(pin, src[12 * n:], 12 * n)  # the padding
    if pout is not None:
        _native.sum_parts_add(pout, dst[12 * n:], 12 * n)
    return (None if pin is None else int(_native.sum_parts_finish(pin, src.nbytes)),
            None if pout is None else int(_native.sum_parts_finish(pout, dst.nbytes)))


class _TruncationGuard:
    """aio.RangeGuard over a subgroup's slots for the in-place update: on leaving, faults
    taken (the file truncated under the mapping while the kernel ran) drop the mapping and
    raise PathIOError(EFAULT) naming the file and subgroup, in place of whatever the zero
    pages made the checks raise. The slot being written is torn (its header is never
    written); the committed generation stays in its slot unless the truncation cut it too.
    The bf16 param copies the kernel wrote for the subgroup are then undefined."""

    def __init__(self, area: Any, where: str, k: int, path: Any) -> None:
        self.guard = aio.RangeGuard(area, where)
        self.where, self.k, self.path = where, k, path

    def __enter__(self) -> _TruncationGuard:
        return self

    def __exit__(self, *exc: object) -> None:
        faults = self.guard.close()
        if faults:
            self.path.discard(self.k)
            raise PathIOError(errno.EFAULT, f"truncated under the update ({faults} pages "
                              "faulted): the slot being written is torn, the committed "
                              "generation stays in its slot", self.where, self.k) from None
