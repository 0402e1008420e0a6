"""SpillConfig: every option of a SubgroupStore but its paths, checked once at construction.
The per-path figures (bandwidths, cpu_per_byte, capacities) are checked against the number of
paths by check_paths."""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ... import placement as P
from .. import aio
from . import layout as L
from . import split as S
from .path_base import LOCK_MODES

DEFAULT_SUBGROUP_PARAMS = 100_000_000
CHOICES = {"order": ("alternate", "ascending"), "split": ("model", "eq1"),
           "upcast": ("delayed", "eager"), "lock": LOCK_MODES}


@dataclass(frozen=True)
class SpillConfig:
    """subgroup_params: elements per subgroup. cache_subgroups: K host buffers (>= 3: the one
    updated, the one fetched, the one flushed), placed by cache_policy. order: 'alternate'
    (ascending, then descending, ...) or 'ascending'. upcast: 'delayed' (grads read from host
    memory in their dtype, upcast in the kernel) or 'eager' (fp32 grads written to the paths
    and read back: the DeepSpeed-like baseline). lock: 'exclusive' / 'shared' / 'off' among
    the processes of one host, per path. verify: check every fetched subgroup's payload
    checksum (headers are always checked). reestimate: move each path's bandwidth towards
    what every step observed. bandwidths: bytes/s per path instead of the start-up
    measurement (of measure_nbytes per path); with them, cpu_per_byte (CPU s per byte each
    path moves) and cpu_rate (CPU s per s the process gets with every path busy) give the
    CPU model of the split (measured at start when bandwidths are not given). split: 'model'
    (the CPU-aware split: never slower in the model than a subset of the paths) or 'eq1'
    (the paper's Eq. 1: every path with bandwidth takes a subgroup). pipeline_read /
    pipeline_write: prefetch k+1 / flush in the background (off: each waits at once).
    pool_options: how 'pool:NAME' paths open their pool (Pool's host_id, coherence).
    zero_copy: subgroups on memory paths are updated where they lie (update_inplace), never
    copied through the host cache. sum_in_kernel: payload checksums folded into the
    kernel's pass over the state (update_folded); False: a pass of their own each.
    capacities: per path the most bytes the store keeps there (an int, '64G' or None: no
    bound), like a path spec's ':cap=SIZE' suffix."""

    subgroup_params: int = DEFAULT_SUBGROUP_PARAMS
    cache_subgroups: int = 4
    cache_policy: P.Policy | None = None
    order: str = "alternate"
    upcast: str = "delayed"
    lock: str = "exclusive"
    aio_config: aio.AioConfig | None = None
    verify: bool = True
    reestimate: bool = True
    bandwidths: Sequence[float] | None = None
    measure_nbytes: int = 32 << 20
    namespace: str = "default"
    pipeline_read: bool = True
    pipeline_write: bool = True
    pool_options: dict[str, Any] | None = None
    cpu_per_byte: Sequence[float] | None = None
    cpu_rate: float | None = None
    split: str = "model"
    zero_copy: bool = True
    sum_in_kernel: bool = True
    capacities: Sequence[int | str | None] | None = None

    def __post_init__(self) -> None:
        c = self.cache_subgroups
        if isinstance(c, bool) or not isinstance(c, int) or c < 3:
            raise ValueError(f"cache_subgroups {c!r}: expected an int >= 3")
        for name, ok in CHOICES.items():
            if getattr(self, name) not in ok:
                raise ValueError(f"{name} {getattr(self, name)!r}: expected one of "
                                 f"{', '.join(ok)}")
        if not self.namespace.replace("-", "").replace("_", "").isalnum():
            raise ValueError(f"namespace {self.namespace!r}: letters, digits, - and _ only")
        if (self.cpu_per_byte is not None or self.cpu_rate is not None) \
                and self.bandwidths is None:
            raise ValueError("cpu_per_byte / cpu_rate: give them with bandwidths (else they "
                             "are measured)")
        L.cut([[1]], self.subgroup_params)  # validates it
        for name in ("bandwidths", "cpu_per_byte", "capacities"):
            v = getattr(self, name)
            if v is not None:
                object.__setattr__(self, name, tuple(v))
        for name in ("pipeline_read", "pipeline_write", "zero_copy", "sum_in_kernel"):
            object.__setattr__(self, name, bool(getattr(self, name)))

    @classmethod
    def from_options(cls, **options: Any) -> SpillConfig:
        """SpillConfig(**options), naming an unknown option and the known ones."""
        known = {f.name for f in dataclasses.fields(cls)}
        extra = sorted(set(options) - known)
        if extra:
            raise TypeError(f"SubgroupStore: unknown option(s) {', '.join(extra)} (known: "
                            f"{', '.join(sorted(known))})")
        return cls(**options)

    def check_paths(self, npaths: int) -> None:
        """The per-path figures are one per path (and cpu_per_byte a valid CPU model)."""
        for name in ("capacities", "bandwidths"):
            v = getattr(self, name)
            if v is not None and len(v) != npaths:
                raise ValueError(f"{name}: {len(v)} figures for {npaths} paths")
        if self.cpu_per_byte is not None:
            S.split_counts(1, [1.0] * npaths, self.cpu_per_byte, self.cpu_rate)  # validates

    def folds(self, path: Any) -> bool:
        """Payload sums on this path are folded into the kernel: sum_in_kernel, delayed
        upcast, and a path that keeps sums by a pass of their own (a directory through the
        engine)."""
        return self.sum_in_kernel and self.upcast == "delayed" and path.checksummed \
            and path.sum_by_pass

    def in_place(self, path: Any) -> bool:
        """Subgroups on this path are updated where they lie (a memory path the kernel
        reads and writes directly)."""
        return self.zero_copy and self.upcast == "delayed" and getattr(path, "zero_copy", False)
