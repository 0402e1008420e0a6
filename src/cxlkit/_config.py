"""The one table of CXLKIT_* environment variables: the native table (native/sys/config_table.h,
read through the binding) merged with the few only Python reads. docs/config.md is generated
from it (`cxlkit config --markdown`)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from . import _native


@dataclass(frozen=True)
class Var:
    name: str
    type: str  # string, path, uint, bool, choice, micros, fraction, size, faults, stripe
    default: str  # what unset means, as a user writes it
    range: str  # "0..256", "host|none|sim", "" when any text goes
    reader: str  # libcxlkit, python, preload or mpi
    doc: str


# Read by the Python package alone (the native table holds every other one).
_PYTHON: tuple[Var, ...] = (
    Var("CXLKIT_PROCFS_ROOT", "path", "/proc", "", "python", "root of procfs (numa_maps for audit)"),
    Var("CXLKIT_HOST_ID", "string", "", "", "python",
        "host id in a shared pool: a slot number or a host name (default: derived from the "
        "machine id)"),
    Var("CXLKIT_POOL", "string", "cxlkit-default", "", "python",
        "the embedded pool: a name under /dev/shm, or a path"),
    Var("CXLKIT_COHERENCE", "choice", "host", "host|none|sim", "python",
        "how pools are opened: host (one coherence domain), none (hosts that do not share "
        "caches: writers flush, readers invalidate) or sim (none, on a simulated cache per "
        "host id: tests)"),
    Var("CXLKIT_RANK", "uint", "", "", "python",
        "this process's rank in a cxlkit.msg job (default: the MPI launcher's)"),
    Var("CXLKIT_SIZE", "uint", "", "", "python", "ranks in the job (default: the MPI launcher's)"),
    Var("CXLKIT_JOB", "string", "", "", "python",
        "job name: ranks with the same name on one pool form one job"),
    Var("CXLKIT_PRELOAD_LIB", "path", "", "", "python",
        "the libcxlkit_preload.so `cxlkit run --stripe` preloads (default: beside cxlkit._native)"),
)


def _native_vars() -> tuple[Var, ...]:
    return tuple(Var(e.name, e.type, e.default, e.range, e.reader, e.doc)
                 for e in _native.config_table())


TABLE: tuple[Var, ...] = _native_vars() + _PYTHON
# name -> (default, meaning), the shape the readers of single variables use
ENV: dict[str, tuple[str, str]] = {v.name: (v.default, v.doc) for v in TABLE}


@dataclass(frozen=True)
class Setting:
    var: Var
    value: str | None  # the environment's, None when unset or empty
    why: str  # "" when well-formed (or not checked here), else the one-line refusal

    @property
    def effective(self) -> str:
        return self.value if self.value is not None else self.var.default


def settings() -> list[Setting]:
    """Every variable with the environment's value now; native ones checked by the native
    table's parser (the one that refuses them where they are read)."""
    checked = {e.name: e for e in _native.config_table()}
    out = []
    for v in TABLE:
        e = checked.get(v.name)
        raw = os.environ.get(v.name) or None
        out.append(Setting(v, raw, e.why if e is not None else ""))
    return out


@dataclass(frozen=True)
class Config:
    sysfs_root: Path
    procfs_root: Path
    host_id: str
    pool: str
    simd: str
    coherence: str


def config() -> Config:
    """Read the environment now (cheap; tests change it between calls)."""

    def get(name: str) -> str:
        return os.environ.get(name, ENV[name][0])

    return Config(
        sysfs_root=Path(get("CXLKIT_SYSFS_ROOT")),
        procfs_root=Path(get("CXLKIT_PROCFS_ROOT")),
        host_id=get("CXLKIT_HOST_ID"),
        pool=get("CXLKIT_POOL"),
        simd=get("CXLKIT_SIMD"),
        coherence=get("CXLKIT_COHERENCE"),
    )
