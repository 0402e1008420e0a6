"""SubgroupStore: fp32 optimizer state (master params, exp_avg, exp_avg_sq) cut into subgroups
spread over N paths (directories, memory tiers, pool areas) in proportion to their measured
bandwidth (MLP-Offload's Eq. 1, re-estimated every step), updated by cxlkit's AdamW kernel
with the fetch of k+1 and the flush of k-1 overlapping the update of k, in alternating order
over a host cache of K subgroups. Grads stay in host memory in the model's dtype."""
from __future__ import annotations

import concurrent.futures as cf
import errno
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import placement as P
from . import adam as A
from . import aio
from . import spill_split as S
from . import subgroup_layout as L
from .subgroup_metrics import StoreMetrics, busy_seconds  # noqa: F401 (busy_seconds: re-exported)
from .subgroup_fold import StoreFold
from .subgroup_inplace import StoreInPlace
from .subgroup_state import StoreState
from .spill_base import FetchCheck, FlushHeader
from .spill_paths import (HEADER_NBYTES, LOCK_MODES, CapacityError, Pending, SpillPath,
                          SubgroupError, parse_path, typed)

log = logging.getLogger("cxlkit")
F32 = A.DTYPES["float32"]
DEFAULT_SUBGROUP_PARAMS = 100_000_000


