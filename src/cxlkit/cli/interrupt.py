"""Ctrl-C for commands that start child processes (`cxlkit demo`): the terminal sends SIGINT to
the whole process group, and a Python child would die of it with a traceback of its own. Inside
shielded_children() every multiprocessing child starts with SIGINT ignored (an ignored signal
stays ignored across fork and exec, and Python then installs no KeyboardInterrupt for it); this
process alone takes Ctrl-C as KeyboardInterrupt, unwinds (its `finally` blocks clean up), and
ends the children it left."""
from __future__ import annotations

import contextlib
import multiprocessing.context as mpc
import multiprocessing as mp
import signal
import threading
from collections.abc import Iterator

_END_WAIT_S = 5.0  # a terminated child gets this long before SIGKILL
_STARTERS = ("SpawnProcess", "ForkProcess", "ForkServerProcess")


def end_children() -> None:
    """Terminate this process's multiprocessing children and reap them (SIGKILL after a bound)."""
    kids = mp.active_children()
    for c in kids:
        c.terminate()
    for c in kids:
        c.join(_END_WAIT_S)
        if c.is_alive():
            c.kill()
            c.join(_END_WAIT_S)


def _ignoring_sigint(start):
    def _popen(process_obj):
        # a Ctrl-C during these few milliseconds is dropped: the child must be made ignoring it
        old = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            return start(process_obj)
        finally:
            signal.signal(signal.SIGINT, old)
    return staticmethod(_popen)


@contextlib.contextmanager
def shielded_children() -> Iterator[None]:
    """Run the body with children shielded from Ctrl-C (see the module doc); on any way out
    by an exception, the children still running are ended. Outside the main thread it runs
    the body as is (signals are the main thread's)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    classes = [getattr(mpc, n) for n in _STARTERS if hasattr(mpc, n)]
    saved = [(c, c.__dict__["_Popen"]) for c in classes if "_Popen" in c.__dict__]
    for c, orig in saved:
        c._Popen = _ignoring_sigint(orig.__func__)
    try:
        yield
    except BaseException:
        end_children()
        raise
    finally:
        for c, orig in saved:
            c._Popen = orig
