"""`cxlkit run --stripe 0:3,1:1` on two real nodes: an unmodified C program (mmap, malloc, calloc,
realloc growth, a forked child writing its copies) and python with numpy. Every placed mapping
the library logs is checked page by page (move_pages of the target process): page i sits on
the node the stripe rule gives chunk i // 512, so every node is within the rule's bounds; then
`cxlkit audit` on the running program. Sizes stay small (TCG)."""
from __future__ import annotations

import ctypes
import json
import subprocess
import sys

import pytest

import preload_prog as PP
from cxlkit.placement import preload as PL

pytestmark = pytest.mark.vm
MiB = 1 << 20
PAGE = 4096
SYS_MOVE_PAGES = 279  # x86-64
RULE = PL.parse_stripe("0:3,1:1")


def nodes_of(pid: int, start: int, npages: int) -> list[int]:
    """The node of each page of [start, start + npages pages) in process pid (negative errno
    for a page not present)."""
    libc = ctypes.CDLL(None, use_errno=True)
    pages = (ctypes.c_void_p * npages)(*[start + i * PAGE for i in range(npages)])
    status = (ctypes.c_int * npages)()
    r = libc.syscall(ctypes.c_long(SYS_MOVE_PAGES), ctypes.c_int(pid), ctypes.c_ulong(npages),
                     pages, None, status, ctypes.c_int(0))
    assert r == 0, f"move_pages({pid}): errno {ctypes.get_errno()}"
    return list(status)


def rule_node(page_index: int) -> int:
    chunk = page_index * PAGE // RULE.chunk_bytes
    slot = chunk % sum(RULE.weights)
    for n, w in zip(RULE.nodes, RULE.weights):
        if slot < w:
            return n
        slot -= w
    raise AssertionError("unreachable")


def check_mapping(pid: int, start: int, nbytes: int) -> dict[int, int]:
    """Every present page of the mapping on its rule's node; the counts within bounds when all
    are present. Returns pages per node."""
    npages = nbytes // PAGE
    got = nodes_of(pid, start, npages)
    wrong = [(i, n) for i, n in enumerate(got) if n >= 0 and n != rule_node(i)]
    assert not wrong, f"pid {pid} {start:#x}+{nbytes}: pages off their chunk's node {wrong[:8]}"
    counts = {n: got.count(n) for n in RULE.nodes}
    if all(n >= 0 for n in got):
        for n, (lo, hi) in PL.stripe_bounds(RULE, npages).items():
            assert lo <= counts[n] <= hi, (counts, lo, hi)
    return counts


@pytest.fixture(scope="module")
def prog(tmp_path_factory):
    return str(PP.alloc_prog(tmp_path_factory.mktemp("prog")))


def _cxlkit(*args: str) -> list[str]:
    return [sys.executable, "-c", "from cxlkit.cli.main import main; main()", *args]


