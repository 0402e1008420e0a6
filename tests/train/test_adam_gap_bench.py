"""bench/adam_gap.py runs (in this process at a tiny size and one round; bench-marked: its own
process at 200K params, two rounds, the rates): the step, the kernel call it makes and the
same on the calling thread, each beside its bound, with and without the forward/backward
before it and with the user's arrays in huge pages; one JSON line; bad task names are named."""
from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

import bench_inproc

BENCH = pathlib.Path(__file__).parents[2] / "bench" / "adam_gap.py"
NAMES = {"kern", "traf", "kern0", "traf0", "step", "tstep"}


def check_line(d: dict, model: str, params: int) -> None:
    assert d["model"] == model and d["params"] == params and d["thp_user"] is True
    assert set(d["ms"]) == set(d["gbs"]) == NAMES | {"fb:" + k for k in NAMES}
    assert set(d["pct"]) == {"kern", "kern0", "step", "fb:kern", "fb:kern0", "fb:step"}


@pytest.mark.parametrize("model", ["fp32", "bf16"])
def test_adam_gap_pairs_every_task_with_its_bound(model):
    r = bench_inproc.run("adam_gap.py", "--size", "4K", "--rounds", "1", "--model", model,
                         "--thp-user")
    assert r.returncode == 0, r.stderr[-2000:]
    check_line(json.loads(r.stdout.splitlines()[-1]), model, 4000)


def test_adam_gap_names_an_unknown_task():
    r = bench_inproc.run("adam_gap.py", "--size", "4K", "--rounds", "1", "--tasks", "kern,warp")
    assert r.returncode != 0 and "warp" in r.stderr


@pytest.mark.bench
@pytest.mark.parametrize("model", ["fp32", "bf16"])
def test_adam_gap_full_run_reports_positive_shares_and_rates(model):
    r = subprocess.run([sys.executable, str(BENCH), "--size", "200K", "--rounds", "2",
                        "--model", model, "--thp-user"], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    d = json.loads(r.stdout.splitlines()[-1])
    check_line(d, model, 200_000)
    assert all(v > 0 for v in d["pct"].values()) and all(v > 0 for v in d["gbs"].values())
