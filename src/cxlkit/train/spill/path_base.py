"""What every spill path shares: the typed errors, the 4 KiB subgroup header (pack, check,
payload checksum), a request in flight (Pending), and SpillPath, the base of the paths a
SubgroupStore spills optimizer subgroups to: two slots per subgroup (the previous generation
survives a crash mid-write), a per-host lock (OFD) and a read/write microbenchmark."""
from __future__ import annotations

import abc
import errno
import os
import resource
import struct
import time
import zlib
from typing import Any

import numpy as np

from ... import _native
from ... import placement as P
from ...errors import (CapacityError, PathFullError, PathIOError,  # noqa: F401 (importable here)
                       PathVanishedError, SubgroupCorruptError, SubgroupError)
from .. import aio

HEADER_NBYTES = 4096
MAGIC = b"CXKSUBG1"
VERSION = 1
# magic, version, header bytes, subgroup, generation, params, payload bytes, payload sum,
# layout key, then the crc32 of everything before it
_HDR = struct.Struct("<8sIIQQQQQQ")
_HDR_CRC = struct.Struct("<I")
LOCK_MODES = ("exclusive", "shared", "off")


def typed(e: OSError, path: str, subgroup: int | None) -> SubgroupError:
    if isinstance(e, SubgroupError):
        return e
    cls = {errno.ENOSPC: PathFullError, errno.EDQUOT: PathFullError,
           errno.ENOENT: PathVanishedError, errno.ESTALE: PathVanishedError}.get(
        e.errno or 0, PathIOError)
    return cls(e.errno or errno.EIO, e.strerror or str(e), path, subgroup)


def _same_file(fd: int, path: str) -> bool:
    """fd is the file at path now (not one removed or replaced since it was opened)."""
    try:
        a, b = os.fstat(fd), os.stat(path)
    except FileNotFoundError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _lock_moved(fd: int, path: str) -> bool:
    """The lock that counts is another file than fd's: fd's was removed (by a closing store)
    or replaced. Not when path's directory is gone too: nobody can open a lock there, and
    the data path reports the loss."""
    if os.path.exists(path):
        return not _same_file(fd, path)
    return os.path.isdir(os.path.dirname(path) or ".")


def checksum(buf: Any) -> int:
    arr = np.asarray(buf)
    return int(_native.kv_checksum(arr.ctypes.data, arr.nbytes)) if arr.nbytes else 0


def pack_header(idx: int, gen: int, nparams: int, payload: Any, key: int,
                sum_payload: bool = True, payload_sum: int | None = None) -> bytes:
    """sum_payload=False: the payload sum is left 0 (a path whose bytes never leave the
    process: a memory tier); a fetch from a path that sums is checked whatever it says.
    payload_sum: the sum already taken (folded into a copy of the payload), not taken again."""
    if payload_sum is None:
        payload_sum = checksum(payload) if sum_payload else 0
    body = _HDR.pack(MAGIC, VERSION, HEADER_NBYTES, idx, gen, nparams, len(payload),
                     payload_sum, key)
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


def check_payload(raw: Any, payload: Any, idx: int, path: str,
                  payload_sum: int | None = None) -> None:
    """payload_sum: the payload's sum already taken (folded into its copy), not taken again."""
    (want,) = struct.unpack_from("<Q", bytes(raw[:_HDR.size]), _HDR.size - 16)
    got = checksum(payload) if payload_sum is None else payload_sum
    if got != want:
        raise SubgroupCorruptError(errno.EBADMSG, "payload checksum mismatch", path, idx)


