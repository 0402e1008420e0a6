"""`cxlkit train demo --spill DIR,DIR,mem`: a small Llama (transformers, random init, CPU)
trained twice from the same weights, by TieredAdamW and by TieredAdamW spilling its
optimizer subgroups over the given paths; a progress line per step and the losses compared
bit for bit. Also the spill section of `cxlkit plan train --spill`."""
from __future__ import annotations

import contextlib
import json
import os
import tempfile
from typing import NoReturn, Optional

import typer
from rich.console import Console
from rich.table import Table

from .main import app, fail, one_line
from .pool import COHERENCE_OPT, HOST_OPT, _host

train_app = typer.Typer(no_args_is_help=True, help="Training offload demos.")
app.add_typer(train_app, name="train")


def pool_options(host_id: Optional[str], coherence: Optional[str]) -> dict[str, object]:
    """How `pool:NAME` spill paths open their pool: --host-id and --coherence as `cxlkit pool`
    takes them (unset: CXLKIT_HOST_ID / CXLKIT_COHERENCE, as Pool() reads them)."""
    return {"host_id": _host(host_id), "coherence": coherence}


def _fail(msg: str) -> NoReturn:
    fail(msg)  # one line on stderr, exit 2


def _default_spill(stack: contextlib.ExitStack) -> list[str]:
    """A directory on the disk, one on tmpfs (when there is one) and a memory tier."""
    dirs = [stack.enter_context(tempfile.TemporaryDirectory(prefix="cxlkit-spill-",
                                                            dir="/var/tmp"))]
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else "/var/tmp"
    dirs.append(stack.enter_context(tempfile.TemporaryDirectory(prefix="cxlkit-spill-",
                                                                dir=shm)))
    return [*dirs, "mem"]


@train_app.command("demo")
def demo_cmd(
    spill: Optional[str] = typer.Option(
        None, "--spill", help="comma-separated paths: directories, mem or mem:NODE, pool:NAME "
        "(default: a directory on disk, one on /dev/shm, and a memory tier)"),
    steps: int = typer.Option(6, "--steps", help="training steps"),
    layers: int = typer.Option(2, "--layers", help="Llama layers"),
    hidden: int = typer.Option(128, "--hidden", help="Llama hidden size"),
    sub_group_size: int = typer.Option(60_000, "--sub-group-size",
                                       help="params per subgroup (small, so the state spills)"),
    cache: int = typer.Option(3, "--cache", help="host cache, in subgroups (>= 3)"),
    as_json: bool = typer.Option(False, "--json", help="one JSON object per step"),
    host_id: Optional[str] = HOST_OPT,
    coherence: Optional[str] = COHERENCE_OPT,
) -> None:
    """Train a small random Llama on the CPU with and without spilled optimizer state."""
    from ..integrations.spill_demo import spill_demo
    from ..train.spill.store import SubgroupStore

    con = Console()
    equal = True
    with contextlib.ExitStack() as stack:
        paths = spill.split(",") if spill else _default_spill(stack)
        try:
            store = SubgroupStore(paths, subgroup_params=sub_group_size, cache_subgroups=cache,
                                  measure_nbytes=8 << 20, split="eq1",  # every path
                                  pool_options=pool_options(host_id, coherence))
        except (ValueError, OSError) as e:
            _fail(one_line(e))

        def show_plan(nparams: int) -> None:
            if as_json:
                return
            con.print(f"Llama: {nparams:,} bf16 params, {len(store.subgroups)} subgroups of "
                      f"<= {sub_group_size:,}, host cache {cache}; paths:")
            for row in store.plan():
                con.print(f"  {row['path']} ({row['kind']}): {row['subgroups']} subgroups, "
                          f"read {row['read'] / 1e9:.2f} / write {row['write'] / 1e9:.2f} GB/s")

        for step, mt in enumerate(spill_demo(store, steps=steps, layers=layers, hidden=hidden,
                                             on_start=show_plan), 1):
            equal &= mt["equal"]
            if as_json:
                typer.echo(json.dumps(mt))
                continue
            io = ", ".join(f"{os.path.basename(p['path']) or p['path']}: "
                           f"{p['subgroups']} sg, {(p['read_bytes'] + p['write_bytes']) / 2**20:.1f} MiB"
                           for p in mt["paths"])
            same = "[green]equal[/green]" if mt["equal"] else "[red]DIFFERS[/red]"
            con.print(f"step {step}: loss {mt['loss']:.6f} (without spill "
                      f"{mt['reference_loss']:.6f}, {same}) "
                      f"fwd {mt['forward_s'] * 1e3:.0f} ms, bwd {mt['backward_s'] * 1e3:.0f} ms, "
                      f"update {mt['update_s'] * 1e3:.0f} ms (I/O wait {mt['io_wait_s'] * 1e3:.0f}: "
                      f"read {mt['read_wait_s'] * 1e3:.0f}, write {mt['write_wait_s'] * 1e3:.0f}), "
                      f"{mt['order']}, cache hits {mt['cache_hits']}/{mt['subgroups']}; {io}")
    if not as_json:
        con.print("[green]losses and params bitwise equal to TieredAdamW without spill[/green]"
                  if equal else "[red]spilled training differs from TieredAdamW[/red]")
    if not equal:
        raise typer.Exit(1)

def spill_section(con: Console, params: int, spill: str, host_cache: str,
                  sub_group_size: int, as_json: bool,
                  pools: dict[str, object] | None = None) -> dict | None:
    """`plan train --spill`: the paths learned (measured or given), subgroups per path and
    the expected update time."""
    from ..pool import parse_size
    from ..train.spill import planner as SP

    try:
        figs = SP.measure_paths(spill.split(","), pool_options=pools)
        p = SP.plan_spill(params, figs, host_cache_bytes=parse_size(host_cache),
                          subgroup_params=sub_group_size)
    except (ValueError, OSError) as e:
        _fail(one_line(e))
    if as_json:
        return p.to_dict()
    t = Table(title=f"optimizer subgroups: {p.subgroups} of {p.subgroup_params:,} params, "
                    f"host cache {p.cache_subgroups}")
    for c in ("path", "subgroups", "capacity", "read GB/s", "write GB/s", "I/O s/step"):
        t.add_column(c, justify="left" if c == "path" else "right")
    for r in p.paths:
        cap = "-" if r["capacity_nbytes"] is None else \
            f"{r['capacity_nbytes'] / 2**30:.1f} GiB ({r['capacity_subgroups']})"
        t.add_row(r["path"], str(r["subgroups"]), cap, f"{r['read_GBps']:.2f}",
                  f"{r['write_GBps']:.2f}", f"{r['io_s']:.2f}")
    con.print(t)
    con.print(f"expected update: {p.update_s:.2f} s per step (I/O {p.io_s:.2f} s, kernel "
              f"{p.kernel_s:.2f} s on one thread, overlapped); "
              f"{p.io_bytes_per_step / 1e9:.1f} GB moved per step")
    return None
