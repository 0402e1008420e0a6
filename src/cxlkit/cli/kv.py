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
from . import tables as T
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
                         lease_timeout=None)
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
        fail(f"two pools given: {pool} and --pool {pool_opt}; name one")
    path = _pool_path(pool or pool_opt)
    try:
        info = collect(path, host_id=int(host_id) if host_id and host_id.isdigit() else host_id,
                       coherence=coherence, group=shared_gid(path, group))
    except FileNotFoundError:
        fail(f"pool {path}: no such pool; a KV store creates it, or name one: `cxlkit kv "
             "stats POOL` (`cxlkit pool ls --pools` lists them)")
    except (OSError, ValueError) as e:
        from .pool import pool_error

        fail(pool_error(path, e))
    if as_json:
        typer.echo(json.dumps(info))
        return
    con = Console()
    t = T.table(f"KV blocks in {path}")
    T.text(t, "namespace")
    for col in ("host", "blocks", "size"):
        T.num(t, col)
    for b in info["blocks"]:
        t.add_row(b["namespace"], str(b["host"]), str(b["blocks"]), T.size(b["bytes"]))
    con.print(t)
    r = T.table("recency tables")
    T.text(r, "namespace")
    for col in ("host", "size"):
        T.num(r, col)
    for tb in info["recency_tables"]:
        r.add_row(tb["namespace"], str(tb["host"]), T.size(tb["bytes"]))
    con.print(r)
    con.print("(a recency table: the last use of each block by each host)")
    _print_counters(con, info["hosts"])


COUNTERS = ("lookups", "hits", "misses", "puts", "put_skipped", "bytes_in", "bytes_out",
            "evictions", "load_errors", "put_errors")
_HOSTS_PER_TABLE = 5  # a counter name and five hosts fit 80 columns


def _print_counters(con: Console, hosts: dict[str, dict]) -> None:
    """One row per counter, one column per host (hosts are few, counters many: this way round
    the headers are never cut), in tables of at most five hosts."""
    names = list(hosts)
    for i in range(0, max(len(names), 1), _HOSTS_PER_TABLE):
        part = names[i:i + _HOSTS_PER_TABLE]
        c = T.table("counters per host" if i == 0 else None)
        c.add_column("counter", no_wrap=True)
        for h in part:
            T.num(c, f"host {h}")
        for f in COUNTERS:
            c.add_row(f, *(str(hosts[h][f]) for h in part))
        con.print(c)
    con.print("(each host's counters are shared by its processes; bytes_in/out in bytes)")


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
