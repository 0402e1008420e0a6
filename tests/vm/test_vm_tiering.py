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
from cxlkit import tiering as TG

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


@pytest.mark.topology("numa")
def test_node1_is_a_lower_tier_and_demotion_under_pressure_is_reported(tmp_path, demotion_on):
    tiers = TG.node_tiers()
    assert tiers.get(1, 0) > tiers.get(0, 0), (
        f"memory tiers {tiers}: node 1 is not below node 0, the kernel has nowhere to demote "
        f"({sorted(p.name for p in Path('/sys/devices/virtual/memory_tiering').glob('*'))})")
    assert TG.tiering_state().demotion_enabled is True
    prog = PP.alloc_prog(tmp_path)
    memhog = shutil.which("memhog")
    assert memhog and shutil.which("numactl"), "numactl/memhog missing in the guest root"
    # a victim with 320 MiB written once and then left cold, on node 0 (its CPUs' node)
    victim = PP.start([str(prog), "mmap:320M"], dict(PP.os.environ))
    try:
        pid = victim.pids["parent"]
        v0 = _demoted(TG.vmstat_counters())
        audit = subprocess.Popen(_cxlkit("audit", str(pid), "--interval", "40", "--json"),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(3)  # the audit's first sample is taken
        hog = subprocess.run(["numactl", "--membind=0", memhog, "-r2", "760M"],
                             capture_output=True, text=True, timeout=300)
        out, err = audit.communicate(timeout=300)
        v1 = _demoted(TG.vmstat_counters())
        tiers_out = subprocess.run(_cxlkit("tiers"), capture_output=True, text=True,
                                   timeout=120).stdout
    finally:
        rc, verr = victim.finish()
    assert rc == 0, verr
    assert audit.returncode == 0, err
    tg = json.loads(out)["tiering"]
    assert tg["state"]["demotion_enabled"] is True
    seen = sum(v for k, v in tg["system"].items() if k.startswith("pgdemote_"))
    print(f"memhog rc {hog.returncode}; kernel pgdemote_* delta over the test {v1 - v0}, "
          f"seen by the audit's interval {seen}; victim node bytes delta "
          f"{tg['node_bytes_delta']}, demoted {tg['demoted_bytes']}")
    assert v1 - v0 > 0, "the kernel demoted nothing under pressure"
    assert 0 < seen <= v1 - v0  # the audit's window lies inside the test's
    # the victim's cold pages went to the lower tier, and the audit says so
    assert tg["tiers"]["1"] > tg["tiers"]["0"]
    assert tg["node_bytes_delta"]["1"] > 0 and tg["demoted_bytes"] > 0
    assert tg["demoted_bytes"] == min(-tg["node_bytes_delta"]["0"], tg["node_bytes_delta"]["1"])
    assert "demotion on" in tiers_out and "pgdemote_kswapd" in tiers_out, tiers_out
