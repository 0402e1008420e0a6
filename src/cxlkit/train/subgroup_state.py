"""The durable side of a SubgroupStore (a mixin of it): commit (write back, fdatasync, a
manifest on every directory path), resume from the newest manifest, and the state of chosen
params read or written subgroup by subgroup through the host cache (state_dict)."""
from __future__ import annotations

import errno
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import subgroup_layout as L
from .spill_paths import typed


class StoreState:
    """Needs SubgroupStore's fields and cache methods; never used alone."""

    def commit(self, extra: dict[str, Any] | None = None) -> None:
        """Write back every dirty subgroup, make the paths durable (fdatasync) and record
        the generation in a manifest on every directory path: the state a job resumes from.
        Copies of older generations no manifest names are removed afterwards."""
        self._require_bound()
        if not hasattr(self, "_step_stats"):
            self._step_stats = self._new_stats()
        self._target, self._pos = max(self.gen, default=0), {}
        for bi, k in enumerate(self._held):
            if k is not None and self._dirty[bi]:
                self._finish(bi)
                if self._dirty[bi]:
                    self._flush(bi, k)
        self._drain()
        entries = []
        for k in range(len(self.subgroups)):
            pi, slot, g = self._location(k)
            self.paths[pi].sync(k)
            entries.append([pi, slot, g])
        self._commit_id += 1
        doc = dict(version=L.MANIFEST_VERSION, commit=self._commit_id, key=self.key,
                   subgroup_params=self.subgroup_params, steps_done=self.steps_done,
                   paths=[p.name for p in self.paths], entries=entries, extra=extra or {},
                   resumable=all(self.paths[e[0]].durable() for e in entries))
        for p in self.paths:
            if p.kind == "dir":
                try:
                    L.write_manifest(p.name, self.namespace, doc)
                except OSError as e:
                    raise typed(e, p.name, None) from None
        old = self._committed
        self._committed = [tuple(e) for e in entries]
        for k, e in enumerate(self._committed):
            self._dur[k] = {(e[0], e[1]): e[2]}
            if old[k] is not None and old[k][0] != e[0]:
                self.paths[old[k][0]].remove(k)

    def resume(self) -> dict[str, Any]:
        """Take the newest manifest of the directory paths (after bind): the committed
        generation becomes the state; returns the extra dict it was committed with.
        FileNotFoundError when no path has one; ValueError when it belongs to another
        layout or path list, or names a path that does not survive a process."""
        self._require_bound()
        docs = [d for p in self.paths if p.kind == "dir"
                for d in [L.read_manifest(p.name, self.namespace)] if d is not None]
        if not docs:
            raise FileNotFoundError(errno.ENOENT, "no subgroup manifest on any directory path",
                                    ", ".join(p.name for p in self.paths))
        doc = max(docs, key=lambda d: d["commit"])
        if doc.get("key") != self.key or doc.get("paths") != [p.name for p in self.paths] \
                or len(doc["entries"]) != len(self.subgroups):
            raise ValueError("subgroup manifest is of another model, subgroup size or path list")
        if not doc.get("resumable"):
            raise ValueError("the committed state lives partly in a memory tier, which did not "
                             "survive its process")
        if any(e[0] >= len(self.paths) for e in doc["entries"]):
            raise ValueError("subgroup manifest names a path index out of range")
        for bi in range(len(self._bufs)):
            self._io[bi] = None
            self._drop(bi)
        self._commit_id = doc["commit"]
        self.steps_done = int(doc["steps_done"])
        self._committed = [tuple(e) for e in doc["entries"]]
        for k, (pi, slot, g) in enumerate(self._committed):
            self._dur[k] = {(pi, slot): g}
            self.ver[k] = g
            self.gen[k] = self.steps_done
        self._retry = False
        return dict(doc.get("extra") or {})

    def read_state(self, pids: Sequence[int] | None = None) -> dict[int, tuple[Any, Any, Any]]:
        """Copies of (master, exp_avg, exp_avg_sq) as flat fp32 arrays per param, streamed
        subgroup by subgroup through the host cache."""
        want = set(range(len(self._param_sizes)) if pids is None else pids)
        out = {pid: tuple(np.empty(self._param_sizes[pid], np.float32) for _ in range(3))
               for pid in want}
        self._visit(want, lambda pc, views: [dst[pc.lo:pc.hi].__setitem__(
            slice(None), src[pc.at:pc.at + pc.hi - pc.lo]) for dst, src in zip(out[pc.pid],
                                                                                 views)])
        return out

    def write_state(self, state: dict[int, tuple[Any, Any, Any]]) -> None:
        """Overwrite the params' (master, exp_avg, exp_avg_sq) (flat fp32 each)."""
        for pid, arrs in state.items():
            for a in arrs:
                if np.asarray(a).size != self._param_sizes[pid]:
                    raise ValueError(f"param {pid}: {np.asarray(a).size} elements, expected "
                                     f"{self._param_sizes[pid]}")

        def put(pc: L.Piece, views: tuple) -> None:
            for dst, src in zip(views, state[pc.pid]):
                dst[pc.at:pc.at + pc.hi - pc.lo] = np.asarray(src, np.float32).reshape(-1)[
                    pc.lo:pc.hi]
        self._visit(set(state), put, dirty=True)

    def _visit(self, pids: set[int], fn: Callable[[L.Piece, tuple], Any],
               dirty: bool = False) -> None:
        self._require_bound()
        self._step_stats = self._new_stats()
        self._target, self._pos = max(self.gen, default=0), {}
        for sg in self.subgroups:
            if not any(pc.pid in pids for pc in sg.pieces):
                continue
            if not self._fetch(sg.idx, {sg.idx}, wait=True):
                raise RuntimeError("host cache has no buffer")
            bi = self._where[sg.idx]
            self._finish(bi)
            self._check_resident(bi, sg)  # a folded fetch's payload sum, now by a pass
            master, m, v, _ = self._buf_views(bi, sg)
            for pc in sg.pieces:
                if pc.pid in pids:
                    fn(pc, (master, m, v))
            if dirty:
                self._dirty[bi] = True
                self.ver[sg.idx] += 1
            self._clock += 1
            self._stamp[bi] = self._clock
        self._drain()

