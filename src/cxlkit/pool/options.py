"""A pool's open options: the backing path of a name, this host's slot and tag, object
names, and every argument of Pool() checked and turned into the native open's flags."""
from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .. import _native
from .. import units as _units
from .._config import config

MiB = 1 << 20
_SHM = Path("/dev/shm")
_COHERENCE = {"host": 0, "none": 1, "sim": 2}  # sim: the non-coherence simulator


def parse_size(text: str | int) -> int:
    """Bytes from an int or a string such as "64M", "1G", "4096", "2MiB" (cxlkit.units, the
    one parser of every size option: K/M/G/T = 1024**n)."""
    return _units.parse_size(text, "size")


def resolve(path_or_name: str | os.PathLike[str] | None) -> str:
    """A pool's backing path: "memfd:NAME" and paths as given; a bare name means the
    embedded pool file /dev/shm/cxlkit-<name>; None means CXLKIT_POOL."""
    if path_or_name is None:
        path_or_name = config().pool
    if not isinstance(path_or_name, (str, os.PathLike)):
        raise TypeError(f"pool {path_or_name!r}: expected a path or a name")
    s = os.fspath(path_or_name)
    if not s:
        raise ValueError("pool name is empty")
    if s.startswith("memfd:") or "/" in s:
        return s
    return str(_SHM / (s if s.startswith("cxlkit-") else f"cxlkit-{s}"))


def machine_tag() -> str:
    """This machine's name in a pool's host table: its machine id, else its hostname."""
    try:
        mid = Path("/etc/machine-id").read_text().strip()
    except OSError:
        mid = ""
    if not mid:
        import socket

        mid = socket.gethostname()
    return mid[: _native.POOL_TAG_MAX]


def _host(host_id: int | str | None) -> tuple[int, str]:
    """(slot or -1, tag) from host_id, else CXLKIT_HOST_ID, else the machine id."""
    if host_id is None:
        env = config().host_id
        if env:
            host_id = int(env) if env.strip().isdigit() else env
    if host_id is None:
        return -1, machine_tag()
    if isinstance(host_id, bool) or not isinstance(host_id, (int, str)):
        raise TypeError(f"host_id {host_id!r}: expected an int slot or a str name")
    if isinstance(host_id, int):
        if not 0 <= host_id < _native.POOL_MAX_HOSTS:
            raise ValueError(f"host_id {host_id}: out of range 0..{_native.POOL_MAX_HOSTS - 1}")
        return host_id, machine_tag()
    if not host_id or len(host_id.encode()) > _native.POOL_TAG_MAX:
        raise ValueError(f"host_id {host_id!r}: expected 1..{_native.POOL_TAG_MAX} bytes")
    return -1, host_id


def _check_name(name: object) -> str:
    if not isinstance(name, str):
        raise TypeError(f"object name {name!r}: expected a str")
    n = len(name.encode())
    if n == 0 or "\0" in name:
        raise ValueError(f"object name {name!r}: expected 1..{_native.POOL_NAME_MAX} bytes, no NUL")
    if n > _native.POOL_NAME_MAX:
        raise ValueError(f"object name {name[:32]!r}...: {n} bytes, longer than "
                         f"{_native.POOL_NAME_MAX}")
    return name


@dataclass(frozen=True)
class OpenOptions:
    """Pool()'s arguments checked, in the form the native open takes them."""

    paths: list[str]
    nbytes: int
    flags: int
    slot: int
    tag: str
    coherence: str
    numa_node: int  # -1: no binding
    max_hosts: int  # 0: the library's default (and below, 0 = default)
    mode: int
    max_objects: int
    lease_slots: int
    lease_timeout_ms: int
    gid: int | None  # the group of a shared pool


