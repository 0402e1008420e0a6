"""RPC over a shared pool (the Beluga pattern on cxlkit rings): a server polls its clients'
request slots and answers into their reply slots; clients and server may be on different
hosts of the pool. The C library (cxk_rpc_*) does the work; this is its Python face.

    server = rpc.Server(pool, "meta")

    @server.handler("lookup")
    def lookup(data: bytes) -> bytes:
        return table.get(data, b"")

    server.serve_in_thread()
    with rpc.Client(pool, "meta") as c:
        c.call("lookup", b"key")

A method is named by a string (its number on the wire is the CRC-32 of the name) or by a
number (to talk to C servers). A handler takes the request bytes and returns a bytes-like
object or None; an exception in it reaches the caller as RpcError with its text. Requests and
replies are limited to `payload_max` bytes (slot_bytes less 32).

Server and Client work on the caller's `pool` (its host id and handle): close them before
the pool. Every failure is an RpcError (errors.py) naming the service, its pool and, for a
client, its slot: RpcServerLostError, RpcTimeoutError, RpcBusyError, RpcCorruptError (a ring
or service object holds what no correct peer writes), RpcPoolFullError. Serve threads still
running at interpreter exit are stopped and joined there.
"""
from __future__ import annotations

import atexit
import errno
import hashlib
import os
import struct
import threading
import time
import weakref
import zlib
from collections.abc import Callable, Iterable
from typing import Any

from .. import _native
from ..errors import (PeerLostError, RpcBusyError, RpcCorruptError, RpcError, RpcPoolFullError,
                     RpcServerLostError, RpcTimeoutError)
from ..pool import Pool, machine_tag
from .wait import WaitPolicy, policy_arg

__all__ = ["Client", "Server", "method_id"]

Handler = Callable[[bytes], Any]

_NAME_OK = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")


def _service(name: object) -> str:
    if not isinstance(name, str) or not 1 <= len(name) <= _native.RPC_NAME_MAX or \
            not set(name) <= _NAME_OK:
        raise ValueError(f"service name {name!r}: expected 1..{_native.RPC_NAME_MAX} of "
                         f"[A-Za-z0-9_-]")
    return name


def method_id(method: str | int) -> int:
    """The wire number of a method: an int 0..2^32-1 as it is, a name's CRC-32."""
    if isinstance(method, bool):
        raise ValueError(f"method {method!r}: expected a name or an int 0..2^32-1")
    if isinstance(method, int):
        if not 0 <= method <= 0xFFFFFFFF:
            raise ValueError(f"method {method}: expected 0..2^32-1")
        return method
    if isinstance(method, str) and method:
        return zlib.crc32(method.encode())
    raise ValueError(f"method {method!r}: expected a non-empty name or an int 0..2^32-1")


def _positive(label: str, v: int, *, power_of_two: bool = False, multiple: int = 1) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0 or v % multiple or (
            power_of_two and v & (v - 1)):
        want = "a power of two" if power_of_two else f"a positive multiple of {multiple}"
        raise ValueError(f"{label} {v!r}: expected {want}")
    return v


_ERRORS: dict[int, tuple[type[RpcError], str]] = {
    errno.EPIPE: (RpcServerLostError, "the server is gone (closed, or its process ended); "
                                      "start a server and connect again"),
    errno.EBUSY: (RpcBusyError, "every client slot is held by a live client (or one on "
                                "another machine, whose end this one cannot prove); close "
                                "one, or make the server with a larger max_clients"),
    errno.EBADMSG: (RpcCorruptError, "the service's objects hold what no correct peer writes "
                                     "(a ring head or cell outside its legal range); close "
                                     "this end and connect again"),
    errno.ENOSPC: (RpcPoolFullError, "no room in this host's partition of the pool for the "
                                     "service's rings; close objects or use a larger pool"),
}


def _rpc_error(e: OSError, what: str, timeout_why: str = "no answer in time") -> OSError:
    """The RpcError subclass for native error e, its message naming `what` (service, pool
    and, for a client, its slot) and its filename the service. ValueError (a closed pool or
    server) passes as it is."""
    if isinstance(e, RpcError) or not isinstance(e, OSError):
        return e
    cls, why = _ERRORS.get(e.errno or 0, (RpcError, os.strerror(e.errno or 0)))
    if e.errno == errno.ETIMEDOUT:
        cls, why = RpcTimeoutError, timeout_why
    return cls(e.errno, f"{what}: {why}", e.filename)


