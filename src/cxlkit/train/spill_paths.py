"""The paths a SubgroupStore spills optimizer subgroups to: a directory (NVMe, PFS, tmpfs)
through the native async I/O engine, a memory tier (placed buffers), or an object area of a
cxlkit pool. Each keeps two slots per subgroup (the previous generation survives a crash
mid-write), locks per host (OFD) and reports its measured read/write bandwidth."""
from __future__ import annotations

import concurrent.futures as cf
import errno
import hashlib
import os
import resource
import struct
import time
import zlib
from typing import Any

import numpy as np

from .. import _native
from .. import policy as P
from . import aio

HEADER_NBYTES = 4096
MAGIC = b"CXKSUBG1"
VERSION = 1
# magic, version, header bytes, subgroup, generation, params, payload bytes, payload sum,
# layout key, then the crc32 of everything before it
_HDR = struct.Struct("<8sIIQQQQQQ")
_HDR_CRC = struct.Struct("<I")
LOCK_MODES = ("exclusive", "shared", "off")


class SubgroupError(OSError):
    """A subgroup could not be moved to or from a path; .path and .subgroup name them."""

    def __init__(self, err: int, why: str, path: str, subgroup: int | None = None) -> None:
        where = f"subgroup {subgroup} on " if subgroup is not None else ""
        super().__init__(err, f"{where}{path}: {why}", path)
        self.path, self.subgroup = path, subgroup


class PathFullError(SubgroupError):
    """ENOSPC: the path has no room for the subgroup."""


class PathIOError(SubgroupError):
    """EIO (or another device error) while reading or writing the subgroup."""


class PathVanishedError(SubgroupError):
    """The directory (or pool object) is gone."""


class SubgroupCorruptError(SubgroupError):
    """The subgroup's header or checksum does not match what the store wrote."""


def typed(e: OSError, path: str, subgroup: int | None) -> SubgroupError:
    if isinstance(e, SubgroupError):
        return e
    cls = {errno.ENOSPC: PathFullError, errno.EDQUOT: PathFullError,
           errno.ENOENT: PathVanishedError, errno.ESTALE: PathVanishedError}.get(
        e.errno or 0, PathIOError)
    return cls(e.errno or errno.EIO, e.strerror or str(e), path, subgroup)


def checksum(buf: Any) -> int:
    arr = np.asarray(buf)
    return int(_native.kv_checksum(arr.ctypes.data, arr.nbytes)) if arr.nbytes else 0


def pack_header(idx: int, gen: int, nparams: int, payload: Any, key: int,
                sum_payload: bool = True) -> bytes:
    """sum_payload=False: the payload sum is left 0 (a path whose bytes never leave the
    process: a memory tier); a fetch from a path that sums is checked whatever it says."""
    body = _HDR.pack(MAGIC, VERSION, HEADER_NBYTES, idx, gen, nparams, len(payload),
                     checksum(payload) if sum_payload else 0, key)
    return body + _HDR_CRC.pack(zlib.crc32(body))


def check_header(raw: Any, idx: int, gen: int | None, nparams: int, payload_nbytes: int,
                 key: int, path: str) -> int:
    """The header's generation, after checking every field (the bytes are untrusted)."""
    raw = bytes(raw[:_HDR.size + _HDR_CRC.size])
    body = raw[:_HDR.size]
    (crc,) = _HDR_CRC.unpack(raw[_HDR.size:])
    if zlib.crc32(body) != crc:
        raise SubgroupCorruptError(errno.EBADMSG, "header checksum mismatch (torn or foreign "
                                   "write)", path, idx)
    magic, ver, hdr, sidx, sgen, n, nbytes, _, skey = _HDR.unpack(body)
    want = (MAGIC, VERSION, HEADER_NBYTES, idx, nparams, payload_nbytes, key)
    got = (magic, ver, hdr, sidx, n, nbytes, skey)
    if got != want:
        raise SubgroupCorruptError(errno.EBADMSG, f"header {got} does not match {want}", path,
                                   idx)
    if gen is not None and sgen != gen:
        raise SubgroupCorruptError(errno.EBADMSG, f"generation {sgen}, expected {gen}", path,
                                   idx)
    return sgen


