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
from pathlib import Path

from .classify import classify
from .facts import (CXL_DEVICES_DIR, DAX_DEVICES_DIR, MEMORY_TIERING_DIR, NODE_DIR,
                    WEIGHTED_INTERLEAVE_AUTO_FILES, WEIGHTED_INTERLEAVE_DIR,
                    parse_cpulist, sysfs_root)
from .model import (AccessClass, CXLMemdev, CXLRegion, DaxDevice, HugePages, MemoryTier, Node,
                    Topology)


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




def discover(root: Path | str | None = None) -> Topology:
    """Read the memory topology under `root` (default: CXLKIT_SYSFS_ROOT, else /sys).
    Raises FileNotFoundError / NotADirectoryError naming root when it is not a directory."""
    base = sysfs_root(Path(root) if root is not None else None)
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
        kind, ev = classify(nid, raw, raws, tier_of, dax, by_name)
        nodes.append(Node(
            id=nid, kind=kind, evidence=ev, has_memory=raw["has_memory"], cpus=raw["cpus"],
            mem_total_bytes=raw["total"], mem_free_bytes=raw["free"],
            distances=raw["distances"], access=raw["access"], memory_tier=tier_of.get(nid),
            wi_weight=wi_weights.get(nid), hugepages=raw["hugepages"]))
    return Topology(
        root=str(base), nodes=tuple(nodes), memory_tiers=tiers, cxl_regions=regions,
        cxl_memdevs=memdevs, dax_devices=dax, weighted_interleave=wi_ok, wi_auto=wi_auto,
        wi_auto_file=wi_auto_file, warnings=tuple(r.warnings))
