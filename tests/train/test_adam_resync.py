"""The kernel's re-read of changed params (AdamConfig(resync=True), CXK_ADAM_RESYNC): every
SIMD level gives the scalar bits and the same count, only the elements whose copy is not the
master's rounding are re-read; and AdamTeam.openmp, the team that runs on the process's own
OpenMP runtime (torch's libgomp)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from cxlkit.train import adam as A

from test_adam import ODD, SIMD, available

TORCH = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def state(n: int, cdtype: str, seed: int = 0):
    """Arrays after one step (so the copy is the master's rounding), then a third of the
    copy's elements overwritten with other values, as a user's write would."""
    rng = np.random.default_rng(seed)
    p = rng.standard_normal(n).astype(np.float32)
    m, v = np.zeros(n, np.float32), np.zeros(n, np.float32)
    g = torch.from_numpy(rng.standard_normal(n).astype(np.float32)).to(torch.bfloat16)
    copy = torch.from_numpy(p).to(TORCH[cdtype]).clone()  # fp32: its own memory
    A.step_tensors([A.AdamTensor(p, m, v, g, copy)], A.AdamConfig(simd="scalar"), 1)
    pick = torch.from_numpy(rng.random(n) < 1 / 3)
    new = torch.from_numpy(rng.standard_normal(n).astype(np.float32) * 3).to(TORCH[cdtype])
    old = copy.clone()
    copy[pick] = new[pick]
    changed = (bits(copy) != bits(old)).numpy()  # a new value may round to the old one
    return p, m, v, g, copy, changed


def step(level, arrays, **kw):
    p, m, v, g, copy = (a.copy() if isinstance(a, np.ndarray) else a.clone() for a in arrays)
    n = A.step_tensors([A.AdamTensor(p, m, v, g, copy)], A.AdamConfig(simd=level, **kw), 2)
    return n, p, m, v, copy


def bits(x):
    if isinstance(x, np.ndarray):
        return x.view(np.uint32)
    return x.view(torch.int16 if x.element_size() == 2 else torch.int32)


@pytest.mark.parametrize("cdtype", ["float32", "bfloat16", "float16"])
def test_resync_re_reads_exactly_the_changed_elements_at_every_level(cdtype):
    for n in ODD:
        p, m, v, g, copy, changed = state(n, cdtype)
        before = copy.clone()
        ref = step("scalar", (p, m, v, g, copy), resync=True)
        assert ref[0] == int(changed.sum()), n
        # the reference: master = widened copy where changed, then an ordinary step
        p2 = p.copy()
        p2[changed] = before.float().numpy()[changed]
        plain = step("scalar", (p2, m, v, g, copy), resync=False)
        for a, b in zip(ref[1:4], plain[1:4]):
            assert np.array_equal(bits(a), bits(b)), n
        for level in SIMD:
            if not available(level):
                continue
            for nt in (False, True):
                got = step(level, (p, m, v, g, copy), resync=True, nt_state=nt, nt_copy=nt)
                assert got[0] == ref[0], (level, n)
                for a, b in zip(ref[1:], got[1:]):
                    assert bool((bits(a) == bits(b)).all()), (level, n, nt)


def test_resync_without_a_change_counts_nothing_and_changes_no_bit():
    p, m, v, g, copy, _ = state(1037, "bfloat16")
    copy.copy_(torch.from_numpy(p).to(torch.bfloat16))  # undo the writes
    on = step("auto", (p, m, v, g, copy), resync=True)
    off = step("auto", (p, m, v, g, copy), resync=False)
    assert on[0] == 0
    for a, b in zip(on[1:], off[1:]):
        assert bool((bits(a) == bits(b)).all())


def test_team_sums_the_resync_count_over_its_chunks():
    p, m, v, g, copy, changed = state(100_003, "bfloat16")
    ref = step("auto", (p, m, v, g, copy), resync=True)
    with A.AdamTeam(2, chunk_bytes=4096) as team:
        n = A.step_tensors([A.AdamTensor(p, m, v, g, copy)], A.AdamConfig(resync=True), 2,
                           team=team)
    assert n == ref[0] == int(changed.sum())
    assert np.array_equal(p, ref[1]) and torch.equal(copy, ref[4])


def test_openmp_team_runs_on_torchs_runtime_with_the_callers_bits():
    torch.set_num_threads(2)
    p, m, v, g, copy, changed = state(300_007, "bfloat16")
    ref = step("auto", (p, m, v, g, copy), resync=True)
    with A.AdamTeam.openmp(chunk_bytes=4096) as team:
        assert team.kind == "openmp"
        info = team.info()
        assert [(t["node"], t["threads"], t["cpu"]) for t in info] == [(-1, 2, -1)]
        n = A.step_tensors([A.AdamTensor(p, m, v, g, copy)], A.AdamConfig(resync=True), 2,
                           team=team)
        assert team.info()[0]["chunks"] == -(-300_007 * 4 // 4096) or \
            team.info()[0]["chunks"] >= 300_007 * 4 // 4096
    assert n == ref[0] == int(changed.sum())
    for a, b in zip((p, m, v, copy), ref[1:]):
        assert bool((bits(a) == bits(b)).all())


def test_openmp_team_with_explicit_threads_and_an_empty_step():
    with A.AdamTeam.openmp(3) as team:
        assert team.threads == 3
        empty = np.zeros(0, np.float32)
        assert A.step_tensors([A.AdamTensor(empty, empty, empty, empty)], A.AdamConfig(), 1,
                              team=team) == 0


def test_openmp_team_never_loads_a_runtime_and_checks_its_arguments():
    with pytest.raises(FileNotFoundError, match="not loaded"):
        A.AdamTeam.openmp(runtime="libcxlkit-no-such-openmp")
    with pytest.raises(ValueError, match="threads"):
        A.AdamTeam.openmp(-1)
    with pytest.raises(ValueError, match="chunk_bytes"):
        A.AdamTeam.openmp(chunk_bytes=100)
    team = A.AdamTeam.openmp(runtime="libgomp")
    team.close()
    with pytest.raises(ValueError, match="closed"):
        team.info()
