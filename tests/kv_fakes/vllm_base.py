"""A stand-in for the few vLLM modules cxlkit.integrations.vllm imports (the connector base
classes, SupportsHMA, the stats base), so the connector's fast tests run without vLLM.
import_connector() uses the real vLLM when it is installed; otherwise it lends these modules
to sys.modules only while the connector module is imported, so nothing else in the test
session sees a `vllm` package."""
from __future__ import annotations

import enum
import importlib
import sys
import types
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

_BASE = "vllm.distributed.kv_transfer.kv_connector.v1.base"
_METRICS = "vllm.distributed.kv_transfer.kv_connector.v1.metrics"


class KVConnectorRole(enum.Enum):
    SCHEDULER = 0
    WORKER = 1


class KVConnectorMetadata:
    pass


@dataclass
class KVConnectorStats:
    data: dict[str, Any] = field(default_factory=dict)


class SupportsHMA(ABC):
    @abstractmethod
    def request_finished_all_groups(self, request: Any, block_ids: tuple[list[int], ...]
                                    ) -> tuple[bool, dict[str, Any] | None]:
        raise NotImplementedError


class KVConnectorBase_V1:
    def __init__(self, vllm_config: Any, role: Any, kv_cache_config: Any = None) -> None:
        if vllm_config.kv_transfer_config is None:
            raise ValueError("kv_transfer_config must be set for KVConnectorBase_V1")
        self._connector_metadata = None
        self._vllm_config = vllm_config
        self._kv_transfer_config = vllm_config.kv_transfer_config
        self._kv_cache_config = kv_cache_config
        self._role = role

    @property
    def role(self) -> Any:
        return self._role

    def bind_connector_metadata(self, connector_metadata: Any) -> None:
        self._connector_metadata = connector_metadata

    def clear_connector_metadata(self) -> None:
        self._connector_metadata = None

    def _get_connector_metadata(self) -> Any:
        assert self._connector_metadata is not None
        return self._connector_metadata

    def has_connector_metadata(self) -> bool:
        return self._connector_metadata is not None


def _modules() -> dict[str, types.ModuleType]:
    names = ["vllm", "vllm.distributed", "vllm.distributed.kv_transfer",
             "vllm.distributed.kv_transfer.kv_connector",
             "vllm.distributed.kv_transfer.kv_connector.v1", _BASE, _METRICS]
    mods = {n: types.ModuleType(n) for n in names}
    for n in names[:-2]:
        mods[n].__path__ = []  # a package, so its children import
    base = mods[_BASE]
    for cls in (KVConnectorRole, KVConnectorMetadata, SupportsHMA, KVConnectorBase_V1):
        setattr(base, cls.__name__, cls)
    mods[_METRICS].KVConnectorStats = KVConnectorStats
    return mods


def have_vllm() -> bool:
    try:
        importlib.import_module(_BASE)
        return True
    except ImportError:
        return False


def import_connector() -> types.ModuleType:
    """cxlkit.integrations.vllm, over the real vLLM when installed, else over this stand-in."""
    name = "cxlkit.integrations.vllm"
    if name in sys.modules or have_vllm():
        return importlib.import_module(name)
    mods = _modules()
    sys.modules.update(mods)
    try:
        return importlib.import_module(name)
    finally:
        for n in mods:
            sys.modules.pop(n, None)
