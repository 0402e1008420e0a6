"""The split of subgroups over paths that share the CPU (spill_split): adding a path never
makes the modelled step slower than the best subset of the paths, on fake bandwidth / CPU
figures; the store measures each path alone and all at once and splits by that model."""
from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from cxlkit.train import adam as A
from cxlkit.train.spill import split as S
from cxlkit.train.spill import layout as L
from cxlkit.train.spill.paths import MemoryPath
from cxlkit.train.spill.store import SubgroupStore

GB = 1e9
BF16 = A.DTYPES["bfloat16"]


def best_subset_time(m, bw, cpu, rate):
    """The least modelled time over every non-empty subset of the paths, each split by the
    same function restricted to it (the other paths given no bandwidth)."""
    best = float("inf")
    n = len(bw)
    for k in range(1, n + 1):
        for sub in itertools.combinations(range(n), k):
            b = [bw[i] if i in sub else 0.0 for i in range(n)]
            c = S.split_counts(m, b, cpu, rate)
            best = min(best, S.model_time(c, bw, cpu, rate))
    return best


def test_eq1_rounding_gave_a_slow_path_a_subgroup_the_split_leaves_it_out():
    # defect: Eq. 1 gives every path with bandwidth at least one subgroup (ceil), so a path
    # 100x slower than the other one held a subgroup and made the step 6x slower than
    # leaving it out
    bw = [0.01 * GB, 1.0 * GB]
    assert L.eq1_counts(16, bw) == [1, 15]
    assert S.model_time([1, 15], bw) > 6 * S.model_time([0, 16], bw)
    assert S.split_counts(16, bw) == [0, 16]
    assert S.split_counts(16, [1.0, 1.0]) == [8, 8]


def test_cpu_bound_third_path_no_longer_slows_the_step():
    # the shape measured here: a disk (O_DIRECT, little CPU per byte), tmpfs and a memory
    # tier (CPU copies), about one core for the paths: Eq. 1 over the three (bandwidths
    # measured one at a time) is slower in the model than the disk and the memory tier alone
    bw = [1.5 * GB, 3.0 * GB, 4.0 * GB]
    cpu = [0.01 / GB, 0.30 / GB, 0.10 / GB]
    rate = 0.5
    m = 16
    eq1 = L.eq1_counts(m, bw)
    t_eq1 = S.model_time(eq1, bw, cpu, rate)
    best = best_subset_time(m, bw, cpu, rate)
    pair = S.model_time(S.split_counts(m, [bw[0], 0, bw[2]], cpu, rate), bw, cpu, rate)
    assert t_eq1 > pair * 1.1  # the old split: adding tmpfs made it slower
    got = S.split_counts(m, bw, cpu, rate)
    assert sum(got) == m
    assert S.model_time(got, bw, cpu, rate) <= best + 1e-15
    # the knapsack fills the cheapest CPU per byte first: the disk whole
    y = S.knapsack_throughput(bw, cpu, rate)
    assert y[0] == bw[0] and sum(c * b for c, b in zip(cpu, y)) == pytest.approx(rate)
    assert S.knapsack_throughput(bw, cpu, None) == bw


@pytest.mark.parametrize("seed", range(6))
def test_adding_a_path_never_beats_the_best_subset_on_random_fake_paths(seed):
    rnd = random.Random(seed)
    for _ in range(40):
        n = rnd.randint(1, 5)
        bw = [rnd.choice([0.05, 0.3, 1.0, 2.0, 5.0]) * GB * rnd.uniform(0.5, 1.5)
              for _ in range(n)]
        cpu = [rnd.choice([0.0, 0.01, 0.1, 0.3]) / GB for _ in range(n)]
        rate = rnd.choice([None, 0.2, 0.5, 1.0, 2.0])
        m = rnd.randint(1, 64)
        got = S.split_counts(m, bw, cpu, rate)
        assert sum(got) == m and min(got) >= 0
        assert S.model_time(got, bw, cpu, rate) <= best_subset_time(m, bw, cpu, rate) * \
            (1 + 1e-12)


def test_split_refuses_bad_figures():
    with pytest.raises(ValueError, match="cpu_per_byte"):
        S.split_counts(4, [1.0, 1.0], [0.1])
    with pytest.raises(ValueError, match="bandwidths"):
        S.split_counts(4, [1.0, float("nan")])
    with pytest.raises(ValueError, match="cpu_rate"):
        S.split_counts(4, [1.0], [0.1], 0.0)
    with pytest.raises(ValueError, match="no paths"):
        S.split_counts(4, [])
    with pytest.raises(ValueError, match="with bandwidths"):
        SubgroupStore(["mem"], cpu_rate=1.0)
    with pytest.raises(ValueError, match="cpu_per_byte"):
        SubgroupStore(["mem"], bandwidths=[1.0], cpu_per_byte=[-1.0])


