"""SubgroupStore: fp32 optimizer state (master params, exp_avg, exp_avg_sq) cut into subgroups
spread over N paths (directories, memory tiers, pool areas) in proportion to their measured
bandwidth (MLP-Offload's Eq. 1, re-estimated every step), updated by cxlkit's AdamW kernel
with the fetch of k+1 and the flush of k-1 overlapping the update of k, in alternating order
over a host cache of K subgroups. Grads stay in host memory in the model's dtype. The store
orchestrates; the parts it drives each do one job: Assignment (which path), HostCache and
Pipeline (reads and writes), the updates (copy, in place, folded), Checkpoint, StateIO and
StepMetrics."""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ...errors import SpillUsageError
from .. import adam as A
from . import layout as L
from .assignment import Assignment
from .cache import HostCache
from .checkpoint import Checkpoint
from .config import DEFAULT_SUBGROUP_PARAMS, SpillConfig  # noqa: F401 (re-exported)
from .kernel import StepInputs
from .ledger import Ledger
from .metrics import StepMetrics, busy_seconds  # noqa: F401 (busy_seconds: re-exported)
from .path_base import HEADER_NBYTES, SpillPath
from .paths import parse_path
from .pipeline import Pipeline
from .state_io import StateIO
from .update_copy import CopyUpdate, EagerGrads
from .update_folded import CopyStage, FoldedUpdate
from .update_inplace import InPlaceUpdate

_OPTIONS = frozenset(f.name for f in dataclasses.fields(SpillConfig))


