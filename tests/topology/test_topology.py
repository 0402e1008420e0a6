"""cxlkit.topology: discovery and classification on the sysfs fixture trees, on this machine,
and on trees broken on purpose (missing root, malformed and unreadable files)."""
from __future__ import annotations

import dataclasses
import json
import re
import shutil
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cxlkit import topology as T

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sysfs"
MACHINES = ("one-node", "two-socket", "cxl-hmat", "devdax", "hbm-pmem")
NODE = "devices/system/node"


def fx(name: str) -> T.Topology:
    return T.discover(FIXTURES / name)


def copy_fixture(name: str, tmp_path: Path) -> Path:
    dst = tmp_path / name
    shutil.copytree(FIXTURES / name, dst, symlinks=True)
    return dst


# ---------------------------------------------------------------- cpulists


def test_parse_cpulist_ranges_and_singles():
    assert T.parse_cpulist("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert T.parse_cpulist("") == []


def test_parse_cpulist_garbage_raises_ValueError():
    with pytest.raises(ValueError):
        T.parse_cpulist("a-b")


@given(st.sets(st.integers(0, 300), max_size=40))
def test_format_cpulist_round_trips(ids):
    assert T.parse_cpulist(T.format_cpulist(ids)) == sorted(ids)


def test_format_cpulist_merges_runs():
    assert T.format_cpulist([8, 0, 1, 2, 3]) == "0-3,8"


# ---------------------------------------------------------------- fixture machines


@pytest.mark.parametrize("machine", MACHINES)
def test_every_fixture_discovers_without_warnings_and_classifies_every_node(machine):
    topo = fx(machine)
    assert topo.warnings == ()
    assert topo.nodes
    for n in topo.nodes:
        assert n.kind in T.KINDS
        assert n.evidence, f"node {n.id} has no evidence"
    json.dumps(topo.to_dict())


def test_one_node_is_one_dram_node_like_this_machine():
    topo = fx("one-node")
    (n,) = topo.nodes
    assert (n.id, n.kind, n.cpus) == (0, "dram", (0, 1))
    assert n.evidence == ("has CPUs 0-1", "memory tier 4")
    assert n.mem_total_bytes == 5204172 * 1024 and n.mem_free_bytes == 4978884 * 1024
    assert n.distances == ((0, 10),) and n.distance_to(0) == 10
    assert n.memory_tier == 4 and n.hmat is None and n.access == ()
    assert [(h.page_kb, h.total, h.free) for h in n.hugepages] == [(2048, 0, 0), (1048576, 0, 0)]
    assert topo.cxl_regions == () and topo.cxl_memdevs == () and topo.dax_devices == ()


def test_one_node_reads_auto_mode_from___auto_type():
    topo = fx("one-node")
    assert topo.weighted_interleave and topo.wi_auto is True
    assert topo.wi_auto_file == "__auto_type"
    assert topo.wi_weights == {0: 1} == T.weighted_interleave_weights(FIXTURES / "one-node")


def test_two_socket_has_two_dram_nodes_at_distance_21():
    topo = fx("two-socket")
    assert [(n.id, n.kind) for n in topo.nodes] == [(0, "dram"), (1, "dram")]
    assert topo.node(0).cpus == tuple(range(8)) + tuple(range(16, 24))
    assert topo.node(0).distance_to(1) == 21 and topo.node(1).distance_to(1) == 10
    assert topo.node(0).evidence[0] == "has CPUs 0-7,16-23"
    assert [(h.page_kb, h.total, h.free) for h in topo.node(0).hugepages][0] == (2048, 512, 500)
    assert topo.memory_node_ids == [0, 1] == topo.cpu_node_ids


def test_two_socket_kernel_without_weighted_interleave_reads_as_unsupported():
    topo = fx("two-socket")
    assert not topo.weighted_interleave
    assert topo.wi_weights is None and topo.wi_auto is None and topo.wi_auto_file is None
    assert all(n.wi_weight is None for n in topo.nodes)
    assert topo.to_dict()["weighted_interleave"] == {
        "supported": False, "auto": None, "auto_file": None, "weights": {}}


def test_cxl_hmat_classifies_the_cpu_less_expanders_as_cxl_with_evidence():
    topo = fx("cxl-hmat")
    assert [(n.id, n.kind) for n in topo.nodes] == [(0, "dram"), (1, "cxl"), (2, "cxl")]
    assert [n.id for n in topo.nodes_of_kind("cxl")] == [1, 2]
    assert topo.nodes_of_kind("hbm") == []
    ev = topo.node(2).evidence
    assert "no CPUs" in ev
    assert "target node of CXL region1 (dax1.0, system-ram)" in ev
    assert "memory tier 84 below DRAM tier 4" in ev
    assert "HMAT read latency 300 ns vs 80 ns on node 0" in ev
    assert "HMAT read bandwidth 20480 MB/s vs 102400 MB/s on node 0" in ev
    assert "memory tier 22 below DRAM tier 4" in topo.node(1).evidence


def test_cxl_hmat_reads_access0_and_access1_figures():
    n1 = fx("cxl-hmat").node(1)
    assert [a.access for a in n1.access] == [0, 1]
    assert n1.hmat == T.AccessClass(0, (0,), 200, 200, 51200, 51200)
    assert n1.mem_total_bytes == 16 << 30


def test_cxl_hmat_memory_tiers_match_the_kernel_adistance_chunks():
    topo = fx("cxl-hmat")
    assert [(t.id, t.nodes) for t in topo.memory_tiers] == [(4, (0,)), (22, (1,)), (84, (2,))]
    # DRAM's adistance 576 and the default dax adistance 2880 fall in tiers 4 and 22.
    lo, hi = topo.memory_tiers[0].adistance_range
    assert lo <= 576 <= hi
    lo, hi = topo.memory_tiers[1].adistance_range
    assert lo <= 2880 <= hi


def test_cxl_hmat_regions_memdevs_and_dax_are_linked():
    topo = fx("cxl-hmat")
    r0 = topo.region("region0")
    assert (r0.mode, r0.size_bytes, r0.interleave_ways, r0.interleave_granularity) == \
        ("ram", 16 << 30, 1, 256)
    assert r0.committed and r0.resource == 0x1050000000
    assert (r0.targets, r0.memdevs, r0.dax_devices, r0.target_node) == \
        (("decoder3.0",), ("mem0",), ("dax0.0",), 1)
    assert r0.access[0].read_latency_ns == 200 and r0.access[0].read_bandwidth_mbps == 51200
    m1 = topo.memdev("mem1")
    assert (m1.ram_bytes, m1.pmem_bytes, m1.serial, m1.numa_node, m1.regions) == \
        (32 << 30, 0, "0x5e001", 0, ("region1",))
    assert m1.host == "0000:c0:00.0"
    d = topo.dax("dax1.0")
    assert (d.mode, d.driver, d.source, d.region, d.target_node, d.align) == \
        ("system-ram", "kmem", "cxl", "region1", 2, 2097152)
    assert d.numa_node is None  # sysfs says -1


def test_cxl_hmat_reads_auto_mode_from_auto():
    topo = fx("cxl-hmat")
    assert (topo.wi_auto, topo.wi_auto_file) == (True, "auto")
    assert topo.wi_weights == {0: 10, 1: 5, 2: 2}


def test_devdax_device_in_devdax_mode():
    topo = fx("devdax")
    assert [n.id for n in topo.nodes] == [0]
    (d,) = topo.dax_devices
    assert (d.name, d.mode, d.driver, d.align, d.target_node, d.numa_node) == \
        ("dax0.0", "devdax", "device_dax", 2097152, 1, 0)
    assert (d.source, d.region, d.path) == ("nvdimm", "region0", "/dev/dax0.0")
    assert d.size_bytes == 8453619712
    # 6.9..6.15: weights but no auto-mode file under either name.
    assert topo.weighted_interleave and topo.wi_auto is None and topo.wi_auto_file is None


def test_hbm_pmem_classifies_hbm_by_hmat_and_pmem_by_nvdimm_dax():
    topo = fx("hbm-pmem")
    assert [(n.id, n.kind) for n in topo.nodes] == [(0, "dram"), (1, "hbm"), (2, "pmem")]
    hbm = topo.node(1).evidence
    assert "HMAT read bandwidth 524288 MB/s vs 131072 MB/s on node 0" in hbm
    assert "HMAT read latency 130 ns vs 110 ns on node 0" in hbm
    assert "memory tier 1 above DRAM tier 4" in hbm
    assert "target node of nvdimm region1 (dax1.0, system-ram)" in topo.node(2).evidence
    assert (topo.wi_auto, topo.wi_auto_file) == (False, "__auto_type")


def test_topology_records_are_frozen():
    topo = fx("one-node")
    with pytest.raises(dataclasses.FrozenInstanceError):
        topo.nodes[0].kind = "hbm"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        topo.root = "/"  # type: ignore[misc]


def test_to_dict_has_stable_keys():
    d = fx("cxl-hmat").to_dict()
    assert list(d) == ["version", "root", "nodes", "memory_tiers", "cxl_regions",
                       "cxl_memdevs", "dax_devices", "weighted_interleave", "warnings"]
    assert d["version"] == 1
    n = d["nodes"][1]
    assert set(n) == {"id", "kind", "evidence", "has_memory", "cpus", "cpulist",
                      "mem_total_bytes", "mem_free_bytes", "distances", "access",
                      "memory_tier", "wi_weight", "hugepages"}
    assert n["distances"] == {"0": 20, "1": 10, "2": 20} and n["cpulist"] == ""
    assert d["memory_tiers"][2] == {"id": 84, "nodes": [2], "adistance_range": [10752, 10879]}
    assert d["dax_devices"][0]["path"] == "/dev/dax0.0"
    assert d["weighted_interleave"]["weights"] == {"0": 10, "1": 5, "2": 2}


def test_discover_reads_CXLKIT_SYSFS_ROOT(monkeypatch):
    monkeypatch.setenv("CXLKIT_SYSFS_ROOT", str(FIXTURES / "hbm-pmem"))
    topo = T.discover()
    assert topo.root == str(FIXTURES / "hbm-pmem")
    assert [n.kind for n in topo.nodes] == ["dram", "hbm", "pmem"]


# ---------------------------------------------------------------- classification edge cases


def test_cpu_less_node_without_evidence_is_not_assumed_hbm(tmp_path):
    root = copy_fixture("two-socket", tmp_path)
    (root / NODE / "node1/cpulist").write_text("\n")
    topo = T.discover(root)
    n1 = topo.node(1)
    assert n1.kind == "dram"
    assert "no CPUs" in n1.evidence
    assert any("not assumed to be HBM" in e for e in n1.evidence)


def test_cpu_less_slow_node_in_lower_tier_without_cxl_bus_is_cxl(tmp_path):
    root = copy_fixture("cxl-hmat", tmp_path)
    shutil.rmtree(root / "bus")
    topo = T.discover(root)
    assert [n.kind for n in topo.nodes] == ["dram", "cxl", "cxl"]
    assert any(e.startswith("CXL: CPU-less, in a lower memory tier and slower")
               for e in topo.node(1).evidence)
    assert topo.cxl_regions == () and topo.dax_devices == ()


def test_cpu_less_slow_node_without_memory_tiers_is_cxl_by_hmat(tmp_path):
    root = copy_fixture("cxl-hmat", tmp_path)
    shutil.rmtree(root / "bus")
    shutil.rmtree(root / "devices/virtual/memory_tiering")
    topo = T.discover(root)
    assert topo.node(2).kind == "cxl"
    assert topo.node(2).memory_tier is None and topo.memory_tiers == ()
    assert "CXL: CPU-less and slower than DRAM per HMAT (no memory tiers to confirm)" \
        in topo.node(2).evidence


def test_cpu_less_node_in_dram_tier_with_slow_hmat_stays_dram(tmp_path):
    # A remote socket whose CPUs are offline: slower per HMAT, but the kernel keeps it in
    # the DRAM tier and nothing names it CXL.
    root = copy_fixture("cxl-hmat", tmp_path)
    shutil.rmtree(root / "bus")
    shutil.rmtree(root / "devices/virtual/memory_tiering/memory_tier22")
    (root / "devices/virtual/memory_tiering/memory_tier4/nodelist").write_text("0-1\n")
    assert T.discover(root).node(1).kind == "dram"


def test_pmem_mode_cxl_region_makes_its_node_pmem(tmp_path):
    root = copy_fixture("cxl-hmat", tmp_path)
    (root / "bus/cxl/devices/region0/mode").write_text("pmem\n")
    topo = T.discover(root)
    assert topo.node(1).kind == "pmem"
    assert "target node of CXL pmem region0 (dax0.0, system-ram)" in topo.node(1).evidence


def test_memoryless_node_is_listed_but_flagged(tmp_path):
    root = copy_fixture("two-socket", tmp_path)
    (root / NODE / "has_memory").write_text("0\n")
    mi = root / NODE / "node1/meminfo"
    mi.write_text(re.sub(r"MemTotal:\s+\d+", "MemTotal: 0", mi.read_text()))
    topo = T.discover(root)
    n1 = topo.node(1)
    assert not n1.has_memory and n1.mem_total_bytes == 0
    assert n1.evidence[0] == "no memory (MemTotal 0)"
    assert [n.id for n in topo.nodes_of_kind("dram")] == [0]
    assert [n.id for n in topo.nodes_of_kind("dram", include_memoryless=True)] == [0, 1]
    assert topo.memory_node_ids == [0]


def test_node_missing_from_has_memory_is_flagged(tmp_path):
    root = copy_fixture("two-socket", tmp_path)
    (root / NODE / "has_memory").write_text("1\n")
    n0 = T.discover(root).node(0)
    assert not n0.has_memory and n0.mem_total_bytes
    assert n0.evidence[0] == "no memory (not in has_memory)"


# ---------------------------------------------------------------- errors and degraded input


def test_missing_root_raises_FileNotFoundError_naming_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere"):
        T.discover(tmp_path / "nowhere")


def test_root_that_is_a_file_raises_NotADirectoryError(tmp_path):
    f = tmp_path / "sys"
    f.write_text("")
    with pytest.raises(NotADirectoryError, match=str(f)):
        T.discover(f)


def test_unknown_names_raise_KeyError_naming_them():
    topo = fx("cxl-hmat")
    with pytest.raises(KeyError, match="node 7 not found"):
        topo.node(7)
    with pytest.raises(KeyError, match="region9"):
        topo.region("region9")
    with pytest.raises(KeyError, match="mem9"):
        topo.memdev("mem9")
    with pytest.raises(KeyError, match="dax9.9"):
        topo.dax("dax9.9")
    with pytest.raises(KeyError, match="node 0 has no distance to node 5"):
        topo.node(0).distance_to(5)


def test_unknown_kind_raises_ValueError():
    with pytest.raises(ValueError, match="'ssd'"):
        fx("one-node").nodes_of_kind("ssd")


def test_root_without_node_directory_warns_and_has_no_nodes(tmp_path):
    topo = T.discover(tmp_path)
    assert topo.nodes == ()
    assert any("kernel without NUMA support" in w for w in topo.warnings)


def test_malformed_files_read_as_None_with_warnings_naming_them(tmp_path):
    root = copy_fixture("cxl-hmat", tmp_path)
    n = root / NODE
    (n / "node0/distance").write_text("10 twenty 20\n")
    (n / "node1/meminfo").write_text("garbage\n")
    (n / "node2/cpulist").write_text("x-y\n")
    (n / "node1/access0/initiators/read_latency").write_text("fast\n")
    (root / T.WEIGHTED_INTERLEAVE_DIR / "auto").write_text("maybe\n")
    topo = T.discover(root)
    assert topo.node(0).distances == ()
    assert topo.node(1).mem_total_bytes is None and topo.node(1).hmat.read_latency_ns is None
    assert topo.node(2).cpus is None and "CPU list unreadable" in topo.node(2).evidence
    assert topo.wi_auto is None and topo.wi_auto_file == "auto"
    w = "\n".join(topo.warnings)
    assert f"{NODE}/node0/distance: malformed '10 twenty 20'" in w
    assert f"{NODE}/node1/meminfo: malformed" in w
    assert f"{NODE}/node2/cpulist: malformed 'x-y'" in w
    assert f"{NODE}/node1/access0/initiators/read_latency: malformed 'fast'" in w
    assert f"{T.WEIGHTED_INTERLEAVE_DIR}/auto: malformed 'maybe'" in w
    # Node 2 still classifies from its CXL dax evidence.
    assert topo.node(2).kind == "cxl"


def test_distance_count_not_matching_online_nodes_warns(tmp_path):
    root = copy_fixture("two-socket", tmp_path)
    (root / NODE / "node1/distance").write_text("21 10 30\n")
    topo = T.discover(root)
    assert topo.node(1).distances == ()
    assert f"{NODE}/node1/distance: 3 distances for 2 online nodes" in topo.warnings


def test_unreadable_file_reads_as_None_with_warning(tmp_path):
    # A directory where a file should be fails to read even for root (IsADirectoryError).
    root = copy_fixture("cxl-hmat", tmp_path)
    f = root / "bus/cxl/devices/mem0/serial"
    f.resolve().unlink()
    f.resolve().mkdir()
    topo = T.discover(root)
    assert topo.memdev("mem0").serial is None
    assert any(w.startswith("bus/cxl/devices/mem0/serial: unreadable (IsADirectoryError)")
               for w in topo.warnings)


def test_devdax_device_targeting_a_dram_node_does_not_change_its_kind(tmp_path):
    root = copy_fixture("devdax", tmp_path)
    (root / "bus/dax/devices/dax0.0/target_node").write_text("0\n")
    topo = T.discover(root)
    assert topo.dax("dax0.0").target_node == 0
    assert topo.node(0).kind == "dram"
    assert not any("dax0.0" in e for e in topo.node(0).evidence)


def test_driver_that_is_not_a_link_warns(tmp_path):
    root = copy_fixture("devdax", tmp_path)
    drv = root / "bus/dax/devices/dax0.0/driver"
    drv.unlink()
    drv.write_text("device_dax\n")
    topo = T.discover(str(root))
    assert topo.dax("dax0.0").mode is None
    assert any(w.startswith("bus/dax/devices/dax0.0/driver: unreadable link (OSError)")
               for w in topo.warnings)


def test_unbound_dax_device_has_no_mode(tmp_path):
    root = copy_fixture("devdax", tmp_path)
    (root / "bus/dax/devices/dax0.0/driver").unlink()
    d = T.discover(root).dax("dax0.0")
    assert d.mode is None and d.driver is None


# ---------------------------------------------------------------- this machine


def test_this_machine_discovers_dram_nodes_with_all_online_cpus():
    topo = T.discover()
    assert topo.nodes, "this machine's sysfs has no NUMA node"
    online = T.parse_cpulist(Path("/sys/devices/system/cpu/online").read_text())
    assert sorted(c for n in topo.nodes for c in (n.cpus or ())) == online
    for n in topo.nodes:
        assert n.kind in T.KINDS
        if n.cpus:
            assert n.kind == "dram" and n.evidence[0].startswith("has CPUs")
    assert topo.memory_node_ids == T.memory_nodes()
    if len(topo.nodes) == 1:
        (n,) = topo.nodes
        assert n.kind == "dram" and n.cpus and n.mem_total_bytes and n.has_memory
