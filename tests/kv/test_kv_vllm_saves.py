"""The connector's saves off the request's path (cxlkit.integrations.vllm_saves), alone and
through the connector driven by the fake of vLLM's calls: a finished request's blocks stay
vLLM's until get_finished reports its saves done, a reused block waits for the save reading it,
a full queue saves on the engine's thread, a failed save is a log line, shutdown is bounded.
The real engine: tests/engines/test_kv_vllm_engine.py."""
from __future__ import annotations

import logging
import threading

import pytest

from cxlkit.integrations.vllm_saves import SaveJob, SaveQueue
from kv_fakes.vllm_base import import_connector
from kv_fakes.vllm_fake import FakeEngine, Request

conn = import_connector()
PROMPT = [(11 * i + 5) % 997 for i in range(83)]  # 5 full blocks + 3 tokens
BOUND_S = 30  # every wait here ends by itself


class Gate:
    """A save hook that holds the save thread at its first save until opened."""

    def __init__(self) -> None:
        self.open, self.holding = threading.Event(), threading.Event()
        self.stages: list[tuple[str, str]] = []

    def __call__(self, stage: str, job: SaveJob) -> None:
        self.stages.append((stage, job.req_id))
        if stage == "saving":
            self.holding.set()
            assert self.open.wait(BOUND_S)


def _queue(hook=None, max_blocks=8, fail=()):
    ran: list[str] = []

    def run(job: SaveJob) -> int:
        if job.req_id in fail:
            raise OSError(28, f"pool full saving {job.req_id}")
        ran.append(job.req_id)
        return len(job.block_ids)

    return SaveQueue(run, max_blocks=max_blocks, hook=hook), ran


def test_a_reused_block_waits_for_its_save_and_an_unreached_one_is_cancelled():
    gate = Gate()
    q, ran = _queue(gate)
    assert q.submit(SaveJob("a", [b"a"] * 2, [1, 2])) and q.submit(SaveJob("b", [b"b"], [3]))
    assert gate.holding.wait(BOUND_S) and q.pending("a") == 1
    # block 3's save is still queued behind a's: with no time left it is not made
    assert q.wait_blocks([3], 0.0) is False
    assert q.counts.cancelled == 1 and q.pending("b") == 0
    seen = []
    t = threading.Thread(target=lambda: seen.append((q.wait_blocks([2], BOUND_S), list(ran))))
    t.start()
    gate.open.set()
    t.join(BOUND_S)
    assert seen == [(True, ["a"])]  # it returned only after a's save read block 2
    assert q.drain(BOUND_S) and ran == ["a"] and q.counts.saved == 2
    q.close(BOUND_S)


def test_a_full_queue_is_the_callers_to_save_and_a_failed_save_is_one_log_line(caplog):
    gate = Gate()
    q, ran = _queue(gate, max_blocks=2, fail={"bad"})
    assert q.submit(SaveJob("a", [b"a"] * 2, [1, 2]))
    assert gate.holding.wait(BOUND_S)
    assert q.submit(SaveJob("b", [b"b"] * 2, [3, 4]))  # the running job left the queue
    assert not q.submit(SaveJob("c", [b"c"], [5]))     # 2 blocks wait already
    q.save_now(SaveJob("c", [b"c"], [5]))
    assert ran == ["c"] and q.counts.sync == 1
    with caplog.at_level(logging.WARNING, logger="cxlkit"):
        q.save_now(SaveJob("bad", [b"x"] * 3, [6, 7, 8]))
    assert q.counts.failed == 3
    assert [r.getMessage() for r in caplog.records] == [
        "kv save of request bad (3 blocks) failed: [Errno 28] pool full saving bad; "
        "they stay unsaved"]
    gate.open.set()
    assert q.drain(BOUND_S) and ran == ["c", "a", "b"] and q.pending("bad") == 0
    q.close(BOUND_S)


