"""`cxlkit tiers`: the memory tiers of this machine (or of a sysfs snapshot) as rich tables,
or as JSON with stable keys (`--json`). `print_tiers` is reused by `cxlkit demo`."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich import box
from rich.table import Table

from .. import topology as T
from .main import app, fail, one_line

_KIND_STYLE = {"dram": "green", "cxl": "cyan", "hbm": "magenta", "pmem": "yellow"}


def _size(n: int | None) -> str:
    if n is None:
        return "-"
    for unit, shift in (("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.1f} {unit}"
    return f"{n} B"


def _opt(v) -> str:
    return "-" if v is None else str(v)


def _perf(lat: int | None, bw: int | None) -> str:
    if lat is None and bw is None:
        return "-"
    gbps = "-" if bw is None else f"{bw / 1000:.0f}" if bw >= 10_000 else f"{bw / 1000:.1f}"
    return f"{_opt(lat)} ns\n{gbps} GB/s"


def _perf_rw(a) -> str:
    """HMAT read/write as two lines: 'R/W ns' and 'R/W GB/s' (one column fits 80)."""
    r = _perf(a.read_latency_ns, a.read_bandwidth_mbps).split("\n")
    w = _perf(a.write_latency_ns, a.write_bandwidth_mbps).split("\n")
    if r == ["-"] or w == ["-"]:
        return "\n".join(r if w == ["-"] else w)
    return "\n".join(f"{x.split()[0]}/{y}" for x, y in zip(r, w))


def _hugepages(n: T.Node) -> str:
    parts = [f"{_size(h.page_kb << 10).replace('.0 ', '')}: {_opt(h.free)}/{_opt(h.total)} free"
             for h in n.hugepages if h.total]
    return "\n".join(parts) or "-"


# Below this console width the evidence goes under the table, one line per node, instead of
# being folded into a narrow column.
EVIDENCE_IN_TABLE_MIN_WIDTH = 140


def node_table(topo: T.Topology, *, evidence: bool = True, huge_pages: bool = True) -> Table:
    # Columns with nothing to say on this machine (no HMAT, no huge pages, no weighted
    # interleave) are left out.
    hmat = any(n.hmat for n in topo.nodes)
    huge = huge_pages and any(h.total for n in topo.nodes for h in n.hugepages)
    cols: list[tuple[str, dict]] = [("node", {"no_wrap": True}), ("kind", {"no_wrap": True}),
                                    ("CPUs", {"min_width": 5}), ("total", {"no_wrap": True}),
                                    ("free", {"no_wrap": True}), ("tier", {"no_wrap": True})]
    if hmat:
        cols += [("HMAT read/write", {"no_wrap": True})]
    if topo.weighted_interleave:
        cols.append(("WI", {"no_wrap": True}))
    if huge:
        cols.append(("huge pages", {"min_width": 10}))
    if evidence:
        cols.append(("evidence", {}))
    t = Table(title=f"memory tiers (sysfs: {topo.root})", show_lines=True,
              box=box.SIMPLE_HEAD)
    for name, kw in cols:
        t.add_column(name, overflow="fold", **kw)
    for n in topo.nodes:
        style = _KIND_STYLE.get(n.kind, "")
        kind = f"[{style}]{n.kind}[/{style}]" if style else n.kind
        if not n.has_memory:
            kind += "\n[red](no memory)[/red]"
        a = n.hmat
        row = [str(n.id), kind, "?" if n.cpus is None else (T.format_cpulist(n.cpus) or "none"),
               _size(n.mem_total_bytes), _size(n.mem_free_bytes), _opt(n.memory_tier)]
        if hmat:
            row.append(_perf_rw(a) if a else "-")
        if topo.weighted_interleave:
            row.append(_opt(n.wi_weight))
        if huge:
            row.append(_hugepages(n))
        if evidence:
            row.append("\n".join(n.evidence))
        t.add_row(*row)
    return t


def region_table(topo: T.Topology) -> Table:
    t = Table(title="CXL regions (ways x granularity in bytes; read: HMAT access class 0; "
              "ok: committed)", box=box.SIMPLE_HEAD)
    for col in ("region", "mode", "size", "ways", "memdevs", "dax", "node", "read", "ok"):
        t.add_column(col, no_wrap=col in ("size", "ways", "node", "read"), overflow="fold",
                     min_width=len(col))  # a header is never cut
    for r in topo.cxl_regions:
        a = next((x for x in r.access if x.access == 0), None)
        t.add_row(r.name, _opt(r.mode), _size(r.size_bytes),
                  f"{_opt(r.interleave_ways)} x {_opt(r.interleave_granularity)}",
                  ",".join(r.memdevs) or "-", ",".join(r.dax_devices) or "-",
                  _opt(r.target_node),
                  _perf(a.read_latency_ns, a.read_bandwidth_mbps) if a else "-",
                  {True: "yes", False: "no", None: "-"}[r.committed])
    return t


def memdev_table(topo: T.Topology) -> Table:
    t = Table(title="CXL memory devices", box=box.SIMPLE_HEAD)
    for col in ("memdev", "ram", "pmem", "serial", "PCI device", "node", "regions"):
        t.add_column(col, overflow="fold", no_wrap=col in ("ram", "pmem", "node"))
    for m in topo.cxl_memdevs:
        t.add_row(m.name, _size(m.ram_bytes), _size(m.pmem_bytes), _opt(m.serial),
                  _opt(m.host), _opt(m.numa_node), ",".join(m.regions) or "-")
    return t


def dax_table(topo: T.Topology) -> Table:
    t = Table(title="dax devices (node: the node it is onlined as)", box=box.SIMPLE_HEAD)
    for col in ("device", "mode", "size", "align", "node", "source", "region"):
        t.add_column(col, no_wrap=col not in ("device", "region"), overflow="fold")
    for d in topo.dax_devices:
        t.add_row(d.path, d.mode or "[red]no driver[/red]", _size(d.size_bytes),
                  _size(d.align), _opt(d.target_node), _opt(d.source), _opt(d.region))
    return t


def wi_line(topo: T.Topology) -> str:
    if not topo.weighted_interleave:
        return ("weighted interleave: not in this kernel (Linux 6.9+); "
                "use a stripe policy for software interleave")
    w = ",".join(f"{n}:{v}" for n, v in (topo.wi_weights or {}).items()) or "none"
    if topo.wi_auto is None:
        auto = ("auto mode: no auto file (before Linux 6.16)" if topo.wi_auto_file is None
                else f"auto mode: unreadable ({topo.wi_auto_file})")
    else:
        auto = f"auto mode {'on' if topo.wi_auto else 'off'} ({topo.wi_auto_file})"
    return f"weighted interleave: kernel weights {w}; {auto}"


def print_tiers(con: Console, topo: T.Topology) -> None:
    wide = con.size.width >= EVIDENCE_IN_TABLE_MIN_WIDTH
    con.print(node_table(topo, evidence=wide, huge_pages=wide))
    if not wide:  # under the table, one line per node: columns would be cut at 80
        for n in topo.nodes:
            con.print(f"node {n.id} is {n.kind}: " + "; ".join(n.evidence), highlight=False)
        for n in topo.nodes:
            if any(h.total for h in n.hugepages):
                con.print(f"node {n.id} huge pages: " + _hugepages(n).replace("\n", ", "),
                          highlight=False)
    if topo.cxl_regions:
        con.print(region_table(topo))
    if topo.cxl_memdevs:
        con.print(memdev_table(topo))
    if topo.dax_devices:
        con.print(dax_table(topo))
    if not (topo.cxl_regions or topo.cxl_memdevs or topo.dax_devices):
        con.print("no CXL regions, CXL memdevs or dax devices")
    con.print(wi_line(topo))
    for w in topo.warnings:
        con.print(f"[yellow]warning: {w}[/yellow]")


@app.command()
def tiers(
    as_json: bool = typer.Option(False, "--json", help="Print JSON (stable keys) instead."),
    sysfs_root: Optional[Path] = typer.Option(
        None, "--sysfs-root", metavar="PATH",
        help="Read this sysfs tree instead of CXLKIT_SYSFS_ROOT (default /sys)."),
) -> None:
    """Memory nodes classified as dram/cxl/hbm/pmem with the evidence, plus CXL and dax devices."""
    try:
        topo = T.discover(sysfs_root)
    except (FileNotFoundError, NotADirectoryError) as e:
        fail(f"--sysfs-root {one_line(e)}; name the root of a sysfs tree (default /sys)")
    # ---- the kernel's own tiering (NUMA-balancing promotion, demotion) ----
    from ..placement import tiering as TG

    try:
        state, counters = TG.tiering_state(sysfs_root=sysfs_root), TG.vmstat_counters()
    except (ValueError, OSError) as e:
        state, counters = None, {"error": str(e)}
    if as_json:
        typer.echo(json.dumps({**topo.to_dict(), "kernel_tiering": {
            **(state.to_dict() if state else {}), "vmstat": counters}}, indent=2))
        return
    print_tiers(Console(), topo)
    Console().print("kernel tiering: " + (state.describe() if state else counters["error"])
                    + "; since boot: " + (", ".join(f"{k} {v}" for k, v in counters.items()
                                                    if k.startswith(("pgpromote_success",
                                                                     "pgdemote_")))
                                          or "no promotion/demotion counters"))
