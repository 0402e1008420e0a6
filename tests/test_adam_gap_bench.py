"""bench/adam_gap.py runs (tiny size, two rounds): the step, the kernel call it makes and the
same on the calling thread, each beside its bound, with and without the forward/backward
before it and with the user's arrays in huge pages; one JSON line; bad task names are named."""
from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

BENCH = pathlib.Path(__file__).parent.parent / "bench" / "adam_gap.py"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(BENCH), "--size", "200K", "--rounds", "2", *args],
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("model", ["fp32", "bf16"])
def test_adam_gap_pairs_every_task_with_its_bound(model):
    r = run("--model", model, "--thp-user")
    assert r.returncode == 0, r.stderr[-2000:]
    d = json.loads(r.stdout.splitlines()[-1])
    assert d["model"] == model and d["params"] == 200_000 and d["thp_user"] is True
    names = {"kern", "traf", "kern0", "traf0", "step", "tstep"}
    assert set(d["ms"]) == names | {"fb:" + k for k in names}
    assert set(d["pct"]) == {"kern", "kern0", "step", "fb:kern", "fb:kern0", "fb:step"}
    assert all(v > 0 for v in d["pct"].values()) and all(v > 0 for v in d["gbs"].values())


def test_adam_gap_names_an_unknown_task():
    r = run("--tasks", "kern,warp")
    assert r.returncode != 0 and "warp" in r.stderr
