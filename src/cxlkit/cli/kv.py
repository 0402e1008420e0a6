"""`cxlkit kv stats`: the KV blocks in a pool (per namespace and host), the recency tables, and
every host's shared counters; and the KV section of `cxlkit demo` (run_demo)."""
from __future__ import annotations

import json
import os
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from .._config import config
from .main import app, fail, one_line
from .poolopen import GROUP_OPT, shared_gid

kv_app = typer.Typer(no_args_is_help=True, help="The KV-cache pool: blocks and statistics.")
app.add_typer(kv_app, name="kv")


def _pool_path(pool: str | None) -> str:
    from ..pool import resolve

    return resolve(pool or config().pool)


def collect(path: str, *, host_id: int | str | None = None,
            coherence: str | None = None, group: int | None = None) -> dict:
    """What `kv stats` shows; group: the gid of a group-shared pool (opened shared)."""
    from ..kv.recency import is_table
    from ..kv.store import _STATS_PREFIX, _open_pool, host_stats
    from ..pool import Pool

    src = path if group is None else Pool(path, host_id=host_id, coherence=coherence,
                                          create=False, group=group)
    mine = group is None  # else src is open already, as this host and coherence
    pool, _ = _open_pool(src, create=False, size=0, host_id=host_id if mine else None,
                         coherence=coherence if mine else None, max_hosts=0,
                         lease_timeout_ms=0)
    with pool:
        groups: dict[tuple[str, int], dict] = {}
        tables = []
        for o in pool.list():
            if not o.name.startswith("kv.") or o.name.startswith(_STATS_PREFIX) or not o.live:
                continue
            if is_table(o.name):
                tables.append({"namespace": o.name.split(".")[1], "host": o.host,
                               "bytes": o.nbytes})
                continue
            g = groups.setdefault((o.name.split(".")[1], o.host), {"blocks": 0, "bytes": 0})
            g["blocks"] += 1
            g["bytes"] += o.nbytes
        st = pool.stat()
        return {
            "pool": path, "size": st.size, "partition_bytes": st.partition_bytes,
            "blocks": [{"namespace": ns, "host": h, **g} for (ns, h), g in sorted(groups.items())],
            "recency_tables": sorted(tables, key=lambda t: (t["namespace"], t["host"])),
            "hosts": {str(h): c for h, c in sorted(host_stats(pool).items())},
        }


@kv_app.command("stats")
def stats(pool: Optional[str] = typer.Argument(
              None, help="pool name (/dev/shm/cxlkit-NAME) or path, as for `cxlkit pool stat`; "
              "default: CXLKIT_POOL"),
          pool_opt: Optional[str] = typer.Option(None, "--pool", hidden=True,
                                                 help="the same as POOL (older spelling)"),
          host_id: Optional[str] = typer.Option(None, "--host-id", help="host slot (int) or "
                                                "host name; default: CXLKIT_HOST_ID, else the "
                                                "machine id"),
          coherence: Optional[str] = typer.Option(None, "--coherence", help="host or none; "
                                                  "default: CXLKIT_COHERENCE, else host"),
          group: Optional[str] = GROUP_OPT,
          as_json: bool = typer.Option(False, "--json", help="one JSON object")) -> None:
    """KV blocks per namespace and host, and each host's counters (shared by its processes)."""
    if pool is not None and pool_opt is not None and pool != pool_opt:
        fail(f"two pools given: {pool} and --pool {pool_opt}")
    path = _pool_path(pool or pool_opt)
    try:
        info = collect(path, host_id=int(host_id) if host_id and host_id.isdigit() else host_id,
                       coherence=coherence, group=shared_gid(path, group))
    except FileNotFoundError:
        fail(f"no pool at {path} (create one with a KV store, or name one: "
             "cxlkit kv stats POOL)")
    except (OSError, ValueError) as e:
        fail(f"pool {path}: {one_line(e)}")
    if as_json:
        typer.echo(json.dumps(info))
        return
    con = Console()
    t = Table(title=f"KV blocks in {path}")
    for col in ("namespace", "host", "blocks", "MiB"):
        t.add_column(col)
    for b in info["blocks"]:
        t.add_row(b["namespace"], str(b["host"]), str(b["blocks"]), f"{b['bytes'] / 2**20:.1f}")
    con.print(t)
    r = Table(title="recency tables (last use of each block by each host)")
    for col in ("namespace", "host", "KiB"):
        r.add_column(col)
    for tb in info["recency_tables"]:
        r.add_row(tb["namespace"], str(tb["host"]), f"{tb['bytes'] / 2**10:.1f}")
    con.print(r)
    c = Table(title="counters per host")
    fields = ("lookups", "hits", "misses", "puts", "put_skipped", "bytes_in", "bytes_out",
              "evictions", "load_errors", "put_errors")
    c.add_column("host")
    for f in fields:
        c.add_column(f)
    for h, vals in info["hosts"].items():
        c.add_row(h, *(str(vals[f]) for f in fields))
    con.print(c)


# ---- demo ------------------------------------------------------------------------------------
def run_demo(console: Console, prefix_len: int = 512) -> None:
    """A prefix stored by one process (host 1) is hit by another (host 0): TTFT hit vs recompute."""
    from ..integrations.demo import kv_demo

    d = kv_demo(prefix_len)
    ref, hit = d["recompute"], d["hit"]
    t = Table(title=f"KV pool: {prefix_len}-token prefix stored by process {d['writer_pid']} "
                    f"(host 1), reused by process {os.getpid()} (host 0)")
    for col in ("", "tokens from pool", "TTFT ms", "greedy tokens"):
        t.add_column(col)
    t.add_row("recompute", "0", f"{ref['ttft_s'] * 1e3:.1f}", str(ref["greedy"]))
    t.add_row("pool hit", str(hit["tokens"]), f"{hit['ttft_s'] * 1e3:.1f}", str(hit["greedy"]))
    console.print(t)
    same = ("[green]same tokens[/green]" if hit["greedy"] == ref["greedy"]
            else "[red]tokens differ[/red]")
    console.print(f"blocks stored by the other process: {d['stored']}; TTFT ratio "
                  f"hit/recompute {hit['ttft_s'] / ref['ttft_s']:.2f}; {same}; pool {d['path']} "
                  "(removed after); tiny random-weight Llama on CPU, 1 thread")
