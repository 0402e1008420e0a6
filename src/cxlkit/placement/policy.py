"""Memory policies (bind, preferred, interleave, kernel weighted interleave, software
stripe): building, parsing and checking them against the kernel, and the task's own policy."""
from __future__ import annotations

import math
import os
from collections.abc import Mapping as _MappingABC
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .. import _native, topology
from ..errors import (WeightedInterleaveUnsupportedError,
                     WeightMismatchError, deprecated_name)
from ..units import parse_size

MiB = 1 << 20
DEFAULT_STRIPE_CHUNK = 2 * MiB
# Policies whose ratio the kernel would apply per 2 MiB folio under transparent huge pages.
_PAGE_GRANULAR = ("interleave", "weighted")
_MODES = {"default": 0, "bind": 1, "preferred": 2, "interleave": 3, "weighted": 4, "stripe": 5}
# Kernel MPOL_* numbers as get_mempolicy reports them.
_KERNEL_MODES = {0: "default", 1: "preferred", 2: "bind", 3: "interleave", 4: "local",
                 5: "preferred_many", 6: "weighted"}


def __getattr__(name: str) -> type:
    return deprecated_name(__name__, name)


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
        raise TypeError(f"policy {policy!r}: expected a cxlkit.Policy")
    have = topology.memory_nodes(sysfs_root)
    for n in policy.nodes:
        if n not in have:
            raise ValueError(f"node {n} has no memory on this machine (nodes with memory: "
                             f"{','.join(map(str, have))})")
    if policy.mode != "weighted":
        return None
    kw = topology.weighted_interleave_weights(sysfs_root)
    if kw is None:
        raise WeightedInterleaveUnsupportedError(
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
