"""cxlkit.rpc over the rings' same-host wake-up (native/ring/wake.cpp): a client
asleep in its wait for a reply is woken by the server's publish and a server asleep between
requests by the client's (told by the wake-up counters). Each side acts only once it sees
the other's thread asleep (tests/sleepers.py), so the sleeps are certain and each must end
woken: a lost wake-up would leave it to the futex safety net (1 s), not counted as woken.
Coherence "none" keeps the timed sleeps; futex failing through the fault hook (ENOSYS: timed
sleeps from then on; EINTR: one sleep cut short) never fails a call."""
from __future__ import annotations

import multiprocessing as mp
import os

import pytest

import cxlkit
from cxlkit.msg import rpc
from cxlkit.testing import inject_fault, syscall_count
from cxlkit.msg import WaitPolicy

from msg_ranks import make_pool
from sleepers import ANY_SLEEP, FUTEX, wait_asleep

# every wait sleeps at once: no spin, no yield
SLEEPY = WaitPolicy(spin_us=0, yield_us=0, sleep_us=50)


def _serve(path: str, coherence: str, ready: object, out: object, wait: WaitPolicy) -> None:
    with cxlkit.Pool(path, host_id=1, coherence=coherence) as pool, \
            rpc.Server(pool, "wk", max_clients=2, slot_bytes=256, depth=16, wait=wait) as srv:

        @srv.handler()
        def echo(data: bytes) -> bytes:
            return data

        @srv.handler()
        def slow(data: bytes) -> bytes:
            # the reply only once the client (the test's main thread, our parent) is seen
            # asleep in its wait: in the futex, or on the timer where it has none
            wait_asleep(os.getppid(), ANY_SLEEP)
            return data

        @srv.handler()
        def stop(data: bytes) -> bytes:
            out.put(srv.wake_stats())
            srv.stop()
            return b""

        ready.set()
        srv.serve(timeout=60)


def _start(path: str, coherence: str,
           wait: WaitPolicy = SLEEPY) -> tuple[mp.Process, object]:
    ctx = mp.get_context("fork")
    ready, out = ctx.Event(), ctx.Queue()
    p = ctx.Process(target=_serve, args=(path, coherence, ready, out, wait))
    p.start()
    assert ready.wait(30)
    return p, out


@pytest.fixture
def safety_net_1s(monkeypatch):
    # read by the library at each futex sleep; forked servers inherit it
    monkeypatch.setenv("CXLKIT_MSG_WAKE_US", "1000000")


def test_sleepers_on_both_sides_are_woken_by_the_publish(pool_path, safety_net_1s, wchan):
    make_pool(pool_path, 3, "host")
    srv, out = _start(pool_path, "host")
    with cxlkit.Pool(pool_path, host_id=0, coherence="host") as pool, \
            rpc.Client(pool, "wk", wait=SLEEPY) as c:
        for i in range(5):
            assert c.call("slow", b"%d" % i) == b"%d" % i
        wait_asleep(srv.pid, FUTEX)  # the server fell asleep between requests
        for i in range(200):
            assert c.call("echo", b"e%d" % i) == b"e%d" % i
        reqs = [b"q%d" % i for i in range(100)]
        assert c.call_many("echo", reqs) == reqs
        with rpc.Client(pool, "wk", wait=SLEEPY) as c2:
            # two clients: the server sleeps on both request rings at once (futex_waitv)
            for i in range(20):
                wait_asleep(srv.pid, FUTEX)
                assert c2.call("echo", b"c2-%d" % i) == b"c2-%d" % i
        st = c.wake_stats()
        assert c.call("stop") == b""
    srv.join(30)
    assert srv.exitcode == 0
    sst = out.get(timeout=10)
    for s in (st, sst):
        assert s.enabled is True and s.fallbacks == 0
    # each slow reply ended a futex sleep of the client's seen before it was published
    assert st.woken >= 5, st
    # the requests ended the server's sleeps seen before them: the first echo's, and the
    # second client's but its first (the server, asleep on the first client's ring alone,
    # notices a new client on that sleep's safety-net timeout, when it looks at every slot;
    # then it sleeps on both request rings at once, futex_waitv)
    assert sst.woken >= 1 + 19, sst
    assert sst.wakes_sent == 0  # (counted on producer rings: the server's are replies)


def test_coherence_none_keeps_timed_sleeps(pool_path, wchan):
    make_pool(pool_path, 3, "none")
    srv, _ = _start(pool_path, "none")
    with cxlkit.Pool(pool_path, host_id=0, coherence="none") as pool, \
            rpc.Client(pool, "wk", wait=SLEEPY) as c:
        assert c.call("slow", b"x") == b"x"
        st = c.wake_stats()
        assert st.enabled is False and st.futex_waits == 0
        c.call("stop")
    srv.join(30)
    assert srv.exitcode == 0


@pytest.mark.parametrize("err", ["ENOSYS", "EINTR"])
def test_futex_failing_never_fails_a_call(pool_path, safety_net_1s, err, wchan):
    make_pool(pool_path, 3, "host")
    # a server that never sleeps: the client's publish never wakes it, so the first futex
    # call this process makes is the client's own first sleep
    srv, _ = _start(pool_path, "host", WaitPolicy(spin_us=None))
    with cxlkit.Pool(pool_path, host_id=0, coherence="host") as pool, \
            rpc.Client(pool, "wk", wait=SLEEPY) as c:
        before = syscall_count("futex")
        with inject_fault("futex", 1, err):
            assert c.call("slow", b"f") == b"f"
        assert syscall_count("futex") > before
        st = c.wake_stats()
        if err == "ENOSYS":  # no futex here: this handle sleeps on the timer from now on
            assert st.fallbacks == 1 and st.enabled is False
        else:                # a signal: that sleep ended early, the wake-up stays
            assert st.interrupted == 1 and st.enabled is True
        waits = st.futex_waits
        assert c.call("slow", b"g") == b"g"
        assert (c.wake_stats().futex_waits > waits) == (err == "EINTR")
        c.call("stop")
    srv.join(30)
    assert srv.exitcode == 0
