"""Where training state goes: the footprint of CPU-offloaded training per data class, a
placement of each class on the machine's tiers (DRAM first for latency-sensitive classes,
CXL for streamed ones, bandwidth-proportional stripes when DRAM runs out), and budgets that
allocation enforces (BudgetExceededError past a class's placed bytes)."""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import placement as P
from .. import topology
from ..errors import BudgetExceededError, PlanError

GiB = 1 << 30
MODES = ("tiered", "dram_only", "interleave_all")


@dataclass(frozen=True)
class DataClass:
    name: str
    meaning: str
    latency_sensitive: bool


# Order = the footprint table's order; latency-sensitive ones are placed in this order too.
CLASSES: tuple[DataClass, ...] = (
    DataClass("bf16_params", "bf16 params streamed to the GPUs (2P)", False),
    DataClass("bf16_grads", "bf16 grads streamed from the GPUs (2P)", False),
    DataClass("activations", "activation checkpoints (2*Ng*B*C*L*H)", False),
    DataClass("fp32_params", "fp32 master params (4P)", True),
    DataClass("fp32_grads", "fp32 grads (4P; 0 when the kernel upcasts bf16 grads)", True),
    DataClass("optimizer_states", "Adam exp_avg + exp_avg_sq (8P)", True),
)
CLASS_NAMES = tuple(c.name for c in CLASSES)


def _pos_int(name: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
            or v < 1 or v != int(v):
        raise ValueError(f"{name} {v!r}: expected a positive integer")
    return int(v)


@dataclass(frozen=True)
class Footprint:
    """The memory of CPU-offloaded mixed-precision training: P params, Ng GPUs, B batch, C
    context tokens, L layers, H hidden. fp32_grads=False: grads stay bf16 and are upcast in
    the optimizer kernel (cxlkit's), so no fp32 copy exists."""

    params: int
    layers: int = 1
    hidden: int = 1
    context: int = 1
    batch: int = 1
    gpus: int = 1
    fp32_grads: bool = True

    def __post_init__(self) -> None:
        for name in ("params", "layers", "hidden", "context", "batch", "gpus"):
            object.__setattr__(self, name, _pos_int(name, getattr(self, name)))

    def bytes(self) -> dict[str, int]:
        p = self.params
        return {
            "bf16_params": 2 * p,
            "bf16_grads": 2 * p,
            "activations": 2 * self.gpus * self.batch * self.context * self.layers * self.hidden,
            "fp32_params": 4 * p,
            "fp32_grads": 4 * p if self.fp32_grads else 0,
            "optimizer_states": 8 * p,
        }

    @property
    def total(self) -> int:
        return sum(self.bytes().values())


@dataclass(frozen=True)
class Tier:
    """One memory node as the planner sees it: kind (dram/cxl/hbm/pmem), bytes it may use,
    and its bandwidth in GB/s (None = unknown) with where that figure came from."""

    node: int
    kind: str
    capacity_bytes: int
    bandwidth_gbps: float | None = None
    bandwidth_source: str = "unknown"

    def __post_init__(self) -> None:
        if self.kind not in topology.KINDS:
            raise ValueError(f"tier kind {self.kind!r}: expected one of "
                             f"{', '.join(topology.KINDS)}")
        if isinstance(self.node, bool) or not isinstance(self.node, int) or self.node < 0:
            raise ValueError(f"tier node {self.node!r}: expected an int >= 0")
        if self.capacity_bytes < 0:
            raise ValueError(f"tier capacity {self.capacity_bytes}: expected >= 0")
        if self.bandwidth_gbps is not None and not self.bandwidth_gbps > 0:
            raise ValueError(f"tier bandwidth {self.bandwidth_gbps!r}: expected > 0 GB/s")


def parse_tier(spec: str) -> Tier:
    """'KIND:NODE:SIZE[:GBPS]', e.g. 'cxl:2:256G:64' (SIZE with K/M/G/T)."""
    parts = spec.split(":")
    if len(parts) not in (3, 4):
        raise ValueError(f"tier {spec!r}: expected KIND:NODE:SIZE[:GBPS]")
    kind, node, size = parts[:3]
    try:
        node_id = int(node)
    except ValueError:
        raise ValueError(f"tier {spec!r}: node {node!r} is not an int") from None
    t = size.strip().upper().removesuffix("B").removesuffix("I")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}.get(t[-1:], 1)
    try:
        nbytes = int(float(t[:-1] if mult > 1 else t) * mult)
        bw = float(parts[3]) if len(parts) == 4 else None
    except ValueError:
        raise ValueError(f"tier {spec!r}: bad size or bandwidth") from None
    return Tier(node_id, kind, nbytes, bw, "given" if bw is not None else "unknown")


