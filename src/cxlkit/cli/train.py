"""`cxlkit plan train`: the footprint of CPU-offloaded training per data class and its
placement on the tiers; and run_demo, the training section of `cxlkit demo`."""
from __future__ import annotations

import json
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from ..train import plan as TP
from ..units import parse_count
from .main import fail, one_line
from .plan import plan_app
from .pool import COHERENCE_OPT, HOST_OPT


def _gib(n: int, unit: int = 1 << 30) -> str:
    return f"{n / unit:,.1f}"


def _unit(total: int) -> tuple[int, str]:
    return (1 << 30, "GiB") if total >= 1 << 30 else (1 << 20, "MiB")


def plan_table(p: TP.TrainPlan, title: str) -> Table:
    """Classes x tiers, with each class's policy and shortfall, and the nodes' use."""
    u, uname = _unit(p.footprint.total)
    t = Table(title=f"{title} ({uname})")
    t.add_column("class", no_wrap=True)
    t.add_column(uname, justify="right")
    for tier in p.tiers:
        t.add_column(f"N{tier.node} {tier.kind}", justify="right")
    t.add_column("short", justify="right")
    t.add_column("policy", overflow="fold")
    for row in p.rows():
        c = p.classes[row["class"]]
        t.add_row(row["class"], _gib(c.nbytes, u),
                  *[_gib(c.nodes[tier.node], u) if tier.node in c.nodes else "-"
                    for tier in p.tiers],
                  f"[red]{_gib(c.shortfall, u)}[/red]" if c.shortfall else "-",
                  row["policy"] or "-")
    use = p.node_use()
    t.add_row("[bold]used / can use[/bold]", _gib(p.footprint.total, u),
              *[f"{_gib(use[tier.node], u)} / {_gib(tier.capacity_bytes, u)}"
                for tier in p.tiers],
              f"[red]{_gib(p.shortfall, u)}[/red]" if p.shortfall else "-", "")
    return t


def verdict(p: TP.TrainPlan) -> str:
    if p.fits:
        u, uname = _unit(p.footprint.total)
        return f"[green]fits[/green] ({p.mode}): {_gib(p.footprint.total, u)} {uname} placed"
    return (f"[red]does not fit[/red] ({p.mode}): short by {_gib(p.shortfall)} GiB of "
            f"{_gib(p.footprint.total)} GiB; add memory (CXL) or spill optimizer state to "
            "storage")


def _tiers(specs: Optional[list[str]], reserve: float, measure: bool) -> list[TP.Tier]:
    if specs:
        return [TP.parse_tier(s) for s in specs]
    return TP.machine_tiers(reserve=reserve, measure=measure)


