"""Memory tiers of this machine, discovered from sysfs (root: CXLKIT_SYSFS_ROOT).

`discover()` reads NUMA nodes, HMAT access classes, kernel memory tiers, weighted-interleave
weights, huge pages, CXL regions/memdevs and dax devices, then classifies every node as
dram / cxl / hbm / pmem with the evidence for it. Missing files read as None; files that
exist but cannot be read or parsed also read as None and are named in `Topology.warnings`.
"""
from __future__ import annotations

import errno
import os
import re
from dataclasses import asdict, dataclass
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
    f = _sysfs(root) / "devices/system/node/has_memory"
    try:
        return parse_cpulist(f.read_text())
    except FileNotFoundError:
        return [0]


def node_available_bytes(node: int, root: Path | None = None) -> int | None:
    """Bytes an allocation bound to `node` could get without swapping: MemFree plus the page
    cache the kernel can drop (FilePages less Shmem, which tmpfs pool files pin) plus
    reclaimable slab, from the node's meminfo; None when the node has no readable meminfo."""
    try:
        text = (_sysfs(root) / NODE_DIR / f"node{node}" / "meminfo").read_text()
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

KINDS = ("dram", "cxl", "hbm", "pmem")
# HMAT thresholds against the node's DRAM reference (its initiator): HBM needs much more
# bandwidth at a similar latency; CXL-like memory is markedly slower to reach.
HBM_MIN_BANDWIDTH_RATIO = 1.5
HBM_MAX_LATENCY_RATIO = 1.5
SLOW_MIN_LATENCY_RATIO = 1.3


def weighted_interleave_auto(root: Path | None = None) -> tuple[bool | None, Path | None]:
    """(auto mode on?, its sysfs file) of the kernel's weighted interleave: (None, None) when
    the kernel has no auto mode (before Linux 6.16); (None, file) when the file is unreadable
    or malformed. In auto mode the kernel sets the weights from the firmware's bandwidth; a
    weight written by hand turns it off."""
    d = _sysfs(root) / WEIGHTED_INTERLEAVE_DIR
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


# ---------------------------------------------------------------- records


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


# ---------------------------------------------------------------- reading


class _Reader:
    """sysfs reads relative to a root. Absent files are normal (older kernels, no HMAT) and
    read as None quietly; present-but-broken files read as None and leave a warning."""

    def __init__(self, root: Path):
        self.root = root
        self.warnings: list[str] = []

    def text(self, path: Path) -> str | None:
        try:
            return path.read_text().strip()
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as e:
            self.warn(path, f"unreadable ({type(e).__name__})")
            return None

    def num(self, path: Path, *, base: int = 10) -> int | None:
        t = self.text(path)
        if t is None:
            return None
        try:
            return int(t, base)
        except ValueError:
            self.warn(path, f"malformed {t[:40]!r} (expected an integer)")
            return None

    def cpulist(self, path: Path) -> tuple[int, ...] | None:
        t = self.text(path)
        if t is None:
            return None
        try:
            return tuple(parse_cpulist(t))
        except ValueError:
            self.warn(path, f"malformed {t[:40]!r} (expected a list like 0-3,8)")
            return None

    def link_name(self, path: Path) -> str | None:
        try:
            return os.path.basename(os.readlink(path))
        except FileNotFoundError:
            return None
        except OSError as e:
            self.warn(path, f"unreadable link ({type(e).__name__})")
            return None

    def warn(self, path: Path, what: str) -> None:
        try:
            rel = path.relative_to(self.root)
        except ValueError:
            rel = path
        self.warnings.append(f"{rel}: {what}")


