"""StepMetrics: each request's bytes and in-flight interval, per path and direction, the
counters of a step (fetches, flushes, hits, waits, in-place updates), and at its end the step's
metrics (per path: bytes, GB/s over busy time, lock waits; the whole step: effective I/O over
the union of every request's interval), kept in history."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class StepMetrics:
    def __init__(self, paths: Sequence[Any]) -> None:
        self.paths = paths
        self.history: list[dict[str, Any]] = []
        self.caller_times: dict[str, float] = {}
        self.stats = self.fresh()

    def fresh(self) -> dict[str, Any]:
        n = len(self.paths)
        return dict(hits=0, fetched=set(), fetches=0, flushes=0, migrations=0, wait_s=0.0,
                    read_wait_s=0.0, write_wait_s=0.0, compute_s=0.0,
                    in_place=0, in_place_s=0.0, in_place_check_s=0.0, folded_flushes=0,
                    bytes=[[0, 0] for _ in range(n)], spans=[([], []) for _ in range(n)],
                    lock0=[p.lock_wait_s for p in self.paths])

    def begin(self) -> None:
        self.stats = self.fresh()

    def account(self, pi: int, write: bool, nbytes: int, t_submit: float, dt: float) -> None:
        """A finished request: its bytes and its in-flight interval, per path and direction
        (busy time is the union of the intervals: requests in flight at once count once)."""
        st = self.stats
        st["bytes"][pi][int(write)] += nbytes
        st["spans"][pi][int(write)].append((t_submit, t_submit + dt))

    def report_times(self, **seconds: float) -> None:
        self.caller_times.update({k: float(v) for k, v in seconds.items()})

    def _per_path(self, assignment: Sequence[int], bandwidth: Sequence[float]) -> list[dict]:
        st = self.stats
        out = []
        for i, p in enumerate(self.paths):
            (rsp, wsp), (rb, wb) = st["spans"][i], st["bytes"][i]
            rs, ws = busy_seconds(rsp), busy_seconds(wsp)
            busy = busy_seconds(rsp + wsp)
            out.append(dict(
                path=p.name, kind=p.kind, subgroups=assignment.count(i),
                read_bytes=rb, write_bytes=wb,
                read_GBps=rb / rs / 1e9 if rs else None, write_GBps=wb / ws / 1e9 if ws else None,
                busy_s=busy, busy_GBps=(rb + wb) / busy / 1e9 if busy else None,
                bandwidth_GBps=bandwidth[i] / 1e9, lock=p.lock_mode,
                capacity_nbytes=p.capacity_nbytes,
                held_nbytes=assignment.count(i) * p.footprint_nbytes(),
                lock_wait_s=p.lock_wait_s - st["lock0"][i]))
        return out

    def end_step(self, step: int, ascending: bool, nsubgroups: int, assignment: Sequence[int],
                 bandwidth: Sequence[float]) -> dict[str, Any]:
        """The step's metrics (with the caller's reported phases), appended to history."""
        st = self.stats
        tot_b = sum(b[0] + b[1] for b in st["bytes"])
        busy = busy_seconds([s for rw in st["spans"] for spans in rw for s in spans])
        out = dict(step=step, order="ascending" if ascending else "descending",
                   update_s=st["update_s"], compute_s=st["compute_s"], io_wait_s=st["wait_s"],
                   read_wait_s=st["read_wait_s"], write_wait_s=st["write_wait_s"],
                   cache_hits=st["hits"], fetches=st["fetches"], flushes=st["flushes"],
                   migrations=st["migrations"], subgroups=nsubgroups,
                   in_place=st["in_place"], in_place_s=st["in_place_s"],
                   in_place_check_s=st["in_place_check_s"],
                   folded_flushes=st["folded_flushes"],
                   io_bytes=tot_b, io_GBps=tot_b / st["update_s"] / 1e9 if st["update_s"] else 0,
                   io_busy_s=busy, io_busy_GBps=tot_b / busy / 1e9 if busy else None,
                   paths=self._per_path(assignment, bandwidth), **self.caller_times)
        self.caller_times = {}
        self.history.append(out)
        return out

    def observed(self, pi: int) -> tuple[int, float]:
        """(bytes moved, seconds busy) of path pi in this step."""
        st = self.stats
        return sum(st["bytes"][pi]), busy_seconds([s for spans in st["spans"][pi]
                                                  for s in spans])


def busy_seconds(spans: Sequence[tuple[float, float]]) -> float:
    """Length of the union of (start, end) intervals: the time at least one of the requests
    was in flight (requests on several paths at once count once)."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total
