"""cxlkit.rpc against dead peers, bad pool bytes and process exit: slots of SIGKILLed clients
are taken back (never a live one's), a ring head outside its range is RpcCorruptError naming
the client slot while the server goes on serving, every failure is an RpcError naming the
service and pool, the caller's Pool (any host id) is the one RPC uses, and a process that
exits with a serve thread running exits cleanly."""
from __future__ import annotations

import errno
import os
import struct
import subprocess
import sys
import threading

import pytest

import cxlkit
from cxlkit.msg import rpc
from cxlkit.errors import (MsgError, PoolFullError, RpcBusyError, RpcCorruptError, RpcError,
                           RpcPoolFullError, RpcServerLostError, RpcTimeoutError)

_HEAD = 64  # a ring's head word: its second line (native/ring/ring.h HeadLine)

_HOLDING_CLIENT = r"""
import sys, cxlkit
from cxlkit.msg import rpc
pool = cxlkit.Pool(sys.argv[1], host_id=int(sys.argv[2]))
c = rpc.Client(pool, "svc", timeout=10)
c.call("hold")  # SIGKILLed in here
"""


def _serve(pool: cxlkit.Pool, **kw: int) -> tuple[rpc.Server, threading.Event, threading.Event]:
    srv = rpc.Server(pool, "svc", **kw)
    entered, release = threading.Event(), threading.Event()

    @srv.handler()
    def echo(data: bytes) -> bytes:
        return data

    @srv.handler()
    def hold(data: bytes) -> bytes:
        entered.set()
        release.wait(30)
        return b""

    srv.serve_in_thread()
    return srv, entered, release


