"""`cxlkit run` (numactl with weighted interleave), `cxlkit audit PID`, `cxlkit policy weights`."""
from __future__ import annotations

import json
import os
import sys
from typing import NoReturn, Optional

import typer
from rich.console import Console
from rich.table import Table

from ..placement import audit as _audit
from .. import placement as P
from .. import topology
from .main import app, fail, one_line

policy_app = typer.Typer(no_args_is_help=True, help="Memory policies and kernel weights.")
app.add_typer(policy_app, name="policy")


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


@policy_app.command("weights")
def weights_cmd(
    spec: Optional[str] = typer.Argument(None, help="node:weight list, e.g. 0:3,1:1"),
    from_bench: Optional[str] = typer.Option(
        None, "--from-bench", help="compute weights from a `cxlkit bench memory --json` result"),
    auto: bool = typer.Option(False, "--auto", help="with --apply: give the weights back to "
                              "the kernel's auto mode (Linux 6.16+)"),
    apply: bool = typer.Option(False, "--apply", help="write them to the kernel (root; "
                               "system-wide: prints before -> after and the way back)"),
    as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
) -> None:
    """Show the kernel's weighted-interleave weights beside proposed ones; --apply writes them
    (system-wide), shows before -> after and how to undo it."""
    current = topology.weighted_interleave_weights()
    auto_on, auto_file = topology.weighted_interleave_auto()
    proposed = _proposed_weights(spec, from_bench, auto)
    before, undo = current, None
    if apply:
        if proposed is None and not auto:
            _fail("--apply needs weights: node:weight pairs, --from-bench or --auto")
        if auto and auto_file is None:
            _fail("this kernel has no weighted-interleave auto mode (Linux 6.16+): restore "
                  "weights by hand, e.g. `cxlkit policy weights 0:1,1:1 --apply`")
        undo = _undo_command(before, auto_on, auto_file, proposed or {})
        try:
            if auto:
                P.restore_kernel_auto_weights()
            else:
                P.write_kernel_weights(proposed)
        except (ValueError, OSError) as e:
            _fail(f"cannot write weights: {one_line(e)}")
        current = topology.weighted_interleave_weights()
    auto_now, _ = topology.weighted_interleave_auto()
    if as_json:
        def js(w):
            return None if w is None else {str(n): v for n, v in w.items()}
        typer.echo(json.dumps({
            "kernel": js(current), "proposed": js(proposed), "applied": apply,
            "auto": auto_now, **({"before": js(before), "auto_before": auto_on, "undo": undo}
                                 if apply else {}),
        }))
        return
    _print_weights(before, current, proposed, apply, auto_on, auto_now, undo)


def _proposed_weights(spec: Optional[str], from_bench: Optional[str], auto: bool
                      ) -> dict[int, int] | None:
    """The weights asked for (node:weight pairs or a bench result), None for none; exits with
    one line on a bad request."""
    try:
        given = [x for x in (spec and "node:weight pairs", from_bench and "--from-bench",
                             auto and "--auto") if x]
        if len(given) > 1:
            raise ValueError(f"give one of node:weight pairs, --from-bench or --auto, not "
                             f"{' and '.join(given)}")
        proposed: dict[int, int] | None = None
        if spec is not None:
            proposed = P.parse_weights(spec)
        elif from_bench is not None:
            from ..bench.weights import weights_table  # the bench floor, imported on demand

            proposed, _ = weights_table(from_bench)
        if proposed is not None:
            have = topology.memory_nodes()
            for n in proposed:
                if n not in have:
                    raise ValueError(f"node {n} has no memory on this machine")
    except OSError as e:  # only --from-bench reads a file here
        _fail(f"--from-bench {one_line(e)}; give the JSON of `cxlkit bench memory -o FILE`")
    except ValueError as e:
        _fail(one_line(e))
    return proposed


def _undo_command(before: dict[int, int] | None, auto_on: bool | None, auto_file,
                  proposed: dict[int, int]) -> str:
    """The command that puts back what --apply is about to change: the kernel's auto mode where
    it was on, else the weights as they were (for every node we write)."""
    if auto_on and auto_file is not None:
        return "cxlkit policy weights --auto --apply"
    old = dict(before or {})
    for n in proposed:
        old.setdefault(n, 1)  # a node without a file weighs 1 (the kernel's default)
    return ("cxlkit policy weights " + ",".join(f"{n}:{w}" for n, w in sorted(old.items()))
            + " --apply")


def _print_weights(before, current, proposed, apply: bool, auto_on, auto_now, undo) -> None:
    con = Console()
    if current is None:
        con.print("this kernel has no weighted interleave (Linux 6.9+): use a stripe policy")
    t = Table(title="weighted-interleave weights" + (" (system-wide)" if apply else ""))
    t.add_column("node", justify="right")
    if apply:
        t.add_column("before", justify="right")
        t.add_column("after", justify="right")
    else:
        t.add_column("kernel", justify="right")
        if proposed is not None:
            t.add_column("proposed", justify="right")
    for n in sorted(set(before or {}) | set(current or {}) | set(proposed or {})):
        if apply:
            row = [str(n), str((before or {}).get(n, "-")), str((current or {}).get(n, "-"))]
        else:
            row = [str(n), str((current or {}).get(n, "-"))]
            if proposed is not None:
                row.append(str(proposed.get(n, "-")))
        t.add_row(*row)
    con.print(t)
    mode = {True: "on", False: "off", None: "not in this kernel"}
    if apply:
        con.print(f"applied: auto mode {mode[auto_on]} -> {mode[auto_now]}")
        con.print(f"to undo: {undo}", soft_wrap=True)
    elif auto_now is not None:
        con.print(f"kernel auto mode: {mode[auto_now]}")

