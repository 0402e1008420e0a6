"""cxlkit: CXL and tiered memory for AI and HPC on Linux."""
from . import _native
from .policy import (Buffer, Policy, PlacementAudit, Residency, WeightedInterleaveUnsupported,
                     WeightMismatchError, alloc, bind, default, interleave, place, preferred,
                     residency, stripe, weighted)
from .topology import Topology, discover
from .errors import (ObjectNotPublished, PoolCorruptError, PoolError, PoolFormatError,
                     PoolFullError, PoolTooSmallError, PoolVersionError, StaleObjectError)
from .errors import PoolForeignError, PoolGeometryError, PoolNoSpaceError
from .pool import Pool, PoolObject
# ---- the typed records of the pool face, the memory error, the one size parser
from .errors import InsufficientMemoryError
from .pool import FsckReport, ObjectInfo, PoolStat
from .units import parse_count, parse_size

__version__ = _native.version()

__all__ = [
    "Buffer", "Policy", "PlacementAudit", "Residency", "WeightedInterleaveUnsupported",
    "WeightMismatchError", "alloc", "bind", "default", "interleave", "place", "preferred",
    "residency", "stripe", "weighted", "Topology", "discover", "__version__",
    "Pool", "PoolObject", "PoolError", "PoolFormatError", "PoolCorruptError", "PoolVersionError",
    "PoolTooSmallError", "PoolFullError", "ObjectNotPublished", "StaleObjectError",
    "InsufficientMemoryError", "ObjectInfo", "PoolStat", "FsckReport", "parse_size",
    "parse_count",
    "PoolForeignError", "PoolGeometryError", "PoolNoSpaceError",
]

# ---- pool format v2: host slots as a user sees them ----
from .pool import HostInfo  # noqa: E402

__all__ += ["HostInfo"]

# ---- upgrading a version 1 pool, reading one, the release fence ----
from .errors import HostReleasedError, PoolInUseError, PoolReadOnlyError  # noqa: E402
from .pool_upgrade import UpgradeReport  # noqa: E402
from .pool_upgrade import upgrade as upgrade_pool  # noqa: E402

__all__ += ["HostReleasedError", "PoolInUseError", "PoolReadOnlyError", "UpgradeReport",
            "upgrade_pool"]

# ---- untrusted pools: a stuck host, removal, messaging and RPC errors ----
from .errors import (MsgClosedError, MsgCorruptError, MsgError, MsgExistsError,  # noqa: E402
                     MsgMemoryError, MsgNotFoundError, MsgPermissionError, MsgPoolFullError,
                     MsgValueError, PeerLostError, PoolHostStuckError, RpcBusyError,
                     RpcCorruptError, RpcError, RpcPoolFullError, RpcServerLostError,
                     RpcTimeoutError)
from .pool import RemovedPool  # noqa: E402

__all__ += ["PoolHostStuckError", "RemovedPool", "MsgError", "MsgCorruptError",
            "MsgExistsError", "MsgNotFoundError", "MsgPermissionError", "MsgClosedError",
            "MsgMemoryError", "MsgValueError", "MsgPoolFullError", "PeerLostError", "RpcError",
            "RpcBusyError", "RpcCorruptError", "RpcPoolFullError", "RpcServerLostError",
            "RpcTimeoutError"]
