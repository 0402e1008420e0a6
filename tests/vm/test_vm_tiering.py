"""The kernel's own demotion, done in the guest and seen by cxlkit: the numa topology's node 1
(CPU-less, HMAT 250 ns) sits in a lower memory tier than node 0; with
/sys/kernel/mm/numa/demotion_enabled on, filling node 0 (numactl --membind=0 memhog) makes
kswapd demote cold pages to node 1. `cxlkit audit PID --interval` over that window reports the
pgdemote_* deltas the kernel counted and the process's own bytes that left node 0 for node 1;
`cxlkit tiers` shows demotion on with the counters. Sizes fit the guest's 1 GiB node 0."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import preload_prog as PP
from cxlkit.placement import tiering as TG

pytestmark = pytest.mark.vm
MiB = 1 << 20
DEMOTION = Path("/sys/kernel/mm/numa/demotion_enabled")


def _cxlkit(*args: str) -> list[str]:
    return [sys.executable, "-c", "from cxlkit.cli.main import main; main()", *args]


def _demoted(counters: dict[str, int]) -> int:
    return sum(v for k, v in counters.items() if k.startswith("pgdemote_"))


@pytest.fixture
def demotion_on():
    if not DEMOTION.exists():
        pytest.fail(f"{DEMOTION} missing: this guest kernel has no demotion switch")
    before = DEMOTION.read_text().strip()
    DEMOTION.write_text("true\n")
    yield
    DEMOTION.write_text(before + "\n")


def _sleeping(pid: int) -> bool:
    """Whether pid sits in clock_nanosleep (time.sleep: the audit's interval)."""
    try:
        return Path(f"/proc/{pid}/syscall").read_text().split()[0] == "230"  # x86-64
    except (OSError, IndexError):
        return False


def _hog() -> subprocess.CompletedProcess:
    # 760 MiB bound to node 0 (1 GiB): node 0 runs out, kswapd demotes its coldest pages
    return subprocess.run(["numactl", "--membind=0", shutil.which("memhog"), "-r2", "760M"],
                          capture_output=True, text=True, timeout=300)


@pytest.mark.topology("numa")
def test_node1_is_a_lower_tier_and_demotion_under_pressure_is_reported(tmp_path, demotion_on):
    tiers = TG.node_tiers()
    assert tiers.get(1, 0) > tiers.get(0, 0), (
        f"memory tiers {tiers}: node 1 is not below node 0, the kernel has nowhere to demote "
        f"({sorted(p.name for p in Path('/sys/devices/virtual/memory_tiering').glob('*'))})")
    assert TG.tiering_state().demotion_enabled is True
    assert shutil.which("memhog") and shutil.which("numactl"), "numactl/memhog missing"
    prog = PP.alloc_prog(tmp_path)
    # a victim with 320 MiB written once and then left cold, on node 0 (its CPUs' node)
    victim = PP.start([str(prog), "mmap:320M"], dict(PP.os.environ))
    victim2 = None
    try:
        pid = victim.pids["parent"]
        # 1. the window of `cxlkit audit --interval` (TG.observe) with the pressure inside it
        #    for sure: its sleep is the memhog run
        v0 = _demoted(TG.vmstat_counters())
        hogs = []
        t0 = time.monotonic()
        d = TG.observe(0, pid, sleep=lambda s: hogs.append(_hog()))
        hog_s = time.monotonic() - t0
        v1 = _demoted(TG.vmstat_counters())
        # 2. the command itself, on a second cold victim: memhog starts once the command
        #    sleeps in its interval (its first sample taken; under TCG its start takes
        #    seconds), and the interval outlasts memhog
        victim2 = PP.start([str(prog), "mmap:320M"], dict(PP.os.environ))
        interval = max(30, int(3 * hog_s))
        audit = subprocess.Popen(_cxlkit("audit", str(victim2.pids["parent"]), "--interval",
                                         str(interval), "--json"),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        while audit.poll() is None and not _sleeping(audit.pid):
            time.sleep(0.2)
        hogs.append(_hog())
        out, err = audit.communicate(timeout=interval + 120)
        tiers_out = subprocess.run(_cxlkit("tiers"), capture_output=True, text=True,
                                   timeout=120).stdout
    finally:
        rc, verr = victim.finish()
        if victim2 is not None:
            victim2.finish()
    assert rc == 0, verr
    seen = _demoted(d.system)
    print(f"memhog runs {len(hogs)} rc {[h.returncode for h in hogs]}; observe: kernel "
          f"pgdemote_* {v1 - v0}, in the window {seen}, {d.system}; victim node bytes delta "
          f"{d.node_bytes_delta}, demoted {d.demoted_bytes}")
    assert 0 < seen <= v1 - v0, "the kernel demoted nothing under pressure"
    # the victim's cold pages went to the lower tier, and the audit says so
    assert d.tiers[1] > d.tiers[0]
    assert d.node_bytes_delta[1] > 0 and d.demoted_bytes > 0
    assert d.demoted_bytes == min(-d.node_bytes_delta[0], d.node_bytes_delta[1])
    assert audit.returncode == 0, err
    tg = json.loads(out)["tiering"]
    print(f"memhog took {hog_s:.1f} s; cxlkit audit --interval {interval}: {tg['system']}, "
          f"victim {tg['node_bytes_delta']}, demoted {tg['demoted_bytes']}")
    assert tg["state"]["demotion_enabled"] is True and tg["interval_s"] == interval
    assert _demoted(tg["system"]) > 0
    assert tg["demoted_bytes"] > 0 and tg["node_bytes_delta"]["1"] == tg["demoted_bytes"]
    assert "demotion on" in tiers_out and "pgdemote_kswapd" in tiers_out, tiers_out
