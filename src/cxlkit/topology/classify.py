"""Classifying a NUMA node as dram / cxl / hbm / pmem, with the evidence for the verdict:
onlined dax memory first, then CPUs, then the kernel's memory tiers and HMAT figures measured
against the node's DRAM reference."""
from __future__ import annotations

from .facts import format_cpulist
from .model import CXLRegion, DaxDevice

# HMAT thresholds against the node's DRAM reference (its initiator): HBM needs much more
# bandwidth at a similar latency; CXL-like memory is markedly slower to reach.
HBM_MIN_BANDWIDTH_RATIO = 1.5
HBM_MAX_LATENCY_RATIO = 1.5
SLOW_MIN_LATENCY_RATIO = 1.3


def _fmt_ns(v: int) -> str:
    return f"{v} ns"


def _fmt_bw(v: int) -> str:
    return f"{v} MB/s"


def classify(nid: int, raw: dict, nodes: dict[int, dict], tier_of: dict[int, int],
             dax: tuple[DaxDevice, ...], regions: dict[str, CXLRegion]
             ) -> tuple[str, tuple[str, ...]]:
    """(kind, evidence) of node `nid`: `raw` is its record from the reader, `nodes` every
    node's, `tier_of` node -> memory tier, `dax` and `regions` the devices that may back it."""
    ev = _memory_and_cpus(raw)
    pmem_ev, cxl_ev, hmem_ev = _dax_evidence(nid, dax, regions)
    ev += pmem_ev + cxl_ev + hmem_ev
    ref = _dram_reference(nid, raw, nodes)
    lower_tier = _tier_evidence(nid, ref, tier_of, ev)
    bw_ratio, lat_ratio = _hmat_evidence(ref, raw, nodes, nid, ev)
    if pmem_ev:
        return "pmem", tuple(ev)
    if cxl_ev:
        return "cxl", tuple(ev)
    if raw["cpus"]:
        return "dram", tuple(ev)
    return _cpuless_kind(raw["cpus"], bw_ratio, lat_ratio, lower_tier, bool(hmem_ev), ev), tuple(ev)


def _memory_and_cpus(raw: dict) -> list[str]:
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
    return ev


def _dax_evidence(nid: int, dax: tuple[DaxDevice, ...], regions: dict[str, CXLRegion]
                  ) -> tuple[list[str], list[str], list[str]]:
    """(pmem, cxl, hmem) evidence from the dax devices whose memory kmem onlined on `nid`."""
    pmem_ev: list[str] = []
    cxl_ev: list[str] = []
    hmem_ev: list[str] = []
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
    return pmem_ev, cxl_ev, hmem_ev


def _tier_evidence(nid: int, ref: int | None, tier_of: dict[int, int], ev: list[str]
                   ) -> bool | None:
    """Whether `nid` sits in a lower memory tier than its DRAM reference (None: unknown);
    appends what the tiers say to `ev`."""
    t, rt = tier_of.get(nid), tier_of.get(ref) if ref is not None else None
    if t is not None and rt is not None and ref != nid:
        rel = "below" if t > rt else "above"
        ev.append(f"memory tier {t} {rel} DRAM tier {rt}" if t != rt
                  else f"memory tier {t}, same as DRAM")
        return t > rt
    if t is not None:
        ev.append(f"memory tier {t}")
    return None


def _hmat_evidence(ref: int | None, raw: dict, nodes: dict[int, dict], nid: int, ev: list[str]
                   ) -> tuple[float | None, float | None]:
    """(read bandwidth ratio, read latency ratio) of the node to its DRAM reference per HMAT,
    each None when a figure is missing; appends the figures to `ev`."""
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
    elif mine is not None and raw["cpus"]:
        ev.append(f"HMAT read latency {_fmt_ns(mine.read_latency_ns)}, bandwidth "
                  f"{_fmt_bw(mine.read_bandwidth_mbps)}" if mine.read_latency_ns
                  and mine.read_bandwidth_mbps else "HMAT figures incomplete")
    elif mine is not None:
        ev.append("HMAT figures but no DRAM node with HMAT to compare with")
    return bw_ratio, lat_ratio


def _cpuless_kind(cpus: tuple[int, ...] | None, bw_ratio: float | None,
                  lat_ratio: float | None, lower_tier: bool | None, hmem: bool,
                  ev: list[str]) -> str:
    """The kind of a CPU-less node no dax device claims: HBM when HMAT says much faster at a
    similar latency, CXL when slower and (when tiers exist) in a lower tier, else DRAM."""
    if (bw_ratio is not None and lat_ratio is not None
            and bw_ratio >= HBM_MIN_BANDWIDTH_RATIO and lat_ratio <= HBM_MAX_LATENCY_RATIO):
        ev.append(f"HBM: {bw_ratio:.1f}x the DRAM read bandwidth at {lat_ratio:.2f}x "
                  "its latency")
        return "hbm"
    slow = lat_ratio is not None and lat_ratio >= SLOW_MIN_LATENCY_RATIO
    if lower_tier and (slow or hmem):
        ev.append("CXL: CPU-less, in a lower memory tier and "
                  + ("slower than DRAM per HMAT" if slow else "soft-reserved (hmem) memory"))
        return "cxl"
    if slow and lower_tier is None:
        ev.append("CXL: CPU-less and slower than DRAM per HMAT (no memory tiers to confirm)")
        return "cxl"
    if cpus is not None:
        ev.append("no CXL, pmem or HBM evidence: CPU-less memory treated as DRAM "
                  "(a CPU-less node is not assumed to be HBM)")
    return "dram"


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