class FlushHeader:
    """A flush's header: raw[:HEADER_NBYTES] of the request's buffer, packed by the request
    with the payload's sum (raw[HEADER_NBYTES:]) where `summed`. Called bare, it takes the sum
    itself (a pass over the payload: the directory path, whose bytes no user-space copy
    moves); a copy path folds the sum into its copy of the payload and calls write(sum),
    then copies the header: the header lands after the payload it describes."""

    def __init__(self, raw: Any, idx: int, gen: int, nparams: int, key: int,
                 summed: bool) -> None:
        self.raw, self.idx, self.gen, self.nparams, self.key = raw, idx, gen, nparams, key
        self.summed = summed

    def payload(self) -> Any:
        return self.raw[HEADER_NBYTES:]

    def write(self, payload_sum: int) -> None:
        hdr = pack_header(self.idx, self.gen, self.nparams, self.payload(), self.key,
                          payload_sum=payload_sum if self.summed else 0)
        self.raw[:HEADER_NBYTES] = 0
        self.raw[:len(hdr)] = np.frombuffer(hdr, np.uint8)

    def __call__(self) -> None:
        self.write(checksum(self.payload()) if self.summed else 0)


class FetchCheck:
    """A fetch's check of raw (header, then payload) once its bytes are in: the header
    always, the payload's sum when `summed` (verify on, and the path keeps sums). Called
    bare, it takes the sum itself; a copy path copies the header first, runs header() (a
    bad header fails before the payload moves), folds the sum into its copy of the payload
    and gives it to payload(sum)."""

    def __init__(self, raw: Any, idx: int, gen: int | None, nparams: int, key: int,
                 path: str, summed: bool) -> None:
        self.raw, self.idx, self.gen, self.nparams, self.key = raw, idx, gen, nparams, key
        self.path, self.summed = path, summed

    def header(self) -> int:
        return check_header(self.raw, self.idx, self.gen, self.nparams,
                            self.raw.nbytes - HEADER_NBYTES, self.key, self.path)

    def payload(self, payload_sum: int | None = None) -> None:
        if self.summed:
            check_payload(self.raw, self.raw[HEADER_NBYTES:], self.idx, self.path,
                          payload_sum)

    def __call__(self) -> None:
        self.header()
        self.payload()


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


