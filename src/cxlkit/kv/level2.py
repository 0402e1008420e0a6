"""The level below the pool: a distributed KV store shared by many pods (Mooncake Store).
Blocks evicted from a pool are demoted to it in the background (a bounded queue, never waited
for); a pool miss fetches the next blocks from it (each call bounded by timeout_s), and the
store promotes them into the pool after checking them like any pool block. Every failure of
the level is a miss: one log line when it goes down, one when it comes back.
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any, Protocol

log = logging.getLogger("cxlkit")
FETCH_CHUNK = 8  # blocks per fetch call: timeout_s bounds each call, not a whole prefix


class Backend(Protocol):
    """What the level needs of a distributed store. Calls may raise or block; Level2 bounds
    them and turns every failure into a miss."""

    def put(self, key: str, data: bytes | memoryview) -> None: ...
    def get(self, key: str) -> bytes | None: ...
    def exists(self, keys: Sequence[str]) -> list[bool]: ...
    def close(self) -> None: ...


@dataclass
class Level2Stats:
    demoted: int = 0         # blocks written to the level
    demote_dropped: int = 0  # evictions not demoted: queue full, level down or a failed put
    fetched: int = 0         # blocks read from the level
    failures: int = 0        # calls that raised, returned an error or ran past timeout_s


class Level2:
    """A Backend behind two threads: one drains the demotion queue (at most queue_blocks
    blocks waiting), one serves fetches, each waited for at most timeout_s. connect builds
    the backend on the fetch thread, so opening the level never blocks its caller."""

    def __init__(self, connect: Callable[[], Backend], *, queue_blocks: int = 64,
                 timeout_s: float = 2.0, name: str = "level 2") -> None:
        if queue_blocks <= 0:
            raise ValueError(f"queue_blocks: must be > 0, got {queue_blocks}")
        if not timeout_s > 0:
            raise ValueError(f"timeout_s: must be > 0, got {timeout_s}")
        self.name, self.timeout_s = name, float(timeout_s)
        self.stats = Level2Stats()
        self._down = False
        self._lock = threading.Lock()
        self._busy: Future | None = None  # a fetch that outlived its timeout
        self._demotions: queue.Queue = queue.Queue(maxsize=queue_blocks)
        self._calls: queue.Queue = queue.Queue()
        self._backend: Backend | None = None
        self._ready = Future()
        threading.Thread(target=self._serve_calls, args=(connect,), daemon=True,
                         name="cxlkit-kv-level2-fetch").start()
        self._demoter = threading.Thread(target=self._serve_demotions, daemon=True,
                                         name="cxlkit-kv-level2-demote")
        self._demoter.start()

    # -- health: one line per change -------------------------------------------------------
    def _failed(self, what: str, err: object) -> None:
        with self._lock:
            self.stats.failures += 1
            was, self._down = self._down, True
        if not was:
            log.warning("kv %s: %s failed: %s; blocks it holds count as misses until it "
                        "answers again", self.name, what, err)

    def _answered(self) -> None:
        with self._lock:
            was, self._down = self._down, False
        if was:
            log.warning("kv %s: answering again", self.name)

    @property
    def down(self) -> bool:
        return self._down

    def wait_connected(self, timeout_s: float) -> bool:
        """Wait at most timeout_s for the backend's connection attempt; whether it is up."""
        try:
            return bool(self._ready.result(timeout=timeout_s)) and not self._down
        except FutureTimeout:
            return False

    # -- threads ---------------------------------------------------------------------------
    def _serve_calls(self, connect: Callable[[], Backend]) -> None:
        try:
            self._backend = connect()
            self._ready.set_result(True)
        except Exception as e:  # noqa: BLE001 - any failure of the level is a miss
            self._failed("connecting", e)
            self._ready.set_result(False)
        while True:
            item = self._calls.get()
            if item is None:
                return
            fut, fn = item
            if fut.set_running_or_notify_cancel():
                try:
                    fut.set_result(fn())
                except BaseException as e:  # noqa: BLE001 - handed to the waiter
                    fut.set_exception(e)

    def _serve_demotions(self) -> None:
        self._ready.result()
        while True:
            item = self._demotions.get()
            try:
                if item is None:
                    return
                self._demote_one(*item)
            finally:
                self._demotions.task_done()

    def _demote_one(self, key: str, data: bytes | memoryview) -> None:
        backend = self._backend
        if backend is None:
            self.stats.demote_dropped += 1
            return
        try:
            backend.put(key, data)
        except Exception as e:  # noqa: BLE001 - any failure of the level is a dropped block
            self.stats.demote_dropped += 1
            self._failed(f"demoting {key}", e)
            return
        self.stats.demoted += 1
        self._answered()

    def _call(self, what: str, fn: Callable[[Backend], Any]) -> Any:
        """fn(backend) on the fetch thread, waited for at most timeout_s; None on failure."""
        if self._busy is not None and not self._busy.done():
            return None  # the last call is still stuck: do not queue behind it
        if not self._ready.done() or self._backend is None:
            return None  # still connecting, or never connected
        backend = self._backend
        fut: Future = Future()
        self._calls.put((fut, lambda: fn(backend)))
        try:
            out = fut.result(timeout=self.timeout_s)
        except FutureTimeout:
            self._busy = fut
            self._failed(what, f"no answer within {self.timeout_s} s")
            return None
        except Exception as e:  # noqa: BLE001
            self._failed(what, e)
            return None
        self._answered()
        return out

    # -- the level's two operations --------------------------------------------------------
    def accepts(self) -> bool:
        """Whether a demotion would be queued now; False counts the block as dropped (the
        caller skips copying it)."""
        if self._demotions.full():
            self.stats.demote_dropped += 1
            return False
        return True

    def demote(self, key: str, data: bytes | memoryview) -> bool:
        """Queue one block for the level; False (dropped) when the queue is full. Never
        waits."""
        try:
            self._demotions.put_nowait((key, data))
            return True
        except queue.Full:
            self.stats.demote_dropped += 1
            return False

    def fetch(self, keys: Sequence[str]) -> list[bytes]:
        """The payloads of the leading keys the level holds (stops at the first it does not,
        or at any failure: a miss)."""
        def run(b: Backend, keys: list[str]) -> list[bytes]:
            have = b.exists(keys)
            out = []
            for k, h in zip(keys, have):
                data = b.get(k) if h else None
                if not data:
                    break
                out.append(data)
            return out

        out: list[bytes] = []
        for a in range(0, len(keys), FETCH_CHUNK):  # each chunk one bounded call
            chunk = list(keys[a:a + FETCH_CHUNK])
            got = self._call(f"fetching {chunk[0]}", lambda b, c=chunk: run(b, c)) or []
            out += got
            if len(got) < len(chunk):
                break
        self.stats.fetched += len(out)
        return out

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Wait at most timeout_s until every queued demotion was tried (True) or not (False);
        for tests and orderly shutdowns."""
        q, deadline = self._demotions, time.monotonic() + timeout_s
        with q.all_tasks_done:  # notified by task_done() in the demoter
            while q.unfinished_tasks:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                q.all_tasks_done.wait(left)
        return True

    def close(self) -> None:
        """Stops both threads; the backend is closed on the fetch thread, not waited for (a
        store whose master is gone can take seconds to say goodbye)."""
        backend, self._backend = self._backend, None
        try:
            self._demotions.put_nowait(None)
        except queue.Full:
            pass  # the daemon thread ends with the process
        if backend is not None:
            self._calls.put((Future(), backend.close))
        self._calls.put(None)
