"""Honest ranks talking while another process writes into their live structures: a messaging
job of two ranks (hosts 0 and 1) and an RPC server (host 0) with its client (host 1), each
party a forked child that records what it did (harness.Recorder). Every scenario pauses once
with data in flight (cells in a ring, a request-to-send and its rendezvous buffer, a request
in an RPC ring); the attacker, called then, writes what it likes into the pool file, and the
parties go on. Used by fuzz_v2.py (random fields) and tests/msg/test_hostile_neighbour.py
(targeted garbage).

Where things are (where()) is read from the pool through a child's listing: object payloads
by name, rings by their header, the pending cells by the consumer's head."""
from __future__ import annotations

import multiprocessing as mp
import os
import struct
import time

from harness import Recorder, in_child, payload, run_children

MiB = 1 << 20
JOB = "live"
SERVICE = "live"
PAUSE_S = 15.0  # how long a party waits for the attacker (bounded; the attack takes ms)
SB_HOST_TABLE = 112
KIND_EAGER, KIND_RTS = 1, 3  # native/msg/msg.h Kind


def make_pool(path: str) -> None:
    import cxlkit

    with cxlkit.Pool(path, size=32 * MiB, host_id=0, max_hosts=3, lease_timeout=1):
        pass


def _list(path: str) -> dict:
    import cxlkit

    with cxlkit.Pool(path, host_id=2) as p:
        return {o.name: (o.offset, o.nbytes) for o in p.list()}


def objects(path: str) -> dict[str, tuple[int, int]]:
    """name -> (payload offset, bytes) of every object, listed by a child as host 2."""
    kind, val = in_child(_list, path, timeout=30)
    if kind != "ok":
        raise RuntimeError(f"listing the live pool failed: {kind} {val}")
    return val


def read(path: str, off: int, fmt: str):
    with open(path, "rb") as f:
        f.seek(off)
        return struct.unpack(fmt, f.read(struct.calcsize(fmt)))[0]


def write(path: str, off: int, fmt: str, value) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, value if isinstance(value, bytes) else struct.pack(fmt, value), off)
    finally:
        os.close(fd)


def pending_cells(path: str, ring: int) -> list[int]:
    """Offsets of the cells a ring's consumer has not read yet (stamp past its head)."""
    cb, nc = read(path, ring + 12, "<I"), read(path, ring + 16, "<I")
    if not nc or nc & (nc - 1) or not cb:
        return []
    head = read(path, ring + 64, "<Q")
    out = []
    for i in range(head, head + nc):
        cell = ring + 192 + (i % nc) * cb
        if read(path, cell, "<Q") != i + 1:
            break
        out.append(cell)
    return out


def where(path: str, structure: str) -> list[int]:
    """Offsets of the live instances of a structure (names as in layout.STRUCTS, with @msg /
    @rpc for rings): the ones an attack of that structure hits."""
    objs = objects(path)
    base, _, owner = structure.partition("@")
    if base.startswith("slot_"):
        return [read(path, SB_HOST_TABLE, "<Q") + h * 4096 for h in (0, 1, 2)]
    rings = ([f"msg.{JOB}.0.ring.1", f"msg.{JOB}.1.ring.0"] if owner == "msg" or base == "msg_hdr"
             else [f"rpc.{SERVICE}.0.req", f"rpc.{SERVICE}.0.rep"])
    rings = [objs[n][0] for n in rings if n in objs]
    if base in ("ring_header", "ring_head", "ring_prod"):
        return rings
    if base in ("ring_cell", "rpc_slot"):
        return [c for r in rings for c in pending_cells(path, r)]
    if base == "msg_hdr":  # cells that start a message (eager, RTS): not continuations
        return [c for r in rings for c in pending_cells(path, r)
                if read(path, c + 12, "<I") in (KIND_EAGER, KIND_RTS)]
    prefix = {"msg_rank": f"msg.{JOB}.", "msg_rdv": f"msg.{JOB}.0.rdv.",
              "msg_mem": f"msg.{JOB}.0.mem.", "msg_win": f"msg.{JOB}.",
              "rpc_srv": f"rpc.{SERVICE}.srv"}[base]
    suffix = {"msg_rank": ".rank", "msg_win": ".win.0"}.get(base, "")
    return [off for n, (off, _) in sorted(objs.items())
            if n.startswith(prefix) and n.endswith(suffix)]


