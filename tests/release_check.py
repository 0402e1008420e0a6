"""Checks a release libcxlkit.so: no test machinery (crash points, protocol mutations, the
CXLKIT_MUTATE switch) in its symbols or strings, every exported cxk_* symbol declared in
include/cxlkit.h (and every function declared there exported), each under the version the
symbol map native/libcxlkit.map gives it; and the map lists exactly the headers' functions.
Run by `make release-check` on build/release/libcxlkit.so; exit 1 with one line per problem.
`release_check.py --write-map` writes the map from the headers (after adding a function)."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTING_HEADER = ROOT / "include" / "cxlkit_testing.h"
PUBLIC_HEADER = ROOT / "include" / "cxlkit.h"
SYMBOL_MAP = ROOT / "native" / "libcxlkit.map"
PUBLIC_VERSION, TESTING_VERSION = "CXLKIT_0", "CXLKIT_TESTING_0"
SWITCHES = (b"CXLKIT_MUTATE",)


def declared(header: Path) -> set[str]:
    """The functions a header declares with CXK_API."""
    return set(re.findall(r"CXK_API\b[^;(]*?\b(cxk_\w+)\s*\(", header.read_text()))


def exported_versions(lib: Path) -> dict[str, str]:
    """The cxk_* functions a shared library exports -> their symbol version ("" if none)."""
    out = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True,
                         text=True, check=True).stdout
    return {m.group(1): m.group(2) or "" for m in
            re.finditer(r"\sT\s(cxk_\w+)(?:@@?(\S+))?$", out, re.M)}


def exported(lib: Path) -> set[str]:
    """The cxk_* functions a shared library exports."""
    return set(exported_versions(lib))


def map_text() -> str:
    """The version script the headers call for: the public functions under PUBLIC_VERSION,
    everything else local; the test machinery under TESTING_VERSION (testing builds only)."""
    def names(header: Path) -> str:
        return "".join(f"    {n};\n" for n in sorted(declared(header)))
    return ("/* libcxlkit.map — the exported symbols of libcxlkit and their versions; written by\n"
            " * tests/release_check.py --write-map from include/cxlkit.h and cxlkit_testing.h,\n"
            " * checked by make release-check. Until the first release every function is in CXLKIT_0;\n * a release freezes its node, and functions added later go under a new one. */\n"
            f"{PUBLIC_VERSION} {{\n  global:\n{names(PUBLIC_HEADER)}  local: *;\n}};\n"
            f"{TESTING_VERSION} {{\n  global:\n{names(TESTING_HEADER)}}} {PUBLIC_VERSION};\n")


def listed(version_script: str) -> set[str]:
    """The cxk_* names a version script lists."""
    return set(re.findall(r"^\s*(cxk_\w+);", version_script, re.M))


def map_problems() -> list[str]:
    found = []
    want = declared(PUBLIC_HEADER) | declared(TESTING_HEADER)
    have = listed(SYMBOL_MAP.read_text())
    for name in sorted(want - have):
        found.append(f"{SYMBOL_MAP}: does not list {name} (run tests/release_check.py --write-map)")
    for name in sorted(have - want):
        found.append(f"{SYMBOL_MAP}: lists {name}, which no header declares")
    return found


def problems(lib: Path) -> list[str]:
    found = map_problems()
    versions = exported_versions(lib)
    syms = set(versions)
    for name in sorted(syms & declared(PUBLIC_HEADER)):
        if versions[name] != PUBLIC_VERSION:
            found.append(f"{lib}: exports {name} as version {versions[name] or 'none'}, "
                         f"not {PUBLIC_VERSION}")
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
    if argv[1:] == ["--write-map"]:
        SYMBOL_MAP.write_text(map_text())
        print(f"{SYMBOL_MAP}: {len(listed(map_text()))} functions")
        return 0
    if len(argv) != 2:
        print("usage: release_check.py LIBCXLKIT.so | --write-map", file=sys.stderr)
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
