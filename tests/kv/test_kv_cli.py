"""`cxlkit kv stats` and the KV demo section."""
import json

import pytest
import torch
from rich.console import Console
from typer.testing import CliRunner

from cxlkit.cli.main import _load, app
from cxlkit.kv import BlockLayout, EngineTensors, Store, block_hashes

_load()


def test_kv_stats_json_reports_blocks_and_counters(pool_path):
    lay = BlockLayout(2, 2, 16, "float32")
    s = Store(pool_path, lay, create=True, size=16 << 20, host_id=0, namespace="m")
    e = EngineTensors.per_layer(lay, [torch.zeros(2, 4, 16, 2, 16) for _ in range(2)])
    keys = block_hashes(list(range(48)))
    s.put(keys, e, [0, 1, 2])
    s.get(keys, e, [3, 2, 1])
    r = CliRunner().invoke(app, ["kv", "stats", "--pool", pool_path, "--json"])
    assert r.exit_code == 0, r.output
    info = json.loads(r.output)
    assert info["blocks"] == [{"namespace": s.name(keys[0]).split(".")[1], "host": 0,
                               "blocks": 3, "bytes": 3 * (128 + lay.nbytes)}]
    from cxlkit.kv.recency import HEADER, table_slots

    nslots = table_slots(s.pool.stat(), s.block_bytes)
    assert info["recency_tables"] == [{"namespace": s.name(keys[0]).split(".")[1], "host": 0,
                                       "bytes": HEADER.size + 8 * nslots}]
    c = info["hosts"]["0"]
    assert (c["puts"], c["hits"], c["bytes_out"]) == (3, 3, 3 * lay.nbytes)
    r = CliRunner().invoke(app, ["kv", "stats", "--pool", pool_path])
    assert r.exit_code == 0 and "counters per host" in r.output and "recency tables" in r.output


def test_kv_stats_without_a_pool_exits_2_naming_it():
    r = CliRunner().invoke(app, ["kv", "stats", "--pool", "/dev/shm/cxlkit-test-kvcli-none"])
    assert r.exit_code == 2 and "cxlkit-test-kvcli-none" in r.output


def test_run_demo_hits_a_prefix_stored_by_another_process():
    pytest.importorskip("transformers", reason="needs transformers (make deps)")
    from cxlkit.cli.kv import run_demo

    con = Console(record=True, width=200)
    run_demo(con, prefix_len=64)
    out = con.export_text()
    assert "pool hit" in out and "same tokens" in out
    assert "blocks stored by the other process: 4" in out
