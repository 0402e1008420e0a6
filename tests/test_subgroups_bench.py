"""bench/subgroups.py runs end to end at a tiny size and prints every row (its figures are
docs/subgroups.md's business; here only that it runs and reports)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_subgroups_bench_prints_paths_figures_and_every_ablation_row(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "subgroups.py"), "--params", "2M",
                        "--subgroup", "250K", "--steps", "2", "--disk", str(tmp_path)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
    figs = [x["path_figure"] for x in rows if "path_figure" in x]
    assert [f["kind"] for f in figs] == ["dir", "dir", "memory"]
    assert all(f["read_GBps"] > 0 and f["write_GBps"] > 0 for f in figs)
    names = [x["row"] for x in rows if "row" in x]
    assert names[:3] == ["1 path: disk", "2 paths: disk+tmpfs", "3 paths: disk+tmpfs+mem"]
    assert names[3].startswith("baseline") and names[-1].startswith("+ multi-path")
    assert sum("2 processes" in n for n in names) == 4
    for x in rows:
        if "row" in x:
            assert x["update_s"] > 0 and x["Mparams_per_s"] > 0
    alt = next(x for x in rows if x.get("row") == "+ delayed upcast")
    assert alt["cache_hits"][1:] == [4]
    assert not list(tmp_path.iterdir())
