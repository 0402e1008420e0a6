"""cxlkit: CXL and tiered memory for AI and HPC on Linux."""
from . import _moved, _native
from .errors import (CxlkitError, HostReleasedError, InsufficientMemoryError, MsgClosedError,
                     MsgCorruptError, MsgError, MsgExistsError, MsgMemoryError, MsgNotFoundError,
                     MsgPermissionError, MsgPoolFullError, MsgValueError, MsgVersionError,
                     ObjectNotPublishedError,
                     PeerLostError, PoolCorruptError, PoolError, PoolForeignError,
                     PoolFormatError, PoolFullError, PoolGeometryError, PoolHostStuckError,
                     PoolInUseError, PoolNoSpaceError, PoolReadOnlyError, PoolTooSmallError,
                     PoolVersionError, RpcBusyError, RpcCorruptError, RpcError, RpcPoolFullError,
                     RpcServerLostError, RpcTimeoutError, StaleObjectError, TruncationError,
                     WeightedInterleaveUnsupportedError, WeightMismatchError, WindowRangeError,
                     deprecated_name)
from .errors import (BudgetExceededError, CapacityError, PathFullError, PathIOError,
                     PathVanishedError, PlanError, RegistryError, SpillUsageError,
                     SubgroupCorruptError, SubgroupError)
from .placement import (Buffer, PlacementAudit, Policy, Residency, alloc, bind, default,
                        interleave, place, preferred, residency, stripe, weighted)
from .pool import FsckReport, HostInfo, ObjectInfo, Pool, PoolObject, PoolStat, RemovedPool
from .pool.upgrade import UpgradeReport
from .pool.upgrade import upgrade as upgrade_pool
from .topology import Topology, discover
from .units import parse_count, parse_size

_moved.install()
__version__ = _native.version()

__all__ = [
    "Buffer", "Policy", "PlacementAudit", "Residency", "alloc", "bind", "default", "interleave",
    "place", "preferred", "residency", "stripe", "weighted", "Topology", "discover",
    "__version__", "Pool", "PoolObject", "ObjectInfo", "PoolStat", "FsckReport", "HostInfo",
    "RemovedPool", "UpgradeReport", "upgrade_pool", "parse_size", "parse_count",
    # every error: one root, each also the builtin it would be without cxlkit
    "CxlkitError", "InsufficientMemoryError", "WeightedInterleaveUnsupportedError",
    "WeightMismatchError", "RegistryError",
    "PoolError", "PoolFormatError", "PoolCorruptError", "PoolVersionError", "PoolTooSmallError",
    "PoolFullError", "ObjectNotPublishedError", "StaleObjectError", "PoolForeignError",
    "PoolGeometryError", "PoolNoSpaceError", "HostReleasedError", "PoolInUseError",
    "PoolReadOnlyError", "PoolHostStuckError",
    "MsgError", "MsgCorruptError", "MsgExistsError", "MsgNotFoundError", "MsgPermissionError",
    "MsgClosedError", "MsgMemoryError", "MsgValueError", "MsgPoolFullError", "MsgVersionError",
    "PeerLostError", "TruncationError", "WindowRangeError",
    "RpcError", "RpcBusyError", "RpcCorruptError", "RpcPoolFullError", "RpcServerLostError",
    "RpcTimeoutError",
    "BudgetExceededError", "PlanError", "SpillUsageError", "SubgroupError", "PathFullError", "CapacityError",
    "PathIOError", "PathVanishedError", "SubgroupCorruptError",
]


def __getattr__(name: str) -> type:
    """Old error names (ObjectNotPublished, ...) for one release, with a DeprecationWarning."""
    return deprecated_name(__name__, name)