def _kill_mid_call(path: str, host: int, entered: threading.Event,
                   release: threading.Event) -> None:
    entered.clear()
    release.clear()
    p = subprocess.Popen([sys.executable, "-c", _HOLDING_CLIENT, path, str(host)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        while not entered.wait(0.05):  # the handler runs: the client is mid-call
            if p.poll() is not None:
                pytest.fail(f"client ended before its call reached the server: "
                            f"{p.communicate()[1][-600:]}")
    finally:
        p.kill()
        p.wait(30)
    release.set()


@pytest.mark.parametrize("client_host", [1, 2], ids=["server_host", "other_host"])
def test_slots_of_sigkilled_clients_are_taken_back(pool_path, client_host):
    # more deaths than slots: without taking slots back the last connect gets EBUSY
    with cxlkit.Pool(pool_path, size="32M", host_id=1) as pool:
        srv, entered, release = _serve(pool, max_clients=1, depth=4)
        try:
            for _ in range(2):
                _kill_mid_call(pool_path, client_host, entered, release)
            with cxlkit.Pool(pool_path, host_id=client_host) as mine, \
                    rpc.Client(mine, "svc", timeout=10) as c:
                assert c.call("echo", b"alive") == b"alive"
        finally:
            release.set()
            srv.close()


def test_slot_of_a_sigkilled_client_is_free_after_a_server_restart(pool_path):
    # taken back by the first server (it checks its clients' holders) or the next one
    with cxlkit.Pool(pool_path, size="32M", host_id=1) as pool:
        srv, entered, release = _serve(pool, max_clients=1, depth=4)
        try:
            _kill_mid_call(pool_path, 1, entered, release)
        finally:
            release.set()
            srv.close()
        srv, _, _ = _serve(pool, max_clients=1, depth=4)
        try:
            with rpc.Client(pool, "svc", timeout=10) as c:
                assert c.call("echo", b"again") == b"again"
        finally:
            srv.close()


def test_a_live_clients_slot_is_never_taken(pool_path):
    with cxlkit.Pool(pool_path, size="32M", host_id=1) as pool:
        srv, _, _ = _serve(pool, max_clients=1, depth=4)
        try:
            with rpc.Client(pool, "svc", timeout=5) as c:
                with pytest.raises(RpcBusyError) as ei:
                    rpc.Client(pool, "svc", timeout=5)
                assert ei.value.errno == errno.EBUSY and pool_path in str(ei.value)
                assert c.call("echo", b"still") == b"still"
        finally:
            srv.close()


def _head_off(pool: cxlkit.Pool, ring: str) -> int:
    return pool.info(ring).offset + _HEAD


def _poke(path: str, off: int, value: int) -> None:
    fd = os.open(path, os.O_RDWR)
    try:
        os.pwrite(fd, struct.pack("<Q", value), off)
    finally:
        os.close(fd)


@pytest.mark.parametrize("ring", ["req", "rep"])
def test_garbage_ring_head_is_corrupt_error_not_server_gone(pool_path, ring):
    with cxlkit.Pool(pool_path, size="32M", host_id=1) as pool:
        srv, _, _ = _serve(pool, max_clients=2, depth=2)
        try:
            c = rpc.Client(pool, "svc", timeout=5)
            for _ in range(2):  # the ring's credit is used up: the next call reads the head
                assert c.call("echo", b"x") == b"x"
            _poke(pool_path, _head_off(pool, f"rpc.svc.{c._c.slot}.{ring}"), 1 << 62)
            with pytest.raises(RpcCorruptError) as ei:
                c.call("echo", b"x")
            assert isinstance(ei.value, RpcError) and not isinstance(ei.value, RpcServerLostError)
            assert f"client slot {c._c.slot}" in str(ei.value) and pool_path in str(ei.value)
            c.close()
            with rpc.Client(pool, "svc", timeout=5) as again:  # the server lives on
                assert again.call("echo", b"y") == b"y"
        finally:
            srv.close()


def test_corrupt_service_object_is_corrupt_error(pool_path):
    with cxlkit.Pool(pool_path, size="32M", host_id=1) as pool:
        srv = rpc.Server(pool, "svc")
        try:
            _poke(pool_path, pool.info("rpc.svc.srv").offset, 0xBAD)  # its magic
            with pytest.raises(RpcCorruptError) as ei:
                rpc.Client(pool, "svc", timeout=2)
            assert ei.value.errno == errno.EBADMSG and "service svc" in str(ei.value)
        finally:
            srv.close()


def test_full_pool_is_rpc_pool_full_error(pool_path):
    with cxlkit.Pool(pool_path, size="8M", host_id=1) as pool:
        filler = []
        for nbytes in (256 * 1024, 4096, 64):  # every byte of this host's partition
            with pytest.raises(PoolFullError):
                for _ in range(100000):
                    filler.append(pool.create(f"fill{len(filler)}", nbytes))
        with pytest.raises(RpcPoolFullError) as ei:
            rpc.Server(pool, "svc")
        e = ei.value
        assert isinstance(e, RpcError) and isinstance(e, PoolFullError) and isinstance(e, MsgError)
        assert e.errno == errno.ENOSPC and "service svc" in str(e) and pool_path in str(e)
        for o in filler:
            o.close()


def test_timeouts_and_lost_servers_are_rpc_errors():
    assert issubclass(RpcServerLostError, RpcError) and issubclass(RpcServerLostError,
                                                                    ConnectionError)
    assert issubclass(RpcTimeoutError, RpcError) and issubclass(RpcTimeoutError, TimeoutError)


def test_server_on_a_pool_with_a_named_host_id(pool_path):
    # the pool handle given is the one used: no second open under another host tag
    with cxlkit.Pool(pool_path, size="32M", host_id="hostB") as pool:
        srv, _, _ = _serve(pool)
        try:
            with rpc.Client(pool, "svc", timeout=5) as c:
                assert c.call("echo", b"b") == b"b"
        finally:
            srv.close()


_EXITING_SERVER = r"""
import sys, threading, cxlkit
from cxlkit.msg import rpc
pool = cxlkit.Pool(sys.argv[1], size="32M", host_id=1)
srv = rpc.Server(pool, "svc")
busy = threading.Event()
@srv.handler()
def echo(data):
    if srv.handled >= 200:
        busy.set()
    return data
srv.serve_in_thread()
print("serving", flush=True)
busy.wait(60)
# exit now: the serve thread is still answering
"""

_HAMMER = r"""
import sys, cxlkit
from cxlkit.msg import rpc
from cxlkit.errors import RpcError
pool = cxlkit.Pool(sys.argv[1], host_id=2)
c = rpc.Client(pool, "svc", timeout=10)
try:
    for _ in range(1000000):
        c.call("echo", b"x")
except RpcError:
    pass
"""


def test_exit_with_a_serve_thread_running_is_clean(pool_path):
    srv = subprocess.Popen([sys.executable, "-c", _EXITING_SERVER, pool_path],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    hammer = None
    try:
        assert srv.stdout.readline() == "serving\n", srv.communicate(timeout=60)[1][-600:]
        hammer = subprocess.Popen([sys.executable, "-c", _HAMMER, pool_path],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        _, err = srv.communicate(timeout=60)
        assert srv.returncode == 0, err[-600:]
        assert "terminate" not in err, err[-600:]
    finally:
        for p in (srv, hammer):
            if p is not None and p.poll() is None:
                p.kill()
            if p is not None:
                p.wait(30)
