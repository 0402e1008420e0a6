"""Weighted-interleave weights from measured bandwidth: the kernel's bandwidth-tiering rule
(mm/mempolicy.c reduce_interleave_weights, Linux 6.16+) applied to cxlkit's own figures.
The rule itself is cxlkit.placement.weights_from (placement's floor, below the benchmarks); this
module reads it off result documents. `cxlkit policy weights --from-bench` uses weights_table()."""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from .. import topology
from ..placement import weights as _rule
from ..placement.weights import KERNEL_MAX_WEIGHT
BANDWIDTH_KINDS = ("read", "write", "copy", "nt_write")


def node_bandwidths(result: Mapping, kind: str = "min") -> dict[int, float]:
    """{node: GB/s} from a `cxlkit bench memory` result: the peak of `kind` over the thread
    sweep; kind "min" takes min(read, write) per node, as the kernel does with HMAT figures."""
    if kind != "min" and kind not in BANDWIDTH_KINDS:
        raise ValueError(f"kind {kind!r}: expected min or one of {', '.join(BANDWIDTH_KINDS)}")
    try:
        nodes = result["figures"]["nodes"]
    except (KeyError, TypeError):
        raise ValueError("not a `cxlkit bench memory` result: no figures.nodes") from None
    out: dict[int, float] = {}
    for n, entry in nodes.items():
        peak = entry.get("peak_gbps") or {}
        want = ("read", "write") if kind == "min" else (kind,)
        missing = [k for k in want if peak.get(k) is None]
        if missing:
            raise ValueError(f"node {n}: the result has no {'/'.join(missing)} bandwidth")
        out[int(n)] = min(float(peak[k]) for k in want)
    return out


def weights_from(result_or_bandwidths: Mapping, nodes: Sequence[int] | None = None, *,
                 max_weight: int = KERNEL_MAX_WEIGHT, kind: str = "min") -> dict[int, int]:
    """cxlkit.placement.weights_from (the kernel's rule) over a `cxlkit bench memory` result
    (its peak `kind` bandwidth per node, see node_bandwidths) or a {node: bandwidth} mapping."""
    if isinstance(result_or_bandwidths, Mapping) and "figures" in result_or_bandwidths:
        if isinstance(max_weight, bool) or not isinstance(max_weight, int) \
                or not 1 <= max_weight <= 255:
            raise ValueError(f"max_weight {max_weight!r}: expected an int in 1..255")
        result_or_bandwidths = node_bandwidths(result_or_bandwidths, kind)
    return _rule.weights_from(result_or_bandwidths, nodes, max_weight=max_weight)


def load_result(path: str | Path) -> dict:
    """A result document from `cxlkit bench memory --out/--json`; ValueError naming the path
    when it is not JSON or not such a result, FileNotFoundError when absent."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{p}: not JSON ({e.msg} at line {e.lineno})") from None
    if not isinstance(doc, dict) or doc.get("kind") != "memory" or "figures" not in doc:
        raise ValueError(f"{p}: not a `cxlkit bench memory` result")
    return doc


def weights_table(result_path: str | Path, *, max_weight: int = KERNEL_MAX_WEIGHT,
                  kind: str = "min") -> tuple[dict[int, int], dict[int, int] | None]:
    """(weights computed from the result, the kernel's current weights for those nodes or
    None when the kernel has no weighted interleave)."""
    computed = weights_from(load_result(result_path), max_weight=max_weight, kind=kind)
    current = topology.weighted_interleave_weights()
    if current is not None:
        current = {n: current.get(n, 1) for n in computed}
    return computed, current