class SubgroupStore:
    """paths: directories, 'mem' / 'mem:NODE' (a memory tier), 'pool:NAME' (a pool's object
    area) or SpillPath objects. config: a SpillConfig, or its fields as keywords
    (SubgroupStore(paths, subgroup_params=..., cache_subgroups=...)); they read as the
    store's attributes too (store.lock, store.split). With capacities, the split gives a
    path at most capacity // (its slots' bytes per subgroup) subgroups, the rest going to
    the others by the model, and CapacityError (a PathFullError naming every path) when they
    hold fewer than the state has. A migration keeps the committed copy on its old path
    until the next commit, so a path may briefly hold more than its share.

    Use: bind(group_sizes), init_params(fill), then step(...) per step, commit() for the
    state a job resumes from (resume() after bind), read_state / write_state, close()."""

    def __init__(self, paths: Sequence[Any], config: SpillConfig | None = None,
                 **options: Any) -> None:
        if not paths:
            raise ValueError("paths: give at least one path")
        if config is not None and options:
            raise TypeError("SubgroupStore: give a SpillConfig or options, not both")
        self.config = config if config is not None else SpillConfig.from_options(**options)
        c = self.config
        c.check_paths(len(paths))
        caps = list(c.capacities) if c.capacities is not None else [None] * len(paths)
        self.paths: list[SpillPath] = [parse_path(p, lock=c.lock, config=c.aio_config,
                                                  pool_options=c.pool_options, capacity=cap)
                                       for p, cap in zip(paths, caps)]
        names = [p.name for p in self.paths]
        if len(set(names)) != len(names):
            raise ValueError(f"paths {names}: a path given twice")
        self.placement = Assignment(self.paths, c)
        self.metrics = StepMetrics(self.paths)
        self.subgroups: list[L.Subgroup] = []
        self.steps_done = 0
        self._bound = False
        self._retry = False

    def __getattr__(self, name: str) -> Any:
        # the options read as attributes (store.lock), as they did before SpillConfig
        config = self.__dict__.get("config")
        if config is not None and name in _OPTIONS:
            return getattr(config, name)
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")

    # ---- what the parts know, as the store's attributes ----

    assignment = property(lambda self: self.placement.of,
                          doc="Per subgroup, the index of the path it is assigned to.")
    bandwidth = property(lambda self: self.placement.bandwidth,
                         doc="Per path, bytes/s (min of read and write), re-estimated.")
    measured = property(lambda self: self.placement.measured)
    together = property(lambda self: self.placement.together)
    cpu_per_byte = property(lambda self: self.placement.cpu_per_byte)
    cpu_rate = property(lambda self: self.placement.cpu_rate)
    history = property(lambda self: self.metrics.history)

    @property
    def retrying(self) -> bool:
        """True after a step raised and before it was finished by calling step again."""
        return self._retry

    # ---- layout ----

    def bind(self, group_sizes: Sequence[Sequence[int]]) -> None:
        """Cut the params (element counts, per param group) into subgroups, size the host
        cache and the paths' slots, and measure each path (unless bandwidths were given)."""
        if self._bound:
            raise SpillUsageError("SubgroupStore.bind: already bound; make a new store for "
                                  "other group sizes")
        c = self.config
        self.group_sizes = [list(s) for s in group_sizes]
        self.subgroups = L.cut(self.group_sizes, c.subgroup_params)
        self.nparams = sum(map(sum, self.group_sizes))
        self.key = L.layout_key(self.group_sizes, c.subgroup_params)
        self.param_sizes = [n for s in self.group_sizes for n in s]
        biggest = max((s.nparams for s in self.subgroups), default=1)
        eager = c.upcast == "eager"
        self.grad_nbytes = L.pad(4 * biggest) if eager else 0
        self.slot_nbytes = HEADER_NBYTES + L.pad(12 * biggest)
        m = len(self.subgroups)
        for p in self.paths:
            p.open(max(self.slot_nbytes, self.grad_nbytes), 3 if eager else 2, c.namespace)
        self.placement.check_capacity(m)  # before the measurement: a bad spec fails at once
        self.placement.measure(self.slot_nbytes)
        self.placement.start(m)
        self._build(m)
        self._bound = True

    def _build(self, m: int) -> None:
        """The parts that move and update subgroups, sharing one cache and one ledger."""
        c = self.config
        self.cache = HostCache(min(c.cache_subgroups, max(m, 1)), self.slot_nbytes,
                               self.grad_nbytes, c.cache_policy)
        self.ledger = Ledger(m, [p.name for p in self.paths])
        self.pipeline = Pipeline(self.paths, c, self.cache, self.ledger, self.placement,
                                 self.metrics, self.subgroups, self.key)
        stage = CopyStage(self.subgroups)
        self.folded = FoldedUpdate(c, self.cache, self.pipeline, stage)
        self.in_place = InPlaceUpdate(c, self.cache, self.pipeline, stage)
        self.copy = CopyUpdate(self.cache, self.folded, c.upcast == "eager")
        self.eager = EagerGrads(self.pipeline, self.grad_nbytes, c.cache_policy)
        self.checkpoint = Checkpoint(self.pipeline, c.namespace, c.subgroup_params)
        self.state_io = StateIO(self.pipeline, self.folded, self.param_sizes)

    def capacity_subgroups(self) -> list[int | None]:
        """Per path the most subgroups its capacity holds (None: no bound)."""
        return self.placement.capacity_subgroups()

    def plan(self) -> list[dict[str, Any]]:
        """Per path: its subgroups, bandwidth, the figures measured at start, the CPU model
        and its capacity (Assignment.plan)."""
        return self.placement.plan()

    def reassign(self, bandwidths: Sequence[float]) -> list[int]:
        """Take these per-path bandwidths (bytes/s) and split again; subgroups whose path
        changes move at their next flush. Returns the new assignment."""
        if len(bandwidths) != len(self.paths):
            raise ValueError(f"bandwidths: {len(bandwidths)} figures for {len(self.paths)} paths")
        self._require_bound()
        return self.placement.reassign(bandwidths)

    def report_times(self, **seconds: float) -> None:
        """The caller's own phases of the step (forward_s=, backward_s=), kept in the next
        step's metrics."""
        self.metrics.report_times(**seconds)

    # ---- the step ----

    def init_params(self, fill: Callable[[int], Any]) -> None:
        """Generation 0 of every subgroup: master params from fill(pid) (a flat fp32 array
        of the param's elements), zero moments, written to the assigned paths."""
        self._require_bound()
        self.metrics.begin()
        self.pipeline.begin(0)
        c = self.cache
        for sg in self.subgroups:
            bi = c.victim(set(), self.ledger.gen, 0, {})
            if bi is None or c.held[bi] is not None or c.io[bi] is not None:
                bi = bi if bi is not None else c.oldest()
                self.pipeline.free(bi)
            master, m, v, _ = c.views(bi, sg)
            for pc in sg.pieces:
                src = np.asarray(fill(pc.pid), dtype=np.float32).reshape(-1)
                if src.size != self.param_sizes[pc.pid]:
                    raise ValueError(f"fill({pc.pid}): {src.size} elements, expected "
                                     f"{self.param_sizes[pc.pid]}")
                master[pc.at:pc.at + pc.hi - pc.lo] = src[pc.lo:pc.hi]
            m[:] = 0
            v[:] = 0
            c.hold(bi, sg.idx, dirty=True)
            self.ledger.gen[sg.idx] = 0
            self.ledger.ver[sg.idx] += 1
            c.touch(bi)
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
        if len(grads) != len(self.param_sizes) or len(copies) != len(grads) \
                or len(steps) != len(grads):
            raise ValueError(f"grads/copies/steps: expected {len(self.param_sizes)} entries "
                             "each, one per param")
        if len(configs) != len(self.group_sizes):
            raise ValueError(f"configs: {len(configs)} for {len(self.group_sizes)} groups")
        t0 = time.perf_counter()
        if not self._retry:
            self.metrics.begin()
        self._retry = True
        target = self.steps_done + 1
        m = len(self.subgroups)
        asc = self.config.order == "ascending" or self.steps_done % 2 == 0
        order = list(range(m)) if asc else list(range(m - 1, -1, -1))
        order = [k for k in order if self.ledger.gen[k] < target]
        self.pipeline.begin(target, order)
        self._update_all(order, StepInputs(configs, grads, copies, steps, grad_scale, team))
        st = self.metrics.stats
        tw = time.perf_counter()
        self.pipeline.drain()
        st["wait_s"] += time.perf_counter() - tw
        self._retry = False
        self.steps_done = target
        st["update_s"] = time.perf_counter() - t0
        out = self.metrics.end_step(self.steps_done, asc, m, self.placement.of,
                                    self.placement.bandwidth)
        if self.config.reestimate:
            self.placement.reestimate(self.metrics)
        return out

    def _update_all(self, order: Sequence[int], inp: StepInputs) -> None:
        """Every subgroup of order, in place where it lies on a memory path, else through
        the host cache with the reads ahead and the writes behind it in flight."""
        pl, st, target = self.pipeline, self.metrics.stats, self.pipeline.target
        if self.config.upcast == "eager":  # the baseline waits for its fp32 grads to be written
            tw = time.perf_counter()
            self.eager.spill(order, inp.grads)
            st["wait_s"] += time.perf_counter() - tw
        for pos, k in enumerate(order):
            tw = time.perf_counter()
            self.in_place.leave_cache(k)
            if self.in_place.ready(k):
                # read-ahead for the subgroups that copy keeps going while this one is
                # updated where it lies
                if self.config.pipeline_read:
                    pl.read_ahead(order, pos, k, self.in_place.ready)
                st["wait_s"] += time.perf_counter() - tw
                self.in_place.run(k, inp)
                self.ledger.gen[k] = target
                continue
            self._update_cached(order, pos, k, inp, tw)

    def _update_cached(self, order: Sequence[int], pos: int, k: int, inp: StepInputs,
                       tw: float) -> None:
        pl, c, st = self.pipeline, self.cache, self.metrics.stats
        if not pl.fetch(k, {k}, wait=True):
            raise SpillUsageError(f"SubgroupStore: the host cache has no free buffer for "
                                  f"subgroup {k}; raise cache_subgroups")
        bi = c.where[k]
        pl.finish(bi)
        if self.config.pipeline_read:
            pl.read_ahead(order, pos, k, self.in_place.ready)
        st["wait_s"] += time.perf_counter() - tw
        tc = time.perf_counter()
        self.copy.run(bi, self.subgroups[k], inp)
        st["compute_s"] += time.perf_counter() - tc
        st["hits"] += k not in st["fetched"]  # updated without a read this step
        self.ledger.gen[k] = pl.target
        self.ledger.ver[k] += 1
        c.dirty[bi] = True
        c.touch(bi)
        if self.config.pipeline_write and pos < len(order) - len(c):
            # this step evicts it for sure (only the last K updated stay cached): write
            # it back now, overlapping the next update, so that its buffer is free for
            # the read of k+K-1 at the next position. Flushed when its buffer is taken
            # instead, that read went in one update late: K-3 reads ahead, not K-2
            pl.flush(bi, k)

    # ---- durable state ----

    def commit(self, extra: dict[str, Any] | None = None) -> None:
        """Write back every dirty subgroup, make the paths durable (fdatasync) and record
        the generation in a manifest on every directory path: the state a job resumes from.
        Copies of older generations no manifest names are removed afterwards."""
        self._require_bound()
        self.checkpoint.commit(self.steps_done, extra)

    def resume(self) -> dict[str, Any]:
        """Take the newest manifest of the directory paths (after bind): the committed
        generation becomes the state; returns the extra dict it was committed with.
        FileNotFoundError when no path has one; ValueError when it belongs to another
        layout or path list, or names a path that does not survive a process."""
        self._require_bound()
        self.steps_done, extra = self.checkpoint.resume()
        self._retry = False
        return extra

    def read_state(self, pids: Sequence[int] | None = None) -> dict[int, tuple[Any, Any, Any]]:
        """Copies of (master, exp_avg, exp_avg_sq) as flat fp32 arrays per param, streamed
        subgroup by subgroup through the host cache."""
        self._require_bound()
        return self.state_io.read(pids)

    def write_state(self, state: dict[int, tuple[Any, Any, Any]]) -> None:
        """Overwrite the params' (master, exp_avg, exp_avg_sq) (flat fp32 each)."""
        self._require_bound()
        self.state_io.write(state)

    def _require_bound(self) -> None:
        if not self._bound:
            raise SpillUsageError("SubgroupStore: call bind(group_sizes) first")

    def close(self) -> None:
        """Wait for I/O in flight and release paths, engines and host buffers (uncommitted
        updates in the cache are dropped: commit() first to keep them)."""
        if self._bound:
            try:
                self.pipeline.drain()
            finally:
                self.cache.close()
                self.eager.close()
                self._bound = False
        for p in self.paths:
            p.close()

    def __enter__(self) -> SubgroupStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
