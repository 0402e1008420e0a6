"""The pool's records as a caller sees them: an object's info, the pool's stat, a host slot,
and what fsck found.

Each is the native library's C struct itself (cxk_obj_stat, cxk_pool_stat, cxk_pool_host,
cxk_fsck_report), bound with read-only attributes converted when read: nothing is copied
between the library's answer and what the caller holds. They are frozen (setting an
attribute raises AttributeError), compare equal and hash by their fields, print as
`PoolStat(path=..., ...)`, list their fields in `_fields`, and `as_dict()` gives the fields
as a JSON-ready dict.

ObjectInfo: name, nbytes, offset (of the payload from the pool base, the same in every
process), host (the owner's slot), generation, state ("creating", "live" or "dead"),
checksum (crc32c of the payload when recorded, else None), created (seconds since the epoch),
created_ns (the same, exact: KV recency compares them); `.live`: published.

PoolStat: path, kind ("file", "devdax", "memfd", "striped"), size, version, uuid (hex),
max_hosts, host_id, hosts_active, coherence ("host", "none", "sim"), partition_bytes (the
data region [data_offset, data_offset + partition_bytes), which one host may fill),
used_bytes / free_bytes (this host: used + free == extents_held * extent_bytes), objects
(published, every host), objects_host, max_objects (names per host), align, nbackings,
lease_timeout_s, data_offset, extent_bytes, nextents, extents_held (this host),
extents_free (held by no host), names_host (this host's names in use).

HostInfo: slot, state ("free", "live", "dead", "claimed"), name, pid (0: none),
heartbeat_age_s (None: neither a heartbeat nor a claim), extents, held_bytes, used_bytes,
objects (published), as the host last wrote them.

FsckReport: the counts of cxk_fsck_report and `.clean` (no broken chains, dangling entries
or duplicates, no host counters that contradict their chain, no bakery registers no host
writes). `FsckReport(**counts)` builds one, the counts not given being 0."""
from __future__ import annotations

from .. import _native

ObjectInfo = _native.ObjectInfo
PoolStat = _native.PoolStat
HostInfo = _native.HostInfo
FsckReport = _native.FsckReport

__all__ = ["ObjectInfo", "PoolStat", "HostInfo", "FsckReport"]
