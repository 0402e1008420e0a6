"""Facts about this machine a caller reads directly: which nodes have memory, how much a node
can still give, the kernel's weighted-interleave weights and auto mode; plus the sysfs paths
and the kernel's CPU-list format they share with the topology reader."""
from __future__ import annotations

import re
from pathlib import Path

from .._config import config


def sysfs_root(root: Path | None) -> Path:
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


def format_cpulist(ids) -> str:
    """[0, 1, 2, 3, 8] -> '0-3,8' (the kernel's list format); [] -> ''."""
    ids = sorted(set(ids))
    runs: list[str] = []
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        runs.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ",".join(runs)


def memory_nodes(root: Path | None = None) -> list[int]:
    """NUMA nodes that have memory (has_memory); [0] when sysfs has no node directory."""
    f = sysfs_root(root) / "devices/system/node/has_memory"
    try:
        return parse_cpulist(f.read_text())
    except FileNotFoundError:
        return [0]


def node_available_bytes(node: int, root: Path | None = None) -> int | None:
    """Bytes an allocation bound to `node` could get without swapping: MemFree plus the page
    cache the kernel can drop (FilePages less Shmem, which tmpfs pool files pin) plus
    reclaimable slab, from the node's meminfo; None when the node has no readable meminfo."""
    try:
        text = (sysfs_root(root) / NODE_DIR / f"node{node}" / "meminfo").read_text()
    except OSError:
        return None
    vals = {m.group(1): int(m.group(2)) * 1024
            for m in re.finditer(r"Node\s+\d+\s+(\w+):\s+(\d+)\s*kB", text)}
    if "MemFree" not in vals:
        return None
    reclaimable = max(0, vals.get("FilePages", 0) - vals.get("Shmem", 0))
    return vals["MemFree"] + reclaimable + vals.get("SReclaimable", 0)



WEIGHTED_INTERLEAVE_DIR = "kernel/mm/mempolicy/weighted_interleave"
# The auto-mode switch (Linux 6.16+) is declared as `auto`; kernels whose compiler headers
# `#define auto __auto_type` (6.18 here) export it under the macro's expansion instead.
WEIGHTED_INTERLEAVE_AUTO_FILES = ("auto", "__auto_type")
NODE_DIR = "devices/system/node"
MEMORY_TIERING_DIR = "devices/virtual/memory_tiering"
CXL_DEVICES_DIR = "bus/cxl/devices"
DAX_DEVICES_DIR = "bus/dax/devices"
# mm/memory-tiers: a tier spans 2**MEMTIER_CHUNK_BITS of abstract distance; tier id =
# adistance >> 7, DRAM sits at 4*128+64 (tier 4), default kmem/dax memory at 5x DRAM (tier 22).
MEMTIER_CHUNK_BITS = 7


def weighted_interleave_auto(root: Path | None = None) -> tuple[bool | None, Path | None]:
    """(auto mode on?, its sysfs file) of the kernel's weighted interleave: (None, None) when
    the kernel has no auto mode (before Linux 6.16); (None, file) when the file is unreadable
    or malformed. In auto mode the kernel sets the weights from the firmware's bandwidth; a
    weight written by hand turns it off."""
    d = sysfs_root(root) / WEIGHTED_INTERLEAVE_DIR
    for name in WEIGHTED_INTERLEAVE_AUTO_FILES:
        f = d / name
        try:
            t = f.read_text().strip()
        except FileNotFoundError:
            continue
        except OSError:
            return None, f
        return {"true": True, "1": True, "Y": True, "false": False, "0": False,
                "N": False}.get(t), f
    return None, None


def weighted_interleave_weights(root: Path | None = None) -> dict[int, int] | None:
    """The kernel's system-wide weighted-interleave weights {node: weight}, or None when the
    kernel has no MPOL_WEIGHTED_INTERLEAVE (before Linux 6.9). A weight of 0 reads as 1
    (the kernel's default)."""
    d = sysfs_root(root) / WEIGHTED_INTERLEAVE_DIR
    if not d.is_dir():
        return None
    out: dict[int, int] = {}
    for f in sorted(d.glob("node*")):
        try:
            out[int(f.name[4:])] = int(f.read_text().strip()) or 1
        except (ValueError, OSError):
            continue
    return out


