"""The spill planner and the CLI: `cxlkit plan train --spill` (subgroups per path, update time)
and `cxlkit train demo` (a Llama whose optimizer spills; losses equal without spill)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from cxlkit.train.spill import planner as SP
from cxlkit.train.spill import layout as L


def test_plan_spill_splits_by_bandwidth_and_counts_the_cache():
    figs = [SP.PathFigure("nvme", 2e9, 2e9), SP.PathFigure("shm", 6e9, 6e9)]
    p = SP.plan_spill(1_000_000_000, figs, host_cache_bytes=5 * (12 * 10**8 + 8192),
                      subgroup_params=100_000_000, kernel_eps=1e9)
    assert p.subgroups == 10 and p.cache_subgroups == 5
    assert [r["subgroups"] for r in p.paths] == [2, 8]  # ceil(2.5), ceil(7.5), a tie given back
    assert p.io_bytes_per_step == 2 * 5 * (L.pad(12 * 10**8) + 4096)
    assert p.kernel_s == 1.0 and p.update_s == max(p.io_s, 1.0)
    with pytest.raises(ValueError, match="needs 3"):
        SP.plan_spill(10**9, figs, host_cache_bytes=1 << 30, subgroup_params=10**8)
    with pytest.raises(ValueError, match="not a number"):
        SP.measure_paths(["/tmp=fast"])


def test_measure_paths_measures_a_directory_and_takes_given_figures(tmp_path):
    figs = SP.measure_paths([str(tmp_path), "mem=12.5"], nbytes=1 << 20)
    assert figs[0].name == str(tmp_path) and figs[0].read_Bps > 0 and figs[0].write_Bps > 0
    assert figs[1] == SP.PathFigure("mem", 12.5e9, 12.5e9)
    assert not [f for f in tmp_path.iterdir() if f.name.startswith("sg")]


def test_plan_train_spill_json():
    from typer.testing import CliRunner

    from cxlkit.cli.main import _load, app

    _load()
    r = CliRunner().invoke(app, ["plan", "train", "--params", "1B", "--layers", "16",
                                 "--hidden", "2048", "--context", "2k", "--spill", "/a=1,/b=3",
                                 "--host-cache", "4G", "--json"])
    assert r.exit_code == 0, r.output
    sp = json.loads(r.output)["spill"]
    assert sp["subgroups"] == 10 and [p["subgroups"] for p in sp["paths"]] == [2, 8]
    assert sp["update_s"] >= sp["io_s"] > 0
    r = CliRunner().invoke(app, ["plan", "train", "--params", "1B", "--layers", "16",
                                 "--hidden", "2048", "--context", "2k", "--spill", "/a=x"])
    assert r.exit_code == 2 and "not a number" in r.output


@pytest.mark.slow
def test_train_demo_spills_and_matches_without_spill(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    r = subprocess.run([sys.executable, "-c", "from cxlkit.cli.main import main; main()",
                        "train", "demo", "--spill", f"{tmp_path / 'a'},{tmp_path / 'b'},mem",
                        "--steps", "3", "--layers", "1", "--hidden", "64", "--sub-group-size",
                        "20000", "--json"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert len(rows) == 3 and all(x["equal"] for x in rows)
    assert all(x["loss"] == x["reference_loss"] for x in rows)
    assert {p["kind"] for p in rows[0]["paths"]} == {"dir", "memory"}
    assert all(p["subgroups"] >= 1 for p in rows[-1]["paths"])
    # the memory tier's subgroups are updated where they lie (zero-copy route); the host
    # cache's 3 buffers serve the directories' subgroups: up to 3 hits per step
    by_kind = {k: sum(p["subgroups"] for p in rows[1]["paths"] if p["kind"] == k)
               for k in ("dir", "memory")}
    assert rows[1]["in_place"] == by_kind["memory"]
    assert rows[1]["cache_hits"] == min(3, by_kind["dir"])
