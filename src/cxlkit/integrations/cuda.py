"""The GPU copy matrix's copier over torch (cxlkit.bench.copy.CudaCopier): torch lives on this
floor, so `cxlkit bench copy` builds it here and passes it to the benchmark. The same copier
drives CPU tensors (device "cpu": the code path without a GPU, as bench/gpu_check.py runs it)."""
from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence

import torch

from .views import tensor

DEVICE_TYPES = ("cuda", "cpu")


def torch_copier(device: str = "cuda") -> TorchCuda | None:
    """A copier for `device`: "cuda" when torch drives a CUDA device here, else None (the
    benchmark says why); "cpu" always (copies into CPU tensors, one after another)."""
    if device == "cuda" and not torch.cuda.is_available():
        return None
    return TorchCuda(device)


class TorchCuda:
    """CudaCopier over torch: host memory as given (pinned by its owner or pageable), one
    stream per listed device (a device listed k times gets k streams), timed on the host
    around the launches and the streams' synchronisation. device "cpu": the same copies into
    CPU tensors, no streams, so they run one after another."""

    def __init__(self, device: str = "cuda") -> None:
        if device not in DEVICE_TYPES:
            raise ValueError(f"device {device!r}: expected one of {', '.join(DEVICE_TYPES)}")
        self.torch = torch
        self.device = device

    def devices(self) -> list[int]:
        if self.device == "cpu":
            return [0]
        return list(range(self.torch.cuda.device_count()))

    def _target(self, d: int) -> tuple[str, torch.cuda.Stream | None]:
        if self.device == "cpu":
            return "cpu", None
        return f"cuda:{d}", self.torch.cuda.Stream(device=d)

    def copy_seconds(self, host, devs: Sequence[int], nbytes: int, direction: str) -> float:
        torch = self.torch
        h = tensor(host)
        work = []
        for i, d in enumerate(devs):  # entry i uses its own nbytes of the host buffer
            where, stream = self._target(d)
            dev = torch.empty(nbytes, dtype=torch.uint8, device=where)
            work.append((h[i * nbytes:(i + 1) * nbytes], dev, stream))
        self._sync(devs)
        t0 = time.perf_counter()
        for hp, dev, s in work:
            with torch.cuda.stream(s) if s is not None else contextlib.nullcontext():
                if direction == "h2d":
                    dev.copy_(hp, non_blocking=True)
                else:
                    hp.copy_(dev, non_blocking=True)
        for _, _, s in work:
            if s is not None:
                s.synchronize()
        return time.perf_counter() - t0

    def _sync(self, devs: Sequence[int]) -> None:
        if self.device == "cuda":
            for d in set(devs):
                self.torch.cuda.synchronize(d)
