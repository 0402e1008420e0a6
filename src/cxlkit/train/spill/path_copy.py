"""Paths whose slots are byte ranges of a mapping, moved by a (SIGBUS-guarded) copy on a
worker thread: a memory tier (placed buffers) and an object area of a cxlkit pool."""
from __future__ import annotations

import abc
import concurrent.futures as cf
import contextlib
import errno
import hashlib
import time
from typing import Any

from ... import placement as P
from .. import aio
from .path_base import (HEADER_NBYTES, FetchCheck, FlushHeader, Pending, PathIOError,
                         PathVanishedError, SpillPath, typed)

class _CopyPath(SpillPath):
    """Shared by the memory, pool and mapped directory paths: slots are byte ranges of a
    mapping, moved by the guarded copy on a worker thread (the GIL released). The store's
    header objects (FlushHeader, FetchCheck) ride in that copy, the payload sum folded into
    it (aio.copy_sum); any other hook is a pass of its own on a second thread.
    zero_copy: the slots are memory the AdamW kernel can read and write where they lie
    (SubgroupStore's zero_copy route, subgroup_inplace: no fetch or flush copy at all)."""

    zero_copy = True

    def __init__(self, name: str, *, lock: str) -> None:
        super().__init__(name, lock=lock)
        self._pool = cf.ThreadPoolExecutor(1, thread_name_prefix="cxlkit-spill")
        self._sums = cf.ThreadPoolExecutor(1, thread_name_prefix="cxlkit-sum")

    @abc.abstractmethod
    def _area(self, idx: int, create: bool) -> Any:
        """Subgroup idx's bytes as a writable uint8 array (create: make it when missing)."""

    def _where(self, idx: int) -> str:
        """What an error about subgroup idx names: the file or object that holds it."""
        return self.name

    def _submit(self, idx: int, slot: int, buf: Any, write: bool, hook: Any = None) -> Pending:
        # long: one function on purpose, its closures share `views`, which the request clears when
        # it ends so that no frame of a failed request's traceback keeps a view of the area
        # (the pool would not close); split into methods, more frames would hold them
        area = self._area(idx, create=write)
        lo = slot * self.slot_nbytes
        dst = area[lo:lo + buf.nbytes]
        if dst.nbytes != buf.nbytes:
            raise PathIOError(errno.EIO, f"slot {slot} holds {dst.nbytes} bytes, not "
                              f"{buf.nbytes}", self.name, idx)
        pend = Pending(None, buf.nbytes, self, idx, write, None, None)
        # the views, dropped when the request ends: a failed request's traceback holds
        # these frames, and a view of the area kept alive there keeps the pool from closing
        views = [dst, buf]
        del dst

        where = self._where(idx)
        folded = isinstance(hook, (FlushHeader, FetchCheck))

        def copy(d: Any, s: Any, summed: bool) -> int | None:
            try:
                # the guarded copy: a file or pool mapping truncated under it (by another
                # process, after any size check) raises here instead of SIGBUS
                if summed:
                    return aio.copy_sum(d, s, where)
                aio.copy(d, s, where)
                return None
            except OSError as e:
                err = PathIOError(errno.EIO, f"{'write' if write else 'read'} of slot "
                                  f"{slot} faulted ({e.strerror or e}): the mapping's "
                                  "backing shrank under it", where, idx)
            d = s = None  # raised out of the except: no traceback keeps a view of the area
            raise err

        def move() -> float:
            # the request's interval is the copy's own (set before the future completes; a
            # copy queued behind another starts when that one's interval ends)
            try:
                t1 = time.perf_counter()
                area_v, b = views
                h = HEADER_NBYTES
                if not folded:
                    copy(*((area_v, b) if write else (b, area_v)), False)
                elif write:
                    # one pass: the payload, its sum folded into the copy; then the header
                    # that names it (a crash between them leaves the slot's old header, whose
                    # sum the new bytes fail: the other slot's generation is the one read)
                    hook.write(copy(area_v[h:], b[h:], hook.summed) or 0)
                    copy(area_v[:h], b[:h], False)
                else:
                    # the header first: a foreign or stale one fails before the payload moves
                    copy(b[:h], area_v[:h], False)
                    hook.header()
                    hook.payload(copy(b[h:], area_v[h:], hook.summed))
                pend.t_submit = t1
                return time.perf_counter() - t1
            finally:
                views.clear()
                area_v = b = None  # a failed request's traceback holds this frame
                if folded:
                    del hook.raw  # its view of the buffer goes with the request
        if hook is None or folded:
            fut = self._pool.submit(move)
            pend._waiter, pend._poll = fut.result, fut.done
            return pend
        # other hooks (a plain function before a flush's copy, after a fetch's: a pass over
        # the bytes each) run on the path's sum thread: off the store's thread, and the copy
        # worker moves the next request meanwhile
        if write:
            def sum_then_copy() -> cf.Future:
                try:
                    hook()
                except BaseException:
                    views.clear()
                    raise
                return self._pool.submit(move)
            outer = self._sums.submit(sum_then_copy)
            pend._waiter = lambda: outer.result().result()
            pend._poll = lambda: outer.done() and (outer.exception() is not None
                                                   or outer.result().done())
            return pend
        inner = self._pool.submit(move)

        def copy_then_check() -> float:
            dt = inner.result()
            hook()
            return dt
        fut = self._sums.submit(copy_then_check)
        pend._waiter, pend._poll = fut.result, fut.done
        return pend

    def close(self) -> None:
        self._sums.shutdown(wait=True)  # it hands copies to the copy worker: first
        self._pool.shutdown(wait=True)
        super().close()


