"""Per-path capacities of a SubgroupStore: the split never gives a path more subgroups than
its capacity holds, puts the rest on the others by the model (never slower there than any
feasible split, enumerated for small cases), and a total below the state is a typed error
naming the paths; the spec forms (':cap=SIZE', a dict, capacities=, the DeepSpeed-style
config) and the planner."""
from __future__ import annotations

import itertools
import json
import math
import os
import tempfile

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cxlkit.train import adam as A
from cxlkit.train import from_config
from cxlkit.train.spill import planner as SP
from cxlkit.train.spill import split as S
from cxlkit.train.spill.paths import (CapacityError, PathFullError, parse_path,
                                      split_capacity)
from cxlkit.train.spill.store import SubgroupStore

GB = 1e9
BF16 = A.DTYPES["bfloat16"]
SG = 1000          # params per subgroup in the store tests
FOOT = 2 * 16384   # two slots of (4096 header + 12000 bytes padded to 12288)


def best_feasible_time(m, bw, cpu, rate, caps):
    """The least modelled time over every split of m that fits the caps (enumerated)."""
    best = math.inf
    for c in itertools.product(*[range(min(cap, m) + 1) for cap in caps]):
        if sum(c) == m:
            best = min(best, S.model_time(c, bw, cpu, rate))
    return best


@st.composite
def capped_case(draw):
    n = draw(st.integers(1, 3))
    m = draw(st.integers(0, 8))
    bw = draw(st.lists(st.sampled_from([0.0, 0.3, 1.0, 2.5, 8.0]), min_size=n, max_size=n))
    caps = draw(st.lists(st.one_of(st.none(), st.integers(0, 6)), min_size=n, max_size=n))
    if sum(m if c is None else min(c, m) for c in caps) < m:
        caps[draw(st.integers(0, n - 1))] = None
    with_cpu = draw(st.booleans())
    cpu = draw(st.lists(st.sampled_from([0.0, 0.1, 0.5, 1.0]), min_size=n, max_size=n)) \
        if with_cpu else None
    rate = draw(st.sampled_from([0.5, 1.0, 3.0])) if with_cpu else None
    return m, [b * GB for b in bw], caps, [c / GB for c in cpu] if cpu else None, rate


@settings(max_examples=300, deadline=None)
@given(capped_case())
def test_split_respects_capacities_sums_to_m_and_is_never_slower_than_a_feasible_split(case):
    m, bw, caps, cpu, rate = case
    counts = S.split_counts(m, bw, cpu, rate, caps=caps)
    bound = [m if c is None else c for c in caps]
    assert sum(counts) == m
    assert all(0 <= k <= b for k, b in zip(counts, bound))
    t, best = S.model_time(counts, bw, cpu, rate), best_feasible_time(m, bw, cpu, rate, bound)
    assert t <= best * (1 + 1e-9) or (math.isinf(t) and math.isinf(best))


def test_a_capacity_that_does_not_bind_keeps_the_uncapped_split():
    bw, cpu, rate = [0.8 * GB, 3 * GB, 4 * GB], [0.01 / GB, 0.15 / GB, 0.1 / GB], 0.3
    free = S.split_counts(16, bw, cpu, rate)
    assert S.split_counts(16, bw, cpu, rate, caps=[None, 16, 100]) == free


def test_capped_memory_paths_send_the_rest_to_the_disk():
    # disk 1 GB/s, tmpfs 8 GB/s holding 3 subgroups, memory 10 GB/s holding 2: the disk
    # carries what they cannot hold, however slow it is
    counts = S.split_counts(16, [1 * GB, 8 * GB, 10 * GB], caps=[None, 3, 2])
    assert counts == [11, 3, 2]


def test_split_refuses_capacities_below_the_state_and_bad_ones():
    with pytest.raises(ValueError, match="hold 3 subgroups, fewer than 4"):
        S.split_counts(4, [GB, GB], caps=[1, 2])
    with pytest.raises(ValueError, match="caps"):
        S.split_counts(4, [GB, GB], caps=[1])
    with pytest.raises(ValueError, match="caps"):
        S.split_counts(4, [GB, GB], caps=[-1, None])
    with pytest.raises(ValueError, match="caps"):
        S.split_counts(4, [GB, GB], caps=[True, None])


