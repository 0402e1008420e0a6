"""One end of a bare single-producer/single-consumer ring in a pool object: the transport under
Comm and the RPC channel, usable on its own."""
from __future__ import annotations

import errno
from typing import Any

from .. import _native
from ..errors import MsgCorruptError, MsgError, MsgValueError, _msg_typed
from ..pool import Pool, _check_name
from .wait import WaitPolicy, policy_arg

# a bare ring's errors: EBADMSG at open is a foreign object (not a ring), later a bad cell
_RING_ERRORS = {errno.EBADMSG: (MsgCorruptError, "not a ring (bad geometry), or a cell no "
                                                 "correct producer writes"),
                errno.EPROTO: (MsgError, "the other end's call: a producer pushes, a consumer "
                                         "pops")}


class Ring:
    """One end of a bare single-producer/single-consumer ring in a pool object (the
    transport under Comm and the RPC channel). Ring.create makes the object; Ring.open
    attaches to one. push returns False when full; pop returns (payload, kind) or None."""

    def __init__(self, native: Any, name: str, where: str) -> None:
        self._r, self.name, self._where = native, name, where

    @classmethod
    def create(cls, pool: Pool, name: str, *, cell_bytes: int = 256, ncells: int = 64,
               role: str = "producer") -> Ring:
        if _native.ring_bytes(cell_bytes, ncells) == 0:
            raise ValueError(f"ring {name}: cell_bytes {cell_bytes} (a multiple of 64, 64..1 MiB) "
                             f"or ncells {ncells} (a power of two, 2..2^20) out of range")
        return cls._make(pool, name, role, cell_bytes, ncells, True)

    @classmethod
    def open(cls, pool: Pool, name: str, *, role: str = "consumer") -> Ring:
        return cls._make(pool, name, role, 0, 0, False)

    @classmethod
    def _make(cls, pool: Pool, name: str, role: str, cell_bytes: int, ncells: int,
              create: bool) -> Ring:
        roles = {"producer": _native.RING_PRODUCER, "consumer": _native.RING_CONSUMER}
        if role not in roles:
            raise ValueError(f"role {role!r}: expected 'producer' or 'consumer'")
        if not isinstance(pool, Pool):
            raise TypeError(f"pool {pool!r}: expected a cxlkit.Pool")
        where = f"ring {name} in pool {pool.path}"
        try:
            return cls(_native.Ring(pool, _check_name(name), roles[role], cell_bytes, ncells,
                                    create), name, where)
        except OSError as e:
            raise _msg_typed(e, where, _RING_ERRORS) from None

    def _call(self, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except OSError as e:
            raise _msg_typed(e, self._where, _RING_ERRORS) from None
        except ValueError as e:
            if str(e).startswith("closed ring"):  # the binding's refusal of a closed ring
                raise MsgValueError(errno.EBADF, f"{self._where}: the ring is closed; open it "
                                                 "again") from None
            raise

    @property
    def payload_max(self) -> int:
        return self._call(lambda: self._r.payload_max)

    @property
    def ncells(self) -> int:
        return self._r.ncells

    def push(self, data: bytes, kind: int = 0) -> bool:
        if len(data) > self.payload_max:
            raise ValueError(f"ring {self.name}: {len(data)} bytes, a cell holds {self.payload_max}")
        return self._call(self._r.push, bytes(data), kind)

    def pop(self) -> tuple[bytes, int] | None:
        return self._call(self._r.pop)

    def space(self) -> int:
        return self._call(self._r.space)

    def wait(self, timeout: float | None = None, *, policy: WaitPolicy | None = None) -> bool:
        """Block until there is something to do: a consumer until pop() would return a cell,
        a producer until push() has room. False once `timeout` seconds passed (None: no
        limit); MsgClosedError (a BrokenPipeError) when the producer closed the ring and it
        is drained."""
        if timeout is not None and (isinstance(timeout, bool) or
                                    not isinstance(timeout, (int, float)) or
                                    not 0 < timeout <= 86400):
            raise ValueError(f"timeout {timeout!r}: expected seconds in (0, 86400] or None")
        ms = 0 if timeout is None else max(1, int(timeout * 1000))
        return self._call(self._r.wait, *policy_arg(policy), ms)

    def close(self) -> None:
        self._r.close()

    def __enter__(self) -> Ring:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
