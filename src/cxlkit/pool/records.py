"""The pool's records as a caller sees them: an object's info, the pool's stat, a host slot,
and what fsck found."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

_STATES = {1: "creating", 2: "live", 3: "dead"}


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
