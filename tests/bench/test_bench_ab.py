"""bench/ab.py: one script over two interpreters in interleaved rounds, medians and ranges per
measurement, the ratio against the first side. The sides here are two wrapper interpreters
that tell a fake benchmark which side it is."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import ab  # noqa: E402

FAKE = """
import json, os, sys
side, log = os.environ["AB_SIDE"], os.environ["AB_LOG"]
with open(log, "a") as f:
    f.write(side + "\\n")
n = sum(1 for line in open(log) if line.strip() == side)  # this side's round, 1-based
print("not json")
print(json.dumps({"bench": "fake", "op": "put", "blocks": 16, "GBps": (10.0 if side == "a"
                  else 5.0) * n, "fraction": 0.5}))
print(json.dumps({"bench": "fake", "op": "get", "blocks": 16, "GBps": 1.0}))
if os.environ.get("AB_FAIL") == side:
    sys.exit("boom on " + side)
"""


def side(tmp_path: Path, name: str, extra: str = "") -> str:
    p = tmp_path / f"py-{name}"
    p.write_text(f"#!/bin/sh\nAB_SIDE={name} AB_LOG={tmp_path}/log {extra} "
                 f"exec {sys.executable} \"$@\"\n")
    p.chmod(0o755)
    return str(p)


def test_rounds_alternate_the_order_and_gather_each_measurement(tmp_path):
    (tmp_path / "fake.py").write_text(FAKE)
    sides = [("a", side(tmp_path, "a")), ("b", side(tmp_path, "b"))]
    got = ab.rounds(sides, [str(tmp_path / "fake.py")], 3, timeout=60)
    assert (tmp_path / "log").read_text().split() == ["a", "b", "b", "a", "a", "b"]
    put = ab.measurement_key({"bench": "fake", "op": "put", "blocks": 16})
    assert got[put]["GBps"] == {"a": [10.0, 20.0, 30.0], "b": [5.0, 10.0, 15.0]}
    assert got[put]["fraction"] == {"a": [0.5] * 3, "b": [0.5] * 3}
    rows = ab.summary(got, ["a", "b"], {"GBps"})
    by_op = {r["op"]: r for r in rows}
    assert set(by_op) == {"put", "get"} and all(r["figure"] == "GBps" for r in rows)
    assert by_op["put"]["a"] == {"median": 20.0, "min": 10.0, "max": 30.0, "n": 3}
    assert by_op["put"]["b"]["median"] == 10.0 and by_op["put"]["b/a"] == 0.5
    assert by_op["get"]["b/a"] == 1.0 and by_op["put"]["blocks"] == 16


def test_main_prints_one_json_line_per_measurement_and_figure(tmp_path):
    (tmp_path / "fake.py").write_text(FAKE)
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "ab.py"),
                        "--side", f"a={side(tmp_path, 'a')}", "--side",
                        f"b={side(tmp_path, 'b')}", "--rounds", "2", "--",
                        str(tmp_path / "fake.py")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    rows = [json.loads(x) for x in r.stdout.splitlines()]
    assert sorted((x["op"], x["figure"]) for x in rows) == [
        ("get", "GBps"), ("put", "GBps"), ("put", "fraction")]
    assert "round 2/2" in r.stderr


def test_a_failing_run_names_the_interpreter_and_its_last_line(tmp_path):
    (tmp_path / "fake.py").write_text(FAKE)
    sides = [("a", side(tmp_path, "a")), ("b", side(tmp_path, "b", "AB_FAIL=b"))]
    with pytest.raises(RuntimeError, match=r"py-b .*fake.py exited 1: boom on b"):
        ab.rounds(sides, [str(tmp_path / "fake.py")], 1, timeout=60)


@pytest.mark.parametrize("bad", ["a", "=x", "a="])
def test_side_must_be_name_equals_python(bad):
    import argparse

    with pytest.raises(argparse.ArgumentTypeError, match="NAME=PYTHON"):
        ab.parse_side(bad)


def test_main_refuses_one_side_or_no_script(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "ab.py"), "--side",
                        f"a={sys.executable}", "--", "x.py"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and "two --side" in r.stderr
