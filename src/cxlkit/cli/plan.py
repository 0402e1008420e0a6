"""`cxlkit plan vectordb` and `cxlkit plan kv`: size the memory and say which tiers of this
machine could hold it."""
from __future__ import annotations

import json
from typing import NoReturn, Optional

import typer
from rich.console import Console
from rich.table import Table

from .main import app, fail, one_line

plan_app = typer.Typer(no_args_is_help=True,
                       help="Size a vector database, a KV cache or CPU-offloaded training "
                       "against this machine's tiers.")
app.add_typer(plan_app, name="plan")


def _gib(n: int | None) -> str:
    return "-" if n is None else f"{n / 2**30:,.1f} GiB"


def _show(p, as_json: bool, headline: str) -> None:
    if as_json:
        typer.echo(json.dumps(p.to_dict(), indent=1))
        return
    con = Console()
    con.print(headline)
    t = Table(title=f"needs {_gib(p.need_bytes)} ({p.need_bytes:,} bytes)")
    for c in ("node", "kind", "total", "free", "need / free", "fits"):
        t.add_column(c, justify="right" if c not in ("kind", "fits") else "left")
    for f in p.tiers:
        t.add_row(str(f.node), f.kind, _gib(f.total_bytes), _gib(f.free_bytes),
                  "-" if f.share is None else f"{f.share:.0%}",
                  "[green]yes[/green]" if f.fits else "[red]no[/red]")
    t.add_row("all", "", "", _gib(p.free_bytes_all),
              f"{p.need_bytes / p.free_bytes_all:.0%}" if p.free_bytes_all else "-",
              "[green]yes[/green]" if p.fits_all else "[red]no[/red]")
    con.print(t)
    con.print(p.verdict())


def _fail(msg: str) -> NoReturn:
    fail(msg)  # one line on stderr, exit 2


def _nodes(spec: Optional[str]):
    from ..placement import parse_nodes

    return None if spec is None else parse_nodes(spec)


@plan_app.command("vectordb")
def vectordb_cmd(
    vectors: str = typer.Option(..., "--vectors", help="number of vectors, e.g. 100M (decimal)"),
    dim: int = typer.Option(..., "--dim", help="dimensions per vector"),
    dtype: str = typer.Option("fp32", "--dtype", help="fp32, fp16, bf16, int8, int4, binary..."),
    overhead: float = typer.Option(1.5, "--overhead",
                                   help="index + metadata factor on the raw vectors"),
    nodes: Optional[str] = typer.Option(None, "--nodes", help="only these memory nodes"),
    as_json: bool = typer.Option(False, "--json", help="print JSON"),
) -> None:
    """Memory for a vector database: vectors x dim x dtype x overhead."""
    from .. import sizing as PL

    try:
        p = PL.vectordb(vectors, dim, dtype, overhead, nodes=_nodes(nodes))
    except (ValueError, KeyError, TypeError) as e:
        _fail(one_line(e))
    d = p.detail
    _show(p, as_json, f"vector database: {d['vectors']:,} x {dim} {dtype} = "
                      f"{_gib(d['raw_bytes'])} raw, x{overhead:g} overhead")


@plan_app.command("kv")
def kv_cmd(
    layers: int = typer.Option(..., "--layers", help="transformer layers"),
    kv_heads: int = typer.Option(..., "--kv-heads", help="key/value heads per layer"),
    head_dim: int = typer.Option(..., "--head-dim", help="dimension per head"),
    tokens: str = typer.Option(..., "--tokens", help="tokens to hold, e.g. 1M (= 2**20: token counts are powers of two, docs/units.md)"),
    dtype: str = typer.Option("bf16", "--dtype", help="bf16, fp16, fp8, fp32..."),
    nodes: Optional[str] = typer.Option(None, "--nodes", help="only these memory nodes"),
    as_json: bool = typer.Option(False, "--json", help="print JSON"),
) -> None:
    """Memory for a KV cache: 2 x layers x kv_heads x head_dim x bytes per token."""
    from .. import sizing as PL

    try:
        p = PL.kv(layers, kv_heads, head_dim, tokens, dtype, nodes=_nodes(nodes))
    except (ValueError, KeyError, TypeError) as e:
        _fail(one_line(e))
    d = p.detail
    _show(p, as_json, f"KV cache: {d['bytes_per_token']:,} bytes per token "
                      f"(2 x {layers} layers x {kv_heads} kv heads x {head_dim} x {dtype}) "
                      f"x {d['tokens']:,} tokens")
