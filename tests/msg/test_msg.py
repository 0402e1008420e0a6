"""cxlkit.msg two-sided messaging and collectives across forked ranks (each its own pool
host): eager and rendezvous sizes, MPI matching, truncation, non-blocking requests, typed
errors for bad input, a killed rank naming itself, and a comm outliving its Pool object."""
from __future__ import annotations

import gc
import os
import signal

import numpy as np
import pytest

import cxlkit
from cxlkit import msg
from cxlkit.errors import MsgError, PeerLostError, TruncationError

from msg_ranks import coherences, make_pool, run_ranks
from sleepers import ANY_SLEEP, wait_asleep


@pytest.fixture
def pool2(pool_path):
    make_pool(pool_path, 4)
    return pool_path


def _pingpong(comm: msg.Comm) -> list[int]:
    sizes = [0, 1, 8, 4000, 70000, 1 << 20]
    seen = []
    for n in sizes:
        payload = bytes((i * 7 + n) & 0xFF for i in range(n)) if n < 5000 else os.urandom(n)
        if comm.rank == 0:
            comm.send(payload, dest=1, tag=n % 100)
            back, st = comm.recv(source=1, tag=n % 100)
            assert back == payload[::-1] and st.count == n and st.source == 1
        else:
            data, st = comm.recv(source=0)
            assert st.tag == n % 100
            comm.send(data[::-1], dest=0, tag=st.tag)
        seen.append(n)
    return seen


@pytest.mark.parametrize("coherence", coherences())
def test_pingpong_over_eager_and_rendezvous_sizes_returns_every_byte(pool_path, coherence):
    make_pool(pool_path, 2, coherence)
    res = run_ranks(pool_path, 2, _pingpong, coherence=coherence)
    assert res[0] == res[1] == [0, 1, 8, 4000, 70000, 1 << 20]


def _matching(comm: msg.Comm) -> str:
    if comm.rank == 1:
        comm.send(b"five", 0, tag=5)
        comm.send(b"six", 0, tag=6)
        comm.send(b"0123456789", 0, tag=9)
        req = comm.isend(b"sync", 0, tag=10, sync=True)
        assert req.test() is None  # rank 0 matches it only after the barrier
        comm.barrier()
        assert req.wait() == msg.Status(0, 10, 4)
        return "sent"
    if comm.rank == 0:
        st = comm.probe(1, msg.ANY_TAG)
        assert st == msg.Status(1, 5, 4)
        data, st = comm.recv(msg.ANY_SOURCE, 6)  # overtakes tag 5: other tag
        assert data == b"six" and st.tag == 6
        data, st = comm.recv(1, msg.ANY_TAG)
        assert data == b"five"
        buf = bytearray(4)
        with pytest.raises(TruncationError) as ei:
            comm.recv_into(buf, 1, 9)
        assert ei.value.count == 10 and bytes(buf) == b"0123"
        pending = comm.irecv(bytearray(8), 1, 1234)
        pending.cancel()
        assert comm.iprobe(1, 1234) is None
        comm.barrier()
        buf = bytearray(16)
        req = comm.irecv(buf, 1, 10)
        st = req.wait()
        assert bytes(buf[:st.count]) == b"sync" and req.done
        return "received"
    comm.barrier()
    return "idle"


def test_matching_wildcards_truncation_and_sync_sends_follow_mpi(pool2):
    assert run_ranks(pool2, 3, _matching) == ["received", "sent", "idle"]


def _collectives(comm: msg.Comm) -> tuple:
    a = np.arange(5, dtype=np.float64) * (comm.rank + 1)
    s = comm.allreduce(a)
    mx = comm.allreduce(np.array([comm.rank], dtype=np.int32), op="max")
    mn = comm.allreduce(np.array([comm.rank + 10], dtype=np.uint64), op="min")
    buf = bytearray(b"root-data" if comm.rank == 2 else bytes(9))
    comm.bcast(buf, root=2)
    comm.barrier()
    data, st = comm.sendrecv(f"to{(comm.rank + 1) % comm.size}".encode(), (comm.rank + 1) % comm.size,
                             (comm.rank - 1) % comm.size)
    return s.tolist(), int(mx[0]), int(mn[0]), bytes(buf), data.decode()


