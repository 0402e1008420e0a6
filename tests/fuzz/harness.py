"""What the fuzz and crash harnesses and the tests built on them share: crc32c (for mutations
that keep a checksum valid), a forked-child runner that tells a typed error from a crash and a
hang, the payload every writer stamps on an object, and the writers' journal."""
from __future__ import annotations

import hashlib
import multiprocessing as mp
import os
import time
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


def in_child_steps(fn, *args, timeout: float = 60.0) -> dict:
    """Run fn(step, *args) in a forked child; fn calls step(name) before each operation, so
    a hang or a crash names the operation it happened in. Returns {"kind": "ok" | "err" |
    "hang" | "signal", "value": fn's result, "step": the last step named, "err": {"type",
    "module", "errno", "message"} for an exception, "code": the exit code of a signal}."""
    ctx = mp.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)

    def body():
        try:
            out = fn(lambda name: send.send(("step", name)), *args)
            send.send(("ok", out))
        except BaseException as e:  # the caller classifies the type and message
            send.send(("err", error_record(e)))
        os._exit(0)

    p = ctx.Process(target=body)
    p.start()
    send.close()
    res: dict = {"kind": "hang", "step": None}
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not recv.poll(left):
            p.kill()
            break
        try:
            kind, val = recv.recv()
        except EOFError:
            p.join(timeout)
            res.update(kind="signal", code=p.exitcode)
            break
        if kind == "step":
            res["step"] = val
            continue
        res.update(kind=kind, **({"value": val} if kind == "ok" else {"err": val}))
        break
    p.join()
    recv.close()
    return res


def error_record(e: BaseException) -> dict:
    """What a classifier needs of an exception: its type (and module), errno and message."""
    return {"type": type(e).__name__, "module": type(e).__module__,
            "errno": getattr(e, "errno", None), "message": str(e)[:300]}


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


# ---- recording what users do: each refusal typed or not, per operation --------------------
def typed(e: BaseException, op: str) -> bool:
    """A typed outcome: a cxlkit error class, KeyError / ValueError (a name or argument the
    pool refuses), or the OSError subclasses an operation documents (create: FileExistsError,
    destroy: PermissionError)."""
    from cxlkit import errors

    if isinstance(e, (errors.PoolError, errors.MsgError, errors.InsufficientMemoryError,
                      KeyError, ValueError)):
        return True
    return (op.startswith("create") and isinstance(e, FileExistsError)
            or op.startswith("destroy") and isinstance(e, PermissionError))


def typed_record(err: dict) -> bool:
    """typed() of an exception known only by its error_record."""
    return err["module"] == "cxlkit.errors" or err["type"] in ("KeyError", "ValueError")


class Recorder:
    """Runs operations, recording each refusal as {"op", "outcome", "err"}."""

    def __init__(self, step, who: str) -> None:
        self.step, self.who, self.events = step, who, []

    def op(self, name: str, fn, *args, **kwargs):
        self.step(f"{self.who}:{name}")
        try:
            return True, fn(*args, **kwargs)
        except Exception as e:
            outcome = "typed" if typed(e, name) else "untyped"
            self.note(name, outcome, error=error_record(e))
            return False, None

    def note(self, op: str, outcome: str, detail: str = "", error: dict | None = None) -> None:
        ev = {"who": self.who, "op": op, "outcome": outcome}
        if detail:
            ev["detail"] = detail
        if error:
            ev["err"] = error
        self.events.append(ev)


def run_children(jobs: list[tuple], timeout: float) -> list[dict]:
    """Each (fn, *args) in its own forked child at once (threads wait for them); their events,
    plus one per child that hung or died."""
    import threading

    results: list = [None] * len(jobs)

    def one(i):
        results[i] = in_child_steps(jobs[i][0], *jobs[i][1:], timeout=timeout)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(jobs))]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    events = []
    for r in results:
        if r["kind"] == "ok":
            events += r["value"]
        elif r["kind"] == "err":  # an exception outside any recorded operation (a close)
            events.append({"who": "child", "op": r["step"], "err": r["err"],
                           "outcome": "typed" if typed_record(r["err"]) else "untyped"})
        else:
            events.append({"who": "child", "op": r["step"], "outcome": {
                "hang": "hang", "signal": "crash"}[r["kind"]], "detail": str(r.get("code"))})
    return events
