"""The GPU copy matrix's copier over torch.cuda (cxlkit.bench.copy.CudaCopier): torch lives
on this floor, so `cxlkit bench copy` builds it here and passes it to the benchmark."""
from __future__ import annotations

import time
from collections.abc import Sequence

import torch

from .views import tensor


def torch_copier() -> TorchCuda | None:
    """A copier when torch drives a CUDA device here, else None (the benchmark says why)."""
    return TorchCuda() if torch.cuda.is_available() else None


class TorchCuda:
    """CudaCopier over torch.cuda: pinned (cudaHostRegister) host memory, one stream per
    device, timed with CUDA events."""

    def __init__(self) -> None:
        self.torch = torch

    def devices(self) -> list[int]:
        return list(range(self.torch.cuda.device_count()))

    def copy_seconds(self, host, devs: Sequence[int], nbytes: int, direction: str) -> float:
        torch = self.torch
        h = tensor(host)
        work = []
        for i, d in enumerate(devs):  # device i uses its own nbytes of the host buffer
            dev = torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{d}")
            work.append((h[i * nbytes:(i + 1) * nbytes], dev, torch.cuda.Stream(device=d)))
        for d in devs:
            torch.cuda.synchronize(d)
        t0 = time.perf_counter()
        for hp, dev, s in work:
            with torch.cuda.stream(s):
                if direction == "h2d":
                    dev.copy_(hp, non_blocking=True)
                else:
                    hp.copy_(dev, non_blocking=True)
        for _, _, s in work:
            s.synchronize()
        return time.perf_counter() - t0
