"""The kernel's weighted-interleave weights: writing them, handing them back to the kernel's
auto mode, and computing them from measured bandwidths the way the kernel does."""
from __future__ import annotations

import math
from collections.abc import Mapping as _MappingABC
from collections.abc import Sequence
from pathlib import Path

from .. import topology
from .._config import config


def restore_kernel_auto_weights(*, sysfs_root: Path | None = None) -> None:
    """Turn the kernel's weighted-interleave auto mode back on (Linux 6.16+, root): the kernel
    then sets the weights from the firmware's bandwidth again. FileNotFoundError when the
    kernel has no auto mode (restore the previous weights with write_kernel_weights instead)."""
    _, f = topology.weighted_interleave_auto(sysfs_root or config().sysfs_root)
    if f is None:
        d = (sysfs_root or config().sysfs_root) / topology.WEIGHTED_INTERLEAVE_DIR
        raise FileNotFoundError(2, "this kernel has no weighted-interleave auto mode (Linux "
                                   "6.16+): restore the previous weights instead", str(d))
    f.write_text("1\n")


def write_kernel_weights(weights: dict[int, int], *, sysfs_root: Path | None = None) -> None:
    """Write the system-wide weighted-interleave weights (root only). Raises
    PermissionError naming the file when not allowed, FileNotFoundError when the kernel has
    no weighted interleave or the node does not exist."""
    d = (sysfs_root or config().sysfs_root) / topology.WEIGHTED_INTERLEAVE_DIR
    for n, w in weights.items():
        if isinstance(w, bool) or not isinstance(w, int) or not 1 <= w <= 255:
            raise ValueError(f"weight of node {n}: {w!r}, expected an int in 1..255")
    if not d.is_dir():
        raise FileNotFoundError(2, "this kernel has no weighted interleave (Linux 6.9+)", str(d))
    for n in weights:
        if not (d / f"node{n}").exists():
            raise FileNotFoundError(2, f"node {n} has no weighted-interleave weight", str(d / f"node{n}"))
    for n, w in weights.items():
        (d / f"node{n}").write_text(f"{w}\n")


# ---- bandwidth-proportional weights (the kernel's bandwidth-tiering rule, mm/mempolicy.c
# reduce_interleave_weights, Linux 6.16+); cxlkit.bench.weights reads them off bench results.
# The kernel's "weightiness": weights land in 1..32 before the GCD reduction; small enough to
# cycle through the nodes quickly, large enough to follow the bandwidth ratio.
KERNEL_MAX_WEIGHT = 32


def weights_from(bandwidths: _MappingABC, nodes: Sequence[int] | None = None, *,
                 max_weight: int = KERNEL_MAX_WEIGHT) -> dict[int, int]:
    """Integer weights proportional to bandwidth, like the kernel's auto weights: each node
    gets floor(max_weight * bw / total bw), at least 1, then all are divided by their GCD.
    bandwidths: {node: bandwidth} in any one unit (a bench result: cxlkit.bench.weights_from);
    nodes picks and orders the nodes (KeyError for one without a figure)."""
    if isinstance(max_weight, bool) or not isinstance(max_weight, int) \
            or not 1 <= max_weight <= 255:
        raise ValueError(f"max_weight {max_weight!r}: expected an int in 1..255")
    if not isinstance(bandwidths, _MappingABC):
        raise TypeError(f"expected a bench result or a {{node: bandwidth}} mapping, got "
                        f"{type(bandwidths).__name__}")
    bw = {}
    for n, v in bandwidths.items():
        if isinstance(n, bool) or not isinstance(n, int):
            raise TypeError(f"node {n!r}: expected an int")
        bw[n] = v
    if nodes is not None:
        missing = [n for n in nodes if n not in bw]
        if missing:
            raise KeyError(f"no bandwidth for node(s) {','.join(map(str, missing))} "
                           f"(have {','.join(map(str, sorted(bw)))})")
        bw = {n: bw[n] for n in nodes}
    if not bw:
        raise ValueError("no nodes to weigh")
    for n, v in bw.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
                or v <= 0:
            raise ValueError(f"bandwidth of node {n}: {v!r}, expected a finite number > 0")
    total = sum(bw.values())
    raw = {n: max(1, math.floor(max_weight * v / total)) for n, v in bw.items()}
    g = math.gcd(*raw.values())
    return {n: w // g for n, w in raw.items()}
