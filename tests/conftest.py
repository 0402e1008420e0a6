"""Shared fixtures: fault-hook hygiene, machine facts, a private pool path in /dev/shm (and
the pool paths' lock files removed after the session), and a minimal writable sysfs tree."""
from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from cxlkit import _native, topology

# A suite started in the background of a non-interactive shell (`cmd &`, nohup) inherits SIGINT
# ignored, and every program it starts would too (an ignored signal stays ignored across exec):
# the Ctrl-C tests need it delivered. A handler here is reset to the default in each child.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable

# The helpers shared by the subsystem folders (msg_ranks, sleepers, kv_fakes, ...) live beside
# this file: importable from every test module whatever pytest's import mode.
if str(REPO / "tests") not in sys.path:
    sys.path.insert(0, str(REPO / "tests"))



@pytest.fixture
def shm_dir():
    """A private directory on tmpfs at /dev/shm (the mapped spill path's filesystem), removed
    after the test; skipped where /dev/shm is not tmpfs."""
    import tempfile

    from cxlkit.train.spill.path_mapped import fs_type

    if not os.path.isdir("/dev/shm") or fs_type("/dev/shm") != "tmpfs":
        pytest.skip("no tmpfs at /dev/shm on this machine")
    with tempfile.TemporaryDirectory(dir="/dev/shm", prefix="cxlkit-test-shm-") as d:
        yield d


@pytest.fixture(scope="session", autouse=True)
def _no_leftover_pool_path_locks():
    """Pool subgroup paths lock through /dev/shm/cxlkit-subgroups-<hash>.lock, which the
    library leaves in place (unlinking a lock file another process may hold is racy): one
    per distinct pool, so every test pool would leave one. The session removes the new ones."""
    before = set(Path("/dev/shm").glob("cxlkit-subgroups-*.lock"))
    yield
    for p in set(Path("/dev/shm").glob("cxlkit-subgroups-*.lock")) - before:
        p.unlink(missing_ok=True)


@pytest.fixture(autouse=True)
def _no_armed_faults():
    yield
    _native.fault_clear()


@pytest.fixture
def pool_path(tmp_path):
    """A pool file path private to the test (tmpfs like the embedded default); the pool and
    anything beside it (stripes, temporaries) are removed afterwards."""
    path = Path(f"/dev/shm/cxlkit-test-{os.getpid()}-{tmp_path.name}")
    yield str(path)
    for p in path.parent.glob(path.name + "*"):
        p.unlink(missing_ok=True)


@pytest.fixture(scope="session")
def wchan():
    """Skips a test that watches another process's thread fall asleep (tests/sleepers.py)
    where the kernel does not name the futex wait in /proc/<pid>/task/<tid>/wchan."""
    from sleepers import futex_sleeps_visible

    if not futex_sleeps_visible():
        pytest.skip("/proc/<pid>/task/<tid>/wchan does not name a futex wait on this kernel")


@pytest.fixture
def memory_nodes() -> list[int]:
    return topology.memory_nodes()


@pytest.fixture
def two_nodes(memory_nodes) -> list[int]:
    if len(memory_nodes) < 2:
        pytest.skip("needs two NUMA nodes with memory: run `make test-vm`")
    return memory_nodes[:2]


def make_sysfs(root: Path, *, nodes: str = "0-1", weights: dict[int, int] | None = None) -> Path:
    """A minimal sysfs tree: has_memory, and weighted-interleave weights when given."""
    d = root / "devices/system/node"
    d.mkdir(parents=True)
    (d / "has_memory").write_text(nodes + "\n")
    if weights is not None:
        w = root / topology.WEIGHTED_INTERLEAVE_DIR
        w.mkdir(parents=True)
        for n, v in weights.items():
            (w / f"node{n}").write_text(f"{v}\n")
    return root


# ---- Hypothesis profiles -----------------------------------------------------------------
# "ci" (the default): the same examples on every run (derandomize: a failure reproduces on
# the next run and on every machine), 50 examples for a test that names no max_examples,
# no deadline (an example slowed by a loaded machine is not a failure) and no example
# database (nothing written into the tree). "dev": fresh random examples each run, 500 for a
# test that names no max_examples, the database kept for replaying failures:
#     HYPOTHESIS_PROFILE=dev .venv/bin/python -m pytest tests/placement/test_policy.py
# A test's own @settings(max_examples=...) holds under both profiles. Loaded at configure
# time, before the test modules' @settings take their defaults from it; skipped where
# Hypothesis is absent or its plugin is off (the DeepSpeed environment, the vm guests).
def _load_hypothesis_profile(config) -> None:
    if not config.pluginmanager.has_plugin("hypothesispytest"):
        return
    from hypothesis import settings

    settings.register_profile("ci", derandomize=True, max_examples=50, deadline=None,
                              database=None, print_blob=True)
    settings.register_profile("dev", max_examples=500, deadline=None, print_blob=True)
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


# ---- run the suite under the non-coherence simulator ---------------------------
# `pytest --coherence-sim [--sim-seed N]` (or CXLKIT_TEST_COHERENCE=sim) opens every pool whose
# test does not name a coherence with coherence="sim": each host id on a simulated cache of its
# own (docs/pool-format.md). Subprocesses inherit it through the environment.
def pytest_addoption(parser):
    parser.addoption("--coherence-sim", action="store_true",
                     help="open pools with coherence='sim' unless a test names one")
    parser.addoption("--sim-seed", default=None, help="CXLKIT_SIM_SEED for --coherence-sim")


def pytest_configure(config):
    _load_hypothesis_profile(config)
    if config.getoption("--coherence-sim") or os.environ.get("CXLKIT_TEST_COHERENCE") == "sim":
        import tempfile

        os.environ["CXLKIT_COHERENCE"] = "sim"
        # on tmpfs, as the views of a real run: the simulator refuses views larger than it
        os.environ.setdefault("CXLKIT_SIM_DIR", tempfile.mkdtemp(prefix="cxlkit-sim-",
                                                                dir="/dev/shm"))
        if config.getoption("--sim-seed") is not None:
            os.environ["CXLKIT_SIM_SEED"] = str(config.getoption("--sim-seed"))


def pytest_unconfigure(config):
    d = os.environ.get("CXLKIT_SIM_DIR", "")
    if os.path.basename(d).startswith("cxlkit-sim-") and os.path.isdir(d):
        import shutil

        shutil.rmtree(d, ignore_errors=True)  # views a killed process left behind


def pytest_report_header(config):
    if os.environ.get("CXLKIT_COHERENCE") == "sim":
        return (f"cxlkit: coherence=sim, seed {os.environ.get('CXLKIT_SIM_SEED', '1')}, "
                f"views in {os.environ['CXLKIT_SIM_DIR']}")
    return None
