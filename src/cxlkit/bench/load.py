"""How busy the machine was while a benchmark ran: the load average before and after, and the
CPU time other processes took during it (the busy time /proc/stat counts for every CPU, minus
this process's own user+system time from getrusage). A measurement on a busy machine reads
low; `busy` says when the figures should not be trusted."""
from __future__ import annotations

import os
import resource
import time
from dataclasses import asdict, dataclass
from pathlib import Path

# Other processes took more than this share of the CPU time this process may use: a core
# the benchmark wanted was often someone else's.
BUSY_SHARE = 0.10
_BUSY_FIELDS = (0, 1, 2, 5, 6, 7)  # user nice system irq softirq steal (not idle, iowait)


@dataclass(frozen=True)
class Load:
    """The machine's load over one measurement."""

    wall_s: float
    cpus: int                  # CPUs of the machine (/proc/stat counts them all)
    loadavg_before: float      # 1-minute load average
    loadavg_after: float
    others_cpu_s: float        # CPU time of every other process during it (>= 0)
    others_share: float        # others_cpu_s / (wall_s * cpus), 0..1
    busy: bool                 # others_share > BUSY_SHARE: figures likely low

    def to_dict(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        return (f"load average {self.loadavg_before:.2f} -> {self.loadavg_after:.2f}; other "
                f"processes used {self.others_cpu_s:.1f} CPU-s of {self.wall_s * self.cpus:.1f}"
                f" ({self.others_share:.0%}) during the {self.wall_s:.1f} s run")


def _busy_s(stat: Path) -> float | None:
    """Busy CPU seconds of every CPU since boot (the 'cpu ' line of /proc/stat)."""
    try:
        line = stat.read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    if not line or line[0] != "cpu" or len(line) < 9:
        return None
    ticks = sum(int(line[1 + i]) for i in _BUSY_FIELDS)
    return ticks / os.sysconf("SC_CLK_TCK")


def _own_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime + c.ru_utime + c.ru_stime


class LoadMeter:
    """`with LoadMeter() as m: ...` then m.load: the machine's load over the body."""

    def __init__(self, procfs: Path | None = None) -> None:
        self._stat = (procfs or Path("/proc")) / "stat"
        self.load: Load | None = None

    def __enter__(self) -> LoadMeter:
        self._t0, self._busy0, self._own0 = time.monotonic(), _busy_s(self._stat), _own_s()
        self._avg0 = os.getloadavg()[0]
        return self

    def __exit__(self, *exc: object) -> None:
        wall = max(time.monotonic() - self._t0, 1e-9)
        busy1, own = _busy_s(self._stat), _own_s() - self._own0
        cpus = os.cpu_count() or 1
        # the busy time of all CPUs minus ours is the others' (clamped: tick granularity)
        others = 0.0 if busy1 is None or self._busy0 is None else \
            max(0.0, busy1 - self._busy0 - own)
        share = min(1.0, others / (wall * cpus))
        self.load = Load(wall_s=wall, cpus=cpus, loadavg_before=self._avg0,
                         loadavg_after=os.getloadavg()[0], others_cpu_s=others,
                         others_share=share, busy=share > BUSY_SHARE)
