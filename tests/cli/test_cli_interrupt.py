"""Ctrl-C on the command line: one line ("interrupted"), exit 130, no traceback from this
process or its children, the children ended. SIGINT goes to the process group (as a terminal
sends it) at a point the child signals with a line on stdout."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from cxlkit.cli.main import run

SCRIPT = '''
import multiprocessing as mp, sys
from cxlkit.cli.interrupt import shielded_children

def child(ev):
    sys.stdout.write("ready\\n")  # one write per line: the two processes share the pipe, and
    sys.stdout.flush()            # print() writes the end of line apart when unbuffered
    ev.wait(60)  # bounded: the parent ends it on Ctrl-C

if __name__ == "__main__":
    ctx = mp.get_context(sys.argv[1])
    try:
        with shielded_children():
            ev = ctx.Event()
            p = ctx.Process(target=child, args=(ev,))
            p.start()
            sys.stdout.write(f"{p.pid}\\n")
            sys.stdout.flush()
            p.join(60)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
'''


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] == "Z"


@pytest.mark.parametrize("method", ["spawn", "fork"])
def test_ctrl_c_reaches_the_parent_only_and_the_child_is_ended(tmp_path, method):
    script = tmp_path / "prog.py"
    script.write_text(SCRIPT)
    p = subprocess.Popen([sys.executable, str(script), method], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        lines = [p.stdout.readline().strip() for _ in range(2)]  # the pid and "ready"
        assert "ready" in lines, lines
        child = int(next(x for x in lines if x != "ready"))
        os.killpg(p.pid, signal.SIGINT)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    assert p.returncode == 130, err
    assert err == "interrupted\n"  # no "Traceback", from the parent or the child
    assert _gone(child)


def test_a_command_interrupted_prints_one_line_and_exits_130(capsys, monkeypatch):
    from cxlkit.cli import kv

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(kv, "collect", interrupted)
    assert run(["kv", "stats", "x"]) == 130
    assert capsys.readouterr().err == "cxlkit: interrupted\n"


@pytest.mark.slow
def test_ctrl_c_during_the_pool_demo(tmp_path):
    p = subprocess.Popen([sys.executable, "-c", "from cxlkit.cli.main import main; main()",
                          "demo", "--only", "pool"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True,
                         env={**os.environ, "COLUMNS": "200"})
    try:
        for line in p.stdout:  # the section's title: its reader process starts next
            if "shared pool" in line:
                break
        os.killpg(p.pid, signal.SIGINT)
        _, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    assert p.returncode in (0, 130), err  # 0: it finished first
    assert "Traceback" not in err
    if p.returncode == 130:
        assert err == "cxlkit: interrupted\n"
