"""Sizing: how much memory a vector database or a KV cache needs, and which tiers of this
machine (free memory per node) could hold it — one node alone, or all of them interleaved."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

from . import topology
from .units import parse_count

# Bits per element: sizes are computed in bits so that int4 / binary vectors stay exact.
DTYPE_BITS = {
    "fp64": 64, "float64": 64, "fp32": 32, "float32": 32, "tf32": 32,
    "fp16": 16, "float16": 16, "half": 16, "bf16": 16, "bfloat16": 16,
    "fp8": 8, "e4m3": 8, "e5m2": 8, "int8": 8, "uint8": 8,
    "int4": 4, "fp4": 4, "binary": 1,
}
# Counts: cxlkit.units (vectors decimal, 100M = 10**8; tokens in powers of two, 32k = 32768)


def dtype_bits(dtype: str) -> int:
    try:
        return DTYPE_BITS[dtype.lower()]
    except (KeyError, AttributeError):
        raise KeyError(f"dtype {dtype!r}: expected one of {', '.join(DTYPE_BITS)}") from None


def vectordb_bytes(vectors: int, dim: int, dtype: str = "fp32", overhead: float = 1.5) -> int:
    """Raw vectors x the index/metadata overhead factor (1.5 = 50% on top of the raw data)."""
    _positive(vectors=vectors, dim=dim)
    if isinstance(overhead, bool) or not isinstance(overhead, (int, float)) or overhead < 1:
        raise ValueError(f"overhead {overhead!r}: expected a factor >= 1 (1.5 = +50%)")
    raw_bits = vectors * dim * dtype_bits(dtype)
    return -(-int(raw_bits * overhead) // 8)


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, dtype: str = "bf16") -> int:
    """K and V of every layer: 2 * layers * kv_heads * head_dim * bytes per element."""
    _positive(layers=layers, kv_heads=kv_heads, head_dim=head_dim)
    return -(-2 * layers * kv_heads * head_dim * dtype_bits(dtype) // 8)


def _positive(**vals: int) -> None:
    for k, v in vals.items():
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"{k} {v!r}: expected an int")
        if v <= 0:
            raise ValueError(f"{k} {v}: expected > 0")


@dataclass(frozen=True)
class TierFit:
    node: int
    kind: str
    total_bytes: int | None
    free_bytes: int | None
    fits: bool          # the whole need fits in this node's free memory
    share: float | None  # need / free


@dataclass(frozen=True)
class SizingPlan:
    what: str
    need_bytes: int
    detail: dict
    tiers: tuple[TierFit, ...]
    free_bytes_all: int
    fits_all: bool  # interleaved or striped over every node listed

    @property
    def fitting_nodes(self) -> list[int]:
        return [t.node for t in self.tiers if t.fits]

    def verdict(self) -> str:
        if self.fitting_nodes:
            return "fits on node " + ", ".join(
                f"{t.node} ({t.kind})" for t in self.tiers if t.fits)
        if self.fits_all:
            return ("fits only across all nodes together (weighted interleave or stripe over "
                    + ",".join(str(t.node) for t in self.tiers) + ")")
        return (f"does not fit: needs {self.need_bytes / 2**30:.1f} GiB, this machine has "
                f"{self.free_bytes_all / 2**30:.1f} GiB free in all nodes")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["fitting_nodes"] = self.fitting_nodes
        d["verdict"] = self.verdict()
        return d


def tiers_free(nodes: Sequence[int] | None = None) -> list[tuple[int, str, int | None, int | None]]:
    """(node, kind, total bytes, free bytes) for the memory nodes (or `nodes`)."""
    # node facts from topology (the floor below): the benchmarks read the same discover()
    facts = {n.id: n for n in topology.discover().nodes if n.has_memory}
    chosen = list(facts) if nodes is None else list(nodes)
    for n in chosen:
        if n not in facts:
            raise ValueError(f"node {n} has no memory on this machine (nodes with memory: "
                             f"{','.join(map(str, facts))})")
    return [(n, facts[n].kind, facts[n].mem_total_bytes, facts[n].mem_free_bytes)
            for n in chosen]


def fit(what: str, need: int, detail: dict,
        tiers: Sequence[tuple[int, str, int | None, int | None]]) -> SizingPlan:
    out = []
    for node, kind, total, free in tiers:
        out.append(TierFit(node, kind, total, free, free is not None and need <= free,
                           None if not free else need / free))
    all_free = sum(t.free_bytes or 0 for t in out)
    return SizingPlan(what, need, detail, tuple(out), all_free, need <= all_free)


def vectordb(vectors: int | str, dim: int, dtype: str = "fp32", overhead: float = 1.5, *,
             nodes: Sequence[int] | None = None,
             tiers: Sequence[tuple[int, str, int | None, int | None]] | None = None
             ) -> SizingPlan:
    n = parse_count(vectors, "vectors")
    need = vectordb_bytes(n, dim, dtype, overhead)
    raw = -(-n * dim * dtype_bits(dtype) // 8)
    detail = {"vectors": n, "dim": dim, "dtype": dtype, "overhead": overhead, "raw_bytes": raw}
    return fit("vectordb", need, detail, tiers if tiers is not None else tiers_free(nodes))


def kv(layers: int, kv_heads: int, head_dim: int, tokens: int | str, dtype: str = "bf16", *,
       nodes: Sequence[int] | None = None,
       tiers: Sequence[tuple[int, str, int | None, int | None]] | None = None) -> SizingPlan:
    t = parse_count(tokens, "tokens", tokens=True)
    per = kv_bytes_per_token(layers, kv_heads, head_dim, dtype)
    detail = {"layers": layers, "kv_heads": kv_heads, "head_dim": head_dim, "tokens": t,
              "dtype": dtype, "bytes_per_token": per}
    return fit("kv", per * t, detail, tiers if tiers is not None else tiers_free(nodes))
