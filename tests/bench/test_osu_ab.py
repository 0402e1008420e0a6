"""bench/osu/ab.py: variants run in interleaved rounds, their OSU tables parsed by the one
parser (summary.parse_table), medians and ratios to the first variant per size, a failed run
reported and left out."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
AB = ROOT / "bench" / "osu" / "ab.py"


def _run(*variants: str, rounds: int = 3) -> list[dict]:
    args = [sys.executable, str(AB), "--bench", "latency", "--rounds", str(rounds)]
    for v in variants:
        args += ["--variant", v]
    r = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]


def test_medians_and_ratios_per_size_from_each_variants_table():
    # a "program" that prints an OSU table; the appended arguments become a shell comment
    fast = "fast=printf '# OSU\\n# Size Latency\\n8 2.0\\n64 4.0\\n' #"
    slow = "slow=printf '8 3.0\\n64 6.0\\n' #"
    lines = _run(fast, slow)
    rows = {(d["bench"], d["size"]): d for d in lines if "size" in d}
    assert set(rows) == {("latency", 8), ("latency", 64)}
    assert rows[("latency", 8)]["fast"]["median"] == 2.0
    assert rows[("latency", 8)]["slow"]["median"] == 3.0
    assert rows[("latency", 64)]["slow"]["ratio"] == 1.5
    assert rows[("latency", 64)]["fast"]["n"] == 3


def test_a_failed_variant_is_reported_and_left_out():
    lines = _run("ok=printf '8 1.0\\n' #", "broken=sh -c 'exit 3' #", rounds=2)
    sized = [d for d in lines if "size" in d]
    assert sized and all("broken" not in d for d in sized)
    assert any("broken" in json.dumps(d) and "exited 3" in json.dumps(d) for d in lines
               if "size" not in d)
