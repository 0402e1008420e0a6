"""Memory placed under a policy: Buffer and alloc(), moving pages of existing memory (place),
where pages are (residency) and whether that matches the policy (audit_placement)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .. import _native, topology
from .._views import Views
from ..errors import InsufficientMemoryError
from ..units import parse_size
from .policy import MiB, Policy, default, validate


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
    memory, WeightMismatchError / WeightedInterleaveUnsupportedError for an impossible `weighted`."""
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
