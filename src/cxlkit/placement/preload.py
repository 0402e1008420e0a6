"""Per-job weighted stripes for unmodified programs: the configuration libcxlkit_preload.so
reads from the environment (`cxlkit run --stripe`), and the audit of a running process's
striped mappings against it (docs/preload.md)."""
from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from . import audit as _audit
from . import preload_registry as _reg
from .._config import config
from ..units import parse_size

LIBRARY_NAME = "libcxlkit_preload.so"
ENV_STRIPE = "CXLKIT_STRIPE"
ENV_CHUNK = "CXLKIT_STRIPE_CHUNK"
ENV_MIN = "CXLKIT_MIN_SIZE"
ENV_LOG = "CXLKIT_PRELOAD_LOG"
ENV_LIB = "CXLKIT_PRELOAD_LIB"
MiB = 1 << 20
DEFAULT_CHUNK = 2 * MiB
DEFAULT_MIN = 2 * MiB
MAX_NODES = 64  # the library's CXP_MAX_NODES (= CXK_MAX_POLICY_NODES)
MAX_NODE_ID = 1023
MAX_WEIGHT = 255
PAGE = os.sysconf("SC_PAGE_SIZE")
_PAIR = re.compile(r"(\d+):(\d+)")


@dataclass(frozen=True)
class StripeConfig:
    """node:weight pairs (chunk c of a mapping goes to the node whose weight slot holds
    c mod sum(weights)), the chunk size, and the smallest mapping or block placed."""

    nodes: tuple[int, ...]
    weights: tuple[int, ...]
    chunk_bytes: int = DEFAULT_CHUNK
    min_bytes: int = DEFAULT_MIN

    @property
    def spec(self) -> str:
        return ",".join(f"{n}:{w}" for n, w in zip(self.nodes, self.weights))

    def share(self) -> dict[int, float]:
        """The requested fraction of pages per node."""
        total = sum(self.weights)
        return {n: w / total for n, w in zip(self.nodes, self.weights)}

    def env(self) -> dict[str, str]:
        """The variables the library reads (sizes in bytes)."""
        return {ENV_STRIPE: self.spec, ENV_CHUNK: str(self.chunk_bytes),
                ENV_MIN: str(self.min_bytes)}


def parse_stripe(spec: str, *, chunk: str | int = DEFAULT_CHUNK,
                 min_size: str | int = DEFAULT_MIN) -> StripeConfig:
    """'0:3,2:1' (+ sizes as docs/units.md has them) -> StripeConfig, with the library's own
    rules: distinct nodes 0..1023, weights 1..255, at most 64 nodes, the chunk a positive
    multiple of the page size, the minimum at least a page. ValueError names what is wrong."""
    if not isinstance(spec, str):
        raise TypeError(f"stripe {spec!r}: expected a string such as '0:3,1:1'")
    nodes: list[int] = []
    weights: list[int] = []
    for item in spec.split(","):
        m = _PAIR.fullmatch(item.strip())
        if not m:
            raise ValueError(f"stripe {spec!r}: expected node:weight[,node:weight...], "
                             "e.g. 0:3,1:1")
        n, w = int(m.group(1)), int(m.group(2))
        if n > MAX_NODE_ID:
            raise ValueError(f"stripe {spec!r}: node {n} out of range 0..{MAX_NODE_ID}")
        if not 1 <= w <= MAX_WEIGHT:
            raise ValueError(f"stripe {spec!r}: weight {w} of node {n} out of range "
                             f"1..{MAX_WEIGHT}")
        if n in nodes:
            raise ValueError(f"stripe {spec!r}: node {n} named twice")
        nodes.append(n)
        weights.append(w)
    if len(nodes) > MAX_NODES:
        raise ValueError(f"stripe {spec!r}: more than {MAX_NODES} nodes")
    chunk_b = parse_size(chunk, "stripe chunk")
    if chunk_b <= 0 or chunk_b % PAGE:
        raise ValueError(f"stripe chunk {chunk!r}: expected a positive multiple of the page "
                         f"size ({PAGE})")
    min_b = parse_size(min_size, "min size")
    if min_b < PAGE:
        raise ValueError(f"min size {min_size!r}: expected at least one page ({PAGE})")
    return StripeConfig(tuple(nodes), tuple(weights), chunk_b, min_b)


