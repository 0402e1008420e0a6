"""Placement: memory policies (bind, preferred, interleave, kernel weighted interleave,
software stripe), allocation under a policy, moving existing pages, and residency."""
from __future__ import annotations

import math
import os
from collections.abc import Mapping as _MappingABC
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import _native, topology
from ._config import config
from ._views import Views
from .errors import InsufficientMemoryError
from .units import parse_size

MiB = 1 << 20
DEFAULT_STRIPE_CHUNK = 2 * MiB
_MODES = {"default": 0, "bind": 1, "preferred": 2, "interleave": 3, "weighted": 4, "stripe": 5}
# Kernel MPOL_* numbers as get_mempolicy reports them.
_KERNEL_MODES = {0: "default", 1: "preferred", 2: "bind", 3: "interleave", 4: "local",
                 5: "preferred_many", 6: "weighted"}


class WeightedInterleaveUnsupported(OSError):
    """The kernel has no MPOL_WEIGHTED_INTERLEAVE (Linux 6.9+)."""


class WeightMismatchError(ValueError):
    """weighted() asked for ratios the kernel's system-wide weights do not give."""


@dataclass(frozen=True)
class Policy:
    """Where the pages of a range go. Build with bind(), preferred(), interleave(),
    weighted(), stripe() or default(); parse() reads the CLI form."""

    mode: str
    nodes: tuple[int, ...] = ()
    weights: tuple[int, ...] | None = None  # stripe: chunks per round; weighted: the request
    chunk_bytes: int = 0  # stripe only

    def __post_init__(self) -> None:
        if self.mode not in _MODES:
            raise ValueError(f"policy mode {self.mode!r}: expected one of {', '.join(_MODES)}")
        if self.mode == "default":
            if self.nodes:
                raise ValueError("default policy takes no nodes")
            return
        if not self.nodes:
            raise ValueError(f"{self.mode} policy needs at least one node")
        if len(self.nodes) > _native.MAX_POLICY_NODES:
            raise ValueError(f"{self.mode} policy names {len(self.nodes)} nodes; at most "
                             f"{_native.MAX_POLICY_NODES}")
        for n in self.nodes:
            if isinstance(n, bool) or not isinstance(n, int):
                raise TypeError(f"node {n!r}: expected an int")
            if not 0 <= n <= _native.MAX_NODE_ID:
                raise ValueError(f"node {n}: out of range 0..{_native.MAX_NODE_ID}")
        if len(set(self.nodes)) != len(self.nodes):
            raise ValueError(f"{self.mode} policy repeats a node: {list(self.nodes)}")
        if self.weights is not None:
            if len(self.weights) != len(self.nodes):
                raise ValueError(f"weights {list(self.weights)} do not match nodes "
                                 f"{list(self.nodes)}")
            for w in self.weights:
                if isinstance(w, bool) or not isinstance(w, int) or not 1 <= w <= 255:
                    raise ValueError(f"weight {w!r}: expected an int in 1..255")
        if self.mode == "stripe":
            ps = _native.page_size()
            if not isinstance(self.chunk_bytes, int) or self.chunk_bytes <= 0 \
                    or self.chunk_bytes % ps:
                raise ValueError(f"stripe chunk {self.chunk_bytes!r}: expected a positive "
                                 f"multiple of the page size ({ps})")

    @property
    def page_granular(self) -> bool:
        """interleave and weighted: the kernel spreads their pages one by one, and would
        spread whole 2 MiB folios instead under transparent huge pages."""
        return self.mode in _PAGE_GRANULAR

    def _native(self) -> tuple[int, list[int], list[int], int]:
        return (_MODES[self.mode], list(self.nodes), list(self.weights or ()),
                self.chunk_bytes if self.mode == "stripe" else 0)

    def __str__(self) -> str:
        if self.mode == "default":
            return "default"
        if self.weights is not None:
            spec = ",".join(f"{n}:{w}" for n, w in zip(self.nodes, self.weights))
        else:
            spec = ",".join(map(str, self.nodes))
        if self.mode == "stripe" and self.chunk_bytes != DEFAULT_STRIPE_CHUNK:
            spec += f"@{self.chunk_bytes}"
        return f"{self.mode}:{spec}"

    def expected_pages(self, npages: int, kernel_weights: dict[int, int] | None = None, *,
                       unit_pages: int = 1) -> dict[int, tuple[int, int]]:
        """Intent: {node: (min pages, max pages)} for a range of npages under this policy.
        interleave/weighted leave the phase to the kernel, hence a range; bind to one node,
        preferred (with free memory) and stripe are exact. `default` has no intent ({}).
        unit_pages > 1: the kernel interleaves folios of that many pages (transparent huge
        pages), so each node may be off by one round of folios."""
        if self.mode == "default" or npages <= 0:
            return {}
        if self.mode in ("preferred",) or (self.mode == "bind" and len(self.nodes) == 1):
            return {self.nodes[0]: (npages, npages)}
        if self.mode == "bind":
            return {n: (0, npages) for n in self.nodes}
        if self.mode == "stripe":
            ps = _native.page_size()
            ppc = self.chunk_bytes // ps  # pages per chunk
            w = list(self.weights or [1] * len(self.nodes))
            round_pages = sum(w) * ppc
            full, rest = divmod(npages, round_pages)
            out = {}
            for n, wi in zip(self.nodes, w):
                out[n] = full * wi * ppc
            for n, wi in zip(self.nodes, w):
                take = min(rest, wi * ppc)
                out[n] += take
                rest -= take
            return {n: (c, c) for n, c in out.items()}
        if self.mode == "interleave":
            w = [1] * len(self.nodes)
        else:  # weighted: what the kernel will really do
            kw = kernel_weights or {}
            w = [kw.get(n, 1) for n in self.nodes]
        total = sum(w)
        full, rest = divmod(npages, total)
        slack = 0 if unit_pages <= 1 else unit_pages * max(w)
        return {n: (max(0, full * wi - slack), min(npages, full * wi + min(wi, rest) + slack))
                for n, wi in zip(self.nodes, w)}


