"""A short run of the pool fuzz harness (tests/fuzz/pool_fuzz.py: random and targeted
mutations of every on-media structure, each copy used in a child with a timeout): no crash,
no hang, no untyped error, no wrong bytes from a checksummed object. The long run (2,000+
trials) is the script itself."""
from __future__ import annotations

import sys
from pathlib import Path

FUZZ = Path(__file__).resolve().parents[1] / "fuzz"
sys.path.insert(0, str(FUZZ))

import pool_fuzz  # noqa: E402


def test_short_fuzz_run_has_no_crash_hang_or_wrong_bytes():
    r = pool_fuzz.run(trials=30, seed=20261123, timeout=30.0)
    assert r["trials"] == 30
    assert (r["crashes"], r["hangs"], r["untyped_errors"], r["wrong_bytes"]) == (0, 0, 0, 0), r
    assert r["whole_reads"] > 0 and r["typed_refusals"] > 0  # it read, and mutations bit
    assert len(r["mutations"]) >= 5


def test_mutations_cover_every_structure():
    import random

    kinds = set()
    rng = random.Random(3)
    tmpl = f"/dev/shm/cxlkit-fuzz-cover-{__import__('os').getpid()}"
    try:
        t = pool_fuzz.make_template(tmpl)
        for _ in range(80):
            kinds.add(pool_fuzz.mutate(tmpl, t, rng))
    finally:
        Path(tmpl).unlink(missing_ok=True)
    assert kinds == {"random", "superblock", "slot", "entry", "lease", "header", "free",
                     "payload", "mutex", "extmap", "claim"}


def test_short_v1_fuzz_run_gives_typed_refusals_only_and_no_failed_upgrade_writes():
    r = pool_fuzz.run_v1(trials=30, seed=20261123, timeout=30.0)
    assert r["trials"] == 30
    assert (r["crashes"], r["hangs"], r["untyped_errors"], r["wrong_bytes"],
            r["changed_by_failed_upgrade"]) == (0, 0, 0, 0, 0), r
    assert r["whole_reads"] > 0 and r["typed_refusals"] > 0
    assert len(r["mutations"]) >= 5
