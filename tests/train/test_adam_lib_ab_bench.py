"""bench/adam_lib_ab.c builds and runs (a tiny size, three rounds, one libcxlkit on both
sides): one JSON line per model with each task's times and the paired ratios; bad arguments
are named; bench/adam_lib_ab_summary.py tabulates runs whose sides swap."""
from __future__ import annotations

import json
import pathlib
import shutil
import subprocess
import sys

import pytest

from cxlkit import _native as native

ROOT = pathlib.Path(__file__).parents[2]
LIB = pathlib.Path(native.__file__).with_name("libcxlkit.so")  # the library the package loads
sys.path.insert(0, str(ROOT / "bench"))

import adam_lib_ab_summary as S  # noqa: E402


@pytest.fixture(scope="module")
def harness(tmp_path_factory) -> pathlib.Path:
    if not LIB.exists():
        pytest.skip(f"needs {LIB}: run `make build` first")
    cc = shutil.which("cc")
    if cc is None:
        pytest.skip("needs a C compiler (cc)")
    exe = tmp_path_factory.mktemp("ab") / "adam_lib_ab"
    subprocess.run([cc, "-O2", "-I", str(ROOT / "include"), "-o", str(exe),
                    str(ROOT / "bench" / "adam_lib_ab.c"), "-ldl"], check=True, timeout=120)
    return exe


def test_adam_lib_ab_pairs_both_sides_steps_and_traffic_per_model(harness):
    r = subprocess.run([str(harness), "--a", f"old={LIB}", "--b", f"new={LIB}", "--n", "5003",
                        "--rounds", "3", "--models", "bf16,fp16,fp32", "--no-scrub"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    recs = [json.loads(line) for line in r.stdout.splitlines()]
    assert [d["model"] for d in recs] == ["bf16", "fp16", "fp32"]
    for d in recs:
        assert d["params"] == 5003 and d["rounds"] == 3 and d["a"] == "old" and d["b"] == "new"
        for task in ("a_step", "a_traffic", "b_step", "b_traffic"):
            assert 0 < d[f"{task}_ms_min"] <= d[f"{task}_ms"] <= d[f"{task}_ms_max"]
        assert d["b_over_a_step"] > 0 and d["b_pct_of_b_traffic"] > 0
    table = S.table_from_records(recs + [dict(d, a="new", b="old") for d in recs])
    assert len(table) == 2 + 3 and all("| 2 |" in row for row in table[2:])


def test_adam_lib_ab_zero_params_are_named_in_the_line_and_the_table(harness):
    r = subprocess.run([str(harness), "--a", f"old={LIB}", "--b", f"new={LIB}", "--n", "3001",
                        "--rounds", "2", "--models", "bf16", "--no-scrub", "--zero-params"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["zero_params"] is True and d["b_over_a_step"] > 0
    assert "bf16 (zero params)" in S.table_from_records([d])[2]


def test_adam_lib_ab_names_a_bad_model_and_a_missing_library(harness, tmp_path):
    r = subprocess.run([str(harness), "--a", f"old={LIB}", "--b", f"new={LIB}", "--n", "100",
                        "--models", "fp8"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "fp8" in r.stderr
    gone = tmp_path / "nope.so"
    r = subprocess.run([str(harness), "--a", f"old={gone}", "--b", f"new={LIB}"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "nope.so" in r.stderr


def test_summary_refuses_runs_without_an_old_and_a_new_side():
    with pytest.raises(ValueError, match="'x'"):
        S.per_run({"a": "x", "b": "new"})
