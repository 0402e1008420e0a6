"""Host slots claimed by name: two claimers at one instant get one slot each, the
first choice goes to one of them, and a claimer killed mid-claim leaves the pool usable."""
from __future__ import annotations

import multiprocessing as mp
import os

import pytest

import cxlkit
from cxlkit import _native, pool as poolmod

MiB = 1 << 20


@pytest.fixture
def path(pool_path):  # conftest: a private /dev/shm path, removed with its stripes
    return pool_path


def _slot_tag(path: str, host: int) -> str:
    with open(path, "rb") as f:
        f.seek(4096 + host * 4096)  # host slot h, line 0 starts with tag[32]
        return f.read(32).split(b"\0")[0].decode()


def _claim_by_name(path, name, barrier, out):
    barrier.wait()
    with cxlkit.Pool(path, host_id=name) as p:
        out.put((name, p.host_id))
        barrier.wait()  # both attached before either leaves


def _two_names_one_first_choice(path) -> tuple[int, str, str]:
    # two names whose first choice is the same free slot (the start slot of the name's hash)
    home: dict[int, list[str]] = {}
    for i in range(16):
        name = f"node-{i}"
        with cxlkit.Pool(path, size=8 * MiB, max_hosts=4, host_id=name) as p:
            home.setdefault(p.host_id, []).append(name)
        poolmod.remove(path)
    slot, names = next((h, n) for h, n in sorted(home.items()) if h != 3 and len(n) >= 2)
    return slot, names[0], names[1]


def test_hosts_claiming_free_slots_by_name_at_once_get_distinct_slots(path):
    slot, a, b = _two_names_one_first_choice(path)
    ctx = mp.get_context("fork")
    for _ in range(8):
        cxlkit.Pool(path, size=8 * MiB, max_hosts=4, host_id=3).close()  # slots 0-2 free
        barrier, out = ctx.Barrier(2), ctx.Queue()
        procs = [ctx.Process(target=_claim_by_name, args=(path, n, barrier, out))
                 for n in (a, b)]
        for pr in procs:
            pr.start()
        got = dict(out.get(timeout=60) for _ in procs)
        for pr in procs:
            pr.join(60)
            assert pr.exitcode == 0
        assert got[a] != got[b], (got, slot)
        assert _slot_tag(path, got[a]) == a and _slot_tag(path, got[b]) == b
        assert slot in got.values()  # one of them has its first choice
        poolmod.remove(path)


def _claim_stepwise(path: str, name: str, w: int) -> None:
    # a child of fork: it stops itself (SIGSTOP) each time it has written its nonce to a
    # slot's x line, and reports the slot it attached to, or the errno
    code = 1
    try:
        _native.pool_stop_at("slot.x", 64)
        try:
            with cxlkit.Pool(path, host_id=name) as p:
                os.write(w, f"{p.host_id}\n".encode())
            code = 0
        except cxlkit.PoolError as e:
            os.write(w, f"E{e.errno}\n".encode())
    finally:
        os._exit(code)


def _run_until_stopped_or_exited(pid: int) -> bool:
    """True when the child stopped (at its next slot.x), False when it exited."""
    import time

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        got, st = os.waitpid(pid, os.WUNTRACED | os.WNOHANG)
        if got == pid:
            return os.WIFSTOPPED(st)
        time.sleep(0.002)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    raise AssertionError(f"claimer {pid} neither stopped nor exited in 60 s")


