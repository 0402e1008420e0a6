"""Memory tiers of this machine, discovered from sysfs (root: CXLKIT_SYSFS_ROOT)."""
from __future__ import annotations

from pathlib import Path

from ._config import config


def _sysfs(root: Path | None) -> Path:
    return Path(root) if root is not None else config().sysfs_root


def parse_cpulist(text: str) -> list[int]:
    """'0-3,8,10-11' -> [0, 1, 2, 3, 8, 10, 11]; '' -> []."""
    out: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def memory_nodes(root: Path | None = None) -> list[int]:
    """NUMA nodes that have memory (has_memory); [0] when sysfs has no node directory."""
    f = _sysfs(root) / "devices/system/node/has_memory"
    try:
        return parse_cpulist(f.read_text())
    except FileNotFoundError:
        return [0]


WEIGHTED_INTERLEAVE_DIR = "kernel/mm/mempolicy/weighted_interleave"


def weighted_interleave_weights(root: Path | None = None) -> dict[int, int] | None:
    """The kernel's system-wide weighted-interleave weights {node: weight}, or None when the
    kernel has no MPOL_WEIGHTED_INTERLEAVE (before Linux 6.9). A weight of 0 reads as 1
    (the kernel's default)."""
    d = _sysfs(root) / WEIGHTED_INTERLEAVE_DIR
    if not d.is_dir():
        return None
    out: dict[int, int] = {}
    for f in sorted(d.glob("node*")):
        try:
            out[int(f.name[4:])] = int(f.read_text().strip()) or 1
        except (ValueError, OSError):
            continue
    return out
