"""bench/gpu_check.py (`make gpu-check`): without CUDA it runs every part's CPU half on tiny
sizes, writes one JSON document of a fixed shape, names each thing it skipped and why, and
exits 0; a spent budget skips parts with the reason; the summary printer shows figures, failed
checks and skips. The tests marked `gpu` run the GPU halves (pytest -m gpu, on a CUDA machine):
cxlkit's pinning hook, the connector's staging copies, TieredAdamW offload, PrefixCache."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import bench_inproc
from cxlkit import _native

# cuBLAS repeats its bits only with a fixed workspace, read when CUDA first uses it (the GPU
# training test compares two arms' gradients bit for bit); gpu_check.py sets the same
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "gpu_check.py"
sys.path.insert(0, str(REPO / "bench"))
import gpu_models as M  # noqa: E402
import gpu_parts as G  # noqa: E402


def _load_script():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


gpu_check = _load_script()


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


needs_cuda = pytest.mark.skipif("not _cuda()", reason="needs a CUDA device: make gpu-check")


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory):
    # in this process (torch and transformers loaded once); `make gpu-check` starts it alone
    out = tmp_path_factory.mktemp("gpu-check") / "doc.json"
    r = bench_inproc.run("gpu_check.py", "--device", "cpu", "--sizes", "tiny",
                         "--build", "never", "--out", str(out))
    return r, json.loads(out.read_text()) if out.exists() else None


def test_cpu_mode_runs_every_part_and_writes_one_json_document(cpu_run):
    r, doc = cpu_run
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert doc["kind"] == "gpu-check" and doc["device"] == "cpu" and doc["sizes"] == "tiny"
    assert list(doc["parts"]) == list(gpu_check.ORDER)
    for name, part in doc["parts"].items():
        assert part["status"] in ("ok", "skipped"), (name, part)
        assert part["budget_s"] == min(gpu_check.BUDGETS[name], 480)
    p = doc["parts"]
    assert all(c["ok"] for name in ("vllm_staging", "train", "prefix_cache")
               for c in p[name]["checks"])
    assert p["vllm_staging"]["blocks"] == G.PRESETS["tiny"].kv["blocks"]
    assert [r["dtype"] for r in p["train"]["runs"]] == ["float32"]
    assert {"cxlkit", "torch_cpu_offload", "masters_after_step1"} <= set(p["train"]["runs"][0])
    assert [r["tokens"] for r in p["prefix_cache"]["runs"]] == [40, 72]
    assert [r["pooled_tokens"] for r in p["prefix_cache"]["runs"]] == [32, 64]
    tiers = {(t["tier"], t["pinned"]) for t in p["copy"]["tiers"]}
    assert ("node 0", False) in tiers and ("pool", False) in tiers
    for t in p["copy"]["tiers"]:
        assert [(x["bytes"], x["streams"]) for x in t["rows"]] == [
            (b, k) for b in G.PRESETS["tiny"].copy_sizes for k in (1, 2)]
    assert doc["environment"]["device"] == "cpu" and doc["build"] is None
    assert r.stdout.rstrip().endswith(f"JSON: {doc['out']}")


def test_cpu_mode_names_every_skip_with_its_reason(cpu_run):
    r, doc = cpu_run
    skipped = {(s["part"], s["what"]): s["reason"] for s in doc["skipped"]}
    assert "--device cpu" in skipped[("all", "every GPU half (each part runs with CPU tensors)")]
    assert "need a CUDA device" in skipped[("gpu_tests", "the whole part")]
    assert doc["parts"]["gpu_tests"]["status"] == "skipped"
    assert "no CUDA device" in skipped[("copy", "pool pinned")]
    if not _native.pin_available():
        assert "pinning hook" in skipped[("copy", "node 0 pinned")]
    for reason in skipped.values():
        assert reason and reason in r.stdout  # the printed summary says each of them


def test_the_gpu_tests_part_runs_every_file_that_marks_a_gpu_test(monkeypatch):
    # the test files live in subsystem folders under tests/: the part finds them there
    seen = []

    def fake_run(cmd, **kwargs):
        seen.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, "1 passed", "")

    monkeypatch.setattr(gpu_check.subprocess, "run", fake_run)
    ctx = type("Ctx", (), {"device": "cuda", "left": lambda self: 60.0})()
    part = gpu_check.run_gpu_tests(ctx)
    assert "tests/bench/test_gpu_check.py" in part["files"]
    assert seen and seen[0][-len(part["files"]):] == part["files"]


def test_a_spent_budget_skips_every_part_with_the_reason(tmp_path, capsys):
    out = tmp_path / "doc.json"
    rc = gpu_check.main(["--device", "cpu", "--budget-s", "0", "--build", "never",
                         "--parts", "copy,train", "--out", str(out)])
    doc = json.loads(out.read_text())
    assert rc == 0 and list(doc["parts"]) == ["copy", "train"]
    for part in doc["parts"].values():
        assert part["status"] == "skipped" and "time budget spent" in part["reason"]
    assert "time budget spent" in capsys.readouterr().out


def test_unknown_parts_and_negative_budgets_are_refused():
    for argv in (["--parts", "copy,warp"], ["--budget-s", "-1"]):
        with pytest.raises(SystemExit) as e:
            gpu_check.parse_args(argv)
        assert e.value.code == 2


def test_summary_prints_figures_failed_checks_and_skips():
    doc = {"kind": "gpu-check", "device": "cuda", "budget_s": 480, "elapsed_s": 301,
           "environment": {"device_name": "NVIDIA H200", "torch": "2.13.0", "torch_cuda": "12.8"},
           "build": {"ok": True, "seconds": 61.0, "log": "build/gpu-check/build.log"},
           "out": "/out/gpu-check.json",
           "parts": {
               "vllm_staging": {"status": "ok", "elapsed_s": 2.0, "blocks": 256,
                                "block_bytes": 2 << 20, "save_gbps": 11.5, "load_gbps": 9.25,
                                "staging_pinned": True, "checks": []},
               "train": {"status": "failed", "elapsed_s": 40.0, "checks": [
                   {"name": "float32: step-1 gradients identical in both arms", "ok": False,
                    "detail": "not deterministic"}], "runs": [
                   {"dtype": "float32", "params": 2_500_000,
                    "cxlkit": {"step_ms": 50.5, "opt_ms": 20.25},
                    "torch_cpu_offload": {"step_ms": 80.0, "opt_ms": 51.0},
                    "masters_after_step1": {"max_abs": 1e-7, "of_tolerance": 0.25}}]},
               "prefix_cache": {"status": "partial", "elapsed_s": 90.0, "runs": [
                   {"tokens": 2048, "pooled_tokens": 2032, "hit_ms": 5.5, "recompute_ms": 11.0,
                    "hit_over_recompute": 0.5}], "stopped": "time budget spent: [8192]"},
               "gpu_tests": {"status": "ok", "elapsed_s": 9.0, "counts": {"passed": 4}},
               "copy": {"status": "failed", "elapsed_s": 1.0, "error": "OSError: boom",
                        "tiers": [{"tier": "node 0", "pinned": True, "rows": [
                            {"bytes": 1 << 30, "streams": 1, "h2d_gbps": 50.0, "d2h_gbps": 49.5},
                            {"bytes": 1 << 30, "streams": 4, "h2d_gbps": 51.0, "d2h_gbps": 52.0},
                            {"bytes": 1 << 16, "streams": 1, "h2d_gbps": 2.0, "d2h_gbps": 2.0}]}]}},
           "skipped": [{"part": "prefix_cache", "what": "the rest of the part",
                        "reason": "time budget spent: [8192]"}]}
    text = "\n".join(gpu_check.summary_lines(doc))
    assert "on cuda (NVIDIA H200; torch 2.13.0, CUDA 12.8): budget 480 s, took 301 s" in text
    assert "  build        ok        61.0 s  build/gpu-check/build.log" in text
    assert "save 11.5 GB/s, load 9.25 GB/s, staging pinned: True" in text
    assert "TieredAdamW 50.5 ms/step (optimizer 20.25) vs torch CPU offload 80.0 ms" in text
    assert "0.25 of the tolerance" in text
    assert "2048 tokens: hit 5.5 ms vs recompute 11.0 ms (x0.5; 2032 pooled)" in text
    assert "4 passed" in text
    assert "node 0 pinned, 1048576 KiB, h2d/d2h GB/s: x1 50.00/49.50, x4 51.00/52.00" in text
    failed = text.split("failed:\n")[1].split("skipped:")[0]
    assert "train: float32: step-1 gradients identical in both arms (not deterministic)" in failed
    assert "copy: raised OSError: boom" in failed
    assert "prefix_cache: the rest of the part: time budget spent: [8192]" in text
    assert text.endswith("JSON: /out/gpu-check.json")
    assert gpu_check.exit_code(doc) == 1


class FakeCopier:
    def __init__(self):
        self.calls = []

    def copy_seconds(self, host, devs, nbytes, direction):
        self.calls.append((tuple(devs), nbytes, direction))
        return nbytes / 1e9


def test_gpu_sweep_runs_sizes_by_streams_and_stops_at_its_deadline():
    from cxlkit.bench import copy as BC

    fake, host = FakeCopier(), bytearray(4096)
    got = BC.gpu_sweep(fake, host, device=3, sizes=(1024, 2048), streams=(1, 2), reps=1)
    assert [(r["bytes"], r["streams"]) for r in got["rows"]] == [
        (1024, 1), (1024, 2), (2048, 1), (2048, 2)] and got["stopped"] is None
    assert ((3, 3), 2048, "h2d") in fake.calls  # two streams on one device
    assert got["rows"][1]["h2d_gbps"] == pytest.approx(2.0)  # both streams' bytes counted
    late = BC.gpu_sweep(fake, host, device=0, sizes=(1024,), streams=(1, 2),
                        deadline=time.monotonic())
    assert late == {"rows": [], "stopped": "time budget spent: 2 of 2 points not run"}
    with pytest.raises(ValueError, match="needs 8192"):
        BC.gpu_sweep(fake, host, device=0, sizes=(4096,), streams=(2,))


def test_torch_copier_drives_cpu_tensors_and_refuses_other_devices():
    from cxlkit.integrations.cuda import TorchCuda, torch_copier

    cpu = torch_copier("cpu")
    assert cpu.devices() == [0]
    assert cpu.copy_seconds(bytearray(8192), [0, 0], 4096, "d2h") > 0
    with pytest.raises(ValueError, match="expected one of cuda, cpu"):
        TorchCuda("xpu")


# ---- the GPU halves (pytest -m gpu on a CUDA machine; make gpu-check runs them) ----

def _ctx(budget_s: float = 120.0) -> G.Ctx:
    return G.Ctx("cuda", G.PRESETS["tiny"], time.monotonic() + budget_s)


@pytest.mark.gpu
@needs_cuda
def test_pinning_hook_page_locks_a_buffer_that_torch_sees_as_pinned():
    import torch

    import cxlkit
    from cxlkit.integrations.views import tensor

    assert _native.pin_available()  # torch has loaded libcudart: the hook finds it
    with cxlkit.alloc(1 << 20) as buf:
        buf.pin()
        t = tensor(buf)
        assert t.is_pinned()
        t.copy_(torch.arange(1 << 20, dtype=torch.int64).to(torch.uint8))
        back = t.to("cuda", non_blocking=True).to("cpu")
        assert torch.equal(back, t)
        del t
        buf.unpin()


@pytest.mark.gpu
@needs_cuda
def test_connector_staging_copies_round_trip_cuda_blocks_byte_for_byte():
    res = G.run_vllm_staging(_ctx())
    assert res["staging_pinned"] and all(c["ok"] for c in res["checks"]), res["checks"]


@pytest.mark.gpu
@needs_cuda
def test_tiered_adamw_offload_from_cuda_matches_torch_cpu_offload_after_a_step():
    res = M.run_train(_ctx())
    assert not res.get("stopped") and all(c["ok"] for c in res["checks"]), res["checks"]


@pytest.mark.gpu
@needs_cuda
def test_prefix_cache_round_trips_cuda_kv_and_gives_the_same_logits():
    res = M.run_prefix_cache(_ctx())
    # PrefixCache.save and generate() themselves take host tensors only: the check reports that
    kv = [c for c in res["checks"] if "generate()" not in c["name"]]
    assert len(kv) == 4 and all(c["ok"] for c in kv), kv
