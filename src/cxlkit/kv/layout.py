"""Layout descriptors: what one pool block holds (BlockLayout, frozen and validated) and where its
bytes live in an engine's paged KV tensors (EngineTensors -> a native copy plan).

A block image is canonical: [layers][parts][tokens][kv_heads][head_dim], parts = K, V (2) or one
latent (MLA, 1). Engine tensors are described by axis letters: L layer, K part, B block,
T token-in-block, H kv head, D head dim. A FlashAttention-style per-layer cache is "KBTHD"
([2, num_blocks, block_size, heads, dim]); backends that put the block first use "BKTHD"; a
cross-layer cache (all layers of a block contiguous) is "BLKTHD". vLLM 0.32 hands connectors
[B, H, N, K+V] views per layer: cxlkit.integrations.vllm_pages cuts the K+V axis in two
("BHTKD") from the views' own strides.
"""
from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import _native

# dtype name -> (code in the packed descriptor, bytes per element)
DTYPES: dict[str, tuple[int, int]] = {
    "float32": (1, 4), "float16": (2, 2), "bfloat16": (3, 2), "float8_e4m3fn": (4, 1),
    "float8_e5m2": (5, 1), "int8": (6, 1), "uint8": (7, 1),
}
_CODE_TO_DTYPE = {code: name for name, (code, _) in DTYPES.items()}
_PACK = struct.Struct("<4sHHIIIIHH")  # magic, version, dtype, layers, heads, dim, tokens, parts, 0
_MAGIC = b"CXKV"
_VERSION = 1


def _positive_int(name: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"{name}: expected int, got {type(v).__name__}")
    if v <= 0:
        raise ValueError(f"{name}: must be > 0, got {v}")
    return v


@dataclass(frozen=True)
class BlockLayout:
    """The contents of one block: `block_tokens` tokens of KV for every layer of one model."""

    num_layers: int
    num_kv_heads: int
    head_dim: int
    dtype: str = "bfloat16"
    block_tokens: int = 16
    kv_parts: int = 2  # 2: K and V; 1: a single latent (MLA)

    def __post_init__(self) -> None:
        for name in ("num_layers", "num_kv_heads", "head_dim", "block_tokens", "kv_parts"):
            _positive_int(name, getattr(self, name))
        if self.kv_parts not in (1, 2):
            raise ValueError(f"kv_parts: must be 1 (MLA) or 2 (K and V), got {self.kv_parts}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype: {self.dtype!r} is not one of {sorted(DTYPES)}")
        if self.num_layers > 0xFFFF or self.block_tokens > 0xFFFFFF:
            raise ValueError("num_layers / block_tokens out of range")

    @property
    def itemsize(self) -> int:
        return DTYPES[self.dtype][1]

    @property
    def row_bytes(self) -> int:  # one token of one head
        return self.head_dim * self.itemsize

    @property
    def sub_block_bytes(self) -> int:  # one part of one layer: [tokens][heads][dim]
        return self.block_tokens * self.num_kv_heads * self.row_bytes

    @property
    def nbytes(self) -> int:
        return self.num_layers * self.kv_parts * self.sub_block_bytes

    def pack(self) -> bytes:
        return _PACK.pack(_MAGIC, _VERSION, DTYPES[self.dtype][0], self.num_layers,
                          self.num_kv_heads, self.head_dim, self.block_tokens, self.kv_parts, 0)

    @classmethod
    def unpack(cls, raw: bytes) -> BlockLayout:
        if len(raw) < _PACK.size:
            raise ValueError(f"layout descriptor: {len(raw)} bytes, need {_PACK.size}")
        magic, ver, code, layers, heads, dim, tokens, parts, _ = _PACK.unpack_from(raw)
        if magic != _MAGIC or ver != _VERSION or code not in _CODE_TO_DTYPE:
            raise ValueError("layout descriptor: not a cxlkit KV layout (magic/version/dtype)")
        return cls(layers, heads, dim, _CODE_TO_DTYPE[code], tokens, parts)

    def fingerprint(self) -> str:
        return hashlib.sha256(self.pack()).hexdigest()[:8]

    @classmethod
    def llama3_8b(cls, dtype: str = "bfloat16") -> BlockLayout:
        return cls(num_layers=32, num_kv_heads=8, head_dim=128, dtype=dtype)


PACKED_LAYOUT_BYTES = _PACK.size


