"""Test helpers that ship with cxlkit: fault injection into the native syscall layer."""
from __future__ import annotations

import errno as _errno
from collections.abc import Iterator
from contextlib import contextmanager

from . import _native

SYSCALLS = ("mbind", "set_mempolicy", "get_mempolicy", "move_pages", "migrate_pages",
            "memfd_create", "mmap", "munmap", "madvise", "open", "ftruncate", "fstat", "prctl",
            "fcntl", "pthread_create",
            "futex")  # the rings' same-host wake-up


@contextmanager
def inject_fault(name: str, nth: int = 1, err: int | str = _errno.ENOMEM) -> Iterator[None]:
    """Within the block, the nth call of syscall `name` (counted from entry) fails with err
    (a number or a name such as "EPERM"). Disarmed on exit."""
    code = getattr(_errno, err) if isinstance(err, str) else err
    _native.fault_inject(name, nth, code)
    try:
        yield
    finally:
        _native.fault_inject(name, 0, 0)


def syscall_count(name: str) -> int:
    """Calls of syscall `name` made through cxlkit since it loaded."""
    return _native.fault_calls(name)


# ---- protocol mutations (testing builds only) and the non-coherence simulator ----------
MUTATIONS = ("publish_payload_flush", "read_invalidate", "ring_head_flush", "counter_writeback")
# Protocol mutations and crash points are compiled only into a testing build (the Makefile's
# `make build`: CMake option CXLKIT_TESTING); a release wheel has neither.
TESTING_BUILD: bool = bool(_native.testing_build)


@contextmanager
def mutate(name: str) -> Iterator[None]:
    """Within the block, one step of a coherence protocol is removed on purpose (MUTATIONS):
    tests show that coherence="sim" catches the missing step and coherent memory does not.
    RuntimeError in a release build, which has no mutations."""
    if name not in MUTATIONS:
        raise ValueError(f"mutation {name!r}: expected one of {', '.join(MUTATIONS)}")
    if not TESTING_BUILD:
        raise RuntimeError(f"mutation {name!r}: this cxlkit is a release build without "
                           "protocol mutations; build it with -DCXLKIT_TESTING=ON (make build)")
    _native.mutate(name, True)
    try:
        yield
    finally:
        _native.mutate(name, False)


def sim_counts() -> dict[str, int]:
    """What the simulator did in this process: lines written back, fetched, randomly evicted,
    and lines of streaming stores."""
    wb, fetched, evicted, nt = _native.sim_counts()
    return {"writebacks": wb, "fetches": fetched, "evictions": evicted, "nt_lines": nt}