def _numbered(d: Path, prefix: str) -> list[tuple[int, Path]]:
    """Children named <prefix><int>, sorted by the number."""
    pat = re.compile(re.escape(prefix) + r"(\d+)$")
    out = []
    try:
        entries = list(d.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return []
    for p in entries:
        m = pat.match(p.name)
        if m:
            out.append((int(m.group(1)), p))
    return sorted(out)


def _meminfo(r: _Reader, path: Path) -> tuple[int | None, int | None]:
    t = r.text(path)
    if t is None:
        return None, None
    vals: dict[str, int] = {}
    for line in t.splitlines():
        # "Node 0 MemTotal:        5204172 kB"
        m = re.match(r"Node\s+\d+\s+(\w+):\s+(\d+)\s*kB", line)
        if m:
            vals[m.group(1)] = int(m.group(2)) * 1024
    if "MemTotal" not in vals:
        r.warn(path, "malformed (no 'Node N MemTotal: X kB' line)")
    return vals.get("MemTotal"), vals.get("MemFree")


def _distances(r: _Reader, path: Path, order: list[int]) -> tuple[tuple[int, int], ...]:
    t = r.text(path)
    if t is None:
        return ()
    try:
        vals = [int(x) for x in t.split()]
    except ValueError:
        r.warn(path, f"malformed {t[:40]!r} (expected distances)")
        return ()
    if len(vals) != len(order):
        r.warn(path, f"{len(vals)} distances for {len(order)} online nodes")
        return ()
    return tuple(zip(order, vals))


def _access(r: _Reader, d: Path) -> tuple[AccessClass, ...]:
    """nodeN/accessK/initiators/ (node form) or regionN/accessK/ (CXL region form)."""
    out = []
    for k, ad in _numbered(d, "access"):
        sub = ad / "initiators"
        base = sub if sub.is_dir() else ad
        inits = tuple(i for i, _ in _numbered(sub, "node"))
        out.append(AccessClass(
            access=k, initiators=inits,
            read_latency_ns=r.num(base / "read_latency"),
            write_latency_ns=r.num(base / "write_latency"),
            read_bandwidth_mbps=r.num(base / "read_bandwidth"),
            write_bandwidth_mbps=r.num(base / "write_bandwidth")))
    return tuple(out)


def _hugepages(r: _Reader, d: Path) -> tuple[HugePages, ...]:
    out = []
    for kb, hd in _numbered_suffix(d / "hugepages", "hugepages-", "kB"):
        out.append(HugePages(kb, r.num(hd / "nr_hugepages"), r.num(hd / "free_hugepages")))
    return tuple(out)


def _numbered_suffix(d: Path, prefix: str, suffix: str) -> list[tuple[int, Path]]:
    pat = re.compile(re.escape(prefix) + r"(\d+)" + re.escape(suffix) + "$")
    try:
        return sorted((int(m.group(1)), p) for p in d.iterdir() if (m := pat.match(p.name)))
    except (FileNotFoundError, NotADirectoryError):
        return []


def _memory_tiers(r: _Reader, root: Path) -> tuple[MemoryTier, ...]:
    out = []
    for tid, td in _numbered(root / MEMORY_TIERING_DIR, "memory_tier"):
        nodes = r.cpulist(td / "nodelist")
        out.append(MemoryTier(tid, nodes or ()))
    return tuple(out)


def _wi(r: _Reader, root: Path) -> tuple[bool, bool | None, str | None, dict[int, int]]:
    d = root / WEIGHTED_INTERLEAVE_DIR
    if not d.is_dir():
        return False, None, None, {}
    weights = {}
    for n, f in _numbered(d, "node"):
        w = r.num(f)
        if w is not None:
            weights[n] = w
    for name in WEIGHTED_INTERLEAVE_AUTO_FILES:
        t = r.text(d / name)
        if t is None:
            continue
        if t in ("true", "1", "Y"):
            return True, True, name, weights
        if t in ("false", "0", "N"):
            return True, False, name, weights
        r.warn(d / name, f"malformed {t[:40]!r} (expected true or false)")
        return True, None, name, weights
    return True, None, None, weights


def _dax_devices(r: _Reader, root: Path) -> tuple[DaxDevice, ...]:
    d = root / DAX_DEVICES_DIR
    out = []
    try:
        entries = sorted(d.iterdir(), key=lambda p: _natural(p.name))
    except (FileNotFoundError, NotADirectoryError):
        return ()
    for p in entries:
        if not re.match(r"dax\d+\.\d+$", p.name):
            continue
        driver = r.link_name(p / "driver")
        mode = {"kmem": "system-ram", "device_dax": "devdax"}.get(driver, driver)
        source, region = _dax_source(p)
        align = r.num(p / "align")
        if align is None:
            align = r.num(p.resolve().parent / "dax_region" / "align")
        out.append(DaxDevice(
            name=p.name, mode=mode, driver=driver, size_bytes=r.num(p / "size"), align=align,
            target_node=_node_id(r.num(p / "target_node")),
            numa_node=_node_id(r.num(p / "numa_node")),
            resource=r.num(p / "resource", base=0), source=source, region=region))
    return tuple(out)


def _dax_source(p: Path) -> tuple[str | None, str | None]:
    """Where a dax device's memory comes from, by its place in the device tree:
    .../ndbus0/region0/dax0.0/dax0.0 (nvdimm), .../root0/decoder0.0/region0/dax_region0/dax0.0
    (CXL), .../hmem.0/dax0.0 (EFI specific-purpose memory)."""
    try:
        parts = p.resolve().parts
    except OSError:
        return None, None
    if any(x.startswith("ndbus") for x in parts):
        region = next((x for x in reversed(parts) if re.match(r"region\d+$", x)), None)
        return "nvdimm", region
    for i, x in enumerate(parts):
        if re.match(r"dax_region\d+$", x) and i and re.match(r"region\d+$", parts[i - 1]):
            return "cxl", parts[i - 1]
    if any(re.match(r"hmem\.?\d*$", x) for x in parts):
        return "hmem", None
    return None, None


def _node_id(v: int | None) -> int | None:
    return None if v is None or v < 0 else v


def _natural(name: str):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def _cxl(r: _Reader, root: Path, dax: tuple[DaxDevice, ...]
         ) -> tuple[tuple[CXLRegion, ...], tuple[CXLMemdev, ...]]:
    d = root / CXL_DEVICES_DIR
    regions = []
    for _, p in _numbered(d, "region"):
        targets = tuple(t for _, f in _numbered(p, "target") if (t := r.text(f)))
        memdevs = tuple(m for t in targets if (m := _decoder_memdev(r, d / t)))
        mine = [x for x in dax if x.source == "cxl" and x.region == p.name]
        nodes = {x.target_node for x in mine if x.target_node is not None}
        commit = r.num(p / "commit")
        regions.append(CXLRegion(
            name=p.name, mode=r.text(p / "mode"), size_bytes=r.num(p / "size", base=0),
            resource=r.num(p / "resource", base=0),
            interleave_ways=r.num(p / "interleave_ways"),
            interleave_granularity=r.num(p / "interleave_granularity"),
            committed=None if commit is None else bool(commit),
            targets=targets, memdevs=memdevs, dax_devices=tuple(x.name for x in mine),
            target_node=min(nodes) if nodes else None, access=_access(r, p)))
    memdevs = []
    for _, p in _numbered(d, "mem"):
        serial = r.text(p / "serial")
        try:
            host = p.resolve().parent.name
        except OSError:
            host = None
        memdevs.append(CXLMemdev(
            name=p.name, ram_bytes=r.num(p / "ram" / "size", base=0),
            pmem_bytes=r.num(p / "pmem" / "size", base=0), serial=serial,
            numa_node=_node_id(r.num(p / "numa_node")),
            firmware_version=r.text(p / "firmware_version"), host=host,
            regions=tuple(x.name for x in regions if p.name in x.memdevs)))
    return tuple(regions), tuple(memdevs)


def _decoder_memdev(r: _Reader, decoder: Path) -> str | None:
    """An endpoint decoder (decoderX.Y under endpointX) -> the memdev behind endpointX/uport."""
    try:
        ep = decoder.resolve().parent
    except OSError:
        return None
    if not ep.name.startswith("endpoint"):
        return None
    name = r.link_name(ep / "uport")
    return name if name and name.startswith("mem") else None


# ---------------------------------------------------------------- classification


def _fmt_ns(v: int) -> str:
    return f"{v} ns"


def _fmt_bw(v: int) -> str:
    return f"{v} MB/s"


def _classify(nid: int, raw: dict, nodes: dict[int, dict], tier_of: dict[int, int],
              dax: tuple[DaxDevice, ...], regions: dict[str, CXLRegion]
              ) -> tuple[str, tuple[str, ...]]:
    ev: list[str] = []
    cpus = raw["cpus"]
    if not raw["has_memory"]:
        ev.append("no memory (" + ("MemTotal 0" if raw["total"] == 0
                                   else "not in has_memory") + ")")
    if cpus:
        ev.append(f"has CPUs {format_cpulist(cpus)}")
    elif cpus is None:
        ev.append("CPU list unreadable")
    else:
        ev.append("no CPUs")

    pmem_ev, cxl_ev, hmem_ev = [], [], []
    for x in dax:
        # Only memory onlined by kmem belongs to the node; a devdax device merely names the
        # node its memory would join (often one that is not even online).
        if x.target_node != nid or x.mode != "system-ram":
            continue
        how = f"{x.name}, {x.mode}"
        if x.source == "nvdimm":
            pmem_ev.append(f"target node of nvdimm {x.region or 'region'} ({how})")
        elif x.source == "cxl":
            reg = regions.get(x.region or "")
            if reg is not None and reg.mode == "pmem":
                pmem_ev.append(f"target node of CXL pmem {x.region} ({how})")
            else:
                cxl_ev.append(f"target node of CXL {x.region} ({how})")
        elif x.source == "hmem":
            hmem_ev.append(f"target node of {x.name} (EFI specific-purpose memory, hmem)")
    ev += pmem_ev + cxl_ev + hmem_ev

    ref = _dram_reference(nid, raw, nodes)
    lower_tier = None
    t, rt = tier_of.get(nid), tier_of.get(ref) if ref is not None else None
    if t is not None and rt is not None and ref != nid:
        lower_tier = t > rt
        rel = "below" if t > rt else "above"
        ev.append(f"memory tier {t} {rel} DRAM tier {rt}" if t != rt
                  else f"memory tier {t}, same as DRAM")
    elif t is not None:
        ev.append(f"memory tier {t}")

    bw_ratio = lat_ratio = None
    mine = raw["hmat"]
    other = nodes[ref]["hmat"] if ref is not None and ref != nid else None
    if mine is not None and other is not None:
        if mine.read_latency_ns and other.read_latency_ns:
            lat_ratio = mine.read_latency_ns / other.read_latency_ns
            ev.append(f"HMAT read latency {_fmt_ns(mine.read_latency_ns)} vs "
                      f"{_fmt_ns(other.read_latency_ns)} on node {ref}")
        if mine.read_bandwidth_mbps and other.read_bandwidth_mbps:
            bw_ratio = mine.read_bandwidth_mbps / other.read_bandwidth_mbps
            ev.append(f"HMAT read bandwidth {_fmt_bw(mine.read_bandwidth_mbps)} vs "
                      f"{_fmt_bw(other.read_bandwidth_mbps)} on node {ref}")
    elif mine is not None and cpus:
        ev.append(f"HMAT read latency {_fmt_ns(mine.read_latency_ns)}, bandwidth "
                  f"{_fmt_bw(mine.read_bandwidth_mbps)}" if mine.read_latency_ns
                  and mine.read_bandwidth_mbps else "HMAT figures incomplete")
    elif mine is not None:
        ev.append("HMAT figures but no DRAM node with HMAT to compare with")

    if pmem_ev:
        return "pmem", tuple(ev)
    if cxl_ev:
        return "cxl", tuple(ev)
    if cpus:
        return "dram", tuple(ev)
    if (bw_ratio is not None and lat_ratio is not None
            and bw_ratio >= HBM_MIN_BANDWIDTH_RATIO and lat_ratio <= HBM_MAX_LATENCY_RATIO):
        ev.append(f"HBM: {bw_ratio:.1f}x the DRAM read bandwidth at {lat_ratio:.2f}x "
                  "its latency")
        return "hbm", tuple(ev)
    slow = lat_ratio is not None and lat_ratio >= SLOW_MIN_LATENCY_RATIO
    if lower_tier and (slow or hmem_ev):
        ev.append("CXL: CPU-less, in a lower memory tier and "
                  + ("slower than DRAM per HMAT" if slow else "soft-reserved (hmem) memory"))
        return "cxl", tuple(ev)
    if slow and lower_tier is None:
        ev.append("CXL: CPU-less and slower than DRAM per HMAT (no memory tiers to confirm)")
        return "cxl", tuple(ev)
    if cpus is not None:
        ev.append("no CXL, pmem or HBM evidence: CPU-less memory treated as DRAM "
                  "(a CPU-less node is not assumed to be HBM)")
    return "dram", tuple(ev)


def _dram_reference(nid: int, raw: dict, nodes: dict[int, dict]) -> int | None:
    """The node this one is judged against: itself when it has CPUs, else its HMAT
    initiator with CPUs, else the nearest node with CPUs by SLIT distance."""
    if raw["cpus"]:
        return nid
    with_cpus = [n for n, v in nodes.items() if v["cpus"]]
    if not with_cpus:
        return None
    hm = raw["hmat"]
    if hm is not None:
        for i in hm.initiators:
            if i in with_cpus:
                return i
    dist = dict(raw["distances"])
    return min(with_cpus, key=lambda n: (dist.get(n, 1 << 30), n))


# ---------------------------------------------------------------- discover


def discover(root: Path | str | None = None) -> Topology:
    """Read the memory topology under `root` (default: CXLKIT_SYSFS_ROOT, else /sys).
    Raises FileNotFoundError / NotADirectoryError naming root when it is not a directory."""
    base = _sysfs(Path(root) if root is not None else None)
    if not base.exists():
        raise FileNotFoundError(errno.ENOENT, "sysfs root does not exist", str(base))
    if not base.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "sysfs root is not a directory", str(base))
    r = _Reader(base)
    nd = base / NODE_DIR
    node_dirs = _numbered(nd, "node")
    if not nd.is_dir():
        r.warnings.append(f"{NODE_DIR}: missing (kernel without NUMA support?): no nodes")

    online = r.cpulist(nd / "online")
    order = list(online) if online is not None else [i for i, _ in node_dirs]
    has_memory = r.cpulist(nd / "has_memory")
    tiers = _memory_tiers(r, base)
    tier_of = {n: t.id for t in tiers for n in t.nodes}
    wi_ok, wi_auto, wi_auto_file, wi_weights = _wi(r, base)
    dax = _dax_devices(r, base)
    regions, memdevs = _cxl(r, base, dax)

    raws: dict[int, dict] = {}
    for nid, p in node_dirs:
        total, free = _meminfo(r, p / "meminfo")
        access = _access(r, p)
        mem = (nid in has_memory) if has_memory is not None else bool(total)
        raws[nid] = {
            "cpus": r.cpulist(p / "cpulist"), "total": total, "free": free,
            "has_memory": mem and total != 0,
            "distances": _distances(r, p / "distance", order), "access": access,
            "hmat": next((a for a in access if a.access == 0), None),
            "hugepages": _hugepages(r, p)}
    by_name = {x.name: x for x in regions}
    nodes = []
    for nid, raw in raws.items():
        kind, ev = _classify(nid, raw, raws, tier_of, dax, by_name)
        nodes.append(Node(
            id=nid, kind=kind, evidence=ev, has_memory=raw["has_memory"], cpus=raw["cpus"],
            mem_total_bytes=raw["total"], mem_free_bytes=raw["free"],
            distances=raw["distances"], access=raw["access"], memory_tier=tier_of.get(nid),
            wi_weight=wi_weights.get(nid), hugepages=raw["hugepages"]))
    return Topology(
        root=str(base), nodes=tuple(nodes), memory_tiers=tiers, cxl_regions=regions,
        cxl_memdevs=memdevs, dax_devices=dax, weighted_interleave=wi_ok, wi_auto=wi_auto,
        wi_auto_file=wi_auto_file, warnings=tuple(r.warnings))
