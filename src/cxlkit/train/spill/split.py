"""How many subgroups each path takes when the paths share the CPU: Eq. 1 (T_i proportional
to B_i) assumes every path delivers its own bandwidth while the others run. A path that is a
CPU copy (tmpfs, a memory tier, a pool mapped in this process) takes cores from the others
and from the AdamW kernel, so on a machine with few cores the sum of bandwidths measured one
path at a time is not reachable at once, and a split by Eq. 1 can make the step slower than
leaving that path out.

The model (per subgroup-sized unit of bytes, which every path moves alike):

    T(n) = max( max_i n_i / B_i ,  sum_i c_i n_i / C )

B_i: the path's bandwidth (bytes/s), c_i: the CPU seconds this process spends per byte the
path moves (its copy threads, io-wq kernel threads, sums), C: the CPU seconds per second the
process gets while every path is busy (None: not CPU-bound). Its real-valued optimum is a
fractional knapsack: fill the paths in order of CPU cost per byte, each up to B_i, until the
CPU budget C is spent. The candidates are Eq. 1 over that throughput and Eq. 1 over the
bandwidths, for all the paths and for every subset of them (rounding can favour a subset:
Eq. 1 gives every path with bandwidth at least one subgroup); the one with the least T(n) is
taken. Since every subset's own candidates are among them, adding a path never makes the
modelled step slower than the best subset.

Capacities (caps: the most subgroups each path holds, None: no bound) make the split a
bounded integer program, solved exactly (capped_optimum): for a step time T a path takes at
most min(cap_i, floor(T * B_i)) subgroups, and the least CPU for m of them fills the paths in
order of CPU cost per byte; T is feasible when those bounds reach m and that CPU fits T * C.
Feasibility grows with T, and between two consecutive values n / B_i the bounds are fixed,
so a sweep over those values finds the least feasible T. Among the candidates above that
fit the caps and that optimum, the least modelled time wins (ties: the candidates first, so a
bound that does not bind keeps their split unless the optimum is strictly faster)."""
from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

from . import layout as L

MAX_SUBSET_PATHS = 10  # 2^10 - 1 subsets of Eq. 1 at most; above, the knapsack split only


def _check(name: str, xs: Sequence[float], n: int) -> list[float]:
    if len(xs) != n:
        raise ValueError(f"{name}: {len(xs)} figures for {n} paths")
    out = [float(x) for x in xs]
    if any(not math.isfinite(x) or x < 0 for x in out):
        raise ValueError(f"{name} {list(xs)!r}: expected finite numbers >= 0")
    return out


def model_time(counts: Sequence[int], bandwidths: Sequence[float],
               cpu_per_byte: Sequence[float] | None = None,
               cpu_rate: float | None = None) -> float:
    """T(n) of the model above, in seconds per byte of one subgroup (inf when a path with no
    bandwidth holds subgroups)."""
    t = 0.0
    for n, b in zip(counts, bandwidths):
        if n:
            t = max(t, n / b if b > 0 else math.inf)
    if cpu_per_byte is not None and cpu_rate:
        t = max(t, sum(n * c for n, c in zip(counts, cpu_per_byte)) / cpu_rate)
    return t


def knapsack_throughput(bandwidths: Sequence[float], cpu_per_byte: Sequence[float],
                        cpu_rate: float | None) -> list[float]:
    """Per path the bytes/s it should carry (the real-valued optimum of the model): paths in
    order of CPU cost per byte, each up to its bandwidth, until the CPU budget is spent."""
    if not cpu_rate:
        return list(bandwidths)
    y = [0.0] * len(bandwidths)
    budget = float(cpu_rate)
    for i in sorted(range(len(bandwidths)), key=lambda j: (cpu_per_byte[j], -bandwidths[j])):
        b, c = bandwidths[i], cpu_per_byte[i]
        if c * b <= budget:
            y[i] = b
            budget -= c * b
        else:
            y[i] = budget / c
            budget = 0.0
    return y


def _check_caps(caps: Sequence[int | None], n: int, m: int) -> list[int]:
    if len(caps) != n:
        raise ValueError(f"caps: {len(caps)} figures for {n} paths")
    out = []
    for c in caps:
        if c is None:
            out.append(m)
        elif isinstance(c, bool) or not isinstance(c, int) or c < 0:
            raise ValueError(f"caps {list(caps)!r}: expected ints >= 0 or None")
        else:
            out.append(min(c, m))
    if sum(out) < m:
        raise ValueError(f"caps {list(caps)!r} hold {sum(out)} subgroups, fewer than {m}")
    return out


def _least_cpu_fill(m: int, bounds: Sequence[int], cost: Sequence[float],
                    rank: Sequence[float]) -> list[int] | None:
    """m subgroups, path i at most bounds[i], cheapest CPU per byte first, then the highest
    rank (bandwidth) (None: the bounds hold fewer than m)."""
    if sum(bounds) < m:
        return None
    out, left = [0] * len(bounds), m
    for i in sorted(range(len(bounds)), key=lambda j: (cost[j], -rank[j], j)):
        out[i] = min(bounds[i], left)
        left -= out[i]
    return out