def test_collectives_agree_on_every_rank(pool2):
    res = run_ranks(pool2, 3, _collectives)
    for r, (s, mx, mn, b, d) in enumerate(res):
        assert s == [0.0, 6.0, 12.0, 18.0, 24.0]
        assert (mx, mn, b) == (2, 10, b"root-data")
        assert d == f"to{r}"


def _bad_input(comm: msg.Comm) -> bool:
    for call in (lambda: comm.send(b"x", dest=comm.size),
                 lambda: comm.send(b"x", dest=msg.ANY_SOURCE),
                 lambda: comm.send(b"x", dest=0, tag=-3),
                 lambda: comm.recv_into(bytearray(1), source=7),
                 lambda: comm.allreduce(np.zeros(2, dtype=np.int8)),
                 lambda: comm.allreduce(np.zeros(2), op="replace"),
                 lambda: comm.window(-1)):
        with pytest.raises(ValueError):
            call()
    with pytest.raises(TypeError):
        comm.send("not bytes", dest=0)
    return True


def test_bad_arguments_raise_ValueError_naming_the_parameter(pool2):
    assert run_ranks(pool2, 2, _bad_input) == [True, True]


def test_comm_arguments_checked_before_joining(pool2):
    with cxlkit.Pool(pool2, host_id=0) as pool:
        with pytest.raises(ValueError, match="rank"):
            msg.Comm(pool, rank=3, size=2, job="x")
        with pytest.raises(ValueError, match="job"):
            msg.Comm(pool, rank=0, size=1, job="bad job")
        with pytest.raises(ValueError, match="cell_bytes"):
            msg.Comm(pool, rank=0, size=1, job="x", cell_bytes=0)
        with pytest.raises(ValueError, match="geometry"):
            msg.Comm(pool, rank=0, size=1, job="x", cell_bytes=100)
        with pytest.raises(PeerLostError, match="joined"):
            msg.Comm(pool, rank=0, size=2, job="alone", join_timeout=0.2)
        os.environ.pop("CXLKIT_RANK", None)
        os.environ.pop("CXLKIT_SIZE", None)
        with pytest.raises(ValueError, match="CXLKIT_SIZE"):
            msg.Comm(pool, job="x")
        with pytest.raises(ValueError, match="join_timeout"):
            msg.Comm(pool, size=2, job="x", join_timeout=-1)
        # ranks by arrival: nobody else arrives, the wait ends naming the job
        with pytest.raises(PeerLostError, match="job lonely"):
            msg.Comm(pool, size=2, job="lonely", join_timeout=0.3)


# Ranks by arrival, each a forked process on its own pool host. A rank's start-up (fork, and
# opening the pool: under the simulator a copy of it per host) is not the protocol: the ranks
# meet on `opened` once their pools are open, so each join's bound covers the bootstrap and
# the join alone, whatever the machine's load did to their start.
ARRIVE_START_S = 120  # the start-up's bound: every rank's pool open, at load 40 too
ARRIVE_JOIN_S = 30


def _arrive(path: str, job: str, host: int, conn, opened, join_s: float, hold=None) -> None:
    try:
        if hold is not None and not hold.poll(ARRIVE_START_S):  # released by the test
            raise TimeoutError(f"host {host}: not released in {ARRIVE_START_S} s")
        with cxlkit.Pool(path, host_id=host) as pool:
            opened.wait(ARRIVE_START_S)  # pairs with the other ranks' opened.wait
            os.environ["CXLKIT_SIZE"] = "4"
            os.environ.pop("CXLKIT_RANK", None)
            with msg.Comm(pool, job=job, join_timeout=join_s) as comm:
                total = int(comm.allreduce(np.array([comm.rank], dtype=np.int64))[0])
                conn.send((comm.rank, total))
    except BaseException as e:
        conn.send(("error", repr(e)))


