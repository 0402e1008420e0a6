"""tests/vm: tests marked `vm` run inside the rig's QEMU guest (`make test-vm`); each names the
rig topologies it belongs to with @pytest.mark.topology(...). Inside a guest (CXLKIT_VM_TOPOLOGY
set by the rig) tests of other topologies are deselected; on the host vm tests are skipped."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # rig.py: figures QEMU was told

import rig  # noqa: E402


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "topology(*names): the rig topologies (tests/vm/rig.py) a vm test runs in")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    topo = os.environ.get("CXLKIT_VM_TOPOLOGY")
    keep, drop = [], []
    for item in items:
        if item.get_closest_marker("vm") is None:
            keep.append(item)
            continue
        names = item.get_closest_marker("topology")
        if names is None or not set(names.args) <= set(rig.TOPOLOGIES):
            raise pytest.UsageError(f"{item.nodeid}: a vm test needs "
                                    f"@pytest.mark.topology(<one of {rig.TOPOLOGIES}>)")
        if topo is None:
            item.add_marker(pytest.mark.skip(
                reason="runs inside the QEMU guest: `make test-vm` (tests/vm/rig.py)"))
            keep.append(item)
        elif topo in names.args:
            keep.append(item)
        else:
            drop.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture
def vm_topology() -> str:
    return os.environ["CXLKIT_VM_TOPOLOGY"]


@pytest.fixture
def cxl_facts() -> dict[str, str]:
    """What the cxl topology's prep (guest/cxl-ram-region.sh) created: region, node, size."""
    text = (Path(os.environ["CXLKIT_VM_XFER"]) / "cxl.facts").read_text()
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
