"""The shared memory pool: named objects in one memory range that processes and hosts map
together. pool (Pool, PoolObject), options (paths, host slots, open arguments), records,
diagnose (why an open failed), remove, upgrade (version 1 to the current format)."""
from .. import _native  # noqa: F401 (pool._native, as the module had it)
from ..errors import (ObjectNotPublishedError, PoolCorruptError, PoolError, PoolForeignError,
                      PoolFormatError, PoolFullError, PoolGeometryError, PoolHostStuckError,
                      PoolNoSpaceError, PoolReadOnlyWarning, PoolTooSmallError, PoolVersionError,
                      StaleObjectError, deprecated_name)
from .options import MiB, OpenOptions, _check_name, machine_tag, open_options, parse_size, resolve
from .pool import Pool, PoolObject
from .records import FsckReport, HostInfo, ObjectInfo, PoolStat
from .remove import RemovedPool, embedded_pools, remove

__all__ = [
    "Pool", "PoolObject", "FsckReport", "HostInfo", "ObjectInfo", "PoolStat", "RemovedPool",
    "OpenOptions", "open_options", "embedded_pools", "remove", "machine_tag", "parse_size",
    "resolve", "MiB", "ObjectNotPublishedError", "PoolCorruptError", "PoolError",
    "PoolForeignError", "PoolFormatError", "PoolFullError", "PoolGeometryError",
    "PoolHostStuckError", "PoolNoSpaceError", "PoolReadOnlyWarning", "PoolTooSmallError",
    "PoolVersionError", "StaleObjectError",
]


def __getattr__(name: str) -> type:
    return deprecated_name(__name__, name)
