"""The preload library's own record of the ranges it placed (native/preload/registry.c): a
memfd named "cxlkit-stripes" in the process, found through /proc/PID/fd and read without
trusting it; and the node of each page of a range of another process (move_pages(2) with no
target nodes: a query, nothing moves). cxlkit.placement.preload's audit judges each placed range by its
own chunk grid with these, so adjacent placed mappings the kernel merged into one VMA are
still judged one by one."""
from __future__ import annotations

import ctypes
import os
import struct
import time
from array import array
from dataclasses import dataclass
from pathlib import Path

from ..errors import RegistryError

MAGIC = b"CXLKSTR1"
HEADER = struct.Struct("<8sIIQQQQ16x")  # magic, version, record size, capacity, used, gen,
#                                         dropped, spare: 64 bytes
RECORD = struct.Struct("<QQQQ")  # origin, start, end, kind
MAX_CAPACITY = 1 << 20  # far above the library's 65536: a larger one is not the library's
NAME = "/memfd:cxlkit-stripes"
SYS_MOVE_PAGES = {"x86_64": 279, "aarch64": 239}
BATCH = 1 << 16


@dataclass(frozen=True)
class Placement:
    origin: int  # chunk 0 of the placement starts here
    start: int
    end: int


@dataclass
class Registry:
    path: str
    placements: list[Placement]
    dropped: int  # placements the library could not record (full)
    skipped: int  # records that failed the checks here


def find(pid: int, procfs_root: Path) -> Path | None:
    """/proc/PID/fd/N of the registry, or None when the process has none (nothing placed
    yet, an older library, or the program closed the descriptor)."""
    fd_dir = procfs_root / str(pid) / "fd"
    try:
        entries = list(fd_dir.iterdir())
    except FileNotFoundError:
        raise ProcessLookupError(3, f"no process {pid}", str(fd_dir.parent)) from None
    for e in entries:
        try:
            if os.readlink(e).startswith(NAME):
                return e
        except OSError:
            continue  # closed meanwhile, or not ours to read
    return None


def _header(raw: bytes, path: Path) -> tuple[int, int, int, int]:
    if len(raw) < HEADER.size:
        raise RegistryError(f"{path}: {len(raw)} bytes, shorter than the header")
    magic, version, rsize, capacity, used, gen, dropped = HEADER.unpack_from(raw)
    if magic != MAGIC or version != 1 or rsize != RECORD.size:
        raise RegistryError(f"{path}: magic {magic!r} version {version} record size {rsize}: "
                            "not a cxlkit-stripes registry of version 1")
    if not 0 < capacity <= MAX_CAPACITY or used > capacity:
        raise RegistryError(f"{path}: capacity {capacity}, used {used}: out of range")
    return used, gen, dropped, capacity


def parse(path: Path, raw_header: bytes, raw_records: bytes, page: int) -> Registry:
    """Check and decode (the bytes read under one even generation)."""
    used, _, dropped, _ = _header(raw_header, path)
    out, skipped = [], 0
    for i in range(min(used, len(raw_records) // RECORD.size)):
        origin, start, end, kind = RECORD.unpack_from(raw_records, i * RECORD.size)
        if (kind != 1 or not origin <= start < end < 1 << 57
                or (origin | start | end) % page):
            skipped += 1
            continue
        out.append(Placement(origin, start, end))
    out.sort(key=lambda p: p.start)
    return Registry(str(path), out, dropped, skipped)


def read(path: Path, page: int, *, tries: int = 200) -> Registry:
    """The records of a live registry, read between two equal even generations (the library
    makes gen odd while it edits). RegistryError when malformed or never quiet."""
    fd = os.open(path, os.O_RDONLY)
    try:
        for _ in range(tries):
            head = os.pread(fd, HEADER.size, 0)
            used, gen, _, _ = _header(head, path)
            if gen % 2 == 0:
                body = os.pread(fd, used * RECORD.size, HEADER.size)
                if _header(os.pread(fd, HEADER.size, 0), path)[1] == gen:
                    return parse(path, head, body, page)
            time.sleep(0.001)
    finally:
        os.close(fd)
    raise RegistryError(f"{path}: the library kept editing it ({tries} tries)")


_libc = None


def page_nodes(pid: int, start: int, end: int, page: int) -> array:
    """The node of each page of [start, end) in process pid; a negative value is -errno for
    a page not present (-ENOENT) or not mapped (-EFAULT). OSError when the kernel refuses
    (EPERM: another user's process; ENOSYS: no NUMA)."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    nr = SYS_MOVE_PAGES.get(os.uname().machine)
    if nr is None:
        raise OSError(38, f"move_pages: syscall number unknown on {os.uname().machine}")
    status = array("i")
    for lo in range(start, end, BATCH * page):
        addrs = array("Q", range(lo, min(end, lo + BATCH * page), page))
        st = array("i", bytes(4 * len(addrs)))
        pa, _ = addrs.buffer_info()
        ps, _ = st.buffer_info()
        r = _libc.syscall(ctypes.c_long(nr), ctypes.c_long(pid), ctypes.c_ulong(len(addrs)),
                          ctypes.c_void_p(pa), ctypes.c_void_p(None), ctypes.c_void_p(ps),
                          ctypes.c_int(0))
        if r < 0:
            e = ctypes.get_errno()
            raise OSError(e, f"move_pages(pid {pid}): {os.strerror(e)}")
        status.extend(st)
    return status