def _start_arrivals(path: str, job: str, join_s: float, hold=None) -> tuple[list, list]:
    """Four ranks of `job` by arrival; host 3 waits for a message on `hold` before it opens
    its pool. The parent's ends of the ranks' answer pipes, and the processes."""
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    opened = ctx.Barrier(4)
    pipes, procs = [], []
    for host in range(4):
        a, b = ctx.Pipe(duplex=False)
        p = ctx.Process(target=_arrive, args=(path, job, host, b, opened, join_s,
                                              hold if host == 3 else None))
        p.start()
        pipes.append(a)
        procs.append(p)
    return pipes, procs


def _answers(pipes: list, procs: list) -> list:
    bound = ARRIVE_START_S + 2 * ARRIVE_JOIN_S
    res = [a.recv() if a.poll(bound) else ("error", f"no answer in {bound} s") for a in pipes]
    for p in procs:
        p.join(10)
        if p.is_alive():
            p.kill()
    return res


def test_ranks_by_arrival_through_the_bootstrap_rpc_service(pool_path):
    from cxlkit.msg import rpc

    make_pool(pool_path, 4)
    for attempt in range(2):  # a second job of the same name after the first ended
        res = _answers(*_start_arrivals(pool_path, "arrive", ARRIVE_JOIN_S))
        assert sorted(r for r, _ in res) == [0, 1, 2, 3], res
        assert all(t == 6 for _, t in res), res
    with cxlkit.Pool(pool_path, host_id=0) as pool:  # the service is gone with the job
        assert not any(o.name.startswith("rpc.msgboot-") for o in pool.list())
    assert rpc.service_name("j" * 64).startswith("msgboot-")
    assert len(rpc.service_name("j" * 64)) <= 64


def test_a_rank_slow_to_start_leaves_the_others_join_bound_to_the_protocol(pool_path):
    import multiprocessing as mp
    from multiprocessing.connection import wait

    make_pool(pool_path, 4)
    join_s = 3.0  # the protocol's bound, from four ranks with their pools open
    held, release = mp.get_context("fork").Pipe(duplex=False)
    pipes, procs = _start_arrivals(pool_path, "late", join_s, held)
    # host 3 starts only after the others' join bound has passed: a join that counted the
    # start-up would have failed by then, and its rank answered
    wait(pipes[:3], timeout=join_s + 1)
    release.send(True)
    res = _answers(pipes, procs)
    assert sorted(r for r, _ in res) == [0, 1, 2, 3], res
    assert all(t == 6 for _, t in res), res


def test_rank_and_size_come_from_the_environment(pool2, monkeypatch):
    monkeypatch.setenv("CXLKIT_RANK", "0")
    monkeypatch.setenv("CXLKIT_SIZE", "1")
    monkeypatch.setenv("CXLKIT_JOB", "envjob")
    with cxlkit.Pool(pool2, host_id=0) as pool:
        with msg.Comm(pool) as comm:
            assert (comm.rank, comm.size, comm.job) == (0, 1, "envjob")
            assert "rank=0/1" in repr(comm)
            comm.send(b"self", 0, 3)
            assert comm.recv(0, 3)[0] == b"self"
            assert comm.eager_bytes == 4096 - 64  # one cell of the default geometry
        assert "closed" in repr(comm)
        with pytest.raises(ValueError, match="closed"):
            comm.barrier()


def test_comm_outlives_the_pool_object_it_was_made_from(pool2):
    pool = cxlkit.Pool(pool2, host_id=0)
    comm = msg.Comm(pool, rank=0, size=1, job="solo")
    del pool  # the comm keeps the pool's handle, and with it the mapping
    gc.collect()
    comm.send(b"still here", 0)
    assert comm.recv()[0] == b"still here"
    comm.close()


def _killed(comm: msg.Comm) -> int:
    comm.barrier()
    if comm.rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    with pytest.raises(PeerLostError) as ei:
        comm.recv(source=1)
    assert "rank 1" in str(ei.value)
    rank = ei.value.rank
    with pytest.raises(PeerLostError) as ei:
        comm.close()  # its barrier cannot complete either; the comm is closed anyway
    assert ei.value.rank == rank and "closed" in repr(comm)
    return rank


