"""The wait policy (cxlkit.msg.WaitPolicy, the C library's cxk_wait_*): validation, the
CXLKIT_MSG_SPIN_US / _YIELD_US / _SLEEP_US defaults, Comm / rpc / Ring waits under it, and
ranks that exchange messages under every phase (spin only, yield only, sleep only)."""
from __future__ import annotations

import pytest

import cxlkit
from cxlkit import _native, msg
from cxlkit.msg import rpc
from cxlkit.msg import WaitPolicy

from msg_ranks import make_pool, run_ranks


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for v in ("CXLKIT_MSG_SPIN_US", "CXLKIT_MSG_YIELD_US", "CXLKIT_MSG_SLEEP_US"):
        monkeypatch.delenv(v, raising=False)


def test_wait_policy_defaults_match_the_c_library():
    assert WaitPolicy() == WaitPolicy.default() == WaitPolicy(200, 0, 50)


def test_wait_policy_reads_the_environment(monkeypatch):
    monkeypatch.setenv("CXLKIT_MSG_SPIN_US", "forever")
    monkeypatch.setenv("CXLKIT_MSG_YIELD_US", "7")
    monkeypatch.setenv("CXLKIT_MSG_SLEEP_US", "0")
    assert WaitPolicy.default() == WaitPolicy(None, 7, 0)


@pytest.mark.parametrize("var,value", [("CXLKIT_MSG_SPIN_US", "-1"),
                                       ("CXLKIT_MSG_YIELD_US", "1ms"),
                                       ("CXLKIT_MSG_SLEEP_US", "forever"),
                                       ("CXLKIT_MSG_SLEEP_US", "2000000")])
def test_bad_wait_environment_raises_ValueError_naming_it(monkeypatch, var, value):
    monkeypatch.setenv(var, value)
    with pytest.raises(ValueError, match="CXLKIT_MSG_"):
        WaitPolicy.default()


@pytest.mark.parametrize("value", [" 7", "\u0663", "FOREVER"])  # \u0663: an Arabic-Indic 3
def test_the_wait_environment_is_refused_as_the_native_table_refuses_it(monkeypatch, value):
    # one parser: what the C library's waits refuse, WaitPolicy.default() refuses with the
    # same one line (never a value the library would not run with)
    monkeypatch.setenv("CXLKIT_MSG_YIELD_US", value)
    native = next(e for e in _native.config_table() if e.name == "CXLKIT_MSG_YIELD_US")
    assert not native.valid and native.why.startswith(f"CXLKIT_MSG_YIELD_US={value}: ")
    with pytest.raises(ValueError) as ei:
        WaitPolicy.default()
    assert str(ei.value) == native.why and "\n" not in native.why


@pytest.mark.parametrize("kw,field", [({"spin_us": -1}, "spin_us"), ({"yield_us": 1.5}, "yield_us"),
                                      ({"sleep_us": None}, "sleep_us"),
                                      ({"sleep_us": 1_000_001}, "sleep_us"),
                                      ({"spin_us": True}, "spin_us")])
def test_bad_wait_policy_raises_ValueError_naming_the_field(kw, field):
    with pytest.raises(ValueError, match=field):
        WaitPolicy(**kw)


def test_comm_wait_policy_is_set_read_and_reset(pool_path):
    make_pool(pool_path, 2)
    with cxlkit.Pool(pool_path, host_id=0) as pool:
        with pytest.raises(TypeError, match="WaitPolicy"):
            msg.Comm(pool, rank=0, size=1, job="w1", wait=(0, 0, 0))
        with msg.Comm(pool, rank=0, size=1, job="w1", wait=WaitPolicy(0, 0, 0)) as c:
            assert c.wait == WaitPolicy(0, 0, 0)
            c.wait = WaitPolicy(None, None, 3)
            assert c.wait == WaitPolicy(None, None, 3)
            c.wait = None
            assert c.wait == WaitPolicy()
            c.send(b"self", dest=0, tag=3)
            assert c.recv(source=0, tag=3)[0] == b"self"


def test_bad_wait_environment_fails_the_comm_before_joining(pool_path, monkeypatch):
    make_pool(pool_path, 2)
    monkeypatch.setenv("CXLKIT_MSG_SPIN_US", "soon")
    with cxlkit.Pool(pool_path, host_id=0) as pool:
        with pytest.raises(ValueError, match="CXLKIT_MSG_SPIN_US"):
            msg.Comm(pool, rank=0, size=2, job="w2")


def _exchange(comm: msg.Comm) -> int:
    """60 ping-pongs of eager and rendezvous sizes under the comm's policy."""
    peer = 1 - comm.rank
    for i in range(60):
        n = (8, 100_000)[i % 2]
        if comm.rank == 0:
            comm.send(bytes([i % 256]) * n, dest=peer, tag=i)
            data, st = comm.recv(source=peer, tag=i)
        else:
            data, st = comm.recv(source=peer, tag=i)
            comm.send(data, dest=peer, tag=i)
        assert data == bytes([i % 256]) * n and st.count == n
    return 60


@pytest.mark.parametrize("policy", [WaitPolicy(None, 0, 0), WaitPolicy(0, None, 0),
                                    WaitPolicy(0, 0, 200), WaitPolicy(5, 5, 20)],
                         ids=["spin-only", "yield-only", "sleep-only", "all-phases"])
def test_ranks_exchange_messages_under_every_wait_phase(pool_path, policy):
    make_pool(pool_path, 2)
    assert run_ranks(pool_path, 2, _exchange, wait=policy) == [60, 60]


def test_ring_wait_times_out_sees_data_and_reports_a_closed_ring(pool_path):
    make_pool(pool_path, 2)
    with cxlkit.Pool(pool_path, host_id=0) as pool:
        prod = msg.Ring.create(pool, "wr", cell_bytes=128, ncells=4)
        cons = msg.Ring.open(pool, "wr")
        with pytest.raises(ValueError, match="timeout"):
            cons.wait(-1)
        assert cons.wait(0.02, policy=WaitPolicy(0, 0, 100)) is False
        assert prod.wait(0.02) is True
        prod.push(b"one", 5)
        assert cons.wait(0.02) is True
        assert cons.pop() == (b"one", 5)  # wait only looked
        for i in range(4):
            assert prod.push(bytes([i]))
        assert prod.wait(0.02, policy=WaitPolicy(0, 0, 100)) is False  # full
        prod.close()
        for i in range(4):
            assert cons.pop() == (bytes([i]), 0)
        with pytest.raises(BrokenPipeError):
            cons.wait(1)
        cons.close()


def test_rpc_client_and_server_answer_under_their_wait_policies(pool_path):
    make_pool(pool_path, 2)
    with cxlkit.Pool(pool_path, host_id=0) as pool:
        with pytest.raises(TypeError, match="WaitPolicy"):
            rpc.Server(pool, "wsvc", wait="fast")
        srv = rpc.Server(pool, "wsvc", wait=WaitPolicy(0, 0, 100))

        @srv.handler("echo")
        def echo(data: bytes) -> bytes:
            return data

        srv.serve_in_thread()
        try:
            with rpc.Client(pool, "wsvc", wait=WaitPolicy(0, None, 0)) as c:
                assert [c.call("echo", bytes([i])) for i in range(50)] == \
                    [bytes([i]) for i in range(50)]
                assert c.call_many("echo", [b"a", b"b", b"c"]) == [b"a", b"b", b"c"]
        finally:
            srv.close()
