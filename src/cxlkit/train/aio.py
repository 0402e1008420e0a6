"""Python face of the native async I/O engine (native/aio): an engine per storage path with
its own block size and queue depth, O_DIRECT files with a buffered fallback, and OFD locks."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import _native

ALIGN = _native.AIO_ALIGN
BACKENDS = {"auto": _native.AIO_AUTO, "io_uring": _native.AIO_URING,
            "threads": _native.AIO_THREADS}
# not an engine: a directory path whose files are mapped and copied in user space
# (spill_mapped.MappedDirPath); 'auto' picks it for a directory on tmpfs
MAP = "map"
_NAMES = {v: k for k, v in BACKENDS.items()}
LOCK_KINDS = {"unlock": 0, "shared": 1, "exclusive": 2}


def _positive_int(name: str, v: Any, hi: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= hi:
        raise ValueError(f"{name} {v!r}: expected an int in 0..{hi} (0 = default)")
    return v


@dataclass(frozen=True)
class AioConfig:
    """Per-path I/O settings: block_size bytes per chunk (a multiple of 4096; 0 = 1 MiB),
    queue_depth chunks in flight (0 = 32), threads of the thread-pool backend (0 = min(qd, 4)),
    backend 'auto' (io_uring where it works; for a directory path on tmpfs: 'map'),
    'io_uring', 'threads' or 'map' (directory paths only: files mapped, moved by a
    user-space copy), direct = O_DIRECT."""

    block_size: int = 1 << 20
    queue_depth: int = 32
    threads: int = 0
    backend: str = "auto"
    direct: bool = True

    def __post_init__(self) -> None:
        _positive_int("block_size", self.block_size, 1 << 30)
        if self.block_size % ALIGN:
            raise ValueError(f"block_size {self.block_size}: expected a multiple of {ALIGN}")
        _positive_int("queue_depth", self.queue_depth, 4096)
        _positive_int("threads", self.threads, 64)
        if self.backend not in BACKENDS and self.backend != MAP:
            raise ValueError(f"backend {self.backend!r}: expected one of "
                             f"{', '.join([*BACKENDS, MAP])}")


class AioEngine:
    """Queues reads and writes of byte arrays (numpy uint8, C-contiguous); submit returns a
    ticket, wait(ticket) blocks (GIL released) and raises the first chunk's OSError. The
    caller keeps each buffer alive until its ticket is waited for."""

    def __init__(self, config: AioConfig | None = None) -> None:
        c = config or AioConfig()
        if c.backend == MAP:
            raise ValueError("backend 'map' is a directory path's mode (MappedDirPath), "
                             "not an AioEngine's")
        self.config = c
        self._e = _native.AioEngine(BACKENDS[c.backend], c.queue_depth, c.block_size,
                                    c.threads)

    @property
    def backend(self) -> str:
        return _NAMES[self._e.backend]

    def submit(self, fd: int, write: bool, buf: Any, offset: int, what: str = "aio") -> int:
        return self._e.submit(fd, write, buf, offset, what)

    def wait(self, ticket: int, what: str = "aio") -> float:
        """Seconds from the request's submit to its last chunk's completion."""
        return self._e.wait(ticket, what) * 1e-9

    def done(self, ticket: int, what: str = "aio") -> bool:
        """True when the request has finished (wait will not block); never blocks."""
        return bool(self._e.done(ticket, what))

    def stats(self) -> dict[str, int]:
        r, w, reqs, chunks, errs = self._e.stats()
        return dict(bytes_read=r, bytes_written=w, requests=reqs, chunks=chunks, errors=errs)

    def close(self) -> None:
        self._e.close()

    def __enter__(self) -> AioEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_file(path: str, *, write: bool = False, create: bool = False,
              direct: bool = True) -> tuple[int, bool]:
    """(fd, is_direct): O_DIRECT when asked and the filesystem takes it."""
    flags = ((_native.AIO_O_WRITE if write else 0) | (_native.AIO_O_CREATE if create else 0)
             | (_native.AIO_O_DIRECT if direct else 0))
    return _native.aio_open(str(path), flags)


def close_file(fd: int) -> None:
    _native.aio_close(fd)


def sync_file(fd: int, what: str = "aio sync") -> None:
    _native.aio_sync(fd, what)


def truncate_file(fd: int, nbytes: int, what: str = "aio truncate") -> None:
    _native.aio_truncate(fd, nbytes, what)


def lock_file(fd: int, kind: str, *, wait: bool, at: int = 0, what: str = "aio lock") -> None:
    """OFD lock of byte `at` ('exclusive', 'shared' or 'unlock'); BlockingIOError when another
    open file description holds it and not wait. A dead process's locks are released."""
    if kind not in LOCK_KINDS:
        raise ValueError(f"lock kind {kind!r}: expected one of {', '.join(LOCK_KINDS)}")
    _native.aio_lock(fd, LOCK_KINDS[kind], wait, at, what)


def copy(dst: Any, src: Any, what: str = "aio copy") -> None:
    """dst[:] = src (C-contiguous arrays of the same byte size; the GIL released) that
    survives a SIGBUS: a shared file mapping on either side whose file was truncated under
    it (by any process, at any moment) raises OSError(EFAULT) naming `what` instead of
    killing the process; the bytes of dst are then undefined."""
    _native.aio_copy(_bytes(dst, "dst"), _bytes(src, "src"), what)


def copy_sum(dst: Any, src: Any, what: str = "aio copy") -> int:
    """copy(dst, src) that also returns the checksum of the bytes copied (equal to
    cxlkit._native.kv_checksum over them), folded into the copy's one pass: a checksummed
    move to or from a mapping reads its bytes once. Same guard and errors as copy()."""
    return int(_native.aio_copy_sum(_bytes(dst, "dst"), _bytes(src, "src"), what))


class RangeGuard:
    """SIGBUS guard over the bytes of a (mapped) array for work on any thread (the AdamW
    kernel on a team): while open, a fault in the range (its file truncated under the
    mapping) maps a zero page over the faulting page instead of killing the process.
    faults: the faults taken, read on close; when nonzero the range no longer shows its
    file (its bytes are lost: unmap it). Use as a context manager (64 guards at once per
    process: OSError ENOSPC beyond); thread-safe."""

    def __init__(self, area: Any, what: str = "aio guard") -> None:
        self.what, self.faults = what, 0
        self._id: int | None = int(_native.aio_guard_range(_bytes(area, "area"), what))

    def close(self) -> int:
        if self._id is not None:
            ident, self._id = self._id, None
            self.faults = int(_native.aio_unguard_range(ident, self.what))
        return self.faults

    def __del__(self) -> None:
        # a guard never closed would hold one of the 64 slots for the life of the process
        if getattr(self, "_id", None) is not None:
            try:
                self.close()
            except OSError:
                pass

    def __enter__(self) -> RangeGuard:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _bytes(a: Any, name: str) -> Any:
    if not isinstance(a, np.ndarray) or not a.flags.c_contiguous:
        raise TypeError(f"{name}: expected a C-contiguous numpy array, got {type(a).__name__}")
    return a.reshape(-1).view(np.uint8)


def uring_built() -> bool:
    return bool(_native.aio_uring_built())
