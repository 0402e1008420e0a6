"""Every example runs and exits 0 (CI runs them as a user would)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.py"))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_runs(path):
    lines = path.read_text().splitlines()
    assert lines[0].startswith("# Run:"), "an example opens with the command that runs it"
    assert len(lines) <= 60
    r = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
