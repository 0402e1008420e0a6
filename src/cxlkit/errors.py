"""cxlkit's typed errors, and the one place where a native errno becomes one of them.

Every class derives from CxlkitError and from the builtin a caller would catch without cxlkit
(an OSError subclass, KeyError, ValueError, MemoryError). Native calls return -errno; the
binding raises the matching OSError subclass; the tables here turn the errnos whose meaning
depends on the call (ENOSPC from a create is a full pool) into cxlkit's own classes, keeping
errno, message and path."""
from __future__ import annotations

import errno
import warnings


class CxlkitError(Exception):
    """The root of every error cxlkit raises on purpose: `except cxlkit.CxlkitError` catches
    them all; each is also the builtin it would be without cxlkit."""


class PoolError(CxlkitError, OSError):
    """A pool could not be used as asked (the subclasses say why)."""


class PoolFormatError(PoolError):
    """Not a cxlkit pool: a foreign or blank superblock."""


class PoolCorruptError(PoolError):
    """The superblock fails its checksum or describes an impossible layout."""


class PoolVersionError(PoolError):
    """The pool was formatted by another on-media format version."""


class PoolTooSmallError(PoolError):
    """The device or size cannot hold the pool's metadata and partitions."""


class PoolFullError(PoolError):
    """This host's partition or name table has no room for the object."""


class ObjectNotPublishedError(PoolError):
    """The name is reserved by a creator that has not published the object yet."""


class StaleObjectError(PoolError):
    """The object was destroyed or replaced while it was being read."""


# ---- pool reliability ----------------------------------------------------------
class PoolForeignError(PoolError):
    """The pool file belongs to another user or every user can write it (pass group= to
    share a pool with a group)."""


class PoolNoSpaceError(PoolError):
    """The pool file would not fit the free space of its filesystem (overcommit=True skips
    the check)."""


class PoolGeometryError(PoolError):
    """The pool exists with another size or max_hosts than asked for."""


_OPEN_ERRORS = {
    errno.EMEDIUMTYPE: (PoolFormatError, "not a cxlkit pool (foreign or blank superblock)"),
    errno.EBADMSG: (PoolCorruptError, "corrupt pool superblock"),
    errno.EPROTONOSUPPORT: (PoolVersionError,
                            "unsupported pool format version (made by another cxlkit)"),
    errno.ERANGE: (PoolTooSmallError, "too small for a pool (metadata and partitions)"),
    errno.EBUSY: (PoolError, "host slot belongs to another host (tag differs) or no slot is free"),
    errno.EDOM: (PoolError, "host_id is not a slot of this pool (0 .. its max_hosts - 1)"),
    errno.EINVAL: (PoolError, "bad geometry: device size not a multiple of its alignment, "
                              "stripes of unequal size, or not the backing list it was made with"),
    errno.EAGAIN: (PoolError, "could not start the pool's heartbeat thread (out of threads)"),
    errno.ENOTRECOVERABLE: (PoolCorruptError, "this host's lock in the pool is damaged (not "
                                              "recoverable): `cxlkit pool fsck --repair` resets it"),
    errno.ENXIO: (PoolCorruptError, "pool file truncated: shorter than the pool it holds"),
    errno.EPERM: (PoolForeignError, "pool file of another user, or writable by every user"),
    errno.ENOSPC: (PoolNoSpaceError, "larger than the free space of its filesystem"),
}
_OBJECT_ERRORS = {
    errno.ENOSPC: (PoolFullError, "no room in this host's partition or name table"),
    errno.EAGAIN: (ObjectNotPublishedError, "not published yet"),
    errno.ESTALE: (StaleObjectError, "destroyed or replaced while being read"),
    errno.EBADMSG: (PoolCorruptError, "corrupt object: header fields outside its block, or "
                                      "payload checksum mismatch or dropped"),
    errno.ENOTRECOVERABLE: _OPEN_ERRORS[errno.ENOTRECOVERABLE],
    errno.EILSEQ: (PoolError, "object name is not UTF-8"),
    errno.EMFILE: (PoolError, "this host's lease table is full: close objects, or create the "
                              "pool with more lease_slots"),
    errno.EDQUOT: (PoolNoSpaceError, "the filesystem under the pool file has no room for the "
                                     "extents (a sparse pool: made with overcommit=True)"),
}
_CREATE_ERRORS = {**_OBJECT_ERRORS,
                  errno.EAGAIN: (PoolError, "too many objects of this host await publishing")}