def test_killed_rank_makes_waits_fail_naming_it(pool2):
    import multiprocessing as mp

    from msg_ranks import _rank_main

    ctx = mp.get_context("fork")
    procs, conns = [], []
    for r in range(2):
        a, b = ctx.Pipe(duplex=False)
        p = ctx.Process(target=_rank_main, args=(_killed, pool2, None, "kill", r, 2, b, {}))
        p.start()
        procs.append(p)
        conns.append(a)
    assert conns[0].poll(30)
    kind, val = conns[0].recv()
    for p in procs:
        p.join(10)
    assert (kind, val) == ("ok", 1), val  # PeerLostError.rank, from the recv and from close
    assert procs[1].exitcode == -signal.SIGKILL


def test_two_jobs_on_one_pool_never_see_each_others_messages(pool2):
    import threading

    out = {}

    def job(name, base):
        def fn(comm):
            tagged = f"{name}:{comm.rank}".encode()
            comm.send(tagged, 1 - comm.rank, tag=0)
            return comm.recv(1 - comm.rank, 0)[0].decode()
        out[name] = run_ranks(pool2, 2, fn, job=name)

    ts = [threading.Thread(target=job, args=(n, 0)) for n in ("jobA", "jobB")]
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert out["jobA"] == ["jobA:1", "jobA:0"]
    assert out["jobB"] == ["jobB:1", "jobB:0"]


def test_msg_error_is_an_oserror():
    assert issubclass(PeerLostError, TimeoutError) and issubclass(MsgError, OSError)


