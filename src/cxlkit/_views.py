"""Zero-copy numpy / torch views of any cxlkit object that exports the buffer protocol
(policy.Buffer, pool.PoolObject). numpy and torch are imported only when a view is asked for."""
from __future__ import annotations

import math
from typing import Any


class Views:
    __slots__ = ()

    def numpy(self, dtype: Any = "uint8", shape: tuple[int, ...] | None = None) -> Any:
        """A zero-copy numpy view (the whole range, or the leading `shape` elements)."""
        import numpy as np

        count = -1 if shape is None else math.prod(shape)
        arr = np.frombuffer(self, dtype=np.dtype(dtype), count=count)
        return arr if shape is None else arr.reshape(shape)

    def torch(self, dtype: Any = None, shape: tuple[int, ...] | None = None) -> Any:
        """A zero-copy torch view (torch.uint8 unless dtype is given); a read-only range gives
        a tensor torch warns about: do not write to it."""
        import torch

        count = -1 if shape is None else math.prod(shape)
        t = torch.frombuffer(self, dtype=dtype if dtype is not None else torch.uint8,
                             count=count)
        return t if shape is None else t.reshape(shape)
