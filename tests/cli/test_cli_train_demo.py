"""`cxlkit train demo` reads as learning: its loss falls step after step (and stays equal to
the run without spill)."""
from __future__ import annotations

import json

import pytest

from cxlkit.cli.main import run


def test_train_demo_loss_falls(capsys, tmp_path):
    pytest.importorskip("transformers")
    code = run(["train", "demo", "--json", "--steps", "4", "--spill", str(tmp_path)])
    out = capsys.readouterr()
    assert code == 0, out.err
    rows = [json.loads(line) for line in out.out.splitlines() if line.startswith("{")]
    losses = [r["loss"] for r in rows]
    assert len(losses) == 4 and all(r["equal"] for r in rows)
    assert all(b < a for a, b in zip(losses, losses[1:])), losses
    assert losses[-1] < losses[0] - 0.5, losses
