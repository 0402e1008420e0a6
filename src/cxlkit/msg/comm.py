"""MPI-style messaging over a shared pool: a job of ranks with send/recv (MPI matching),
collectives, one-sided windows and bare rings. The C library (cxk_msg_*, cxk_win_*,
cxk_ring_*) does the work; docs/msg.md has the protocol.

    with cxlkit.Pool("jobpool", size="256M") as pool, msg.Comm(pool, job="j1") as comm:
        comm.send(b"hi", dest=1, tag=0)          # rank, size from CXLKIT_RANK / the launcher
"""
from __future__ import annotations

import errno
import os
import secrets
import warnings
from typing import Any

from .. import _native
from .._config import ENV
from ..errors import (
    _MSG_COMM_ERRORS,
    MsgCorruptError,
    MsgExistsError,
    MsgValueError,
    MsgVersionError,
    PeerLostError,
    TruncationError,
    _msg_typed,
    native_reason,
)
from ..pool import Pool, machine_tag
from ..units import parse_size
from .wait import WaitPolicy, policy_arg
from .window import PoolMemory, Request, Status, Window, _buf, _op, _type

ANY_SOURCE = _native.ANY_SOURCE
ANY_TAG = _native.ANY_TAG
TAG_MAX = 0x7FFFFFFF
# a waiting party's spin and wake-up counters: spin_stats(), wake_stats(), rpc's the same
WaiterStats = _native.WaiterStats

_COHERENCE = {"host": 0, "none": 1, "sim": 2}  # as cxlkit.pool's


def _env(name: str) -> str:
    return os.environ.get(name, ENV[name][0])


def _launcher_rank_size() -> tuple[int | None, int | None]:
    """Rank and size from CXLKIT_RANK/SIZE, else what an MPI launcher exported."""
    for rk, sz in (("CXLKIT_RANK", "CXLKIT_SIZE"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
                   ("PMI_RANK", "PMI_SIZE"), ("PMIX_RANK", "PMIX_SIZE")):
        r, s = os.environ.get(rk), os.environ.get(sz)
        if r is not None and s is not None and r.isdigit() and s.isdigit():
            return int(r), int(s)
    s = os.environ.get("CXLKIT_SIZE")
    return None, int(s) if s is not None and s.isdigit() else None


def _millis(label: str, seconds: float | None, old_label: str, ms: int | None) -> int:
    """Milliseconds for the C ABI (0: its default) from `label` in seconds, or from the
    deprecated `old_label` in milliseconds."""
    if ms is not None:
        if seconds is not None:
            raise ValueError(f"{label} and {old_label} both given: pass {label} (seconds) alone")
        warnings.warn(f"Comm({old_label}=) is deprecated: pass {label} in seconds (e.g. "
                      f"{label}=2.5)", DeprecationWarning, stacklevel=3)
        return _positive(old_label, ms)
    if seconds is None:
        return 0
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) \
            or not 0 < seconds <= 86400:
        raise ValueError(f"{label} {seconds!r}: expected seconds in (0, 86400]")
    return max(1, round(seconds * 1000))


def _positive(label: str, v: int | None) -> int:
    if v is None:
        return 0
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise ValueError(f"{label} {v!r}: expected a positive int")
    return v


def _private_pool_args(pool: Pool | str) -> tuple[list[str], int, str, int]:
    """How the native side opens a handle of its own on the same pool as the same host."""
    if isinstance(pool, Pool):
        return list(pool.paths), pool.host_id, machine_tag(), _COHERENCE[pool.coherence]
    raise TypeError(f"pool {pool!r}: expected a cxlkit.Pool")


