"""bench/ds_parity.py's float64 reference (the rest needs DeepSpeed: .venv-ds): replayed through
torch's own AdamW, the reference agrees with torch's exp_avg_sq to float32 rounding, and a
state that is off by a known factor is reported off by exactly that."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import ds_parity  # noqa: E402


def stepped(opt_steps: int = 6):
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(257)), torch.nn.Parameter(torch.randn(8, 9))]
    opt = torch.optim.AdamW(params, lr=1e-2)
    ref = ds_parity.Float64Moments(opt)
    for s in range(opt_steps):
        for p in params:
            p.grad = torch.randn(p.shape, generator=torch.Generator().manual_seed(s))
        opt.step()
    return opt, ref, params


def test_the_float64_reference_matches_torch_adamw_to_float32_rounding():
    _, ref, _ = stepped()
    e = ref.errors()
    assert e["elements"] == 257 + 72
    assert abs(e["median_rel"]) < 1e-6 and e["min_rel"] > -1e-5 and e["max_rel"] < 1e-5


def test_a_state_off_by_a_factor_is_reported_off_by_that_factor():
    opt, ref, params = stepped()
    for p in params:
        opt.state[p]["exp_avg_sq"].mul_(1 - 1e-3)
    e = ref.errors()
    assert e["median_rel"] == pytest.approx(-1e-3, rel=1e-2)
    assert e["share_below"] == 1.0


def test_without_the_cpu_accelerator_it_says_how_to_run_it(monkeypatch, capsys):
    monkeypatch.delenv("DS_ACCELERATOR", raising=False)
    assert ds_parity.main(["--steps", "1"]) == 2
    assert "DS_ACCELERATOR=cpu" in capsys.readouterr().err
