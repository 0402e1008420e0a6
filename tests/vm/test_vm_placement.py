"""Placement on real NUMA nodes inside the rig's guests: bind / interleave / kernel weighted
interleave (3:1 written to sysfs) / software stripe, page residency equal to the intent, and
`cxlkit run` + `cxlkit audit` on an unmodified program. Sizes stay tiny (TCG)."""
from __future__ import annotations

import json
import subprocess

import pytest

import cxlkit
from cxlkit import placement as policy, topology

pytestmark = pytest.mark.vm
MiB = 1 << 20
PAGE = 4096


THP = "/sys/kernel/mm/transparent_hugepage/enabled"


def _thp_mode() -> str:
    text = open(THP).read()
    return text[text.index("[") + 1:text.index("]")]


@pytest.fixture(autouse=True)
def thp_always():
    """Debian's kernel defaults to THP=always, under which the kernel interleaves whole 2 MiB
    folios; cxlkit.alloc refuses huge pages for interleave/weighted so the ratio holds per
    page. The tests run under that default, whatever the guest booted with."""
    before = _thp_mode()
    with open(THP, "w") as f:
        f.write("always")
    yield
    with open(THP, "w") as f:
        f.write(before)


@pytest.fixture
def kernel_weights_3_1():
    before = topology.weighted_interleave_weights()
    assert before is not None, "6.12 guest kernel: weighted interleave expected"
    policy.write_kernel_weights({0: 3, 1: 1})
    yield
    policy.write_kernel_weights({n: before[n] for n in (0, 1)})


@pytest.mark.topology("numa")
@pytest.mark.parametrize("node", [0, 1])
def test_bind_puts_every_page_on_the_node(node):
    with cxlkit.alloc(4 * MiB, policy.bind(node)) as buf:
        assert buf.residency().pages == {node: 4 * MiB // PAGE}
        assert buf.audit().ok, buf.audit().problems


@pytest.mark.topology("numa")
def test_interleave_splits_pages_evenly_over_two_nodes():
    with cxlkit.alloc(4 * MiB, policy.interleave([0, 1])) as buf:
        pages = buf.residency().pages
        assert pages == {0: 512, 1: 512}
        assert buf.audit().ok, buf.audit().problems


@pytest.mark.topology("numa")
def test_weighted_3_to_1_from_sysfs_weights_lands_pages_3_to_1(kernel_weights_3_1):
    assert topology.weighted_interleave_weights()[0] == 3
    with cxlkit.alloc(4 * MiB, policy.weighted({0: 3, 1: 1})) as buf:
        pages = buf.residency().pages
        # 1024 pages in rounds of 3+1; the kernel picks the phase, so allow one round's skew
        assert sum(pages.values()) == 1024
        assert 765 <= pages[0] <= 771 and 253 <= pages[1] <= 259, pages
        assert buf.audit().ok, buf.audit().problems


@pytest.mark.topology("numa")
def test_weighted_with_other_kernel_weights_raises_WeightMismatchError():
    policy.write_kernel_weights({0: 1, 1: 1})
    with pytest.raises(cxlkit.WeightMismatchError, match="0:3,1:1"):
        cxlkit.alloc(1 * MiB, policy.weighted({0: 3, 1: 1}))


@pytest.mark.topology("numa")
def test_thp_true_interleaves_whole_folios_and_audit_allows_for_it(kernel_weights_3_1):
    # 16 MiB = 8 folios in rounds of 3+1 folios: each node within one round of its share.
    with cxlkit.alloc(16 * MiB, policy.weighted({0: 3, 1: 1}), thp=True) as buf:
        pages = buf.residency().pages
        assert sum(pages.values()) == 4096
        assert all(c % 512 == 0 for c in pages.values()), pages  # whole folios
        assert buf.audit().ok, buf.audit().problems


@pytest.mark.topology("numa")
def test_stripe_3_to_1_places_whole_chunks_exactly():
    # 8 MiB in 2 MiB chunks, 3 on node 0 then 1 on node 1: exactly 1536 / 512 pages.
    with cxlkit.alloc(8 * MiB, policy.stripe([0, 1], [3, 1])) as buf:
        assert buf.residency().pages == {0: 1536, 1: 512}
        assert buf.audit().ok, buf.audit().problems
        nodes = list(buf.node_of_pages())
        assert set(nodes[:1536]) == {0} and set(nodes[1536:]) == {1}


@pytest.mark.topology("devdax-kmem", "cxl")
def test_bind_to_the_hot_added_node_puts_pages_there():
    far = [n.id for n in topology.discover().nodes if n.id >= 2 and n.has_memory]
    assert len(far) == 1, f"expected one hot-added node, got {far}"
    # 256 KiB: CXL memory is MMIO inside QEMU and crawls under TCG
    with cxlkit.alloc(256 << 10, policy.bind(far[0])) as buf:
        assert buf.residency().pages == {far[0]: 64}
        assert buf.audit().ok, buf.audit().problems


# An unmodified program: plain python3 without cxlkit, touching 8 MiB of anonymous memory.
_PROG = ("import sys; b = bytearray(b'x' * (8 << 20)); print('ready', flush=True); "
         "sys.stdin.readline()")


def _run_and_audit(*policy_args: str) -> dict:
    """Start _PROG under `cxlkit run <policy_args>`, audit it once it has touched its buffer,
    let it exit; the audit's JSON document."""
    run = subprocess.Popen(["cxlkit", "run", *policy_args, "--quiet", "--",
                            "/usr/bin/python3", "-c", _PROG],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert run.stdout.readline().strip() == "ready"
        audit = subprocess.run(["cxlkit", "audit", str(run.pid), "--json"],
                               capture_output=True, text=True)
    finally:
        run.stdin.close()
        run.wait(timeout=60)
    assert run.returncode == 0
    assert audit.returncode == 0, audit.stderr
    doc = json.loads(audit.stdout)
    assert doc["pid"] == run.pid
    return doc


@pytest.mark.topology("numa")
def test_cxlkit_run_bind_1_then_audit_shows_the_programs_anon_pages_on_node1():
    doc = _run_and_audit("--bind", "1")
    anon = [m for m in doc["mappings"] if not m["kind"].startswith("file:")]
    assert anon, doc
    # every anonymous page (heap, stack, the 8 MiB buffer) was first touched under bind:1
    for m in anon:
        assert set(m["pages"]) == {"1"}, m
        assert m["policy"].startswith("bind:1"), m
    assert int(doc["totals_bytes"]["1"]) >= 8 * MiB


@pytest.mark.topology("numa")
def test_cxlkit_run_weighted_3_to_1_lands_the_programs_buffer_3_to_1(kernel_weights_3_1):
    maps = _run_and_audit("--weighted", "0:3,1:1")["mappings"]
    # the 8 MiB buffer is the largest anonymous mapping: 2048 pages in rounds of 3+1
    buf = max((m for m in maps if not m["kind"].startswith("file:")),
              key=lambda m: sum(m["pages"].values()))
    pages = {int(n): c for n, c in buf["pages"].items()}
    assert sum(pages.values()) >= 2048
    assert abs(pages[0] - 3 * pages[1]) <= 4 * 3, pages
    assert "weighted" in buf["policy"], buf
