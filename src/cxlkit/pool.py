"""The shared memory pool: named objects in one memory range that processes and hosts map
together (a file on tmpfs/hugetlbfs, a devdax device, memfd memory, or several backings
striped into one range). Layout and protocol: docs/pool-format.md."""
from __future__ import annotations

import errno
import os
import stat as _stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import _native
from . import units as _units
from ._config import config
from .errors import (_CREATE_ERRORS, _OBJECT_ERRORS, _OPEN_ERRORS, ObjectNotPublished,  # noqa: F401
                     PoolCorruptError, PoolError, PoolForeignError, PoolFormatError,
                     PoolFullError, PoolGeometryError, PoolHostStuckError, PoolNoSpaceError,
                     PoolTooSmallError, PoolVersionError, StaleObjectError, _typed)
from ._views import Views
from .errors import PoolReadOnlyWarning
MiB = 1 << 20
_SHM = Path("/dev/shm")
_STATES = {1: "creating", 2: "live", 3: "dead"}
_COHERENCE = {"host": 0, "none": 1, "sim": 2}  # sim: the non-coherence simulator
_COHERENCE_NAMES = {v: k for k, v in _COHERENCE.items()}
# fsck: the object errors of its walk and repair, and a truncated pool file (ENXIO)
_FSCK_ERRORS = {**_OBJECT_ERRORS, errno.ENXIO: _OPEN_ERRORS[errno.ENXIO]}


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
class ObjectInfo:
    name: str
    nbytes: int
    offset: int        # payload offset from the pool base: the same in every process
    host: int          # owner host slot
    generation: int
    state: str         # "creating", "live" or "dead"
    checksum: int | None  # crc32c of the payload when recorded
    created: float     # seconds since the epoch
    created_ns: int = 0  # the same, exact (CLOCK_REALTIME ns: KV recency compares them)

    @property
    def live(self) -> bool:
        """Published: open() of any host finds it."""
        return self.state == "live"

    @classmethod
    def _from(cls, d: dict[str, Any]) -> ObjectInfo:
        ck = d["checksum"]
        return cls(d["name"], d["nbytes"], d["offset"], d["host"], d["generation"],
                   _STATES.get(d["state"], str(d["state"])), ck & 0xFFFFFFFF if ck else None,
                   d["created_ns"] / 1e9, d["created_ns"])


@dataclass(frozen=True)
class PoolStat:
    path: str
    kind: str              # "file", "devdax", "memfd", "striped"
    size: int
    version: int
    uuid: str
    max_hosts: int
    host_id: int
    hosts_active: int
    coherence: str
    partition_bytes: int   # the data region: one host may fill all of it (format v2)
    used_bytes: int        # this host
    free_bytes: int        # this host: used + free == extents_held * extent_bytes
    objects: int           # published, every host
    objects_host: int      # published, this host
    max_objects: int       # names per host
    align: int
    nbackings: int
    lease_timeout_s: float
    data_offset: int       # the data region: [data_offset, data_offset + partition_bytes)
    extent_bytes: int = 0  # hosts claim the data region in extents of this size, on demand
    nextents: int = 0
    extents_held: int = 0  # this host
    extents_free: int = 0  # held by no host
    names_host: int = 0    # this host's names in use (published and being created)


_HOST_STATES = {0: "free", 1: "live", 2: "dead", 3: "claimed"}


@dataclass(frozen=True)
class HostInfo:
    """One host slot of a pool (`cxlkit pool hosts`). state: "free" (never claimed, or
    released), "live" (heartbeat younger than the lease timeout), "dead" (attached once,
    heartbeat stale: `release` frees it), "claimed" (claimed but never attached: a claim in
    progress, or one whose claimer died). name and counts are read from the pool as its host
    last wrote them."""
    slot: int
    state: str
    name: str
    pid: int                        # the process that last attached (0: none)
    heartbeat_age_s: float | None   # since its last heartbeat (or claim); None: neither
    extents: int
    held_bytes: int
    used_bytes: int
    objects: int                    # published


@dataclass(frozen=True)
class FsckReport:
    objects_live: int
    objects_creating: int
    objects_dead: int
    blocks_free: int
    bytes_used: int
    bytes_free: int
    largest_free: int      # largest free block (header included) of any host
    reclaimed_objects: int
    reclaimed_bytes: int
    repaired_entries: int
    leases_live: int
    leases_expired: int
    duplicate_names: int
    errors: int
    counters_wrong: int    # hosts whose object/byte counters disagree with their block chain
    counters_rebuilt: int  # this host's counters, rebuilt from its chain by the repair
    registers_bad: int     # hosts whose bakery registers hold what no host writes

    @property
    def clean(self) -> bool:
        """Nothing lost or untrustworthy: no broken chains, dangling entries or duplicates,
        no host counters that contradict their chain, no bakery registers no host writes."""
        return (self.errors == 0 and self.duplicate_names == 0 and self.counters_wrong == 0
                and self.registers_bad == 0)


