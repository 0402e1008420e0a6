"""`cxlkit.placement.audit`: numa_maps parsing and per-process page accounting."""
from __future__ import annotations

import os

import pytest

from cxlkit.placement import audit as A

SAMPLE = """\
7f0000000000 bind:1 anon=512 dirty=512 active=0 N1=512 kernelpagesize_kB=4
7f1000000000 weighted interleave:0-1 anon=400 dirty=400 N0=300 N1=100 kernelpagesize_kB=4
55d000000000 default heap anon=3 dirty=3 N0=3 kernelpagesize_kB=4
7ffd00000000 default stack anon=9 dirty=9 N0=9 kernelpagesize_kB=4
7f2000000000 default file=/usr/lib/libc.so.6 mapped=10 mapmax=40 N0=10 kernelpagesize_kB=4
7f3000000000 default file=/anon_hugepage\\040(deleted) huge anon=2 dirty=2 N1=2 kernelpagesize_kB=2048
7f4000000000 default
garbage line
"""


def test_parse_numa_maps_reads_policy_kind_and_pages_per_node():
    ms = A.parse_numa_maps(SAMPLE)
    assert len(ms) == 7
    assert ms[0].policy == "bind:1" and ms[0].pages == {1: 512} and ms[0].kind == "anon"
    assert ms[1].pages == {0: 300, 1: 100}
    assert ms[2].kind == "heap" and ms[3].kind == "stack"
    assert ms[4].kind == "file:/usr/lib/libc.so.6"
    assert ms[5].kind == "huge" and ms[5].page_size_kb == 2048 and ms[5].nbytes == 4 << 20
    assert ms[6].pages == {}


def test_process_totals_sum_bytes_per_node():
    pp = A.ProcessPages(1, A.parse_numa_maps(SAMPLE))
    assert pp.totals() == {0: (300 + 3 + 9 + 10) * 4096, 1: (512 + 100) * 4096 + (2 << 21)}


def test_audit_own_process_finds_pages_on_node0():
    pp = A.audit_pid(os.getpid())
    assert pp.totals().get(0, 0) > 1 << 20
    assert any(m.kind == "heap" or m.kind == "stack" for m in pp.mappings)


def test_nonexistent_pid_raises_ProcessLookupError_naming_it():
    with pytest.raises(ProcessLookupError, match="no process 999999999"):
        A.audit_pid(999999999)


@pytest.mark.parametrize("bad", [0, -1, "12", True, 1.0])
def test_bad_pid_raises_ValueError(bad):
    with pytest.raises(ValueError, match="pid"):
        A.audit_pid(bad)


def test_missing_numa_maps_raises_FileNotFoundError_naming_the_file(tmp_path):
    (tmp_path / "42").mkdir()
    with pytest.raises(FileNotFoundError, match="numa_maps"):
        A.audit_pid(42, procfs_root=tmp_path)
    (tmp_path / "42/numa_maps").write_text(SAMPLE)
    assert A.audit_pid(42, procfs_root=tmp_path).totals()[1] > 0
