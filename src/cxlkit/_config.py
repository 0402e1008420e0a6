"""The one table of CXLKIT_* environment variables, read in one place."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

# name -> (default, meaning); docs/config.md lists the same table for users.
ENV: dict[str, tuple[str, str]] = {
    "CXLKIT_SYSFS_ROOT": ("/sys", "root of sysfs (tests point it at a fixture tree)"),
    "CXLKIT_PROCFS_ROOT": ("/proc", "root of procfs (numa_maps for audit)"),
    "CXLKIT_FAULT": ("", "name:nth:errno[,...]: fail the nth call of a syscall (tests)"),
    "CXLKIT_HOST_ID": ("", "host id in a shared pool (default: derived from the machine id)"),
    "CXLKIT_POOL": ("cxlkit-default", "the embedded pool: /dev/shm/<name> or a path"),
    "CXLKIT_SIMD": ("", "force a SIMD level for kernels: scalar, avx2, avx512 or avx512bf16"),
    "CXLKIT_COHERENCE": ("host", "how pools are opened: host (one coherence domain) or none "
                                 "(hosts that do not share caches: flush and invalidate), or "
                                 "sim (none, on a simulated cache per host id: tests)"),
    # ---- the non-coherence simulator (read by the native library) ----
    "CXLKIT_SIM_SEED": ("1", "seed of the simulator's evictions (coherence sim)"),
    "CXLKIT_SIM_EVICT": ("0.25", "chance per flush/invalidate of one random eviction (sim)"),
    "CXLKIT_SIM_DIR": ("/dev/shm", "where the simulator keeps each host's view of a pool"),
    # messaging (cxlkit.msg; the native library reads the CXLKIT_MSG_* ones itself)
    "CXLKIT_RANK": ("", "this process's rank in a cxlkit.msg job (else the MPI launcher's)"),
    "CXLKIT_SIZE": ("", "ranks in the job (else the MPI launcher's)"),
    "CXLKIT_JOB": ("", "job name: ranks with the same name on one pool form one job"),
    "CXLKIT_MSG_CELL_BYTES": ("4096", "ring cell size of a job's rings"),
    "CXLKIT_MSG_CELLS": ("64", "cells per ring"),
    "CXLKIT_MSG_EAGER": ("", "largest eager message (default: what one ring cell carries, 4032; "
                                 "at most half a ring)"),
    "CXLKIT_MSG_TIMEOUT_MS": ("", "fail any wait after this long (default: only dead peers)"),
    "CXLKIT_MSG_DEAD_MS": ("5000", "a rank of another machine silent this long is dead"),
    "CXLKIT_MSG_SPIN_US": ("", "a wait spins this long before giving the CPU away (default "
                               "200; forever: never does); rings, messaging and RPC"),
    "CXLKIT_MSG_YIELD_US": ("", "then yields between polls this long before sleeping "
                                "(default 0; forever: never sleeps)"),
    "CXLKIT_MSG_SLEEP_US": ("", "then sleeps between polls, each sleep 1/16 of the time waited, "
                                "at most this long (default 50; 0: keeps yielding)"),
    # ---- libcxlkit_preload.so reads these itself (cxlkit.preload names them) ----
    "CXLKIT_STRIPE": ("", "node:weight[,...]: stripes of a program's large mappings (preload)"),
    "CXLKIT_STRIPE_CHUNK": ("2097152", "stripe chunk in bytes (preload)"),
    "CXLKIT_MIN_SIZE": ("2097152", "smallest mapping or malloc block placed (preload)"),
    "CXLKIT_PRELOAD_LOG": ("", "path or stderr: log each placement decision (preload)"),
    "CXLKIT_PRELOAD_LIB": ("", "libcxlkit_preload.so to use (default: beside cxlkit._native)"),
    "CXLKIT_PRELOAD_FAULT": ("", "mbind:N:errno: fail the library's Nth mbind (tests)"),
    "CXLKIT_PRELOAD_CACHE": ("67108864", "bytes of freed placed malloc blocks kept (0: off)"),
    "CXLKIT_PRELOAD_CACHE_COUNT": ("16", "freed placed malloc blocks kept, at most 256"),
}


@dataclass(frozen=True)
class Config:
    sysfs_root: Path
    procfs_root: Path
    host_id: str
    pool: str
    simd: str
    coherence: str


def config() -> Config:
    """Read the environment now (cheap; tests change it between calls)."""

    def get(name: str) -> str:
        return os.environ.get(name, ENV[name][0])

    return Config(
        sysfs_root=Path(get("CXLKIT_SYSFS_ROOT")),
        procfs_root=Path(get("CXLKIT_PROCFS_ROOT")),
        host_id=get("CXLKIT_HOST_ID"),
        pool=get("CXLKIT_POOL"),
        simd=get("CXLKIT_SIMD"),
        coherence=get("CXLKIT_COHERENCE"),
    )