def check_payload(raw: Any, payload: Any, idx: int, path: str) -> None:
    (want,) = struct.unpack_from("<Q", bytes(raw[:_HDR.size]), _HDR.size - 16)
    if checksum(payload) != want:
        raise SubgroupCorruptError(errno.EBADMSG, "payload checksum mismatch", path, idx)


def _cpu_seconds() -> float:
    """User + system CPU seconds of this process, every thread (io-wq workers included)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class Pending:
    """One read or write in flight on a path; wait() gives its duration in seconds, from
    submit to completion (t_submit: time.perf_counter() at submit, so that the store can
    take the union of the requests' intervals: the time a path, or any path, was busy).
    check: run by wait() once the bytes are in (a fetch's payload check), unless the path ran
    it already on its own thread (then it is None here)."""

    def __init__(self, waiter: Any, nbytes: int, path: SpillPath, idx: int,
                 write: bool, t_submit: float | None = None,
                 poll: Any = None, check: Any = None) -> None:
        self._waiter, self.nbytes, self.path, self.idx, self.write = waiter, nbytes, path, \
            idx, write
        self.t_submit = time.perf_counter() if t_submit is None else t_submit
        self._poll = poll
        self._check = check
        self.done = False

    def ready(self) -> bool:
        """True when wait() would not block (the request finished, or was waited for);
        never blocks. A failed request is ready too: wait() raises its error."""
        if self.done or self._poll is None:
            return True
        try:
            return bool(self._poll())
        except OSError:
            return True  # wait() reports it

    def wait(self) -> float:
        if self.done:
            return 0.0
        self.done = True
        check, self._check = self._check, None  # its closure holds views of the buffer
        try:
            dt = self._waiter()
        finally:
            self.path._unlock()
        if check is not None:
            check()
        return dt


class SpillPath:
    """Base of the path kinds: two slots of slot_nbytes per subgroup, an OFD lock per host."""

    kind = "?"
    # payload checksums written and checked: the bytes leave the process (a file, a pool
    # object another process can write, a crash can tear); a memory tier's do not
    checksummed = True

    def __init__(self, name: str, *, lock: str = "exclusive") -> None:
        if lock not in LOCK_MODES:
            raise ValueError(f"lock {lock!r}: expected one of {', '.join(LOCK_MODES)}")
        self.name, self.lock_mode = name, lock
        self.slot_nbytes, self.nslots, self.namespace = 0, 2, "default"
        self._lock_fd = -1
        self._lock_depth = 0
        self.lock_wait_s = 0.0
        self.lock_acquired = 0
        self.measured_cpu_per_byte = 0.0

    def open(self, slot_nbytes: int, nslots: int = 2, namespace: str = "default") -> None:
        """Slots of slot_nbytes per subgroup (a multiple of 4096): 0 and 1 alternate
        generations; 2, when asked, holds spilled fp32 grads (the ablation baseline).
        namespace keeps the files of several stores on one path apart."""
        self.slot_nbytes, self.nslots, self.namespace = slot_nbytes, nslots, namespace

    def _lock_path(self) -> str | None:
        return None

    def acquire(self, wait: bool) -> bool:
        """Take this host's lock of the path (held from a request's submit to its wait:
        the processes of one host take turns); False when busy and not wait. Nested: the
        lock goes when the last request in flight is waited for."""
        if self.lock_mode == "off":
            return True
        if self._lock_depth == 0:
            if self._lock_fd < 0:
                lp = self._lock_path()
                if lp is None:
                    return True
                try:
                    self._lock_fd, _ = aio.open_file(lp, write=True, create=True,
                                                     direct=False)
                except OSError as e:
                    raise typed(e, lp, None) from None
            t0 = time.perf_counter()
            try:
                aio.lock_file(self._lock_fd, self.lock_mode, wait=wait, what=self.name)
            except BlockingIOError:
                return False
            finally:
                self.lock_wait_s += time.perf_counter() - t0
            self.lock_acquired += 1
        self._lock_depth += 1
        return True

    def _unlock(self) -> None:
        if self.lock_mode == "off" or self._lock_depth == 0:
            return
        self._lock_depth -= 1
        if self._lock_depth == 0 and self._lock_fd >= 0:
            aio.lock_file(self._lock_fd, "unlock", wait=False, what=self.name)

    def read(self, idx: int, slot: int, buf: Any, check: Any = None) -> Pending:
        """Read slot `slot` of subgroup idx into buf (uint8, aligned); the caller holds the
        lock (acquire), which the Pending's wait gives back. check(): run once the bytes
        are in (raising fails the read), on the path's own thread where it has one (copy
        paths: off the caller's), else in wait()."""
        try:
            return self._submit(idx, slot, buf, False, check)
        except BaseException:
            self._unlock()
            raise

    def write(self, idx: int, slot: int, buf: Any, prepare: Any = None) -> Pending:
        """Write buf to slot `slot` of subgroup idx; prepare(): run just before the bytes
        move (the header's payload sum), on the path's own thread where it has one."""
        try:
            return self._submit(idx, slot, buf, True, prepare)
        except BaseException:
            self._unlock()
            raise

    def _submit(self, idx: int, slot: int, buf: Any, write: bool, hook: Any = None) -> Pending:
        raise NotImplementedError

    def sync(self, idx: int) -> None:
        """Make the subgroup's writes durable (directories: fdatasync)."""

    def remove(self, idx: int) -> None:
        raise NotImplementedError

    def durable(self) -> bool:
        return True

    def measure(self, nbytes: int) -> tuple[float, float]:
        """(read, write) bytes per second over a scratch subgroup of nbytes, same I/O path;
        measured_cpu_per_byte: this process's CPU seconds (every thread: copy workers,
        io-wq) per byte moved in the last round (the first pays page faults and allocation;
        another path measured at the same time adds to it)."""
        nbytes = max(aio.ALIGN, nbytes // aio.ALIGN * aio.ALIGN)
        buf = P.alloc(nbytes, P.default())
        arr = buf.numpy()
        arr[:] = 7
        self.open(max(self.slot_nbytes, nbytes), self.nslots, self.namespace)
        scratch = 1 << 40  # an index no store uses
        tw = tr = float("inf")
        done = False
        try:
            for _ in range(2):  # the first round pays for page faults and file allocation
                c0 = _cpu_seconds()
                self.acquire(True)
                tw = min(tw, self.write(scratch, 0, arr).wait())
                self.acquire(True)
                tr = min(tr, self.read(scratch, 0, arr).wait())
                self.measured_cpu_per_byte = (_cpu_seconds() - c0) / (2 * nbytes)
            done = True
        finally:
            self.remove(scratch)
            del arr
            # on an error the frames in its traceback still hold views of buf: it is freed
            # with them; closing it now would replace the real error with a BufferError
            if done:
                buf.close()
        return nbytes / max(tr, 1e-9), nbytes / max(tw, 1e-9)

    def close(self) -> None:
        if self._lock_fd >= 0:
            aio.close_file(self._lock_fd)
            self._lock_fd = -1

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


class DirPath(SpillPath):
    """A directory: one file per subgroup (sg-<namespace>-<idx>.cxk, two slots), O_DIRECT
    where the filesystem takes it, through an AioEngine with this path's block size and queue
    depth."""

    kind = "dir"

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
        try:
            os.unlink(self.file(idx))
        except FileNotFoundError:
            pass

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


class _CopyPath(SpillPath):
    """Shared by the memory and pool paths: slots are byte ranges of a mapping, moved by a
    copy on a worker thread (numpy releases the GIL for it); payload sums on a second one."""

    def __init__(self, name: str, *, lock: str) -> None:
        super().__init__(name, lock=lock)
        self._pool = cf.ThreadPoolExecutor(1, thread_name_prefix="cxlkit-spill")
        self._sums = cf.ThreadPoolExecutor(1, thread_name_prefix="cxlkit-sum")

    def _area(self, idx: int, create: bool) -> Any:
        raise NotImplementedError

    def _submit(self, idx: int, slot: int, buf: Any, write: bool, hook: Any = None) -> Pending:
        area = self._area(idx, create=write)
        lo = slot * self.slot_nbytes
        dst = area[lo:lo + buf.nbytes]
        if dst.nbytes != buf.nbytes:
            raise PathIOError(errno.EIO, f"slot {slot} holds {dst.nbytes} bytes, not "
                              f"{buf.nbytes}", self.name, idx)
        pend = Pending(None, buf.nbytes, self, idx, write, None, None)
        # the views, dropped when the request ends: a failed request's traceback holds
        # these frames, and a view of the area kept alive there keeps the pool from closing
        views = [dst, buf]
        del dst

        def move() -> float:
            # the request's interval is the copy's own (set before the future completes; a
            # copy queued behind another starts when that one's interval ends)
            try:
                t1 = time.perf_counter()
                if write:
                    np.copyto(views[0], views[1])
                else:
                    np.copyto(views[1], views[0])
                pend.t_submit = t1
                return time.perf_counter() - t1
            finally:
                views.clear()
        if hook is None:
            fut = self._pool.submit(move)
            pend._waiter, pend._poll = fut.result, fut.done
            return pend
        # the hooks (a flush's payload sum before its copy, a fetch's check after it: a pass
        # over the bytes each) run on the path's sum thread: off the store's thread, and the
        # copy worker moves the next request meanwhile
        if write:
            def sum_then_copy() -> cf.Future:
                try:
                    hook()
                except BaseException:
                    views.clear()
                    raise
                return self._pool.submit(move)
            outer = self._sums.submit(sum_then_copy)
            pend._waiter = lambda: outer.result().result()
            pend._poll = lambda: outer.done() and (outer.exception() is not None
                                                   or outer.result().done())
            return pend
        inner = self._pool.submit(move)

        def copy_then_check() -> float:
            dt = inner.result()
            hook()
            return dt
        fut = self._sums.submit(copy_then_check)
        pend._waiter, pend._poll = fut.result, fut.done
        return pend

    def close(self) -> None:
        self._sums.shutdown(wait=True)  # it hands copies to the copy worker: first
        self._pool.shutdown(wait=True)
        super().close()


class MemoryPath(_CopyPath):
    """A memory tier: each subgroup's two slots in a buffer placed by `policy` (e.g.
    cxlkit.policy.bind(node) for a CXL node). Process memory: no lock needed between
    processes, and nothing survives the process (durable() is False)."""

    kind = "memory"
    checksummed = False

    def __init__(self, policy: P.Policy | int | None = None) -> None:
        pol = P.bind(policy) if isinstance(policy, int) and not isinstance(policy, bool) \
            else (policy or P.default())
        super().__init__(f"mem:{pol}", lock="off")
        self.policy = pol
        self._bufs: dict[int, Any] = {}

    def _area(self, idx: int, create: bool) -> Any:
        b = self._bufs.get(idx)
        if b is None:
            if not create:
                raise PathVanishedError(errno.ENOENT, "no such subgroup in memory", self.name,
                                        idx)
            b = P.alloc(self.nslots * self.slot_nbytes, self.policy)
            self._bufs[idx] = b
        return b.numpy()

    def durable(self) -> bool:
        return False

    def remove(self, idx: int) -> None:
        b = self._bufs.pop(idx, None)
        if b is not None:
            b.close()

    def close(self) -> None:
        super().close()
        for b in self._bufs.values():
            b.close()
        self._bufs.clear()


class PoolPath(_CopyPath):
    """An object area of a cxlkit pool (CXL pool memory): one object <prefix>.<idx> per
    subgroup, written by this host only. Its bytes are untrusted on the way back: every
    fetch checks header and checksum. Locked per host through a file in /dev/shm."""

    kind = "pool"

    def __init__(self, pool: Any, prefix: str = "cxlkit.sg", *, lock: str = "exclusive") -> None:
        super().__init__(f"pool:{pool.shared_path}/{prefix}", lock=lock)
        self.pool, self.prefix = pool, prefix
        self._objs: dict[int, Any] = {}

    def _lock_path(self) -> str:
        h = hashlib.sha1(self.name.encode()).hexdigest()[:16]
        return f"/dev/shm/cxlkit-subgroups-{h}.lock"

    def objname(self, idx: int) -> str:
        return f"{self.prefix}.{self.namespace}.{idx}"

    def _area(self, idx: int, create: bool) -> Any:
        o = self._objs.get(idx)
        name = self.objname(idx)
        if o is None:
            try:
                if name in self.pool:
                    o = self.pool.open(name, writable=True)
                    if o.nbytes < self.nslots * self.slot_nbytes:
                        o.close()
                        self.pool.destroy(name)
                        o = None
                if o is None:
                    if not create:
                        raise PathVanishedError(errno.ENOENT, "no such object", self.name, idx)
                    o = self.pool.create(name, self.nslots * self.slot_nbytes, zero=False)
                    o.publish()
            except KeyError:
                raise PathVanishedError(errno.ENOENT, f"object {name} vanished", self.name,
                                        idx) from None
            except OSError as e:
                raise typed(e, f"{self.name}.{idx}", idx) from None
            self._objs[idx] = o
        return o.numpy()

    def remove(self, idx: int) -> None:
        o = self._objs.pop(idx, None)
        if o is not None:
            o.close()
        try:
            self.pool.destroy(self.objname(idx))
        except KeyError:
            pass

    def close(self) -> None:
        super().close()
        for o in self._objs.values():
            o.close()
        self._objs.clear()


def parse_path(spec: Any, *, lock: str = "exclusive", config: aio.AioConfig | None = None,
               pool_options: dict[str, Any] | None = None) -> SpillPath:
    """A SpillPath as is; 'mem' (the task's policy) or 'mem:NODE' (a memory node);
    'pool:NAME_OR_PATH' (an object area of that cxlkit pool, opened with pool_options:
    Pool's host_id and coherence, e.g. {"coherence": "none"} behind a CXL switch); else a
    directory: a MappedDirPath on tmpfs (or with config.backend 'map'), else a DirPath;
    'map:DIR' / 'aio:DIR' choose the mapped copy / the async I/O engine for DIR."""
    if isinstance(spec, SpillPath):
        return spec
    s = os.fspath(spec)
    if s == "mem":
        return MemoryPath()
    if s.startswith("mem:"):
        try:
            return MemoryPath(P.parse(s[4:]) if not s[4:].isdigit() else int(s[4:]))
        except ValueError as e:
            raise ValueError(f"spill path {s!r}: {e}") from None
    if s.startswith("pool:"):
        from ..pool import Pool
        return PoolPath(Pool(s[5:], **(pool_options or {})), lock=lock)
    from .spill_mapped import MEMORY_FS, MappedDirPath, fs_type
    if s.startswith("map:"):
        return MappedDirPath(s[4:], lock=lock)
    if s.startswith("aio:"):
        if config is not None and config.backend == aio.MAP:
            config = None
        return DirPath(s[4:], lock=lock, config=config)
    backend = config.backend if config is not None else "auto"
    if backend == aio.MAP or (backend == "auto" and os.path.isdir(s)
                              and fs_type(s) in MEMORY_FS):
        return MappedDirPath(s, lock=lock)
    return DirPath(s, lock=lock, config=config)
