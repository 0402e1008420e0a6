"""Every README and docs snippet runs as written on the machine it claims (the README's Python snippet striped over nodes 0 and 1 on a one-node machine, and its tour read
an r.json no earlier line wrote). Blocks for one node run here; the others name a rig topology
and run in its QEMU guest (tests/vm/test_vm_docs.py). Conventions: tests/docs_blocks.py."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "vm"))
import docs_blocks as D  # noqa: E402
import rig  # noqa: E402


def _here() -> list[D.Block]:
    """The blocks to run here: each distinct code once (the same command in two docs is one
    behaviour), less docs/train.md's recipes, which their own test runs and checks."""
    seen = D.recipes()
    out = []
    for b in D.all_blocks():
        if b.where == "here" and b.code not in seen:
            seen.add(b.code)
            out.append(b)
    return out


HERE = _here()


def test_every_code_block_says_where_it_runs():
    seen = D.all_blocks()
    assert len(HERE) >= 5 and any(b.doc == "README.md" for b in HERE)
    for b in seen:
        if b.where == "rig":
            assert b.detail in rig.TOPOLOGIES, f"{b.id}: unknown rig topology {b.detail!r}"
        if b.where == "not run":
            assert len(b.detail) > 10, f"{b.id}: say why it cannot run"


def test_a_block_no_test_runs_says_where_it_is_exercised():
    assert [u for p in D.docs() for u in D.unmarked(p)] == []


def test_the_unmarked_check_names_a_c_block_without_its_line(tmp_path, monkeypatch):
    doc = tmp_path / "README.md"
    doc.write_text("```c\nint main(void) { return 0; }\n```\n"
                   "<!-- not run: tests/c/msg.c runs the same calls -->\n```c\nint x;\n```\n"
                   "```text\noutput\n```\n")
    monkeypatch.setattr(D, "ROOT", tmp_path)
    assert D.unmarked(doc) == ["README.md#0 (c)"]


def run_block(block: D.Block, cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    """A block as a user runs it from a checkout: sh with bash -e (the venv's cxlkit first on
    PATH), python with this interpreter; in a scratch directory that sees the checkout's tests/
    (fixtures the docs name) so nothing is written into the repository."""
    link = cwd / "tests"
    if not link.exists():
        link.symlink_to(D.ROOT / "tests")
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    env["CXLKIT_POOL"] = f"cxlkit-docs-{os.getpid()}"
    argv = (["bash", "-euo", "pipefail", "-c", block.code] if block.lang == "sh"
            else [sys.executable, "-c", block.code])
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          env=env)


@pytest.mark.slow
@pytest.mark.parametrize("block", HERE, ids=[b.id for b in HERE])
def test_the_snippet_runs_as_written_on_this_one_node_machine(block, tmp_path):
    r = run_block(block, tmp_path)
    assert r.returncode == 0, (f"{block.id} ({block.lang}):\n{block.code}\n--- stdout:\n"
                               f"{r.stdout[-3000:]}\n--- stderr:\n{r.stderr[-3000:]}")


def test_the_block_parser_reads_the_conventions(tmp_path, monkeypatch):
    doc = tmp_path / "README.md"
    doc.write_text("```sh\ncxlkit tiers\n```\n<!-- rig: numa -->\n```python\nimport cxlkit\n```\n"
                   "<!-- not run: builds the rig itself -->\n```sh\nmake test-vm\n```\n"
                   "```\nlayout\n```\n")
    monkeypatch.setattr(D, "ROOT", tmp_path)
    got = [(b.lang, b.where, b.detail) for b in D.blocks(doc)]
    assert got == [("sh", "here", ""), ("python", "rig", "numa"),
                   ("sh", "not run", "builds the rig itself")]
