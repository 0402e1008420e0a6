"""Tier discovery inside the rig's guests: cxlkit.topology.discover() must report the nodes,
kinds and evidence QEMU was told about (CPU-less node, HMAT figures, dax device, CXL region)."""
from __future__ import annotations

import os

import pytest

import rig
from cxlkit import topology

pytestmark = pytest.mark.vm
ALL = rig.TOPOLOGIES
DEVDAX = ("devdax", "two-hosts")


def _hmat(node: topology.Node) -> tuple[int | None, int | None]:
    a = node.hmat
    assert a is not None, f"node {node.id}: no access0 (HMAT) attributes"
    return a.read_latency_ns, a.read_bandwidth_mbps


@pytest.mark.topology(*ALL)
def test_node0_is_dram_with_the_cpus_and_its_hmat_figures():
    t = topology.discover()
    n0 = t.node(0)
    assert n0.kind == "dram", n0.evidence
    assert tuple(n0.cpus) == (0, 1)
    assert _hmat(n0) == rig.HMAT[0]


@pytest.mark.topology(*ALL)
def test_cpuless_node1_is_a_slower_lower_tier_with_its_hmat_figures():
    t = topology.discover()
    n1 = t.node(1)
    assert not n1.cpus
    assert n1.has_memory
    assert _hmat(n1) == rig.HMAT[1]
    # CPU-less, 250 ns vs 80 ns and a lower memory tier: the classifier's CXL-like far memory.
    assert n1.kind == "cxl", n1.evidence
    ev = " | ".join(n1.evidence)
    assert f"HMAT read latency {rig.HMAT[1][0]} ns vs {rig.HMAT[0][0]} ns on node 0" in ev
    assert n1.memory_tier is not None and t.node(0).memory_tier is not None
    assert n1.memory_tier > t.node(0).memory_tier
    assert t.weighted_interleave, "6.12 guest kernel: weighted interleave expected"


@pytest.mark.topology(*DEVDAX)
def test_nvdimm_namespace_is_a_devdax_device_targeting_the_empty_node2():
    t = topology.discover()
    d = t.dax("dax0.0")
    assert d.path == "/dev/dax0.0" and os.path.exists(d.path)
    assert d.mode == "devdax"
    assert d.source == "nvdimm"
    assert d.target_node == 2
    assert d.align == 2 << 20
    # the info block and alignment take a little of the 512 MiB NVDIMM
    assert rig.NVDIMM_BYTES - 16 * rig.MIB <= d.size_bytes <= rig.NVDIMM_BYTES
    assert 2 not in t.memory_node_ids


@pytest.mark.topology("devdax-kmem")
def test_nvdimm_onlined_as_system_ram_is_pmem_node2_in_its_own_tier():
    t = topology.discover()
    d = t.dax("dax0.0")
    assert d.mode == "system-ram" and d.target_node == 2
    n2 = t.node(2)
    assert n2.has_memory and not n2.cpus
    assert n2.kind == "pmem", n2.evidence
    assert any("dax0.0" in e for e in n2.evidence), n2.evidence
    assert _hmat(n2) == rig.HMAT[2]
    tiers = {t.node(i).memory_tier for i in (0, 1, 2)}
    assert len(tiers) == 3, f"tiers of nodes 0,1,2: {tiers}"
    assert 0 < n2.mem_total_bytes <= rig.NVDIMM_BYTES


@pytest.mark.topology("cxl")
def test_cxl_region_is_committed_and_onlined_as_its_own_cxl_node(cxl_facts):
    t = topology.discover()
    mem = t.memdev("mem0")
    assert mem.ram_bytes == rig.CXL_BYTES
    r = t.region(cxl_facts["region"])
    assert r.mode == "ram" and r.committed
    assert r.size_bytes == rig.CXL_BYTES
    assert r.interleave_ways == 1
    assert "mem0" in r.memdevs
    node = r.target_node
    assert node is not None and node == int(cxl_facts["node"])
    assert node not in (0, 1)
    n = t.node(node)
    assert n.has_memory and not n.cpus
    assert n.kind == "cxl", n.evidence
    assert any(r.name in e for e in n.evidence), n.evidence
    assert 0 < n.mem_total_bytes <= rig.CXL_BYTES
    tiers = {t.node(i).memory_tier for i in (0, 1, node)}
    assert len(tiers) == 3, f"tiers of nodes 0,1,{node}: {tiers}"


@pytest.mark.topology("cxl")
def test_cxl_region_performance_combines_generic_port_hmat_and_device_cdat(cxl_facts):
    r = topology.discover().region(cxl_facts["region"])
    a = next((a for a in r.access if a.access == 0), None)
    assert a is not None, f"{r.name}: no access0 attributes"
    lat, bw = rig.HMAT[2]
    # The kernel adds the device's CDAT latency to the generic port's HMAT latency and takes
    # the minimum bandwidth along the path: never faster than what QEMU's HMAT said.
    assert a.read_latency_ns is not None and a.read_latency_ns > lat
    assert a.read_bandwidth_mbps == bw
