"""`cxlkit tiers` on the sysfs fixture trees and on this machine, through typer's CliRunner."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cxlkit.cli.main import _load, app

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sysfs"
WIDE = {"COLUMNS": "250"}
NARROW = {"COLUMNS": "80"}


@pytest.fixture(scope="module")
def runner() -> CliRunner:
    _load()
    return CliRunner()


def tiers(runner: CliRunner, *args: str, env: dict | None = None):
    return runner.invoke(app, ["tiers", *args], env=env)


def test_tiers_table_shows_kinds_evidence_regions_and_dax(runner):
    r = tiers(runner, "--sysfs-root", str(FIXTURES / "cxl-hmat"), env=WIDE)
    assert r.exit_code == 0, r.output
    out = r.output
    for text in ("memory tiers", "target node of CXL region1 (dax1.0, system-ram)",
                 "memory tier 84 below DRAM tier 4",
                 "HMAT read latency 300 ns vs 80 ns on node 0", "CXL regions",
                 "region0", "mem1", "0x5e001", "dax devices", "/dev/dax1.0", "system-ram",
                 "weighted interleave: kernel weights 0:10,1:5,2:2; auto mode on (auto)"):
        assert text in out, text
    assert out.count(" cxl ") >= 2


def test_tiers_narrow_terminal_prints_evidence_under_the_table(runner):
    r = tiers(runner, "--sysfs-root", str(FIXTURES / "hbm-pmem"), env=NARROW)
    assert r.exit_code == 0, r.output
    assert "node 1 is hbm: no CPUs; memory tier 1 above DRAM tier 4" in r.output
    assert "node 2 is pmem: no CPUs; target node of nvdimm region1" in r.output
    assert "auto mode off (__auto_type)" in r.output
    assert max(len(line) for line in r.output.splitlines()) <= 80


def test_tiers_without_weighted_interleave_says_so(runner):
    r = tiers(runner, "--sysfs-root", str(FIXTURES / "two-socket"), env=WIDE)
    assert r.exit_code == 0, r.output
    assert "weighted interleave: not in this kernel (Linux 6.9+)" in r.output
    assert "no CXL regions, CXL memdevs or dax devices" in r.output


def test_tiers_devdax_table(runner):
    r = tiers(runner, "--sysfs-root", str(FIXTURES / "devdax"), env=WIDE)
    assert r.exit_code == 0, r.output
    row = next(line for line in r.output.splitlines() if "/dev/dax0.0" in line)
    assert "devdax" in row and "2.0 MiB" in row and "nvdimm" in row
    assert "auto mode: no auto file (before Linux 6.16)" in r.output


def test_tiers_json_has_stable_keys_and_kinds(runner):
    r = tiers(runner, "--json", "--sysfs-root", str(FIXTURES / "hbm-pmem"))
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["version"] == 1 and d["root"] == str(FIXTURES / "hbm-pmem")
    assert [(n["id"], n["kind"]) for n in d["nodes"]] == [(0, "dram"), (1, "hbm"), (2, "pmem")]
    assert d["weighted_interleave"] == {"supported": True, "auto": False,
                                        "auto_file": "__auto_type",
                                        "weights": {"0": 1, "1": 4, "2": 1}}
    assert d["dax_devices"][0]["mode"] == "system-ram"
    assert d["warnings"] == []


def test_tiers_reads_CXLKIT_SYSFS_ROOT(runner):
    r = tiers(runner, "--json", env={"CXLKIT_SYSFS_ROOT": str(FIXTURES / "cxl-hmat")})
    assert r.exit_code == 0, r.output
    assert [n["kind"] for n in json.loads(r.output)["nodes"]] == ["dram", "cxl", "cxl"]


def test_tiers_missing_root_exits_2_naming_it(runner, tmp_path):
    missing = tmp_path / "no-such-sysfs"
    r = tiers(runner, "--sysfs-root", str(missing))
    assert r.exit_code == 2
    assert "sysfs root does not exist" in r.output and "no-such-sysfs" in r.output


def test_tiers_prints_warnings_for_malformed_files(runner, tmp_path):
    import shutil

    root = tmp_path / "sys"
    shutil.copytree(FIXTURES / "one-node", root, symlinks=True)
    (root / "devices/system/node/node0/distance").write_text("ten\n")
    r = tiers(runner, "--sysfs-root", str(root), env=WIDE)
    assert r.exit_code == 0, r.output
    assert "warning: devices/system/node/node0/distance: malformed 'ten'" in r.output


def test_tiers_on_this_machine(runner):
    r = tiers(runner, "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["nodes"] and all(n["kind"] == "dram" for n in d["nodes"] if n["cpus"])
    r = tiers(runner, env=NARROW)
    assert r.exit_code == 0 and "node 0 is " in r.output