# ---- the messaging job ------------------------------------------------------------------------
def _rank(step, path: str, rank: int, sent, attacked, parked) -> list[dict]:
    rec = Recorder(step, f"rank{rank}")
    try:
        _rank_body(rec, path, rank, sent, attacked, parked)
    finally:
        if rank == 0:
            sent.set()  # never leave the attacker waiting
    return rec.events


def _rank_body(rec: Recorder, path: str, rank: int, sent, attacked, parked) -> None:
    import cxlkit
    from cxlkit import msg

    ok, p = rec.op("open", cxlkit.Pool, path, host_id=rank)
    if not ok:
        return
    with p:
        ok, c = rec.op("msg.join", msg.Comm, p, rank=rank, size=2, job=JOB, join_timeout=10,
                       timeout=4, dead_timeout=2)
        if not ok:
            return
        with c:
            _talk(rec, p, c, rank, sent, attacked, parked)


def _talk(rec: Recorder, p, c, rank: int, sent, attacked, parked) -> None:
    peer = 1 - rank
    if rank == 0:  # warm-up: rings and a rendezvous buffer exist on both sides
        for tag, n in ((1, 100), (2, 100_000)):
            if not rec.op("msg.send", c.send, payload(f"w{tag}", n), 1, tag)[0]:
                return
    else:
        for tag in (1, 2):
            if not rec.op("msg.recv", c.recv, 0, tag)[0]:
                return
    if not rec.op("msg.barrier", c.barrier)[0]:
        return
    reqs = []
    if rank == 1:
        parked.set()  # out of the library: what rank 0 sends now stays in the ring
    else:
        parked.wait(PAUSE_S)
    if rank == 0:  # in flight while the attacker writes: eager cells, an RTS and its buffer
        for tag, n in ((3, 200), (4, 90_000)):
            ok, r = rec.op("msg.isend", c.isend, payload(f"l{tag}", n), 1, tag)
            if ok:
                reqs.append(r)
        sent.set()
    attacked.wait(PAUSE_S)
    if rank == 0:
        for r in reqs:
            rec.op("msg.isend.wait", r.wait)
        rec.op("create", _create_destroy, p, "live-create")  # the cross-host lock (bakery)
        rec.op("msg.recv", c.recv, 1, 5)
    else:
        for tag, n in ((3, 200), (4, 90_000)):
            ok, got = rec.op("msg.recv", c.recv, 0, tag)
            if ok and got[0] != payload(f"l{tag}", n):
                rec.note("msg.recv", "garbled", f"tag {tag}: {len(got[0])} bytes, not the sent")
        rec.op("msg.send", c.send, b"done", 0, 5)
    rec.op("msg.barrier", c.barrier)


def _create_destroy(p, name: str) -> None:
    p.create(name, data=b"c" * 100).close()
    p.destroy(name)


def live_msg(path: str, attack, timeout: float = 40.0,
             neighbour: bool = False) -> tuple[list[dict], object]:
    """The job with attack(path) called while data is in flight; (every party's events,
    what attack returned)."""
    ctx = mp.get_context("fork")
    sent, attacked, parked = ctx.Event(), ctx.Event(), ctx.Event()
    box: dict = {}

    def attacker(stop):
        sent.wait(PAUSE_S)
        try:
            box["what"] = attack(path)
        finally:
            attacked.set()
        keep_writing(path, box.get("what"), stop)

    jobs = [(_rank, path, 0, sent, attacked, parked), (_rank, path, 1, sent, attacked, parked)]
    events = _with_attacker(jobs, attacker, timeout, neighbour)
    return events, box.get("what")


# ---- the RPC service --------------------------------------------------------------------------
def _server(step, path: str, ready, done, sent, attacked) -> list[dict]:
    import cxlkit
    from cxlkit.msg import rpc

    rec = Recorder(step, "server")
    try:
        ok, p = rec.op("open", cxlkit.Pool, path, host_id=0)
        if not ok:
            return rec.events
        with p:
            ok, s = rec.op("rpc.server", rpc.Server, p, SERVICE, max_clients=2, slot_bytes=256,
                           depth=4)
            ready.set()
            if not ok:
                return rec.events
            s.add_handler("echo", lambda d: d)
            rec.op("rpc.serve", s.serve, max_requests=1, timeout=PAUSE_S)  # the warm-up
            attacked.wait(PAUSE_S)  # the client's next request waits in its ring meanwhile
            deadline = time.monotonic() + PAUSE_S
            while not done.is_set() and time.monotonic() < deadline:
                if not rec.op("rpc.serve", s.serve, timeout=0.05)[0]:
                    break
            rec.op("rpc.server_close", s.close)
    finally:
        ready.set()
    return rec.events


