"""What the benchmarks and the sizing planner run on: the memory nodes with their kind, free
memory and the CPUs that measure them (from topology.discover()), and the machine facts every
result document records."""
from __future__ import annotations

import datetime as _dt
import os
import platform
import re
from dataclasses import dataclass
from pathlib import Path

from .. import _native, topology
from .._config import config


@dataclass(frozen=True)
class NodeFacts:
    """One memory node as a benchmark sees it. initiator_cpus are the CPUs that measure it:
    its own, else those of the HMAT access0 initiators, else those of the nearest node with
    CPUs; always limited to the CPUs this process may run on."""

    node: int
    kind: str
    cpus: tuple[int, ...]
    initiator_cpus: tuple[int, ...]
    total_bytes: int | None
    free_bytes: int | None
    hmat: dict | None  # firmware figures: read/write latency ns, bandwidth MB/s


def allowed_cpus() -> tuple[int, ...]:
    return tuple(sorted(os.sched_getaffinity(0)))


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _from_discover(root: Path) -> list[dict]:
    topo = topology.discover(root)
    out = []
    for n in topo.nodes:
        if not n.has_memory:
            continue
        h = n.hmat
        hmat = None if h is None else {
            "read_latency_ns": h.read_latency_ns, "write_latency_ns": h.write_latency_ns,
            "read_bandwidth_mbps": h.read_bandwidth_mbps,
            "write_bandwidth_mbps": h.write_bandwidth_mbps}
        out.append({"node": n.id, "kind": n.kind, "cpus": tuple(n.cpus or ()),
                    "total": n.mem_total_bytes, "free": n.mem_free_bytes, "hmat": hmat,
                    "hmat_initiators": tuple(h.initiators) if h else (),
                    "distances": dict(n.distances)})
    return out


def _node_cpus(root: Path, node: int) -> tuple[int, ...]:
    return tuple(topology.parse_cpulist(
        _read(root / f"devices/system/node/node{node}/cpulist") or ""))


def nodes(root: Path | None = None) -> list[NodeFacts]:
    """Every node with memory, in id order."""
    base = Path(root) if root is not None else config().sysfs_root
    raw = _from_discover(base)
    mine = set(allowed_cpus())
    out = []
    for r in raw:
        init = [c for c in r["cpus"] if c in mine]
        if not init:
            for i in r["hmat_initiators"]:
                init += [c for c in _node_cpus(base, i) if c in mine]
        if not init:  # nearest node that has CPUs we may use, by SLIT distance
            for other, _ in sorted(r["distances"].items(), key=lambda kv: (kv[1], kv[0])):
                init = [c for c in _node_cpus(base, other) if c in mine]
                if init:
                    break
        if not init:
            init = sorted(mine)
        out.append(NodeFacts(r["node"], r["kind"], r["cpus"], tuple(sorted(set(init))),
                             r["total"], r["free"], r["hmat"]))
    return out


def cpu_nodes(root: Path | None = None) -> dict[int, tuple[int, ...]]:
    """Nodes with CPUs this process may use: {node: cpus}; the initiators of a matrix."""
    base = Path(root) if root is not None else config().sysfs_root
    nd = base / "devices/system/node"
    mine = set(allowed_cpus())
    out = {}
    for d in sorted(nd.glob("node[0-9]*"), key=lambda p: int(p.name[4:])):
        cpus = tuple(c for c in _node_cpus(base, int(d.name[4:])) if c in mine)
        if cpus:
            out[int(d.name[4:])] = cpus
    return out or {0: allowed_cpus()}


def _cpu_model() -> str:
    for line in (_read(Path("/proc/cpuinfo")) or "").splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def thp_mode() -> str:
    t = _read(config().sysfs_root / "kernel/mm/transparent_hugepage/enabled") or ""
    m = re.search(r"\[(\w+)\]", t)
    return m.group(1) if m else "unknown"


def machine() -> dict:
    """The facts a result records: CPU, CPUs usable, ISA the kernels use, kernel, THP."""
    feats = _native.cpu_features()
    names = [k for k, bit in _native.CPU_FEATURE_BITS.items() if feats & bit]
    return {"cpu": _cpu_model(), "cpus_online": os.cpu_count(), "cpus_allowed": len(allowed_cpus()),
            "arch": platform.machine(), "cpu_features": names, "flush": _native.flush_kind(),
            "thp": thp_mode(), "cxlkit": _native.version()}


def kernel() -> str:
    return platform.release()


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