def config_from_env(env: Mapping[str, str]) -> StripeConfig | None:
    """The configuration a process was started with (None when it has no CXLKIT_STRIPE).
    ValueError when it is malformed: the library then placed nothing."""
    spec = env.get(ENV_STRIPE)
    if spec is None:
        return None
    return parse_stripe(spec, chunk=env.get(ENV_CHUNK) or DEFAULT_CHUNK,
                        min_size=env.get(ENV_MIN) or DEFAULT_MIN)


def library_path() -> Path:
    """libcxlkit_preload.so: $CXLKIT_PRELOAD_LIB, else the one installed beside cxlkit's
    native module. FileNotFoundError naming the path when it is missing."""
    given = os.environ.get(ENV_LIB)
    if given:
        p = Path(given)
    else:
        from .. import _native

        p = Path(_native.__file__).resolve().parent / LIBRARY_NAME
    if not p.is_file():
        raise FileNotFoundError(2, "preload library missing (rebuild: make build)", str(p))
    return p


def preload_env(cfg: StripeConfig, *, log: str | None = None,
                base: Mapping[str, str] | None = None) -> dict[str, str]:
    """A copy of `base` (default os.environ) that runs a program under the library with `cfg`:
    LD_PRELOAD gets the library first (other preloads kept after it), the configuration, and
    CXLKIT_PRELOAD_LOG when `log` (a path or "stderr") is given."""
    env = dict(os.environ if base is None else base)
    lib = str(library_path())
    rest = [p for p in re.split(r"[:\s]+", env.get("LD_PRELOAD", "")) if p and p != lib]
    env["LD_PRELOAD"] = ":".join([lib, *rest])
    env.update(cfg.env())
    if log is not None:
        env[ENV_LOG] = log
    else:
        env.pop(ENV_LOG, None)
    return env


def process_env(pid: int, *, procfs_root: Path | None = None) -> dict[str, str]:
    """The environment process `pid` was started with (/proc/PID/environ)."""
    path = (procfs_root or config().procfs_root) / str(pid) / "environ"
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        if path.parent.is_dir():
            return {}  # a procfs snapshot without it
        raise ProcessLookupError(3, f"no process {pid}", str(path.parent)) from None
    out = {}
    for item in raw.split(b"\0"):
        k, sep, v = item.partition(b"=")
        if sep:
            out[k.decode(errors="replace")] = v.decode(errors="replace")
    return out


@dataclass(frozen=True)
class Vma:
    start: int
    end: int
    policy: str
    pages: dict[int, int]


@dataclass
class StripedRange:
    """Consecutive mappings bound node by node to the stripe's nodes: one placed mapping, or
    several adjacent ones the kernel shows side by side. bounds: {node: (lo, hi)} pages the
    rule allows for a range this long (any phase), when every page is present."""

    start: int
    end: int
    vmas: int
    pages: dict[int, int]
    misplaced: int
    bounds: dict[int, tuple[int, int]] = field(default_factory=dict)
    # "registry": one placement the library recorded, judged page by page on its own chunk
    # grid (origin), bounds exact; "maps": grouped from /proc/PID/maps, bounds at any phase
    source: str = "maps"
    origin: int | None = None

    @property
    def npages(self) -> int:
        return (self.end - self.start) // PAGE

    @property
    def present(self) -> int:
        return sum(self.pages.values())

    @property
    def within(self) -> bool:
        """No page off its chunk's node, and (fully present) every node within bounds."""
        if self.misplaced:
            return False
        if self.present < self.npages:
            return True
        return all(lo <= self.pages.get(n, 0) <= hi for n, (lo, hi) in self.bounds.items())


