"""`cxlkit audit PID`: where a running process's pages are, per node and mapping."""
from __future__ import annotations

import json
from typing import NoReturn, Optional

import typer
from rich.console import Console
from rich.table import Table

from ..placement import audit as _audit
from .main import app, fail, one_line


def _fail(msg: str, code: int = 2) -> NoReturn:
    fail(msg, code)


def _mib(nbytes: int) -> str:
    return f"{nbytes / (1 << 20):,.1f}"


@app.command()
def audit(
    pid: int = typer.Argument(..., help="process id"),
    as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
    all_mappings: bool = typer.Option(False, "--all", help="also mappings with no pages"),
    interval: Optional[float] = typer.Option(
        None, "--interval", help="also watch the kernel's tiering for this many seconds: "
        "promotions/demotions (vmstat) and this process's pages moving between tiers"),
) -> None:
    """Where a process's pages are, per mapping and in total (/proc/PID/numa_maps); for a
    process of `cxlkit run --stripe`, the achieved ratio against the requested one; the
    kernel's tiering switches, and with --interval what it moved."""
    from .stripe import audit_extras, print_audit_extras  # stripes and kernel tiering

    try:
        pp = _audit.audit_pid(pid)
        extras = audit_extras(pid, interval)
    except (ValueError, OSError) as e:
        _fail(one_line(e))
    totals = pp.totals()
    if as_json:
        doc = {**extras,
            "pid": pid,
            "totals_bytes": {str(n): b for n, b in totals.items()},
            "mappings": [
                {"address": f"0x{m.address:x}", "policy": m.policy, "kind": m.kind,
                 "page_size_kb": m.page_size_kb,
                 "pages": {str(n): c for n, c in sorted(m.pages.items())}}
                for m in pp.mappings if all_mappings or m.pages
            ],
        }
        typer.echo(json.dumps(doc, indent=2))
        return
    nodes = sorted({n for m in pp.mappings for n in m.pages})
    t = Table(title=f"pages per node of pid {pid} (MiB)")
    t.add_column("address")
    t.add_column("policy")
    t.add_column("mapping", overflow="fold")
    for n in nodes:
        t.add_column(f"node {n}", justify="right")
    for m in pp.mappings:
        if not (all_mappings or m.pages):
            continue
        t.add_row(f"{m.address:x}", m.policy, m.kind,
                  *[_mib(m.pages.get(n, 0) * m.page_size_kb * 1024) for n in nodes])
    t.add_section()
    t.add_row("total", "", "", *[_mib(totals.get(n, 0)) for n in nodes], style="bold")
    Console().print(t)
    print_audit_extras(Console(), extras)
