"""Training state on real NUMA nodes inside the rig's guests: every class of a plan made for
the guest lands on the nodes the plan names, and Adam's thread teams update the chunks of the
node that holds them. Sizes stay tiny (TCG)."""
from __future__ import annotations

import numpy as np
import pytest

import cxlkit
from cxlkit.train import adam as A
from cxlkit.train import plan as TP

pytestmark = [pytest.mark.vm, pytest.mark.topology("numa", "cxl")]
THP = "/sys/kernel/mm/transparent_hugepage/enabled"


@pytest.fixture(autouse=True)
def base_pages():
    """Per-page intent needs THP=madvise (as in test_vm_placement.py)."""
    text = open(THP).read()
    before = text[text.index("[") + 1:text.index("]")]
    with open(THP, "w") as f:
        f.write("madvise")
    yield
    with open(THP, "w") as f:
        f.write(before)


def test_every_class_of_a_guest_plan_lands_where_it_says():
    tiers = TP.machine_tiers(reserve=0.5)
    assert len(tiers) >= 2, "the rig's topologies have two memory nodes or more"
    fp = TP.Footprint(1 << 20, 2, 256, 512, 2, 1)
    for mode in TP.MODES:
        plan = TP.plan_training(fp, tiers, mode=mode)
        assert plan.fits
        for cls in TP.CLASS_NAMES:
            if not plan.classes[cls].nodes:
                continue
            with plan.alloc(cls, plan.budget(cls)) as buf:
                audit = buf.audit()
                assert audit.ok, (mode, cls, audit.problems)
                assert set(audit.actual.pages) <= set(plan.classes[cls].nodes)


def test_team_chunks_follow_the_pages_of_a_stripe():
    nodes = cxlkit.topology.memory_nodes()[:2]
    chunk = 2 << 20
    n = 4 * chunk // 4  # four stripe chunks of params: two on each node
    pol = cxlkit.stripe(nodes, chunk=chunk)
    bufs = [cxlkit.alloc(n * 4, pol) for _ in range(4)]
    p, m, v, g = (b.numpy("float32") for b in bufs)
    g[:] = 1.0
    with A.AdamTeam({nodes[0]: 1, nodes[1]: 1}, chunk_bytes=chunk) as team:
        A.step_tensors([A.AdamTensor(p, m, v, g)], A.AdamConfig(), 1, team=team)
        assert {t["node"]: t["chunks"] for t in team.info()} == {nodes[0]: 2, nodes[1]: 2}
    assert np.all(p < 0)
