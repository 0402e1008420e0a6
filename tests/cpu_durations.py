"""A pytest plugin: the tests that cost the most CPU time, for finding slow tests on a shared
machine, where wall times (--durations) grow with everybody else's load and CPU time barely
does. Loaded on demand:

    .venv/bin/python -m pytest -p cpu_durations --cpu-durations=20 tests/kv

prints the 20 costliest tests, each with its CPU seconds (this process and the children it
waited for, user + sys, setup to teardown) beside its wall seconds. A test that mostly waits
(sleeps, timeouts) costs little CPU and much wall: read both columns."""
from __future__ import annotations

import resource
import time

import pytest


def _cpu_s() -> float:
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


class _Costs:
    def __init__(self, n: int) -> None:
        self.n = n
        self.rows: list[tuple[float, float, str]] = []

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        cpu, wall = _cpu_s(), time.monotonic()
        yield
        self.rows.append((_cpu_s() - cpu, time.monotonic() - wall, item.nodeid))

    def pytest_terminal_summary(self, terminalreporter):
        rows = sorted(self.rows, reverse=True)
        tr = terminalreporter
        tr.write_sep("=", f"{min(self.n, len(rows))} costliest tests by CPU time")
        tr.write_line(f"{'cpu s':>8} {'wall s':>8}  test")
        for cpu, wall, nodeid in rows[:self.n]:
            tr.write_line(f"{cpu:8.2f} {wall:8.2f}  {nodeid}")
        tr.write_line(f"{sum(r[0] for r in rows):8.1f} {sum(r[1] for r in rows):8.1f}  "
                      f"all {len(rows)} tests")


def pytest_addoption(parser):
    parser.addoption("--cpu-durations", type=int, default=20, metavar="N",
                     help="with -p cpu_durations: show the N tests that cost the most CPU time")


def pytest_configure(config):
    config.pluginmanager.register(_Costs(config.getoption("--cpu-durations")), "cpu-costs")
