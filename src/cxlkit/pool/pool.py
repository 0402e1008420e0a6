"""The shared memory pool: named objects in one memory range that processes and hosts map
together (a file on tmpfs/hugetlbfs, a devdax device, memfd memory, or several backings
striped into one range). Layout and protocol: docs/pool-format.md."""
from __future__ import annotations

import errno
import os
from collections.abc import Sequence
from typing import Any

from .. import _native
from ..units import parse_size
from .._views import Views
from ..errors import (_CREATE_ERRORS, _OBJECT_ERRORS, _OPEN_ERRORS, PoolCorruptError,
                      PoolError, PoolFullError, PoolGeometryError, PoolHostStuckError,
                      PoolReadOnlyWarning, StaleObjectError, _typed)
from .diagnose import _check_group, _fs_full, _open_error
from .options import _COHERENCE, MiB, OpenOptions, _check_name, open_options
from .records import FsckReport, HostInfo, ObjectInfo, PoolStat

# fsck: the object errors of its walk and repair, and a truncated pool file (ENXIO)
_FSCK_ERRORS = {**_OBJECT_ERRORS, errno.ENXIO: _OPEN_ERRORS[errno.ENXIO]}


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
                 lease_slots: int | None = None, lease_timeout: float | None = None,
                 overcommit: bool = False, repair: bool = False,
                 lease_timeout_ms: int | None = None) -> None:
        """lease_timeout: seconds a stalled host keeps its slot and leases (lease_timeout_ms,
        the same in milliseconds, is deprecated)."""
        o = open_options(path_or_name, size, host_id=host_id, coherence=coherence,
                         create=create, exclusive=exclusive, force=force, max_hosts=max_hosts,
                         max_objects=max_objects, numa_node=numa_node, mode=mode, group=group,
                         lease_slots=lease_slots, lease_timeout=lease_timeout,
                         lease_timeout_ms=lease_timeout_ms, overcommit=overcommit,
                         repair=repair)
        self._open(o)
        self.paths = o.paths
        self.path = o.paths[0]
        self.coherence = o.coherence
        # a version 1 pool is a read-only view (list/stat/open/read); say so once
        self.read_only = self._h.version == 1  # learnt at open: no extra call
        if self.read_only:
            import warnings

            warnings.warn(PoolReadOnlyWarning(
                f"pool {self.path} is format version 1 (fixed per-host partitions): opened "
                f"read-only (list, stat, open, read; writes raise PoolReadOnlyError); "
                f"`cxlkit pool upgrade {self.path}` converts it to version "
                f"{_native.POOL_FORMAT_VERSION} in place, every object kept"), stacklevel=2)

    def _open(self, o: OpenOptions) -> None:
        """Open (or create) the backings: a pool that existed is checked against the geometry
        asked for; files this call created join the group of a shared pool."""
        paths, gid = o.paths, o.gid
        existed = [os.path.exists(p) for p in paths]
        if gid is not None:
            _check_group(paths, gid)
        try:
            self._h = _native.PoolHandle(
                paths, o.flags, o.slot, o.tag, _COHERENCE[o.coherence], o.numa_node, o.nbytes,
                o.max_hosts, o.mode, o.max_objects, o.lease_slots, o.lease_timeout_ms)
        except OSError as e:
            raise _open_error(e, paths, o.nbytes, o.slot, existed) from None
        if any(existed) and not paths[0].startswith("/dev/dax"):
            self._check_geometry(o.nbytes, o.max_hosts)
        if gid is not None:
            for p, was in zip(paths, existed):
                if not was and not p.startswith("memfd:"):
                    os.chown(p, -1, gid)

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
    def create(self, name: str, nbytes: int | str | None = None, *, data: Any = None,
               publish: bool | None = None, checksum: bool | None = None,
               zero: bool = True) -> PoolObject:
        """Reserve name and allocate nbytes (an int or a size such as "4K") in this host's
        partition; returns the writable, zeroed object. With data (bytes-like), nbytes
        defaults to its length, the data is copied in and the object published. publish=True publishes at once; otherwise call
        obj.publish() when the payload is written. zero=False skips zeroing the payload (it
        holds a destroyed object's old bytes): the caller writes every byte before publishing
        (with data, only the bytes past it are zeroed). Nobody else can read the object
        before it is published, and if this process dies first the pool reclaims it."""
        _check_name(name)
        if isinstance(nbytes, str):
            nbytes = parse_size(nbytes, "nbytes")
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
            d = self._h.create(name, nbytes, 0 if zero else _native.OBJ_NOZERO)  # ObjectInfo
        except OSError as e:
            if e.errno == errno.ENOSPC:
                raise self._full_error(e, nbytes) from None
            if e.errno == errno.EDQUOT:
                raise _fs_full(self.path, f"the {nbytes} bytes of object {name!r}") from None
            if e.errno == errno.ETIMEDOUT:
                raise self._stuck_error(e, f"create of object {name!r}") from None
            raise _typed(e, _CREATE_ERRORS) from None
        obj = PoolObject(self._h, name, d.offset, d.nbytes, d.generation, d.host, True)
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
        it; ObjectNotPublishedError while its creator is still writing it."""
        _check_name(name)
        try:
            d = self._h.open(name)
        except FileNotFoundError:
            raise KeyError(f"object {name!r} not in pool {self._h.label}") from None
        except OSError as e:
            raise _typed(e, _OBJECT_ERRORS) from None
        try:
            return PoolObject(self._h, name, d.offset, d.nbytes, d.generation, d.host,
                              writable)
        except BaseException:
            self._h.close_object(d.offset)
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
            return self._h.object_stat(name)
        except FileNotFoundError:
            raise KeyError(f"object {name!r} not in pool {self._h.label}") from None
        except OSError as e:
            raise _typed(e, _OBJECT_ERRORS) from None

    def list(self) -> list[ObjectInfo]:
        """Objects of every host, published or being created, in partition order."""
        try:
            return self._h.list()
        except OSError as e:
            raise _typed(e, _OBJECT_ERRORS) from None

    def stat(self) -> PoolStat:
        """Geometry and usage (records.PoolStat: the C struct itself, read-only)."""
        try:
            return self._h.stat()
        except OSError as e:
            raise _typed(e, _OBJECT_ERRORS) from None

    def hosts(self) -> list[HostInfo]:
        """Every host slot: who holds it, whether it is alive, the extents, bytes and objects
        it holds."""
        try:
            return self._h.hosts()
        except OSError as e:
            raise _typed(e, _OBJECT_ERRORS) from None

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
            return self._h.fsck(repair)
        except OSError as e:
            raise _typed(e, _FSCK_ERRORS) from None