def test_capacity_spec_forms():
    assert split_capacity("/x:cap=2G") == ("/x", 2 << 30)
    assert split_capacity({"path": "mem", "capacity": 4096}) == ("mem", 4096)
    assert split_capacity({"path": "mem", "capacity": None}) == ("mem", None)
    assert split_capacity("/x") == ("/x", None)
    p = parse_path("mem:cap=1M")
    assert p.name.startswith("mem") and p.capacity_nbytes == 1 << 20
    assert parse_path("mem", capacity="64K").capacity_nbytes == 65536
    assert parse_path("mem").capacity_nbytes is None
    with pytest.raises(ValueError, match="capacity given twice"):
        parse_path("mem:cap=1M", capacity=5)
    with pytest.raises(ValueError, match="'/x'.*capacity"):
        parse_path("/x:cap=lots")
    with pytest.raises(ValueError, match="capacity"):
        split_capacity({"path": "/x", "cap": 1})
    with pytest.raises(ValueError, match="capacities: 1 figures for 2 paths"):
        SubgroupStore(["mem", "mem:0"], capacities=[1])


def _bf16(x: float, n: int) -> np.ndarray:
    return (np.full(n, x, np.float32).view(np.uint32) >> 16).astype(np.uint16)


def _run(paths, steps=3, **kw):
    """A store over paths: 12 subgroups of SG params, `steps` updates; its state and
    metrics."""
    sizes = [SG] * 12
    st = SubgroupStore(paths, subgroup_params=SG, cache_subgroups=3, **kw)
    with st:
        st.bind([sizes])
        st.init_params(lambda pid: np.linspace(-1, 1, SG, dtype=np.float32) + pid)
        ms = [st.step([A.AdamConfig(lr=1e-2)], [(_bf16(0.1 * (s + 1), SG), BF16)] * 12,
                      [None] * 12, [s + 1] * 12) for s in range(steps)]
        state = st.read_state()
        return state, ms, st.plan(), list(st.assignment)


def test_a_small_tmpfs_capacity_forces_subgroups_onto_the_directory(tmp_path):
    with tempfile.TemporaryDirectory(dir="/dev/shm", prefix="cxlkit-cap-") as shm0, \
            tempfile.TemporaryDirectory(dir="/dev/shm", prefix="cxlkit-cap-") as shm:
        disk0, disk = tmp_path / "disk0", tmp_path / "disk"
        disk0.mkdir()
        disk.mkdir()
        # tmpfs 20x the disk's bandwidth: without a bound it takes (nearly) every subgroup
        free, _, plan0, _ = _run([f"map:{shm0}", f"aio:{disk0}"],
                                 bandwidths=[20 * GB, 1 * GB], reestimate=False)
        assert plan0[0]["subgroups"] >= 11
        cap = 4 * FOOT + FOOT // 2   # holds 4 subgroups
        state, ms, plan, assign = _run([f"map:{shm}:cap={cap}", f"aio:{disk}"],
                                       bandwidths=[20 * GB, 1 * GB])
        assert plan[0]["capacity_subgroups"] == 4 and plan[0]["capacity_nbytes"] == cap
        assert plan[0]["subgroups"] == 4 and plan[1]["subgroups"] == 8
        assert plan[0]["held_nbytes"] <= cap and plan[1]["capacity_nbytes"] is None
        # re-estimated every step from what each path did, the bound still holds
        for m in ms:
            assert m["paths"][0]["subgroups"] <= 4 and m["paths"][0]["held_nbytes"] <= cap
        files = [f for f in os.listdir(shm) if f.endswith(".cxk")]
        assert len(files) <= 4
        assert len([f for f in os.listdir(disk) if f.endswith(".cxk")]) >= 8
        # same kernel, same order per element: the state does not depend on the split
        for pid in free:
            for a, b in zip(free[pid], state[pid]):
                assert np.array_equal(a, b)


