"""`cxlkit bench memory|copy` (tables, --json, --out, --plots, bad input), the PNG plots,
`cxlkit policy weights --from-bench` on a result, and the demo section."""
from __future__ import annotations

import json

import pytest
from rich.console import Console
from typer.testing import CliRunner

from cxlkit import topology
from cxlkit.bench import memory as BM
from cxlkit.bench.plot import plot_copy, plot_memory

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def app():
    from cxlkit.cli.main import _load, app

    _load()
    return app


def invoke(app, *args):
    return CliRunner().invoke(app, list(args))


@pytest.fixture(scope="module")
def memory_run(app, tmp_path_factory):
    """One quick `bench memory` with tables, --out and --plots (the slow part, done once)."""
    d = tmp_path_factory.mktemp("bench")
    r = invoke(app, "bench", "memory", "--quick", "--reps", "1", "--threads", "1",
               "--out", str(d / "r.json"), "--plots", str(d / "png"))
    return r, d


@pytest.mark.slow
def test_bench_memory_prints_tables_and_writes_result_and_plots(memory_run):
    r, d = memory_run
    assert r.exit_code == 0, r.output
    assert "memory per node" in r.output and "ns/load" in r.output and "buffer" in r.output
    assert "numpy copy" in r.output
    doc = json.loads((d / "r.json").read_text())
    assert doc["kind"] == "memory" and doc["parameters"]["quick"] is True
    assert doc["parameters"]["thread_counts"] == [1]
    for n in topology.memory_nodes():
        assert [p["threads"] for p in doc["figures"]["nodes"][str(n)]["bandwidth"]["read"]] == [1]
    pngs = sorted(p.name for p in (d / "png").iterdir())
    assert {"memory_latency.png", "memory_bandwidth.png"} <= set(pngs)
    assert all((d / "png" / p).read_bytes().startswith(PNG) for p in pngs)


def test_policy_weights_from_bench_shows_the_computed_weights(app, memory_run):
    _, d = memory_run
    r = invoke(app, "policy", "weights", "--from-bench", str(d / "r.json"))
    assert r.exit_code == 0, r.output
    assert "weight" in r.output


def test_policy_weights_from_a_file_that_is_not_a_result_fails_naming_it(app, tmp_path):
    p = tmp_path / "junk.json"
    p.write_text("[1, 2]")
    r = invoke(app, "policy", "weights", "--from-bench", str(p))
    assert r.exit_code != 0 and "junk.json" in r.output


@pytest.mark.slow
def test_bench_memory_json_is_the_document(app):
    r = invoke(app, "bench", "memory", "--quick", "--reps", "1", "--threads", "1", "--json",
               "--no-hugepages", "--no-matrix", "--load-kind", "nt_write")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)  # the busy-machine warning goes to stderr
    assert doc["parameters"]["hugepages"] is False and doc["parameters"]["loaded_kind"] == "nt_write"


@pytest.mark.parametrize("args, match", [
    (("--nodes", "99"), "node 99"),
    (("--load-kind", "sideways"), "--load-kind 'sideways'"),
    (("--reps", "0"), "reps"),
    (("--nodes", "x"), "nodes 'x'"),
    (("--threads", "many"), "threads 'many'"),
    (("--threads", "0"), "--threads"),
])
def test_bench_memory_bad_input_exits_2_naming_it(app, args, match):
    r = invoke(app, "bench", "memory", "--quick", *args)
    assert r.exit_code == 2 and match in r.output


def test_bench_copy_json_and_plots(app, tmp_path):
    n = topology.memory_nodes()[0]
    r = invoke(app, "bench", "copy", "--quick", "--nodes", str(n), "--out", str(tmp_path / "c.json"),
               "--plots", str(tmp_path))
    assert r.exit_code == 0, r.output
    assert f"copy node {n} -> node {n}" in r.output and "GPU copies" in r.output
    doc = json.loads((tmp_path / "c.json").read_text())
    assert doc["kind"] == "copy" and doc["figures"]["gpu"] is not None
    assert (tmp_path / f"copy_{n}_to_{n}.png").read_bytes().startswith(PNG)


def test_bench_copy_on_a_cpu_not_allowed_exits_2(app):
    r = invoke(app, "bench", "copy", "--quick", "--cpu", "4095")
    assert r.exit_code == 2 and "cpu 4095" in r.output