def _tensor_info(t: Any) -> tuple[int, tuple[int, ...], tuple[int, ...], int, str]:
    """(address, shape, strides in bytes, itemsize, dtype name) of a torch tensor or numpy array."""
    if hasattr(t, "data_ptr") and hasattr(t, "element_size"):  # torch, without importing it
        if t.device.type != "cpu":
            raise ValueError(f"KV tensor on {t.device}: the copy engine needs host memory")
        isz = t.element_size()
        return (t.data_ptr(), tuple(t.shape), tuple(s * isz for s in t.stride()), isz,
                str(t.dtype).removeprefix("torch."))
    if isinstance(t, np.ndarray):
        return (t.ctypes.data, t.shape, t.strides, t.itemsize, t.dtype.name)
    raise TypeError(f"KV tensor: expected a torch.Tensor or numpy.ndarray, got {type(t).__name__}")


def _checked_axes(layout: Any, entries: Sequence[tuple[Any, int | None, int | None]],
                  axes: str) -> dict[str, int]:
    """The size each axis letter must have; raises when axes cannot describe the layout."""
    if not isinstance(layout, BlockLayout):
        raise TypeError("layout: expected a BlockLayout")
    if len(set(axes)) != len(axes) or set(axes) - set("LKBTHD") or "B" not in axes \
            or "D" not in axes or "T" not in axes:
        raise ValueError(f"axes: {axes!r} must use each of L,K,B,T,H,D at most once and "
                         "include B, T and D")
    want = {"L": layout.num_layers, "K": layout.kv_parts, "T": layout.block_tokens,
            "H": layout.num_kv_heads, "D": layout.head_dim}
    for letter in "LKH":
        if letter not in axes and want[letter] != 1 and not (
                letter in "LK" and all(e[1 if letter == "L" else 2] is not None
                                       for e in entries)):
            raise ValueError(f"axes: {axes!r} lacks {letter} but the layout has "
                             f"{want[letter]} of it")
    return want


def _runs(base_of_row: Any, off_of_row: Any, row: int) -> Any:
    """Rows that follow each other in both the image and the engine merged into one run:
    (tensor, offset in it, offset in the image, bytes) per run."""
    nrows = len(base_of_row)
    brk = np.ones(nrows, dtype=bool)
    brk[1:] = (base_of_row[1:] != base_of_row[:-1]) | (off_of_row[1:] != off_of_row[:-1] + row)
    starts = np.flatnonzero(brk)
    lengths = np.diff(np.append(starts, nrows)) * row
    return np.stack([base_of_row[starts], off_of_row[starts], starts * row, lengths], axis=1)