# Servers whose serve thread may be running: stopped and joined at interpreter exit, before
# daemon threads are frozen (a thread that takes the GIL back from a native wait after that
# is unwound through C++ frames, which aborts the process).
_SERVING: weakref.WeakSet[Server] = weakref.WeakSet()
_EXIT_JOIN_S = 5.0  # a serve loop sees stop() within one 100 ms wait slice or one handler


@atexit.register
def _stop_serving() -> None:
    servers = list(_SERVING)
    for srv in servers:
        srv._s.stop()
    for srv in servers:
        t = srv._thread
        if t is not None and t is not threading.current_thread():
            t.join(_EXIT_JOIN_S)


class Server:
    """The server of service `name` on `pool`. Up to max_clients clients at once, each with
    depth requests in flight; slot_bytes (a multiple of 64, >= 128) bounds one request or
    reply. An earlier server of the same name on this host whose process is gone is
    replaced; a live one makes this raise RpcBusyError (EBUSY). One thread serves at a time.
    Waiting for requests polls under `wait` (a WaitPolicy; default WaitPolicy.default()):
    an idle server ends up sleeping between polls."""

    def __init__(self, pool: Pool, name: str, *, max_clients: int = 16, slot_bytes: int = 256,
                 depth: int = 128, wait: WaitPolicy | None = None) -> None:
        self.name = _service(name)
        wait_args = policy_arg(wait)
        _positive("max_clients", max_clients)
        if max_clients > 4096:
            raise ValueError(f"max_clients {max_clients}: at most 4096")
        _positive("slot_bytes", slot_bytes, multiple=64)
        if slot_bytes < 128:
            raise ValueError(f"slot_bytes {slot_bytes}: at least 128")
        _positive("depth", depth, power_of_two=True)
        if not isinstance(pool, Pool):
            raise TypeError(f"pool {pool!r}: expected a cxlkit.Pool")
        self.pool = pool
        self._what = f"service {name} on pool {pool.path}"
        try:
            self._s = _native.RpcServer(pool, name, max_clients, slot_bytes, depth)
        except OSError as e:
            if e.errno in (errno.EBUSY, errno.EEXIST):
                raise RpcBusyError(errno.EBUSY, f"{self._what}: a server is running (a live "
                                                f"process, or one of another host); stop it "
                                                f"or use another name", name) from None
            raise _rpc_error(e, self._what) from None
        self._s.set_wait(*wait_args)
        self._handlers: dict[int, tuple[str, Handler]] = {}
        self._thread: threading.Thread | None = None
        self.handled = 0  # requests answered so far

    @property
    def payload_max(self) -> int:
        return self._s.payload_max

    @property
    def clients(self) -> int:
        """Clients connected now."""
        return self._s.clients

    def wake_stats(self) -> _native.WaiterStats:
        """This server's waiter counters (msg.WaiterStats, read-only attributes; the same
        record as spin_stats()), for the same-host wake-up over the connected clients'
        request rings (docs/msg.md, "Same-host wake-up"): enabled (the pool is coherent and
        futexes work), futex_waits, woken, timeouts, interrupted, fallbacks, rechecks,
        wakes_sent. Reading it as a dict (`stats["woken"]`) is deprecated."""
        return self._s.waiter_stats()

    def spin_stats(self) -> _native.WaiterStats:
        """This server's waiter counters (as wake_stats()), for the adaptive spin of its
        waits for requests (docs/msg.md, "Adaptive spin"): budget_us (the next wait's spin
        before the woke rule), cap_us, overcommitted, waits, hits (answered while spinning),
        slept, restores, shrinks, woke_skips, yield_waits."""
        return self._s.waiter_stats()

    def handler(self, method: str | int | None = None) -> Callable[[Handler], Handler]:
        """Decorator: register fn for `method` (default: the function's name)."""
        def register(fn: Handler) -> Handler:
            self.add_handler(method if method is not None else fn.__name__, fn)
            return fn
        return register

    def add_handler(self, method: str | int, fn: Handler) -> None:
        mid = method_id(method)
        if not callable(fn):
            raise TypeError(f"handler for {method!r}: {fn!r} is not callable")
        if mid in self._handlers:
            raise ValueError(f"method {method!r}: number {mid} already taken by "
                             f"{self._handlers[mid][0]!r}")
        self._handlers[mid] = (str(method), fn)

    def _answer(self, client: int, method: int, rid: int, data: bytes) -> None:
        entry = self._handlers.get(method)
        status, out = 0, b""
        if entry is None:
            status, out = -errno.ENOSYS, f"no handler for method {method}".encode()
        else:
            try:
                r = entry[1](data)
                out = b"" if r is None else bytes(r)
                if len(out) > self.payload_max:
                    status, out = -errno.EMSGSIZE, (
                        f"{entry[0]}: reply of {len(out)} bytes, a slot holds "
                        f"{self.payload_max}").encode()
            except Exception as e:  # the caller gets it; the server goes on
                status, out = -errno.EREMOTEIO, f"{entry[0]}: {type(e).__name__}: {e}".encode()
        try:  # -EPIPE: the client left, or its ring was corrupt and it was dropped
            self._s.reply(client, rid, status, out[:self.payload_max])
        except OSError as e:
            raise _rpc_error(e, f"{self._what} client slot {client}") from None
        self.handled += 1

    def serve(self, *, timeout: float | None = None, max_requests: int | None = None) -> int:
        """Answer requests until stop(), until `timeout` seconds pass with none, or until
        max_requests were answered. Returns how many were answered."""
        if timeout is not None and timeout < 0:
            raise ValueError(f"timeout {timeout!r}: expected seconds >= 0")
        self._s.resume()  # a stop() before this call ended the previous serve()
        n = 0
        idle_ms = None if timeout is None else int(timeout * 1000)
        while max_requests is None or n < max_requests:
            # wait in slices so that signals (KeyboardInterrupt) are seen
            wait = 100 if idle_ms is None else min(100, idle_ms)
            try:
                q = self._s.next(wait)
            except OSError as e:
                raise _rpc_error(e, self._what) from None
            if q is None:
                if self._s.stopping:
                    break
                if idle_ms is not None:
                    idle_ms -= wait
                    if idle_ms <= 0:
                        break
                continue
            idle_ms = None if timeout is None else int(timeout * 1000)
            self._answer(*q)
            n += 1
        if not self._s.closed:
            try:
                self._s.flush()
            except OSError as e:
                raise _rpc_error(e, self._what) from None
        return n

    def serve_in_thread(self) -> threading.Thread:
        """serve() in a daemon thread until stop() or close()."""
        if self._thread is not None and self._thread.is_alive():
            raise RuntimeError(f"service {self.name}: already served by a thread")
        self._s.resume()
        self._thread = threading.Thread(target=self.serve, name=f"rpc-{self.name}", daemon=True)
        _SERVING.add(self)
        self._thread.start()
        return self._thread

    def stop(self) -> None:
        """Make serve() return (from a handler or another thread); pending replies are sent."""
        self._s.stop()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
            self._thread = None
            _SERVING.discard(self)

    def close(self) -> None:
        """Stop serving and remove the service's objects; clients' calls then fail with
        RpcServerLostError."""
        if self._s.closed:
            return
        self.stop()
        self._s.close()

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Client:
    """A client of service `name`: waits up to `timeout` seconds for its server to appear,
    and as long for each reply. Calls raise RpcError when the server answered with an error,
    RpcServerLostError when the server is gone, RpcTimeoutError when it did not answer in
    time. One thread at a time. Waiting for replies polls under `wait` (a WaitPolicy;
    default WaitPolicy.default())."""

    def __init__(self, pool: Pool, name: str, *, timeout: float = 10.0,
                 wait: WaitPolicy | None = None) -> None:
        self.name = _service(name)
        wait_args = policy_arg(wait)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or \
                not 0 < timeout <= 86400:
            raise ValueError(f"timeout {timeout!r}: expected seconds in (0, 86400]")
        if not isinstance(pool, Pool):
            raise TypeError(f"pool {pool!r}: expected a cxlkit.Pool")
        self.pool = pool
        self._what = f"service {name} on pool {pool.path}"
        try:
            self._c = _native.RpcClient(pool, name, max(1, int(timeout * 1000)))
        except OSError as e:
            raise _rpc_error(e, self._what, f"no server answered within {timeout} s") from None
        self._what += f" client slot {self._c.slot}"
        self._c.set_wait(*wait_args)

    @property
    def payload_max(self) -> int:
        return self._c.payload_max

    def _check(self, method: str | int, data: Any) -> tuple[int, bytes]:
        mid = method_id(method)
        try:
            raw = bytes(memoryview(data))  # bytes(5) would be five zero bytes
        except TypeError:
            raise TypeError(f"service {self.name} method {method!r}: request {type(data).__name__}"
                            f" is not bytes-like") from None
        if len(raw) > self._c.payload_max:
            raise ValueError(f"service {self.name} method {method!r}: request of {len(raw)} "
                             f"bytes, a slot holds {self._c.payload_max}")
        return mid, raw

    def _result(self, method: str | int, status: int, reply: bytes) -> bytes:
        if status < 0:
            text = reply.decode(errors="replace") or "error"
            raise RpcError(-status, f"{self._what} method {method!r}: {text}", self.name)
        return reply

    def _native_call(self, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except OSError as e:
            raise _rpc_error(e, self._what, "no reply in time") from None

    def wake_stats(self) -> _native.WaiterStats:
        """This client's waiter counters (as Server.wake_stats), of its reply ring: how its
        waits for replies slept and were woken."""
        return self._c.waiter_stats()

    def spin_stats(self) -> _native.WaiterStats:
        """This client's waiter counters (as Server.spin_stats), for the adaptive spin of
        its waits for replies."""
        return self._c.waiter_stats()

    def call(self, method: str | int, data: Any = b"") -> bytes:
        """One request, its reply's bytes."""
        mid, raw = self._check(method, data)
        status, reply = self._native_call(self._c.call, mid, raw)
        return self._result(method, status, reply)

    def call_many(self, method: str | int, requests: Iterable[Any]) -> list[bytes]:
        """Many requests of one method pipelined (up to the service's depth in flight, each
        burst published with one fence); the replies in order. The first failed one raises."""
        mid = method_id(method)
        raws = [self._check(mid, d)[1] for d in requests]
        out = self._native_call(self._c.call_many, mid, raws)
        return [self._result(method, s, r) for s, r in out]

    def close(self) -> None:
        self._c.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---- the messaging bootstrap: ranks by arrival -------------------------------------------
# For jobs started without a launcher (only the size known): the first process of a job on
# the pool becomes rank 0 and serves the job's RPC service "msgboot-<job>"; every later one
# asks it for the next rank. msg.Comm closes the service once rank 0's comm has joined, i.e.
# once every rank has its number.

def service_name(job: str) -> str:
    name = "msgboot-" + job
    return name if len(name) <= 64 else "msgboot-" + hashlib.sha256(job.encode()).hexdigest()[:40]


def _serve_ranks(pool: Pool, name: str, job: str, size: int) -> Server:
    srv = Server(pool, name, max_clients=min(size, 64), slot_bytes=128, depth=4)
    given: dict[bytes, int] = {}  # the asking process's token -> its rank (rank 0 is ours)

    @srv.handler("join")
    def join(token: bytes) -> bytes:
        # a process asking again (its earlier call timed out) gets the same rank
        if token not in given:
            if len(given) + 1 >= size:
                raise ValueError(f"job {job}: all {size} ranks are taken")
            given[token] = len(given) + 1
        return struct.pack("<i", given[token])

    srv.serve_in_thread()
    return srv


def arrival_rank(pool: Pool, job: str, size: int, wait_s: float) -> tuple[int, Server | None]:
    """(rank, the bootstrap server this process runs or None); the caller closes the server
    once its comm has joined. PeerLostError when no rank could be had within wait_s."""
    if size == 1:
        return 0, None
    name = service_name(job)
    token = f"{os.getpid()}:{time.time_ns()}:{machine_tag()}".encode()[:96]
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return 0, _serve_ranks(pool, name, job, size)
        except RpcBusyError:
            pass
        left = deadline - time.monotonic()
        try:  # another process serves: ask it
            with Client(pool, name, timeout=max(0.05, left)) as c:
                return struct.unpack("<i", c.call("join", token))[0], None
        except (RpcTimeoutError, RpcServerLostError):
            if time.monotonic() > deadline:
                raise PeerLostError(-1, f"job {job}: no process handed out ranks within "
                                        f"{wait_s} s (service {name}; a server of a crashed "
                                        f"run on another host is cleared by `cxlkit pool fsck`)"
                                    ) from None