def test_plots_of_a_handmade_document_include_loaded_latency(tmp_path):
    doc = {"machine": {"cpu": "test cpu"}, "kernel": "6.x", "date": "2026-01-01T00:00:00",
           "figures": {"nodes": {"0": {
               "kind": "dram", "latency": [{"bytes": 4096, "ns": 1.0}, {"bytes": 1 << 20, "ns": 80.0}],
               "bandwidth": {k: [{"threads": 1, "gbps": 10.0}, {"threads": 2, "gbps": 18.0}]
                             for k in BM.KINDS},
               "loaded_latency": [{"gbps": 0.0, "ns": 80.0}, {"gbps": 15.0, "ns": 140.0}]}}}}
    out = plot_memory(doc, tmp_path / "m")
    assert [p.name for p in out] == ["memory_latency.png", "memory_bandwidth.png",
                                     "memory_loaded_latency.png"]
    copy_doc = {**doc, "figures": {"pairs": [{"src": 0, "dst": 1, "methods": {
        "memcpy": [{"bytes": 64, "gbps": 1.0}, {"bytes": 4096, "gbps": 9.0}], "nt": []}}]}}
    (p,) = plot_copy(copy_doc, tmp_path / "c")
    assert p.name == "copy_0_to_1.png" and p.read_bytes().startswith(PNG)


def test_demo_section_prints_each_node_and_the_weights():
    from cxlkit.cli.bench import run_demo

    con = Console(record=True, width=120)
    run_demo(con)
    text = con.export_text()
    assert "memory per node" in text and "weighted-interleave weights from read bandwidth" in text
    for n in topology.memory_nodes():
        assert f"{n}:" in text


def test_memory_tables_show_hmat_matrix_and_why_loaded_latency_is_missing():
    from cxlkit.cli.bench import memory_tables

    node = {"kind": "cxl", "initiator_cpus": [0], "latency": [{"bytes": 1 << 20, "ns": 250.0}],
            "bandwidth": {k: [{"threads": 1, "gbps": 20.0}] for k in BM.KINDS},
            "peak_gbps": {k: 20.0 for k in BM.KINDS}, "loaded_latency": None,
            "loaded_latency_note": "needs 2 CPUs near node 1 (one chases, others load); has 1",
            "hmat": {"read_latency_ns": 240, "read_bandwidth_mbps": 32000,
                     "write_bandwidth_mbps": 30000, "write_latency_ns": 250}}
    doc = {"machine": {"cpu": "test"}, "kernel": "6.x", "parameters": {"loaded_kind": "read"},
           "figures": {"nodes": {"1": node}, "reference": {},
                       "matrix": {"cpu_nodes": [0], "mem_nodes": [0, 1],
                                  "latency_ns": [[100.0, 250.0]], "read_gbps": [[40.0, 20.0]]}}}
    con = Console(record=True, width=160)
    memory_tables(con, doc)
    text = con.export_text()
    assert "node 1 HMAT (firmware): read latency 240 ns, read bandwidth 32000 MB/s" in text
    assert "needs 2 CPUs near node 1" in text
    assert "100.0 / 40.0" in text and "250.0 / 20.0" in text


# ---- how busy the machine was during a measurement --------------------------------------------
def _stat(path, busy_ticks: int) -> None:
    # cpu user nice system idle iowait irq softirq steal guest guest_nice
    path.write_text(f"cpu  {busy_ticks} 0 0 1000000 0 0 0 0 0 0\ncpu0 0 0 0 0 0 0 0 0 0 0\n")


@pytest.mark.parametrize("others_ticks, busy", [(0, False), (10**9, True)])
def test_load_meter_counts_the_cpu_time_of_other_processes(tmp_path, others_ticks, busy):
    from cxlkit.bench.load import LoadMeter

    _stat(tmp_path / "stat", 1000)
    with LoadMeter(procfs=tmp_path) as m:
        _stat(tmp_path / "stat", 1000 + others_ticks)  # what the rest of the machine ran
    ld = m.load
    assert ld.busy is busy
    assert (ld.others_cpu_s > 0) is busy and 0.0 <= ld.others_share <= 1.0
    assert "other processes used" in ld.describe()


def test_a_busy_measurement_is_in_the_table_json_plot_and_warned(tmp_path, capsys):
    from cxlkit.bench.load import Load
    from cxlkit.cli.bench import _report, load_line

    ld = Load(wall_s=10.0, cpus=2, loadavg_before=1.5, loadavg_after=2.5, others_cpu_s=8.0,
              others_share=0.4, busy=True)
    doc = {"machine": {"cpu": "test cpu"}, "kernel": "6.x", "date": "2026-01-01T00:00:00",
           "figures": {"pairs": [{"src": 0, "dst": 0, "methods": {
               "memcpy": [{"bytes": 64, "gbps": 1.0, "ns_per_copy": 64.0}]}}]},
           "parameters": {"cpu": 0}, "load": ld.to_dict()}
    con = Console(record=True, width=120)
    out = tmp_path / "c.json"
    _report(con, doc, False, out, tmp_path / "png", lambda c, d: load_line(c, d), "plot_copy")
    assert "other processes used 8.0 CPU-s of 20.0 (40%)" in con.export_text()
    assert json.loads(out.read_text())["load"]["busy"] is True
    err = capsys.readouterr().err
    assert err.startswith("Warning: the machine was busy") and "40%" in err
    from cxlkit.bench.plot import _title

    assert "BUSY" in _title(doc, "copy") and "40%" in _title(doc, "copy")
    assert (tmp_path / "png" / "copy_0_to_0.png").read_bytes().startswith(PNG)
