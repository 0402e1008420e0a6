"""The topology's records: nodes with their kind and evidence, access classes, memory tiers,
CXL regions and memdevs, dax devices, and the Topology that holds them."""
from __future__ import annotations

from dataclasses import asdict, dataclass

from .facts import MEMTIER_CHUNK_BITS, format_cpulist

KINDS = ("dram", "cxl", "hbm", "pmem")


@dataclass(frozen=True)
class AccessClass:
    """HMAT performance of a memory node (or CXL region) from its best initiators:
    nodeN/accessK/initiators/* (K=0: any initiator, K=1: CPUs only). Latency in ns,
    bandwidth in MB/s, as the firmware reports them."""

    access: int
    initiators: tuple[int, ...]
    read_latency_ns: int | None
    write_latency_ns: int | None
    read_bandwidth_mbps: int | None
    write_bandwidth_mbps: int | None


@dataclass(frozen=True)
class HugePages:
    page_kb: int
    total: int | None
    free: int | None


@dataclass(frozen=True)
class Node:
    """One NUMA node. cpus is None when the cpulist could not be read; distances are
    (other node, SLIT distance) pairs in the kernel's order."""

    id: int
    kind: str
    evidence: tuple[str, ...]
    has_memory: bool
    cpus: tuple[int, ...] | None
    mem_total_bytes: int | None
    mem_free_bytes: int | None
    distances: tuple[tuple[int, int], ...]
    access: tuple[AccessClass, ...]
    memory_tier: int | None
    wi_weight: int | None
    hugepages: tuple[HugePages, ...]

    @property
    def hmat(self) -> AccessClass | None:
        """access0 (the figures the kernel's tiering and auto weights use), if present."""
        return next((a for a in self.access if a.access == 0), None)

    def distance_to(self, other: int) -> int:
        for n, d in self.distances:
            if n == other:
                return d
        raise KeyError(f"node {self.id} has no distance to node {other}")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["distances"] = {str(n): v for n, v in self.distances}
        d["cpulist"] = None if self.cpus is None else format_cpulist(self.cpus)
        return d


@dataclass(frozen=True)
class MemoryTier:
    """A kernel memory tier (memory_tierN): lower id = faster. The kernel does not export
    abstract distance; adistance_range is what the tier id implies."""

    id: int
    nodes: tuple[int, ...]

    @property
    def adistance_range(self) -> tuple[int, int]:
        return self.id << MEMTIER_CHUNK_BITS, ((self.id + 1) << MEMTIER_CHUNK_BITS) - 1

    def to_dict(self) -> dict:
        return {"id": self.id, "nodes": list(self.nodes),
                "adistance_range": list(self.adistance_range)}


@dataclass(frozen=True)
class CXLRegion:
    """regionN on the CXL bus: an interleave set of memdevs mapped into host physical space.
    target_node comes from the region's dax device (None while not exposed as memory)."""

    name: str
    mode: str | None
    size_bytes: int | None
    resource: int | None
    interleave_ways: int | None
    interleave_granularity: int | None
    committed: bool | None
    targets: tuple[str, ...]
    memdevs: tuple[str, ...]
    dax_devices: tuple[str, ...]
    target_node: int | None
    access: tuple[AccessClass, ...]

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class CXLMemdev:
    """memN: one CXL memory expander (Type-3 device). numa_node is the CPU node its PCI
    device hangs off, not where its memory appears."""

    name: str
    ram_bytes: int | None
    pmem_bytes: int | None
    serial: str | None
    numa_node: int | None
    firmware_version: str | None
    host: str | None
    regions: tuple[str, ...]

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class DaxDevice:
    """daxX.Y on the dax bus. mode: 'system-ram' (kmem: onlined as node target_node),
    'devdax' (device_dax: map /dev/daxX.Y directly), or None when no driver is bound.
    source: 'cxl', 'nvdimm', 'hmem' (EFI specific-purpose memory) or None."""

    name: str
    mode: str | None
    driver: str | None
    size_bytes: int | None
    align: int | None
    target_node: int | None
    numa_node: int | None
    resource: int | None
    source: str | None
    region: str | None

    @property
    def path(self) -> str:
        return f"/dev/{self.name}"

    def to_dict(self) -> dict:
        d = asdict(self)
        d["path"] = self.path
        return d


@dataclass(frozen=True)
class Topology:
    root: str
    nodes: tuple[Node, ...]
    memory_tiers: tuple[MemoryTier, ...]
    cxl_regions: tuple[CXLRegion, ...]
    cxl_memdevs: tuple[CXLMemdev, ...]
    dax_devices: tuple[DaxDevice, ...]
    weighted_interleave: bool
    wi_auto: bool | None
    wi_auto_file: str | None
    warnings: tuple[str, ...]

    def node(self, node_id: int) -> Node:
        for n in self.nodes:
            if n.id == node_id:
                return n
        have = ",".join(str(n.id) for n in self.nodes) or "none"
        raise KeyError(f"node {node_id} not found under {self.root} (nodes: {have})")

    def nodes_of_kind(self, kind: str, *, include_memoryless: bool = False) -> list[Node]:
        if kind not in KINDS:
            raise ValueError(f"kind {kind!r}: expected one of {', '.join(KINDS)}")
        return [n for n in self.nodes
                if n.kind == kind and (n.has_memory or include_memoryless)]

    @property
    def memory_node_ids(self) -> list[int]:
        return [n.id for n in self.nodes if n.has_memory]

    @property
    def cpu_node_ids(self) -> list[int]:
        return [n.id for n in self.nodes if n.cpus]

    @property
    def wi_weights(self) -> dict[int, int] | None:
        """The kernel's weighted-interleave weights as read (None: no weighted interleave)."""
        if not self.weighted_interleave:
            return None
        return {n.id: n.wi_weight for n in self.nodes if n.wi_weight is not None}

    def region(self, name: str) -> CXLRegion:
        return _named(self.cxl_regions, name, "CXL region", self.root)

    def memdev(self, name: str) -> CXLMemdev:
        return _named(self.cxl_memdevs, name, "CXL memdev", self.root)

    def dax(self, name: str) -> DaxDevice:
        return _named(self.dax_devices, name, "dax device", self.root)

    def to_dict(self) -> dict:
        return {
            "version": 1,
            "root": self.root,
            "nodes": [n.to_dict() for n in self.nodes],
            "memory_tiers": [t.to_dict() for t in self.memory_tiers],
            "cxl_regions": [r.to_dict() for r in self.cxl_regions],
            "cxl_memdevs": [m.to_dict() for m in self.cxl_memdevs],
            "dax_devices": [d.to_dict() for d in self.dax_devices],
            "weighted_interleave": {"supported": self.weighted_interleave,
                                    "auto": self.wi_auto, "auto_file": self.wi_auto_file,
                                    "weights": {str(k): v for k, v in
                                                (self.wi_weights or {}).items()}},
            "warnings": list(self.warnings),
        }


def _named(items, name: str, what: str, root: str):
    for it in items:
        if it.name == name:
            return it
    have = ", ".join(it.name for it in items) or "none"
    raise KeyError(f"{what} {name!r} not found under {root} (have: {have})")

