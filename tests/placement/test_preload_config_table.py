"""The preload library reads its variables through the one CXLKIT_* table (the same parser
source as libcxlkit): a malformed value is refused in the words `cxlkit config` uses, and the
program still runs, unplaced."""
from __future__ import annotations

import json

import pytest

import preload_prog as PP
from cxlkit.cli.main import run


@pytest.fixture(scope="module")
def prog(tmp_path_factory):
    return str(PP.alloc_prog(tmp_path_factory.mktemp("prog")))


def _config_refusal(capsys, monkeypatch, var: str, value: str) -> str:
    monkeypatch.setenv(var, value)
    run(["config", "--json"])
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert not rows[var]["valid"]
    return rows[var]["why"]


@pytest.mark.parametrize("var, value", [
    ("CXLKIT_STRIPE_CHUNK", "2X"),           # not a size
    ("CXLKIT_STRIPE_CHUNK", "3000"),         # below the table's range
    ("CXLKIT_MIN_SIZE", "-1"),
    ("CXLKIT_PRELOAD_CACHE", "64 M"),
    ("CXLKIT_PRELOAD_CACHE_COUNT", "300"),   # above the table's range
])
def test_a_malformed_value_is_refused_as_cxlkit_config_refuses_it(prog, tmp_path, capsys,
                                                                  monkeypatch, var, value):
    why = _config_refusal(capsys, monkeypatch, var, value)
    assert why.startswith(f"{var}={value}: ")
    s = PP.start([prog, "mmap:4M"], PP.preload_env("0:1", tmp_path / "log", **{var: value}))
    rc, err = s.finish()
    assert rc == 0, err
    lines = [x for x in err.splitlines() if x.startswith("cxlkit-preload")]
    assert len(lines) == 1 and lines[0].endswith(f": {why}; placement off"), err
    assert not PP.placements((tmp_path / "log").read_text())


def test_a_value_the_table_accepts_but_the_page_size_does_not_names_the_variable(prog):
    env = PP.preload_env("0:1", None, CXLKIT_STRIPE_CHUNK="5000")
    s = PP.start([prog, "mmap:4M"], env)
    rc, err = s.finish()
    assert rc == 0, err
    assert ("CXLKIT_STRIPE_CHUNK=5000: expected a multiple of the page size (4096), e.g. 2M; "
            "unset it or give a valid value; placement off") in err


def test_the_defaults_are_the_tables(prog, tmp_path):
    log = tmp_path / "log"
    s = PP.start([prog, "mmap:4M"], PP.preload_env("0:1", log))
    rc, err = s.finish()
    assert rc == 0, err
    on = [r for _, v, r in PP.log_lines(log.read_text()) if v == "on"]
    # CXLKIT_STRIPE_CHUNK, _MIN_SIZE 2M; CXLKIT_PRELOAD_CACHE 64M, _COUNT 16
    assert on and "chunk 2097152 min 2097152 cache 67108864 bytes 16 blocks" in on[0], on
