"""`make test`'s shape, read from make's dry run (`make -n`, nothing built): the library is
compiled once per configuration (the Python module's tree holds the C tests and ctest runs
them there; the ASan and release trees are the only others), and only `make test` holds the
side compiles to one compiler each (they run beside the build and pytest there)."""
from __future__ import annotations

import re
import subprocess

from conftest import REPO


def dry_run(*goals: str) -> list[str]:
    r = subprocess.run(["make", "-n", *goals], cwd=REPO, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout.replace("\\\n", " ").splitlines()


def test_the_c_tests_run_in_the_tree_the_python_build_compiles():
    lines = dry_run("test")
    trees = [m[1] for ln in lines for m in [re.search(r"cmake -S \. -B (\S+)", ln)] if m]
    assert sorted(trees) == ["build/asan", "build/release"]
    pip = [ln for ln in lines if "pip install --no-build-isolation" in ln]
    assert len(pip) == 1 and "cmake.define.CXLKIT_TESTS=ON" in pip[0], pip
    runs = [m[1] for ln in lines for m in [re.search(r"ctest --test-dir (\S+)", ln)] if m]
    assert sorted(runs)[0] == "build/asan" and len(runs) == 2, runs
    tree = REPO / runs[1]
    assert re.fullmatch(r"build/cp\d+-cp\d+-\S+", runs[1]), runs
    assert (tree / "CTestTestfile.cmake").exists(), f"{tree}: no C tests there; make build"


def test_only_make_test_holds_the_side_compiles_to_one_compiler():
    builds = [ln for ln in dry_run("test") if "cmake --build build/" in ln]
    assert len(builds) == 2 and all("--parallel 1" in ln for ln in builds), builds
    alone = [ln for ln in dry_run("ctest-asan") if "cmake --build build/" in ln]
    assert len(alone) == 1 and "--parallel" not in alone[0], alone


def _pytest_runs(lines: list[str]) -> list[list[str]]:
    """The pytest command lines of a dry run, as words (the simulator's rerun left out)."""
    return [ln.split() for ln in lines if "-m pytest" in ln and "--coherence-sim" not in ln]


def test_make_test_runs_the_whole_suite_once_in_two_parts():
    main, side = sorted(_pytest_runs(dry_run("test")), key=lambda w: "--ignore=" not in " ".join(w))
    ignored = sorted(w.split("=", 1)[1] for w in main if w.startswith("--ignore="))
    paths = sorted(w for w in side if w.startswith("tests/"))
    assert ignored and ignored == paths, (main, side)
    assert all((REPO / p).is_dir() for p in paths), paths
    alone = _pytest_runs(dry_run("pytest"))
    assert len(alone) == 1 and not any(w.startswith("--ignore") for w in alone[0]), alone
    # pytest arguments of one's own run the suite whole, as one part
    chosen = _pytest_runs(dry_run("test", "PYTEST_ARGS=-x"))
    assert len(chosen) == 1 and "-x" in chosen[0] and "--ignore" not in " ".join(chosen[0])
