"""`cxlkit <noun> [<verb>]`: the entry point; each noun lives in its own module here."""
from __future__ import annotations

import typer

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="CXL and tiered memory for AI and HPC: tiers, placement, pool, bench.")

# Each module registers its commands on `app` (or adds a sub-typer) when imported.
_COMMAND_MODULES = (
    "cxlkit.cli.placement",  # run, audit, policy
    "cxlkit.cli.bench",  # bench memory, bench copy
    "cxlkit.cli.plan",  # plan vectordb, plan kv
    "cxlkit.cli.train",  # plan train
    "cxlkit.cli.tiers",  # tiers
    "cxlkit.cli.kv",  # kv stats
    "cxlkit.cli.pool",  # pool create, ls, stat, rm, fsck
    "cxlkit.cli.demo",
    "cxlkit.cli.train_spill",  # train demo (spilled optimizer subgroups)
)


def _load() -> None:
    import importlib

    for name in _COMMAND_MODULES:
        importlib.import_module(name)


def main() -> None:
    _load()
    app()
