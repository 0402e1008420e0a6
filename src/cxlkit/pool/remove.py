"""Removing a pool's backing file after proving it is a cxlkit pool no live host holds, and
listing the embedded pools in /dev/shm."""
from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from pathlib import Path

from .. import _native
from ..errors import PoolCorruptError, PoolError, PoolFormatError, PoolVersionError
from .diagnose import _not_a_pool
from .options import _SHM, resolve


@dataclass(frozen=True)
class RemovedPool:
    """What remove() deleted: the pool file, its size, its host slots in use and not."""
    path: str
    size: int
    hosts_live: int
    hosts_dead: int
    damaged: str | None = None  # why its superblock could not be checked (force=True)


def remove(path_or_name: str | os.PathLike[str], *, force: bool = False) -> RemovedPool:
    """Delete a pool file (the shm_unlink of pools) once it is proven one: a regular file (a
    symbolic link is not followed) whose superblock has the pool magic and a valid checksum
    and geometry, read without mapping it. Processes that map it keep it until they close.

    Refused, nothing removed: FileNotFoundError if there is none; PoolFormatError for
    anything that is not a pool (no magic, a link, a FIFO, a device: devices are never
    removed, ValueError for memfd and /dev/dax names); PoolError (EBUSY) while a host uses it
    (a process of this machine holds one of its slots open, or a host of another machine beat
    within the lease timeout) unless force; PoolCorruptError / PoolVersionError when the
    magic is there but the checksum or geometry is broken, or the version is unknown, unless
    force (it cannot be proven a pool; with force it is removed as one)."""
    path = resolve(path_or_name)
    if path.startswith("memfd:") or path.startswith("/dev/dax"):
        raise ValueError(f"pool {path}: only pool files can be removed")
    d = _probe(path)
    damaged = _unprovable(path, d, force)
    if d.hosts_live and not force:
        raise PoolError(errno.EBUSY, f"in use by {d.hosts_live} live host(s) (see them with "
                        f"`cxlkit pool hosts {path}`): nothing removed; stop them first, or "
                        "force it (`cxlkit pool rm --force`, or force=True): their mappings "
                        "keep the memory, new opens find no pool", path)
    st = os.lstat(path)
    if (st.st_dev, st.st_ino) != (d.dev, d.ino):
        raise PoolError(errno.ESTALE, "replaced while it was being checked: nothing removed; "
                        "run it again", path)
    os.unlink(path)
    return RemovedPool(path, d.size, d.hosts_live, d.hosts_dead, damaged)


def _probe(path: str) -> _native.PoolProbeInfo:
    """The native probe of path; what is not a regular file is a typed refusal."""
    try:
        return _native.pool_probe(path)
    except FileNotFoundError:
        raise FileNotFoundError(errno.ENOENT, "no pool file there: nothing removed", path) \
            from None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise PoolFormatError(e.errno, f"a symbolic link to {os.path.realpath(path)}, not a "
                                  "pool file: nothing removed (a link is never followed); "
                                  "delete the link with rm(1), or name the pool file", path) \
                from None
        if e.errno == errno.ENODEV:
            why = _not_a_pool(path) or "not a regular file"
            raise PoolFormatError(e.errno, f"{why}: nothing removed", path) from None
        raise


def _unprovable(path: str, d: _native.PoolProbeInfo, force: bool) -> str | None:
    """None for a whole superblock; else why it cannot be proven a pool, which only force
    accepts (and only with the pool magic in place)."""
    err = d.superblock
    if err == 0:
        return None
    if err == errno.EMEDIUMTYPE:
        raise PoolFormatError(err, "not a cxlkit pool (no pool superblock): nothing removed",
                              path)
    why = {errno.EBADMSG: f"corrupt superblock ({d.why})",
           errno.ENXIO: "shorter than the pool its superblock describes (truncated)",
           errno.EPROTONOSUPPORT: f"format version {d.version}, which this cxlkit cannot "
                                  "check"}.get(err, os.strerror(err))
    if force:
        return why
    cls = PoolVersionError if err == errno.EPROTONOSUPPORT else PoolCorruptError
    raise cls(err, f"pool magic found but {why}: it cannot be proven a pool, nothing removed; "
              "remove it anyway with `cxlkit pool rm --force`, or force=True", path)


# cxlkit's other files in /dev/shm: subgroup manifests and lock files, a pool's temporary
_NOT_POOLS = (".json", ".lock")


def embedded_pools(shm: str | os.PathLike[str] = _SHM) -> list[Path]:
    """Pool files in /dev/shm (or shm) named cxlkit-*: every such regular file but cxlkit's
    manifests, lock files and temporaries (a pool whose superblock is damaged is listed)."""
    d = Path(shm)
    if not d.is_dir():
        return []
    return sorted(p for p in d.glob("cxlkit-*") if p.is_file() and ".tmp." not in p.name
                  and not p.name.endswith(_NOT_POOLS))
