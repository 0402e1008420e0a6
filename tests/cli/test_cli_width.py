"""The main tables at 80 columns (a terminal's default, and what piped output gets): every line
fits, no header or number is cut ('…'), no number is split across lines."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from rich.console import Console

import cxlkit
from cxlkit.cli import doctor as D
from cxlkit.cli.bench import memory_tables
from cxlkit.cli.main import run

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sysfs"


def at_80(capsys, monkeypatch, *args) -> str:
    monkeypatch.setenv("COLUMNS", "80")
    code = run(list(args))
    out = capsys.readouterr()
    assert code == 0, out.err
    return out.out


def fits(text: str, width: int = 80) -> None:
    assert "…" not in text, text
    for line in text.splitlines():
        assert len(line) <= width, line


def whole(text: str, *numbers: str) -> None:
    """Each number (or number with its unit) is on one line, not split."""
    for n in numbers:
        assert any(n in line for line in text.splitlines()), (n, text)


@pytest.fixture
def pool(monkeypatch):
    monkeypatch.setenv("CXLKIT_HOST_ID", "0")
    path = f"/dev/shm/cxlkit-test-cli-width-{uuid.uuid4().hex[:8]}"
    with cxlkit.Pool(path, "16M") as p:
        p.create("kv.0123456789abcdef.object-with-a-long-name", data=b"x" * 131136).close()
    yield path
    Path(path).unlink(missing_ok=True)


def test_kv_stats_at_80(capsys, monkeypatch, pool):
    from cxlkit.kv import BlockLayout, Store

    Store(pool, BlockLayout(2, 2, 16, "float32"), host_id=0)  # its counters object
    out = at_80(capsys, monkeypatch, "kv", "stats", pool)
    fits(out)
    for name in ("lookups", "misses", "put_skipped", "bytes_out", "load_errors", "put_errors"):
        assert re.search(rf"^\s*{name}\s+0\s*$", out, re.M), (name, out)


@pytest.mark.parametrize("cmd", ["hosts", "ls", "stat"])
def test_pool_tables_at_80(capsys, monkeypatch, pool, cmd):
    out = at_80(capsys, monkeypatch, "pool", cmd, pool)
    fits(out)
    if cmd == "ls":
        whole(out, "131136")
    if cmd == "hosts":
        assert re.search(r"slot\s+name\s+state\s+pid\s+beat\s+ext\s+held\s+used\s+objs", out)
        whole(out, "192 KiB")


@pytest.mark.parametrize("fixture", ["cxl-hmat", "hbm-pmem", "two-socket", "devdax"])
def test_tiers_at_80(capsys, monkeypatch, fixture):
    out = at_80(capsys, monkeypatch, "tiers", "--sysfs-root", str(FIXTURES / fixture))
    fits(out)
    if fixture == "cxl-hmat":
        whole(out, "80/80 ns", "102/102 GB/s", "64.0 GiB", "region0")
    if fixture == "hbm-pmem":
        whole(out, "256.0 GiB", "524/524 GB/s")


def test_bench_memory_tables_at_80():
    kinds = ("read", "write", "copy", "nt_write")
    doc = {"machine": {"cpu": "AMD EPYC 9654 96-Core Processor"}, "kernel": "6.18.0",
           "parameters": {"loaded_kind": "read"}, "figures": {"nodes": {str(n): {
               "kind": kind, "initiator_cpus": list(range(0, 96)) if n == 0 else [],
               "latency": [{"bytes": 4096, "ns": 1.1}, {"bytes": 1 << 30, "ns": 268.4}],
               "peak_gbps": {k: 123.4 for k in kinds},
               "bandwidth": {k: [{"threads": t, "gbps": 123.4, "oncpu_gbps": 234.5}
                                 for t in (1, 96)] for k in kinds}}
               for n, kind in ((0, "dram"), (2, "cxl"))}}}
    con = Console(width=80, record=True)
    memory_tables(con, doc)
    out = con.export_text()
    fits(out)
    assert re.search(r"idle\s+read\s+write\s+copy\s+nt_write\s+weight", out)
    whole(out, "268.4", "123.4 (234.5)")


def test_doctor_at_80_wraps_at_spaces_and_keeps_short_paths_whole(tmp_path):
    long = "/opt/cxlkit/a-rather-long/path/to/the/native/module/_native.so"
    f = [D.Finding("cxlkit", "native module", "ok", f"cxlkit 0.1.0, {long}"),
         D.Finding("tools", "daxctl", "missing", "not on PATH",
                   "apt-get install daxctl (switches a dax device between devdax and "
                   "system-ram (docs/deploy.md))")]
    con = Console(width=80, record=True)
    con.print(D.render(f))
    out = con.export_text()
    fits(out)
    whole(out, long, "(docs/deploy.md))")


def test_help_summaries_are_not_cut_at_the_docstrings_line_breaks(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    run(["pool", "--help"])
    out = capsys.readouterr().out
    fits(out)
    # the docstring of `pool rm` breaks after "keep it": the list must not
    assert not re.search(r"keep it\s*│\s*$", out, re.M), out


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (make sysdeps)")
@pytest.mark.parametrize("columns", [80, 120])
def test_tiers_in_a_real_terminal_of_80_and_120_columns(tmp_path, columns):
    sock, chan = f"cxlkit-test-{uuid.uuid4().hex[:8]}", "cxlkit-done"
    cmd = (f"{sys.executable} -c 'from cxlkit.cli.main import main; main()' tiers --sysfs-root "
           f"{FIXTURES / 'cxl-hmat'}; tmux -L {sock} wait-for -S {chan}; sleep 60")
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    tm = ["tmux", "-L", sock, "-f", "/dev/null"]
    subprocess.run([*tm, "new-session", "-d", "-x", str(columns), "-y", "60", cmd], check=True,
                   env=env, timeout=30)
    try:
        subprocess.run([*tm, "wait-for", chan], check=True, timeout=60)  # the command is done
        out = subprocess.run([*tm, "capture-pane", "-p", "-S", "-60"], check=True,
                             capture_output=True, text=True, timeout=30).stdout
    finally:
        subprocess.run([*tm, "kill-server"], timeout=30)
    fits(out, columns)
    whole(out, "80/80 ns", "102/102 GB/s", "region0")
