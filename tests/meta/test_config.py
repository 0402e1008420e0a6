"""The one CXLKIT_* table: docs/config.md is generated from it, `cxlkit config` prints the
effective values (and refuses a malformed one), and a malformed value read by the native
library fails the call naming the variable instead of running on the default."""
from __future__ import annotations

import errno
import json
import subprocess
import sys
from pathlib import Path

import pytest

from cxlkit import _native
from cxlkit._config import ENV, TABLE
from cxlkit.cli.config import render_markdown
from cxlkit.cli.main import run

DOC = Path(__file__).resolve().parents[2] / "docs" / "config.md"


def test_docs_config_md_is_what_cxlkit_config_markdown_generates():
    assert DOC.read_text() == render_markdown(), (
        "docs/config.md differs from the table: run `cxlkit config --markdown > docs/config.md`")


def test_every_native_variable_is_in_the_python_table_once():
    native = [e.name for e in _native.config_table()]
    assert len(native) == len(set(native))
    assert set(native) <= set(ENV)
    assert len(TABLE) == len(ENV)  # no name in both the native and the Python part


def test_native_entries_are_read_only_attributes():
    e = _native.config_table()[0]
    with pytest.raises(AttributeError):
        e.name = "CXLKIT_OTHER"


def test_cli_config_json_gives_the_effective_value_of_each(capsys, monkeypatch):
    monkeypatch.setenv("CXLKIT_MSG_CELLS", "128")
    monkeypatch.delenv("CXLKIT_MSG_DEAD_MS", raising=False)
    assert run(["config", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert set(rows) == set(ENV)
    assert rows["CXLKIT_MSG_CELLS"]["effective"] == "128" and rows["CXLKIT_MSG_CELLS"]["valid"]
    assert rows["CXLKIT_MSG_DEAD_MS"]["value"] is None
    assert rows["CXLKIT_MSG_DEAD_MS"]["effective"] == "5000"


def test_cli_config_lines_fit_80_columns(capsys, monkeypatch):
    monkeypatch.setenv("CXLKIT_SIM_DIR", "/tmp/" + "d" * 200)
    assert run(["config"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == len(ENV)
    assert max(len(line) for line in out) <= 80


def test_cli_config_refuses_a_malformed_value_naming_it_exit_2(capsys, monkeypatch):
    monkeypatch.setenv("CXLKIT_MSG_CELLS", "64k")
    assert run(["config"]) == 2
    out = capsys.readouterr()
    line = next(li for li in out.out.splitlines() if li.startswith("CXLKIT_MSG_CELLS "))
    assert line.endswith("refused")
    assert out.err.strip().splitlines() == [
        "Error: CXLKIT_MSG_CELLS=64k: expected decimal digits within 1..4294967295; "
        "unset it or give a valid value"]


def _in_child(env: dict[str, str], code: str) -> subprocess.CompletedProcess:
    import os
    return subprocess.run([sys.executable, "-c", code], env={**os.environ, **env},
                          capture_output=True, text=True, timeout=60)


def test_a_malformed_fault_spec_arms_nothing_and_is_reported():
    # refused whole: the well-formed item beside the bad one is not armed either
    code = ("from cxlkit import _native\n"
            "e = [e for e in _native.config_table() if e.name == 'CXLKIT_FAULT'][0]\n"
            "print(e.valid, _native.fault_calls('mmap') >= 0)\n"
            "_native.memfd_create('cfg', 0)\n"
            "print('armed-nothing')\n")
    r = _in_child({"CXLKIT_FAULT": "memfd_create:1:ENOMEM,mmap:x:ENOMEM"}, code)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "True", "armed-nothing"]


@pytest.mark.parametrize("var,value", [("CXLKIT_MSG_CELLS", "64k"),  # never read as 64
                                       ("CXLKIT_MSG_RDV_CHUNK", "100")])  # never clamped
def test_msg_join_with_a_malformed_variable_raises_naming_it(tmp_path, monkeypatch, var, value):
    from cxlkit import Pool
    from cxlkit.errors import MsgValueError
    from cxlkit.msg import Comm

    monkeypatch.setenv(var, value)
    with Pool(str(tmp_path / "p"), create=True, size="16M") as pool:
        with pytest.raises(MsgValueError) as ei:
            Comm(pool, job="cfg", rank=0, size=1)
    assert ei.value.errno == errno.EINVAL
    assert f"{var}={value}: expected" in str(ei.value)