def capped_optimum(m: int, bandwidths: Sequence[float], caps: Sequence[int],
                   cpu_per_byte: Sequence[float] | None = None,
                   cpu_rate: float | None = None) -> list[int]:
    """The counts (summing to m, path i at most caps[i]) of least modelled time; see the
    module docstring. pre: sum(caps) >= m. Paths without bandwidth take only what the others
    cannot hold (the model's time is then infinite whatever the split)."""
    n = len(bandwidths)
    if m == 0:
        return [0] * n
    cost = list(cpu_per_byte) if cpu_per_byte is not None and cpu_rate else [0.0] * n
    pos = [i for i in range(n) if bandwidths[i] > 0]
    full = [caps[i] if i in pos else 0 for i in range(n)]
    if sum(full) < m:  # no finite time: the paths with bandwidth full, then the others
        out = list(full)
        rest = m - sum(out)
        for i in range(n):
            if i not in pos:
                take = min(caps[i], rest)
                out[i], rest = take, rest - take
        return out
    # step times at which a path's bound grows: n / B_i for n up to its cap
    times = sorted({c / bandwidths[i] for i in pos for c in range(1, caps[i] + 1)})
    for j, t in enumerate(times):
        bounds = [min(caps[i], math.floor(t * bandwidths[i] * (1 + 1e-12)))
                  if i in pos else 0 for i in range(n)]
        fill = _least_cpu_fill(m, bounds, cost, bandwidths)
        if fill is None:
            continue
        if not cpu_rate:
            return fill
        need = sum(c * k for c, k in zip(cost, fill)) / cpu_rate
        nxt = times[j + 1] if j + 1 < len(times) else math.inf
        if need <= t * (1 + 1e-12) or need < nxt:
            return fill  # feasible at t, or at need, before the bounds grow again
    # not reached: at the last time the bounds are the caps and the next time is infinite
    return _least_cpu_fill(m, full, cost, bandwidths) or full


def split_counts(m: int, bandwidths: Sequence[float],
                 cpu_per_byte: Sequence[float] | None = None,
                 cpu_rate: float | None = None,
                 caps: Sequence[int | None] | None = None) -> list[int]:
    """Subgroups per path (they sum to m) minimizing the model's step time; see the module
    docstring. Without cpu_per_byte / cpu_rate, only bandwidths count. caps: the most
    subgroups each path holds (None: no bound); ValueError when they hold fewer than m."""
    n = len(bandwidths)
    bw = _check("bandwidths", bandwidths, n)
    if n == 0:
        raise ValueError("no paths")
    cpu = _check("cpu_per_byte", cpu_per_byte, n) if cpu_per_byte is not None else None
    if cpu_rate is not None and (not math.isfinite(cpu_rate) or cpu_rate <= 0):
        raise ValueError(f"cpu_rate {cpu_rate!r}: expected a number > 0 (CPU s per s)")
    rate = cpu_rate if cpu is not None else None
    if caps is not None:
        return _split_capped(m, bw, cpu, rate, _check_caps(caps, n, m))
    if sum(bw) <= 0:
        return L.eq1_counts(m, bw)
    return _best_candidate(m, bw, cpu, rate)


def _split_capped(m: int, bw: list[float], cpu: list[float] | None, rate: float | None,
                  caps: list[int]) -> list[int]:
    fits = [c for c in (_candidates(m, bw, cpu, rate) if sum(bw) > 0
                        else [L.eq1_counts(m, bw)])
            if all(k <= cap for k, cap in zip(c, caps))]
    fits.append(capped_optimum(m, bw, caps, cpu, rate))
    return min(fits, key=lambda c: model_time(c, bw, cpu, rate))


def _best_candidate(m: int, bw: list[float], cpu: list[float] | None,
                    rate: float | None) -> list[int]:
    # least modelled time; ties: the earlier candidate (the knapsack's, then all paths)
    return min(_candidates(m, bw, cpu, rate), key=lambda c: model_time(c, bw, cpu, rate))


def _candidates(m: int, bw: list[float], cpu: list[float] | None,
                rate: float | None) -> list[list[int]]:
    """Eq. 1 over the knapsack's throughput and over the bandwidths, for all the paths and
    every subset of them."""
    n = len(bw)
    subsets: list[tuple[int, ...]] = [tuple(range(n))]
    if n <= MAX_SUBSET_PATHS:
        subsets += [sub for k in range(n - 1, 0, -1)
                    for sub in itertools.combinations(range(n), k)
                    if all(bw[i] > 0 for i in sub)]
    cands = []
    for sub in subsets:
        b = [bw[i] if i in sub else 0.0 for i in range(n)]
        if cpu is not None and rate:
            cands.append(L.eq1_counts(m, knapsack_throughput(b, cpu, rate)))
        cands.append(L.eq1_counts(m, b))
    return cands
