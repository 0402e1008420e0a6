"""`cxlkit doctor` inside the rig's guests: the verdicts must match what QEMU was told (a
CPU-less node, a devdax device root may open, a kmem node, a CXL memdev and region)."""
from __future__ import annotations

import json
import subprocess

import pytest

import rig

pytestmark = pytest.mark.vm


def _doctor() -> tuple[int, dict[tuple[str, str], dict]]:
    r = subprocess.run(["cxlkit", "doctor", "--json", "--no-engines", "--no-pools"],
                       capture_output=True, text=True, timeout=300)
    doc = json.loads(r.stdout)
    return r.returncode, {(f["area"], f["item"]): f for f in doc["findings"]}


@pytest.mark.topology(*rig.TOPOLOGIES)
def test_doctor_sees_two_memory_nodes_weighted_interleave_and_nothing_blocking():
    rc, v = _doctor()
    assert rc == 0, [f for f in v.values() if f["status"] == "fail"]
    assert v["nodes", "node 0"]["detail"].startswith("dram")
    assert v["nodes", "node 1"]["status"] == "ok"
    assert ("nodes", "memory tiers to place on") not in v
    assert v["kernel", "weighted interleave"]["status"] == "ok"
    assert v["tools", "daxctl"]["status"] == "ok"


@pytest.mark.topology("devdax", "two-hosts")
def test_doctor_reports_the_devdax_device_open_for_root():
    _, v = _doctor()
    f = v["dax", "dax0.0"]
    assert f["status"] == "ok", f
    assert f["detail"].startswith("devdax")
    assert "read-write for this user" in f["detail"]


@pytest.mark.topology("devdax-kmem")
def test_doctor_reports_the_kmem_device_online_as_node_2():
    _, v = _doctor()
    f = v["dax", "dax0.0"]
    assert f["status"] == "ok", f
    assert "system-ram" in f["detail"] and "online as node 2" in f["detail"]


@pytest.mark.topology("cxl")
def test_doctor_reports_the_cxl_memdev_and_its_region(cxl_facts):
    _, v = _doctor()
    assert v["cxl", "mem0"]["status"] == "ok"
    region = v["cxl", cxl_facts["region"]]
    assert region["status"] == "ok", region
    assert "mem0" in region["detail"]