def test_reassign_to_a_faster_capped_path_keeps_the_bound(tmp_path):
    with SubgroupStore(["mem:cap=" + str(3 * FOOT), "mem:0"], subgroup_params=SG,
                       cache_subgroups=3, bandwidths=[GB, GB]) as st:
        st.bind([[SG] * 10])
        assert st.assignment.count(0) <= 3
        st.reassign([100 * GB, GB])
        assert st.assignment.count(0) == 3 and st.assignment.count(1) == 7


def test_a_total_capacity_below_the_state_raises_capacity_error_naming_the_paths(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    st = SubgroupStore([f"aio:{a}:cap={2 * FOOT}", f"aio:{b}:cap=100K"], subgroup_params=SG,
                       cache_subgroups=3, bandwidths=[GB, GB])
    with st, pytest.raises(CapacityError) as ei:
        st.bind([[SG] * 12])
    e = ei.value
    assert isinstance(e, PathFullError) and e.errno == 28
    assert str(a) in str(e) and str(b) in str(e) and "hold 5 of the 12 subgroups" in str(e)
    assert not [f for d in (a, b) for f in os.listdir(d) if f.endswith(".cxk")]


def test_from_config_takes_capacities_beside_nvme_path_and_the_suffix(tmp_path):
    cfg = {"zero_optimization": {"sub_group_size": SG, "offload_optimizer": {
        "device": "nvme", "nvme_path": [f"{tmp_path}:cap=1G", "mem"], "buffer_count": 3}},
        "cxlkit": {"capacities": [None, 2 * FOOT], "bandwidths": [GB, 10 * GB]}}
    with from_config(cfg).make_store() as st:
        assert [p.capacity_nbytes for p in st.paths] == [1 << 30, 2 * FOOT]
        st.bind([[SG] * 6])
        assert st.assignment.count(1) == 2
    cfg["cxlkit"]["capacities"] = ["1G"]
    with pytest.raises(ValueError, match="cxlkit.capacities"):
        from_config(cfg)
    cfg["cxlkit"]["capacities"] = ["1G", "much"]
    with pytest.raises(ValueError, match="'mem'.*capacity"):
        from_config(cfg)


def test_plan_spill_honours_capacities_and_cli_shows_them():
    figs = SP.measure_paths(["/disk=1", "/shm=8:cap=10G", "mem=10:cap=5G"])
    assert [f.capacity_nbytes for f in figs] == [None, 10 << 30, 5 << 30]
    p = SP.plan_spill(8_000_000_000, figs, host_cache_bytes=8 << 30, kernel_eps=1e9)
    foot = 2 * (4096 + 1_200_001_024)   # two slots of a 100M-param subgroup
    caps = [r["capacity_subgroups"] for r in p.paths]
    assert caps == [None, (10 << 30) // foot, (5 << 30) // foot]
    assert [r["subgroups"] for r in p.paths][1:] == caps[1:]
    assert sum(r["subgroups"] for r in p.paths) == p.subgroups
    with pytest.raises(CapacityError, match="/disk"):
        SP.plan_spill(8_000_000_000, SP.measure_paths(["/disk=1:cap=1G", "/shm=8:cap=1G"]),
                      host_cache_bytes=8 << 30, kernel_eps=1e9)
    from typer.testing import CliRunner

    from cxlkit.cli.main import _load, app
    _load()
    r = CliRunner().invoke(app, ["plan", "train", "--params", "8B", "--layers", "32",
                                 "--hidden", "4096", "--context", "2k", "--spill",
                                 "/d=1,/s=8:cap=10G", "--host-cache", "8G", "--json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output)["spill"]["paths"]
    assert rows[1]["capacity_nbytes"] == 10 << 30 and rows[1]["subgroups"] == caps[1]
    r = CliRunner().invoke(app, ["plan", "train", "--params", "8B", "--layers", "32",
                                 "--hidden", "4096", "--context", "2k", "--spill",
                                 "/d=1:cap=1G,/s=8:cap=1G"])
    assert r.exit_code == 2 and "capacities hold" in r.output