class EngineTensors:
    """An engine's paged KV cache for one BlockLayout, compiled into a native copy plan.

    entries: (tensor, layer, part) triples; layer/part None when the tensor has that axis.
    Use the constructors per_layer / per_layer_kv / cross_layer."""

    def __init__(self, layout: BlockLayout, entries: Sequence[tuple[Any, int | None, int | None]],
                 axes: str) -> None:
        want = _checked_axes(layout, entries, axes)
        self.layout = layout
        self.axes = axes
        self._keep = [e[0] for e in entries]  # the plan holds raw addresses: keep tensors alive
        L, P = layout.num_layers, layout.kv_parts
        rows_per_sub = layout.block_tokens * layout.num_kv_heads
        nrows = L * P * rows_per_sub
        base_of_row = np.full(nrows, -1, dtype=np.int64)
        off_of_row = np.zeros(nrows, dtype=np.int64)
        bases, strides, extents = [], [], []
        self.num_blocks = None
        t_idx, h_idx = np.meshgrid(np.arange(layout.block_tokens), np.arange(layout.num_kv_heads),
                                   indexing="ij")
        for bi, (t, layer, part) in enumerate(entries):
            ptr, shape, bstrides, isz, dname = _tensor_info(t)
            if dname != layout.dtype:
                raise ValueError(f"KV tensor {bi}: dtype {dname}, layout says {layout.dtype}")
            if len(shape) != len(axes):
                raise ValueError(f"KV tensor {bi}: {len(shape)} dims for axes {axes!r}")
            dims = dict(zip(axes, shape))
            st = dict(zip(axes, bstrides))
            for letter, n in want.items():
                if letter in dims and dims[letter] != n:
                    raise ValueError(f"KV tensor {bi}: axis {letter} has {dims[letter]}, "
                                     f"layout needs {n}")
            if st["D"] != isz:
                raise ValueError(f"KV tensor {bi}: head_dim (D) must be contiguous")
            if any(s < 0 for s in bstrides):
                raise ValueError(f"KV tensor {bi}: negative strides are not supported")
            nb = dims["B"]
            self.num_blocks = nb if self.num_blocks is None else min(self.num_blocks, nb)
            extent = sum((n - 1) * s for n, s in zip(shape, bstrides)) + isz
            bases.append(ptr)
            strides.append(st["B"])
            extents.append(extent)
            layers = [layer] if layer is not None else range(L)
            parts = [part] if part is not None else range(P)
            for lyr in layers:
                for prt in parts:
                    row0 = (lyr * P + prt) * rows_per_sub
                    rows = slice(row0, row0 + rows_per_sub)
                    if (base_of_row[rows] != -1).any():
                        raise ValueError(f"KV tensor {bi}: layer {lyr} part {prt} given twice")
                    off = (lyr * st.get("L", 0) + prt * st.get("K", 0)
                           + t_idx * st["T"] + h_idx * st.get("H", 0))
                    base_of_row[rows] = bi
                    off_of_row[rows] = off.reshape(-1)
        if (base_of_row == -1).any():
            missing = int(np.argmax(base_of_row == -1)) // rows_per_sub
            raise ValueError(f"KV tensors: layer {missing // P} part {missing % P} not given")
        segs = _runs(base_of_row, off_of_row, layout.row_bytes)
        self.plan = _native.KVPlan(np.array(bases, dtype=np.uint64),
                                   np.array(strides, dtype=np.int64),
                                   np.array(extents, dtype=np.uint64),
                                   np.ascontiguousarray(segs, dtype=np.int64), layout.nbytes)

    # -- constructors for the engine layouts -----------------------------------------------
    @classmethod
    def per_layer(cls, layout: BlockLayout, tensors: Sequence[Any],
                  axes: str = "KBTHD") -> EngineTensors:
        """One tensor per layer holding K and V (vLLM's register_kv_caches)."""
        if len(tensors) != layout.num_layers:
            raise ValueError(f"tensors: {len(tensors)} given for {layout.num_layers} layers")
        return cls(layout, [(t, i, None) for i, t in enumerate(tensors)], axes)

    @classmethod
    def per_layer_kv(cls, layout: BlockLayout, keys: Sequence[Any], values: Sequence[Any],
                     axes: str = "BTHD") -> EngineTensors:
        """Separate K and V tensors per layer (e.g. transformers' DynamicCache, viewed in blocks)."""
        if len(keys) != layout.num_layers or len(values) != layout.num_layers:
            raise ValueError(f"keys/values: need {layout.num_layers} of each")
        return cls(layout, [(t, i, 0) for i, t in enumerate(keys)]
                   + [(t, i, 1) for i, t in enumerate(values)], axes)

    @classmethod
    def cross_layer(cls, layout: BlockLayout, tensor: Any, axes: str = "BLKTHD") -> EngineTensors:
        """One tensor for all layers (vLLM's register_cross_layers_kv_cache)."""
        return cls(layout, [(tensor, None, None)], axes)

    # -- copies ------------------------------------------------------------------------------
    def check_blocks(self, block_ids: Sequence[int]) -> np.ndarray:
        ids = np.asarray(block_ids, dtype=np.int64).reshape(-1)
        if ids.size and (ids.min() < 0 or ids.max() >= self.num_blocks):
            raise IndexError(f"block ids must be in [0, {self.num_blocks}), got "
                             f"{ids.min()}..{ids.max()}")
        return ids

    def gather(self, block_ids: Sequence[int], image_addrs: Sequence[int], flags: int = 0) -> None:
        self.plan.gather(self.check_blocks(block_ids), np.asarray(image_addrs, dtype=np.uint64),
                         flags)

    def scatter(self, block_ids: Sequence[int], image_addrs: Sequence[int], flags: int = 0,
                want_sums: bool = False) -> list[int]:
        return self.plan.scatter(self.check_blocks(block_ids),
                                 np.asarray(image_addrs, dtype=np.uint64), flags, want_sums)

    def checksum(self, block_id: int) -> int:
        return self.plan.checksum_engine(int(self.check_blocks([block_id])[0]))

    @property
    def nsegs(self) -> int:
        return self.plan.nsegs
