"""Zero-copy numpy views of any cxlkit object that exports the buffer protocol (policy.Buffer,
pool.PoolObject); numpy is imported only when a view is asked for. torch tensors over the same
memory: cxlkit.integrations.views.tensor(obj, dtype, shape) (torch lives above this floor)."""
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
