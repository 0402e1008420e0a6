"""`cxlkit run`, `cxlkit audit`, `cxlkit policy weights` as a user runs them."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import make_sysfs

CXLKIT = [str(Path(sys.executable).parent / "cxlkit")]
# An unmodified program: allocates and touches 32 MiB, says "ready", waits for a line.
HOG = ("import sys; b = bytearray(32 << 20); b[::4096] = b'x' * len(b[::4096]); "
       "print('ready', flush=True); sys.stdin.readline()")


def cli(*args: str, env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(CXLKIT + list(args), capture_output=True, text=True, check=check,
                          env={**os.environ, **(env or {})})


@pytest.mark.parametrize("flag, value, mode", [("--bind", "0", "bind"),
                                                ("--preferred", "0", "preferred"),
                                                ("--interleave", "0", "interleave"),
                                                ("--weighted", "0:3", "weighted"),
                                                ("--weighted", "0", "weighted")])
def test_run_sets_the_policy_the_program_runs_under(flag, value, mode):
    r = cli("run", flag, value, "--", sys.executable, "-c",
            "from cxlkit.placement import task_policy; print(task_policy())")
    assert r.stdout.strip() == str((mode, [0]))
    assert f"cxlkit run: {mode}" in r.stderr


def test_run_then_audit_an_unmodified_program():
    p = subprocess.Popen(CXLKIT + ["run", "-q", "--bind", "0", "--", sys.executable, "-c", HOG],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        doc = json.loads(cli("audit", str(p.pid), "--json").stdout)
        assert doc["pid"] == p.pid
        assert int(doc["totals_bytes"]["0"]) >= 32 << 20
        big = [m for m in doc["mappings"] if m["policy"].startswith("bind:0")
               and sum(m["pages"].values()) * m["page_size_kb"] * 1024 >= 32 << 20]
        assert big, "the 32 MiB bytearray is not under bind:0"
        table = cli("audit", str(p.pid)).stdout
        assert "total" in table and "node 0" in table
    finally:
        p.communicate("\n", timeout=30)
    assert p.returncode == 0


@pytest.mark.parametrize("args, message", [
    (["run", "--bind", "999", "--", "true"], "node 999 has no memory"),
    (["run", "--bind", "0", "--interleave", "0", "--", "true"], "exactly one of"),
    (["run", "--weighted", "0:x", "--", "true"], "weights '0:x'"),
    (["run", "--bind", "0", "--", "/no/such/program"], "cannot run '/no/such/program'"),
    (["audit", "999999999"], "no process 999999999"),
    (["policy", "weights", "0:1", "--from-bench", "x.json"], "not node:weight pairs and"),
    (["policy", "weights", "9:1"], "node 9 has no memory"),
])
def test_bad_input_exits_nonzero_with_a_message_naming_it(args, message):
    r = cli(*args, check=False)
    assert r.returncode != 0
    assert message in " ".join(r.stderr.split())


def test_policy_weights_shows_kernel_weights_and_applies(tmp_path):
    root = make_sysfs(tmp_path, nodes="0-1", weights={0: 1, 1: 1})
    env = {"CXLKIT_SYSFS_ROOT": str(root)}
    doc = json.loads(cli("policy", "weights", "--json", env=env).stdout)
    assert doc == {"kernel": {"0": 1, "1": 1}, "proposed": None, "applied": False, "auto": None}
    doc = json.loads(cli("policy", "weights", "0:3,1:1", "--apply", "--json", env=env).stdout)
    assert doc["kernel"] == {"0": 3, "1": 1} and doc["applied"]
    assert doc["before"] == {"0": 1, "1": 1}
    assert "proposed" in cli("policy", "weights", "0:2,1:1", env=env).stdout
    r = cli("policy", "weights", "--apply", env=env, check=False)
    assert r.returncode == 2 and "--apply needs weights" in r.stderr


def test_policy_weights_on_kernel_without_weighted_interleave(tmp_path):
    root = make_sysfs(tmp_path, nodes="0")
    r = cli("policy", "weights", env={"CXLKIT_SYSFS_ROOT": str(root)})
    assert "no weighted interleave" in r.stdout


def _auto_sysfs(tmp_path, auto: str | None):
    root = make_sysfs(tmp_path, nodes="0-1", weights={0: 2, 1: 1})
    if auto is not None:
        (root / "kernel/mm/mempolicy/weighted_interleave/auto").write_text(auto + "\n")
    return {"CXLKIT_SYSFS_ROOT": str(root)}, root / "kernel/mm/mempolicy/weighted_interleave"


def test_apply_shows_before_and_after_and_the_way_back_to_auto_mode(tmp_path):
    """--apply printed only 'applied', turned off the kernel's auto mode and
    offered no way back."""
    env, d = _auto_sysfs(tmp_path, "true")
    out = cli("policy", "weights", "0:3,1:1", "--apply", env=env).stdout
    assert "before" in out and "after" in out
    assert "auto mode on" in out
    assert "to undo: cxlkit policy weights --auto --apply" in out
    doc = json.loads(cli("policy", "weights", "0:5,1:1", "--apply", "--json", env=env).stdout)
    assert doc["before"] == {"0": 3, "1": 1} and doc["kernel"] == {"0": 5, "1": 1}
    # the fixture's files do not switch auto off by themselves as the kernel does: do it here
    (d / "auto").write_text("false\n")
    doc = json.loads(cli("policy", "weights", "--auto", "--apply", "--json", env=env).stdout)
    assert (d / "auto").read_text().strip() == "1" and doc["auto"] is True
    assert doc["auto_before"] is False


def test_without_auto_mode_the_way_back_is_the_previous_weights(tmp_path):
    env, d = _auto_sysfs(tmp_path, None)
    out = cli("policy", "weights", "0:3,1:1", "--apply", env=env).stdout
    assert "to undo: cxlkit policy weights 0:2,1:1 --apply" in out
    cli("policy", "weights", "0:2,1:1", "--apply", env=env)
    assert (d / "node0").read_text().strip() == "2"
    r = cli("policy", "weights", "--auto", "--apply", env=env, check=False)
    assert r.returncode == 2 and "no weighted-interleave auto mode" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
