"""Seeing another process's thread asleep, for the wake-up tests: the kernel function a
sleeping thread waits in (/proc/<pid>/task/<tid>/wchan: a futex wait, a timed sleep). A test
that must act on a sleeper (send to a rank blocked in a receive, answer a client blocked in
its call) waits until it sees the sleep, so that the sleep is certain, not a guess of how
long a sleep() takes to outlast the peer's spin."""
from __future__ import annotations

import os
import threading
import time

FUTEX = ("futex",)
TIMED = ("sleep",)  # nanosleep's hrtimer wait
ANY_SLEEP = ("futex", "sleep")  # a futex wait or a timed sleep (nanosleep's hrtimer)
LOCK_WAIT = ("setlk", "lock_inode_wait")  # a blocking fcntl lock (by kernel version)


def sleeping_in(pid: int, tid: int | None = None) -> str:
    """The kernel function thread tid (default: pid's main thread) sleeps in; "" while it
    runs or where the kernel hides it (wchan "0")."""
    tid = pid if tid is None else tid
    with open(f"/proc/{pid}/task/{tid}/stat") as f:
        state = f.read().rsplit(")", 1)[1].split()[0]
    if state != "S":
        return ""
    with open(f"/proc/{pid}/task/{tid}/wchan") as f:
        w = f.read().strip()
    return "" if w == "0" else w


def wait_asleep(pid: int, where: tuple[str, ...] = FUTEX, bound_s: float = 30.0) -> None:
    """Until pid's main thread sleeps in a kernel function whose name holds one of `where`;
    AssertionError after bound_s (it never slept there)."""
    deadline = time.monotonic() + bound_s
    while not any(w in sleeping_in(pid) for w in where):
        assert time.monotonic() < deadline, f"pid {pid} not asleep in {where} after {bound_s} s"
        time.sleep(0.0002)  # a poll interval: the sleep we wait for lasts until we act


def futex_sleeps_visible() -> bool:
    """Whether this kernel names a thread's futex wait in wchan (a thread of ours blocked
    on an Event, looked at until it shows, for at most 10 s)."""
    ev = threading.Event()
    t = threading.Thread(target=ev.wait)
    t.start()
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if "futex" in sleeping_in(os.getpid(), t.native_id):
                return True
            time.sleep(0.001)
        return False
    finally:
        ev.set()
        t.join()
