"""Checks a release libcxlkit.so: no test machinery (crash points, protocol mutations, the
CXLKIT_MUTATE switch) in its symbols or strings, and every exported cxk_* symbol declared in
include/cxlkit.h (and every function declared there exported).
Run by `make release-check` on build/release/libcxlkit.so; exit 1 with one line per problem."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTING_HEADER = ROOT / "include" / "cxlkit_testing.h"
PUBLIC_HEADER = ROOT / "include" / "cxlkit.h"
SWITCHES = (b"CXLKIT_MUTATE",)


def declared(header: Path) -> set[str]:
    """The functions a header declares with CXK_API."""
    return set(re.findall(r"CXK_API\b[^;(]*?\b(cxk_\w+)\s*\(", header.read_text()))


def exported(lib: Path) -> set[str]:
    """The cxk_* functions a shared library exports."""
    out = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True,
                         text=True, check=True).stdout
    return {m.group(1) for m in re.finditer(r"\sT\s(cxk_\w+)(?:@@?\S+)?$", out, re.M)}


def problems(lib: Path) -> list[str]:
    found = []
    syms = exported(lib)
    for name in sorted(syms & declared(TESTING_HEADER)):
        found.append(f"{lib}: exports test machinery {name} (cxlkit_testing.h)")
    data = lib.read_bytes()
    for switch in SWITCHES:
        if switch in data:
            found.append(f"{lib}: holds the test switch {switch.decode()}")
    public = declared(PUBLIC_HEADER)
    for name in sorted(syms - public - declared(TESTING_HEADER)):
        found.append(f"{lib}: exports {name}, which include/cxlkit.h does not declare")
    for name in sorted(public - syms):
        found.append(f"{lib}: does not export {name}, which include/cxlkit.h declares")
    return found


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: release_check.py LIBCXLKIT.so", file=sys.stderr)
        return 2
    lib = Path(argv[1])
    found = problems(lib)
    for line in found:
        print(line, file=sys.stderr)
    if not found:
        print(f"{lib}: release build, {len(exported(lib))} exported cxk_* functions, "
              "no test machinery")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
