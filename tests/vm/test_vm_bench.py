"""bench memory on two real NUMA nodes inside the rig's guest: the CPU-node x memory-node matrix
runs for real, the CPU-less node is measured from its HMAT initiators, the firmware's figures
sit beside the measured ones, and weights come out for both nodes. Under TCG the values are
emulated: these tests check the method, never the speed."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import rig
from cxlkit import topology
from cxlkit.bench import memory as BM
from cxlkit.bench import weights_from

pytestmark = [pytest.mark.vm, pytest.mark.topology("numa")]
KiB, MiB = 1 << 10, 1 << 20


def tiny() -> BM.Settings:
    return BM.Settings(latency_sizes=(64 * KiB, 4 * MiB), latency_target_s=0.01,
                       bandwidth_bytes=8 * MiB, bandwidth_target_s=0.01, thread_counts=(1, 2),
                       loaded_fractions=(0.5,), loaded_window_s=0.05, loaded_kind="read",
                       matrix_latency_bytes=4 * MiB, reps=1, hugepages=False)


@pytest.fixture(scope="module")
def doc() -> dict:
    return BM.run(topology.memory_nodes(), config=tiny())


def test_the_matrix_measures_node0_cpus_against_both_memory_nodes(doc):
    m = doc["figures"]["matrix"]
    assert m["cpu_nodes"] == [0] and m["mem_nodes"] == [0, 1]
    assert all(v > 0 for row in m["latency_ns"] + m["read_gbps"] for v in row)


def test_the_cpuless_node_is_measured_from_its_hmat_initiators_with_hmat_beside(doc):
    n1 = doc["figures"]["nodes"]["1"]
    assert n1["cpus"] == [] and n1["initiator_cpus"] == [0, 1]
    lat, bw = rig.HMAT[1]
    assert n1["hmat"]["read_latency_ns"] == lat and n1["hmat"]["read_bandwidth_mbps"] == bw
    assert all(p["ns"] > 0 for p in n1["latency"])


def test_weights_come_out_for_both_nodes(doc):
    w = weights_from(doc)
    assert set(w) == {0, 1} and all(v >= 1 for v in w.values())


def test_the_table_prints_the_firmware_figures(doc, tmp_path):
    from cxlkit.cli.main import _load, app

    _load()
    r = CliRunner().invoke(app, ["policy", "weights", "--from-bench", _write(doc, tmp_path)])
    assert r.exit_code == 0, r.output
    from rich.console import Console

    from cxlkit.cli.bench import memory_tables

    con = Console(record=True, width=160)
    memory_tables(con, doc)
    assert f"node 1 HMAT (firmware): read latency {rig.HMAT[1][0]} ns" in con.export_text()


def _write(doc: dict, d) -> str:
    p = d / "r.json"
    p.write_text(json.dumps(doc))
    return str(p)
