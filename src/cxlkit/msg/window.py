"""What a Comm hands out besides messages: requests of non-blocking calls, pool memory a
rank sends from without a copy, and one-sided windows (put, get, accumulate, the epochs)."""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import TruncationError

if TYPE_CHECKING:
    from .comm import Comm

# element types and reduction ops as the C ABI numbers them (enum cxk_msg_type / cxk_msg_op)
_TYPES = {"int32": (0, "i"), "int64": (1, "q"), "uint32": (2, "I"), "uint64": (3, "Q"),
          "float32": (4, "f"), "float64": (5, "d")}
_OPS = {"sum": 0, "min": 1, "max": 2, "replace": 3, "no_op": 4}


@dataclass(frozen=True)
class Status:
    source: int
    tag: int
    count: int  # bytes of the message


def _type(dtype: Any) -> tuple[int, str]:
    name = getattr(dtype, "name", None) or str(dtype)
    if name not in _TYPES:
        raise ValueError(f"dtype {dtype!r}: expected one of {', '.join(_TYPES)}")
    return _TYPES[name]


def _op(op: str, allowed: tuple[str, ...]) -> int:
    if op not in allowed:
        raise ValueError(f"op {op!r}: expected one of {', '.join(allowed)}")
    return _OPS[op]


class Request:
    """A non-blocking send or receive. wait() returns its Status; test() it or None."""

    def __init__(self, comm: Comm, native: Any, buf: Any = None) -> None:
        self._comm, self._r, self._buf = comm, native, buf

    @property
    def done(self) -> bool:
        return self._r.done

    def _status(self, r: tuple[int, int, int, bool]) -> Status:
        s, t, n, trunc = r
        if trunc:
            raise TruncationError(n, memoryview(self._buf).nbytes, s, t)
        return Status(s, t, n)

    def wait(self) -> Status:
        return self._status(self._comm._call(self._r.wait))

    def test(self) -> Status | None:
        r = self._comm._call(self._r.test)
        return None if r is None else self._status(r)

    def cancel(self) -> None:
        """Withdraw a receive not yet matched (MsgError if it already was, or is a send)."""
        self._comm._call(self._r.cancel)


class PoolMemory:
    """Memory of a comm in the pool (Comm.alloc_mem). `view` is a writable memoryview of it
    (numpy.frombuffer(mem.view) an array); the comm's calls take the object itself or any
    slice of its view. A send from it above the eager limit is not
    copied by the sender: the receiver copies straight out, and the send completes at its
    answer — keep the bytes unchanged until then, as for any isend. free() refuses
    (BufferError) while views are alive and (MsgError, EBUSY) while a send from it is."""

    def __init__(self, comm: Comm, native: Any) -> None:
        self._comm, self._m = comm, native

    @property
    def nbytes(self) -> int:
        return int(self._m.nbytes)

    @property
    def view(self) -> memoryview:
        return memoryview(self._m)

    def free(self) -> None:
        self._comm._call(self._m.free)

    def __enter__(self) -> PoolMemory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.free()


class Window:
    """One-sided access to every rank's window of a job. `local` is this rank's window
    memory (a memoryview); offsets are bytes. Epochs: fence(), post/start/complete/wait, or
    lock/unlock for passive target (the target applies operations when it calls into cxlkit)."""

    def __init__(self, comm: Comm, native: Any, nbytes: int) -> None:
        self._comm, self._w, self.nbytes = comm, native, nbytes

    @property
    def local(self) -> memoryview:
        return memoryview(self._w)

    def size_of(self, rank: int) -> int:
        return self._call(self._w.size_of, self._comm._rank("rank", rank))

    def _call(self, fn: Any, *args: Any) -> Any:
        return self._comm._call(fn, *args)

    def put(self, data: Any, target: int, offset: int = 0) -> None:
        self._call(self._w.put, data, self._comm._rank("target", target), _off(offset))

    def get(self, nbytes: int, target: int, offset: int = 0) -> bytes:
        buf = bytearray(_off(nbytes))
        self._call(self._w.get_into, buf, self._comm._rank("target", target), _off(offset))
        return bytes(buf)

    def accumulate(self, array: Any, target: int, offset: int = 0, op: str = "sum") -> None:
        import numpy as np

        a = np.ascontiguousarray(array)
        code, _ = _type(a.dtype)
        self._call(self._w.accumulate, a, a.size, code, self._comm._rank("target", target),
                   _off(offset), _op(op, ("sum", "min", "max", "replace")))

    def fetch_and_op(self, value: int | float | None, target: int, offset: int = 0, *,
                     dtype: str = "int64", op: str = "sum") -> int | float:
        code, fmt = _type(dtype)
        operand = struct.pack(fmt, 0 if value is None else value)
        old = self._call(self._w.fetch_and_op, operand, code, self._comm._rank("target", target),
                         _off(offset), _op(op, tuple(_OPS)))
        return struct.unpack(fmt, old)[0]

    def compare_and_swap(self, compare: int | float, swap: int | float, target: int,
                         offset: int = 0, *, dtype: str = "int64") -> int | float:
        code, fmt = _type(dtype)
        old = self._call(self._w.compare_and_swap, struct.pack(fmt, compare),
                         struct.pack(fmt, swap), code, self._comm._rank("target", target),
                         _off(offset))
        return struct.unpack(fmt, old)[0]

    def flush(self, target: int | None = None) -> None:
        self._call(self._w.flush, -1 if target is None else self._comm._rank("target", target))

    def fence(self) -> None:
        self._call(self._w.fence)

    def post(self, ranks: list[int]) -> None:
        self._call(self._w.post, [self._comm._rank("rank", r) for r in ranks])

    def start(self, ranks: list[int]) -> None:
        self._call(self._w.start, [self._comm._rank("rank", r) for r in ranks])

    def complete(self) -> None:
        self._call(self._w.complete)

    def wait(self) -> None:
        self._call(self._w.wait)

    def lock(self, target: int, *, exclusive: bool = True) -> None:
        self._call(self._w.lock, 2 if exclusive else 1, self._comm._rank("target", target))

    def unlock(self, target: int) -> None:
        self._call(self._w.unlock, self._comm._rank("target", target))

    def free(self) -> None:
        """Collective: remove the window (views of `local` must be released first)."""
        self._call(self._w.free)

    def __enter__(self) -> Window:
        return self

    def __exit__(self, *exc: object) -> None:
        self.free()


def _buf(x: Any) -> Any:
    """The buffer the native calls take: a PoolMemory's own, else x."""
    return x._m if isinstance(x, PoolMemory) else x


def _off(v: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValueError(f"offset/size {v!r}: expected an int >= 0")
    return v
