"""The paths a SubgroupStore spills optimizer subgroups to, by name: a directory (NVMe, PFS)
through the native async I/O engine (spill_dir), a directory on tmpfs mapped and copied
(spill_mapped), a memory tier or an object area of a cxlkit pool (spill_copy). parse_path
makes one from its spec (with an optional capacity: a ':cap=SIZE' suffix, a dict
{"path": SPEC, "capacity": SIZE}, or capacity=); the common names (errors, header,
SpillPath) are re-exported."""
from __future__ import annotations

import os
from typing import Any

from ... import placement as P
from ...units import parse_size
from .. import aio
from .path_base import (HEADER_NBYTES, LOCK_MODES, MAGIC, VERSION, CapacityError,  # noqa: F401
                         Pending, PathFullError, PathIOError, PathVanishedError, SpillPath,
                         SubgroupCorruptError, SubgroupError, check_header, check_payload,
                         checksum, pack_header, typed)
from .path_copy import MemoryPath, PoolPath, _CopyPath  # noqa: F401
from .path_dir import DirPath


CAP_SUFFIX = ":cap="


def split_capacity(spec: Any) -> tuple[Any, int | None]:
    """(spec without its capacity, the capacity in bytes or None): 'DIR:cap=2G' and
    {"path": "DIR", "capacity": "2G"} give ('DIR', 2 GiB); anything else is returned as is."""
    if isinstance(spec, dict):
        extra = sorted(set(spec) - {"path", "capacity"})
        if "path" not in spec or extra:
            raise ValueError(f"spill path {spec!r}: expected keys path and capacity")
        cap = spec.get("capacity")
        return spec["path"], None if cap is None else _capacity(spec["path"], cap)
    if isinstance(spec, (str, os.PathLike)):
        s = os.fspath(spec)
        head, sep, cap = s.rpartition(CAP_SUFFIX)
        if sep:
            return head, _capacity(head, cap)
    return spec, None


def _capacity(where: Any, cap: Any) -> int:
    try:
        n = parse_size(cap, f"spill path {where!r}: capacity")
    except TypeError as e:
        raise ValueError(str(e)) from None
    if n < 0:
        raise ValueError(f"spill path {where!r}: capacity {cap!r}, expected >= 0 bytes")
    return n


def parse_path(spec: Any, *, lock: str = "exclusive", config: aio.AioConfig | None = None,
               pool_options: dict[str, Any] | None = None,
               capacity: int | str | None = None) -> SpillPath:
    """parse_path_bare's path with its capacity_nbytes set: from the spec's ':cap=SIZE'
    suffix or dict, else capacity (bytes or '64G'); ValueError when both give one."""
    spec, cap = split_capacity(spec)
    if capacity is not None:
        if cap is not None:
            raise ValueError(f"spill path {spec!r}: capacity given twice ({cap} bytes in the "
                             f"spec, {capacity!r})")
        cap = _capacity(spec, capacity)
    p = parse_path_bare(spec, lock=lock, config=config, pool_options=pool_options)
    if cap is not None:
        p.capacity_nbytes = cap
    return p


def parse_path_bare(spec: Any, *, lock: str = "exclusive",
                    config: aio.AioConfig | None = None,
                    pool_options: dict[str, Any] | None = None) -> SpillPath:
    """A SpillPath as is; 'mem' (the task's policy) or 'mem:NODE' (a memory node);
    'pool:NAME_OR_PATH' (an object area of that cxlkit pool, opened with pool_options:
    Pool's host_id and coherence, e.g. {"coherence": "none"} behind a CXL switch); else a
    directory: a MappedDirPath on tmpfs (or with config.backend 'map'), else a DirPath;
    'map:DIR' / 'aio:DIR' choose the mapped copy / the async I/O engine for DIR."""
    if isinstance(spec, SpillPath):
        return spec
    s = os.fspath(spec)
    if s == "mem":
        return MemoryPath()
    if s.startswith("mem:"):
        try:
            return MemoryPath(P.parse(s[4:]) if not s[4:].isdigit() else int(s[4:]))
        except ValueError as e:
            raise ValueError(f"spill path {s!r}: {e}") from None
    if s.startswith("pool:"):
        from ...pool import Pool
        return PoolPath(Pool(s[5:], **(pool_options or {})), lock=lock)
    from .path_mapped import MEMORY_FS, MappedDirPath, fs_type
    if s.startswith("map:"):
        return MappedDirPath(s[4:], lock=lock)
    if s.startswith("aio:"):
        if config is not None and config.backend == aio.MAP:
            config = None
        return DirPath(s[4:], lock=lock, config=config)
    backend = config.backend if config is not None else "auto"
    if backend == aio.MAP or (backend == "auto" and os.path.isdir(s)
                              and fs_type(s) in MEMORY_FS):
        return MappedDirPath(s, lock=lock)
    return DirPath(s, lock=lock, config=config)
