"""`cxlkit demo`: the main job on whatever this machine has (the embedded default without CXL):
tiers, every placement policy with its audit, then each workload's own demo section."""
from __future__ import annotations

import importlib
import time
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from .. import placement as P
from .. import topology
from .interrupt import shielded_children
from .main import app, fail

# Workload sections, in order: (title, module, function taking the console).
SECTIONS: tuple[tuple[str, str, str], ...] = (
    ("memory: a quick measurement per node and the weights it gives", "cxlkit.cli.bench",
     "run_demo"),
    ("the shared pool: one object, two processes, fsck", "cxlkit.cli.pool", "run_demo"),
    ("training offload: TieredAdamW + activation offload", "cxlkit.cli.train", "run_demo"),
    ("KV cache: a prefix stored by one process, hit by another", "cxlkit.cli.kv", "run_demo"),
)


def demo_policies(nbytes: int) -> list[P.Policy]:
    """Every policy this machine can run, over its memory nodes."""
    nodes = topology.memory_nodes()
    pols = [P.bind(n) for n in nodes] + [P.preferred(nodes[-1]), P.interleave(nodes)]
    if topology.weighted_interleave_weights() is not None:
        pols.append(P.weighted(nodes))
    pols.append(P.stripe(nodes, [2] + [1] * (len(nodes) - 1)))
    return pols


def placement_section(con: Console, nbytes: int = 64 << 20) -> bool:
    """Allocate under each policy and compare intended with actual pages per node."""
    t = Table(title=f"placement of {nbytes >> 20} MiB under each policy (pages per node)")
    for col in ("policy", "intended", "actual", "not present", "ms", "ok"):
        t.add_column(col)
    all_ok = True
    for pol in demo_policies(nbytes):
        t0 = time.perf_counter()
        with P.alloc(nbytes, pol) as buf:
            ms = (time.perf_counter() - t0) * 1e3
            a = buf.audit()
        intended = ", ".join(f"N{n}={lo}" if lo == hi else f"N{n}={lo}..{hi}"
                             for n, (lo, hi) in sorted(a.intended.items()))
        actual = ", ".join(f"N{n}={c}" for n, c in sorted(a.actual.pages.items()))
        all_ok &= a.ok
        t.add_row(str(pol), intended, actual, str(a.actual.not_present), f"{ms:.1f}",
                  "[green]yes[/green]" if a.ok else "[red]no: " + "; ".join(a.problems) + "[/red]")
    con.print(t)
    return all_ok


def _sections(only: Optional[str]) -> list[tuple[str, str, str]]:
    if only is None:
        return list(SECTIONS)
    names = {s[1].rsplit(".", 1)[1]: s for s in SECTIONS}
    want = [w.strip() for w in only.split(",") if w.strip()]
    bad = [w for w in want if w not in names]
    if bad or not want:
        fail(f"demo section {','.join(bad) or only!r} (--only): no such section; choose from "
             f"{', '.join(names)}")
    return [names[w] for w in want]


@app.command()
def demo(only: Optional[str] = typer.Option(
        None, "--only", help="run only these workload sections, e.g. pool,kv (bench, pool, "
        "train, kv); tiers and placement are skipped too")) -> None:
    """Run the main job here: tiers, placement with audit, and each workload's demo."""
    sections = _sections(only)
    con = Console()
    con.rule("[bold]cxlkit demo")
    ok = True
    with shielded_children():  # Ctrl-C: one line, exit 130, the children ended
        if only is None:
            tiers = importlib.import_module("cxlkit.cli.tiers")
            tiers.print_tiers(con, topology.discover())
            ok = placement_section(con)
        for title, module, func in sections:
            con.rule(f"[bold]{title}")
            getattr(importlib.import_module(module), func)(con)
    if not ok:
        raise typer.Exit(1)
