"""Host slots of a pool as `cxlkit pool hosts` shows them: read from the pool file without
attaching (when no slot is free, attaching is what fails), and the slots whose process exited."""
from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass
from typing import Any, Union

from .. import pool as P


@dataclass(frozen=True)
class HostRow:
    """A host slot the CLI shows that the library did not give: one read from the pool file
    without attaching (no slot is free, so there is no handle whose cxk_pool_host could be
    bound), or one marked "exited" (the CLI's own test of the pid: no state of the library).
    A HostInfo is the library's C struct and carries only the library's states, so these
    rows are a record of their own here, with HostInfo's fields in its order and as_dict():
    the table and --json treat both kinds alike."""
    slot: int
    state: str
    name: str
    pid: int
    heartbeat_age_s: float | None
    extents: int
    held_bytes: int
    used_bytes: int
    objects: int

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


Row = Union[P.HostInfo, HostRow]


def _age(s: float | None) -> str:
    return "-" if s is None else f"{s:.1f}"


def _hosts_from_file(path: str) -> list[HostRow]:
    """Host slots read from a version 2 pool file without attaching to it (when no slot is
    free, attaching is what fails). Display only: every field is bounds-checked, nothing is
    written, and values are as each host last wrote them."""
    import struct

    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        sb = f.read(248)
        if len(sb) < 248 or sb[:8] != b"CXLKPOOL" or struct.unpack_from("<I", sb, 8)[0] != 2:
            raise ValueError("not a version 2 cxlkit pool")
        hosts = struct.unpack_from("<I", sb, 40)[0]
        timeout_ns = struct.unpack_from("<Q", sb, 184)[0]
        extent, n, map_off, map_bytes, claims_off = struct.unpack_from("<QQQQQ", sb, 200)
        words = (n + 31) // 32
        if not (1 <= hosts <= 64 and 1 <= n <= 1 << 22 and map_bytes >= words * 8
                and map_off + hosts * map_bytes <= size and claims_off + hosts * 128 <= size
                and 4096 + hosts * 4096 <= size):
            raise ValueError("pool superblock out of range")
        now = time.time_ns()
        rows = []
        for h in range(hosts):
            f.seek(4096 + h * 4096)
            line = f.read(256)
            tag = line[:32].split(b"\0", 1)[0].decode("utf-8", "replace")
            boot, beat = struct.unpack_from("<Qq", line, 32)
            pid = struct.unpack_from("<Q", line, 80)[0]
            used, _, nlive = struct.unpack_from("<QQQ", line, 192)
            f.seek(claims_off + h * 128 + 64)
            door = struct.unpack("<Q", f.read(8))[0]
            f.seek(map_off + h * map_bytes)
            m = struct.unpack(f"<{words}Q", f.read(words * 8))
            held, prev = 0, 0
            for e in range(n):
                st_ = (m[e // 32] >> (2 * (e % 32))) & 3
                prev = st_ if st_ == 3 or (st_ == 2 and prev in (2, 3)) else 0
                held += prev != 0
            if boot == 1:
                state, age = ("claimed", (now - door) / 1e9) if door else ("free", None)
            else:
                age = (now - beat) / 1e9
                state = "live" if now - beat < timeout_ns else "dead"
            rows.append(HostRow(slot=h, state=state, name=tag, pid=pid, heartbeat_age_s=age,
                                 extents=held, held_bytes=held * extent,
                                 used_bytes=min(used, held * extent), objects=nlive))
    return rows


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's live process
    return True


def _exited(path: str, rows: list[Row], me: int) -> list[Row]:
    """Rows whose heartbeat is still young but whose process is gone are 'exited': the test
    the pool itself makes (a slot of this boot, as this host's slot says, and kill(pid, 0)
    failing with ESRCH). Only pool files are read; other rows are returned unchanged."""
    if me < 0 or not os.path.isfile(path):
        return rows
    with open(path, "rb") as f:
        def boot(h: int) -> bytes:
            f.seek(4096 + h * 4096 + 32)  # HostSlot.boot (docs/pool-format.md)
            return f.read(8)

        mine = boot(me)
        return [HostRow(**{**h.as_dict(), "state": "exited"})
                if h.state == "live" and h.slot != me and h.pid and boot(h.slot) == mine
                and not _pid_alive(h.pid) else h for h in rows]