@plan_app.command("train")
def train_cmd(
    params: str = typer.Option(..., "--params", help="parameters, e.g. 7e9 or 7B"),
    layers: int = typer.Option(..., "--layers", help="transformer layers (L)"),
    hidden: int = typer.Option(..., "--hidden", help="hidden size (H)"),
    context: str = typer.Option(..., "--context",
                                help="tokens per sequence (C), e.g. 32k (= 32768)"),
    batch: int = typer.Option(1, "--batch", help="micro-batch per GPU (B)"),
    gpus: int = typer.Option(1, "--gpus", help="GPUs (Ng)"),
    mode: str = typer.Option("tiered", "--mode",
                             help="tiered, dram_only, interleave_all, or all (compare them)"),
    tier: Optional[list[str]] = typer.Option(
        None, "--tier", help="KIND:NODE:SIZE[:GBPS], repeatable (default: this machine), "
        "e.g. --tier dram:0:512G:300 --tier cxl:2:256G:64"),
    reserve: float = typer.Option(0.1, "--reserve",
                                  help="fraction of each node's free memory left alone"),
    measure: bool = typer.Option(False, "--measure",
                                 help="measure each node's copy bandwidth now"),
    fp32_grads: bool = typer.Option(True, "--fp32-grads/--no-fp32-grads",
                                    help="count an fp32 grad copy (4P); cxlkit's kernel "
                                    "upcasts bf16 grads in registers and needs none"),
    as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
    spill: Optional[str] = typer.Option(
        None, "--spill", help="optimizer subgroups over these paths (comma-separated: DIR, "
        "mem[:NODE], pool:NAME, each measured now, or SPEC=GBPS; a :cap=SIZE suffix bounds a "
        "path's bytes): subgroups per path and the update time per step"),
    host_cache: str = typer.Option("8G", "--host-cache",
                                   help="host memory for the subgroup cache (with --spill)"),
    sub_group_size: int = typer.Option(100_000_000, "--sub-group-size",
                                       help="params per subgroup (with --spill)"),
    host_id: Optional[str] = HOST_OPT,      # pool:NAME spill paths
    coherence: Optional[str] = COHERENCE_OPT,
) -> None:
    """Footprint of CPU-offloaded training per class, and where each class goes."""
    con = Console()
    try:
        fp = TP.Footprint(parse_count(params, "params"), layers, hidden,
                          parse_count(context, "context", tokens=True), batch, gpus, fp32_grads)
        tiers = _tiers(tier, reserve, measure)
        modes = list(TP.MODES) if mode == "all" else [mode]
        plans = [TP.plan_training(fp, tiers, mode=m) for m in modes]
    except (ValueError, OSError) as e:
        fail(one_line(e))
    spilled = None
    if spill:  # ---- spill: cli/train_spill.py ----
        from .train_spill import pool_options, spill_section
        spilled = spill_section(con, fp.params, spill, host_cache, sub_group_size, as_json,
                                pool_options(host_id, coherence))
    if as_json:
        out = [p.to_dict() for p in plans]
        doc = out[0] if len(out) == 1 else out
        typer.echo(json.dumps({"plan": doc, "spill": spilled} if spill else doc, indent=1))
        return
    con.print(f"P={fp.params:,} params, L={fp.layers}, H={fp.hidden}, C={fp.context}, "
              f"B={fp.batch}, Ng={fp.gpus}: {_gib(fp.total)} GiB in total")
    for p in plans:
        con.print(plan_table(p, f"training state per class and tier, {p.mode}"))
        con.print(verdict(p))
    src = sorted({t.bandwidth_source for t in tiers})
    con.print(f"bandwidth: {', '.join(src)} (stripe weights follow it; unknown = equal)")


def run_demo(console: Console) -> None:
    """Train a tiny bf16 transformer a few steps with TieredAdamW (state placed by a plan for
    this model on this machine) and activation offload; print the plan, audits, step times."""
    from ..integrations.demo import train_demo

    def show_plan(plan: TP.TrainPlan, nparams: int) -> None:
        console.print(plan_table(plan, f"tiny model: {nparams:,} bf16 params, state per class "
                                       "on this machine"))
        console.print(verdict(plan))

    d = train_demo(show_plan)
    t = Table(title="TieredAdamW + activation offload, bf16 model, fp32 state")
    for c in ("step", "loss", "fwd+bwd ms", "optimizer ms", "offloaded MiB"):
        t.add_column(c, justify="right")
    for r in d["steps"]:
        t.add_row(str(r["step"]), f"{r['loss']:.4f}", f"{r['fwd_bwd_ms']:.1f}",
                  f"{r['optimizer_ms']:.2f}", f"{r['offloaded_mib']:.2f}")
    console.print(t)
    a = Table(title="where the training state is (intended vs actual pages)")
    for c in ("class", "policy", "pages per node", "ok"):
        a.add_column(c)
    for au in d["audits"]:
        a.add_row(au["class"], au["policy"],
                  ", ".join(f"N{n}={c}" for n, c in sorted(au["pages"].items())),
                  "[green]yes[/green]" if au["ok"] else "[red]no: " + "; ".join(au["problems"]))
    console.print(a)
    console.print(f"kernel: {d['simd']}; bf16 grads upcast in registers, bf16 params written "
                  "back in the same pass")
