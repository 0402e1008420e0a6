"""The zero-copy update of a SubgroupStore (a mixin of it): a subgroup on a memory-semantic
path (a mapped tmpfs directory, a pool object area, a memory tier) is updated where it lies,
the kernel reading the slot that holds its newest generation and writing the next one
straight into the other slot (cxk_adam_step_into), then the new slot's header (generation,
length, payload sum) after the bytes it names. No fetch copy, no flush copy, no cache buffer."""
from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import adam as A
from . import aio
from .spill_base import HEADER_NBYTES, check_header, check_payload, checksum, pack_header, typed


class StoreInPlace:
    """Needs SubgroupStore's fields; never used alone."""

    def _in_place_path(self, k: int) -> bool:
        """Subgroup k's assigned path moves bytes by a CPU copy the kernel can skip."""
        return self.zero_copy and self.upcast == "delayed" and \
            getattr(self.paths[self.assignment[k]], "zero_copy", False)

    def _in_place_ready(self, k: int) -> bool:
        """k can be updated in place now: not in the host cache and its newest durable
        generation on its assigned zero-copy path (else the cache route: a fetch from the
        old path, a flush to the new one, the migration)."""
        return k not in self._where and self._in_place_path(k) and bool(self._dur[k]) \
            and self._location(k)[0] == self.assignment[k]

    def _leave_cache(self, k: int) -> None:
        """A cached subgroup of a zero-copy path leaves the host cache (written back first
        when dirty): from then on it is updated in place and its buffer serves the paths
        that copy. A clean one whose durable copy is still on another path (a migration
        pending) stays: the cache route moves it."""
        bi = self._where.get(k)
        if bi is None or not self._in_place_path(k):
            return
        if not self._dirty[bi] and self._location(k)[0] != self.assignment[k]:
            return
        self._evict(bi)
        self._finish(bi)
        self._drop(bi)

    def _update_in_place(self, k: int, configs: Sequence[A.AdamConfig], grads: Sequence[Any],
                         copies: Sequence[Any], steps: Sequence[int], grad_scale: float,
                         team: A.AdamTeam | None) -> None:
        """Check the newest generation's header (and payload sum: verify, a path that keeps
        sums) in its slot, run the kernel from it into the other slot (the same slot when
        the other one holds the committed generation: in place, which a crash mid-update
        leaves torn and the committed one intact), sum the new payload and write its header
        last. Errors are SubgroupError naming the path (file, object) and subgroup."""
        sg = self.subgroups[k]
        pi, slot, g = self._location(k)
        path = self.paths[pi]
        keep = self._committed[k]
        free = [s for s in (0, 1) if not (keep and keep[0] == pi and keep[1] == s)]
        out = next((s for s in free if s != slot), slot)
        size = path.slot_nbytes
        ext = HEADER_NBYTES + sg.state_nbytes
        st = self._step_stats
        self._acquire(path)
        t0 = time.perf_counter()
        try:
            where = path._where(k)
            try:
                area = path._area(k, create=False)
            except OSError as e:
                raise typed(e, where, k) from None
            src, dst = area[slot * size:slot * size + ext], area[out * size:out * size + ext]
            check_header(src, k, g, sg.nparams, sg.state_nbytes, self.key, where)
            summed = path.checksummed
            if self.verify and summed:
                check_payload(src, src[HEADER_NBYTES:], k, where)
            t1 = time.perf_counter()
            n = sg.nparams
            fin = src[HEADER_NBYTES:HEADER_NBYTES + 12 * n].view(np.float32)
            fout = dst[HEADER_NBYTES:HEADER_NBYTES + 12 * n].view(np.float32)
            ins = (fin[:n], fin[n:2 * n], fin[2 * n:])
            outs = (fout[:n], fout[n:2 * n], fout[2 * n:])
            for s, args, o in self._kernel_args(sg, ins, outs, grads, copies, steps):
                A.step_raw_into(args, o, configs[sg.group], s, grad_scale=grad_scale,
                                team=team)
            if out != slot:
                # a param without a grad is skipped by the step (as torch does): its state
                # goes to the new slot unchanged
                for pc in sg.pieces:
                    if grads[pc.pid] is None:
                        a, b = pc.at, pc.at + pc.hi - pc.lo
                        for x, y in zip(ins, outs):
                            aio.copy(y[a:b], x[a:b], where)
            t2 = time.perf_counter()
            ver = self.ver[k] + 1
            hdr = np.zeros(HEADER_NBYTES, np.uint8)
            raw = pack_header(k, ver, n, dst[HEADER_NBYTES:], self.key,
                              payload_sum=checksum(dst[HEADER_NBYTES:]) if summed else 0)
            hdr[:len(raw)] = np.frombuffer(raw, np.uint8)
            try:
                aio.copy(dst[:HEADER_NBYTES], hdr, where)  # guarded: a truncated mapping
            except OSError as e:
                raise typed(e, where, k) from None
        finally:
            path._unlock()
        t3 = time.perf_counter()
        # the path's traffic is the kernel's: the old generation read, the new one written,
        # over the update's interval (checks and sums included)
        self._account(pi, False, ext, t0, t3 - t0)
        self._account(pi, True, ext, t0, t3 - t0)
        st["in_place"] += 1
        st["in_place_s"] += t3 - t0
        st["in_place_check_s"] += (t1 - t0) + (t3 - t2)
        st["compute_s"] += t2 - t1
        self._dur[k][(pi, out)] = ver
        self._dur[k] = {loc: v for loc, v in self._dur[k].items()
                        if loc[0] == pi or self._committed[k] == (*loc, v)}
        self.ver[k] = ver