def measure_bandwidth(node: int, nbytes: int = 64 << 20, reps: int = 3) -> float:
    """Copy bandwidth (GB/s, read + write bytes) of one thread between two buffers bound to
    `node`: best of reps."""
    import numpy as np

    with P.alloc(nbytes, P.bind(node)) as a, P.alloc(nbytes, P.bind(node)) as b:
        src, dst = a.numpy(), b.numpy()
        best = math.inf
        for _ in range(reps):
            t0 = time.perf_counter()
            np.copyto(dst, src)
            best = min(best, time.perf_counter() - t0)
        del src, dst
    return 2 * nbytes / best / 1e9


def machine_tiers(*, reserve: float = 0.1, measure: bool = False,
                  sysfs_root: Path | str | None = None) -> list[Tier]:
    """This machine's memory nodes as tiers (cxlkit.topology's kind), each offering its free
    memory less `reserve` (a fraction kept for everything else). Bandwidth: measured here
    when measure=True, else the firmware's HMAT read bandwidth when present, else unknown."""
    if not 0 <= reserve < 1:
        raise ValueError(f"reserve {reserve!r}: expected a fraction in [0, 1)")
    topo = topology.discover(sysfs_root)
    out = []
    for n in topo.nodes:
        if not n.has_memory:
            continue
        free = n.mem_free_bytes if n.mem_free_bytes is not None else (n.mem_total_bytes or 0)
        bw, src = None, "unknown"
        if measure:
            bw, src = measure_bandwidth(n.id), "measured"
        elif n.hmat is not None and n.hmat.read_bandwidth_mbps:
            bw, src = n.hmat.read_bandwidth_mbps / 1000.0, "hmat"
        out.append(Tier(n.id, n.kind, int(free * (1 - reserve)), bw, src))
    return out


@dataclass(frozen=True)
class ClassPlacement:
    """Where one class goes: bytes per node, the policy that puts it there, and the bytes
    no tier could take (shortfall)."""

    name: str
    nbytes: int
    nodes: dict[int, int]
    policy: P.Policy | None
    shortfall: int = 0

    @property
    def placed(self) -> int:
        return sum(self.nodes.values())


BudgetExceeded = BudgetExceededError  # the old name, importable from here for one release


def _weights(tiers: list[Tier]) -> dict[int, float]:
    known = [t.bandwidth_gbps for t in tiers if t.bandwidth_gbps]
    default = sum(known) / len(known) if known else 1.0
    return {t.node: (t.bandwidth_gbps or default) for t in tiers}


def _spread(nbytes: int, tiers: list[Tier], room: dict[int, int],
            equal: bool = False) -> tuple[dict[int, int], int]:
    """Split nbytes over tiers in proportion to bandwidth (or equally), never past a node's
    room: water-filling, so a full node's share flows to the others. Returns (bytes per node,
    bytes left over)."""
    w = {n: 1.0 for n in (t.node for t in tiers)} if equal else _weights(tiers)
    out = {t.node: 0 for t in tiers}
    left = nbytes
    active = [t.node for t in tiers if room[t.node] > 0]
    while left > 0 and active:
        total_w = sum(w[n] for n in active)
        share = {n: int(left * w[n] / total_w) for n in active}
        share[max(active, key=lambda n: w[n])] += left - sum(share.values())
        full = [n for n in active if share[n] >= room[n]]
        if not full:
            for n in active:
                out[n] += share[n]
                room[n] -= share[n]
            left = 0
            break
        for n in full:
            out[n] += room[n]
            left -= room[n]
            room[n] = 0
            active.remove(n)
    return {n: b for n, b in out.items() if b > 0}, left