def open_options(path_or_name: str | os.PathLike[str] | Sequence[str] | None,
                 size: int | str | None, *, host_id: int | str | None, coherence: str | None,
                 create: bool | None, exclusive: bool, force: bool, max_hosts: int | None,
                 max_objects: int | None, numa_node: int | None, mode: int,
                 group: int | str | None, lease_slots: int | None, lease_timeout: float | None,
                 lease_timeout_ms: int | None, overcommit: bool, repair: bool) -> OpenOptions:
    """Pool()'s arguments checked (ValueError / TypeError naming the argument) and turned into
    the native open's flags; a size creates the pool when it does not exist."""
    paths = _backing_paths(path_or_name)
    nbytes = _pool_size(size)
    coherence = config().coherence if coherence is None else coherence
    if coherence not in _COHERENCE:
        raise ValueError(f"coherence {coherence!r}: expected 'host', 'none' or 'sim'")
    _check_counts(mode, max_hosts, numa_node, max_objects, lease_slots)
    timeout_ms = _lease_timeout_ms(lease_timeout, lease_timeout_ms)
    gid = None
    if group is not None:
        import grp

        gid = group if isinstance(group, int) else grp.getgrnam(group).gr_gid
        if mode == 0o600:
            mode = 0o660
    create = nbytes > 0 or force if create is None else create
    slot, tag = _host(host_id)
    flags = ((_native.POOL_CREATE if create else 0) | (_native.POOL_EXCL if exclusive else 0)
             | (_native.POOL_FORCE if force else 0)
             | (_native.POOL_SHARED if gid is not None else 0)
             | (_native.POOL_OVERCOMMIT if overcommit else 0)
             | (_native.POOL_REPAIR if repair else 0)
             | _native.POOL_READ_V1)  # a version 1 pool opens read-only
    return OpenOptions(paths, nbytes, flags, slot, tag, coherence,
                       -1 if numa_node is None else numa_node, max_hosts or 0, mode,
                       max_objects or 0, lease_slots or 0, timeout_ms, gid)


def _backing_paths(path_or_name: str | os.PathLike[str] | Sequence[str] | None) -> list[str]:
    if isinstance(path_or_name, (list, tuple)):
        if not path_or_name:
            raise ValueError("a striped pool needs at least one backing")
        paths = [resolve(p) for p in path_or_name]
    else:
        paths = [resolve(path_or_name)]
    if len(paths) > _native.POOL_MAX_BACKINGS:
        raise ValueError(f"{len(paths)} backings: at most {_native.POOL_MAX_BACKINGS}")
    return paths


def _pool_size(size: int | str | None) -> int:
    nbytes = 0 if size is None else parse_size(size)
    if nbytes < 0:
        raise ValueError(f"size {size!r}: must be positive")
    if size is not None and nbytes == 0:
        raise ValueError(f"size {size!r} is 0 bytes: a pool needs a size (e.g. '64M'), or "
                         "none to open an existing one")
    return nbytes


def _check_counts(mode: int, max_hosts: int | None, numa_node: int | None,
                  max_objects: int | None, lease_slots: int | None) -> None:
    if isinstance(mode, bool) or not isinstance(mode, int) or mode < 0 or mode & ~0o664:
        raise ValueError(f"mode {mode!r}: owner and group read/write at most (e.g. 0o600, "
                         "0o660); no exec, setuid/setgid/sticky or write by every user")
    if max_hosts is not None and not 1 <= max_hosts <= _native.POOL_MAX_HOSTS:
        raise ValueError(f"max_hosts {max_hosts}: expected 1..{_native.POOL_MAX_HOSTS}")
    if numa_node is not None and (isinstance(numa_node, bool) or numa_node < 0):
        raise ValueError(f"numa_node {numa_node!r}: expected a node id >= 0")
    for label, v in (("max_objects", max_objects), ("lease_slots", lease_slots)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v <= 0):
            raise ValueError(f"{label} {v!r}: expected a positive int")


def _lease_timeout_ms(seconds: float | None, ms: int | None) -> int:
    """The lease timeout in the C ABI's milliseconds (0: the library's default), from
    lease_timeout (seconds) or the deprecated lease_timeout_ms."""
    lo, hi = _native.POOL_LEASE_TIMEOUT_MIN_MS, _native.POOL_LEASE_TIMEOUT_MAX_MS
    why = "a lease must outlive several heartbeats, which are timeout/4 apart"
    if ms is not None:
        if seconds is not None:
            raise ValueError("lease_timeout and lease_timeout_ms both given: pass lease_timeout "
                             "(seconds) alone")
        warnings.warn("Pool(lease_timeout_ms=) is deprecated: pass lease_timeout in seconds "
                      "(e.g. lease_timeout=2.5)", DeprecationWarning, stacklevel=4)
        if isinstance(ms, bool) or not isinstance(ms, int) or ms <= 0:
            raise ValueError(f"lease_timeout_ms {ms!r}: expected a positive int")
        if not lo <= ms <= hi:
            raise ValueError(f"lease_timeout_ms {ms}: expected {lo}..{hi} ({why})")
        return ms
    if seconds is None:
        return 0
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) \
            or not lo <= seconds * 1000 <= hi:
        raise ValueError(f"lease_timeout {seconds!r}: expected {lo / 1000:g}..{hi / 1000:g} "
                         f"seconds ({why})")
    return round(seconds * 1000)
