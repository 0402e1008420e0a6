"""cxlkit.rpc: a server in a forked process on its own pool host answering a client here
(both coherence modes): handlers by name and by number, errors raised in handlers and unknown
methods as RpcError, pipelined calls in order, two clients, a killed server making calls fail
cleanly (and a new server taking the service over), and bad input as typed errors."""
from __future__ import annotations

import errno
import multiprocessing as mp
import os
import signal
import struct
import threading
import time

import pytest

import cxlkit
from cxlkit.msg import rpc
from cxlkit.errors import MsgError, RpcError, RpcServerLostError, RpcTimeoutError

from msg_ranks import coherences, make_pool


def _serve(path: str, coherence: str | None, ready: object, slow: bool = False) -> None:
    with cxlkit.Pool(path, host_id=1, coherence=coherence) as pool, \
            rpc.Server(pool, "svc", max_clients=4, slot_bytes=256, depth=64) as srv:

        @srv.handler()
        def echo(data: bytes) -> bytes:
            return data

        @srv.handler(7)  # a number, as a C client would call it
        def add(data: bytes) -> bytes:
            a, b = struct.unpack("<qq", data)
            return struct.pack("<q", a + b)

        @srv.handler("fail")
        def fail(data: bytes) -> None:
            raise KeyError(data.decode())

        @srv.handler("huge")
        def huge(data: bytes) -> bytes:
            return b"x" * 1000

        @srv.handler("sleep")
        def sleep(data: bytes) -> bytes:
            ready.set()
            time.sleep(30 if slow else 0)
            return b""

        @srv.handler("stop")
        def stop(data: bytes) -> bytes:
            srv.stop()
            return b"bye"

        ready.set()
        srv.serve(timeout=60)


def _start(path: str, coherence: str | None = None, slow: bool = False) -> mp.Process:
    ctx = mp.get_context("fork")
    ready = ctx.Event()
    p = ctx.Process(target=_serve, args=(path, coherence, ready, slow))
    p.start()
    assert ready.wait(30)
    # set again by the 'sleep' handler on entry: a test knows the server is inside it
    ready.clear()
    p.entered = ready
    return p


@pytest.mark.parametrize("coherence", coherences())
def test_calls_reach_handlers_and_errors_come_back_typed(pool_path, coherence):
    make_pool(pool_path, 3, coherence)
    srv = _start(pool_path, coherence)
    with cxlkit.Pool(pool_path, host_id=0, coherence=coherence) as pool, \
            rpc.Client(pool, "svc") as c:
        assert c.payload_max == 256 - 32
        assert c.call("echo", b"hello") == b"hello"
        assert c.call("echo") == b""
        assert c.call(7, struct.pack("<qq", 40, 2)) == struct.pack("<q", 42)
        with pytest.raises(RpcError) as ei:
            c.call("fail", b"nokey")
        assert ei.value.errno == errno.EREMOTEIO and "KeyError" in str(ei.value)
        assert "nokey" in str(ei.value) and "fail" in str(ei.value)
        with pytest.raises(RpcError) as ei:
            c.call("nosuch")
        assert ei.value.errno == errno.ENOSYS
        with pytest.raises(RpcError) as ei:
            c.call("huge")
        assert ei.value.errno == errno.EMSGSIZE
        with pytest.raises(ValueError, match="a slot holds 224"):
            c.call("echo", b"y" * 225)
        # pipelined: more than the depth (64) in flight over time, replies in order
        reqs = [struct.pack("<I", i) * (i % 50) for i in range(300)]
        assert c.call_many("echo", reqs) == reqs
        with rpc.Client(pool, "svc") as c2:
            assert c2.call("echo", b"two") == b"two"
        assert c.call("echo", b"still") == b"still"
        assert c.call("stop") == b"bye"
    srv.join(30)
    assert srv.exitcode == 0


def test_killed_server_fails_calls_cleanly_and_a_new_server_takes_over(pool_path):
    make_pool(pool_path, 3)
    srv = _start(pool_path, slow=True)
    with cxlkit.Pool(pool_path, host_id=0) as pool:
        c = rpc.Client(pool, "svc", timeout=20)
        os.kill(srv.pid, 0)

        def killer() -> None:
            # once the server is inside the 'sleep' handler: the call is its to answer
            assert srv.entered.wait(30), "the server never entered its 'sleep' handler"
            os.kill(srv.pid, signal.SIGKILL)

        th = threading.Thread(target=killer)
        th.start()
        with pytest.raises(RpcServerLostError) as ei:
            c.call("sleep")
        th.join()
        # EPIPE, not the 20 s timeout's RpcTimeoutError: the death was noticed
        assert ei.value.errno == errno.EPIPE and "svc" in str(ei.value)
        srv.join(5)
        c.close()
        # the dead server's objects do not block the next one
        srv2 = _start(pool_path)
        with rpc.Client(pool, "svc") as c2:
            assert c2.call("echo", b"again") == b"again"
            c2.call("stop")
        srv2.join(30)
        assert srv2.exitcode == 0