@pytest.mark.topology("numa")
def test_unmodified_c_program_lands_3_to_1_per_mapping_with_fork_and_realloc(prog, tmp_path):
    log = tmp_path / "log"
    cmd = _cxlkit("run", "--stripe", "0:3,1:1", "--log", str(log), "--", prog,
                  "mmap:8M", "malloc:3M", "calloc:5M", "malloc:64K", "realloc:3M",
                  "realloc:9M", "mmap:1M", "fork")
    s = PP.start(cmd, dict(PP.os.environ), readies=2)
    try:
        parent, child = s.pids["parent"], s.pids["child"]
        placed = [p for p in PP.placements(log.read_text()) if p["pid"] == parent]
        assert [p["what"] for p in placed][:3] == ["mmap", "malloc", "calloc"]
        # live mappings: the 3 MiB malloc of the realloc chain was moved by mremap, so each
        # logged range still mapped is checked where a block of the report lies in it
        blocks = [b for b in s.blocks if b.who == "parent" and b.nbytes >= 2 * MiB]
        assert len(blocks) == 4  # mmap 8M, malloc 3M, calloc 5M, realloc 9M
        for b in blocks:
            p = max((p for p in placed if p["start"] <= b.address < p["start"] + p["nbytes"]),
                    key=lambda p: placed.index(p))
            assert p["nbytes"] >= b.nbytes
            counts = check_mapping(parent, p["start"], p["nbytes"])
            assert counts == {n: c // PAGE for n, c in p["per_node"].items()}, (b, p)
            # the child wrote its copy of every block: new pages under the inherited policy
            check_mapping(child, p["start"], p["nbytes"])
        own = [b for b in s.blocks if b.who == "child" and b.name == "child-malloc"][0]
        p = [p for p in PP.placements(log.read_text()) if p["pid"] == child][0]
        assert p["start"] <= own.address < p["start"] + p["nbytes"]
        check_mapping(child, p["start"], p["nbytes"])
        audit = subprocess.run(_cxlkit("audit", str(parent), "--json"), capture_output=True,
                               text=True, timeout=120)
    finally:
        rc, err = s.finish()
    assert rc == 0, err
    assert audit.returncode == 0, audit.stderr
    st = json.loads(audit.stdout)["stripe"]
    assert st["requested"] == "0:3,1:1" and st["ranges"]
    assert all(r["misplaced"] == 0 for r in st["ranges"]), st["ranges"]
    share = st["achieved_share"]
    assert abs(share["0"] - 0.75) < 0.1 and abs(share["1"] - 0.25) < 0.1, share


_NUMPY = """
import os, sys
import numpy as np
a = np.ones(3 << 20, dtype=np.uint8)           # malloc
b = np.zeros(5 << 20, dtype=np.uint8); b += 1  # calloc
c = np.ones(1 << 20, dtype=np.uint8)
c.resize(7 << 20, refcheck=False); c[:] = 2    # realloc growth
for name, x in (("a", a), ("b", b), ("c", c)):
    print("parent", name, hex(x.ctypes.data), x.nbytes, flush=True)
pid = os.fork()
if pid == 0:
    d = np.ones(4 << 20, dtype=np.uint8)
    print("child d", hex(d.ctypes.data), d.nbytes, flush=True)
    print("child ready", os.getpid(), flush=True)
    os.read(0, 1)
    os._exit(0)
print("parent ready", os.getpid(), flush=True)
os.read(0, 1)
os.waitpid(pid, 0)
"""


@pytest.mark.topology("numa")
def test_python_with_numpy_lands_its_arrays_3_to_1(tmp_path):
    log = tmp_path / "log"
    cmd = _cxlkit("run", "--stripe", "0:3,1:1", "--log", str(log), "--", sys.executable,
                  "-c", _NUMPY)
    s = PP.start(cmd, dict(PP.os.environ), readies=2)
    try:
        text = log.read_text()
        placed = PP.placements(text)
        assert {"malloc", "calloc"} <= {p["what"] for p in placed}, placed
        # c grew from a 1 MiB heap block: a placed malloc, then the copy
        assert "heap block copied into a placed one" in text, text
        on_node1 = 0
        for b in s.blocks:
            pid = s.pids[b.who]
            mine = [p for p in placed if p["start"] <= b.address < p["start"] + p["nbytes"]
                    and p["pid"] in (pid, s.pids["parent"])]
            assert mine, (b, placed)
            p = mine[-1]
            counts = check_mapping(pid, p["start"], p["nbytes"])
            # every page touched: exactly what the library bound (a 3 MiB array at 3:1 in
            # 2 MiB chunks is all on node 0)
            assert counts == {n: c // PAGE for n, c in p["per_node"].items()}, (b, counts)
            on_node1 += counts[1]
        # a, b, d (3, 5, 4 MiB + malloc's header page) end within their third chunk: node 0;
        # c's mapping (7 MiB + one page) has its fourth chunk, 257 pages, on node 1
        assert on_node1 == 257, on_node1
    finally:
        rc, err = s.finish()
    assert rc == 0, err


@pytest.mark.topology("numa")
def test_adjacent_3_to_1_mappings_merged_by_the_kernel_are_audited_one_by_one(prog):
    # 6 MiB + 6 MiB side by side at 0:3,1:1: chunks 0 0 0 | 0 0 0, one 12 MiB VMA bound to
    # node 0 for the kernel. Grouped from /proc maps that is 6 chunks on node 0 where the rule
    # allows at most 5 at any phase; the library's registry gives two placements, each exact.
    s = PP.start([prog, "adjacent:6M"], PP.preload_env("0:3,1:1"))
    try:
        pid = s.pids["parent"]
        a, b = s.blocks
        maps = open(f"/proc/{pid}/maps").read()
        sa = PL.audit_stripes(pid)
        vmas = PL.read_vmas(pid)
    finally:
        rc, err = s.finish()
    assert rc == 0, err
    spans = [l.split()[0] for l in maps.splitlines()]
    assert f"{a.address:x}-{b.address + 6 * MiB:x}" in spans  # merged
    old = [r for r in PL.striped_ranges(vmas, RULE) if r.start <= a.address < r.end]
    assert old and not old[0].within  # what the audit said before the registry
    mine = [r for r in sa.ranges if a.address <= r.start < b.address + 6 * MiB]
    assert sa.source == "registry" and [(r.start, r.end) for r in mine] == [
        (a.address, a.address + 6 * MiB), (b.address, b.address + 6 * MiB)]
    assert all(r.within and r.misplaced == 0 and r.pages == {0: 1536} for r in mine)


_REUSE = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
int main(void) {
    char *p = malloc(9 << 20);
    memset(p, 1, 9 << 20);
    fprintf(stderr, "first %p %d\n", (void *)p, p[12345]); /* used: the pair is kept */
    free(p);
    char *q = malloc(9 << 20);  /* the cached placed mapping */
    memset(q, 2, 9 << 20);
    printf("parent reused %p %d\nparent ready %d\n", (void *)q, q[54321] + (9 << 20) - 2,
           getpid());
    fflush(stdout);
    getchar();
    return 0;
}
"""


@pytest.mark.topology("numa")
def test_a_reused_cached_block_keeps_its_3_to_1_placement(tmp_path):
    src = tmp_path / "reuse.c"
    src.write_text(_REUSE)
    exe = tmp_path / "reuse"
    subprocess.run(["cc", "-O1", "-o", str(exe), str(src)], check=True)
    log = tmp_path / "log"
    s = PP.start([str(exe)], PP.preload_env("0:3,1:1", log))
    try:
        pid = s.pids["parent"]
        text = log.read_text()
        (placed,) = PP.placements(text)  # placed once, reused once
        assert "reuse malloc" in text
        (b,) = s.blocks
        assert placed["start"] < b.address < placed["start"] + 4096
        counts = check_mapping(pid, placed["start"], placed["nbytes"])
        assert counts == {n: c // PAGE for n, c in placed["per_node"].items()}
    finally:
        rc, err = s.finish()
    assert rc == 0, err