def native_reason(e: OSError) -> str | None:
    """The reason the native library gave with an errno (a refused CXLKIT_* value names the
    variable), or None when it gave only the errno: then a table's guess says why."""
    import os

    return e.strerror if e.strerror and e.strerror != os.strerror(e.errno or 0) else None


def _typed(e: OSError, table: dict[int, tuple[type, str]]) -> OSError:
    if e.errno in table:
        cls, why = table[e.errno]
        return cls(e.errno, native_reason(e) or why, e.filename)
    return e


# ---- memory placement ------------------------------------------------------------
class InsufficientMemoryError(CxlkitError, MemoryError):
    """An allocation cannot fit in the memory its policy allows (would run into the OOM killer).
    nbytes: asked for; nodes: the nodes the policy may use; available: bytes they can give."""

    def __init__(self, msg: str, *, nbytes: int, nodes: tuple[int, ...], available: int) -> None:
        super().__init__(msg)
        self.nbytes = nbytes
        self.nodes = nodes
        self.available = available


class WeightedInterleaveUnsupportedError(CxlkitError, OSError):
    """The kernel has no MPOL_WEIGHTED_INTERLEAVE (Linux 6.9+)."""


class WeightMismatchError(CxlkitError, ValueError):
    """weighted() asked for ratios the kernel's system-wide weights do not give."""


class RegistryError(CxlkitError, ValueError):
    """The preload's registry file is not one the library wrote (names the path and the
    field)."""


# ---- messaging (cxlkit.msg: comm, ring, rpc) ------------------------------------------------
class MsgError(CxlkitError, OSError):
    """A messaging call failed (the subclasses say why)."""


class PeerLostError(MsgError, TimeoutError):
    """A rank the call waited on is gone (its process ended, or its heartbeat stopped), or the
    call's timeout passed. `rank` names it (-1 when no one rank is to blame)."""

    def __init__(self, rank: int, message: str) -> None:
        super().__init__(errno.ETIMEDOUT, message)
        self.rank = rank


class MsgVersionError(MsgError):
    """A rank of the job runs a library whose messaging format differs from this one's (a
    job mixing cxlkit versions): every rank must run the same version."""


class TruncationError(MsgError):
    """The message was longer than the receive buffer; `count` is its length and the buffer
    holds its first bytes."""

    def __init__(self, count: int, capacity: int, source: int, tag: int) -> None:
        super().__init__(errno.EMSGSIZE, f"message of {count} bytes from rank {source} tag {tag} "
                                         f"does not fit the {capacity}-byte receive buffer")
        self.count, self.source, self.tag = count, source, tag


class WindowRangeError(MsgError):
    """A one-sided access outside the target rank's window."""


class RpcError(MsgError):
    """Every RPC failure: a server's error answer to a request (its message says which), or
    one of the subclasses below."""


class RpcServerLostError(RpcError, ConnectionError):
    """The RPC server is gone: closed its service, or its process ended."""


class RpcTimeoutError(RpcError, TimeoutError):
    """No RPC server answered in time (none running, or it is stuck)."""


_MSG_ERRORS = {
    errno.EBADMSG: (MsgError, "a peer wrote what no correct rank writes (corrupt ring, "
                              "message or window request)"),
    errno.ERANGE: (WindowRangeError, "outside the target rank's window"),
    errno.EPROTO: (MsgError, "not allowed in this epoch (e.g. unlock without lock, complete "
                             "without start)"),
    errno.EBUSY: (MsgError, "this rank of the job is held by a live process, or an object of "
                            "an earlier run belongs to another host (run `cxlkit pool fsck` there), "
                            "or a send from this pool memory still awaits its receiver"),
    errno.ENOSPC: (PoolFullError, "no room in this host's partition for rings or buffers"),
}