class MemoryPath(_CopyPath):
    """A memory tier: each subgroup's two slots in a buffer placed by `policy` (e.g.
    cxlkit.policy.bind(node) for a CXL node). Process memory: no lock needed between
    processes, and nothing survives the process (durable() is False)."""

    kind = "memory"
    checksummed = False

    def __init__(self, policy: P.Policy | int | None = None) -> None:
        pol = P.bind(policy) if isinstance(policy, int) and not isinstance(policy, bool) \
            else (policy or P.default())
        super().__init__(f"mem:{pol}", lock="off")
        self.policy = pol
        self._bufs: dict[int, Any] = {}

    def _area(self, idx: int, create: bool) -> Any:
        b = self._bufs.get(idx)
        if b is None:
            if not create:
                raise PathVanishedError(errno.ENOENT, "no such subgroup in memory", self.name,
                                        idx)
            b = P.alloc(self.nslots * self.slot_nbytes, self.policy)
            self._bufs[idx] = b
        return b.numpy()

    def durable(self) -> bool:
        return False

    def remove(self, idx: int) -> None:
        b = self._bufs.pop(idx, None)
        if b is not None:
            b.close()

    def close(self) -> None:
        super().close()
        for b in self._bufs.values():
            b.close()
        self._bufs.clear()


class PoolPath(_CopyPath):
    """An object area of a cxlkit pool (CXL pool memory): one object <prefix>.<idx> per
    subgroup, written by this host only. Its bytes are untrusted on the way back: every
    fetch checks header and checksum. Locked per host through a file in /dev/shm."""

    kind = "pool"

    def __init__(self, pool: Any, prefix: str = "cxlkit.sg", *, lock: str = "exclusive") -> None:
        super().__init__(f"pool:{pool.shared_path}/{prefix}", lock=lock)
        self.pool, self.prefix = pool, prefix
        self._objs: dict[int, Any] = {}

    def _lock_path(self) -> str:
        h = hashlib.sha1(self.name.encode()).hexdigest()[:16]
        return f"/dev/shm/cxlkit-subgroups-{h}.lock"

    def objname(self, idx: int) -> str:
        return f"{self.prefix}.{self.namespace}.{idx}"

    def _where(self, idx: int) -> str:
        return f"{self.pool.shared_path}:{self.objname(idx)}"

    def _area(self, idx: int, create: bool) -> Any:
        o = self._objs.get(idx)
        name = self.objname(idx)
        if o is None:
            try:
                if name in self.pool:
                    o = self.pool.open(name, writable=True)
                    if o.nbytes < self.nslots * self.slot_nbytes:
                        o.close()
                        self.pool.destroy(name)
                        o = None
                if o is None:
                    if not create:
                        raise PathVanishedError(errno.ENOENT, "no such object", self.name, idx)
                    o = self.pool.create(name, self.nslots * self.slot_nbytes, zero=False)
                    o.publish()
            except KeyError:
                raise PathVanishedError(errno.ENOENT, f"object {name} vanished", self.name,
                                        idx) from None
            except OSError as e:
                raise typed(e, f"{self.name}.{idx}", idx) from None
            self._objs[idx] = o
        return o.numpy()

    def discard(self, idx: int) -> None:
        o = self._objs.pop(idx, None)
        if o is not None:
            with contextlib.suppress(BufferError):  # a view lives on in a traceback
                o.close()

    def remove(self, idx: int) -> None:
        o = self._objs.pop(idx, None)
        if o is not None:
            o.close()
        with contextlib.suppress(KeyError):  # never written or already removed
            self.pool.destroy(self.objname(idx))

    def close(self) -> None:
        super().close()
        for o in self._objs.values():
            o.close()
        self._objs.clear()