def _int_weights(shares: dict[int, int], total: int = 64) -> list[int]:
    """Small integer stripe weights (1..255) in the ratio of shares."""
    s = sum(shares.values())
    w = [max(1, round(b / s * total)) for b in shares.values()]
    g = math.gcd(*w)
    return [x // g for x in w]


def _policy_for(nodes: dict[int, int], mode: str, all_nodes: list[int]) -> P.Policy | None:
    if not nodes:
        return None
    if mode == "interleave_all":
        return P.interleave(all_nodes) if len(all_nodes) > 1 else P.bind(all_nodes[0])
    if len(nodes) == 1:
        return P.bind(next(iter(nodes)))
    return P.stripe(list(nodes), _int_weights(nodes))


@dataclass
class TrainPlan:
    """A placement of every class on the tiers; `alloc(cls, nbytes)` allocates under the
    class's policy and enforces its budget (the bytes placed for it)."""

    footprint: Footprint
    tiers: list[Tier]
    mode: str
    classes: dict[str, ClassPlacement]
    used: dict[str, int] = field(default_factory=dict)

    @property
    def fits(self) -> bool:
        return self.shortfall == 0

    @property
    def shortfall(self) -> int:
        return sum(c.shortfall for c in self.classes.values())

    def node_use(self) -> dict[int, int]:
        out = {t.node: 0 for t in self.tiers}
        for c in self.classes.values():
            for n, b in c.nodes.items():
                out[n] += b
        return out

    def _get(self, cls: str) -> ClassPlacement:
        if cls not in self.classes:
            raise KeyError(f"data class {cls!r}: expected one of {', '.join(self.classes)}")
        return self.classes[cls]

    def policy(self, cls: str) -> P.Policy:
        c = self._get(cls)
        if c.policy is None:
            raise BudgetExceededError(f"class {cls} has no placement in this plan ({c.nbytes} bytes "
                                 f"wanted, none placed: the tiers are full)")
        return c.policy

    def budget(self, cls: str) -> int:
        return self._get(cls).placed

    def remaining(self, cls: str) -> int:
        return self.budget(cls) - self.used.get(cls, 0)

    def charge(self, cls: str, nbytes: int) -> None:
        """Count nbytes against cls's budget, or raise BudgetExceededError (nothing counted)."""
        if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
            raise ValueError(f"nbytes {nbytes!r}: expected an int >= 0")
        left = self.remaining(cls)
        if nbytes > left:
            c = self._get(cls)
            raise BudgetExceededError(
                f"class {cls}: allocating {nbytes} bytes would exceed its budget of "
                f"{c.placed} bytes ({self.used.get(cls, 0)} used) placed on nodes "
                f"{sorted(c.nodes)} by the {self.mode} plan")
        self.used[cls] = self.used.get(cls, 0) + nbytes

    def release(self, cls: str, nbytes: int) -> None:
        self.used[cls] = max(0, self.used.get(cls, 0) - nbytes)

    def alloc(self, cls: str, nbytes: int, *, populate: bool = True,
              thp: bool | None = None) -> P.Buffer:
        """A buffer of nbytes for class cls under its policy (thp as for cxlkit.alloc),
        charged to its budget; the charge is returned when the buffer is released with
        `free`."""
        pol = self.policy(cls)
        self.charge(cls, nbytes)
        try:
            return P.alloc(nbytes, pol, populate=populate, thp=thp)
        except BaseException:
            self.release(cls, nbytes)
            raise

    def free(self, cls: str, buf: P.Buffer) -> None:
        n = buf.nbytes
        buf.close()
        self.release(cls, n)

    def rows(self) -> list[dict[str, Any]]:
        """The table: one row per class with its bytes per node."""
        out = []
        for dc in CLASSES:
            c = self.classes[dc.name]
            out.append({"class": dc.name, "meaning": dc.meaning, "bytes": c.nbytes,
                        "latency_sensitive": dc.latency_sensitive,
                        "nodes": {str(n): b for n, b in sorted(c.nodes.items())},
                        "policy": str(c.policy) if c.policy else None,
                        "shortfall": c.shortfall})
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "footprint": vars(self.footprint) | {
                    "total_bytes": self.footprint.total},
                "tiers": [vars(t) for t in self.tiers], "classes": self.rows(),
                "node_use": {str(n): b for n, b in self.node_use().items()},
                "fits": self.fits, "shortfall_bytes": self.shortfall}