def default() -> Policy:
    return Policy("default")


def bind(node: int | Sequence[int]) -> Policy:
    nodes = (node,) if isinstance(node, int) else tuple(node)
    return Policy("bind", nodes)


def preferred(node: int) -> Policy:
    return Policy("preferred", (node,))


def interleave(nodes: Sequence[int]) -> Policy:
    return Policy("interleave", tuple(nodes))


def weighted(weights: _MappingABC[int, int] | Sequence[int]) -> Policy:
    """Kernel weighted interleave over the nodes. A mapping {node: weight} states the ratio
    wanted; allocation checks it against the kernel's system-wide weights (sysfs) and raises
    WeightMismatchError rather than silently using others. A sequence of nodes takes the
    kernel's weights as they are."""
    if isinstance(weights, _MappingABC):
        return Policy("weighted", tuple(weights), tuple(weights.values()))
    return Policy("weighted", tuple(weights))


def stripe(nodes: Sequence[int], weights: Sequence[int] | None = None, *,
           chunk: int = DEFAULT_STRIPE_CHUNK) -> Policy:
    """Software interleave: chunk-sized pieces bound node by node, node i taking weights[i]
    consecutive chunks per round. Any kernel, any ratio, no root."""
    return Policy("stripe", tuple(nodes), tuple(weights) if weights is not None else None,
                  chunk)


def parse_weights(spec: str) -> dict[int, int]:
    """'0:3,1:1' -> {0: 3, 1: 1}."""
    out: dict[int, int] = {}
    for item in spec.split(","):
        node, sep, w = item.strip().partition(":")
        try:
            n, wv = int(node), int(w)
        except ValueError:
            raise ValueError(f"weights {spec!r}: expected node:weight[,node:weight...]") \
                from None
        if not sep or n in out:
            raise ValueError(f"weights {spec!r}: expected node:weight with distinct nodes")
        out[n] = wv
    return out