class SubgroupStore(StoreState, StoreMetrics, StoreInPlace, StoreFold):
    """paths: directories, 'mem' / 'mem:NODE' (a memory tier), 'pool:NAME' (a pool's object
    area) or SpillPath objects. subgroup_params: elements per subgroup. cache_subgroups: K
    host buffers (>= 3: the one updated, the one fetched, the one flushed), placed by
    cache_policy. order: 'alternate' (ascending, then descending, ...) or 'ascending'.
    upcast: 'delayed' (grads read from host memory in their dtype, upcast in the kernel) or
    'eager' (fp32 grads written to the paths and read back: the DeepSpeed-like baseline).
    lock: 'exclusive' / 'shared' / 'off' among the processes of one host, per path.
    verify: check every fetched subgroup's payload checksum (headers are always checked).
    bandwidths: bytes/s per path instead of the start-up measurement; with them,
    cpu_per_byte (CPU s per byte each path moves) and cpu_rate (CPU s per s the process gets
    with every path busy) give the CPU model of the split (spill_split; measured at start
    when bandwidths are not given: each path alone, then all at once). split: 'model' (the
    CPU-aware split: never slower in the model than a subset of the paths) or 'eq1' (the
    paper's Eq. 1: every path with bandwidth takes a subgroup). pipeline_read /
    pipeline_write: prefetch k+1 / flush in the background (off: each waits at once).
    pool_options: how 'pool:NAME' paths open their pool (Pool's host_id, coherence).
    zero_copy: subgroups on paths that are memory (a mapped tmpfs directory, a pool object
    area, a memory tier) are updated where they lie, from the slot of their newest
    generation into the other one (subgroup_inplace), never copied through the host cache,
    whose K buffers then serve the paths that copy; False: every subgroup through the
    cache (the route before run 7). sum_in_kernel: on that route the payload checksums (the
    old generation's check, the new one's sum) are folded into the kernel's own pass over
    the state (cxk_adam_step_into_sum); False: a pass of their own each.
    capacities: per path the most bytes the store keeps there (an int, '64G' or None: no
    bound), like a path spec's ':cap=SIZE' suffix; the split then gives a path at most
    capacity // (its slots' bytes per subgroup) subgroups, the rest going to the others by
    the model, and CapacityError (a PathFullError naming every path) when they hold fewer
    than the state has. A migration keeps the committed copy on its old path until the next
    commit, so a path may briefly hold more than its share."""

    def __init__(self, paths: Sequence[Any], *, subgroup_params: int = DEFAULT_SUBGROUP_PARAMS,
                 cache_subgroups: int = 4, cache_policy: P.Policy | None = None,
                 order: str = "alternate", upcast: str = "delayed", lock: str = "exclusive",
                 aio_config: aio.AioConfig | None = None, verify: bool = True,
                 reestimate: bool = True, bandwidths: Sequence[float] | None = None,
                 measure_nbytes: int = 32 << 20, namespace: str = "default",
                 pipeline_read: bool = True, pipeline_write: bool = True,
                 pool_options: dict[str, Any] | None = None,
                 cpu_per_byte: Sequence[float] | None = None,
                 cpu_rate: float | None = None, split: str = "model",
                 zero_copy: bool = True, sum_in_kernel: bool = True,
                 capacities: Sequence[int | str | None] | None = None) -> None:
        if not paths:
            raise ValueError("paths: give at least one path")
        if capacities is not None and len(capacities) != len(paths):
            raise ValueError(f"capacities: {len(capacities)} figures for {len(paths)} paths")
        if isinstance(cache_subgroups, bool) or not isinstance(cache_subgroups, int) \
                or cache_subgroups < 3:
            raise ValueError(f"cache_subgroups {cache_subgroups!r}: expected an int >= 3")
        for name, v, ok in (("order", order, ("alternate", "ascending")),
                            ("split", split, ("model", "eq1")),
                            ("upcast", upcast, ("delayed", "eager")), ("lock", lock, LOCK_MODES)):
            if v not in ok:
                raise ValueError(f"{name} {v!r}: expected one of {', '.join(ok)}")
        if not namespace.replace("-", "").replace("_", "").isalnum():
            raise ValueError(f"namespace {namespace!r}: letters, digits, - and _ only")
        if bandwidths is not None and len(bandwidths) != len(paths):
            raise ValueError(f"bandwidths: {len(bandwidths)} figures for {len(paths)} paths")
        if (cpu_per_byte is not None or cpu_rate is not None) and bandwidths is None:
            raise ValueError("cpu_per_byte / cpu_rate: give them with bandwidths (else they "
                             "are measured)")
        if cpu_per_byte is not None:
            S.split_counts(1, [1.0] * len(paths), cpu_per_byte, cpu_rate)  # validates them
        self.subgroup_params = subgroup_params
        L.cut([[1]], subgroup_params)  # validates it
        caps = list(capacities) if capacities is not None else [None] * len(paths)
        self.paths: list[SpillPath] = [parse_path(p, lock=lock, config=aio_config,
                                                  pool_options=pool_options, capacity=c)
                                       for p, c in zip(paths, caps)]
        names = [p.name for p in self.paths]
        if len(set(names)) != len(names):
            raise ValueError(f"paths {names}: a path given twice")
        self.cache_subgroups, self.cache_policy = cache_subgroups, cache_policy
        self.order, self.upcast, self.lock, self.verify = order, upcast, lock, verify
        self.reestimate, self.namespace, self.split = reestimate, namespace, split
        self.zero_copy, self.sum_in_kernel = bool(zero_copy), bool(sum_in_kernel)
        self.pipeline_read, self.pipeline_write = bool(pipeline_read), bool(pipeline_write)
        self._given_bw = list(bandwidths) if bandwidths is not None else None
        self._given_cpu = (list(cpu_per_byte) if cpu_per_byte is not None else None,
                           cpu_rate)
        self.cpu_per_byte: list[float] | None = None
        self.cpu_rate: float | None = None
        self.together: list[tuple[float, float]] | None = None
        self.measure_nbytes = measure_nbytes
        self.bandwidth: list[float] = []
        self.measured: list[tuple[float, float]] = []
        self.subgroups: list[L.Subgroup] = []
        self.history: list[dict[str, Any]] = []
        self.steps_done = 0
        self._bound = False
        self._commit_id = 0
        self._caller_times: dict[str, float] = {}

    # ---- layout ----

    def bind(self, group_sizes: Sequence[Sequence[int]]) -> None:
        """Cut the params (element counts, per param group) into subgroups, size the host
        cache and the paths' slots, and measure each path (unless bandwidths were given)."""
        if self._bound:
            raise RuntimeError("SubgroupStore.bind: already bound")
        self.group_sizes = [list(s) for s in group_sizes]
        self.subgroups = L.cut(self.group_sizes, self.subgroup_params)
        self.nparams = sum(map(sum, self.group_sizes))
        self.key = L.layout_key(self.group_sizes, self.subgroup_params)
        self._param_sizes = [n for s in self.group_sizes for n in s]
        biggest = max((s.nparams for s in self.subgroups), default=1)
        self.grad_nbytes = L.pad(4 * biggest) if self.upcast == "eager" else 0
        self.slot_nbytes = HEADER_NBYTES + L.pad(12 * biggest)
        nslots = 3 if self.upcast == "eager" else 2
        slot = max(self.slot_nbytes, self.grad_nbytes)
        m = len(self.subgroups)
        k = min(self.cache_subgroups, max(m, 1))
        self._bufs = [P.alloc(self.slot_nbytes + self.grad_nbytes,
                              self.cache_policy or P.default()) for _ in range(k)]
        self._raw = [b.numpy() for b in self._bufs]
        self._held: list[int | None] = [None] * k
        self._dirty = [False] * k
        self._unchecked = [False] * k  # a fetched payload whose sum the update checks (fold)
        self._sums: list[tuple[int, int, int] | None] = [None] * k  # (k, version, sum) folded
        self._io: list[Pending | None] = [None] * k
        self._stamp = [0] * k
        self._where: dict[int, int] = {}
        self.gen = [0] * m  # the last step applied to each subgroup
        self.ver = [0] * m  # its content version (bumped on every change): headers carry it
        self._pos: dict[int, int] = {}  # subgroup -> position in this step's order
        self._dur: list[dict[tuple[int, int], int]] = [{} for _ in range(m)]
        self._committed: list[tuple[int, int, int] | None] = [None] * m
        self._retry = False
        self._clock = 0
        for p in self.paths:
            p.open(slot, nslots, self.namespace)
        self._check_capacity(m)  # before the measurement: a bad spec fails at once
        self._measure()
        self.assignment = L.interleave(self._split(m))
        self._bound = True

    def _measure(self) -> None:
        if self._given_bw is not None:
            self.measured = [(float(b), float(b)) for b in self._given_bw]
            self.cpu_per_byte, self.cpu_rate = self._given_cpu
        else:
            n = min(self.measure_nbytes, self.slot_nbytes)
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

    def capacity_subgroups(self) -> list[int | None]:
        """Per path the most subgroups its capacity holds (None: no bound)."""
        return [None if p.capacity_nbytes is None
                else p.capacity_nbytes // max(1, p.footprint_nbytes()) for p in self.paths]

    def _check_capacity(self, m: int) -> None:
        caps = self.capacity_subgroups()
        if any(c is None for c in caps) or sum(caps) >= m:
            return
        held = ", ".join(f"{p.name} {p.capacity_nbytes:,} bytes = {c} subgroups"
                         for p, c in zip(self.paths, caps))
        raise CapacityError(errno.ENOSPC, f"capacities hold {sum(caps)} of the {m} subgroups "
                            f"of {self.paths[0].footprint_nbytes():,} bytes each ({held})",
                            ", ".join(p.name for p in self.paths))

    def _split(self, m: int) -> list[int]:
        caps = self.capacity_subgroups()
        if all(c is None for c in caps):
            if self.split == "eq1":
                return L.eq1_counts(m, self.bandwidth)
            return S.split_counts(m, self.bandwidth, self.cpu_per_byte, self.cpu_rate)
        self._check_capacity(m)
        if self.split == "eq1":  # the paper's split, unless a path cannot hold its share
            eq1 = L.eq1_counts(m, self.bandwidth)
            if all(c is None or k <= c for k, c in zip(eq1, caps)):
                return eq1
            return S.split_counts(m, self.bandwidth, caps=caps)
        return S.split_counts(m, self.bandwidth, self.cpu_per_byte, self.cpu_rate, caps=caps)

    # ---- cache ----

    def _buf_views(self, bi: int, sg: L.Subgroup) -> tuple[Any, Any, Any, Any]:
        raw = self._raw[bi]
        fl = raw[HEADER_NBYTES:HEADER_NBYTES + 12 * sg.nparams].view(np.float32)
        n = sg.nparams
        return fl[:n], fl[n:2 * n], fl[2 * n:3 * n], raw

    def _io_extent(self, bi: int, sg: L.Subgroup) -> Any:
        return self._raw[bi][:HEADER_NBYTES + sg.state_nbytes]

    def _grad_area(self, bi: int, sg: L.Subgroup) -> Any:
        lo = self.slot_nbytes
        return self._raw[bi][lo:lo + L.pad(4 * sg.nparams)]

    def _finish(self, bi: int) -> None:
        """Wait for the buffer's I/O; a failed fetch leaves the buffer free, a failed flush
        leaves it holding its (still dirty) subgroup."""
        pend = self._io[bi]
        if pend is None:
            return
        self._io[bi] = None
        k = self._held[bi]
        path = pend.path
        t_block = time.perf_counter()
        try:
            dt = pend.wait()
            if isinstance(pend, _Fetch):
                for extra in pend.extra:
                    dt = max(dt, extra.wait())
        except OSError as e:
            if isinstance(pend, _Fetch):
                self._drop(bi)
            raise typed(e, path.name, k) from None
        finally:
            if isinstance(pend, _Fetch):
                for extra in pend.extra:
                    if not extra.done:
                        try:
                            extra.wait()
                        except OSError:
                            pass
        pi = self.paths.index(path)
        st = self._step_stats
        # the time this thread sat blocked on the request (0 when it had already finished)
        st["write_wait_s" if pend.write else "read_wait_s"] += time.perf_counter() - t_block
        self._account(pi, pend.write, pend.nbytes, pend.t_submit, dt)
        if not isinstance(pend, _Fetch):  # a fetch was checked by its request (_fetch)
            self._dur[k][(pi, pend.slot)] = pend.gen
            self._dur[k] = {loc: g for loc, g in self._dur[k].items()
                            if loc[0] == pi or self._committed[k] == (*loc, g)}
            if self.ver[k] == pend.gen:
                self._dirty[bi] = False

    def _fetch_check(self, bi: int, sg: L.Subgroup, gen: int, path: SpillPath) -> FetchCheck:
        """The check of a fetched subgroup, run by its request once the bytes are in (on a
        path's own thread, off this one): the header always, the payload's sum when verify
        and the path keeps sums (its bytes left the process); a copy path folds that sum
        into its copy."""
        return FetchCheck(self._io_extent(bi, sg), sg.idx, gen, sg.nparams, self.key,
                          path.name, self.verify and path.checksummed
                          and not self._fold_path(path))

    def _drop(self, bi: int) -> None:
        k = self._held[bi]
        if k is not None:
            self._where.pop(k, None)
        self._held[bi], self._dirty[bi] = None, False
        self._unchecked[bi], self._sums[bi] = False, None

    def _drain(self) -> None:
        errs = []
        for bi in range(len(self._bufs)):
            try:
                self._finish(bi)
            except SubgroupError as e:
                errs.append(e)
        if errs:
            raise errs[0]

    def _acquire(self, path: SpillPath) -> None:
        # never block on one path's lock while holding another's (two processes would
        # deadlock): if busy, finish our own I/O first, which gives every lock back
        if not path.acquire(False):
            self._drain()
            path.acquire(True)

    def _victim(self, keep: set[int], ready_only: bool = False) -> int | None:
        """A buffer to reuse: a free one, else the one whose subgroup is needed last
        (Belady): subgroups done for this step come next step, the least recently updated
        last (alternating order); those still to do, by their position in this step.
        ready_only: skip buffers whose I/O is still in flight (taking one would block)."""
        best, best_d = None, None
        for bi, k in enumerate(self._held):
            if ready_only and self._io[bi] is not None and not self._io[bi].ready():
                continue
            if k is None and self._io[bi] is None:
                return bi
            if k is None or k in keep:
                continue
            d = (1, -self._stamp[bi]) if self.gen[k] >= self._target \
                else (0, self._pos.get(k, 1 << 62))
            if best_d is None or d > best_d:
                best, best_d = bi, d
        return best

    def _evict(self, bi: int) -> None:
        """Start writing the buffer's subgroup back if dirty (lazy flush), else free it."""
        self._finish(bi)
        k = self._held[bi]
        if k is None:
            return
        if not self._dirty[bi]:
            self._drop(bi)
            return
        self._flush(bi, k)

    def _flush(self, bi: int, k: int) -> None:
        sg = self.subgroups[k]
        pi = self.assignment[k]
        used = {s for (p, s), _ in self._dur[k].items() if p == pi}
        keep = self._committed[k]
        cand = [s for s in (0, 1) if not (keep and keep[0] == pi and keep[1] == s)]
        slot = min(cand, key=lambda s: (s in used, self._dur[k].get((pi, s), -1)))
        path = self.paths[pi]
        # the header, with the payload's sum where the path keeps one: packed by the request
        # on the path's own thread (off this one); a copy path folds the sum into its copy
        extent = self._io_extent(bi, sg)
        prepare = self._flush_prepare(bi, k, FlushHeader(extent, k, self.ver[k], sg.nparams,
                                                         self.key, path.checksummed), path)
        self._dur[k].pop((pi, slot), None)  # its old contents are being overwritten
        self._acquire(path)
        pend = path.write(k, slot, extent, prepare)
        pend.slot, pend.gen = slot, self.ver[k]
        self._io[bi] = pend
        if self._dur[k] and pi != self._location(k)[0]:
            self._step_stats["migrations"] += 1
        self._step_stats["flushes"] += 1
        if not self.pipeline_write:
            self._finish(bi)

    def _location(self, k: int) -> tuple[int, int, int]:
        """(path, slot, generation) of the newest durable copy of subgroup k."""
        if not self._dur[k]:
            raise SubgroupError(errno.ENODATA, "no durable copy (never written)",
                                self.paths[self.assignment[k]].name, k)
        (pi, slot), g = max(self._dur[k].items(), key=lambda it: it[1])
        return pi, slot, g

    def _fetch(self, k: int, keep: set[int], wait: bool) -> bool:
        """Make subgroup k resident (start its read into a free or evicted buffer). False
        when no buffer is free yet (all busy with this step's subgroups) or, not wait, when
        the buffer it takes must first be written back (the flush starts now) or is still
        busy: wait=False never blocks on I/O in flight."""
        if k in self._where:
            return True
        bi = self._victim(keep, ready_only=not wait)
        if bi is None:
            return False
        if self._held[bi] is not None or self._io[bi] is not None:
            self._evict(bi)
            if self._io[bi] is not None:  # a dirty subgroup's flush is in flight
                if not wait:
                    return False  # the read goes in on a later call
                self._finish(bi)
            self._drop(bi)
        sg = self.subgroups[k]
        pi, slot, g = self._location(k)
        path = self.paths[pi]
        self._acquire(path)
        pend = path.read(k, slot, self._io_extent(bi, sg), self._fetch_check(bi, sg, g, path))
        fetch = _Fetch(pend, k, slot, g)
        if self.upcast == "eager":
            self._acquire(path)
            fetch.extra.append(path.read(k, 2, self._grad_area(bi, sg)))
            self._step_stats["bytes"][pi][0] += fetch.extra[-1].nbytes
        self._io[bi], self._held[bi], self._dirty[bi] = fetch, k, False
        self._unchecked[bi] = self.verify and path.checksummed and self._fold_path(path)
        self._sums[bi] = None
        self._where[k] = bi
        self._step_stats["fetches"] += 1
        self._step_stats["fetched"].add(k)
        return True

    # ---- the step ----

    def init_params(self, fill: Callable[[int], Any]) -> None:
        """Generation 0 of every subgroup: master params from fill(pid) (a flat fp32 array
        of the param's elements), zero moments, written to the assigned paths."""
        self._require_bound()
        self._step_stats = self._new_stats()
        self._target, self._pos = 0, {}
        for sg in self.subgroups:
            bi = self._victim(set())
            if bi is None or self._held[bi] is not None or self._io[bi] is not None:
                bi = bi if bi is not None else min(range(len(self._bufs)),
                                                   key=lambda b: self._stamp[b])
                self._evict(bi)
                self._finish(bi)
                self._drop(bi)
            master, m, v, _ = self._buf_views(bi, sg)
            for pc in sg.pieces:
                src = np.asarray(fill(pc.pid), dtype=np.float32).reshape(-1)
                if src.size != self._param_sizes[pc.pid]:
                    raise ValueError(f"fill({pc.pid}): {src.size} elements, expected "
                                     f"{self._param_sizes[pc.pid]}")
                master[pc.at:pc.at + pc.hi - pc.lo] = src[pc.lo:pc.hi]
            m[:] = 0
            v[:] = 0
            self._held[bi], self._dirty[bi] = sg.idx, True
            self._where[sg.idx] = bi
            self.gen[sg.idx] = 0
            self.ver[sg.idx] += 1
            self._clock += 1
            self._stamp[bi] = self._clock
        self.commit()

    def step(self, configs: Sequence[A.AdamConfig], grads: Sequence[tuple[Any, int] | None],
             copies: Sequence[tuple[Any, int] | None], steps: Sequence[int], *,
             grad_scale: float = 1.0, team: A.AdamTeam | None = None) -> dict[str, Any]:
        """One update of every subgroup. configs: per param group; grads[pid]: (flat array in
        host memory, kernel dtype code) or None (param skipped, as torch does); copies[pid]:
        (flat array the updated params are written to, code) or None; steps[pid]: the
        param's step count (from 1). After an exception the state stays consistent: calling
        step again with the same grads finishes the step (subgroups already updated are not
        updated twice), or resume from the last commit. Returns the step's metrics."""
        self._require_bound()
        if len(grads) != len(self._param_sizes) or len(copies) != len(grads) \
                or len(steps) != len(grads):
            raise ValueError(f"grads/copies/steps: expected {len(self._param_sizes)} entries "
                             "each, one per param")
        if len(configs) != len(self.group_sizes):
            raise ValueError(f"configs: {len(configs)} for {len(self.group_sizes)} groups")
        t0 = time.perf_counter()
        if not self._retry:
            self._step_stats = self._new_stats()
        self._retry = True
        self._target = self.steps_done + 1
        m = len(self.subgroups)
        asc = self.order == "ascending" or self.steps_done % 2 == 0
        order = list(range(m)) if asc else list(range(m - 1, -1, -1))
        order = [k for k in order if self.gen[k] < self._target]
        self._pos = {k: i for i, k in enumerate(order)}
        st = self._step_stats
        if self.upcast == "eager":  # the baseline waits for its fp32 grads to be written
            tw = time.perf_counter()
            self._spill_grads(order, grads)
            st["wait_s"] += time.perf_counter() - tw
        for pos, k in enumerate(order):
            tw = time.perf_counter()
            self._leave_cache(k)
            if self._in_place_ready(k):
                # read-ahead for the subgroups that copy keeps going while this one is
                # updated where it lies
                if self.pipeline_read:
                    self._read_ahead(order, pos, k)
                st["wait_s"] += time.perf_counter() - tw
                self._update_in_place(k, configs, grads, copies, steps, grad_scale, team)
                self.gen[k] = self._target
                continue
            if not self._fetch(k, {k}, wait=True):
                raise RuntimeError("host cache has no buffer for the next subgroup")
            bi = self._where[k]
            self._finish(bi)
            if self.pipeline_read:
                self._read_ahead(order, pos, k)
            st["wait_s"] += time.perf_counter() - tw
            tc = time.perf_counter()
            self._update(bi, self.subgroups[k], configs, grads, copies, steps, grad_scale,
                         team)
            st["compute_s"] += time.perf_counter() - tc
            st["hits"] += k not in st["fetched"]  # updated without a read this step
            self.gen[k] = self._target
            self.ver[k] += 1
            self._dirty[bi] = True
            self._clock += 1
            self._stamp[bi] = self._clock
            if self.pipeline_write and pos < len(order) - len(self._bufs):
                # this step evicts it for sure (only the last K updated stay cached): write
                # it back now, overlapping the next update, so that its buffer is free for
                # the read of k+K-1 at the next position. Flushed when its buffer is taken
                # instead, that read went in one update late: K-3 reads ahead, not K-2
                self._flush(bi, k)
        tw = time.perf_counter()
        self._drain()
        st["wait_s"] += time.perf_counter() - tw
        self._retry = False
        self.steps_done = self._target
        st["update_s"] = time.perf_counter() - t0
        return self._end_step(asc)

    def _read_ahead(self, order: Sequence[int], pos: int, k: int) -> None:
        """Read-ahead over K-2 subgroups (at least 2) of those after position pos that go
        through the cache (the zero-copy ones need no read): the first surely (waiting for
        its buffer if need be), the later ones into buffers that are free without waiting,
        or by starting a done subgroup's flush (lazy flush) so that it overlaps this update;
        consecutive subgroups sit on different paths, so the paths work at once."""
        want = max(2, len(self._bufs) - 2)
        nxt = []
        for j in order[pos + 1:]:
            if len(nxt) == want:
                break
            if not self._in_place_ready(j):
                nxt.append(j)
        if nxt:
            self._fetch(nxt[0], {k, nxt[0]}, wait=True)
            for j in range(1, len(nxt)):
                if nxt[j] not in self._where:
                    self._fetch(nxt[j], {k, *nxt[:j + 1]}, wait=False)

    def _update(self, bi: int, sg: L.Subgroup, configs: Sequence[A.AdamConfig],
                grads: Sequence[Any], copies: Sequence[Any], steps: Sequence[int],
                grad_scale: float, team: A.AdamTeam | None) -> None:
        if self._update_folded(bi, sg, configs, grads, copies, steps, grad_scale, team):
            return
        master, m, v, _ = self._buf_views(bi, sg)
        gf = self._grad_area(bi, sg).view(np.float32) if self.upcast == "eager" else None
        for s, args, _ in self._kernel_args(sg, (master, m, v), None, grads, copies, steps, gf):
            A.step_raw(args, configs[sg.group], s, grad_scale=grad_scale, team=team)

    def _spill_grads(self, order: Sequence[int], grads: Sequence[Any]) -> None:
        """The baseline's path: every subgroup's grads upcast to fp32 and written out."""
        if not hasattr(self, "_gstage"):
            self._gstage = P.alloc(self.grad_nbytes, self.cache_policy or P.default())
        stage = self._gstage.numpy()
        for k in order:
            sg = self.subgroups[k]
            f = stage[:L.pad(4 * sg.nparams)].view(np.float32)
            for pc in sg.pieces:
                g = grads[pc.pid]
                dst = f[pc.at:pc.at + pc.hi - pc.lo]
                if g is None:
                    dst[:] = 0
                elif g[1] == F32:
                    dst[:] = g[0][pc.lo:pc.hi]
                else:
                    bits = g[0][pc.lo:pc.hi].view(np.uint16).astype(np.uint32)
                    dst[:] = (bits << 16).view(np.float32) if g[1] == A.DTYPES["bfloat16"] \
                        else g[0][pc.lo:pc.hi].view(np.float16).astype(np.float32)
            bi = self._where.get(k)
            if bi is not None:  # resident: its buffer's grad area is what the update reads
                self._grad_area(bi, sg)[:] = stage[:L.pad(4 * sg.nparams)]
            pi = self._location(k)[0] if self._dur[k] else self.assignment[k]
            path = self.paths[pi]
            self._acquire(path)
            pend = path.write(k, 2, stage[:L.pad(4 * sg.nparams)])
            t_block = time.perf_counter()
            dt = pend.wait()
            self._step_stats["write_wait_s"] += time.perf_counter() - t_block
            self._account(pi, True, pend.nbytes, pend.t_submit, dt)

    @property
    def retrying(self) -> bool:
        """True after a step raised and before it was finished by calling step again."""
        return self._retry

    def _require_bound(self) -> None:
        if not self._bound:
            raise RuntimeError("SubgroupStore: call bind(group_sizes) first")

    def close(self) -> None:
        """Wait for I/O in flight and release paths, engines and host buffers (uncommitted
        updates in the cache are dropped: commit() first to keep them)."""
        if self._bound:
            try:
                self._drain()
            finally:
                self._raw = []
                for b in self._bufs:
                    try:
                        b.close()
                    except BufferError:
                        # views of it live on in a raised error's traceback (a request's
                        # hooks, the copy of a failed fetch): it is unmapped with them
                        pass
                if hasattr(self, "_gstage"):
                    self._gstage.close()
                self._bound = False
        for p in self.paths:
            p.close()

    def __enter__(self) -> SubgroupStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Fetch(Pending):
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