def plan_training(footprint: Footprint, tiers: list[Tier] | None = None, *,
         mode: str = "tiered") -> TrainPlan:
    """Place every class of the footprint on the tiers (default: this machine's).
    tiered: latency-tolerant classes (bf16 params/grads, activations) on CXL striped over
    every CXL node by bandwidth, latency-sensitive ones (fp32 params, grads, optimizer
    states, in that order) in DRAM while it lasts, the rest of them striped over DRAM + CXL
    in proportion to bandwidth, tolerant leftovers into any DRAM left. dram_only: everything
    in DRAM. interleave_all: every class spread evenly over every node. What fits nowhere is
    the class's shortfall (plan.fits False); its budget covers only what was placed."""
    if mode not in MODES:
        raise ValueError(f"plan mode {mode!r}: expected one of {', '.join(MODES)}")
    if not isinstance(footprint, Footprint):
        raise TypeError(f"footprint {footprint!r}: expected a cxlkit.train.plan.Footprint")
    tiers = list(tiers) if tiers is not None else machine_tiers()
    if not tiers:
        raise PlanError("no memory tiers to plan on")
    if len({t.node for t in tiers}) != len(tiers):
        raise PlanError(f"tiers repeat a node: {[t.node for t in tiers]}")
    want = footprint.bytes()
    room = {t.node: t.capacity_bytes for t in tiers}
    fast = [t for t in tiers if t.kind in ("dram", "hbm")]
    slow = [t for t in tiers if t not in fast]
    all_nodes = [t.node for t in tiers]
    placed: dict[str, dict[int, int]] = {c: {} for c in CLASS_NAMES}
    left: dict[str, int] = dict(want)

    def put(cls: str, where: list[Tier], equal: bool = False) -> None:
        if left[cls] <= 0 or not where:
            return
        got, rest = _spread(left[cls], where, room, equal)
        for n, b in got.items():
            placed[cls][n] = placed[cls].get(n, 0) + b
        left[cls] = rest

    tolerant = [c.name for c in CLASSES if not c.latency_sensitive]
    sensitive = [c.name for c in CLASSES if c.latency_sensitive]
    if mode == "tiered":
        for cls in tolerant:
            put(cls, slow)
        for cls in sensitive:
            if left[cls] <= sum(room[t.node] for t in fast) or not slow:
                put(cls, fast)
            else:
                put(cls, fast + slow)  # DRAM is short: stripe by bandwidth over both
        for cls in tolerant:
            put(cls, fast)
    elif mode == "dram_only":
        if not fast:
            raise PlanError("dram_only needs a DRAM tier; this machine's tiers are "
                            f"{sorted({t.kind for t in tiers})}")
        for cls in sensitive + tolerant:
            put(cls, fast)
    else:
        for cls in CLASS_NAMES:
            put(cls, tiers, equal=True)
    classes = {c: ClassPlacement(c, want[c], placed[c], _policy_for(placed[c], mode, all_nodes),
                                 left[c]) for c in CLASS_NAMES}
    return TrainPlan(footprint, tiers, mode, classes)


def parse_count(text: str | int | float, *, binary: bool = False) -> int:
    """'7e9', '7B', '1.5M', 4096 -> an int (k/m/b/g/t in steps of 1000; B = billion).
    binary=True makes k/m/g steps of 1024, as context lengths are spoken of ('32k' = 32768)."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return _pos_int("count", text)
    t = str(text).strip().lower()
    step = 1024.0 if binary else 1000.0
    mult = {"k": step, "m": step ** 2, "b": 1e9, "g": step ** 3, "t": step ** 4}.get(t[-1:], 1)
    try:
        v = float(t[:-1] if mult != 1 else t) * mult
    except ValueError:
        raise ValueError(f"count {text!r}: expected a number like 7e9, 7B or 32k") from None
    if abs(v - round(v)) > 1e-6 * max(1.0, abs(v)):  # float noise of '0.1k' is fine, '1.5' not
        raise ValueError(f"count {text!r}: not a whole number")
    return _pos_int(f"count {text!r}", round(v))
