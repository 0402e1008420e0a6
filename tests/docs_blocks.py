"""The code blocks of README.md and docs/*.md and where each says it runs.

A ```sh / ```python block runs as written on a one-node machine (the test machine) unless the
line before it says otherwise:
  <!-- rig: TOPOLOGY -->         it needs that QEMU rig topology (tests/vm/rig.py TOPOLOGIES):
                                 tests/vm/test_vm_docs.py runs it inside that guest;
  <!-- not run: REASON -->       it cannot run in a test (it builds the rig itself, ...).
Blocks fenced without a language, or as ```text, are output and layouts; a block in any other
language (```c, ```json) is a program or a configuration no test runs as such: it needs a
`not run` line saying where it is exercised instead. docs/deploy.md has its own runner
(tests/vm/test_vm_deploy.py)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OWN_RUNNER = {"docs/deploy.md"}
# Docs whose fragment blocks still need whole programs or a `not run` line (empty: every
# block of every doc runs or says why not).
PENDING: dict[str, str] = {}  # doc -> the branch making its blocks runnable
LANGS = ("sh", "python")
_BLOCK = re.compile(r"(?:<!--\s*(rig|not run):\s*(.*?)\s*-->\s*\n)?```(\w*)[^\n]*\n(.*?)```",
                    re.S)


@dataclass(frozen=True)
class Block:
    doc: str        # path relative to the repository
    index: int      # n-th code block of the doc
    lang: str       # "sh" or "python"
    where: str      # "here", "rig" or "not run"
    detail: str     # the rig topology or the reason
    code: str

    @property
    def id(self) -> str:
        return f"{self.doc}#{self.index}"


def docs() -> list[Path]:
    return [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))


def blocks(path: Path) -> list[Block]:
    rel = str(path.relative_to(ROOT))
    out = []
    for m in _BLOCK.finditer(path.read_text()):
        kind, detail, lang, code = m.groups()
        if lang not in LANGS:
            continue
        where = "here" if kind is None else kind
        out.append(Block(rel, len(out), lang, where, detail or "", code))
    return out


# docs/train.md's blocks after a <!-- recipe --> line run in tests/train/test_torch_integration.py
# (test_docs_train_recipes_run_as_written), which also checks that each stepped the optimizer
RECIPE = re.compile(r"<!-- recipe -->\n```python\n(.*?)```", re.S)


def recipes() -> set[str]:
    return set(RECIPE.findall((ROOT / "docs" / "train.md").read_text()))


def all_blocks() -> list[Block]:
    skip = OWN_RUNNER | set(PENDING)
    return [b for p in docs() if str(p.relative_to(ROOT)) not in skip for b in blocks(p)]


TEXT = ("", "text")


def unmarked(path: Path) -> list[str]:
    """Blocks of a language no test runs (neither sh, python nor text) without a `not run`
    line: where each is, as doc#n and its language."""
    rel = str(path.relative_to(ROOT))
    return [f"{rel}#{n} ({m.group(3)})" for n, m in enumerate(_BLOCK.finditer(path.read_text()))
            if m.group(3) not in LANGS + TEXT and m.group(1) != "not run"]
