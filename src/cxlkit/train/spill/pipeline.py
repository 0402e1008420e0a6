"""Pipeline: the reads and writes between the paths and the host cache. fetch starts a
subgroup's read into a free or evicted buffer (checked by its request: header, and payload
sum unless the update folds it), flush starts a dirty buffer's write to its assigned path
(the header packed by the request), finish waits for a buffer's I/O and records what became
durable; read_ahead keeps K-2 reads in flight ahead of the update."""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from . import layout as L
from .assignment import Assignment
from .cache import HostCache
from .config import SpillConfig
from .ledger import Ledger
from .metrics import StepMetrics
from .path_base import FetchCheck, FlushHeader, Pending, SpillPath, SubgroupError, typed


class Pipeline:
    def __init__(self, paths: Sequence[SpillPath], config: SpillConfig, cache: HostCache,
                 ledger: Ledger, assignment: Assignment, metrics: StepMetrics,
                 subgroups: Sequence[L.Subgroup], key: int) -> None:
        self.paths, self.config, self.cache, self.ledger = paths, config, cache, ledger
        self.assignment, self.metrics, self.subgroups, self.key = assignment, metrics, \
            subgroups, key
        self.target = 0  # the generation this pass brings subgroups to
        self.pos: dict[int, int] = {}  # subgroup -> position in this pass's order

    def begin(self, target: int, order: Sequence[int] = ()) -> None:
        self.target, self.pos = target, {k: i for i, k in enumerate(order)}

    def location(self, k: int) -> tuple[int, int, int]:
        return self.ledger.location(k, self.assignment.of[k])

    def acquire(self, path: SpillPath) -> None:
        # never block on one path's lock while holding another's (two processes would
        # deadlock): if busy, finish our own I/O first, which gives every lock back
        if not path.acquire(False):
            self.drain()
            path.acquire(True)

    def finish(self, bi: int) -> None:
        """Wait for the buffer's I/O; a failed fetch leaves the buffer free, a failed flush
        leaves it holding its (still dirty) subgroup."""
        c = self.cache
        pend = c.io[bi]
        if pend is None:
            return
        c.io[bi] = None
        k = c.held[bi]
        t_block = time.perf_counter()
        dt = self._wait(bi, pend, k)
        pi = self.paths.index(pend.path)
        # the time this thread sat blocked on the request (0 when it had already finished)
        self.metrics.stats["write_wait_s" if pend.write else "read_wait_s"] += \
            time.perf_counter() - t_block
        self.metrics.account(pi, pend.write, pend.nbytes, pend.t_submit, dt)
        if not isinstance(pend, Fetch):  # a fetch was checked by its request (fetch)
            self.ledger.record(k, pi, pend.slot, pend.gen)
            if self.ledger.ver[k] == pend.gen:
                c.dirty[bi] = False

    def _wait(self, bi: int, pend: Pending, k: int | None) -> float:
        fetch = isinstance(pend, Fetch)
        try:
            dt = pend.wait()
            for extra in pend.extra if fetch else ():
                dt = max(dt, extra.wait())
            return dt
        except OSError as e:
            if fetch:
                self.cache.drop(bi)
            raise typed(e, pend.path.name, k) from None
        finally:
            for extra in pend.extra if fetch else ():
                if not extra.done:
                    try:
                        extra.wait()  # its lock and buffer views are given back either way
                    except OSError:
                        pass  # the first error, raised above, is the one the caller sees

    def drain(self) -> None:
        """Wait for every buffer's I/O; the first error is raised once all are done."""
        errs = []
        for bi in range(len(self.cache)):
            try:
                self.finish(bi)
            except SubgroupError as e:
                errs.append(e)
        if errs:
            raise errs[0]

    def evict(self, bi: int) -> None:
        """Start writing the buffer's subgroup back if dirty (lazy flush), else free it."""
        self.finish(bi)
        k = self.cache.held[bi]
        if k is None:
            return
        if not self.cache.dirty[bi]:
            self.cache.drop(bi)
            return
        self.flush(bi, k)

    def free(self, bi: int) -> None:
        """Buffer bi written back if need be, waited for and empty."""
        self.evict(bi)
        self.finish(bi)
        self.cache.drop(bi)

    def flush(self, bi: int, k: int) -> None:
        sg = self.subgroups[k]
        pi = self.assignment.of[k]
        slot = self.ledger.slot_for_write(k, pi)
        path = self.paths[pi]
        # the header, with the payload's sum where the path keeps one: packed by the request
        # on the path's own thread (off this one); a copy path folds the sum into its copy
        extent = self.cache.extent(bi, sg)
        ver = self.ledger.ver[k]
        prepare = self._flush_prepare(bi, k, FlushHeader(extent, k, ver, sg.nparams,
                                                         self.key, path.checksummed), path)
        self.ledger.forget(k, pi, slot)  # its old contents are being overwritten
        self.acquire(path)
        pend = path.write(k, slot, extent, prepare)
        pend.slot, pend.gen = slot, ver
        self.cache.io[bi] = pend
        st = self.metrics.stats
        if self.ledger.has_copy(k) and pi != self.location(k)[0]:
            st["migrations"] += 1
        st["flushes"] += 1
        if not self.config.pipeline_write:
            self.finish(bi)

    def _flush_prepare(self, bi: int, k: int, prepare: FlushHeader, path: SpillPath) -> Any:
        """The flush's header hook: the sum the folded update made, when it describes these
        bytes (same subgroup, same version) and the path would take it by a pass; else
        prepare."""
        known = self.cache.sums[bi]
        if known is not None and known[:2] == (k, self.ledger.ver[k]) \
                and self.config.folds(path):
            self.metrics.stats["folded_flushes"] += 1
            return lambda: prepare.write(known[2])
        return prepare

    def fetch(self, k: int, keep: set[int], wait: bool) -> bool:
        """Make subgroup k resident (start its read into a free or evicted buffer). False
        when no buffer is free yet (all busy with this step's subgroups) or, not wait, when
        the buffer it takes must first be written back (the flush starts now) or is still
        busy: wait=False never blocks on I/O in flight."""
        c = self.cache
        if k in c.where:
            return True
        bi = c.victim(keep, self.ledger.gen, self.target, self.pos, ready_only=not wait)
        if bi is None:
            return False
        if c.held[bi] is not None or c.io[bi] is not None:
            self.evict(bi)
            if c.io[bi] is not None:  # a dirty subgroup's flush is in flight
                if not wait:
                    return False  # the read goes in on a later call
                self.finish(bi)
            c.drop(bi)
        self._start_read(bi, k)
        return True

    def _start_read(self, bi: int, k: int) -> None:
        c, sg = self.cache, self.subgroups[k]
        pi, slot, g = self.location(k)
        path = self.paths[pi]
        folds = self.config.verify and path.checksummed and self.config.folds(path)
        self.acquire(path)
        # the check runs on the path's own thread once the bytes are in: the header always,
        # the payload's sum when verify and the path keeps sums, unless the update folds it
        check = FetchCheck(c.extent(bi, sg), k, g, sg.nparams, self.key, path.name,
                           self.config.verify and path.checksummed
                           and not self.config.folds(path))
        fetch = Fetch(path.read(k, slot, c.extent(bi, sg), check), k, slot, g)
        st = self.metrics.stats
        if self.config.upcast == "eager":
            self.acquire(path)
            fetch.extra.append(path.read(k, 2, c.grad_area(bi, sg)))
            st["bytes"][pi][0] += fetch.extra[-1].nbytes
        c.io[bi] = fetch
        c.hold(bi, k, dirty=False)
        c.unchecked[bi] = folds
        c.sums[bi] = None
        st["fetches"] += 1
        st["fetched"].add(k)

    def read_ahead(self, order: Sequence[int], pos: int, k: int,
                   skip: Callable[[int], bool]) -> None:
        """Read-ahead over K-2 subgroups (at least 2) of those after position pos that go
        through the cache (skip: those that need no read): the first surely (waiting for
        its buffer if need be), the later ones into buffers that are free without waiting,
        or by starting a done subgroup's flush (lazy flush) so that it overlaps this update;
        consecutive subgroups sit on different paths, so the paths work at once."""
        want = max(2, len(self.cache) - 2)
        nxt = []
        for j in order[pos + 1:]:
            if len(nxt) == want:
                break
            if not skip(j):
                nxt.append(j)
        if nxt:
            self.fetch(nxt[0], {k, nxt[0]}, wait=True)
            for j in range(1, len(nxt)):
                if nxt[j] not in self.cache.where:
                    self.fetch(nxt[j], {k, *nxt[:j + 1]}, wait=False)


class Fetch(Pending):
    """A read in flight (plus the spilled-grad read of the eager baseline)."""

    def __init__(self, inner: Pending, idx: int, slot: int, gen: int) -> None:
        self.__dict__.update(inner.__dict__)
        self._inner = inner
        self.idx, self.slot, self.gen = idx, slot, gen
        self.extra: list[Pending] = []

    @property
    def t_submit(self) -> float:  # a copy path's worker sets the inner one's at the copy
        return self._inner.t_submit

    @t_submit.setter
    def t_submit(self, v: float) -> None:
        self._inner.t_submit = v

    def ready(self) -> bool:
        return self._inner.ready() and all(e.ready() for e in self.extra)

    def wait(self) -> float:
        self.done = True
        return self._inner.wait()
