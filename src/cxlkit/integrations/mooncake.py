"""Mooncake Store as the level below the KV pool (cxlkit.kv.level2): its Python store client
(mooncake-transfer-engine-non-cuda, `make mooncake-venv`), TCP transport by default.

    level2 = open_level2({"master": "127.0.0.1:50051",
                          "metadata": "http://127.0.0.1:8080/metadata"})

Config keys: master (host:port of mooncake_master's RPC), metadata (its HTTP metadata server
URL, or "P2PHANDSHAKE"), hostname (this client's address, default 127.0.0.1), protocol ("tcp"),
device (RDMA devices, for protocol "rdma"), segment_bytes (memory this process lends the store,
0 or at least 16 MiB; default 256 MiB), buffer_bytes (the client's transfer buffer, at least
16 MiB), timeout_s (bound on each fetch, default 2), queue_blocks (demotions waiting, default 64).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..kv.level2 import Level2

_MIN_BYTES = 16 << 20  # Mooncake refuses smaller segments and buffers
_KEYS = {"master", "metadata", "hostname", "protocol", "device", "segment_bytes",
         "buffer_bytes", "timeout_s", "queue_blocks"}


class MooncakeError(ConnectionError):
    """A Mooncake Store call failed (Level2 turns it into a miss and one log line)."""


class MooncakeBackend:
    """cxlkit.kv.level2.Backend over a MooncakeDistributedStore client."""

    def __init__(self, master: str, metadata: str, *, hostname: str = "127.0.0.1",
                 protocol: str = "tcp", device: str = "", segment_bytes: int = 256 << 20,
                 buffer_bytes: int = 64 << 20) -> None:
        from mooncake.store import MooncakeDistributedStore

        self._where = f"Mooncake master {master}"
        self._st = MooncakeDistributedStore()
        r = self._st.setup(hostname, metadata, segment_bytes, buffer_bytes, protocol, device,
                           master)
        if r != 0:
            raise MooncakeError(f"{self._where}: setup returned {r}; check that mooncake_master "
                                f"runs there with its metadata server at {metadata}")

    def put(self, key: str, data: bytes | memoryview) -> None:
        r = self._st.put(key, data)
        if r != 0:
            raise MooncakeError(f"{self._where}: put of {key} returned {r}")

    def get(self, key: str) -> bytes | None:
        return self._st.get(key) or None  # b"" = absent or failed

    def exists(self, keys: Sequence[str]) -> list[bool]:
        got = self._st.batch_is_exist(list(keys))
        if any(x < 0 for x in got):
            raise MooncakeError(f"{self._where}: batch_is_exist returned {min(got)}")
        return [x == 1 for x in got]

    def close(self) -> None:
        self._st.close()


def _bytes_at_least(cfg: dict, key: str, default: int, zero_ok: bool) -> int:
    v = int(cfg.get(key, default))
    if v < 0 or (v < _MIN_BYTES and not (zero_ok and v == 0)):
        raise ValueError(f"kv level2 {key}: {v} bytes; Mooncake needs at least {_MIN_BYTES}"
                         + (" (or 0)" if zero_ok else ""))
    return v


def open_level2(cfg: dict[str, Any]) -> Level2:
    """A Level2 over Mooncake Store from a config dict (the connector's extra_config "level2").
    Bad keys raise ValueError now; the connection is made in the background, and until it is
    up, or whenever it fails, the level answers misses."""
    unknown = set(cfg) - _KEYS
    if unknown:
        raise ValueError(f"kv level2 config: unknown keys {sorted(unknown)}; known: "
                         f"{sorted(_KEYS)}")
    for k in ("master", "metadata"):
        if not isinstance(cfg.get(k), str) or not cfg[k]:
            raise ValueError(f"kv level2 config: {k!r} is required (a str), e.g. "
                             + ('"127.0.0.1:50051"' if k == "master"
                                else '"http://127.0.0.1:8080/metadata"'))
    seg = _bytes_at_least(cfg, "segment_bytes", 256 << 20, zero_ok=True)
    buf = _bytes_at_least(cfg, "buffer_bytes", 64 << 20, zero_ok=False)

    def connect() -> MooncakeBackend:
        return MooncakeBackend(cfg["master"], cfg["metadata"],
                               hostname=str(cfg.get("hostname", "127.0.0.1")),
                               protocol=str(cfg.get("protocol", "tcp")),
                               device=str(cfg.get("device", "")), segment_bytes=seg,
                               buffer_bytes=buf)

    return Level2(connect, queue_blocks=int(cfg.get("queue_blocks", 64)),
                  timeout_s=float(cfg.get("timeout_s", 2.0)),
                  name=f"level 2 (Mooncake master {cfg['master']})")
