"""CXLKIT_PRELOAD_LOG naming something that is not a regular file (a FIFO nobody reads, one
somebody reads, a directory): the preloaded program starts and ends as without the library,
with one line on stderr naming the path, and logs to stderr instead."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

import preload_prog as PP


def _run_true(log: str) -> subprocess.CompletedProcess:
    # bounded: before, a FIFO without reader held the program in open() forever
    return subprocess.run([sys.executable, "-c", "pass"], env=PP.preload_env(None, log),
                          capture_output=True, text=True, timeout=60)


def test_fifo_without_reader_does_not_block_the_program(tmp_path):
    fifo = tmp_path / "log.fifo"
    os.mkfifo(fifo)
    r = _run_true(str(fifo))
    assert r.returncode == 0, r.stderr
    warned = [ln for ln in r.stderr.splitlines() if f"CXLKIT_PRELOAD_LOG={fifo}" in ln]
    assert len(warned) == 1 and "logging to stderr" in warned[0], r.stderr


def test_fifo_with_a_reader_is_refused_as_not_a_regular_file(tmp_path):
    fifo = tmp_path / "log.fifo"
    os.mkfifo(fifo)
    rd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader: open for write would succeed
    try:
        r = _run_true(str(fifo))
    finally:
        os.close(rd)
    assert r.returncode == 0, r.stderr
    warned = [ln for ln in r.stderr.splitlines() if f"CXLKIT_PRELOAD_LOG={fifo}" in ln]
    assert len(warned) == 1 and "not a regular file" in warned[0], r.stderr


@pytest.mark.parametrize("kind", ["file", "directory"])
def test_regular_file_logs_and_a_directory_is_one_warning(tmp_path, kind):
    path = tmp_path / "log"
    if kind == "directory":
        path.mkdir()
    r = _run_true(str(path))
    assert r.returncode == 0, r.stderr
    warned = [ln for ln in r.stderr.splitlines() if f"CXLKIT_PRELOAD_LOG={path}" in ln]
    if kind == "file":
        assert warned == [] and path.read_text().startswith("cxlkit-preload[")
    else:
        assert len(warned) == 1, r.stderr
