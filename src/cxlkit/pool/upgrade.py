"""`cxlkit pool upgrade`: a version 1 pool (fixed per-host partitions) made version 2 in
place. No object moves: each partition becomes one run of its host's extents, the new claim
lines and extent maps go after the data, and one store of the version word commits
(docs/pool-format.md, "Upgrading a version 1 pool")."""
from __future__ import annotations

import errno
import os
from dataclasses import dataclass

from .. import _native
from ..errors import (PoolCorruptError, PoolError, PoolForeignError, PoolFormatError,
                     PoolFullError, PoolInUseError, PoolVersionError)
from .options import resolve


@dataclass(frozen=True)
class UpgradeReport:
    path: str
    from_version: int         # 1: upgraded now; 2: it already was version 2
    version: int              # the version it has now
    extent_bytes: int         # each v1 partition is a run of extents of this size
    nextents: int
    objects: int              # published objects kept (readable by name, same bytes)
    metadata_offset: int      # where the claim lines and extent maps went
    cut_bytes: int            # bytes of the last partition's free tail they took


def upgrade(path_or_name: str | os.PathLike[str], *, group: bool = False) -> UpgradeReport:
    """Upgrade the version 1 pool at path_or_name to the current version in place; a pool
    already at the current version is left as it is (report.from_version says so).
    group=True accepts a pool shared with a group. Raises PoolInUseError while a v1 host is
    alive, PoolFullError when the new metadata needs the tail of the last partition and it
    holds objects, PoolCorruptError / PoolFormatError / PoolVersionError for a damaged,
    foreign or unknown pool (nothing written then)."""
    path = resolve(path_or_name)
    if path.startswith("memfd:"):
        raise ValueError(f"pool {path}: a memfd pool lives only as long as its processes; "
                         "only pool files and devices are upgraded")
    u = _native.pool_upgrade(path, group)
    if u.errno:
        raise _upgrade_error(u.errno, u, path)
    return UpgradeReport(path=path, from_version=u.from_version,
                         version=_native.POOL_FORMAT_VERSION, extent_bytes=u.extent_bytes,
                         nextents=u.nextents, objects=u.objects, metadata_offset=u.meta_off,
                         cut_bytes=u.cut_bytes)


def _upgrade_error(err: int, u: _native.PoolUpgradeInfo, path: str) -> OSError:
    host = f"host slot {u.busy_host}" + (f" ({u.busy_tag!r})" if u.busy_tag else "")
    if err == errno.EBUSY:
        e = PoolInUseError(err, f"cannot upgrade: {host} is alive (its heartbeat is younger "
                           "than the lease timeout); stop its processes and run "
                           f"`cxlkit pool upgrade {path}` again", path)
        e.host = u.busy_host
        return e
    if err == errno.ENOSPC:
        return PoolFullError(err, f"cannot upgrade: the version 2 metadata needs the end of "
                             f"{host}'s partition, and only its last {u.cut_bytes} bytes "
                             "are free; destroy objects of that host (the ones created last) "
                             "and run it again", path)
    if err == errno.EFBIG:
        return PoolError(err, "cannot upgrade: the partitions' size gives more extents than a "
                         "version 2 extent map holds", path)
    if err == errno.EBADMSG:
        return PoolCorruptError(err, "cannot upgrade a corrupt pool (superblock or a block "
                                "chain fails its checks); nothing was written", path)
    if err == errno.EMEDIUMTYPE:
        return PoolFormatError(err, "not a cxlkit pool (foreign or blank superblock)", path)
    if err == errno.EPROTONOSUPPORT:
        return PoolVersionError(err, "not a pool format this cxlkit can upgrade (version 1 "
                                "only)", path)
    if err == errno.ENXIO:
        return PoolCorruptError(err, "pool file truncated: shorter than the pool it holds",
                                path)
    if err == errno.EPERM:
        return PoolForeignError(err, "pool file of another user, or writable by every user "
                                "(pass group=True for one shared with a group)", path)
    if err == errno.ENOENT:
        return FileNotFoundError(err, "no such pool", path)
    if err == errno.EINVAL:
        return PoolError(err, "only a pool of one backing (file or device) is upgraded", path)
    return OSError(err, os.strerror(err), path)
