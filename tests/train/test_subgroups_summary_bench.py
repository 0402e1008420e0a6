"""bench/subgroups_summary.py tabulates several runs of bench/subgroups.py: per row the median
over runs of each run's median, the per-run values beside it; a row missing from a run is
counted over the runs that have it; a line that is not JSON is named with its file and line."""
from __future__ import annotations

import json
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import subgroups_summary as S  # noqa: E402


def row(name: str, io: float, own: float, update: float) -> dict:
    return {"row": name, "update_s": {"median": update, "min": update, "max": update},
            "io_GBps": {"median": io}, "paths_sum_GBps": own, "paths_sum_fio_GBps": own / 2,
            "io_of_paths": io / own, "io_of_paths_fio": 2 * io / own, "io_of_together": None,
            "plan": [{"path": "/var/tmp/x", "subgroups": 3}, {"path": "/dev/shm/y", "subgroups": 13}]}


def write(p: pathlib.Path, lines: list[dict]) -> str:
    p.write_text("\n".join(["round 0: not a row line"] + [json.dumps(d) for d in lines])
                 + "\n" + json.dumps({"machine": {"cpus": 2}}) + "\n")
    return str(p)


def test_medians_over_runs_with_the_per_run_values(tmp_path, capsys):
    a = write(tmp_path / "a.jsonl", [row("2 paths: disk+tmpfs", 9.0, 10.0, 0.2),
                                     row("1 path: disk", 1.0, 1.0, 0.5)])
    b = write(tmp_path / "b.jsonl", [row("2 paths: disk+tmpfs", 11.0, 10.0, 0.1)])
    c = write(tmp_path / "c.jsonl", [row("2 paths: disk+tmpfs", 10.0, 10.0, 0.3)])
    S.main([a, b, c])
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("| row | runs | update s (per run)")
    two = next(x for x in out if x.startswith("| 2 paths: disk+tmpfs |"))
    cells = [x.strip() for x in two.strip("|").split("|")]
    assert cells[1] == "3"
    assert cells[2] == "0.200 (0.200, 0.100, 0.300)"
    assert cells[3] == "10.00 (9.00, 11.00, 10.00)"
    assert cells[6] == "1.00 (0.90, 1.10, 1.00)"
    assert cells[7] == "2.00 (1.80, 2.20, 2.00)"
    assert cells[8] == "-"  # no run had the figure
    assert cells[9] == "3, 13"
    one = next(x for x in out if x.startswith("| 1 path: disk |"))
    assert one.split("|")[2].strip() == "1"  # only the first run had it


def test_a_broken_line_is_named_and_no_rows_is_refused(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"row": "x", \n')
    with pytest.raises(SystemExit, match=r"bad\.jsonl:1: not a JSON line"):
        S.main([str(bad)])
    empty = tmp_path / "empty.jsonl"
    empty.write_text("round 0\n")
    with pytest.raises(SystemExit, match="no row lines"):
        S.main([str(empty)])


def test_figure_reads_numbers_and_median_records_only():
    assert S.figure(2) == 2.0
    assert S.figure({"median": 1.5, "min": 1}) == 1.5
    assert S.figure(None) is None
    assert S.figure(True) is None
    assert S.figure("1.0") is None
