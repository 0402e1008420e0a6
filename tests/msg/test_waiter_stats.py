"""A waiting party's counters are one read-only record, msg.WaiterStats (the C library's
cxk_waiter_stats), whoever owns the waiter: a comm, an RPC server or client, a ring. The dicts
it replaced keep working for one release: rec["field"] reads warn."""
from __future__ import annotations

import pickle

import pytest

import cxlkit
from cxlkit import _native, msg
from cxlkit.errors import PeerLostError
from cxlkit.msg import rpc

SPIN = ("budget_us", "cap_us", "overcommitted", "waits", "hits", "slept", "restores",
        "shrinks", "woke_skips", "yield_waits")
WAKE = ("enabled", "futex_waits", "woken", "timeouts", "interrupted", "fallbacks", "rechecks",
        "wakes_sent")


@pytest.fixture
def pool(pool_path):
    with cxlkit.Pool(pool_path, size="32M", host_id=0, max_hosts=2, coherence="host") as p:
        yield p


@pytest.fixture
def comm(pool, monkeypatch):
    monkeypatch.delenv("CXLKIT_MSG_SPIN_US", raising=False)  # the default cap, 200 us
    with msg.Comm(pool, rank=0, size=1, job="ws", timeout=0.05) as c:
        with pytest.raises(PeerLostError):
            c.recv(0)  # nothing sent: one wait, which spins, sleeps and gives up
        yield c


def test_spin_and_wake_stats_are_one_read_only_waiter_record(comm):
    s, w = comm.spin_stats(), comm.wake_stats()
    assert type(s) is msg.WaiterStats is _native.WaiterStats and type(w) is msg.WaiterStats
    assert s._fields == SPIN + WAKE and tuple(s.as_dict()) == SPIN + WAKE
    assert s == w and hash(s) == hash(w)  # one waiter counts both
    assert isinstance(s.enabled, bool) and isinstance(s.overcommitted, bool)
    # the one wait slept past 4 x cap: its spin was quartered (budget_us a number of us, as
    # the dicts gave it, never the library's "full" marker)
    assert (s.waits, s.hits, s.slept, s.shrinks) == (1, 0, 1, 1)
    assert (s.cap_us, s.budget_us) == (200, 50)
    assert repr(s).startswith("WaiterStats(budget_us=")
    with pytest.raises(AttributeError):
        s.hits = 1


def test_reading_the_record_as_a_dict_warns_and_gives_the_attribute(comm):
    s = comm.spin_stats()
    with pytest.warns(DeprecationWarning, match=r'WaiterStats\["woken"\]: .*\(\.woken\)'):
        assert s["woken"] == s.woken
    with pytest.raises(KeyError, match="WaiterStats has no field wokn: its fields are "
                                       "budget_us, cap_us"):
        s["wokn"]


def test_the_record_pickles_to_an_equal_one_and_refuses_another_builds_state(comm):
    s = comm.wake_stats()
    assert pickle.loads(pickle.dumps(s)) == s
    fake = msg.WaiterStats.__new__(msg.WaiterStats)
    with pytest.raises(ValueError, match="WaiterStats state: 3 bytes"):
        fake.__setstate__(b"abc")


def test_rpc_server_client_and_ring_give_the_same_record(pool):
    with rpc.Server(pool, "ws", max_clients=2, slot_bytes=256, depth=8) as srv:
        srv.handler()(lambda data: data)  # "<lambda>": an echo
        srv.serve_in_thread()
        with rpc.Client(pool, "ws") as c:
            assert c.call("<lambda>", b"hi") == b"hi"
            cs, cw = c.spin_stats(), c.wake_stats()
        srv.stop()
        ss = srv.spin_stats()
    assert type(cs) is type(cw) is type(ss) is msg.WaiterStats
    assert cs.waits == cw.waits and ss.wakes_sent == 0  # a server writes replies only
    ring = msg.Ring.create(pool, "wr", cell_bytes=128, ncells=4)
    rs = ring._r.waiter_stats()
    assert type(rs) is msg.WaiterStats
    assert (rs.cap_us, rs.waits) == (0, 0)  # a ring's waits take their policy per call