def _client(step, path: str, ready, done, sent, attacked) -> list[dict]:
    import cxlkit
    from cxlkit.msg import rpc

    rec = Recorder(step, "client")
    try:
        ready.wait(PAUSE_S)
        ok, p = rec.op("open", cxlkit.Pool, path, host_id=1)
        if not ok:
            return rec.events
        with p:
            ok, c = rec.op("rpc.connect", rpc.Client, p, SERVICE, timeout=4)
            if not ok:
                return rec.events
            with c:
                ok, _ = rec.op("rpc.call", c.call, "echo", b"warm-up")
                sent.set()  # the server holds the next request until the attacker wrote
                for i in range(3):
                    ok, got = rec.op("rpc.call", c.call, "echo", payload(f"c{i}", 100))
                    if not ok:
                        break
                    if got != payload(f"c{i}", 100):
                        rec.note("rpc.call", "garbled", f"reply {i} differs")
                rec.op("rpc.call_many", c.call_many, "echo", [b"a", b"b", b"c"])
    finally:
        sent.set()
        done.set()
    return rec.events


def live_rpc(path: str, attack, timeout: float = 40.0,
             neighbour: bool = False) -> tuple[list[dict], object]:
    """Server and client with attack(path) called between the client's calls."""
    ctx = mp.get_context("fork")
    ready, done, sent, attacked = ctx.Event(), ctx.Event(), ctx.Event(), ctx.Event()
    box: dict = {}

    def attacker(stop):
        sent.wait(PAUSE_S)
        try:
            _await_request(path)
            box["what"] = attack(path)
        finally:
            attacked.set()
        keep_writing(path, box.get("what"), stop)

    jobs = [(_server, path, ready, done, sent, attacked),
            (_client, path, ready, done, sent, attacked)]
    events = _with_attacker(jobs, attacker, timeout, neighbour)
    return events, box.get("what")


def _await_request(path: str, bound_s: float = 5.0) -> None:
    """Until the client's next request is in its ring (bounded: a client that failed sends
    none)."""
    req = objects(path).get(f"rpc.{SERVICE}.0.req")
    deadline = time.monotonic() + bound_s
    while req and not pending_cells(path, req[0]) and time.monotonic() < deadline:
        time.sleep(0.001)


def _neighbour(path: str, ready, stop) -> None:
    """A live host 2 that does nothing but beat: the attacker writes its slot's lines (a
    host that lies about its bakery registers stays alive meanwhile)."""
    import cxlkit

    try:
        with cxlkit.Pool(path, host_id=2):
            ready.set()
            stop.wait(4 * PAUSE_S)
    finally:
        ready.set()
        os._exit(0)


def _with_attacker(jobs: list[tuple], attacker, timeout: float,
                   neighbour: bool = False) -> list[dict]:
    """The parties as children, the attacker as a thread of this process (it only writes the
    pool file and lists the pool through a child of its own); with neighbour, a live host 2
    attached first and kept until the parties are done."""
    import threading

    ctx = mp.get_context("fork")
    nb_ready, nb_stop = ctx.Event(), ctx.Event()
    nb = ctx.Process(target=_neighbour, args=(path_of(jobs), nb_ready, nb_stop)) \
        if neighbour else None
    if nb:
        nb.start()
        nb_ready.wait(PAUSE_S)
    stop = threading.Event()
    th = threading.Thread(target=attacker, args=(stop,), daemon=True)
    th.start()
    try:
        return run_children(jobs, timeout)
    finally:
        stop.set()
        nb_stop.set()
        th.join(PAUSE_S + 30)
        if nb:
            nb.join(PAUSE_S)
            nb.kill()


def path_of(jobs: list[tuple]) -> str:
    return jobs[0][1]


def keep_writing(path: str, what, stop) -> None:
    """A persistent attacker: what["persist"] = [offset, hex bytes] is written again and
    again until the parties are done (their own stores cannot repair it)."""
    if not isinstance(what, dict) or not what.get("persist"):
        return
    off, raw = what["persist"][0], bytes.fromhex(what["persist"][1])
    fd = os.open(path, os.O_WRONLY)
    try:
        while not stop.wait(0.0005):
            os.pwrite(fd, raw, off)
    finally:
        os.close(fd)
