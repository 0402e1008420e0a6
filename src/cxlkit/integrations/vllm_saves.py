"""The vLLM connector's saves off the request's path: one background thread copies blocks into
the pool while the engine goes on. It tracks which vLLM blocks and which requests still have
saves pending, so the connector can tell vLLM when a finished request's blocks may be freed
(get_finished) and can wait before vLLM writes into a block a pending save still reads.
"""
from __future__ import annotations

import importlib
import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("cxlkit")


@dataclass
class SaveJob:
    req_id: str
    keys: list[bytes]
    block_ids: list[int]
    group: int = 0  # KV cache group


@dataclass
class SaveCounts:
    saved: int = 0      # blocks new in the pool
    failed: int = 0     # blocks of saves that raised (one log line each)
    sync: int = 0       # blocks saved on the caller's thread: the queue was full
    cancelled: int = 0  # blocks whose save never ran: vLLM needed the block back first


def load_hook(spec: str | None) -> Callable[[str, SaveJob], Any] | None:
    """extra_config "save_hook": "module:function", called as function(stage, SaveJob) (the
    engine tests' fault hook: a slow or failing save); None when not set."""
    if not spec:
        return None
    mod, _, fn = str(spec).partition(":")
    if not mod or not fn:
        raise ValueError(f"kv_connector_extra_config save_hook: {spec!r}; expected "
                         "'module:function'")
    return getattr(importlib.import_module(mod), fn)


class SaveQueue:
    """At most max_blocks blocks waiting; run(job) does one save and returns the blocks that
    were new. hook(stage, job), when given, is called with "queued" on the submitting thread
    and "saving" on the save thread just before run: the fault hook of the engine tests (a
    slow or failing save)."""

    def __init__(self, run: Callable[[SaveJob], int], *, max_blocks: int,
                 hook: Callable[[str, SaveJob], Any] | None = None) -> None:
        if max_blocks <= 0:
            raise ValueError(f"save_queue_blocks: must be > 0, got {max_blocks}")
        self._run, self._hook, self._max = run, hook, max_blocks
        self._cv = threading.Condition()
        self._jobs: deque[SaveJob] = deque()
        self._queued_blocks = 0
        self._running: SaveJob | None = None
        self._blocks: Counter[int] = Counter()   # vLLM block id -> pending saves reading it
        self._per_req: Counter[str] = Counter()  # request -> pending jobs
        self._closed = False
        self.counts = SaveCounts()
        self._thread = threading.Thread(target=self._serve, daemon=True,
                                        name="cxlkit-kv-save")
        self._thread.start()

    # -- the engine's thread ---------------------------------------------------------------
    def submit(self, job: SaveJob) -> bool:
        """Queue job; False when max_blocks would be exceeded (or the queue is closed): the
        caller saves it itself (save_now)."""
        with self._cv:
            if self._closed or (self._queued_blocks + len(job.block_ids) > self._max
                                and self._jobs):
                return False
            self._jobs.append(job)
            self._queued_blocks += len(job.block_ids)
            self._blocks.update(job.block_ids)
            self._per_req[job.req_id] += 1
            self._cv.notify_all()
        self._call_hook("queued", job)
        return True

    def save_now(self, job: SaveJob) -> None:
        """Save job on the calling thread (the queue was full)."""
        with self._cv:
            self.counts.sync += len(job.block_ids)
        self._save(job)

    def pending(self, req_id: str) -> int:
        with self._cv:
            return self._per_req[req_id]

    def wait_requests(self, req_ids: Iterable[str], timeout_s: float) -> None:
        """Wait at most timeout_s until none of req_ids has a save pending."""
        ids = list(req_ids)
        deadline = time.monotonic() + timeout_s
        with self._cv:
            while any(self._per_req[r] for r in ids):
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._cv.wait(left)

    def wait_blocks(self, block_ids: Iterable[int], timeout_s: float) -> bool:
        """Return once no pending save reads any of block_ids (vLLM is about to write them).
        Waits at most timeout_s for the queue to reach them; past that their queued saves are
        cancelled (counted) and only the one running is waited for. True if none was
        cancelled."""
        ids = set(block_ids)
        deadline = time.monotonic() + timeout_s
        with self._cv:
            while self._touches(ids):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cv.wait(left)
            cancelled = self._cancel(ids)
            while self._running is not None and ids.intersection(self._running.block_ids):
                self._cv.wait()  # a copy out of local memory: it ends
        if cancelled:
            log.warning("kv save: %d queued blocks not saved: vLLM reused them before the save "
                        "queue reached them within %.0f s", cancelled, timeout_s)
        return not cancelled

    def drain(self, timeout_s: float) -> bool:
        """Wait at most timeout_s for every queued save to finish; whether they did."""
        deadline = time.monotonic() + timeout_s
        with self._cv:
            while self._jobs or self._running is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cv.wait(left)
        return True

    def close(self, timeout_s: float) -> bool:
        """Drain within timeout_s, then stop the thread; saves still queued are abandoned (a
        cache: they are later misses). Whether everything was saved."""
        done = self.drain(timeout_s)
        with self._cv:
            self._closed = True
            left = sum(len(j.block_ids) for j in self._jobs)
            self._jobs.clear()
            self._cv.notify_all()
        if left:
            log.warning("kv save: %d blocks abandoned at shutdown (not saved within %.0f s)",
                        left, timeout_s)
        return done

    # -- the save thread -------------------------------------------------------------------
    def _serve(self) -> None:
        while True:
            with self._cv:
                while not self._jobs and not self._closed:
                    self._cv.wait()
                if self._closed:
                    return
                job = self._running = self._jobs.popleft()
                self._queued_blocks -= len(job.block_ids)
            try:
                self._call_hook("saving", job)
                self._save(job)
            finally:
                with self._cv:
                    self._running = None
                    self._release(job)
                    self._cv.notify_all()

    def _save(self, job: SaveJob) -> None:
        try:
            n = self._run(job)
        except (OSError, ValueError, IndexError) as e:
            with self._cv:
                self.counts.failed += len(job.block_ids)
            log.warning("kv save of request %s (%d blocks) failed: %s; they stay unsaved",
                        job.req_id, len(job.block_ids), e)
            return
        with self._cv:
            self.counts.saved += n

    def _call_hook(self, stage: str, job: SaveJob) -> None:
        if self._hook is None:
            return
        try:
            self._hook(stage, job)
        except Exception as e:  # noqa: BLE001 - a test's hook never fails a request
            log.warning("kv save hook (%s, request %s) raised: %s", stage, job.req_id, e)

    # -- bookkeeping, under _cv ------------------------------------------------------------
    def _touches(self, ids: set[int]) -> bool:
        return any(self._blocks[i] for i in ids)

    def _release(self, job: SaveJob) -> None:
        self._blocks.subtract(job.block_ids)
        self._blocks += Counter()  # drops the zeros
        self._per_req[job.req_id] -= 1
        if self._per_req[job.req_id] <= 0:
            del self._per_req[job.req_id]

    def _cancel(self, ids: set[int]) -> int:
        keep, n = deque(), 0
        for job in self._jobs:
            if ids.intersection(job.block_ids):
                n += len(job.block_ids)
                self._queued_blocks -= len(job.block_ids)
                self._release(job)
            else:
                keep.append(job)
        self._jobs = keep
        self.counts.cancelled += n
        return n
