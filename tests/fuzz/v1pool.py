"""A writer of version 1 pools for tests (the format of main before 8631d84: fixed per-host
partitions; docs/pool-format.md, "Upgrading a version 1 pool"), so upgrade and the v1 checks
run without the old build. Layout, name hash and name-table probe order follow the v1 code;
mutexes stay zero (upgrade re-creates every slot's lock, a v1 open of these is not needed)."""
from __future__ import annotations

import os
import struct
import time

from harness import crc32c

MAGIC = 0x4C4F4F504B4C5843
OBJ_MAGIC = 0x4F4B5843
HDR = 320
LINE = 64
MIN_BLOCK = HDR + LINE
BOOT_FRESH = 1


def round_up(v: int, a: int) -> int:
    return (v + a - 1) // a * a


def _next_prime(n: int) -> int:
    def prime(k: int) -> bool:
        return k >= 2 and all(k % d for d in range(2, int(k ** 0.5) + 1))
    while not prime(n):
        n += 1
    return n


def name_hash(name: bytes) -> int:
    m = (1 << 64) - 1
    h = 0xCBF29CE484222325
    for b in name:
        h = ((h ^ b) * 0x100000001B3) & m
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & m
    h ^= h >> 33
    h = (h * 0xC4CEB9FE1A85EC53) & m
    return h ^ (h >> 33)


def geometry(total: int, hosts: int = 4, lease_slots: int = 1024) -> dict:
    meta0 = 4096 + hosts * 4096
    max_objects = max(256, (total - meta0) // hosts // 16384)
    buckets = (max_objects + max_objects // 4 + 3) // 4 + 1
    share = [buckets // 2, buckets // 4, buckets // 8, buckets // 8]
    lb = [_next_prime(max(2, s)) for s in share]
    g = dict(total=total, hosts=hosts, lease_slots=lease_slots, level_buckets=lb,
             name_slots=sum(lb) * 4, max_objects=max_objects, names_off=meta0)
    g["names_bytes"] = round_up(g["name_slots"] * 32, 4096)
    g["leases_off"] = meta0 + hosts * g["names_bytes"]
    g["leases_bytes"] = round_up(lease_slots * 32, 4096)
    g["data_off"] = round_up(g["leases_off"] + hosts * g["leases_bytes"], 65536)
    g["partition_bytes"] = (total - g["data_off"]) // hosts // 65536 * 65536
    assert g["partition_bytes"] >= 65536, "too small for a v1 pool"
    return g


def superblock(g: dict, timeout_ns: int = 10 * 10**9) -> bytes:
    lb = g["level_buckets"] + [0] * 4
    sb = struct.pack("<QIIQ16sIIII8IQQQQQQQQQQQIIQq", MAGIC, 1, 4096, g["total"],
                     os.urandom(16), g["hosts"], 4096, 4, 4, *lb, g["name_slots"],
                     g["max_objects"], g["lease_slots"], 4096, g["names_off"], g["names_bytes"],
                     g["leases_off"], g["leases_bytes"], g["data_off"], g["partition_bytes"],
                     0, 1, 0, timeout_ns, time.time_ns())
    assert len(sb) == 200
    return sb + struct.pack("<Q", (1 << 32) | crc32c(sb))


def _name_slot(g: dict, table: dict[int, int], h: int) -> int:
    lb = g["level_buckets"]
    base = [sum(lb[:level]) * 4 for level in range(4)]
    for level in range(3):
        first = base[level] + (h % lb[level]) * 4
        for s in range(4):
            if first + s not in table:
                return first + s
    nb = lb[3]
    for i in range(nb):
        first = base[3] + ((h % nb + i) % nb) * 4
        for s in range(4):
            if first + s not in table:
                return first + s
    raise ValueError("v1 name table full")


def write_pool(path: str, total: int, objects: dict[int, list[tuple[str, bytes]]], *,
               hosts: int = 4, alive: set[int] = frozenset(), fill_last: bool = False,
               tags: dict[int, str] | None = None, checksum: bool = False) -> dict:
    """A v1 pool file at path: host h (a key of objects) attached once (dead unless in
    alive) and published objects[h] = [(name, payload), ...] in its partition, then a FREE
    block to the partition's end; fill_last: the last object's block reaches that end;
    checksum: each payload published with its crc32c (flags bit 0). Returns the geometry."""
    g = geometry(total, hosts)
    buf = bytearray(total)
    buf[0:208] = superblock(g)
    P, now = g["partition_bytes"], time.time_ns()
    for h in range(hosts):
        slot = 4096 + h * 4096
        used = h in objects
        if used:
            tag = (tags or {}).get(h, f"v1-host-{h}").encode()
            buf[slot:slot + len(tag)] = tag
            beat = now if h in alive else now - 3600 * 10**9
            struct.pack_into("<QqQQ", buf, slot + 32, 0xB007 + h, beat, 1, 0)
        else:
            struct.pack_into("<Q", buf, slot + 32, BOOT_FRESH)
        start = g["data_off"] + h * P
        off, prev, table = start, 0, {}
        items = objects.get(h, [])
        for i, (name, data) in enumerate(items):
            nm = name.encode()
            bb = round_up(HDR + len(data), LINE)
            if fill_last and i == len(items) - 1:
                bb = start + P - off
            sumv = (1 << 32) | crc32c(data) if checksum else 0
            struct.pack_into("<IIQQQQQqIHH", buf, off, OBJ_MAGIC, 2, bb, prev, len(data), i + 1,
                             sumv, now, 4242, len(nm), int(checksum))
            buf[off + 64:off + 64 + len(nm)] = nm
            buf[off + HDR:off + HDR + len(data)] = data
            hh = name_hash(nm)
            e = _name_slot(g, table, hh)
            table[e] = off
            struct.pack_into("<QQQII", buf, g["names_off"] + h * g["names_bytes"] + e * 32,
                             hh, off, i + 1, 2, 2)
            prev, off = bb, off + bb
        if off < start + P:
            assert start + P - off >= MIN_BLOCK
            struct.pack_into("<IIQQ", buf, off, OBJ_MAGIC, 0, start + P - off, prev)
        if used:
            struct.pack_into("<Q", buf, slot + 192 + 40, len(items) + 1)  # next_gen
    with open(path, "wb") as f:
        f.write(buf)
    os.chmod(path, 0o600)
    return g