def parse_nodes(spec: str) -> list[int]:
    """'0,1' or '0-2' -> list of node ids."""
    try:
        nodes = topology.parse_cpulist(spec)
    except ValueError:
        raise ValueError(f"nodes {spec!r}: expected a list like 0,1 or 0-3") from None
    if not nodes:
        raise ValueError(f"nodes {spec!r}: expected at least one node")
    return nodes


def parse(spec: str) -> Policy:
    """The CLI form: default | bind:0[,1] | preferred:1 | interleave:0,1 |
    weighted:0:3,1:1 or weighted:0,1 | stripe:0:3,1:1[@2M]."""
    mode, _, rest = spec.strip().partition(":")
    if mode == "default" and not rest:
        return default()
    if mode not in _MODES or not rest:
        raise ValueError(f"policy {spec!r}: expected bind:N, preferred:N, interleave:A,B, "
                         "weighted:A:w,B:w, stripe:A:w,B:w[@chunk] or default")
    if mode == "stripe":
        body, _, chunk = rest.partition("@")
        size = parse_size(chunk, "stripe chunk") if chunk else DEFAULT_STRIPE_CHUNK
        if ":" in body:
            w = parse_weights(body)
            return stripe(list(w), list(w.values()), chunk=size)
        return stripe(parse_nodes(body), chunk=size)
    if mode == "weighted":
        return weighted(parse_weights(rest) if ":" in rest else parse_nodes(rest))
    nodes = parse_nodes(rest)
    if mode == "preferred":
        if len(nodes) != 1:
            raise ValueError(f"policy {spec!r}: preferred takes one node")
        return preferred(nodes[0])
    return bind(nodes) if mode == "bind" else interleave(nodes)


def validate(policy: Policy, *, sysfs_root: Path | None = None) -> dict[int, int] | None:
    """Check a policy against this machine before it reaches the kernel: every node must have
    memory; weighted needs kernel support and matching system weights. Returns the kernel
    weights of the policy's nodes for `weighted`, else None."""
    if not isinstance(policy, Policy):
        raise TypeError(f"policy {policy!r}: expected a cxlkit.policy.Policy")
    have = topology.memory_nodes(sysfs_root)
    for n in policy.nodes:
        if n not in have:
            raise ValueError(f"node {n} has no memory on this machine (nodes with memory: "
                             f"{','.join(map(str, have))})")
    if policy.mode != "weighted":
        return None
    kw = topology.weighted_interleave_weights(sysfs_root)
    if kw is None:
        raise WeightedInterleaveUnsupported(
            95, "this kernel has no MPOL_WEIGHTED_INTERLEAVE (Linux 6.9+, "
                f"{_native_kernel_release()}); use stripe({list(policy.nodes)}, "
                f"{list(policy.weights or [1] * len(policy.nodes))}) for a software "
                "interleave at any ratio")
    mine = {n: kw.get(n, 1) for n in policy.nodes}
    if policy.weights is not None and not _same_ratio(list(mine.values()), list(policy.weights)):
        want = ",".join(f"{n}:{w}" for n, w in zip(policy.nodes, policy.weights))
        have_s = ",".join(f"{n}:{w}" for n, w in mine.items())
        raise WeightMismatchError(
            f"weighted interleave {want}: the kernel uses the system-wide weights {have_s} "
            f"(/sys/{topology.WEIGHTED_INTERLEAVE_DIR}); write them with `cxlkit policy "
            f"weights {want} --apply` (root) or use stripe for a per-allocation ratio")
    return mine


