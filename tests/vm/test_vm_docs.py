"""The README and docs snippets that need more than one node (`<!-- rig: TOPOLOGY -->` before
the block, tests/docs_blocks.py) run as written inside that topology's guest."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "meta"))  # test_docs_snippets
import docs_blocks as D  # noqa: E402
from test_docs_snippets import run_block  # noqa: E402

RIG = [b for b in D.all_blocks() if b.where == "rig"]


@pytest.mark.parametrize("block", [pytest.param(b, marks=[pytest.mark.vm,
                                                          pytest.mark.topology(b.detail)])
                                   for b in RIG], ids=[b.id for b in RIG])
def test_the_snippet_runs_as_written_in_its_rig_topology(block, tmp_path):
    r = run_block(block, tmp_path)
    assert r.returncode == 0, (f"{block.id}:\n{block.code}\n--- stdout:\n{r.stdout[-3000:]}\n"
                               f"--- stderr:\n{r.stderr[-3000:]}")
