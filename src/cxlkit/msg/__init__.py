"""MPI-style messaging over a shared pool: comm (a job of ranks: send/recv with MPI matching,
collectives), window (requests, pool memory, one-sided windows), ring (bare rings), rpc (a
request/answer channel on rings), wait (how blocking calls poll). docs/msg.md has the protocol."""
from ..errors import (MsgClosedError, MsgCorruptError, MsgError, MsgExistsError,
                      MsgMemoryError, MsgNotFoundError, MsgPermissionError, MsgPoolFullError,
                      MsgValueError, MsgVersionError, PeerLostError, TruncationError,
                      WindowRangeError)
from .comm import ANY_SOURCE, ANY_TAG, TAG_MAX, Comm, WaiterStats
from .ring import Ring
from .wait import WaitPolicy
from .window import PoolMemory, Request, Status, Window

__all__ = ["ANY_SOURCE", "ANY_TAG", "Comm", "PoolMemory", "Request", "Ring", "Status", "WaitPolicy",
           "WaiterStats", "Window"]
