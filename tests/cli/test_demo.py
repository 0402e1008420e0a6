"""`cxlkit demo` (what `make demo` runs) completes on the embedded default with every section."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cxlkit.cli.demo import SECTIONS


@pytest.mark.slow
def test_demo_runs_every_section_and_every_placement_is_ok():
    exe = Path(sys.executable).parent / "cxlkit"
    r = subprocess.run([str(exe), "demo"], capture_output=True, text=True, timeout=900,
                       env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout
    assert "placement of 64 MiB under each policy" in out
    assert "no:" not in out  # every placement audit said yes
    for title, _, _ in SECTIONS:
        assert title.split(":")[0] in out
