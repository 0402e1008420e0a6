"""Where a process's pages are: /proc/PID/numa_maps per mapping and in total."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from .._config import config

_NODE = re.compile(r"^N(\d+)=(\d+)$")


@dataclass
class MappingPages:
    """One line of numa_maps: a mapping's policy and its pages per node."""

    address: int
    policy: str
    kind: str  # "anon", "heap", "stack", "file:/path", "shm" ...
    pages: dict[int, int] = field(default_factory=dict)
    page_size_kb: int = 4

    @property
    def nbytes(self) -> int:
        return sum(self.pages.values()) * self.page_size_kb * 1024


@dataclass
class ProcessPages:
    pid: int
    mappings: list[MappingPages]

    def totals(self) -> dict[int, int]:
        """Bytes per node over every mapping."""
        out: dict[int, int] = {}
        for m in self.mappings:
            for n, c in m.pages.items():
                out[n] = out.get(n, 0) + c * m.page_size_kb * 1024
        return dict(sorted(out.items()))


def parse_numa_maps(text: str) -> list[MappingPages]:
    """Parse the text of a numa_maps file (format: proc(5))."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        try:
            addr = int(parts[0], 16)
        except ValueError:
            continue
        m = MappingPages(addr, parts[1], "anon")
        for tok in parts[2:]:
            if (nm := _NODE.match(tok)):
                m.pages[int(nm.group(1))] = int(nm.group(2))
            elif tok.startswith("file="):
                m.kind = "file:" + tok[5:]
            elif tok in ("heap", "stack", "huge"):
                m.kind = tok
            elif tok.startswith("kernelpagesize_kB="):
                m.page_size_kb = int(tok.split("=", 1)[1])
        out.append(m)
    return out


def audit_pid(pid: int, *, procfs_root: Path | None = None) -> ProcessPages:
    """Pages per node of every mapping of process `pid`. ProcessLookupError names a pid that
    does not exist, PermissionError one whose numa_maps may not be read."""
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        raise ValueError(f"pid {pid!r}: expected a positive int")
    path = (procfs_root or config().procfs_root) / str(pid) / "numa_maps"
    try:
        text = path.read_text()
    except FileNotFoundError:
        if not path.parent.exists():
            raise ProcessLookupError(3, f"no process {pid}", str(path.parent)) from None
        raise FileNotFoundError(2, "numa_maps missing (kernel without CONFIG_NUMA?)",
                                str(path)) from None
    except ProcessLookupError:
        raise ProcessLookupError(3, f"process {pid} exited", str(path)) from None
    return ProcessPages(pid, parse_numa_maps(text))
