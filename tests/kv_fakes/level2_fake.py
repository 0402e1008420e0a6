"""Backends for cxlkit.kv.level2.Level2 that fail on purpose: a dict (the store as it should
behave), one whose every call raises, and one whose calls block until released."""
from __future__ import annotations

import threading
from collections.abc import Sequence


class DictBackend:
    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.closed = False

    def put(self, key: str, data: bytes) -> None:
        self.data[key] = bytes(data)

    def get(self, key: str) -> bytes | None:
        return self.data.get(key)

    def exists(self, keys: Sequence[str]) -> list[bool]:
        return [k in self.data for k in keys]

    def close(self) -> None:
        self.closed = True


class FailingBackend(DictBackend):
    """Every call raises, as a client whose master is gone does."""

    def put(self, key: str, data: bytes) -> None:
        raise ConnectionError("master gone")

    def get(self, key: str) -> bytes | None:
        raise ConnectionError("master gone")

    def exists(self, keys: Sequence[str]) -> list[bool]:
        raise ConnectionError("master gone")


class HungBackend(DictBackend):
    """Calls wait until release is set (a store that stopped answering); entered is set when
    a call is waiting."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.entered = threading.Event()

    def _hang(self) -> None:
        self.entered.set()
        self.release.wait(60)  # bounded: the test sets it long before

    def put(self, key: str, data: bytes) -> None:
        self._hang()
        super().put(key, data)

    def exists(self, keys: Sequence[str]) -> list[bool]:
        self._hang()
        return super().exists(keys)