def _same_ratio(a: list[int], b: list[int]) -> bool:
    ga, gb = math.gcd(*a), math.gcd(*b)
    return [x // ga for x in a] == [x // gb for x in b]


def _native_kernel_release() -> str:
    return f"running {os.uname().release}"


@dataclass(frozen=True)
class Residency:
    """Pages per node of a range, and pages not faulted in yet."""

    pages: dict[int, int]
    not_present: int
    page_size: int

    @property
    def total(self) -> int:
        return sum(self.pages.values()) + self.not_present


@dataclass(frozen=True)
class PlacementAudit:
    """Intended vs actual pages per node of one allocation."""

    policy: Policy
    intended: dict[int, tuple[int, int]]
    actual: Residency
    ok: bool = field(default=False)
    problems: tuple[str, ...] = ()


def _residency_from(raw: tuple[list[int], int]) -> Residency:
    per_node, absent = raw
    return Residency({n: c for n, c in enumerate(per_node) if c}, absent, _native.page_size())


def _max_nodes() -> int:
    return max(topology.memory_nodes()) + 1


def audit_placement(policy: Policy, res: Residency,
                    kernel_weights: dict[int, int] | None = None, *,
                    unit_pages: int = 1) -> PlacementAudit:
    """Compare a residency with a policy's intent; ok when every node is within its range,
    no page sits on a node outside the policy, and every page is present."""
    npages = res.total
    intended = policy.expected_pages(npages, kernel_weights, unit_pages=unit_pages)
    problems = []
    if res.not_present:
        problems.append(f"{res.not_present} pages not present")
    for n, c in res.pages.items():
        if intended and n not in intended:
            problems.append(f"{c} pages on node {n}, outside the policy")
    for n, (lo, hi) in intended.items():
        got = res.pages.get(n, 0)
        if not lo <= got <= hi:
            want = str(lo) if lo == hi else f"{lo}..{hi}"
            problems.append(f"node {n}: {got} pages, intended {want}")
    return PlacementAudit(policy, intended, res, not problems, tuple(problems))


class Buffer(Views, _native.Mapping):
    """Page-aligned memory whose pages were first touched under a policy. Exports the buffer
    protocol (memoryview, numpy.frombuffer, torch.frombuffer: zero-copy). Close it (or use
    `with`) to unmap; closing while views exist raises BufferError."""

    def __init__(self, nbytes: int, policy: Policy, *, populate: bool = True,
                 thp: bool | None = None, kernel_weights: dict[int, int] | None = None) -> None:
        super().__init__(nbytes, policy._native(), populate,
                         0 if thp is None else 1 if thp else -1)
        self.policy = policy
        self.thp = thp
        self._kernel_weights = kernel_weights

    def __enter__(self) -> Buffer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"0x{self.address:x}"
        return f"<cxlkit.Buffer {self.nbytes} bytes {self.policy} at {state}>"

    def residency(self) -> Residency:
        """Pages per node now (move_pages query)."""
        return _residency_from(self._residency(_max_nodes()))

    def node_of_pages(self) -> Any:
        """numpy int32 array: the node of every page, or -ENOENT for one not present."""
        return self._node_of_pages()

    def audit(self) -> PlacementAudit:
        """Intended vs actual pages per node."""
        unit = 1 if self.thp is False else _HUGE_PAGE // _native.page_size()
        return audit_placement(self.policy, self.residency(), self._kernel_weights,
                               unit_pages=unit)

    def place(self, policy: Policy, *, migrate: bool = True, strict: bool = False) -> None:
        """Change the policy and (migrate=True) move the pages that exist already."""
        kw = validate(policy)
        self._apply(policy._native(), migrate, strict)
        self.policy, self._kernel_weights = policy, kw

    def populate(self) -> None:
        """Fault in every page now, under the buffer's policy."""
        self._populate()

    def pin(self) -> None:
        """Page-lock for a GPU (cudaHostRegister); OSError(ENODEV) without CUDA."""
        self._pin()

    def unpin(self) -> None:
        self._unpin()


_HUGE_PAGE = 2 * MiB
# Policies whose ratio the kernel would apply per 2 MiB folio under transparent huge pages.
_PAGE_GRANULAR = ("interleave", "weighted")


def alloc(nbytes: int | str, policy: Policy | None = None, *, populate: bool = True,
          thp: bool | None = None, overcommit: bool = False) -> Buffer:
    """Page-aligned memory of nbytes with `policy` applied before first touch (then populated
    unless populate=False). thp: True asks for transparent huge pages (a 2 MiB-aligned
    mapping with MADV_HUGEPAGE, which THP's "madvise" mode needs), False refuses them
    (MADV_NOHUGEPAGE), None (the default) refuses them for interleave and weighted, whose
    ratio the kernel would otherwise apply per 2 MiB folio, and leaves the rest to the
    system's THP setting; the Buffer's `thp` says which. nbytes: an int or a size such as
    "1G" (cxlkit.units: K/M/G = 1024**n). A populated allocation larger than the memory its
    policy's nodes can give (free plus reclaimable page cache) raises InsufficientMemoryError
    naming the nodes and what they have, instead of running into the OOM killer;
    overcommit=True skips that check. Raises ValueError for a bad size or a node without
    memory, WeightMismatchError / WeightedInterleaveUnsupported for an impossible `weighted`."""
    nbytes = parse_size(nbytes, "nbytes")
    if nbytes <= 0:
        raise ValueError(f"nbytes {nbytes}: expected > 0")
    if nbytes > _address_space_limit():
        raise ValueError(f"nbytes {nbytes}: larger than this machine could map")
    policy = policy if policy is not None else default()
    kw = validate(policy)
    if populate and not overcommit:
        _check_room(nbytes, policy)
    if thp is None and policy.page_granular:
        thp = False
    return Buffer(nbytes, policy, populate=populate, thp=None if thp is None else bool(thp),
                  kernel_weights=kw)


def _check_room(nbytes: int, policy: Policy) -> None:
    """InsufficientMemoryError when nbytes cannot fit in the nodes `policy` may use (bind,
    interleave, weighted, stripe: its nodes; preferred and default fall back to every node).
    Nodes whose meminfo cannot be read are not counted against it."""
    if policy.mode in ("preferred", "default"):
        nodes = tuple(topology.memory_nodes())
    else:
        nodes = tuple(policy.nodes)
    avail = {n: topology.node_available_bytes(n) for n in nodes}
    if any(v is None for v in avail.values()):
        return  # no figure for some node: nothing to refuse on
    total = sum(v for v in avail.values() if v is not None)
    if nbytes <= total:
        return
    have = ", ".join(f"node {n}: {v / 2**30:.1f} GiB" for n, v in avail.items())
    raise InsufficientMemoryError(
        f"nbytes {nbytes} ({nbytes / 2**30:.1f} GiB) does not fit policy {policy}: "
        f"{have} free or reclaimable (pass overcommit=True to allocate anyway)",
        nbytes=nbytes, nodes=nodes, available=total)


def _address_space_limit() -> int:
    return 1 << 47  # x86-64 user address space with 4-level paging


def place(buf: Any, policy: Policy, *, migrate: bool = True, strict: bool = False) -> None:
    """Apply `policy` to the pages under an existing buffer (numpy array, bytearray, mmap, a
    Buffer...) and, with migrate=True, move those already faulted in. The range is widened to
    whole pages, so neighbours sharing the first and last page move too. strict=True raises
    OSError(EIO) if some page could not be moved."""
    if isinstance(buf, Buffer):
        buf.place(policy, migrate=migrate, strict=strict)
        return
    validate(policy)
    _native.apply_to_buffer(buf, policy._native(), migrate, strict)


def residency(buf: Any) -> Residency:
    """Pages per node under any buffer (whole pages)."""
    if isinstance(buf, Buffer):
        return buf.residency()
    return _residency_from(_native.residency_of_buffer(buf, _max_nodes()))


def set_task_policy(policy: Policy, *, thp: bool | None = None) -> None:
    """Set the calling thread's policy; children inherit it and execve keeps it (how
    `cxlkit run` places an unmodified program). stripe is per range: ValueError here.
    thp: allow transparent huge pages in this process (and its children); by default they
    are refused for interleave and weighted, as alloc() does, so the ratio holds per page."""
    if policy.mode == "stripe":
        raise ValueError("stripe is a per-allocation policy; a task policy can be bind, "
                         "preferred, interleave, weighted or default")
    validate(policy)
    if thp is None:
        thp = policy.mode not in _PAGE_GRANULAR
    _native.set_task_policy(policy._native())
    _native.thp_disable(not thp)


def task_policy() -> tuple[str, list[int]]:
    """The calling thread's policy as the kernel reports it: (mode, nodes)."""
    mode, nodes = _native.task_policy()
    return _KERNEL_MODES.get(mode, str(mode)), list(nodes)


def restore_kernel_auto_weights(*, sysfs_root: Path | None = None) -> None:
    """Turn the kernel's weighted-interleave auto mode back on (Linux 6.16+, root): the kernel
    then sets the weights from the firmware's bandwidth again. FileNotFoundError when the
    kernel has no auto mode (restore the previous weights with write_kernel_weights instead)."""
    _, f = topology.weighted_interleave_auto(sysfs_root or config().sysfs_root)
    if f is None:
        d = (sysfs_root or config().sysfs_root) / topology.WEIGHTED_INTERLEAVE_DIR
        raise FileNotFoundError(2, "this kernel has no weighted-interleave auto mode (Linux "
                                   "6.16+): restore the previous weights instead", str(d))
    f.write_text("1\n")


def write_kernel_weights(weights: dict[int, int], *, sysfs_root: Path | None = None) -> None:
    """Write the system-wide weighted-interleave weights (root only). Raises
    PermissionError naming the file when not allowed, FileNotFoundError when the kernel has
    no weighted interleave or the node does not exist."""
    d = (sysfs_root or config().sysfs_root) / topology.WEIGHTED_INTERLEAVE_DIR
    for n, w in weights.items():
        if isinstance(w, bool) or not isinstance(w, int) or not 1 <= w <= 255:
            raise ValueError(f"weight of node {n}: {w!r}, expected an int in 1..255")
    if not d.is_dir():
        raise FileNotFoundError(2, "this kernel has no weighted interleave (Linux 6.9+)", str(d))
    for n in weights:
        if not (d / f"node{n}").exists():
            raise FileNotFoundError(2, f"node {n} has no weighted-interleave weight", str(d / f"node{n}"))
    for n, w in weights.items():
        (d / f"node{n}").write_text(f"{w}\n")


# ---- bandwidth-proportional weights (the kernel's bandwidth-tiering rule, mm/mempolicy.c
# reduce_interleave_weights, Linux 6.16+); cxlkit.bench.weights reads them off bench results.
# The kernel's "weightiness": weights land in 1..32 before the GCD reduction; small enough to
# cycle through the nodes quickly, large enough to follow the bandwidth ratio.
KERNEL_MAX_WEIGHT = 32


def weights_from(bandwidths: _MappingABC, nodes: Sequence[int] | None = None, *,
                 max_weight: int = KERNEL_MAX_WEIGHT) -> dict[int, int]:
    """Integer weights proportional to bandwidth, like the kernel's auto weights: each node
    gets floor(max_weight * bw / total bw), at least 1, then all are divided by their GCD.
    bandwidths: {node: bandwidth} in any one unit (a bench result: cxlkit.bench.weights_from);
    nodes picks and orders the nodes (KeyError for one without a figure)."""
    if isinstance(max_weight, bool) or not isinstance(max_weight, int) \
            or not 1 <= max_weight <= 255:
        raise ValueError(f"max_weight {max_weight!r}: expected an int in 1..255")
    if not isinstance(bandwidths, _MappingABC):
        raise TypeError(f"expected a bench result or a {{node: bandwidth}} mapping, got "
                        f"{type(bandwidths).__name__}")
    bw = {}
    for n, v in bandwidths.items():
        if isinstance(n, bool) or not isinstance(n, int):
            raise TypeError(f"node {n!r}: expected an int")
        bw[n] = v
    if nodes is not None:
        missing = [n for n in nodes if n not in bw]
        if missing:
            raise KeyError(f"no bandwidth for node(s) {','.join(map(str, missing))} "
                           f"(have {','.join(map(str, sorted(bw)))})")
        bw = {n: bw[n] for n in nodes}
    if not bw:
        raise ValueError("no nodes to weigh")
    for n, v in bw.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
                or v <= 0:
            raise ValueError(f"bandwidth of node {n}: {v!r}, expected a finite number > 0")
    total = sum(bw.values())
    raw = {n: max(1, math.floor(max_weight * v / total)) for n, v in bw.items()}
    g = math.gcd(*raw.values())
    return {n: w // g for n, w in raw.items()}
