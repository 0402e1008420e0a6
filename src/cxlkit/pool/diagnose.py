"""Why a pool could not be opened: the native errno turned into a typed error naming the
path and what to do (not a pool, a foreign owner, no room on its filesystem, an old format)."""
from __future__ import annotations

import errno
import os
import stat as _stat

from pathlib import Path

from .. import _native
from ..errors import (_OPEN_ERRORS, PoolCorruptError, PoolError, PoolForeignError,
                      PoolFormatError, PoolNoSpaceError, PoolVersionError, _typed)


def _check_group(paths: list[str], gid: int) -> None:
    for p in paths:
        try:
            st = os.stat(p)
        except OSError:
            continue
        if os.path.isfile(p) and st.st_gid != gid:
            raise PoolForeignError(errno.EPERM, f"pool file of group {st.st_gid}, not the group "
                                   f"{gid} asked for (owner uid {st.st_uid}, mode "
                                   f"{oct(st.st_mode & 0o7777)})", p)


def _dax_devices() -> str:
    devs = sorted(str(d) for d in Path("/dev").glob("dax*"))
    return ", ".join(devs) if devs else "none"


def _fs_full(path: str, what: str) -> PoolNoSpaceError:
    """The filesystem under a sparse pool file has no room for what it needs next."""
    where = os.path.dirname(os.path.abspath(path)) or "/"
    vfs = os.statvfs(where)
    return PoolNoSpaceError(errno.ENOSPC, f"the filesystem at {where} has no room for {what} "
                            f"({vfs.f_bavail * vfs.f_frsize} bytes free; the pool file is sparse: "
                            "made with overcommit=True, or by an older cxlkit); free space there, "
                            "or make the pool without overcommit", path)


def _file_kind(mode: int) -> str:
    for test, what in ((_stat.S_ISFIFO, "a FIFO"), (_stat.S_ISSOCK, "a socket"),
                       (_stat.S_ISBLK, "a block device"), (_stat.S_ISCHR, "a character device"),
                       (_stat.S_ISDIR, "a directory"), (_stat.S_ISLNK, "a symbolic link"),
                       (_stat.S_ISREG, "a regular file")):
        if test(mode):
            return what
    return "not a regular file"


def _not_a_pool(path: str) -> str | None:
    """Why what is at path can be neither a pool file nor a devdax device, or None when it
    may be one (a regular file, a dax device) or is not there."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if _stat.S_ISLNK(st.st_mode):
        target = os.path.realpath(path)
        if os.path.islink(target):
            return f"a symbolic link that never ends (a loop through {target}): not a pool"
        inner = _not_a_pool(target)  # None: a pool file or device may be there, or nothing
        return None if inner is None else f"a symbolic link to {target}: {inner}"
    if _stat.S_ISCHR(st.st_mode) and not os.path.basename(path).startswith("dax"):
        return (f"a character device that is not a devdax device (dax devices present: "
                f"{_dax_devices()}), not a pool")
    if _stat.S_ISREG(st.st_mode) or _stat.S_ISCHR(st.st_mode):
        return None
    return f"{_file_kind(st.st_mode)}, not a pool file or device"


def _superblock_why(path: str) -> str:
    """The broken field of a pool file's superblock, as the probe names it ("" if unknown)."""
    try:
        return _native.pool_probe(path).why
    except OSError:
        return ""


def _open_error(e: OSError, paths: list[str], nbytes: int, slot: int,
                existed: list[bool] | None = None) -> OSError:
    path = e.filename or paths[0]
    if e.errno in (errno.ENODEV, errno.ENXIO, errno.ENOENT, errno.ELOOP, errno.EINVAL):
        why = _not_a_pool(path)
        if why is not None:
            return PoolFormatError(e.errno, why, path)
    if e.errno == errno.EBADMSG:
        why = _superblock_why(path)
        if why:
            return PoolCorruptError(e.errno, f"corrupt pool superblock: {why}; nothing was "
                                    "written. If its objects are not needed, remove it "
                                    f"(`cxlkit pool rm --force {path}`)", path)
    if e.errno == errno.EPERM and os.path.isfile(path):
        st = os.stat(path)
        return PoolForeignError(e.errno, f"pool file owned by uid {st.st_uid} (gid {st.st_gid}) "
                                f"with mode {oct(st.st_mode & 0o7777)}: only a file of this "
                                f"user (uid {os.geteuid()}) that no other user can write is "
                                "opened; pass group= to share one with a group", path)
    if e.errno in (errno.ENOSPC, errno.EDQUOT) and existed and any(existed):
        return _fs_full(path, "the blocks of its metadata (host slots, names, leases)")
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        where = os.path.dirname(os.path.abspath(path)) or "/"
        free = os.statvfs(where).f_bavail * os.statvfs(where).f_frsize
        return PoolNoSpaceError(errno.ENOSPC, f"{nbytes} bytes do not fit the filesystem at "
                                f"{where} ({free} bytes free); overcommit=True makes the file "
                                "sparse and reserves each extent when a host claims it", path)
    if e.errno == errno.ENOENT and path.startswith("/dev/") and not path.startswith("/dev/shm/"):
        return FileNotFoundError(e.errno, f"not a device: a pool under /dev must be an existing "
                                 f"device (dax devices present: {_dax_devices()})", path)
    if e.errno == errno.ENODEV and path.startswith("/dev/"):
        return PoolFormatError(e.errno, "a regular file where only devices live: not a pool",
                               path)
    if e.errno == errno.EPROTONOSUPPORT:
        found = _format_version(path)
        what = ("version 1 (fixed per-host partitions, made by an older cxlkit)" if found == 1
                else f"version {found}")
        if found == 1:
            return PoolVersionError(e.errno, f"pool format {what}: left the pool unchanged; "
                                    f"`cxlkit pool upgrade {path}` converts it to version "
                                    f"{_native.POOL_FORMAT_VERSION} in place (every object "
                                    "kept) once no host of it is running", path)
        return PoolVersionError(e.errno, f"pool format {what}: this cxlkit reads version "
                                f"{_native.POOL_FORMAT_VERSION} only and left the pool "
                                "unchanged; read its objects with the cxlkit that made it and "
                                "copy them into a new pool, or, if they are not needed, remove "
                                f"it (`cxlkit pool rm --force {path}`) and it is made anew", path)
    if e.errno == errno.EBUSY:
        why = (f"host slot {slot} belongs to another host (its name differs)" if slot >= 0
               else "no host slot is free (every slot belongs to another host, or was lost "
               "to one claiming it at the same time)")
        return PoolError(e.errno, f"{why}: see them with `cxlkit pool hosts {path}` and free a "
                         f"dead one with `cxlkit pool release {path} HOST`", path)
    if e.errno == errno.ENOTRECOVERABLE:
        where = f"host slot {slot}" if slot >= 0 else "this host's slot"
        return PoolCorruptError(e.errno, f"{where}: its lock in the pool is damaged (not "
                                "recoverable): `cxlkit pool fsck --repair` resets it", path)
    return _typed(e, _OPEN_ERRORS)


def _format_version(path: str) -> int | None:
    """The format version a pool file's superblock names (the u32 at offset 8 in every
    version), or None when it cannot be read."""
    try:
        with open(path, "rb") as f:
            head = f.read(12)
    except OSError:
        return None
    return int.from_bytes(head[8:12], "little") if len(head) == 12 else None
