"""A directory path whose subgroup files are mapped and moved by a user-space copy: the
right I/O for a directory on tmpfs (or another memory-backed filesystem). There, a read or
write syscall is a kernel copy from the page cache that costs about 1.5x the CPU of a
user-space copy of the same bytes (per-page lookups; measured in docs/subgroups.md), and
io_uring hands the request to io-wq kernel threads that do that same copy. With the file
mapped once (MAP_POPULATE: no page faults in the steady state), a fetch or flush is one
copy on the path's worker thread, as for a memory tier or a pool, and the files stay the
same as DirPath's (same names, two slots, same headers): a store written through one is
resumed through the other."""
from __future__ import annotations

import contextlib
import errno
import mmap
import os
from typing import Any

import numpy as np

from .path_base import PathIOError, PathVanishedError, typed
from .path_copy import _CopyPath

# filesystems whose files are page-cache memory only: a mapped copy beats the syscalls
MEMORY_FS = ("tmpfs", "ramfs", "hugetlbfs")


def fs_type(path: str, mounts: str = "/proc/self/mounts") -> str | None:
    """The filesystem type of the mount holding `path` (the longest mount point that is a
    prefix of its real path), or None when the mount table cannot be read."""
    real = os.path.realpath(path)
    best, kind = -1, None
    try:
        with open(mounts, encoding="utf-8", errors="replace") as f:
            for line in f:
                parts = line.split()
                if len(parts) < 3:
                    continue
                # mount points escape blanks as \040 (octal)
                mp = parts[1].encode().decode("unicode_escape")
                if (real == mp or real.startswith(mp.rstrip("/") + "/")) and len(mp) > best:
                    best, kind = len(mp), parts[2]
    except OSError:
        return None
    return kind


class MappedDirPath(_CopyPath):
    """A directory whose subgroup files (sg-<namespace>-<idx>.cxk, the DirPath layout) are
    allocated whole (posix_fallocate: a full tmpfs fails there with ENOSPC, never later as
    a SIGBUS in a copy) and mapped shared. Every request checks that the directory still
    exists and that the file still holds both slots (a file truncated behind the store's
    back is refused; one truncated after that check, during the copy, faults in the guarded
copy (aio.copy), which raises PathIOError naming the file instead of a SIGBUS)."""

    kind = "dir"  # a directory like DirPath: manifests, resume, durable files

    def __init__(self, directory: str | os.PathLike[str], *, lock: str = "exclusive") -> None:
        d = os.path.abspath(os.fspath(directory))
        super().__init__(d, lock=lock)
        if not os.path.isdir(d):
            raise PathVanishedError(errno.ENOENT, "not a directory", d)
        self.direct = False
        self._maps: dict[int, tuple[int, mmap.mmap, Any]] = {}

    def _lock_path(self) -> str:
        return os.path.join(self.name, ".cxlkit-subgroups.lock")

    def file(self, idx: int) -> str:
        return os.path.join(self.name, f"sg-{self.namespace}-{idx:06d}.cxk")

    def _where(self, idx: int) -> str:
        return self.file(idx)

    def _area(self, idx: int, create: bool) -> Any:
        if not os.path.isdir(self.name):
            raise PathVanishedError(errno.ENOENT, "directory vanished", self.name, idx)
        need = self.nslots * self.slot_nbytes
        m = self._maps.get(idx)
        if m is not None:
            try:
                size = os.fstat(m[0]).st_size
            except OSError as e:
                raise typed(e, self.file(idx), idx) from None
            if size < need:
                raise PathIOError(errno.EIO, f"file shrank to {size} bytes (needs {need})",
                                  self.file(idx), idx)
            return m[2]
        return self._map(idx, create, need)

    def _map(self, idx: int, create: bool, need: int) -> Any:
        f = self.file(idx)
        try:
            fd = os.open(f, os.O_RDWR | (os.O_CREAT if create else 0) | os.O_CLOEXEC, 0o600)
        except FileNotFoundError:
            raise PathVanishedError(errno.ENOENT, "no such subgroup file", f, idx) from None
        except OSError as e:
            raise typed(e, f, idx) from None
        try:
            size = os.fstat(fd).st_size
            if size < need:
                if not create:
                    raise PathIOError(errno.EIO, f"file holds {size} bytes, not {need}", f, idx)
                os.posix_fallocate(fd, 0, need)  # blocks now, or ENOSPC now
            mm = mmap.mmap(fd, need, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0))
        except OSError as e:
            os.close(fd)
            raise typed(e, f, idx) from None
        except BaseException:
            os.close(fd)
            raise
        arr = np.frombuffer(mm, np.uint8)
        self._maps[idx] = (fd, mm, arr)
        return arr

    def sync(self, idx: int) -> None:
        m = self._maps.get(idx)
        if m is not None:
            try:
                m[1].flush()  # msync: nothing to do on tmpfs, durable elsewhere
            except OSError as e:
                raise typed(e, self.file(idx), idx) from None

    def discard(self, idx: int) -> None:
        self._unmap(idx)

    def _unmap(self, idx: int) -> None:
        m = self._maps.pop(idx, None)
        if m is None:
            return
        fd, mm, arr = m
        del arr, m
        try:
            mm.close()
        except BufferError:
            pass  # a view is still alive (a traceback's frame): unmapped when it goes
        os.close(fd)

    def remove(self, idx: int) -> None:
        self._unmap(idx)
        with contextlib.suppress(FileNotFoundError):  # never written or already removed
            os.unlink(self.file(idx))

    def close(self) -> None:
        super().close()  # its workers finish their copies first
        for idx in list(self._maps):
            self._unmap(idx)
