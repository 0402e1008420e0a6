"""The kernel's own tiering, observed: whether NUMA-balancing tiering
(/proc/sys/kernel/numa_balancing bit 2) and demotion (/sys/kernel/mm/numa/demotion_enabled) are
on, the promotion/demotion counters of /proc/vmstat, and a process's pages moving between
tiers over an interval (numa_maps before and after)."""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from . import audit as _audit
from .. import topology
from .._config import config

NUMA_BALANCING = "sys/kernel/numa_balancing"  # under procfs
DEMOTION_ENABLED = "kernel/mm/numa/demotion_enabled"  # under sysfs
# numa_balancing is a bit mask (kernel/sched/fair.c): 1 = NUMA_BALANCING_NORMAL (move pages
# to the node of the CPU touching them), 2 = NUMA_BALANCING_MEMORY_TIERING (promote hot
# pages from slower tiers).
BALANCING_NORMAL = 1
BALANCING_TIERING = 2
# vmstat counters of page moves between nodes and tiers (names differ across kernels: every
# counter that starts with one of these is kept)
VMSTAT_PREFIXES = ("pgpromote_", "pgdemote_", "numa_pages_migrated", "pgmigrate_success",
                   "pgmigrate_fail", "numa_hint_faults")


@dataclass(frozen=True)
class TieringState:
    """numa_balancing: the mode bits, None when the file is absent (kernel without
    CONFIG_NUMA_BALANCING); demotion_enabled: None when absent (before Linux 5.15)."""

    numa_balancing: int | None
    demotion_enabled: bool | None

    @property
    def balancing(self) -> bool:
        return bool((self.numa_balancing or 0) & BALANCING_NORMAL)

    @property
    def tiering(self) -> bool:
        return bool((self.numa_balancing or 0) & BALANCING_TIERING)

    def describe(self) -> str:
        if self.numa_balancing is None:
            nb = "NUMA balancing: not in this kernel"
        else:
            on = [w for w, b in (("normal", self.balancing), ("tiering", self.tiering)) if b]
            nb = (f"NUMA balancing mode {self.numa_balancing} "
                  f"({'+'.join(on) if on else 'off'}; promotion of hot pages "
                  f"{'on' if self.tiering else 'off'})")
        dm = {None: "demotion: not in this kernel", True: "demotion on",
              False: "demotion off"}[self.demotion_enabled]
        return f"{nb}; {dm}"

    def to_dict(self) -> dict:
        return {"numa_balancing": self.numa_balancing, "balancing": self.balancing,
                "tiering": self.tiering, "demotion_enabled": self.demotion_enabled}


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (FileNotFoundError, NotADirectoryError):
        return None


def tiering_state(*, procfs_root: Path | None = None,
                  sysfs_root: Path | None = None) -> TieringState:
    """Read both switches now. ValueError naming the file when one holds something else than
    the kernel writes (a number; true/false)."""
    cfg = config()
    nb_path = (procfs_root or cfg.procfs_root) / NUMA_BALANCING
    dm_path = (sysfs_root or cfg.sysfs_root) / DEMOTION_ENABLED
    nb_text, dm_text = _read(nb_path), _read(dm_path)
    nb = None
    if nb_text is not None:
        try:
            nb = int(nb_text)
        except ValueError:
            raise ValueError(f"{nb_path}: {nb_text!r}, expected a number") from None
    dm = None
    if dm_text is not None:
        if dm_text.lower() in ("true", "1", "y"):
            dm = True
        elif dm_text.lower() in ("false", "0", "n"):
            dm = False
        else:
            raise ValueError(f"{dm_path}: {dm_text!r}, expected true or false")
    return TieringState(nb, dm)


def vmstat_counters(*, procfs_root: Path | None = None) -> dict[str, int]:
    """The page-move counters of /proc/vmstat (VMSTAT_PREFIXES), since boot."""
    path = (procfs_root or config().procfs_root) / "vmstat"
    out = {}
    for line in path.read_text().splitlines():
        name, _, value = line.partition(" ")
        if name.startswith(VMSTAT_PREFIXES):
            try:
                out[name] = int(value)
            except ValueError:
                raise ValueError(f"{path}: {line!r}, expected 'name count'") from None
    return out


