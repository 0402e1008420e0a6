"""The PMPI shim built from native/mpi/*.c with an MPI's compiler wrapper, against the installed
libcxlkit (rpath to it): the one recipe the shim's tests share."""
from __future__ import annotations

import subprocess
from pathlib import Path

from cxlkit import _native

REPO = Path(__file__).resolve().parents[1]


def build_shim(cc: str, out: Path, mpi: str) -> Path:
    """libcxlkit_mpi_<mpi>.so in out, built with the compiler wrapper cc."""
    libdir = Path(_native.__file__).parent
    srcs = sorted(str(p) for p in (REPO / "native" / "mpi").glob("*.c"))
    so = out / f"libcxlkit_mpi_{mpi}.so"
    subprocess.run([cc, "-O2", "-shared", "-fPIC", f"-I{REPO / 'include'}",
                    f"-I{REPO / 'native'}", *srcs, f"-L{libdir}", "-lcxlkit",
                    f"-Wl,-rpath,{libdir}", "-o", str(so)], check=True)
    return so