class PoolObject(Views, _native.PoolObject):
    """One object of a pool, leased while open: its memory is not reused until close().
    Exports the payload through the buffer protocol (memoryview, numpy, torch) without
    copies; objects from create() are writable, opened ones read-only unless asked.
    write(pos, data) copies bytes in; store_u64(offsets, value) / load_u64(offsets) store or
    load u64 words at payload offsets (a u64 array); flush / invalidate(offset=0, nbytes=None)
    and flush_at / invalidate_at(offsets, nbytes=8) make written ranges visible to other hosts /
    drop stale ones on a non-coherent pool. Ranges are checked against the object (ValueError
    naming it)."""

    def __enter__(self) -> PoolObject:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{self.nbytes} bytes at +{self.offset:#x}"
        return f"<PoolObject {self.name!r} host={self.host} gen={self.generation} {state}>"

    def publish(self, *, checksum: bool = False) -> None:
        """Make the object visible to open() on every host: payload flushed and fenced,
        then the header (with crc32c of the payload when checksum)."""
        try:
            super().publish(checksum)
        except OSError as e:
            raise _typed(e, _OBJECT_ERRORS) from None

    def read(self, pos: int = 0, nbytes: int | None = None) -> bytes:
        """A validated copy (seqlock): StaleObjectError if the object changed meanwhile."""
        n = self.nbytes - pos if nbytes is None else nbytes
        if pos < 0 or n < 0 or pos + n > self.nbytes:
            raise ValueError(f"range [{pos}, {pos + n}) outside object {self.name!r} "
                             f"of {self.nbytes} bytes")
        out = bytearray(n)
        try:
            self.read_into(out, pos)
        except OSError as e:
            raise _typed(e, _OBJECT_ERRORS) from None
        return bytes(out)

    # ---- every call maps its errno through errors.py (the binding raises OSError)
    def write(self, pos: int, data: Any) -> None:
        """Copy bytes into the payload at pos (writable objects of this host only)."""
        try:
            super().write(pos, data)
        except OSError as e:
            raise _typed(e, _OBJECT_ERRORS) from None

    def add_u64(self, offset: int, value: int) -> int:
        """Atomically add value to the u64 at payload offset (8-aligned, inside the object);
        returns the new value. For counters shared by one host's processes."""
        try:
            return super().add_u64(offset, value)
        except OSError as e:
            raise _typed(e, _OBJECT_ERRORS) from None

    def verify(self) -> None:
        """Recompute the payload checksum: PoolCorruptError on mismatch, ValueError when
        none was recorded."""
        try:
            super().verify()
        except OSError as e:
            if e.errno == errno.ENODATA:
                raise ValueError(f"object {self.name!r} was published without a checksum") \
                    from None
            raise _typed(e, _OBJECT_ERRORS) from None


class Pool:
    """A pool of named objects shared by processes and hosts.

    Pool("name") opens /dev/shm/cxlkit-name; Pool(path) a file or /dev/daxX.Y;
    Pool([path, path, ...]) stripes several backings; Pool("memfd:name", size=...) makes
    anonymous memory. Giving size creates the pool if it does not exist. host_id: an int
    slot, a str host name, or None for CXLKIT_HOST_ID / the machine id. coherence "host"
    (one coherence domain), "none" (hosts that do not share caches) or "sim" (as "none", each
    host id on a simulated cache of its own: tests, docs/pool-format.md); None:
    CXLKIT_COHERENCE, else "host"."""

    def __init__(self, path_or_name: str | os.PathLike[str] | Sequence[str] | None = None,
                 size: int | str | None = None, *, host_id: int | str | None = None,
                 coherence: str | None = None, create: bool | None = None,
                 exclusive: bool = False, force: bool = False, max_hosts: int | None = None,
                 max_objects: int | None = None, numa_node: int | None = None,
                 mode: int = 0o600, group: int | str | None = None,
                 lease_slots: int | None = None, lease_timeout_ms: int | None = None,
                 overcommit: bool = False, repair: bool = False) -> None:
        if isinstance(path_or_name, (list, tuple)):
            if not path_or_name:
                raise ValueError("a striped pool needs at least one backing")
            paths = [resolve(p) for p in path_or_name]
        else:
            paths = [resolve(path_or_name)]
        if len(paths) > _native.POOL_MAX_BACKINGS:
            raise ValueError(f"{len(paths)} backings: at most {_native.POOL_MAX_BACKINGS}")
        nbytes = 0 if size is None else parse_size(size)
        if nbytes < 0:
            raise ValueError(f"size {size!r}: must be positive")
        if coherence is None:
            coherence = config().coherence
        if size is not None and nbytes == 0:
            raise ValueError(f"size {size!r} is 0 bytes: a pool needs a size (e.g. '64M'), or "
                             "none to open an existing one")
        if isinstance(mode, bool) or not isinstance(mode, int) or mode < 0 or mode & ~0o664:
            raise ValueError(f"mode {mode!r}: owner and group read/write at most (e.g. 0o600, "
                             "0o660); no exec, setuid/setgid/sticky or write by every user")
        if coherence not in _COHERENCE:
            raise ValueError(f"coherence {coherence!r}: expected 'host', 'none' or 'sim'")
        if max_hosts is not None and not 1 <= max_hosts <= _native.POOL_MAX_HOSTS:
            raise ValueError(f"max_hosts {max_hosts}: expected 1..{_native.POOL_MAX_HOSTS}")
        if numa_node is not None and (isinstance(numa_node, bool) or numa_node < 0):
            raise ValueError(f"numa_node {numa_node!r}: expected a node id >= 0")
        for label, v in (("max_objects", max_objects), ("lease_slots", lease_slots),
                         ("lease_timeout_ms", lease_timeout_ms)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v <= 0):
                raise ValueError(f"{label} {v!r}: expected a positive int")
        lo, hi = _native.POOL_LEASE_TIMEOUT_MIN_MS, _native.POOL_LEASE_TIMEOUT_MAX_MS
        if lease_timeout_ms is not None and not lo <= lease_timeout_ms <= hi:
            raise ValueError(f"lease_timeout_ms {lease_timeout_ms}: expected {lo}..{hi} (a lease "
                             f"must outlive several heartbeats, which are timeout/4 apart)")
        if create is None:
            create = nbytes > 0 or force
        gid = None
        if group is not None:
            import grp

            gid = group if isinstance(group, int) else grp.getgrnam(group).gr_gid
            if mode == 0o600:
                mode = 0o660
        slot, tag = _host(host_id)
        flags = ((_native.POOL_CREATE if create else 0) | (_native.POOL_EXCL if exclusive else 0)
                 | (_native.POOL_FORCE if force else 0)
                 | (_native.POOL_SHARED if gid is not None else 0)
                 | (_native.POOL_OVERCOMMIT if overcommit else 0)
                 | (_native.POOL_REPAIR if repair else 0)
                 | _native.POOL_READ_V1)  # a version 1 pool opens read-only
        existed = [os.path.exists(p) for p in paths]
        if gid is not None:
            _check_group(paths, gid)
        try:
            self._h = _native.PoolHandle(
                paths, flags, slot, tag, _COHERENCE[coherence],
                -1 if numa_node is None else numa_node, nbytes, max_hosts or 0, mode,
                max_objects or 0, lease_slots or 0, lease_timeout_ms or 0)
        except OSError as e:
            raise _open_error(e, paths, nbytes, slot, existed) from None
        if any(existed) and not paths[0].startswith("/dev/dax"):
            self._check_geometry(nbytes, max_hosts)
        if gid is not None:
            for p, was in zip(paths, existed):
                if not was and not p.startswith("memfd:"):
                    os.chown(p, -1, gid)
        self.paths = paths
        self.path = paths[0]
        self.coherence = coherence
        # a version 1 pool is a read-only view (list/stat/open/read); say so once
        self.read_only = self._h.version == 1  # learnt at open: no extra call
        if self.read_only:
            import warnings

            warnings.warn(PoolReadOnlyWarning(
                f"pool {self.path} is format version 1 (fixed per-host partitions): opened "
                f"read-only (list, stat, open, read; writes raise PoolReadOnlyError); "
                f"`cxlkit pool upgrade {self.path}` converts it to version "
                f"{_native.POOL_FORMAT_VERSION} in place, every object kept"), stacklevel=2)

    def _check_geometry(self, nbytes: int, max_hosts: int | None) -> None:
        st = self.stat()
        diff = []
        if nbytes and nbytes != st.size:
            diff.append(f"size {st.size / MiB:.1f} MiB, not {nbytes / MiB:.1f} MiB")
        if max_hosts and max_hosts != st.max_hosts:
            diff.append(f"max_hosts {st.max_hosts}, not {max_hosts}")
        if diff:
            self.close()
            raise PoolGeometryError(errno.EEXIST, "the pool exists with " + " and ".join(diff)
                                    + ": open it without them, or remove it first",
                                    self._h.label)

    # -- lifetime
    def close(self) -> None:
        """Unmap the pool and drop this process's leases. Calls other threads are making on
        it finish first; calls after it raise ValueError naming the pool. BufferError while
        views of its objects exist."""
        self._h.close()

    @property
    def closed(self) -> bool:
        return self._h.closed

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        try:
            self.close()
        except BufferError:
            # views or communicators still use the pool: with an error already on its way out
            # of the block, that error is the one to report (the pool is unmapped once the
            # last user is dropped); without one, the refusal is the error
            if exc_type is None:
                raise

    def __repr__(self) -> str:
        return f"<Pool {self._h.label} host={self._h.host_id}{' closed' if self.closed else ''}>"

    @property
    def host_id(self) -> int:
        return self._h.host_id

    @property
    def shared_path(self) -> str:
        """The path other processes open this pool with: for memfd pools
        /proc/<pid>/fd/<fd> (valid while this process keeps the pool open)."""
        fd = self._h.fd
        return f"/proc/{os.getpid()}/fd/{fd}" if fd is not None else self.path

    @property
    def address(self) -> int:
        """The pool base in this process (offsets are relative to it)."""
        return self._h.address

    # -- objects
    def create(self, name: str, nbytes: int | None = None, *, data: Any = None,
               publish: bool | None = None, checksum: bool | None = None,
               zero: bool = True) -> PoolObject:
        """Reserve name and allocate nbytes in this host's partition; returns the writable,
        zeroed object. With data (bytes-like), nbytes defaults to its length, the data is
        copied in and the object published. publish=True publishes at once; otherwise call
        obj.publish() when the payload is written. zero=False skips zeroing the payload (it
        holds a destroyed object's old bytes): the caller writes every byte before publishing
        (with data, only the bytes past it are zeroed). Nobody else can read the object
        before it is published, and if this process dies first the pool reclaims it."""
        _check_name(name)
        if data is not None:
            mv = memoryview(data).cast("B")
            if nbytes is None:
                nbytes = len(mv)
            if len(mv) > nbytes:
                raise ValueError(f"data of {len(mv)} bytes does not fit object {name!r} of "
                                 f"{nbytes} bytes")
        if nbytes is None or isinstance(nbytes, bool) or not isinstance(nbytes, int):
            raise TypeError(f"nbytes {nbytes!r}: expected an int")
        if nbytes <= 0:
            raise ValueError(f"nbytes {nbytes}: must be > 0")
        try:
            d = self._h.create(name, nbytes, 0 if zero else _native.OBJ_NOZERO)
        except OSError as e:
            if e.errno == errno.ENOSPC:
                raise self._full_error(e, nbytes) from None
            if e.errno == errno.EDQUOT:
                raise _fs_full(self.path, f"the {nbytes} bytes of object {name!r}") from None
            if e.errno == errno.ETIMEDOUT:
                raise self._stuck_error(e, f"create of object {name!r}") from None
            raise _typed(e, _CREATE_ERRORS) from None
        obj = PoolObject(self._h, name, d["offset"], d["nbytes"], d["generation"], d["host"],
                         True)
        try:
            if data is not None:
                # copies under a hold of the pool (no address a close could unmap meanwhile)
                obj.write(0, mv)
                if not zero and len(mv) < nbytes:
                    obj.write(len(mv), bytes(nbytes - len(mv)))
            if publish or (publish is None and data is not None):
                obj.publish(checksum=bool(checksum if checksum is not None else data is not None))
        except BaseException:
            obj.close()
            try:
                self.destroy(name)
            except KeyError:
                pass  # another process of this host destroyed it: the error is the one above
            raise
        return obj

    def _stuck_error(self, e: OSError, what: str) -> PoolHostStuckError:
        """PoolHostStuckError naming the host whose bakery registers this thread waited for
        (the native call recorded it for this thread)."""
        host = self._h.wait_host()
        try:
            name = self.hosts()[host].name if host >= 0 else ""
        except (OSError, IndexError):
            name = ""
        who = f"host slot {host}" + (f" ({name})" if name else "") if host >= 0 else "a host"
        return PoolHostStuckError(host, f"{what} in pool {self._h.label}: {who} kept its bakery "
                                  "registers unchanged past the pool's lease timeout while "
                                  "alive (a stopped process of it, or words it never wrote), "
                                  "and nothing was created or left held; retry, and if it "
                                  "persists run `cxlkit pool fsck --repair` as that host, or "
                                  "stop it and `cxlkit pool release` it", e.filename)

    def _full_error(self, e: OSError, nbytes: int) -> PoolFullError:
        """PoolFullError naming the limit a create hit: this host's name table, or the data
        region (no free extents for the object)."""
        try:
            st = self.stat()
        except OSError:
            return _typed(e, _CREATE_ERRORS)
        if nbytes <= st.partition_bytes and st.names_host >= st.max_objects:
            why = (f"name table full: host {st.host_id} holds max_objects={st.max_objects} "
                   "names; destroy objects, or create the pool with a larger max_objects")
        else:
            why = (f"pool full: no room for {nbytes} bytes in this host's extents nor in a "
                   f"stretch of free ones (data region {st.partition_bytes} bytes in "
                   f"{st.nextents} extents of {st.extent_bytes}; this host holds "
                   f"{st.extents_held}, {st.extents_free} are free); destroy objects, or see "
                   f"what each host holds: `cxlkit pool hosts {self.path}`")
        return PoolFullError(errno.ENOSPC, why, e.filename)

    def open(self, name: str, *, writable: bool = False) -> PoolObject:
        """A published object of any host, leased until close(). KeyError if no host has
        it; ObjectNotPublished while its creator is still writing it."""
        _check_name(name)
        try:
            d = self._h.open(name)
        except FileNotFoundError:
            raise KeyError(f"object {name!r} not in pool {self._h.label}") from None
        except OSError as e:
            raise _typed(e, _OBJECT_ERRORS) from None
        try:
            return PoolObject(self._h, name, d["offset"], d["nbytes"], d["generation"],
                              d["host"], writable)
        except BaseException:
            self._h.close_object(d["offset"])
            raise

    def destroy(self, name: str) -> None:
        """Remove one of this host's objects; its memory is reused once no reader leases it.
        KeyError if unknown; PermissionError if another host owns it."""
        _check_name(name)
        try:
            self._h.destroy(name)
        except FileNotFoundError:
            raise KeyError(f"object {name!r} not in pool {self._h.label}") from None
        except OSError as e:
            raise _typed(e, _OBJECT_ERRORS) from None

    def __contains__(self, name: str) -> bool:
        try:
            self.info(name)
        except KeyError:
            return False
        return True

    def info(self, name: str) -> ObjectInfo:
        _check_name(name)
        try:
            return ObjectInfo._from(self._h.object_stat(name))
        except FileNotFoundError:
            raise KeyError(f"object {name!r} not in pool {self._h.label}") from None
        except OSError as e:
            raise _typed(e, _OBJECT_ERRORS) from None

    def list(self) -> list[ObjectInfo]:
        """Objects of every host, published or being created, in partition order."""
        try:
            return [ObjectInfo._from(d) for d in self._h.list()]
        except OSError as e:
            raise _typed(e, _OBJECT_ERRORS) from None

    def stat(self) -> PoolStat:
        try:
            s = self._h.stat()  # the C struct, bound as it is
        except OSError as e:
            raise _typed(e, _OBJECT_ERRORS) from None
        return PoolStat(
            path=self._h.label, kind=s.kind, size=s.size, version=s.version,
            uuid=s.uuid.hex(), max_hosts=s.max_hosts, host_id=s.host_id,
            hosts_active=s.hosts_active, coherence=_COHERENCE_NAMES[s.coherence],
            partition_bytes=s.partition_bytes, used_bytes=s.used_bytes,
            free_bytes=s.free_bytes, objects=s.objects, objects_host=s.objects_host,
            max_objects=s.max_objects, align=s.align, nbackings=s.nbackings,
            lease_timeout_s=s.lease_timeout_ns / 1e9, data_offset=s.data_off,
            extent_bytes=s.extent_bytes, nextents=s.nextents,
            extents_held=s.extents_held, extents_free=s.extents_free,
            names_host=s.names_host)

    def hosts(self) -> list[HostInfo]:
        """Every host slot: who holds it, whether it is alive, the extents, bytes and objects
        it holds."""
        try:
            rows = self._h.hosts()
        except OSError as e:
            raise _typed(e, _OBJECT_ERRORS) from None
        return [HostInfo(slot=h.slot, state=_HOST_STATES.get(h.state, "?"),
                         name=h.tag.decode("utf-8", "replace"), pid=h.pid,
                         heartbeat_age_s=(None if h.heartbeat_age_ns < 0
                                          else h.heartbeat_age_ns / 1e9),
                         extents=h.extents, held_bytes=h.held_bytes,
                         used_bytes=h.used_bytes, objects=h.objects) for h in rows]

    def release(self, host: int | str, *, drop: bool = False) -> None:
        """Free a dead host's slot (by slot number or name): its published objects become
        this host's (still readable by name), or with drop=True are dropped; its extents and
        names are freed and the slot can be claimed again. Refused (PoolError) for a live
        host, this host, a free slot, and with drop while a live reader holds its objects."""
        slots = self.hosts()
        if isinstance(host, bool) or not isinstance(host, (int, str)):
            raise TypeError(f"host {host!r}: expected a slot (int) or a host name (str)")
        if isinstance(host, str):
            match = [h.slot for h in slots if h.name == host]
            if not match:
                raise KeyError(f"no host named {host!r} in pool {self._h.label}")
            slot = match[0]
        else:
            slot = host
        if not 0 <= slot < len(slots):
            raise ValueError(f"host slot {slot}: out of range 0..{len(slots) - 1}")
        info = slots[slot]
        try:
            self._h.release(slot, drop)
        except OSError as e:
            if e.errno == errno.ETIMEDOUT:
                raise self._stuck_error(e, f"release of host slot {slot}") from None
            why = {
                errno.EBUSY: (f"host slot {slot} ({info.name or 'unnamed'}) is {info.state}"
                              + (": a live reader holds one of its objects" if drop and
                                 info.state == "dead" else ": only a dead host is released")),
                errno.EINVAL: f"host slot {slot} is this process's own host",
                errno.ENOENT: f"host slot {slot} is free: nothing to release",
                errno.ENOSPC: (f"this host's name table cannot take host {slot}'s "
                               f"{info.objects} objects (max_objects): destroy some, or "
                               "release with drop=True"),
            }.get(e.errno)
            if why is None:
                raise _typed(e, _OBJECT_ERRORS) from None
            raise PoolError(e.errno, why, self._h.label) from None

    def fsck(self, *, repair: bool = True) -> FsckReport:
        """Check every host's part; with repair, rebuild this host's part first (reclaim
        objects of dead creators and unleased dead objects, expire dead processes' leases)."""
        try:
            return FsckReport(**self._h.fsck(repair))
        except OSError as e:
            raise _typed(e, _FSCK_ERRORS) from None


def _check_group(paths: list[str], gid: int) -> None:
    for p in paths:
        try:
            st = os.stat(p)
        except OSError:
            continue
        if os.path.isfile(p) and st.st_gid != gid:
            raise PoolForeignError(errno.EPERM, f"pool file of group {st.st_gid}, not the group "
                                   f"{gid} asked for (owner uid {st.st_uid}, mode "
                                   f"{oct(st.st_mode & 0o7777)})", p)


def _dax_devices() -> str:
    devs = sorted(str(d) for d in Path("/dev").glob("dax*"))
    return ", ".join(devs) if devs else "none"


def _fs_full(path: str, what: str) -> PoolNoSpaceError:
    """The filesystem under a sparse pool file has no room for what it needs next."""
    where = os.path.dirname(os.path.abspath(path)) or "/"
    vfs = os.statvfs(where)
    return PoolNoSpaceError(errno.ENOSPC, f"the filesystem at {where} has no room for {what} "
                            f"({vfs.f_bavail * vfs.f_frsize} bytes free; the pool file is sparse: "
                            "made with overcommit=True, or by an older cxlkit); free space there, "
                            "or make the pool without overcommit", path)


def _file_kind(mode: int) -> str:
    for test, what in ((_stat.S_ISFIFO, "a FIFO"), (_stat.S_ISSOCK, "a socket"),
                       (_stat.S_ISBLK, "a block device"), (_stat.S_ISCHR, "a character device"),
                       (_stat.S_ISDIR, "a directory"), (_stat.S_ISLNK, "a symbolic link"),
                       (_stat.S_ISREG, "a regular file")):
        if test(mode):
            return what
    return "not a regular file"


def _not_a_pool(path: str) -> str | None:
    """Why what is at path can be neither a pool file nor a devdax device, or None when it
    may be one (a regular file, a dax device) or is not there."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if _stat.S_ISLNK(st.st_mode):
        target = os.path.realpath(path)
        if os.path.islink(target):
            return f"a symbolic link that never ends (a loop through {target}): not a pool"
        inner = _not_a_pool(target)  # None: a pool file or device may be there, or nothing
        return None if inner is None else f"a symbolic link to {target}: {inner}"
    if _stat.S_ISCHR(st.st_mode) and not os.path.basename(path).startswith("dax"):
        return (f"a character device that is not a devdax device (dax devices present: "
                f"{_dax_devices()}), not a pool")
    if _stat.S_ISREG(st.st_mode) or _stat.S_ISCHR(st.st_mode):
        return None
    return f"{_file_kind(st.st_mode)}, not a pool file or device"


def _superblock_why(path: str) -> str:
    """The broken field of a pool file's superblock, as the probe names it ("" if unknown)."""
    try:
        return _native.pool_probe(path)["why"]
    except OSError:
        return ""


def _open_error(e: OSError, paths: list[str], nbytes: int, slot: int,
                existed: list[bool] | None = None) -> OSError:
    path = e.filename or paths[0]
    if e.errno in (errno.ENODEV, errno.ENXIO, errno.ENOENT, errno.ELOOP, errno.EINVAL):
        why = _not_a_pool(path)
        if why is not None:
            return PoolFormatError(e.errno, why, path)
    if e.errno == errno.EBADMSG:
        why = _superblock_why(path)
        if why:
            return PoolCorruptError(e.errno, f"corrupt pool superblock: {why}; nothing was "
                                    "written. If its objects are not needed, remove it "
                                    f"(`cxlkit pool rm --force {path}`)", path)
    if e.errno == errno.EPERM and os.path.isfile(path):
        st = os.stat(path)
        return PoolForeignError(e.errno, f"pool file owned by uid {st.st_uid} (gid {st.st_gid}) "
                                f"with mode {oct(st.st_mode & 0o7777)}: only a file of this "
                                f"user (uid {os.geteuid()}) that no other user can write is "
                                "opened; pass group= to share one with a group", path)
    if e.errno in (errno.ENOSPC, errno.EDQUOT) and existed and any(existed):
        return _fs_full(path, "the blocks of its metadata (host slots, names, leases)")
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        where = os.path.dirname(os.path.abspath(path)) or "/"
        free = os.statvfs(where).f_bavail * os.statvfs(where).f_frsize
        return PoolNoSpaceError(errno.ENOSPC, f"{nbytes} bytes do not fit the filesystem at "
                                f"{where} ({free} bytes free); overcommit=True makes the file "
                                "sparse and reserves each extent when a host claims it", path)
    if e.errno == errno.ENOENT and path.startswith("/dev/") and not path.startswith("/dev/shm/"):
        return FileNotFoundError(e.errno, f"not a device: a pool under /dev must be an existing "
                                 f"device (dax devices present: {_dax_devices()})", path)
    if e.errno == errno.ENODEV and path.startswith("/dev/"):
        return PoolFormatError(e.errno, "a regular file where only devices live: not a pool",
                               path)
    if e.errno == errno.EPROTONOSUPPORT:
        found = _format_version(path)
        what = ("version 1 (fixed per-host partitions, made by an older cxlkit)" if found == 1
                else f"version {found}")
        if found == 1:
            return PoolVersionError(e.errno, f"pool format {what}: left the pool unchanged; "
                                    f"`cxlkit pool upgrade {path}` converts it to version "
                                    f"{_native.POOL_FORMAT_VERSION} in place (every object "
                                    "kept) once no host of it is running", path)
        return PoolVersionError(e.errno, f"pool format {what}: this cxlkit reads version "
                                f"{_native.POOL_FORMAT_VERSION} only and left the pool "
                                "unchanged; read its objects with the cxlkit that made it and "
                                "copy them into a new pool, or, if they are not needed, remove "
                                f"it (`cxlkit pool rm --force {path}`) and it is made anew", path)
    if e.errno == errno.EBUSY:
        why = (f"host slot {slot} belongs to another host (its name differs)" if slot >= 0
               else "no host slot is free (every slot belongs to another host, or was lost "
               "to one claiming it at the same time)")
        return PoolError(e.errno, f"{why}: see them with `cxlkit pool hosts {path}` and free a "
                         f"dead one with `cxlkit pool release {path} HOST`", path)
    if e.errno == errno.ENOTRECOVERABLE:
        where = f"host slot {slot}" if slot >= 0 else "this host's slot"
        return PoolCorruptError(e.errno, f"{where}: its lock in the pool is damaged (not "
                                "recoverable): `cxlkit pool fsck --repair` resets it", path)
    return _typed(e, _OPEN_ERRORS)


def _format_version(path: str) -> int | None:
    """The format version a pool file's superblock names (the u32 at offset 8 in every
    version), or None when it cannot be read."""
    try:
        with open(path, "rb") as f:
            head = f.read(12)
    except OSError:
        return None
    return int.from_bytes(head[8:12], "little") if len(head) == 12 else None


@dataclass(frozen=True)
class RemovedPool:
    """What remove() deleted: the pool file, its size, its host slots in use and not."""
    path: str
    size: int
    hosts_live: int
    hosts_dead: int
    damaged: str | None = None  # why its superblock could not be checked (force=True)


def remove(path_or_name: str | os.PathLike[str], *, force: bool = False) -> RemovedPool:
    """Delete a pool file (the shm_unlink of pools) once it is proven one: a regular file (a
    symbolic link is not followed) whose superblock has the pool magic and a valid checksum
    and geometry, read without mapping it. Processes that map it keep it until they close.

    Refused, nothing removed: FileNotFoundError if there is none; PoolFormatError for
    anything that is not a pool (no magic, a link, a FIFO, a device: devices are never
    removed, ValueError for memfd and /dev/dax names); PoolError (EBUSY) while a host uses it
    (a process of this machine holds one of its slots open, or a host of another machine beat
    within the lease timeout) unless force; PoolCorruptError / PoolVersionError when the
    magic is there but the checksum or geometry is broken, or the version is unknown, unless
    force (it cannot be proven a pool; with force it is removed as one)."""
    path = resolve(path_or_name)
    if path.startswith("memfd:") or path.startswith("/dev/dax"):
        raise ValueError(f"pool {path}: only pool files can be removed")
    d = _probe(path)
    damaged = _unprovable(path, d, force)
    if d["hosts_live"] and not force:
        raise PoolError(errno.EBUSY, f"in use by {d['hosts_live']} live host(s) (see them with "
                        f"`cxlkit pool hosts {path}`): nothing removed; stop them first, or "
                        "force it (`cxlkit pool rm --force`, or force=True): their mappings "
                        "keep the memory, new opens find no pool", path)
    st = os.lstat(path)
    if (st.st_dev, st.st_ino) != (d["dev"], d["ino"]):
        raise PoolError(errno.ESTALE, "replaced while it was being checked: nothing removed; "
                        "run it again", path)
    os.unlink(path)
    return RemovedPool(path, d["size"], d["hosts_live"], d["hosts_dead"], damaged)


def _probe(path: str) -> dict[str, Any]:
    """The native probe of path; what is not a regular file is a typed refusal."""
    try:
        return _native.pool_probe(path)
    except FileNotFoundError:
        raise FileNotFoundError(errno.ENOENT, "no pool file there: nothing removed", path) \
            from None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise PoolFormatError(e.errno, f"a symbolic link to {os.path.realpath(path)}, not a "
                                  "pool file: nothing removed (a link is never followed); "
                                  "delete the link with rm(1), or name the pool file", path) \
                from None
        if e.errno == errno.ENODEV:
            why = _not_a_pool(path) or "not a regular file"
            raise PoolFormatError(e.errno, f"{why}: nothing removed", path) from None
        raise


def _unprovable(path: str, d: dict[str, Any], force: bool) -> str | None:
    """None for a whole superblock; else why it cannot be proven a pool, which only force
    accepts (and only with the pool magic in place)."""
    err = d["superblock"]
    if err == 0:
        return None
    if err == errno.EMEDIUMTYPE:
        raise PoolFormatError(err, "not a cxlkit pool (no pool superblock): nothing removed",
                              path)
    why = {errno.EBADMSG: f"corrupt superblock ({d['why']})",
           errno.ENXIO: "shorter than the pool its superblock describes (truncated)",
           errno.EPROTONOSUPPORT: f"format version {d['version']}, which this cxlkit cannot "
                                  "check"}.get(err, os.strerror(err))
    if force:
        return why
    cls = PoolVersionError if err == errno.EPROTONOSUPPORT else PoolCorruptError
    raise cls(err, f"pool magic found but {why}: it cannot be proven a pool, nothing removed; "
              "remove it anyway with `cxlkit pool rm --force`, or force=True", path)


# cxlkit's other files in /dev/shm: subgroup manifests and lock files, a pool's temporary
_NOT_POOLS = (".json", ".lock")


def embedded_pools(shm: str | os.PathLike[str] = _SHM) -> list[Path]:
    """Pool files in /dev/shm (or shm) named cxlkit-*: every such regular file but cxlkit's
    manifests, lock files and temporaries (a pool whose superblock is damaged is listed)."""
    d = Path(shm)
    if not d.is_dir():
        return []
    return sorted(p for p in d.glob("cxlkit-*") if p.is_file() and ".tmp." not in p.name
                  and not p.name.endswith(_NOT_POOLS))
