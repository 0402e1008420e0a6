"""The metrics and bandwidth side of a SubgroupStore (a mixin of it): each request's bytes
and in-flight interval, the step's metrics (per path: bytes, GB/s over busy time, lock
waits; the whole step: effective I/O over the union of every request's interval), the
re-estimation of each path's bandwidth after a step, and the plan the split made."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from . import subgroup_layout as L

EWMA = 0.5  # weight of the last step's observed throughput in a path's bandwidth


class StoreMetrics:
    """Needs SubgroupStore's fields and _split; never used alone."""

    def _account(self, pi: int, write: bool, nbytes: int, t_submit: float, dt: float) -> None:
        """A finished request: its bytes and its in-flight interval, per path and direction
        (busy time is the union of the intervals: requests in flight at once count once)."""
        st = self._step_stats
        st["bytes"][pi][int(write)] += nbytes
        st["spans"][pi][int(write)].append((t_submit, t_submit + dt))

    def _new_stats(self) -> dict[str, Any]:
        n = len(self.paths)
        return dict(hits=0, fetched=set(), fetches=0, flushes=0, migrations=0, wait_s=0.0,
                    read_wait_s=0.0, write_wait_s=0.0, compute_s=0.0,
                    in_place=0, in_place_s=0.0, in_place_check_s=0.0, folded_flushes=0,
                    bytes=[[0, 0] for _ in range(n)], spans=[([], []) for _ in range(n)],
                    lock0=[p.lock_wait_s for p in self.paths])

    def report_times(self, **seconds: float) -> None:
        """The caller's own phases of the step (forward_s=, backward_s=), kept in the next
        step's metrics."""
        self._caller_times.update({k: float(v) for k, v in seconds.items()})

    def _end_step(self, ascending: bool) -> dict[str, Any]:
        st = self._step_stats
        per_path = []
        for i, p in enumerate(self.paths):
            (rsp, wsp), (rb, wb) = st["spans"][i], st["bytes"][i]
            rs, ws = busy_seconds(rsp), busy_seconds(wsp)
            busy = busy_seconds(rsp + wsp)
            per_path.append(dict(
                path=p.name, kind=p.kind, subgroups=self.assignment.count(i),
                read_bytes=rb, write_bytes=wb,
                read_GBps=rb / rs / 1e9 if rs else None, write_GBps=wb / ws / 1e9 if ws else None,
                busy_s=busy, busy_GBps=(rb + wb) / busy / 1e9 if busy else None,
                bandwidth_GBps=self.bandwidth[i] / 1e9, lock=p.lock_mode,
                capacity_nbytes=p.capacity_nbytes,
                held_nbytes=self.assignment.count(i) * p.footprint_nbytes(),
                lock_wait_s=p.lock_wait_s - st["lock0"][i]))
        tot_b = sum(b[0] + b[1] for b in st["bytes"])
        busy = busy_seconds([s for rw in st["spans"] for spans in rw for s in spans])
        out = dict(step=self.steps_done, order="ascending" if ascending else "descending",
                   update_s=st["update_s"], compute_s=st["compute_s"], io_wait_s=st["wait_s"],
                   read_wait_s=st["read_wait_s"], write_wait_s=st["write_wait_s"],
                   cache_hits=st["hits"], fetches=st["fetches"], flushes=st["flushes"],
                   migrations=st["migrations"], subgroups=len(self.subgroups),
                   in_place=st["in_place"], in_place_s=st["in_place_s"],
                   in_place_check_s=st["in_place_check_s"],
                   folded_flushes=st["folded_flushes"],
                   io_bytes=tot_b, io_GBps=tot_b / st["update_s"] / 1e9 if st["update_s"] else 0,
                   io_busy_s=busy, io_busy_GBps=tot_b / busy / 1e9 if busy else None,
                   paths=per_path, **self._caller_times)
        self._caller_times = {}
        self.history.append(out)
        if self.reestimate:
            self._reestimate(st)
        return out

    def _reestimate(self, st: dict[str, Any]) -> None:
        """Each path's bandwidth moves towards what the step observed: the bytes it moved
        (both directions) over the time it was busy (at least one request in flight: a
        path with several requests in flight at once is not under-estimated)."""
        for i in range(len(self.paths)):
            nbytes = sum(st["bytes"][i])
            busy = busy_seconds([s for spans in st["spans"][i] for s in spans])
            if busy > 0 and nbytes >= (1 << 20):
                self.bandwidth[i] = (1 - EWMA) * self.bandwidth[i] + EWMA * nbytes / busy
        new = self._split(len(self.subgroups))
        if new != [self.assignment.count(i) for i in range(len(self.paths))]:
            self.assignment = L.rebalance(self.assignment, new)

    def reassign(self, bandwidths: Sequence[float]) -> list[int]:
        """Take these per-path bandwidths (bytes/s) and re-run Eq. 1; subgroups whose path
        changes move at their next flush. Returns the new assignment."""
        if len(bandwidths) != len(self.paths):
            raise ValueError(f"bandwidths: {len(bandwidths)} figures for {len(self.paths)} paths")
        self._require_bound()
        self.bandwidth = [float(b) for b in bandwidths]
        new = self._split(len(self.subgroups))
        self.assignment = L.rebalance(self.assignment, new)
        return list(self.assignment)

    def plan(self) -> list[dict[str, Any]]:
        """Per path: its subgroups, bandwidth (bytes/s, min of read and write), the figures
        measured at start (alone; together: with every path running), its CPU seconds per
        byte, the CPU budget of the split (cpu_rate, None: not CPU-bound), its capacity
        (bytes and subgroups, None: no bound) and the bytes its subgroups take."""
        caps = self.capacity_subgroups()
        return [dict(path=p.name, kind=p.kind, subgroups=self.assignment.count(i),
                     capacity_nbytes=p.capacity_nbytes, capacity_subgroups=caps[i],
                     held_nbytes=self.assignment.count(i) * p.footprint_nbytes(),
                     bandwidth=self.bandwidth[i], read=self.measured[i][0],
                     write=self.measured[i][1],
                     together=min(self.together[i]) if self.together else None,
                     cpu_per_byte=self.cpu_per_byte[i] if self.cpu_per_byte else None,
                     cpu_rate=self.cpu_rate) for i, p in enumerate(self.paths)]


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
