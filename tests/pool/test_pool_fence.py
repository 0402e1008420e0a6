"""The release fence: a host stalled past the lease timeout (SIGSTOP), released by
another host (`pool release`, adopting its objects), then resumed (SIGCONT) writes nothing
into what was released: its creates, publishes and destroys raise HostReleasedError, its
heartbeat stops, and the pool stays clean with the adopted objects intact."""
from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time

import pytest

import cxlkit
from cxlkit.errors import HostReleasedError

MiB = 1 << 20
TIMEOUT_MS = 1000  # the smallest lease timeout: the stall lasts just past it


@pytest.fixture
def path(pool_path):
    return pool_path


def _stalled_host(path: str, ready, go, out) -> None:
    """Host 'stalled': publishes 'kept', creates 'pending' (unpublished), then waits for go
    (it is stopped meanwhile) and tries to write; reports what each attempt raised."""
    with cxlkit.Pool(path, host_id="stalled", lease_timeout=TIMEOUT_MS / 1000) as p:
        p.create("kept", data=b"k" * 100_000).close()
        pending = p.create("pending", 4096)
        ready.set()
        go.wait()
        res = {}
        for what, act in (("create", lambda: p.create("late", data=b"l" * 300_000)),
                          ("publish", lambda: pending.publish()),
                          ("destroy", lambda: p.destroy("kept"))):
            try:
                act()
                res[what] = "wrote"
            except HostReleasedError as e:
                res[what] = "HostReleasedError: " + str(e)
            except Exception as e:  # noqa: BLE001 (the parent judges the type)
                res[what] = f"{type(e).__name__}: {e}"
        out.put(res)


def test_a_released_host_that_resumes_writes_nothing_and_raises_HostReleasedError(path):
    with cxlkit.Pool(path, size=16 * MiB, host_id="releaser", lease_timeout=TIMEOUT_MS / 1000,
                     max_hosts=4) as pool:
        ctx = mp.get_context("fork")
        ready, go, out = ctx.Event(), ctx.Event(), ctx.Queue()
        child = ctx.Process(target=_stalled_host, args=(path, ready, go, out))
        child.start()
        try:
            assert ready.wait(60)
            os.kill(child.pid, signal.SIGSTOP)
            # the stall: until its heartbeat is older than the lease timeout (no fixed sleep)
            deadline = time.monotonic() + 30
            while {h.name: h.state for h in pool.hosts()}.get("stalled") != "dead":
                assert time.monotonic() < deadline, "the stopped host never looked dead"
                time.sleep(0.05)
            pool.release("stalled")  # adopt its objects
            with pool.open("kept") as o:
                assert o.read() == b"k" * 100_000 and o.host == pool.host_id
            os.kill(child.pid, signal.SIGCONT)
            go.set()
            res = out.get(timeout=60)
        finally:
            os.kill(child.pid, signal.SIGCONT)
            child.join(60)
        for what in ("create", "publish", "destroy"):
            assert res[what].startswith("HostReleasedError:") and "slot was released" in res[what], res
        names = {o.name for o in pool.list()}
        assert "kept" in names and "late" not in names and "pending" not in names
        with pool.open("kept") as o:
            assert o.read() == b"k" * 100_000
        rep = pool.fsck(repair=False)
        assert rep.errors == 0 and rep.duplicate_names == 0, rep
        # the released slot stays free: the resumed host's heartbeat did not revive it
        assert all(h.name != "stalled" for h in pool.hosts())
