"""`cxlkit <noun> [<verb>]`: the entry point; each noun lives in its own module here."""
from __future__ import annotations

import sys
from typing import NoReturn

import typer

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="CXL and tiered memory for AI and HPC: tiers, placement, pool, bench.")

# Each module registers its commands on `app` (or adds a sub-typer) when imported.
_COMMAND_MODULES = (
    "cxlkit.cli.run",  # run
    "cxlkit.cli.audit",  # audit
    "cxlkit.cli.policy",  # policy weights
    "cxlkit.cli.bench",  # bench memory, bench copy
    "cxlkit.cli.plan",  # plan vectordb, plan kv
    "cxlkit.cli.train",  # plan train
    "cxlkit.cli.tiers",  # tiers
    "cxlkit.cli.kv",  # kv stats
    "cxlkit.cli.pool",  # pool create, ls, stat, rm, fsck
    "cxlkit.cli.demo",
    "cxlkit.cli.doctor",  # doctor
    "cxlkit.cli.train_spill",  # train demo (spilled optimizer subgroups)
    "cxlkit.cli.config",  # config
)


def _load() -> None:
    import importlib

    for name in _COMMAND_MODULES:
        importlib.import_module(name)
    _one_line_summaries(app)


def _one_line_summaries(t: typer.Typer) -> None:
    """A command's line in its group's list: the first paragraph of its docstring as one
    line (typer keeps the docstring's own line breaks there, cutting sentences at 80
    columns)."""
    for info in t.registered_commands:
        doc = info.help or (info.callback.__doc__ if info.callback else None)
        if info.short_help is None and doc:
            info.short_help = " ".join(doc.split("\n\n")[0].split())
    for g in t.registered_groups:
        if g.typer_instance is not None:
            _one_line_summaries(g.typer_instance)


def main() -> None:
    sys.exit(run())


# ---- one voice for errors: `Error: <what> <which thing>: <why>; <what to do>`, one line on
# stderr, exit 2, never a traceback
def one_line(e: BaseException) -> str:
    """An exception as one line: 'PATH: why' for OSErrors that name a path (never the
    '[Errno N]' prefix), else its message."""
    if isinstance(e, OSError) and e.strerror:
        return f"{e.filename}: {e.strerror}" if e.filename else e.strerror
    msg = str(e.args[0]) if isinstance(e, KeyError) and e.args else str(e)
    return " ".join((msg or type(e).__name__).split())


def fail(msg: str, code: int = 2) -> NoReturn:
    """Print `Error: msg` (one line, never wrapped) on stderr and exit 2 (`cxlkit run`
    alone exits 127 when its command cannot run, as a shell does)."""
    typer.echo(f"Error: {' '.join(msg.split())}", err=True)
    raise typer.Exit(code)


def _interrupted(e: BaseException) -> bool:
    seen: BaseException | None = e
    for _ in range(8):  # SystemExit <- click Exit <- KeyboardInterrupt: a short chain
        if seen is None:
            return False
        if isinstance(seen, KeyboardInterrupt):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _usage_error(e: typer.TyperException) -> str:
    """A bad option or argument as one line naming the command's --help."""
    ctx = getattr(e, "ctx", None)
    where = f"; see `{ctx.command_path} --help`" if ctx is not None else ""
    msg = " ".join(e.format_message().split()).rstrip(".")
    return f"{msg[:1].lower()}{msg[1:]}{where}"


def run(argv: list[str] | None = None) -> int:
    """Run the CLI on argv (default sys.argv[1:]); returns the exit code. An exception a
    command lets out becomes one line and code 2, never a traceback."""
    _load()
    try:
        rv = app(args=argv, prog_name="cxlkit", standalone_mode=False)
    except SystemExit as e:
        if _interrupted(e):
            typer.echo("cxlkit: interrupted", err=True)
            return 130
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    except typer.TyperException as e:  # typer's own click: usage errors
        if type(e).__name__ == "NoArgsIsHelpError":  # `cxlkit pool`: its help, as asked
            typer.echo(e.format_message(), err=True)
        else:
            typer.echo(f"Error: {_usage_error(e)}", err=True)
        return 2
    except (KeyboardInterrupt, typer.Abort):
        typer.echo("cxlkit: interrupted", err=True)
        return 130
    except Exception as e:  # noqa: BLE001 - the CLI's last word: one line, not a traceback
        typer.echo(f"Error: {one_line(e)}", err=True)
        return 2
    if rv == 130 and isinstance(rv, int):  # typer's answer to Ctrl-C outside standalone mode
        typer.echo("cxlkit: interrupted", err=True)
    return rv if isinstance(rv, int) else 0
