"""`cxlkit kv stats`: the KV blocks in a pool (per namespace and host), the recency tables, and
every host's shared counters; and the KV section of `cxlkit demo` (run_demo)."""
from __future__ import annotations

import json
import multiprocessing as mp
import os

import typer
from rich.console import Console
from rich.table import Table

from .._config import config
from .main import app

kv_app = typer.Typer(no_args_is_help=True, help="The KV-cache pool: blocks and statistics.")
app.add_typer(kv_app, name="kv")


def _pool_path(pool: str | None) -> str:
    from ..pool import resolve

    return resolve(pool or config().pool)


def collect(path: str) -> dict:
    from ..kv.recency import is_table
    from ..kv.store import _STATS_PREFIX, _open_pool, host_stats

    pool, _ = _open_pool(path, create=False, size=0, host_id=None, coherence=None, max_hosts=0,
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
def stats(pool: str = typer.Option(None, help="pool path or name (default: CXLKIT_POOL)"),
          as_json: bool = typer.Option(False, "--json", help="one JSON object")) -> None:
    """KV blocks per namespace and host, and each host's counters (shared by its processes)."""
    path = _pool_path(pool)
    try:
        info = collect(path)
    except FileNotFoundError:
        typer.echo(f"no pool at {path} (create one with a KV store, or pass --pool)", err=True)
        raise typer.Exit(1) from None
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
def _demo_model():
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=2048, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                      num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=4096)
    torch.manual_seed(1234)  # same weights in both processes
    return LlamaForCausalLM(cfg).eval()


def _demo_prompt(prefix_len: int, tail: int) -> list[int]:
    return [(31 * i + 7) % 2048 for i in range(prefix_len)] + [(i * 13) % 2048 for i in range(tail)]


def _demo_prefill(path: str, prefix_len: int, q) -> None:
    import torch

    from ..integrations.transformers import PrefixCache, generate

    torch.set_num_threads(1)
    model = _demo_model()
    pc = PrefixCache(path, model, host_id=1, checksum=True)
    toks, info = generate(model, _demo_prompt(prefix_len, 5), pc, max_new_tokens=1)
    q.put((info.stored_blocks, info.ttft_s))


def run_demo(console: Console, prefix_len: int = 512) -> None:
    """A prefix stored by one process (host 1) is hit by another (host 0): TTFT hit vs recompute."""
    import torch

    from ..integrations.transformers import PrefixCache, generate

    path = f"/dev/shm/cxlkit-demo-kv-{os.getpid()}"
    torch.set_num_threads(1)
    try:
        model = _demo_model()
        pc = PrefixCache(path, model, create=True, size=64 << 20, host_id=0, checksum=True)
        ctx = mp.get_context("spawn")
        q = ctx.Queue()
        p = ctx.Process(target=_demo_prefill, args=(path, prefix_len, q))
        p.start()
        stored, ttft_prefill = q.get(timeout=300)
        p.join(60)
        prompt = _demo_prompt(prefix_len, 9)  # same prefix, another question
        generate(model, prompt, None, max_new_tokens=1)  # warm-up (allocator, kernels)
        full, ref = generate(model, prompt, None, max_new_tokens=4)
        hit_toks, info = generate(model, prompt, pc, max_new_tokens=4, save=False)
        t = Table(title=f"KV pool: {prefix_len}-token prefix stored by process {p.pid} (host 1), "
                        f"reused by process {os.getpid()} (host 0)")
        for col in ("", "tokens from pool", "TTFT ms", "greedy tokens"):
            t.add_column(col)
        t.add_row("recompute", "0", f"{ref.ttft_s * 1e3:.1f}", str(full))
        t.add_row("pool hit", str(info.prefix_tokens), f"{info.ttft_s * 1e3:.1f}", str(hit_toks))
        console.print(t)
        same = "[green]same tokens[/green]" if hit_toks == full else "[red]tokens differ[/red]"
        console.print(f"blocks stored by the other process: {stored}; TTFT ratio hit/recompute "
                      f"{info.ttft_s / ref.ttft_s:.2f}; {same}; pool {path} (removed after); "
                      f"tiny random-weight Llama on CPU, 1 thread")
    finally:
        if os.path.exists(path):
            os.unlink(path)