def test_in_process_server_thread_stop_and_counts(pool_path):
    make_pool(pool_path, 2)
    with cxlkit.Pool(pool_path, host_id=0) as pool:
        srv = rpc.Server(pool, "local", max_clients=2, depth=8)
        srv.add_handler("inc", lambda d: struct.pack("<i", struct.unpack("<i", d)[0] + 1))
        assert srv.serve(timeout=0.05) == 0  # nothing to do: returns after the timeout
        srv.serve_in_thread()
        with pytest.raises(RuntimeError, match="already served"):
            srv.serve_in_thread()
        with rpc.Client(pool, "local") as c:
            assert [struct.unpack("<i", r)[0] for r in
                    c.call_many("inc", [struct.pack("<i", i) for i in range(40)])] == \
                list(range(1, 41))
            assert srv.clients == 1
            srv.stop()
            assert srv.handled == 40
            srv.serve_in_thread()  # served again after a stop
            assert c.call("inc", struct.pack("<i", 9)) == struct.pack("<i", 10)
            with pytest.raises(TypeError, match="int is not bytes-like"):
                c.call("inc", 5)
            with pytest.raises(TypeError, match="str is not bytes-like"):
                c.call_many("inc", ["text"])
        srv.close()
        srv.close()  # twice is fine
        with pytest.raises(ValueError, match="closed RPC server"):
            srv.clients


def test_bad_input_gives_typed_errors(pool_path):
    make_pool(pool_path, 2)
    with cxlkit.Pool(pool_path, host_id=0) as pool:
        for bad in ("", "a b", "x" * 65, 3):
            with pytest.raises(ValueError, match="service name"):
                rpc.Server(pool, bad)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="slot_bytes 100"):
            rpc.Server(pool, "s", slot_bytes=100)
        with pytest.raises(ValueError, match="slot_bytes 64: at least 128"):
            rpc.Server(pool, "s", slot_bytes=64)
        with pytest.raises(ValueError, match="depth 3"):
            rpc.Server(pool, "s", depth=3)
        with pytest.raises(ValueError, match="max_clients 0"):
            rpc.Server(pool, "s", max_clients=0)
        with pytest.raises(TypeError, match="expected a cxlkit.Pool"):
            rpc.Server(pool_path, "s")  # type: ignore[arg-type]
        for m in (-1, 1 << 32, "", True, 1.5):
            with pytest.raises(ValueError, match="method"):
                rpc.method_id(m)  # type: ignore[arg-type]
        assert rpc.method_id("echo") == rpc.method_id("echo") != rpc.method_id("echo2")
        with pytest.raises(RpcTimeoutError, match="service nobody"):
            rpc.Client(pool, "nobody", timeout=0.1)
        with pytest.raises(ValueError, match="timeout"):
            rpc.Client(pool, "s", timeout=0)
        with rpc.Server(pool, "s") as srv:
            with pytest.raises(ValueError, match="already taken"):
                srv.add_handler("a", len)
                srv.add_handler("a", len)
            with pytest.raises(TypeError, match="not callable"):
                srv.add_handler("b", 5)  # type: ignore[arg-type]
            with pytest.raises(MsgError) as ei:
                rpc.Server(pool, "s")  # a live server holds the name
            assert ei.value.errno == errno.EBUSY
            srv.serve_in_thread()
            c = rpc.Client(pool, "s")
            c.close()
            with pytest.raises(ValueError, match="closed RPC client"):
                c.call("a")
        # a client whose server closed: a clean error, not a hang
        srv = rpc.Server(pool, "t")
        srv.serve_in_thread()
        c = rpc.Client(pool, "t", timeout=30)
        assert c.call_many("missing", []) == []
        srv.close()
        with pytest.raises(RpcServerLostError):  # not the 30 s timeout's RpcTimeoutError
            c.call("a")
        c.close()


def test_bootstrap_join_is_idempotent_per_asking_process(pool_path):
    """A process whose join call timed out asks again: it must get the same rank, not a
    second one (before: each ask took a new rank, so a slow job ran out of ranks)."""
    make_pool(pool_path, 2)
    with cxlkit.Pool(pool_path, host_id=0) as pool:
        srv = rpc._serve_ranks(pool, rpc.service_name("j"), "j", 3)
        try:
            with rpc.Client(pool, rpc.service_name("j")) as c:
                first = c.call("join", b"proc-a")
                assert c.call("join", b"proc-a") == first == struct.pack("<i", 1)
                assert c.call("join", b"proc-b") == struct.pack("<i", 2)
                with pytest.raises(RpcError, match="all 3 ranks are taken"):
                    c.call("join", b"proc-c")
                assert c.call("join", b"proc-b") == struct.pack("<i", 2)
        finally:
            srv.close()
