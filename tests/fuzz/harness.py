"""What the fuzz and crash harnesses and the tests built on them share: crc32c (for mutations
that keep a checksum valid), a forked-child runner that tells a typed error from a crash and a
hang, the payload every writer stamps on an object, and the writers' journal."""
from __future__ import annotations

import hashlib
import multiprocessing as mp
import os
from pathlib import Path


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 & -(crc & 1))
    return crc ^ 0xFFFFFFFF


def in_child(fn, *args, timeout: float = 60.0):
    """Run fn(*args) in a forked child. Returns (kind, value): ("ok", fn's result),
    ("err", "Type: message") for an exception, ("hang", None) when no answer came within
    timeout (the child is killed), ("signal", exit code) when it died without a word."""
    ctx = mp.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)

    def body():
        try:
            send.send(("ok", fn(*args)))
        except BaseException as e:  # the caller judges the type and message
            send.send(("err", f"{type(e).__name__}: {e}"))
        os._exit(0)

    p = ctx.Process(target=body)
    p.start()
    send.close()
    if not recv.poll(timeout):
        p.kill()
        p.join()
        return "hang", None
    try:
        kind, val = recv.recv()
    except EOFError:
        p.join(timeout)
        return "signal", p.exitcode
    p.join(timeout)
    return kind, val


def payload(name: str, n: int) -> bytes:
    """The n bytes a writer puts in object `name` (so a reader can check them without a log)."""
    seed = hashlib.blake2b(name.encode(), digest_size=8).digest()
    return (seed * (n // 8 + 1))[:n]


def journal_state(journal: str) -> tuple[set[str], str | None]:
    """A writer's journal ("B name" before an operation, "P name" / "D name" after a publish or
    destroy returned): the names that must be live, and the one in flight when it was killed."""
    live: set[str] = set()
    in_flight = None
    for line in Path(journal).read_text().splitlines():
        op, name = line.split()
        if op == "B":
            in_flight = name
            continue
        in_flight = None
        (live.add if op == "P" else live.discard)(name)
    return live, in_flight
