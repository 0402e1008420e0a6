"""Checkpoint: commit (write back every dirty subgroup, fdatasync the paths, a manifest on
every directory path naming each subgroup's committed copy) and resume (the newest manifest's
copies become the state). Copies of older generations no manifest names are removed after
a commit."""
from __future__ import annotations

import errno
from typing import Any

from . import layout as L
from .pipeline import Pipeline
from .path_base import typed


class Checkpoint:
    def __init__(self, pipeline: Pipeline, namespace: str, subgroup_params: int) -> None:
        self.pipeline, self.namespace, self.subgroup_params = pipeline, namespace, \
            subgroup_params
        self.commit_id = 0

    def commit(self, steps_done: int, extra: dict[str, Any] | None = None) -> None:
        pl = self.pipeline
        c, ledger, paths = pl.cache, pl.ledger, pl.paths
        pl.begin(max(ledger.gen, default=0))
        for bi, k in enumerate(c.held):
            if k is not None and c.dirty[bi]:
                pl.finish(bi)
                if c.dirty[bi]:
                    pl.flush(bi, k)
        pl.drain()
        entries = []
        for k in range(len(pl.subgroups)):
            pi, slot, g = pl.location(k)
            paths[pi].sync(k)
            entries.append([pi, slot, g])
        self.commit_id += 1
        doc = dict(version=L.MANIFEST_VERSION, commit=self.commit_id, key=pl.key,
                   subgroup_params=self.subgroup_params, steps_done=steps_done,
                   paths=[p.name for p in paths], entries=entries, extra=extra or {},
                   resumable=all(paths[e[0]].durable() for e in entries))
        for p in paths:
            if p.kind == "dir":
                try:
                    L.write_manifest(p.name, self.namespace, doc)
                except OSError as e:
                    raise typed(e, p.name, None) from None
        old = ledger.committed
        ledger.set_committed(entries)
        for k, e in enumerate(ledger.committed):
            if old[k] is not None and old[k][0] != e[0]:
                paths[old[k][0]].remove(k)

    def resume(self) -> tuple[int, dict[str, Any]]:
        """(steps done, extra) of the newest manifest on the directory paths, whose copies
        become the state. FileNotFoundError when no path has one; ValueError when it belongs
        to another layout or path list, or names a path that does not survive a process."""
        pl = self.pipeline
        doc = self._newest()
        if doc.get("key") != pl.key or doc.get("paths") != [p.name for p in pl.paths] \
                or len(doc["entries"]) != len(pl.subgroups):
            raise ValueError("subgroup manifest is of another model, subgroup size or path list")
        if not doc.get("resumable"):
            raise ValueError("the committed state lives partly in a memory tier, which did not "
                             "survive its process")
        if any(e[0] >= len(pl.paths) for e in doc["entries"]):
            raise ValueError("subgroup manifest names a path index out of range")
        for bi in range(len(pl.cache)):
            pl.cache.io[bi] = None
            pl.cache.drop(bi)
        self.commit_id = doc["commit"]
        steps_done = int(doc["steps_done"])
        pl.ledger.set_committed(doc["entries"])
        for k, (_, _, g) in enumerate(pl.ledger.committed):
            pl.ledger.ver[k] = g
            pl.ledger.gen[k] = steps_done
        return steps_done, dict(doc.get("extra") or {})

    def _newest(self) -> dict[str, Any]:
        paths = self.pipeline.paths
        docs = [d for p in paths if p.kind == "dir"
                for d in [L.read_manifest(p.name, self.namespace)] if d is not None]
        if not docs:
            raise FileNotFoundError(errno.ENOENT, "no subgroup manifest on any directory path",
                                    ", ".join(p.name for p in paths))
        return max(docs, key=lambda d: d["commit"])
