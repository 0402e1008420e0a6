"""Ledger: per subgroup, the last step applied (gen), its content version (ver, bumped on
every change; headers carry it), the durable copies on the paths ((path, slot) -> version)
and the copy the last commit named. Every component asks it where a subgroup lies."""
from __future__ import annotations

import errno
from collections.abc import Sequence

from .path_base import SubgroupError

Location = tuple[int, int, int]  # (path index, slot, version)


class Ledger:
    def __init__(self, nsubgroups: int, path_names: Sequence[str]) -> None:
        self.path_names = list(path_names)
        self.gen = [0] * nsubgroups
        self.ver = [0] * nsubgroups
        self.durable: list[dict[tuple[int, int], int]] = [{} for _ in range(nsubgroups)]
        self.committed: list[Location | None] = [None] * nsubgroups

    def location(self, k: int, assigned: int = 0) -> Location:
        """(path, slot, version) of the newest durable copy of subgroup k; SubgroupError
        (ENODATA, naming its assigned path) when it was never written."""
        if not self.durable[k]:
            raise SubgroupError(errno.ENODATA, "no durable copy (never written)",
                                self.path_names[assigned], k)
        (pi, slot), g = max(self.durable[k].items(), key=lambda it: it[1])
        return pi, slot, g

    def has_copy(self, k: int) -> bool:
        return bool(self.durable[k])

    def forget(self, k: int, pi: int, slot: int) -> None:
        """That slot's old contents are being overwritten."""
        self.durable[k].pop((pi, slot), None)

    def record(self, k: int, pi: int, slot: int, ver: int) -> None:
        """A copy of version ver is durable at (pi, slot): copies on other paths go, but for
        the committed one (kept until the next commit: what a resume reads)."""
        self.durable[k][(pi, slot)] = ver
        self.durable[k] = {loc: g for loc, g in self.durable[k].items()
                           if loc[0] == pi or self.committed[k] == (*loc, g)}

    def slot_for_write(self, k: int, pi: int) -> int:
        """The slot of path pi a new copy of k goes to: never the committed copy's, else the
        one holding no copy or the older one."""
        used = {s for (p, s) in self.durable[k] if p == pi}
        keep = self.committed[k]
        cand = [s for s in (0, 1) if not (keep and keep[0] == pi and keep[1] == s)]
        return min(cand, key=lambda s: (s in used, self.durable[k].get((pi, s), -1)))

    def set_committed(self, entries: Sequence[Location]) -> None:
        """Those copies are the committed state; every other copy is forgotten."""
        self.committed = [tuple(e) for e in entries]  # type: ignore[misc]
        for k, (pi, slot, g) in enumerate(self.committed):  # type: ignore[misc]
            self.durable[k] = {(pi, slot): g}
