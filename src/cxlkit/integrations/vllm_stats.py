"""The vLLM connector's transfer counters as vLLM collects them (KVConnectorStats): what the
worker loaded, saved and failed to, per logging interval."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vllm.distributed.kv_transfer.kv_connector.v1.metrics import KVConnectorStats  # type: ignore

_STAT_KEYS = ("loaded_blocks", "load_failed_blocks", "saved_blocks", "load_s", "save_s",
              "save_failed_blocks", "save_sync_blocks", "save_cancelled_blocks")


@dataclass
class CxlkitConnectorStats(KVConnectorStats):
    """Worker-side transfer counters of one logging interval (vLLM sums them over workers and
    logs them; `vllm serve` shows them in its periodic stats line)."""

    def __post_init__(self) -> None:
        for k in _STAT_KEYS:
            self.data.setdefault(k, 0)

    def reset(self) -> None:
        self.data = {k: 0 for k in _STAT_KEYS}

    def aggregate(self, other: Any) -> CxlkitConnectorStats:
        for k in _STAT_KEYS:
            self.data[k] = self.data.get(k, 0) + other.data.get(k, 0)
        return self

    def reduce(self) -> dict[str, int | float]:
        return {k: self.data.get(k, 0) for k in _STAT_KEYS}

    def is_empty(self) -> bool:
        return not any(self.data.get(k) for k in _STAT_KEYS if not k.endswith("_s"))
