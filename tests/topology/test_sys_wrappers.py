"""The syscalls moved behind native/sys/ keep their error paths reachable through
the fault-injection hook, and the one sysfs reader honours CXLKIT_SYSFS_ROOT (adam teams read
/sys directly before)."""
import os

import numpy as np
import pytest

import cxlkit
from cxlkit import _native
from cxlkit import placement as P
from cxlkit.testing import inject_fault
from cxlkit.train.adam import AdamTeam


def test_an_adam_team_reads_node_cpus_under_CXLKIT_SYSFS_ROOT(tmp_path, monkeypatch):
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        pytest.skip("needs two CPUs this process may run on")
    d = tmp_path / "devices/system/node/node0"
    d.mkdir(parents=True)
    (d / "cpulist").write_text(f"{allowed[-1]}\n")
    (d / "distance").write_text("10\n")
    (tmp_path / "devices/system/node/has_memory").write_text("0\n")
    monkeypatch.setenv("CXLKIT_SYSFS_ROOT", str(tmp_path))
    team = AdamTeam(nodes=[0])
    try:
        info = team.info()
        assert info[0]["cpu"] == allowed[-1] and info[0]["threads"] == 1
    finally:
        team.close()


def test_a_failed_affinity_read_fails_the_team_with_the_errno():
    with inject_fault("sched_getaffinity", 1, "EPERM"):
        with pytest.raises(PermissionError):
            AdamTeam(1, nodes=[0])


def test_a_failed_affinity_write_fails_the_pinned_team():
    with inject_fault("sched_setaffinity", 1, "EINVAL"):
        with pytest.raises(OSError) as e:
            AdamTeam(1, nodes=[0], pin=True)
    assert e.value.errno == 22


def test_a_failed_pin_of_the_copy_benchmark_thread_is_reported():
    src, dst = np.zeros(4096, np.uint8), np.zeros(4096, np.uint8)
    cpu = sorted(os.sched_getaffinity(0))[0]
    with inject_fault("sched_setaffinity", 1, "EPERM"):
        with pytest.raises(PermissionError):
            _native.bench_copy(dst, src, 64, 0, 1, cpu)


def test_a_huge_page_allocation_comes_from_the_one_aligned_reservation():
    with cxlkit.alloc(3 << 20, P.bind(0), thp=True) as buf:
        assert buf.address % (2 << 20) == 0
    with inject_fault("mmap", 1, "ENOMEM"):
        with pytest.raises(OSError) as e:
            cxlkit.alloc(3 << 20, P.bind(0), thp=True)
    assert e.value.errno == 12 and "alloc of 3145728 bytes" in str(e.value)