# ---- upgrading a version 1 pool --------------------------------------------
class PoolInUseError(PoolError):
    """The pool is in use by a live host (heartbeat younger than the lease timeout), so it
    cannot be upgraded now; `host` names the slot and its name."""


class PoolReadOnlyError(PoolError):
    """A write (create, publish, destroy, release, repair) to a version 1 pool, which opens
    read-only: `cxlkit pool upgrade PATH` makes it writable."""


class PoolReadOnlyWarning(UserWarning):
    """The pool opened read-only (a version 1 pool); the message names `cxlkit pool upgrade`."""


_READ_ONLY = (PoolReadOnlyError, "the pool is format version 1 and opened read-only: "
                                 "`cxlkit pool upgrade PATH` converts it in place to write")
_OBJECT_ERRORS[errno.EROFS] = _READ_ONLY
_CREATE_ERRORS[errno.EROFS] = _READ_ONLY


class HostReleasedError(PoolError):
    """This process's host slot was released (`cxlkit pool release`) while the host was
    stalled past the lease timeout: it no longer owns its slot, extents or objects, and every
    write is refused. Reopen the pool to attach again."""


_RELEASED = (HostReleasedError, "this host's slot was released (`cxlkit pool release`) while "
                                "it was stalled past the lease timeout: nothing was written; "
                                "reopen the pool to attach again")
_OBJECT_ERRORS[errno.EKEYREVOKED] = _RELEASED
_CREATE_ERRORS[errno.EKEYREVOKED] = _RELEASED


class PoolHostStuckError(PoolError, TimeoutError):
    """A live host's bakery registers (the words of the cross-host lock that keeps names
    unique) kept this host waiting, unchanged, for longer than any holder holds that lock: a
    stopped process of that host, or words it never wrote. Nothing was created and nothing
    stays held; `host` names its slot."""

    def __init__(self, host: int, message: str, filename: str | None = None) -> None:
        super().__init__(errno.ETIMEDOUT, message, filename)
        self.host = host


# ---- RPC (cxlkit.msg.rpc): every failure is an RpcError ---------------------------------------
class RpcBusyError(RpcError):
    """EBUSY: the service has a live server already, or every client slot is held by a live
    client (slots of clients proven dead are taken back)."""


class RpcCorruptError(RpcError):
    """EBADMSG: a service object or a client's ring holds what no correct peer writes (a head
    or cell outside its legal range); the message names the service and client slot."""


class RpcPoolFullError(RpcError, PoolFullError):
    """ENOSPC: no room in this host's partition of the pool for the service's objects."""


# ---- messaging: every error of cxlkit.msg is a MsgError (and the matching builtin) --------
class MsgCorruptError(MsgError):
    """A peer wrote what no correct rank writes (a ring cell, a message header, a rendezvous
    length outside the sender's buffer); `rank` names it (-1 when no one rank is known)."""

    def __init__(self, rank: int, message: str, filename: str | None = None) -> None:
        super().__init__(errno.EBADMSG, message, filename)
        self.rank = rank


class MsgExistsError(MsgError, FileExistsError):
    """An object the job needs is in the pool already and is not this rank's to remove (an
    earlier run's, damaged, or another host's)."""


class MsgNotFoundError(MsgError, FileNotFoundError):
    """An object of the job or a ring is not in the pool."""


class MsgPermissionError(MsgError, PermissionError):
    """The pool refused the access (another host's object, a read-only pool)."""


class MsgClosedError(MsgError, BrokenPipeError):
    """The ring's producer closed it and every cell was read."""


class MsgMemoryError(MsgError, MemoryError):
    """This process could not allocate what a message needs."""


class MsgValueError(MsgError, ValueError):
    """The library refused an argument (a ring geometry, an eager size, a wait policy)."""


class MsgPoolFullError(MsgError, PoolFullError):
    """No room in this host's partition for the job's rings, buffers or memory."""


