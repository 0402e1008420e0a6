"""Project history (issue numbers, measurement rounds, who did what) belongs in git log and
CHANGELOG.md, not in the code, the public headers, what the CLI prints or the docs: this walks
include/, native/, src/, docs/ and README.md and fails on any such reference, naming the file
and line; and raw benchmark results stay out of the tree (under build/)."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HISTORY = re.compile(r"\bissue \d+|\bround \d+\b|\bsprint\b|\bintegrator\b|\(zc\d+\)|"
                     r"\bdefect \d+\b", re.I)
SOURCES = ("*.py", "*.h", "*.c", "*.cpp", "*.map")


def history_lines() -> list[str]:
    found = []
    for top in ("include", "native", "src"):
        for pattern in SOURCES:
            for path in sorted((ROOT / top).rglob(pattern)):
                for no, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                    if HISTORY.search(line):
                        found.append(f"{path.relative_to(ROOT)}:{no}: {line.strip()}")
    return found


DOC_HISTORY = re.compile(r"\bissue \d+|\bsprint\b|\bintegrator\b|\bengineers?\b", re.I)


def doc_history_lines() -> list[str]:
    docs = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
    return [f"{p.relative_to(ROOT)}:{no}: {line.strip()}" for p in docs
            for no, line in enumerate(p.read_text().splitlines(), 1) if DOC_HISTORY.search(line)]


def test_code_headers_and_cli_name_no_project_history():
    assert history_lines() == []


def test_the_docs_name_no_project_history():
    assert doc_history_lines() == []


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(),
                    reason="needs a git checkout")
def test_no_raw_results_are_tracked_in_docs():
    out = subprocess.run(["git", "-C", str(ROOT), "ls-files", "docs/results"],
                         capture_output=True, text=True, check=True).stdout
    assert out == ""


def test_the_pattern_catches_the_forms_history_takes():
    for text in ("see issue 14", "(docs/train.md, round 10)", "the sprint", "(zc15)",
                 "Nothing prints at exit (issue 11, defect 4)"):
        assert HISTORY.search(text), text
    for text in ("an issue with the ring", "rounded to bf16", "around 10 steps"):
        assert not HISTORY.search(text), text
