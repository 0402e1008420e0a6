"""The preload halves of `cxlkit run --stripe` (the environment it execs with) and of
`cxlkit audit` (achieved vs requested stripes, the kernel's tiering switches and moves)."""
from __future__ import annotations

import sys

from rich.console import Console
from rich.table import Table

from ..placement import preload as PL
from ..placement import tiering as TG
from .. import topology
from .main import fail


def _mib(nbytes: int) -> str:
    return f"{nbytes / (1 << 20):,.1f}"


def stripe_env(spec: str, chunk: str, min_size: str, log: str | None,
               quiet: bool) -> dict[str, str]:
    """The variables to exec with (LD_PRELOAD and the library's configuration), after the
    checks the library would make: one line and exit 2 when the stripe cannot be placed."""
    if log is not None and log != "stderr":
        from pathlib import Path

        from .outpath import check_file

        check_file(Path(log), "--log")  # before CMD runs: its log must not be lost
    try:
        cfg = PL.parse_stripe(spec, chunk=chunk, min_size=min_size)
        have = topology.memory_nodes()
        for n in cfg.nodes:
            if n not in have:
                raise ValueError(f"stripe {spec!r}: node {n} has no memory on this machine "
                                 f"(nodes with memory: {','.join(map(str, have))})")
        env = PL.preload_env(cfg, log=log)
    except (ValueError, OSError) as e:
        from .main import one_line

        fail(one_line(e))
    if not quiet:
        print(f"cxlkit run: stripe {cfg.spec} (chunk {_mib(cfg.chunk_bytes)} MiB, mappings "
              f"from {_mib(cfg.min_bytes)} MiB) through {PL.LIBRARY_NAME}", file=sys.stderr)
    return {k: v for k, v in env.items() if k in ("LD_PRELOAD", PL.ENV_LOG, *cfg.env())}


def _stripe_doc(sa: PL.StripeAudit) -> dict:
    doc: dict = {"preloaded": sa.preloaded, "problem": sa.problem}
    if sa.config is None:
        return doc
    doc.update({
        "requested": sa.config.spec, "chunk_bytes": sa.config.chunk_bytes,
        "min_bytes": sa.config.min_bytes,
        "requested_share": {str(n): round(v, 4) for n, v in sa.config.share().items()},
        "achieved_share": {str(n): round(v, 4) for n, v in sa.achieved().items()},
        "pages": {str(n): c for n, c in sa.totals().items()},
        "ranges": [{"start": f"0x{r.start:x}", "end": f"0x{r.end:x}", "vmas": r.vmas,
                    "npages": r.npages, "present": r.present, "misplaced": r.misplaced,
                    "pages": {str(n): c for n, c in sorted(r.pages.items())},
                    "bounds": {str(n): list(b) for n, b in r.bounds.items()},
                    "within": r.within, "source": r.source,
                    "origin": None if r.origin is None else f"0x{r.origin:x}"}
                   for r in sa.ranges],
        "ranges_from": sa.source,
    })
    return doc


def audit_extras(pid: int, interval: float | None) -> dict:
    """{"stripe": ..., "tiering": ...} for `cxlkit audit`."""
    sa = PL.audit_stripes(pid)
    if interval is None:
        tiering = {"state": TG.tiering_state().to_dict()}
    else:
        tiering = _observe(interval, pid)
    return {"stripe": _stripe_doc(sa), "tiering": tiering}


def _observe(interval: float, pid: int) -> dict:
    """TG.observe with a status line on stderr while it waits: a spinner on a terminal, one
    line otherwise (a pipe or a log shows why nothing comes for `interval` seconds)."""
    err = Console(stderr=True)
    what = f"watching the kernel's tiering and pid {pid}'s pages for {interval:g} s"
    if not err.is_terminal:
        err.print(f"cxlkit audit: {what} ...", soft_wrap=True, highlight=False)
        return TG.observe(interval, pid).to_dict()
    with err.status(what + " (Ctrl-C stops)"):
        return TG.observe(interval, pid).to_dict()


def print_audit_extras(con: Console, extras: dict) -> None:
    st = extras["stripe"]
    if "requested" not in st:
        con.print(f"stripes: none ({st['problem']})")
    else:
        _print_stripes(con, st)
    tg = extras["tiering"]
    con.print("kernel tiering: " + TG.TieringState(
        tg["state"]["numa_balancing"], tg["state"]["demotion_enabled"]).describe())
    if "system" in tg:
        moved = {k: v for k, v in tg["system"].items() if v}
        con.print(f"over {tg['interval_s']:g} s, system-wide: "
                  + (", ".join(f"{k} +{v}" for k, v in moved.items()) or "no page moved"))
    if "promoted_bytes" in tg:
        delta = ", ".join(f"node {n} {int(v) / (1 << 20):+,.1f} MiB"
                          for n, v in tg["node_bytes_delta"].items())
        con.print(f"this process: promoted {_mib(tg['promoted_bytes'])} MiB, demoted "
                  f"{_mib(tg['demoted_bytes'])} MiB (net, from numa_maps: {delta or 'no pages'})")


def _print_stripes(con: Console, st: dict) -> None:
    nodes = list(st["requested_share"])
    t = Table(title=f"stripe {st['requested']} (chunk {_mib(st['chunk_bytes'])} MiB): "
                    "pages per node of each striped range")
    t.add_column("range", overflow="fold")
    t.add_column("MiB", justify="right")
    for n in nodes:
        t.add_column(f"node {n}", justify="right")
    t.add_column("misplaced", justify="right")
    t.add_column("within rule")
    for r in st["ranges"]:
        t.add_row(f"{r['start']}-{r['end']}", _mib(r["npages"] * PL.PAGE),
                  *[f"{r['pages'].get(n, 0)} ({r['bounds'][n][0]}..{r['bounds'][n][1]})"
                    for n in nodes], str(r["misplaced"]),
                  ("yes" if r["within"] else "[red]no[/red]")
                  + ("" if r["present"] == r["npages"] else f" ({r['present']} of "
                     f"{r['npages']} pages present)"))
    con.print(t)
    req = ", ".join(f"node {n} {v:.1%}" for n, v in st["requested_share"].items())
    got = ", ".join(f"node {n} {v:.1%}" for n, v in st["achieved_share"].items()) or "no pages"
    con.print(f"requested {req}; achieved {got}")
    if st["problem"]:
        con.print(f"[yellow]warning: {st['problem']}[/yellow]")