class SpillPath(abc.ABC):
    """Base of the path kinds: two slots of slot_nbytes per subgroup, an OFD lock per host."""

    kind = "?"
    # payload checksums written and checked: the bytes leave the process (a file, a pool
    # object another process can write, a crash can tear); a memory tier's do not
    checksummed = True
    # its payload sums are passes of their own (no user-space copy moves its bytes to fold
    # them into): a directory through the async I/O engine; the store may fold them into the
    # kernel instead (subgroup_fold)
    sum_by_pass = False

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
        # the most bytes the store may keep on this path (None: no bound): the split gives
        # it at most capacity_nbytes // footprint_nbytes() subgroups
        self.capacity_nbytes: int | None = None

    def open(self, slot_nbytes: int, nslots: int = 2, namespace: str = "default") -> None:
        """Slots of slot_nbytes per subgroup (a multiple of 4096): 0 and 1 alternate
        generations; 2, when asked, holds spilled fp32 grads (the ablation baseline).
        namespace keeps the files of several stores on one path apart."""
        self.slot_nbytes, self.nslots, self.namespace = slot_nbytes, nslots, namespace

    def footprint_nbytes(self) -> int:
        """Bytes one subgroup takes on this path once opened: all its slots (a directory's
        file grows to this as its slots are written)."""
        return self.nslots * self.slot_nbytes

    def _lock_path(self) -> str | None:
        return None

    def acquire(self, wait: bool) -> bool:
        """Take this host's lock of the path (held from a request's submit to its wait:
        the processes of one host take turns); False when busy and not wait. Nested: the
        lock goes when the last request in flight is waited for."""
        if self.lock_mode == "off":
            return True
        if self._lock_depth == 0:
            lp = self._lock_path()
            if lp is None:
                return True
            t0 = time.perf_counter()
            try:
                while True:
                    if self._lock_fd < 0:
                        self._lock_fd = self._open_lock(lp)
                    aio.lock_file(self._lock_fd, self.lock_mode, wait=wait, what=self.name)
                    if not _lock_moved(self._lock_fd, lp):
                        break
                    # a closing store removed the file after we opened it (close): the lock
                    # that counts is the one of the file at the path now
                    aio.close_file(self._lock_fd)
                    self._lock_fd = -1
            except BlockingIOError:
                return False
            finally:
                self.lock_wait_s += time.perf_counter() - t0
            self.lock_acquired += 1
        self._lock_depth += 1
        return True

    def _open_lock(self, lp: str) -> int:
        try:
            return aio.open_file(lp, write=True, create=True, direct=False)[0]
        except OSError as e:
            raise typed(e, lp, None) from None

    def _drop_lock_file(self) -> None:
        """Remove the lock file when no other process holds its lock: taken exclusive without
        waiting, it is unlinked while held, so a store that opened it before then finds (once
        it holds the lock) that it is no longer the file at the path and opens that one
        (acquire). A lock another process holds is left as it is."""
        lp = self._lock_path()
        if lp is None or self.lock_mode == "off":
            return
        try:
            aio.lock_file(self._lock_fd, "exclusive", wait=False, what=self.name)
        except BlockingIOError:
            return
        if _same_file(self._lock_fd, lp):
            try:
                os.unlink(lp)
            except FileNotFoundError:
                pass

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

    @abc.abstractmethod
    def _submit(self, idx: int, slot: int, buf: Any, write: bool, hook: Any = None) -> Pending:
        """Start a read (write=False) or write of slot's bytes of subgroup idx into / from buf."""

    def sync(self, idx: int) -> None:
        """Make the subgroup's writes durable (directories: fdatasync)."""

    def discard(self, idx: int) -> None:
        """Drop this process's mapping or handle of subgroup idx, whose bytes no longer show
        the file or object (a SIGBUS range guard replaced pages of it); the next request
        maps it afresh. Paths that map nothing: nothing to do."""

    @abc.abstractmethod
    def remove(self, idx: int) -> None:
        """Drop subgroup idx's file or object (gone already: nothing to do)."""

    def durable(self) -> bool:
        return True

    def measure(self, nbytes: int) -> tuple[float, float]:
        """(read, write) bytes per second over a scratch subgroup of nbytes, same I/O path
        and header work as the store's requests (a flush's header and payload sum, a fetch's
        check); measured_cpu_per_byte: this process's CPU seconds (every thread: copy
        workers, sum and check threads, io-wq) per byte moved in the last round (the first
        pays page faults and allocation; another path measured at the same time adds to it)."""
        nbytes = max(HEADER_NBYTES + aio.ALIGN, nbytes // aio.ALIGN * aio.ALIGN)
        buf = P.alloc(nbytes, P.default())
        arr = buf.numpy()
        arr[:] = 7
        self.open(max(self.slot_nbytes, nbytes), self.nslots, self.namespace)
        scratch = 1 << 40  # an index no store uses
        nparams = (nbytes - HEADER_NBYTES) // 12
        tw = tr = float("inf")
        done = False
        try:
            for _ in range(2):  # the first round pays for page faults and file allocation
                c0 = _cpu_seconds()
                # with the store's header work (the payload sum where the path keeps one,
                # folded into a copy path's copy, a pass of its own on a directory's helper
                # threads): the CPU per byte is the route's, not the bare copy's or I/O's
                self.acquire(True)
                tw = min(tw, self.write(scratch, 0, arr, FlushHeader(
                    arr, scratch, 1, nparams, 0, self.checksummed)).wait())
                self.acquire(True)
                tr = min(tr, self.read(scratch, 0, arr, FetchCheck(
                    arr, scratch, 1, nparams, 0, self.name, self.checksummed)).wait())
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
            try:
                self._drop_lock_file()
            finally:
                aio.close_file(self._lock_fd)  # releases the lock
                self._lock_fd = -1

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"