class _FakeCopyPath(MemoryPath):
    """A memory tier whose microbenchmark gives programmed figures: alone, then together
    with the others (contention), and a programmed CPU cost per byte."""

    def __init__(self, name, alone, together, cpu):
        super().__init__()
        self.name = name
        self._figs = [alone, together]
        self._cpu = cpu
        self.calls = 0

    def measure(self, nbytes):
        f = self._figs[min(self.calls, 1)]
        self.calls += 1
        self.measured_cpu_per_byte = self._cpu
        return (f, f)


def _store(paths, m=16):
    st = SubgroupStore(paths, subgroup_params=1000, cache_subgroups=3)
    st.bind([[1000] * m])
    st.init_params(lambda pid: np.full(1000, 0.5, np.float32))
    return st


def test_store_measures_paths_alone_and_together_and_splits_by_the_cpu_model():
    disk = _FakeCopyPath("fake-disk", 0.8 * GB, 0.8 * GB, 0.01 / GB)
    shm = _FakeCopyPath("fake-tmpfs", 3.0 * GB, 1.0 * GB, 0.15 / GB)
    mem = _FakeCopyPath("fake-mem", 4.0 * GB, 1.5 * GB, 0.10 / GB)
    with _store([disk, shm, mem]) as st:
        assert [p.calls for p in (disk, shm, mem)] == [2, 2, 2]
        rate = 0.01 * 0.8 + 0.15 * 1.0 + 0.10 * 1.5
        assert st.cpu_rate == pytest.approx(rate)
        counts = [st.assignment.count(i) for i in range(3)]
        assert counts == S.split_counts(16, st.bandwidth, st.cpu_per_byte, rate)
        assert counts != L.eq1_counts(16, st.bandwidth)
        assert S.model_time(counts, st.bandwidth, st.cpu_per_byte, rate) <= \
            best_subset_time(16, st.bandwidth, st.cpu_per_byte, rate) * (1 + 1e-12)
        plan = st.plan()
        assert plan[1]["together"] == 1.0 * GB and plan[0]["cpu_rate"] == st.cpu_rate
        assert plan[2]["cpu_per_byte"] == pytest.approx(0.10 / GB)
        # the store still updates every subgroup with these paths
        m = st.step([A.AdamConfig()], [(np.ones(1000, np.uint16), BF16)] * 16, [None] * 16,
                    [1] * 16)
        assert m["fetches"] + m["cache_hits"] + m["in_place"] == 16


def test_store_without_contention_keeps_eq1():
    a = _FakeCopyPath("fake-a", 1.0 * GB, 0.98 * GB, 0.1 / GB)
    b = _FakeCopyPath("fake-b", 2.0 * GB, 1.95 * GB, 0.1 / GB)
    with _store([a, b], m=12) as st:
        assert st.cpu_rate is None
        assert [st.assignment.count(i) for i in range(2)] == L.eq1_counts(12, st.bandwidth)
    with SubgroupStore(["mem"], subgroup_params=1000, bandwidths=[1e9]) as st:
        st.bind([[1000] * 4])
        assert st.cpu_rate is None and st.together is None


def test_store_split_eq1_keeps_every_path_and_bad_split_is_refused():
    a = _FakeCopyPath("fake-slow", 0.01 * GB, 0.01 * GB, 0.0)
    b = _FakeCopyPath("fake-fast", 1.0 * GB, 1.0 * GB, 0.0)
    st = SubgroupStore([a, b], subgroup_params=1000, cache_subgroups=3, split="eq1")
    with st:
        st.bind([[1000] * 16])
        assert [st.assignment.count(i) for i in range(2)] == [1, 15]
    a2 = _FakeCopyPath("fake-slow2", 0.01 * GB, 0.01 * GB, 0.0)
    b2 = _FakeCopyPath("fake-fast2", 1.0 * GB, 1.0 * GB, 0.0)
    with _store([a2, b2]) as st:
        assert [st.assignment.count(i) for i in range(2)] == [0, 16]
    with pytest.raises(ValueError, match="split"):
        SubgroupStore(["mem"], split="even")


def test_from_config_takes_split_and_the_map_backend(tmp_path):
    from cxlkit.train import from_config
    from cxlkit.train.spill.path_mapped import MappedDirPath
    cfg = {"zero_optimization": {"sub_group_size": 1000, "offload_optimizer": {
        "device": "nvme", "nvme_path": [str(tmp_path)], "buffer_count": 3}},
        "cxlkit": {"split": "eq1", "backend": "map"}}
    with from_config(cfg).make_store() as st:
        assert st.split == "eq1" and type(st.paths[0]) is MappedDirPath
    cfg["cxlkit"]["split"] = "fastest"
    with pytest.raises(ValueError, match="split"):
        from_config(cfg).make_store()
