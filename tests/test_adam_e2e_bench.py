"""bench/adam_e2e.py runs end to end (tiny sizes, one round): one JSON line per configuration
with the step times of every implementation, the paired ratios and the bound; without
DeepSpeed in the environment the line says why its column is missing."""
from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

BENCH = pathlib.Path(__file__).parent.parent / "bench" / "adam_e2e.py"


@pytest.mark.slow  # a child process per configuration, each importing torch
def test_adam_e2e_bench_prints_one_line_per_configuration():
    r = subprocess.run([sys.executable, str(BENCH), "--sizes", "200K", "--threads", "2",
                        "--models", "fp32,bf16", "--omp", "default,passive", "--reps", "2"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
    assert [(d["omp_wait_policy"], d["threads"], d["model"]) for d in lines] == [
        (w, 2, m) for w in ("default", "PASSIVE") for m in ("fp32", "bf16")]
    for d in lines:
        assert d["params"] == 200_000 and d["bytes_per_param"] == (30 if d["model"] == "bf16"
                                                                  else 28)
        assert {"cxlkit", "torch_fused", "bound"} <= set(d["ms"])
        assert ("cxlkit_pinned" in d["ms"]) == (d["threads"] > 1)
        assert d["vs_torch_fused"] > 0 and d["pct_of_bound"] > 0 and d["bound_gbs"] > 0
        assert "deepspeed" in d["ms"] or "deepspeed_error" in d


def test_adam_e2e_bench_rejects_an_unknown_wait_policy():
    r = subprocess.run([sys.executable, str(BENCH), "--omp", "turbo", "--sizes", "1K"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "turbo" in r.stderr