# cxlkit.msg's table: _MSG_ERRORS, every class a MsgError
_MSG_COMM_ERRORS = {
    **_MSG_ERRORS,
    errno.EBADMSG: (MsgCorruptError, _MSG_ERRORS[errno.EBADMSG][1]),
    errno.ENOSPC: (MsgPoolFullError, _MSG_ERRORS[errno.ENOSPC][1]),
    errno.ETIMEDOUT: (PeerLostError, "a rank is gone or did not answer in time"),
}

# errnos whose class does not depend on the call, for messaging errors no table names
_MSG_BUILTIN = {
    errno.EEXIST: MsgExistsError, errno.ENOENT: MsgNotFoundError,
    errno.EPERM: MsgPermissionError, errno.EACCES: MsgPermissionError,
    errno.EROFS: MsgPermissionError, errno.EPIPE: MsgClosedError,
    errno.ENOMEM: MsgMemoryError, errno.EINVAL: MsgValueError,
}


def _msg_typed(e: OSError, where: str, table: dict[int, tuple[type, str]] | None = None) -> OSError:
    """A MsgError for a native OSError of messaging: the table's class and reason, else the
    class of its errno (MsgError for the rest), the message naming `where` (job, rank, pool,
    ring) and the native call's subject."""
    from os import strerror as _strerror

    subject = f" ({e.filename})" if e.filename and e.filename not in where else ""
    if table and e.errno in table:
        cls, why = table[e.errno]
        why = native_reason(e) or why
    else:
        cls, why = _MSG_BUILTIN.get(e.errno, MsgError), e.strerror or _strerror(e.errno or 0)
    if cls is PeerLostError:
        return PeerLostError(-1, f"{where}{subject}: {why}")
    if cls is MsgCorruptError:
        return MsgCorruptError(-1, f"{where}{subject}: {why}")
    if not (isinstance(cls, type) and issubclass(cls, MsgError)):
        cls = MsgError
    return cls(e.errno, f"{where}{subject}: {why}")


# ---- training: the footprint planner and the spilled optimizer subgroups --------------------
class BudgetExceededError(CxlkitError, MemoryError):
    """An allocation would take a class past the bytes its plan placed."""


class PlanError(CxlkitError, ValueError):
    """The training footprint cannot be placed (no tiers, a class with nowhere to go in this
    mode)."""


class SubgroupError(CxlkitError, OSError):
    """A subgroup could not be moved to or from a path; .path and .subgroup name them."""

    def __init__(self, err: int, why: str, path: str, subgroup: int | None = None) -> None:
        where = f"subgroup {subgroup} on " if subgroup is not None else ""
        super().__init__(err, f"{where}{path}: {why}", path)
        self.path, self.subgroup = path, subgroup


class PathFullError(SubgroupError):
    """ENOSPC: the path has no room for the subgroup."""


class CapacityError(PathFullError):
    """The paths' capacities (capacity_nbytes) hold fewer subgroups than the state has;
    .path names every path with its capacity."""


class PathIOError(SubgroupError):
    """EIO (or another device error) while reading or writing the subgroup."""


class PathVanishedError(SubgroupError):
    """The directory (or pool object) is gone."""


class SubgroupCorruptError(SubgroupError):
    """The subgroup's header or checksum does not match what the store wrote."""


class SpillUsageError(CxlkitError, RuntimeError):
    """A SubgroupStore called out of order (a step before bind, a second bind), or a host
    cache too small for the subgroup a step needs next."""


# old name -> its ...Error name; importable for one release with a DeprecationWarning
DEPRECATED_NAMES = {
    "ObjectNotPublished": "ObjectNotPublishedError",
    "WeightedInterleaveUnsupported": "WeightedInterleaveUnsupportedError",
    "BudgetExceeded": "BudgetExceededError",
}


def deprecated_name(module: str, name: str) -> type:
    """The class an old error name stands for, warning that `module`.`name` is going."""
    new = DEPRECATED_NAMES.get(name)
    if new is None:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    warnings.warn(f"{module}.{name} is deprecated: use cxlkit.{new} (the same class)",
                  DeprecationWarning, stacklevel=3)
    return globals()[new]


def __getattr__(name: str) -> type:
    return deprecated_name(__name__, name)