@dataclass
class StripeAudit:
    pid: int
    config: StripeConfig | None
    preloaded: bool
    problem: str | None
    ranges: list[StripedRange]
    source: str = "maps"  # where the ranges came from (StripedRange.source)

    def totals(self) -> dict[int, int]:
        out: dict[int, int] = {}
        for r in self.ranges:
            for n, c in r.pages.items():
                out[n] = out.get(n, 0) + c
        return dict(sorted(out.items()))

    def achieved(self) -> dict[int, float]:
        t = self.totals()
        s = sum(t.values())
        return {n: c / s for n, c in t.items()} if s else {}


def stripe_bounds(cfg: StripeConfig, npages: int) -> dict[int, tuple[int, int]]:
    """Pages per node a window of npages over the stripe pattern holds, whatever its phase:
    q whole rounds give q*w*ppc; the rest r adds between max(0, r - (R - w*ppc)) and
    min(r, w*ppc) (ppc pages per chunk, R pages per round)."""
    ppc = max(1, cfg.chunk_bytes // PAGE)
    round_pages = sum(cfg.weights) * ppc
    q, r = divmod(npages, round_pages)
    out = {}
    for n, w in zip(cfg.nodes, cfg.weights):
        mine = w * ppc
        out[n] = (q * mine + max(0, r - (round_pages - mine)), q * mine + min(r, mine))
    return out


def read_vmas(pid: int, *, procfs_root: Path | None = None) -> list[Vma]:
    """Each mapping of `pid`: its range (/proc/PID/maps) with its policy and pages per node
    (numa_maps), joined on the start address."""
    base = (procfs_root or config().procfs_root) / str(pid)
    try:
        maps = (base / "maps").read_text()
    except FileNotFoundError:
        raise ProcessLookupError(3, f"no process {pid}", str(base)) from None
    pages = {m.address: m for m in _audit.audit_pid(pid, procfs_root=procfs_root).mappings}
    out = []
    for line in maps.splitlines():
        rng = line.split(" ", 1)[0]
        lo, sep, hi = rng.partition("-")
        if not sep:
            continue
        try:
            start, end = int(lo, 16), int(hi, 16)
        except ValueError:
            continue
        m = pages.get(start)
        if m is not None:
            out.append(Vma(start, end, m.policy, dict(m.pages)))
    return out


def _bound_node(policy: str) -> int | None:
    mode, _, nodes = policy.partition(":")
    if mode.split("=", 1)[0] != "bind" or not nodes.isdigit():
        return None
    return int(nodes)


def striped_ranges(vmas: list[Vma], cfg: StripeConfig) -> list[StripedRange]:
    """Group consecutive mappings bound to one stripe node each into ranges."""
    out: list[StripedRange] = []
    for v in vmas:
        node = _bound_node(v.policy)
        if node is None or node not in cfg.nodes:
            continue
        misplaced = sum(c for n, c in v.pages.items() if n != node)
        last = out[-1] if out else None
        if last is not None and last.end == v.start:
            last.end = v.end
            last.vmas += 1
            last.misplaced += misplaced
            for n, c in v.pages.items():
                last.pages[n] = last.pages.get(n, 0) + c
        else:
            out.append(StripedRange(v.start, v.end, 1, dict(v.pages), misplaced))
    # a range smaller than the minimum is not the library's (a program's own bind)
    out = [r for r in out if r.end - r.start >= cfg.min_bytes]
    for r in out:
        r.bounds = stripe_bounds(cfg, r.npages)
    return out


def chunk_node(cfg: StripeConfig, chunk: int) -> int:
    """The node of chunk number `chunk` of a placement (the library's rule)."""
    slot = chunk % sum(cfg.weights)
    for n, w in zip(cfg.nodes, cfg.weights):
        if slot < w:
            return n
        slot -= w
    raise AssertionError("unreachable: slot below the sum of the weights")


def expected_pages(cfg: StripeConfig, origin: int, start: int, end: int) -> dict[int, int]:
    """Pages per node of [start, end) of a placement whose chunk 0 starts at origin."""
    out = {n: 0 for n in cfg.nodes}
    c = (start - origin) // cfg.chunk_bytes
    at = start
    while at < end:
        stop = min(end, origin + (c + 1) * cfg.chunk_bytes)
        out[chunk_node(cfg, c)] += (stop - at) // PAGE
        at, c = stop, c + 1
    return out


def registry_ranges(pid: int, cfg: StripeConfig, reg: _reg.Registry,
                    vmas: list[Vma]) -> list[StripedRange]:
    """One range per recorded placement at least the minimum long: each present page's node
    (move_pages) against its chunk's node; bounds exact (the phase is known)."""
    out = []
    for p in reg.placements:
        status = _reg.page_nodes(pid, p.start, p.end, PAGE)
        pages: dict[int, int] = {}
        misplaced = 0
        ppc = cfg.chunk_bytes // PAGE
        first = (p.start - p.origin) // PAGE
        for i, node in enumerate(status):
            if node < 0:
                continue
            pages[node] = pages.get(node, 0) + 1
            if node != chunk_node(cfg, (first + i) // ppc):
                misplaced += 1
        want = expected_pages(cfg, p.origin, p.start, p.end)
        nv = sum(1 for v in vmas if v.start < p.end and v.end > p.start)
        out.append(StripedRange(p.start, p.end, nv, dict(sorted(pages.items())), misplaced,
                                {n: (c, c) for n, c in want.items()}, "registry", p.origin))
    return out


def _registry_audit(pid: int, cfg: StripeConfig) -> tuple[list[StripedRange] | None, str | None]:
    """Ranges from the library's registry of a live process, or (None, why not)."""
    root = config().procfs_root
    try:
        path = _reg.find(pid, root)
        if path is None:
            return None, None
        reg = _reg.read(path, PAGE)
        ranges = registry_ranges(pid, cfg, reg, read_vmas(pid))
    except (OSError, _reg.RegistryError) as e:
        return None, f"the library's registry could not be read ({e}); ranges from /proc maps"
    note = None
    if reg.dropped or reg.skipped:
        note = (f"registry {path}: {reg.dropped} placements not recorded (full), "
                f"{reg.skipped} records rejected")
    return ranges, note


def audit_stripes(pid: int, *, procfs_root: Path | None = None) -> StripeAudit:
    """The striped mappings of `pid` against the stripe it was started with: per placement
    the library recorded (its registry, live processes), else per group of adjacent bound
    mappings in /proc/PID/maps (procfs snapshots, older libraries). problem says why there
    is nothing to compare (no CXLKIT_STRIPE, library not preloaded, bad config) or what
    weakens the verdict."""
    try:
        env = process_env(pid, procfs_root=procfs_root)
    except PermissionError as e:
        return StripeAudit(pid, None, False, f"{e.filename}: not readable (another user's "
                           "process?)", [])
    preloaded = LIBRARY_NAME in env.get("LD_PRELOAD", "")
    try:
        cfg = config_from_env(env)
    except ValueError as e:
        return StripeAudit(pid, None, preloaded, f"{e}: the library placed nothing", [])
    if cfg is None:
        return StripeAudit(pid, None, preloaded, f"not started with {ENV_STRIPE} "
                           "(cxlkit run --stripe)", [])
    problem = None if preloaded else f"{LIBRARY_NAME} is not in its LD_PRELOAD"
    if procfs_root is None and preloaded:
        ranges, note = _registry_audit(pid, cfg)
        if ranges is not None:
            return StripeAudit(pid, cfg, preloaded, note, ranges, "registry")
        problem = note
    ranges = striped_ranges(read_vmas(pid, procfs_root=procfs_root), cfg)
    return StripeAudit(pid, cfg, preloaded, problem, ranges)