def test_two_claimers_in_lockstep_still_get_one_slot_each(path):
    # The claim livelock: two names with one first choice, each stopped right after
    # writing its nonce to a slot's x line and resumed in turn — A writes x, B writes x, A
    # goes on, B goes on — the interleaving of the both-EBUSY runs under --coherence-sim
    # (there the flushes of non-coherent hosts kept the two claimers in this lockstep). With
    # the bare splitter both lost every free slot (and left its door closed): both got EBUSY.
    # The first choice must go to one of them, the other must get another free slot.
    import signal

    slot, a, b = _two_names_one_first_choice(path)
    cxlkit.Pool(path, size=8 * MiB, max_hosts=4, host_id=3).close()  # slots 0-2 free
    r, w = os.pipe()
    pids = []
    for name in (a, b):
        pid = os.fork()
        if pid == 0:
            os.close(r)
            _claim_stepwise(path, name, w)
        pids.append(pid)
        assert _run_until_stopped_or_exited(pid), f"{name} attached without writing x"
    os.close(w)
    running = {pid: True for pid in pids}
    while any(running.values()):
        for pid in pids:
            if running[pid]:
                os.kill(pid, signal.SIGCONT)
                running[pid] = _run_until_stopped_or_exited(pid)
    with os.fdopen(r) as f:
        lines = f.read().split()
    assert len(lines) == 2 and all(x.isdigit() for x in lines), lines  # E16: EBUSY
    got = sorted(int(x) for x in lines)
    assert got[0] != got[1] and slot in got and 3 not in got, (got, slot)
    assert {_slot_tag(path, got[0]), _slot_tag(path, got[1])} == {a, b}
    with cxlkit.Pool(path, host_id=3) as p:  # the third free slot is still free
        states = {h.slot: h.state for h in p.hosts()}
    assert [states[h] for h in range(3) if h not in got] == ["free"], states


def test_stop_point_checks_its_arguments():
    with pytest.raises(OSError, match="stop point no.such"):
        _native.pool_stop_at("no.such", 1)
    with pytest.raises(OSError, match="stop point slot.x"):
        _native.pool_stop_at("slot.x", -1)
    _native.pool_stop_at("slot.x", 0)  # disarmed: a claim in this process runs through
    with cxlkit.Pool("memfd:cxlkit-test-stop", size=8 * MiB, max_hosts=2, host_id="one") as p:
        assert p.host_id in (0, 1)


@pytest.mark.parametrize("point", ["slot.x", "slot.claimed"])
def test_claimer_killed_mid_claim(path, point):
    # the only free slot is 0 (host 1 closed its own door); a claimer by name dies after
    # writing its nonce (slot 0 is still free: the next name takes it) or after winning the
    # slot before tagging it (a claim interrupted: EBUSY for the next name, shown as claimed)
    cxlkit.Pool(path, size=8 * MiB, max_hosts=2, host_id=1).close()
    pid = os.fork()
    if pid == 0:
        try:
            _native.pool_crash_at(point, 1)
            cxlkit.Pool(path, host_id="dead").close()
        finally:
            os._exit(1)  # not reached when the crash point fires (137)
    _, st = os.waitpid(pid, 0)
    assert os.WIFEXITED(st) and os.WEXITSTATUS(st) == 137
    if point == "slot.x":
        with cxlkit.Pool(path, host_id="alive") as p:
            assert p.host_id == 0 and p.fsck(repair=False).clean
        return
    with pytest.raises(cxlkit.PoolError, match="no host slot is free"):
        cxlkit.Pool(path, host_id="alive")
    with cxlkit.Pool(path, host_id=1) as p:
        assert p.hosts()[0].state == "claimed" and p.fsck(repair=False).clean


def test_fsck_of_another_hosts_table_counts_no_error_for_an_object_created_after_its_walk(path):
    # the two-guest claims test counted one fsck error: the other guest made an object between
    # this fsck's walk of its chain and its read of its name table. Here the checker stops at
    # that point (fsck.entries, first for host 0) while host 0 creates, then goes on.
    go_r, go_w = os.pipe()
    res_r, res_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(go_w)
            os.read(go_r, 1)
            with cxlkit.Pool(path, host_id=1) as q:
                _native.pool_stop_at("fsck.entries", 1)
                rep = q.fsck(repair=False)
                os.write(res_w, f"{rep.errors} {rep.duplicate_names}\n".encode())
            code = 0
        finally:
            os._exit(code)
    os.close(go_r)
    os.close(res_w)
    try:
        with cxlkit.Pool(path, size=8 * MiB, max_hosts=2, host_id=0) as p:
            p.create("before", data=b"b" * 64).close()
            os.write(go_w, b"g")
            assert _run_until_stopped_or_exited(pid), "the checker did not stop at fsck.entries"
            p.create("after", data=b"a" * 64).close()  # after the checker's walk of host 0
            os.kill(pid, 18)  # SIGCONT
            _, st = os.waitpid(pid, 0)
            assert os.WIFEXITED(st) and os.WEXITSTATUS(st) == 0, st
            assert os.read(res_r, 64).decode().split() == ["0", "0"]
            assert p.fsck(repair=False).clean
    finally:
        os.close(go_w)
        os.close(res_r)
