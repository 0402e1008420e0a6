"""Zero-copy torch tensors over cxlkit memory (policy.Buffer, pool.PoolObject, anything that
exports the buffer protocol). The tensor holds the exporter's buffer export for its whole life,
so the memory's close() raises BufferError while any tensor over it lives (as numpy views do)."""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch


def tensor(obj: Any, dtype: torch.dtype | None = None,
           shape: tuple[int, ...] | None = None) -> torch.Tensor:
    """A torch view of obj's bytes (torch.uint8 unless dtype; the whole range, or the leading
    `shape` elements). A read-only range gives a tensor torch warns about: do not write to it."""
    dtype = torch.uint8 if dtype is None else dtype
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype {dtype!r}: expected a torch.dtype")
    itemsize = torch.empty((), dtype=dtype).element_size()
    raw = np.frombuffer(obj, dtype=np.uint8)  # holds the export: close() refuses meanwhile
    count = raw.size // itemsize if shape is None else math.prod(shape)
    if count * itemsize > raw.size:
        raise ValueError(f"shape {shape}: {count * itemsize} bytes of {dtype}, but {obj!r} "
                         f"has {raw.size}")
    # torch.from_numpy keeps the array (and so the export) alive for the storage's life;
    # torch.frombuffer did not, and a close() under a live tensor unmapped its memory
    t = torch.from_numpy(raw[:count * itemsize]).view(dtype)
    return t if shape is None else t.reshape(shape)