def test_shutdown_abandons_saves_the_bound_does_not_reach(caplog):
    gate = Gate()
    q, ran = _queue(gate)
    q.submit(SaveJob("a", [b"a"], [1]))
    q.submit(SaveJob("b", [b"b"] * 2, [2, 3]))
    assert gate.holding.wait(BOUND_S)
    with caplog.at_level(logging.WARNING, logger="cxlkit"):
        assert q.close(0.0) is False
    assert "2 blocks abandoned at shutdown" in caplog.text
    assert not q.submit(SaveJob("c", [b"c"], [4]))  # closed: the caller saves
    gate.open.set()
    assert q.drain(BOUND_S) and ran == ["a"]


def test_waiting_for_a_requests_saves_is_bounded_and_ends_when_they_are_done():
    gate = Gate()
    q, ran = _queue(gate)
    q.submit(SaveJob("a", [b"a"] * 2, [1, 2]))
    assert gate.holding.wait(BOUND_S)
    q.wait_requests(["a"], 0.0)  # the bound passed: back with the save still pending
    assert q.pending("a") == 1 and ran == []
    gate.open.set()
    q.wait_requests(["a", "never-queued"], BOUND_S)
    assert q.pending("a") == 0 and ran == ["a"]
    q.close(BOUND_S)


def test_queue_refuses_a_bound_of_zero():
    with pytest.raises(ValueError, match="save_queue_blocks"):
        SaveQueue(lambda job: 0, max_blocks=0)


GATE = Gate()  # the connector's save_hook, by module path


@pytest.fixture
def gate():
    global GATE
    GATE = Gate()
    yield GATE
    GATE.open.set()


@pytest.fixture
def extra(pool_path):
    return {"pool": pool_path, "create": True, "size": 32 << 20, "host_id": 0, "checksum": True,
            "save_hook": f"{__name__}:hook"}


def hook(stage: str, job: SaveJob) -> None:
    GATE(stage, job)


def test_a_finished_request_keeps_its_blocks_until_get_finished_reports_its_saves(extra, gate):
    a = FakeEngine(extra)
    a.settle = False
    req = Request("r", PROMPT)
    so = a.step(req)  # the step returns while its save is held
    assert gate.holding.wait(BOUND_S)
    assert a.worker.store.lookup(req.block_hashes[:5]) == 0  # not in the pool yet
    assert a.sched.request_finished(req, so.scheduled_new_reqs[0].block_ids[0]) == (True, None)
    assert a.sched.has_pending_block_frees()
    assert a.worker.get_finished({"r"}) == (None, None)  # held: vLLM keeps the blocks
    gate.open.set()
    assert a.worker.wait_saves(BOUND_S)
    assert a.worker.get_finished(set()) == ({"r"}, None)  # reported once, then forgotten
    assert a.worker.get_finished(set()) == (None, None)
    a.sched.update_connector_output(type("Out", (), {"finished_sending": {"r"}})())
    assert not a.sched.has_pending_block_frees()
    assert a.worker.store.lookup(req.block_hashes[:5]) == 5
    assert gate.stages == [("queued", "r"), ("saving", "r")]


def test_a_request_without_saves_and_synchronous_saves_free_their_blocks_at_once(extra, gate):
    gate.open.set()
    a = FakeEngine(extra)
    short = Request("s", PROMPT[:10])  # no full block: nothing to save
    a.step(short)
    assert a.sched.request_finished(short, []) == (False, None)
    assert a.worker.get_finished({"s"}) == (None, None)
    b = FakeEngine(dict(extra, async_save=False, save_hook=None, create=False, host_id=1))
    req = Request("r", PROMPT[::-1])
    b.step(req)
    assert b.sched.request_finished(req, []) == (False, None)
    assert b.worker.store.lookup(req.block_hashes[:5]) == 5  # saved within the step


def test_the_connector_refuses_a_malformed_save_hook(extra):
    with pytest.raises(ValueError, match="save_hook"):
        FakeEngine(dict(extra, save_hook="no_function_named"))
