"""bench/adam_kernel_perf.py runs (in this process at a tiny size and one round; bench-marked:
its own process, two rounds, the ratios and rates): the fp32 kernels and, with --model bf16,
the bf16-model step at the default and a forced SIMD level beside its traffic kernel, one
JSON line each; DeepSpeed's op has no bf16-model step and says so."""
from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

import bench_inproc

BENCH = pathlib.Path(__file__).parents[2] / "bench" / "adam_kernel_perf.py"


def run(*args: str) -> bench_inproc.Result:
    return bench_inproc.run("adam_kernel_perf.py", "--size", "4K", "--rounds", "1", *args)


def test_kernel_perf_bf16_model_prints_the_levels_and_the_traffic_kernel():
    r = run("--model", "bf16", "--impls", "cxlkit,cxlkit:scalar,traffic")
    assert r.returncode == 0, r.stderr[-2000:]
    d = json.loads(r.stdout.splitlines()[-1])
    assert d["model"] == "bf16" and d["bytes_per_param"] == 30 and d["params"] == 4000
    assert set(d["ms"]) == set(d["gbs"]) == {"cxlkit", "cxlkit:scalar", "traffic"}
    assert {"cxlkit:scalar_over_cxlkit", "traffic_over_cxlkit", "cxlkit_pct_of_traffic",
            "best_pct_of_traffic"} <= set(d)


def test_kernel_perf_fp32_prints_28_bytes_per_param():
    r = run("--impls", "cxlkit,traffic")
    assert r.returncode == 0, r.stderr[-2000:]
    d = json.loads(r.stdout.splitlines()[-1])
    assert d["model"] == "fp32" and d["bytes_per_param"] == 28 and d["simd"]


def test_kernel_perf_bf16_model_with_deepspeed_is_a_clear_error():
    r = run("--model", "bf16", "--impls", "cxlkit,deepspeed")
    assert r.returncode != 0
    assert "DeepSpeed's op has no bf16-model step" in r.stderr


@pytest.mark.bench
def test_kernel_perf_full_run_reports_positive_ratios_and_rates():
    r = subprocess.run([sys.executable, str(BENCH), "--size", "4K", "--rounds", "2", "--model",
                        "bf16", "--impls", "cxlkit,cxlkit:scalar,traffic"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    d = json.loads(r.stdout.splitlines()[-1])
    assert d["cxlkit:scalar_over_cxlkit"] > 0 and d["cxlkit_pct_of_traffic"] > 0
    assert all(x > 0 for x in d["gbs"].values())
