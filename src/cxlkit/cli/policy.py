"""`cxlkit policy weights`: the kernel's weighted-interleave weights beside proposed ones,
written on request with the way back."""
from __future__ import annotations

import json
from typing import NoReturn, Optional

import typer
from rich.console import Console
from rich.table import Table

from .. import placement as P
from .. import topology
from .main import app, fail, one_line

policy_app = typer.Typer(no_args_is_help=True, help="Memory policies and kernel weights.")
app.add_typer(policy_app, name="policy")


def _fail(msg: str, code: int = 2) -> NoReturn:
    fail(msg, code)  # one line on stderr, exit 2 (127: the command of `run` cannot run)


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

