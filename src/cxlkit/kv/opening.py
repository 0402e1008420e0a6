"""How a KV store reaches its pool: the caller's cxlkit.Pool, or one it opens (and closes)
by path or name, with Pool's own arguments."""
from __future__ import annotations

import os
import warnings
from typing import Any

from ..pool import Pool

COHERENCE = {"host": 0, "none": 1, "sim": 2}


def _open_pool(pool: Any, *, create: bool | None, size: int | str, host_id: int | str | None,
               coherence: str | None, max_hosts: int,
               lease_timeout: float | None) -> tuple[Pool, bool]:
    """(pool, whether the store owns it): the caller's cxlkit.Pool when it is one (and host_id /
    coherence, if given, agree with it), else one the store opens and closes."""
    if coherence is not None and coherence not in COHERENCE:
        raise ValueError(f"coherence: {coherence!r} is not one of {sorted(COHERENCE)}")
    if isinstance(pool, Pool):
        if (host_id is None or host_id == pool.host_id) and coherence in (None, pool.coherence):
            return pool, False
        paths: Any = pool.paths  # the same backings, as another host or coherence
        coherence = coherence or pool.coherence
    elif isinstance(pool, (str, os.PathLike)):
        paths = pool  # a bare name is /dev/shm/cxlkit-<name>, as for cxlkit.Pool
    else:
        raise TypeError(f"pool {pool!r}: expected a path, a pool name or a cxlkit.Pool")
    if isinstance(host_id, int) and not isinstance(host_id, bool) and host_id < 0:
        raise ValueError(f"host_id: expected an int >= 0 or a host name, got {host_id!r}")
    own = Pool(paths, size or None, host_id=host_id, coherence=coherence,
               create=create, max_hosts=max_hosts or None,
               lease_timeout=lease_timeout)
    return own, True


def _lease_seconds(seconds: float | None, ms: int) -> float | None:
    """Store(lease_timeout=) in seconds as everywhere in Python; lease_timeout_ms, the old
    spelling, still works for one release with a DeprecationWarning."""
    if not ms:
        return seconds
    if seconds is not None:
        raise ValueError("lease_timeout and lease_timeout_ms both given: pass lease_timeout "
                         "(seconds) alone")
    warnings.warn("kv.Store(lease_timeout_ms=) is deprecated: pass lease_timeout in seconds "
                  "(e.g. lease_timeout=2.5)", DeprecationWarning, stacklevel=3)
    if isinstance(ms, bool) or not isinstance(ms, int) or ms < 0:
        raise ValueError(f"lease_timeout_ms {ms!r}: expected a positive int")
    return ms / 1000