def node_tiers(*, sysfs_root: Path | None = None) -> dict[int, int]:
    """{node: memory tier id} for the nodes with memory (lower id = faster); a node the
    kernel puts in no tier counts as the fastest (one-node machines)."""
    topo = topology.discover(sysfs_root)
    return {n.id: (n.memory_tier if n.memory_tier is not None else 0)
            for n in topo.nodes if n.has_memory}


@dataclass
class TieringDelta:
    """What moved during interval_s. system: vmstat counter deltas (every process).
    node_bytes_delta: the process's bytes per node after minus before (None without a pid).
    promoted/demoted_bytes: the process's net bytes that left the slower tiers for the
    fastest one and the other way (numa_maps shows where pages are, not single moves)."""

    interval_s: float
    state: TieringState
    system: dict[str, int]
    pid: int | None = None
    node_bytes_before: dict[int, int] = field(default_factory=dict)
    node_bytes_after: dict[int, int] = field(default_factory=dict)
    tiers: dict[int, int] = field(default_factory=dict)

    @property
    def node_bytes_delta(self) -> dict[int, int] | None:
        if self.pid is None:
            return None
        nodes = sorted(set(self.node_bytes_before) | set(self.node_bytes_after))
        return {n: self.node_bytes_after.get(n, 0) - self.node_bytes_before.get(n, 0)
                for n in nodes}

    def _flow(self) -> tuple[int, int]:
        d = self.node_bytes_delta or {}
        if not d or not self.tiers:
            return 0, 0
        top = min(self.tiers.values())
        up = [n for n in d if self.tiers.get(n, top) == top]
        down = [n for n in d if self.tiers.get(n, top) != top]
        gained_up = sum(max(0, d[n]) for n in up)
        lost_up = sum(max(0, -d[n]) for n in up)
        gained_down = sum(max(0, d[n]) for n in down)
        lost_down = sum(max(0, -d[n]) for n in down)
        return min(lost_down, gained_up), min(lost_up, gained_down)

    @property
    def promoted_bytes(self) -> int:
        return self._flow()[0]

    @property
    def demoted_bytes(self) -> int:
        return self._flow()[1]

    def to_dict(self) -> dict:
        d = {"interval_s": self.interval_s, "state": self.state.to_dict(),
             "system": self.system}
        if self.pid is not None:
            d.update({"pid": self.pid,
                      "node_bytes_before": {str(n): v for n, v in self.node_bytes_before.items()},
                      "node_bytes_after": {str(n): v for n, v in self.node_bytes_after.items()},
                      "node_bytes_delta": {str(n): v
                                           for n, v in (self.node_bytes_delta or {}).items()},
                      "tiers": {str(n): t for n, t in self.tiers.items()},
                      "promoted_bytes": self.promoted_bytes,
                      "demoted_bytes": self.demoted_bytes})
        return d


def observe(interval_s: float, pid: int | None = None, *, procfs_root: Path | None = None,
            sysfs_root: Path | None = None,
            sleep: Callable[[float], None] = time.sleep) -> TieringDelta:
    """Counters (and pid's pages per node) now, again after interval_s, and the difference.
    ValueError for a negative or non-finite interval; ProcessLookupError for a pid gone."""
    if isinstance(interval_s, bool) or not isinstance(interval_s, (int, float)) \
            or not 0 <= interval_s < float("inf"):
        raise ValueError(f"interval {interval_s!r}: expected seconds >= 0")
    state = tiering_state(procfs_root=procfs_root, sysfs_root=sysfs_root)
    before = vmstat_counters(procfs_root=procfs_root)
    pb = _audit.audit_pid(pid, procfs_root=procfs_root).totals() if pid is not None else {}
    sleep(interval_s)
    after = vmstat_counters(procfs_root=procfs_root)
    pa = _audit.audit_pid(pid, procfs_root=procfs_root).totals() if pid is not None else {}
    system = {k: after[k] - before.get(k, 0) for k in after}
    tiers = node_tiers(sysfs_root=sysfs_root) if pid is not None else {}
    return TieringDelta(float(interval_s), state, system, pid, pb, pa, tiers)
