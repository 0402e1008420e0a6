"""`cxlkit audit --interval`: a status line on stderr says what it waits for (stdout, the
result, stays clean for --json)."""
from __future__ import annotations

import json
import os

from cxlkit.cli.main import run


def test_audit_interval_says_what_it_waits_for(capsys):
    code = run(["audit", str(os.getpid()), "--interval", "0.01", "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "tiering" in json.loads(out.out)
    lines = out.err.strip().splitlines()
    assert len(lines) == 1 and "watching" in lines[0] and "0.01 s" in lines[0], out.err
