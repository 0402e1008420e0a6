"""`cxlkit config`: every CXLKIT_* variable with its effective value (`--json` for scripts),
and `--markdown`, the generator of docs/config.md."""
from __future__ import annotations

import json

import typer

from .._config import TABLE, Setting, Var, settings
from .main import app

_WIDTH = 80
_READERS = (
    ("python", "The Python package", ""),
    ("libcxlkit", "libcxlkit (the C library under every layer)",
     "Read by the call that needs it (a process may change them between calls). "
     "`CXLKIT_COHERENCE=sim` opens pools on the non-coherence simulator, which the "
     "`CXLKIT_SIM_*` variables drive (docs/pool-format.md)."),
    ("preload", "The preload library (`cxlkit run --stripe`, docs/preload.md)",
     "Read by `libcxlkit_preload.so` inside the program when it loads (again at every exec); "
     "`cxlkit run --stripe` sets them, `cxlkit audit PID` reads them back from "
     "`/proc/PID/environ`. A bad value: one line on stderr, and the library only forwards."),
    ("mpi", "The PMPI shim (docs/mpi-shim.md)",
     "Read by `libcxlkit_mpi_<mpi>.so` on rank 0 at `MPI_Init`."),
)


def _line(s: Setting) -> str:
    """NAME  value  (source), cut to the width: a refused value says so."""
    source = "refused" if s.why else "set" if s.value is not None else "default"
    value = s.effective if s.effective != "" else "-"
    head = f"{s.var.name:<28} "
    room = _WIDTH - len(head) - len(source) - 2
    if len(value) > room:
        value = value[: room - 3] + "..."
    return f"{head}{value:<{room}}  {source}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _row(v: Var) -> str:
    default = f"`{v.default}`" if v.default else ""
    rng = f"`{_cell(v.range)}`" if v.range else ""
    return f"| `{v.name}` | {v.type} | {default} | {rng} | {_cell(v.doc)} |"


def render_markdown() -> str:
    """docs/config.md: the table, one section per reader."""
    out = ["# Environment variables", "",
           "Every `CXLKIT_*` variable, generated from the one table (native/sys/config_table.h "
           "and src/cxlkit/_config.py) by `cxlkit config --markdown`. Unset or empty means the "
           "default. A malformed or out-of-range value is refused, never replaced by the "
           "default: the call that reads it fails naming the variable. `cxlkit config` "
           "prints the effective values (`--json` too) and marks a refused one.", ""]
    for reader, title, intro in _READERS:
        out += [f"## {title}", ""]
        if intro:
            out += [intro, ""]
        out += ["| variable | type | default | range | meaning |", "|---|---|---|---|---|"]
        out += [_row(v) for v in TABLE if v.reader == reader]
        out.append("")
    return "\n".join(out)


@app.command("config")
def config_cmd(as_json: bool = typer.Option(False, "--json", help="one JSON document"),
               markdown: bool = typer.Option(False, "--markdown",
                                             help="the table as docs/config.md has it")) -> None:
    """Every CXLKIT_* variable: its effective value, and whether it is set or refused.

    Exits 2 when a value is refused (each named on stderr)."""
    if markdown:
        typer.echo(render_markdown(), nl=False)
        return
    all_settings = settings()
    if as_json:
        print(json.dumps([{"name": s.var.name, "value": s.value, "effective": s.effective,
                           "default": s.var.default, "type": s.var.type, "range": s.var.range,
                           "reader": s.var.reader, "valid": not s.why, "why": s.why}
                          for s in all_settings], indent=1))
    else:
        for s in all_settings:
            typer.echo(_line(s))
    refused = [s for s in all_settings if s.why]
    for s in refused:
        typer.echo(f"Error: {s.why}", err=True)
    if refused:
        raise typer.Exit(2)