def _growing_windows(comm: msg.Comm) -> int:
    """Windows of rendezvous sends of growing sizes: 8 x 512 KiB, 4 x 1 MiB, 2 x 2 MiB,
    1 x 4 MiB (every window alone fits the sender's half of the pool, all of them do not)."""
    done = 0
    for n, k in ((512 << 10, 8), (1 << 20, 4), (2 << 20, 2), (4 << 20, 1), (512 << 10, 8)):
        if comm.rank == 0:
            bufs = [bytes([(n // 1024 + j) % 256]) * n for j in range(k)]
            reqs = [comm.isend(b, dest=1, tag=j) for j, b in enumerate(bufs)]
            for r in reqs:
                r.wait()
        else:
            for j in range(k):
                data, st = comm.recv(source=0, tag=j)
                assert data == bytes([(n // 1024 + j) % 256]) * n
        comm.barrier()
        done += k
    return done


def test_rendezvous_buffers_are_recycled_when_the_partition_fills(pool_path):
    # 32 MiB over 2 hosts: 16 MiB per host; the windows above need 4 + 4 + 4 + 4 MiB of
    # rendezvous buffers of sizes the earlier windows' buffers cannot serve (failed with
    # ENOSPC before buffers were recycled)
    make_pool(pool_path, 2, size="32M")
    assert run_ranks(pool_path, 2, _growing_windows) == [23, 23]


@pytest.mark.parametrize("coherence", ["host", "none"])
@pytest.mark.parametrize("cell_bytes", [1024, 4096, 16384, 65536])
def test_eager_threshold_follows_the_ring_cell(pool_path, coherence, cell_bytes):
    """The automatic eager size is what one ring cell carries (cell_bytes - 64), but at least
    4032 bytes (one 4 KiB cell's payload: 1 KiB cells send up to 4032 B in several cells),
    for every cell size the crossover was measured on (docs/msg.md, "Eager or rendezvous"),
    in both coherence modes; a message of that size travels eagerly and one byte more by
    rendezvous, both arriving whole."""
    make_pool(pool_path, 2, coherence=coherence, size="96M")
    with cxlkit.Pool(pool_path, host_id=0) as pool:
        with msg.Comm(pool, rank=0, size=1, job=f"e{cell_bytes}", cell_bytes=cell_bytes) as c:
            assert c.eager_bytes == max(cell_bytes - 64, 4032)
            for n in (c.eager_bytes, c.eager_bytes + 1):  # to itself: the receive first
                want = bytes(range(256)) * (n // 256) + bytes(n % 256)
                buf = bytearray(n)
                r = c.irecv(buf, source=0, tag=n)
                c.send(want, dest=0, tag=n)
                st = r.wait()
                assert st.count == n and bytes(buf) == want


_CTRL_C_CHILD = """
import sys
import cxlkit
from cxlkit import msg
with cxlkit.Pool(sys.argv[1], host_id=0) as pool, msg.Comm(pool, rank=0, size=1, job="ctrlc") as c:
    for how in ("recv", "request"):
        req = c.irecv(bytearray(8), 0, 5) if how == "request" else None
        print("waiting", flush=True)
        try:
            c.recv(0, 5) if req is None else req.wait()
            sys.exit(3)  # nothing was sent: only the interrupt ends the wait
        except KeyboardInterrupt:
            pass
        # the comm goes on: a blocking call's probe was withdrawn, a request stays pending
        c.send(b"after", 0, 5)
        if req is None:
            assert c.recv(0, 5)[0] == b"after"
        else:
            assert req.wait().count == 5
        print("went on", flush=True)
"""


def test_ctrl_c_ends_a_blocking_receive_and_the_comm_goes_on(pool2, wchan):
    # Found trying it as a user: Python runs its SIGINT handler only between bytecodes, and a
    # receive waiting in the library with the GIL released never returned to it, so Ctrl-C
    # did nothing until a message came (the library now calls a hook every ~20 ms that runs
    # pending handlers and ends the wait when one raised).
    import subprocess
    import sys
    import threading

    p = subprocess.Popen([sys.executable, "-c", _CTRL_C_CHILD, pool2], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    watchdog = threading.Timer(30, p.kill)  # a child deaf to Ctrl-C ends the readlines (EOF)
    watchdog.start()
    try:
        for _ in range(2):
            assert p.stdout.readline().strip() == "waiting"
            # in the wait: a signal before it would interrupt the child outside its try
            wait_asleep(p.pid, ANY_SLEEP)
            p.send_signal(signal.SIGINT)
            assert p.stdout.readline().strip() == "went on", p.stderr.read()[-2000:]
        assert p.wait(20) == 0, p.stderr.read()[-2000:]
    finally:
        watchdog.cancel()
        if p.poll() is None:
            p.kill()
            p.wait()


_TWO_THREADS_CHILD = """
import os, sys, threading
import cxlkit
from cxlkit import msg
from cxlkit.errors import PeerLostError
sys.path.insert(0, sys.argv[2])
from sleepers import ANY_SLEEP, wait_asleep
with cxlkit.Pool(sys.argv[1], host_id=0) as pool, \\
        msg.Comm(pool, rank=0, size=1, job="twothreads", timeout=1.5) as c:
    got = []
    def other():
        wait_asleep(os.getpid(), ANY_SLEEP)  # main is in its blocking receive, holding the comm
        got.append(c.spin_stats())  # waits for the comm
    t = threading.Thread(target=other)
    t.start()
    try:
        c.recv(0, 5)
        sys.exit(3)
    except PeerLostError:
        pass  # the comm's timeout: nothing was sent
    t.join()
    assert got
print("done", flush=True)
"""


def test_a_thread_waiting_for_the_comm_does_not_deadlock_a_blocking_receive(pool2, wchan):
    # The Ctrl-C hook takes the GIL inside the wait, with the comm's mutex held; a binding that
    # waited for that mutex holding the GIL (spin_stats, isend, test, ... did) would deadlock
    # the two threads. Each now releases the GIL first.
    import subprocess
    import sys

    tests_dir = os.path.dirname(os.path.dirname(__file__))  # sleepers.py
    r = subprocess.run([sys.executable, "-c", _TWO_THREADS_CHILD, pool2, tests_dir],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "done" in r.stdout, r.stderr[-2000:]
