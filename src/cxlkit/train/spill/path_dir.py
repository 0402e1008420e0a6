"""A directory path through the native async I/O engine (native/aio): one file per
subgroup, O_DIRECT where the filesystem takes it, payload sums and checks on two helper
threads of the path, off the store's thread."""
from __future__ import annotations

import concurrent.futures as cf
import contextlib
import errno
import os
import time
from typing import Any

from .. import aio
from .path_base import Pending, PathVanishedError, SpillPath, typed

class DirPath(SpillPath):
    """A directory: one file per subgroup (sg-<namespace>-<idx>.cxk, two slots), O_DIRECT
    where the filesystem takes it, through an AioEngine with this path's block size and queue
    depth."""

    kind = "dir"
    sum_by_pass = True

    def __init__(self, directory: str | os.PathLike[str], *, lock: str = "exclusive",
                 config: aio.AioConfig | None = None) -> None:
        d = os.path.abspath(os.fspath(directory))
        super().__init__(d, lock=lock)
        if not os.path.isdir(d):
            raise PathVanishedError(errno.ENOENT, "not a directory", d)
        self.config = config or aio.AioConfig()
        self.engine = aio.AioEngine(self.config)
        self._fds: dict[int, int] = {}
        self.direct: bool | None = None
        self._helper_pools: tuple[cf.ThreadPoolExecutor, cf.ThreadPoolExecutor] | None = None

    def _lock_path(self) -> str:
        return os.path.join(self.name, ".cxlkit-subgroups.lock")

    def file(self, idx: int) -> str:
        return os.path.join(self.name, f"sg-{self.namespace}-{idx:06d}.cxk")

    def _fd(self, idx: int, create: bool) -> int:
        if not os.path.isdir(self.name):
            raise PathVanishedError(errno.ENOENT, "directory vanished", self.name, idx)
        fd = self._fds.get(idx)
        if fd is None:
            try:
                fd, self.direct = aio.open_file(self.file(idx), write=True, create=create,
                                                direct=self.config.direct)
            except OSError as e:
                raise typed(e, self.file(idx), idx) from None
            self._fds[idx] = fd
        return fd

    def _submit(self, idx: int, slot: int, buf: Any, write: bool, hook: Any = None) -> Pending:
        fd = self._fd(idx, create=write)
        f, off = self.file(idx), slot * self.slot_nbytes

        def submit() -> int:
            try:
                return self.engine.submit(fd, write, buf, off, f)
            except OSError as e:
                raise typed(e, f, idx) from None

        def wait(t: int) -> float:
            try:
                return self.engine.wait(t, f)
            except OSError as e:
                raise typed(e, f, idx) from None
        if hook is None:
            t0 = time.perf_counter()
            t = submit()
            return Pending(lambda: wait(t), buf.nbytes, self, idx, write, t0,
                           lambda: self.engine.done(t, f))
        # the hooks (a pass over the bytes each) run on this path's helper threads, off the
        # caller's: a flush's header sum, then its submit, on one; a fetch's wait for its
        # bytes, then its check, on another (requests in order, as the store needs them)
        pend = Pending(None, buf.nbytes, self, idx, write, None, None)
        if write:
            def prepare_and_submit() -> int:
                hook()
                pend.t_submit = time.perf_counter()
                return submit()
            fut = self._helpers()[0].submit(prepare_and_submit)
            pend._waiter = lambda: wait(fut.result())
            pend._poll = lambda: fut.done() and (fut.exception() is not None
                                                 or self.engine.done(fut.result(), f))
            return pend
        t = submit()

        def wait_and_check() -> float:
            dt = wait(t)
            hook()
            return dt
        fut = self._helpers()[1].submit(wait_and_check)
        pend._waiter, pend._poll = fut.result, fut.done
        return pend

    def _helpers(self) -> tuple[cf.ThreadPoolExecutor, cf.ThreadPoolExecutor]:
        if self._helper_pools is None:
            self._helper_pools = (cf.ThreadPoolExecutor(1, thread_name_prefix="cxlkit-sum"),
                                  cf.ThreadPoolExecutor(1, thread_name_prefix="cxlkit-check"))
        return self._helper_pools

    def sync(self, idx: int) -> None:
        fd = self._fds.get(idx)
        if fd is not None:
            try:
                aio.sync_file(fd, self.file(idx))
            except OSError as e:
                raise typed(e, self.file(idx), idx) from None

    def remove(self, idx: int) -> None:
        fd = self._fds.pop(idx, None)
        if fd is not None:
            aio.close_file(fd)
        with contextlib.suppress(FileNotFoundError):  # never written or already removed
            os.unlink(self.file(idx))

    def close(self) -> None:
        if self._helper_pools is not None:  # their requests finish before the files close
            for h in self._helper_pools:
                h.shutdown(wait=True)
            self._helper_pools = None
        for fd in self._fds.values():
            aio.close_file(fd)
        self._fds.clear()
        self.engine.close()
        super().close()
