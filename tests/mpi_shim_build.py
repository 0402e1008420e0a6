"""The PMPI shim built from native/mpi/*.c with an MPI's compiler wrapper, against the installed
libcxlkit (rpath to it): the one recipe the shim's tests share."""
from __future__ import annotations

import subprocess
from pathlib import Path

from cxlkit import _native

REPO = Path(__file__).resolve().parents[1]


# (cc, mpi) -> the shim built first in this process: the shim's test modules share one build
# per MPI (its sources do not change during a run; the first out dir lives for the session)
_BUILT: dict[tuple[str, str], Path] = {}


def build_shim(cc: str, out: Path, mpi: str) -> Path:
    """libcxlkit_mpi_<mpi>.so built with the compiler wrapper cc: into out the first time this
    process asks for it, the same file after that."""
    if (cc, mpi) in _BUILT and _BUILT[cc, mpi].exists():
        return _BUILT[cc, mpi]
    libdir = Path(_native.__file__).parent
    srcs = sorted(str(p) for p in (REPO / "native" / "mpi").glob("*.c"))
    so = out / f"libcxlkit_mpi_{mpi}.so"
    subprocess.run([cc, "-O2", "-shared", "-fPIC", f"-I{REPO / 'include'}",
                    f"-I{REPO / 'native'}", *srcs, f"-L{libdir}", "-lcxlkit",
                    f"-Wl,-rpath,{libdir}", "-o", str(so)], check=True)
    _BUILT[cc, mpi] = so
    return so