class Comm:
    """This process as one rank of a job on a pool. rank/size default to CXLKIT_RANK and
    CXLKIT_SIZE or the MPI launcher's variables (Open MPI, MPICH/PMI, PMIx); job to
    CXLKIT_JOB. With the size known but no rank, ranks go by arrival: the job's first
    process is rank 0 and hands out the others over the RPC service msgboot-<job>. The comm
    runs on `pool`'s own handle (its host, its memory): pool.close() raises BufferError
    until the comm is closed. A comm dropped without close() leaves the job at once, without
    the closing barrier (its peers see it gone), and warns ResourceWarning. One thread at a
    time per comm; blocking calls release the GIL and poll under `wait` (a WaitPolicy;
    default WaitPolicy.default()). Calls waiting on a rank that is gone raise PeerLostError
    naming it; every error is a cxlkit.errors.MsgError naming job, rank and pool. With
    checksum=True (on every rank of the job, or none) each message carries a crc32c of its
    header and bytes and a receive whose bytes fail it raises MsgCorruptError naming the
    sender (docs/msg.md, "What a rank trusts"). domain (1..2**32-1) says which machine this
    rank runs on: on a pool of coherence "none", ranks that pass the same domain promise one
    machine's caches and skip the flushes between them (peer_coherent)."""

    def __init__(self, pool: Pool, *, rank: int | None = None, size: int | None = None,
                 job: str | None = None, cell_bytes: int | None = None,
                 ncells: int | None = None, eager_bytes: int | None = None,
                 timeout: float | None = None, dead_timeout: float | None = None,
                 join_timeout: float | None = None, wait: WaitPolicy | None = None,
                 checksum: bool = False, domain: int | None = None,
                 timeout_ms: int | None = None, dead_ms: int | None = None,
                 join_ms: int | None = None) -> None:
        wait_args = policy_arg(wait)  # bad CXLKIT_MSG_SPIN_US & co fail before the join
        timeout_ms = _millis("timeout", timeout, "timeout_ms", timeout_ms)
        dead_ms = _millis("dead_timeout", dead_timeout, "dead_ms", dead_ms)
        join_ms = _millis("join_timeout", join_timeout, "join_ms", join_ms)
        if not isinstance(checksum, bool):
            raise ValueError(f"checksum {checksum!r}: expected True or False")
        if domain is not None and (isinstance(domain, bool) or not isinstance(domain, int)
                                   or not 1 <= domain < 2**32):
            raise ValueError(f"domain {domain!r}: expected an int in 1..{2**32 - 1} (one per "
                             f"machine)")
        lr, ls = _launcher_rank_size()
        rank = lr if rank is None else rank
        size = ls if size is None else size
        job = job or _env("CXLKIT_JOB")
        if size is None:
            raise ValueError("size: pass it, set CXLKIT_SIZE (and CXLKIT_RANK, or ranks go by "
                             "arrival), or start the program under mpiexec")
        if not job:
            raise ValueError("job: pass job= or set CXLKIT_JOB (ranks with the same job on "
                             "one pool form one job)")
        if not (isinstance(size, int) and 1 <= size <= 4096):
            raise ValueError(f"size {size!r}: expected 1..4096")
        if not (rank is None or isinstance(rank, int) and 0 <= rank < size):
            raise ValueError(f"rank {rank!r}: expected 0..{size - 1}")
        if len(job) > 64 or not all(ch.isascii() and (ch.isalnum() or ch in "_-") for ch in job):
            raise ValueError(f"job {job!r}: expected 1..64 of [A-Za-z0-9_-]")
        if not isinstance(pool, Pool):
            raise TypeError(f"pool {pool!r}: expected a cxlkit.Pool")
        self.job = job
        self.pool_path = pool.path
        self._pool = pool
        self._my_rank: int | str = "by arrival" if rank is None else rank
        boot = None
        if rank is None:
            from .rpc import arrival_rank

            rank, boot = arrival_rank(pool, job, size,
                                      (join_ms or 60000) / 1000)
            self._my_rank = rank
        try:
            self._join(pool, job, rank, size, cell_bytes, ncells, eager_bytes, timeout_ms,
                       dead_ms, join_ms, domain or 0)
        finally:
            if boot is not None:
                boot.close()  # every rank has joined (or the join failed): no more arrivals
        self._c.set_wait(*wait_args)
        if checksum:
            self._c.set_checksum(True)

    @classmethod
    def from_mpi4py(cls, mpi_comm: Any, pool: Pool, *, job: str | None = None,
                    **kwargs: Any) -> Comm:
        """The ranks of an mpi4py communicator as a job on `pool`: rank and size are the
        communicator's; the job name is agreed over it (the one every rank passed, else
        CXLKIT_JOB, else a fresh name drawn by rank 0), and every rank must have opened the
        same pool. Collective over mpi_comm: every rank calls it, or none. ValueError on
        every rank when the ranks disagree (job names, pools); other keywords as Comm.
        mpi4py is not imported here: any object with Get_rank, Get_size, bcast and
        allgather serves."""
        for name in ("Get_rank", "Get_size", "bcast", "allgather"):
            if not callable(getattr(mpi_comm, name, None)):
                raise TypeError(f"mpi_comm {mpi_comm!r}: expected an mpi4py communicator "
                                f"(it has no {name}())")
        if not isinstance(pool, Pool):
            raise TypeError(f"pool {pool!r}: expected a cxlkit.Pool")
        rank, size = mpi_comm.Get_rank(), mpi_comm.Get_size()
        mine = job or _env("CXLKIT_JOB") or None
        try:
            uuid = pool.stat().uuid
        except OSError as e:  # still agree below: the other ranks must not wait for us
            uuid = f"unreadable ({e})"
        seen = mpi_comm.allgather((mine, uuid))
        jobs = {j for j, _ in seen}
        if len(jobs) > 1:
            raise ValueError(f"the ranks of the MPI communicator disagree on the job: "
                             f"{sorted(str(j) for j in jobs)}")
        if len({u for _, u in seen}) > 1:
            odd = [r for r, (_, u) in enumerate(seen) if u != seen[0][1]]
            raise ValueError(f"ranks {odd} of the MPI communicator opened another pool than "
                             f"rank 0 (pool uuids differ)")
        agreed = mpi_comm.bcast((mine or f"mpi-{secrets.token_hex(6)}") if rank == 0 else None,
                                root=0)
        return cls(pool, rank=rank, size=size, job=agreed, **kwargs)

    def _join(self, pool: Pool, job: str, rank: int, size: int, cell_bytes: int | None,
              ncells: int | None, eager_bytes: int | None, timeout_ms: int,
              dead_ms: int, join_ms: int, domain: int) -> None:
        try:
            self._c = _native.MsgComm(
                pool, job, rank, size, _positive("cell_bytes", cell_bytes),
                _positive("ncells", ncells), _positive("eager_bytes", eager_bytes),
                timeout_ms, dead_ms, join_ms, domain)
        except OSError as e:
            raise self._join_error(e, job, rank, size) from None

    def _join_error(self, e: OSError, job: str, rank: int, size: int) -> OSError:
        where = f"job {job} rank {rank} on pool {self.pool_path}"
        if e.errno == errno.ETIMEDOUT:
            return PeerLostError(-1, f"{where}: not every one of {size} ranks joined in time; "
                                     f"start them all, or raise join_timeout")
        if e.errno == errno.EPROTONOSUPPORT:
            return MsgVersionError(e.errno, f"{where}: a rank of the job runs a cxlkit whose "
                                            f"messaging format differs from this one's; run "
                                            f"every rank with the same cxlkit version")
        if e.errno == errno.EINVAL:
            return MsgValueError(e.errno, f"{where}: " + (
                native_reason(e) or "bad ring geometry or eager size (cell_bytes a multiple of "
                                    "64 >= 128, ncells a power of two >= 4, eager_bytes <= half "
                                    "a ring)"))
        if e.errno == errno.EEXIST:
            return MsgExistsError(e.errno, f"{where}: {self._foreign_objects(job, rank)} of an "
                                           f"earlier run belong to another host and are not this "
                                           f"host's to remove; destroy them from that host (or "
                                           f"`cxlkit pool release` it if it is gone), or use "
                                           f"another job name")
        return _msg_typed(e, where, _MSG_COMM_ERRORS)

    def _foreign_objects(self, job: str, rank: int) -> str:
        prefix = f"msg.{job}.{rank}."
        try:
            names = [f"{o.name} (host {o.host})" for o in self._pool.list()
                     if o.name.startswith(prefix) and o.host != self._pool.host_id]
        except OSError:
            names = []
        return "objects " + ", ".join(names) if names else f"objects {prefix}*"

    # -- lifetime
    def close(self) -> None:
        """Barrier with every rank, then remove this rank's rings, buffers and windows."""
        if not self._c.closed:
            self._call(self._c.close)

    def __enter__(self) -> Comm:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        if self._c.closed:
            return f"<Comm job={self.job} closed>"
        return f"<Comm job={self.job} rank={self.rank}/{self.size}>"

    @property
    def rank(self) -> int:
        return self._call(lambda: self._c.rank)

    @property
    def size(self) -> int:
        return self._call(lambda: self._c.size)

    @property
    def wait(self) -> WaitPolicy:
        """How this comm's blocking calls poll (WaitPolicy); assign a WaitPolicy to change it,
        None for the process default."""
        return WaitPolicy._from_native(self._c.get_wait())

    @wait.setter
    def wait(self, policy: WaitPolicy | None) -> None:
        self._c.set_wait(*policy_arg(policy))

    def spin_stats(self) -> WaiterStats:
        """This comm's waiter counters (WaiterStats, read-only attributes), for its adaptive
        spin (docs/msg.md, "Adaptive spin"): budget_us (the next wait's spin before the woke
        rule), cap_us, overcommitted, waits, hits (answered while spinning), slept, restores,
        shrinks, woke_skips, yield_waits. The same record as wake_stats(): one waiter
        counts both. Reading it as a dict (`stats["hits"]`) is deprecated: read the
        attribute, or as_dict()."""
        return self._c.waiter_stats()

    def wake_stats(self) -> WaiterStats:
        """This comm's waiter counters (the same record as spin_stats()), for the same-host
        wake-up over its rings (docs/msg.md, "Same-host wake-up"): enabled, futex_waits,
        woken, timeouts, interrupted, fallbacks, rechecks (of the rings peers write to us),
        wakes_sent (of ours)."""
        return self._c.waiter_stats()

    @property
    def eager_bytes(self) -> int:
        """Messages up to this size travel in ring cells; larger ones by rendezvous."""
        return self._c.eager_bytes

    # -- argument checks (ValueError before crossing into native)
    def _rank(self, label: str, r: int, *, any_ok: bool = False) -> int:
        if isinstance(r, bool) or not isinstance(r, int) or not (
                0 <= r < self.size or (any_ok and r == ANY_SOURCE)):
            raise ValueError(f"{label} {r!r}: not a rank of job {self.job} (0..{self.size - 1}"
                             f"{' or ANY_SOURCE' if any_ok else ''})")
        return r

    @staticmethod
    def _tag(t: int, *, any_ok: bool = False) -> int:
        if isinstance(t, bool) or not isinstance(t, int) or not (
                0 <= t <= TAG_MAX or (any_ok and t == ANY_TAG)):
            raise ValueError(f"tag {t!r}: expected 0..{TAG_MAX}{' or ANY_TAG' if any_ok else ''}")
        return t

    def _call(self, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except OSError as e:
            raise self._error(e) from None
        except ValueError:
            if self._c.closed:  # the binding's refusal of a closed communicator
                raise MsgValueError(errno.EBADF, f"job {self.job} rank {self._my_rank} on pool "
                                                 f"{self.pool_path}: the communicator is "
                                                 "closed; make a new Comm") from None
            raise

    def _error(self, e: OSError) -> OSError:
        where = f"job {self.job} rank {self._my_rank} on pool {self.pool_path}"
        if e.errno == errno.ETIMEDOUT:
            r = self._c.failed_rank
            who = f"rank {r}" if r >= 0 else "a rank"
            return PeerLostError(r, f"{where}: {who} is gone or did not answer in time "
                                    f"({e.filename})")
        if e.errno == errno.EBADMSG:
            r = self._c.failed_rank
            who = f"rank {r}" if r >= 0 else "a rank"
            return MsgCorruptError(r, f"{where}: {who} wrote what no correct rank writes (a "
                                      "corrupt ring or message, bytes failing their checksum, "
                                      "a rendezvous length outside its buffer, or a "
                                      "request-to-send naming pool memory outside its block) "
                                      f"({e.filename}); restart the job", e.filename)
        return _msg_typed(e, where, _MSG_COMM_ERRORS)

    # -- two-sided
    def send(self, data: Any, dest: int, tag: int = 0, *, sync: bool = False) -> None:
        """Send a bytes-like object; with sync, return once the receiver matched it."""
        self._call(self._c.send, _buf(data), self._rank("dest", dest), self._tag(tag), sync)

    def recv_into(self, buf: Any, source: int = ANY_SOURCE, tag: int = ANY_TAG) -> Status:
        """Receive into a writable buffer; TruncationError (buffer holds the first bytes) when
        the message is longer."""
        s, t, n, trunc = self._call(self._c.recv_into, _buf(buf),
                                    self._rank("source", source, any_ok=True),
                                    self._tag(tag, any_ok=True))
        if trunc:
            raise TruncationError(n, memoryview(buf).nbytes, s, t)
        return Status(s, t, n)

    def recv(self, source: int = ANY_SOURCE, tag: int = ANY_TAG) -> tuple[bytes, Status]:
        """Receive the next matching message whatever its size."""
        st = self.probe(source, tag)
        buf = bytearray(st.count)
        got = self.recv_into(buf, st.source, st.tag)  # the probed message: order per (source, tag)
        return bytes(buf), got

    def isend(self, data: Any, dest: int, tag: int = 0, *, sync: bool = False) -> Request:
        """Start a send; `data` must stay unchanged until the request completes."""
        return Request(self, self._call(self._c.isend, _buf(data), self._rank("dest", dest),
                                        self._tag(tag), sync))

    def irecv(self, buf: Any, source: int = ANY_SOURCE, tag: int = ANY_TAG) -> Request:
        return Request(self, self._call(self._c.irecv, _buf(buf),
                                        self._rank("source", source, any_ok=True),
                                        self._tag(tag, any_ok=True)), buf)

    def iprobe(self, source: int = ANY_SOURCE, tag: int = ANY_TAG) -> Status | None:
        r = self._call(self._c.iprobe, self._rank("source", source, any_ok=True),
                       self._tag(tag, any_ok=True))
        return None if r is None else Status(*r)

    def probe(self, source: int = ANY_SOURCE, tag: int = ANY_TAG) -> Status:
        return Status(*self._call(self._c.probe, self._rank("source", source, any_ok=True),
                                  self._tag(tag, any_ok=True)))

    def sendrecv(self, data: Any, dest: int, source: int = ANY_SOURCE, *, sendtag: int = 0,
                 recvtag: int = ANY_TAG) -> tuple[bytes, Status]:
        req = self.isend(data, dest, sendtag)
        out = self.recv(source, recvtag)
        req.wait()
        return out

    # -- collectives
    def barrier(self) -> None:
        self._call(self._c.barrier)

    def bcast(self, buf: Any, root: int = 0) -> None:
        """Broadcast a writable buffer (the same size on every rank) from root, in place."""
        self._call(self._c.bcast, buf, self._rank("root", root))

    def allreduce(self, array: Any, op: str = "sum") -> Any:
        """Elementwise sum/min/max of a numpy array over every rank; a new array."""
        import numpy as np

        a = np.ascontiguousarray(array)
        code, _ = _type(a.dtype)
        out = np.empty_like(a)
        self._call(self._c.allreduce, a, out, a.size, code, _op(op, ("sum", "min", "max")))
        return out

    def alloc_mem(self, nbytes: int | str) -> PoolMemory:
        """nbytes (zeroed) of this rank's pool partition: a send above the eager limit from
        it travels in one copy (the receiver copies straight out of it)."""
        nbytes = parse_size(nbytes, "nbytes") if isinstance(nbytes, str) else nbytes
        if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes <= 0:
            raise ValueError(f"nbytes {nbytes!r}: expected an int > 0 or a size such as '64K'")
        return PoolMemory(self, self._call(_native.MsgMemory, self._c, nbytes))

    def peer_coherent(self, peer: int) -> bool:
        """Whether messages between this rank and peer skip the flushes and invalidates: the
        pool is coherent, peer is this rank, or on coherence "none" both passed one domain."""
        if isinstance(peer, bool) or not isinstance(peer, int) or not 0 <= peer < self.size:
            raise ValueError(f"peer {peer!r}: expected a rank 0..{self.size - 1}")
        return bool(self._call(self._c.peer_coherent, peer))

    def is_pool_mem(self, buf: Any) -> bool:
        """Whether the bytes of buf lie in one block of alloc_mem (a send travels in one copy)."""
        return bool(self._call(self._c.is_pool_mem, _buf(buf)))

    def window(self, nbytes: int | str) -> Window:
        """Collective: a one-sided window of nbytes (zeroed) on every rank."""
        nbytes = parse_size(nbytes, "nbytes") if isinstance(nbytes, str) else nbytes
        if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
            raise ValueError(f"nbytes {nbytes!r}: expected an int >= 0 or a size such as '4K'")
        return Window(self, self._call(_native.MsgWindow, self._c, nbytes), nbytes)
