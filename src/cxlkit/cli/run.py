"""`cxlkit run`: a program under a memory policy (numactl that knows weighted interleave),
and per-job weighted stripes with --stripe."""
from __future__ import annotations

import os
from typing import NoReturn, Optional

import typer
from rich.console import Console

from .. import placement as P
from .main import app, fail, one_line


def _fail(msg: str, code: int = 2) -> NoReturn:
    fail(msg, code)  # one line on stderr, exit 2 (127: the command of `run` cannot run)


def _run_policy(bind: Optional[str], preferred: Optional[int], interleave: Optional[str],
                weighted: Optional[str]) -> P.Policy:
    given = [x for x in (bind, preferred, interleave, weighted) if x is not None]
    if len(given) != 1:
        raise ValueError("give exactly one of --bind, --preferred, --interleave, --weighted")
    if bind is not None:
        return P.bind(P.parse_nodes(bind))
    if preferred is not None:
        return P.preferred(preferred)
    if interleave is not None:
        return P.interleave(P.parse_nodes(interleave))
    assert weighted is not None
    return P.weighted(P.parse_weights(weighted) if ":" in weighted else P.parse_nodes(weighted))


@app.command(context_settings={"allow_interspersed_args": False})
def run(
    cmd: list[str] = typer.Argument(..., help="the program and its arguments (after --)"),
    bind: Optional[str] = typer.Option(None, "--bind", help="nodes, e.g. 1 or 0,1"),
    preferred: Optional[int] = typer.Option(None, "--preferred", help="one node"),
    interleave: Optional[str] = typer.Option(None, "--interleave", help="nodes, e.g. 0,1"),
    weighted: Optional[str] = typer.Option(
        None, "--weighted", help="kernel weighted interleave: A:w,B:w (must match the kernel's "
        "system-wide weights) or A,B (the kernel's weights as they are)"),
    thp: Optional[bool] = typer.Option(
        None, "--thp/--no-thp", help="allow transparent huge pages (default: not for "
        "--interleave/--weighted, whose ratio the kernel would apply per 2 MiB folio)"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="do not print the policy"),
    stripe: Optional[str] = typer.Option(
        None, "--stripe", help="software stripes A:w,B:w of CMD's large anonymous mappings and "
        "malloc blocks (LD_PRELOAD, no root; docs/preload.md); with another policy, that one "
        "places the rest"),
    min_size: str = typer.Option("2M", "--min-size", help="--stripe: smallest mapping placed"),
    chunk: str = typer.Option("2M", "--chunk", help="--stripe: stripe chunk"),
    log: Optional[str] = typer.Option(None, "--log", help="--stripe: log each decision to "
                                      "PATH or stderr (CXLKIT_PRELOAD_LOG)"),
) -> None:
    """Run CMD with a memory policy (set_mempolicy, then exec): numactl that knows weighted
    interleave on any numactl version; --stripe adds per-job weighted stripes."""
    if stripe is not None:
        from .stripe import stripe_env  # the preload half of `run`

        os.environ.update(stripe_env(stripe, chunk, min_size, log, quiet))
        if (bind, preferred, interleave, weighted) == (None, None, None, None):
            _exec(cmd)
    try:
        pol = _run_policy(bind, preferred, interleave, weighted)
        kw = P.validate(pol)
        P.set_task_policy(pol, thp=thp)
    except (ValueError, OSError) as e:
        _fail(one_line(e))
    if not quiet:
        note = ""
        if pol.mode == "weighted" and kw:
            note = " (kernel weights " + ",".join(f"{n}:{w}" for n, w in kw.items()) + ")"
        if thp is None and pol.mode in ("interleave", "weighted"):
            note += " (transparent huge pages off: the ratio holds per page)"
        Console(stderr=True).print(f"cxlkit run: {pol}{note} -> {' '.join(cmd)}")
    _exec(cmd)


def _exec(cmd: list[str]) -> NoReturn:
    try:
        os.execvp(cmd[0], cmd)
    except OSError as e:
        _fail(f"cannot run {cmd[0]!r}: {e.strerror}", 127)
