"""Each combination of the per-step flags (maximize; no decay, L2, decoupled, decoupled by 0)
runs its own compiled loop at every SIMD level: each gives the scalar level's bits for every
grad and copy dtype, with and without the re-read of changed params, and the scalar level
matches torch's Adam / AdamW with the same flags. The avx512bf16 level rounds bf16 copies with
vcvtneps2bf16: its fix-up lanes (subnormals, NaN, zeros) give torch's bits, in the store and
in the re-read test."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from cxlkit.train import adam as A

from test_adam import LEVELS, SIMD, available, torch_reference

TORCH = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# (weight_decay, decoupled): no decay, L2, decoupled, decoupled by 0 (which runs no decay)
DECAYS = [(0.0, False), (0.05, False), (0.05, True), (0.0, True)]


def arrays(n: int, gdtype: str, cdtype: str | None, seed: int = 3):
    rng = np.random.default_rng(seed)
    p = rng.standard_normal(n).astype(np.float32)
    m = (rng.standard_normal(n) * 0.1).astype(np.float32)
    v = (rng.random(n) * 0.01).astype(np.float32)
    g = torch.from_numpy(rng.standard_normal(n).astype(np.float32)).to(TORCH[gdtype])
    copy = None if cdtype is None else torch.from_numpy(p).to(TORCH[cdtype]).clone()
    if copy is not None:  # a user's write to every fifth element: the re-read takes it
        copy[::5] = torch.from_numpy(rng.standard_normal(n).astype(np.float32)[::5]).to(
            TORCH[cdtype])
    return p, m, v, g, copy


def bits(x):
    if isinstance(x, np.ndarray):
        return x.view(np.uint32)
    return x.view(torch.int16 if x.element_size() == 2 else torch.int32)


def run(level, arrays_, steps=2, **kw):
    p, m, v, g, copy = (None if a is None else a.copy() if isinstance(a, np.ndarray)
                        else a.clone() for a in arrays_)
    cfg = A.AdamConfig(simd=level, lr=1e-2, **kw)
    changed = sum(A.step_tensors([A.AdamTensor(p, m, v, g, copy)], cfg, s)
                  for s in range(1, steps + 1))
    return changed, (p, m, v) + (() if copy is None else (copy,))


@pytest.mark.parametrize("level", SIMD)
@pytest.mark.parametrize("maximize", [False, True])
@pytest.mark.parametrize("decay", DECAYS)
def test_every_flag_combination_gives_the_scalar_bits_at_every_level(level, maximize, decay):
    if not available(level):
        pytest.skip(f"this CPU has no {level}")
    wd, decoupled = decay
    dtypes = itertools.product(["float32", "bfloat16", "float16"],
                               [None, "float32", "bfloat16", "float16"])
    for (gdt, cdt), n in itertools.product(dtypes, (37, 1037)):
        for resync, nt in itertools.product((False, True), (False, True)):
            if resync and cdt is None:
                continue
            kw = dict(weight_decay=wd, decoupled=decoupled, maximize=maximize, resync=resync,
                      nt_state=nt, nt_copy=nt)
            a = arrays(n, gdt, cdt)
            ref_n, ref = run("scalar", a, **kw)
            got_n, got = run(level, a, **kw)
            assert got_n == ref_n, (gdt, cdt, n, resync)
            for x, y in zip(ref, got):
                assert bool((bits(x) == bits(y)).all()), (gdt, cdt, n, resync, nt)


@pytest.mark.parametrize("maximize", [False, True])
@pytest.mark.parametrize("decay", DECAYS)
def test_every_flag_combination_matches_torch(maximize, decay):
    wd, decoupled = decay
    n = 1037
    rng = np.random.default_rng(7)
    p0 = rng.standard_normal(n).astype(np.float32)
    g = rng.standard_normal(n).astype(np.float32)
    for level in [lv for lv in LEVELS if available(lv)]:
        p, m, v = p0.copy(), np.zeros(n, np.float32), np.zeros(n, np.float32)
        cfg = A.AdamConfig(simd=level, lr=1e-3, weight_decay=wd, decoupled=decoupled,
                           maximize=maximize)
        for s in range(1, 5):
            A.step_tensors([A.AdamTensor(p, m, v, g)], cfg, s)
        tp, tm, tv = torch_reference(p0, g, 4, weight_decay=wd, decoupled=decoupled,
                                     maximize=maximize)
        np.testing.assert_allclose(m, tm, rtol=1e-6, atol=1e-9)
        np.testing.assert_allclose(v, tv, rtol=1e-6, atol=1e-12)
        np.testing.assert_allclose(p, tp, rtol=1e-6, atol=1e-8)


# one value per lane of a 16-lane block, repeated at every lane position: subnormals of both
# signs, the smallest normal and its neighbour below, zeros, NaN, infinities, ties
EDGE = np.array([1e-40, -1e-41, 2 ** -126, np.nextafter(np.float32(2 ** -126), np.float32(0)),
                 0.0, -0.0, np.nan, np.inf, -np.inf, 1.0 + 2 ** -8, 1.0 + 3 * 2 ** -8,
                 3.4e38, 9.2e-41, -5.9e-39, 1.0, -2.5], dtype=np.float32)


def edge_params() -> np.ndarray:
    rows = [np.roll(EDGE, k) for k in range(16)]
    rows.append(np.full(16, 1.5, np.float32))  # an ordinary block: no fix-up
    return np.concatenate(rows + [EDGE[:7]])   # and a tail


@pytest.mark.parametrize("level", ["avx512", "avx512bf16"])
def test_bf16_copy_of_edge_values_is_torchs_at_every_lane(level):
    if not available(level):
        pytest.skip(f"this CPU has no {level}")
    p = edge_params()
    n = len(p)
    copies = []
    for lv in ("scalar", level):
        q, m, v = p.copy(), np.zeros(n, np.float32), np.zeros(n, np.float32)
        g = torch.zeros(n, dtype=torch.bfloat16)
        copies.append(torch.zeros(n, dtype=torch.bfloat16))
        # lr 0: the update adds (-0 * m) / d = -0, so the params keep their values exactly
        A.step_tensors([A.AdamTensor(q, m, v, g, copies[-1])], A.AdamConfig(simd=lv, lr=0.0), 1)
        assert np.array_equal(bits(q), bits(p))
    ref, got = copies
    assert torch.equal(bits(got), bits(ref))
    # torch's vectorised .to() writes 0xffff for NaN, its scalar one 0x7fc0 (the kernel's)
    num = torch.from_numpy(~np.isnan(p))
    assert torch.equal(bits(got)[num], bits(torch.from_numpy(p).to(torch.bfloat16))[num])
    assert bool((bits(got)[~num] == 0x7fc0).all())


@pytest.mark.parametrize("level", ["avx512", "avx512bf16"])
def test_bf16_re_read_of_edge_values_counts_exactly_the_changed_lanes(level):
    """The masters hold the edge values and the bf16 params torch's rounding of them, except
    where a user wrote: zero over a subnormal master (vcvtneps2bf16 alone reads that master
    as zero and would miss the write), and the quiet NaN vcvtneps2bf16 writes for a NaN
    master whose rounding is 0x7fc0; the scalar level is the reference."""
    if not available(level):
        pytest.skip(f"this CPU has no {level}")
    p = edge_params()
    n = len(p)
    copy = torch.from_numpy(p).to(torch.bfloat16)
    copy.view(torch.int16)[torch.from_numpy(np.isnan(p))] = 0x7fc0  # the kernel's NaN
    sub = np.flatnonzero((np.abs(p) < 2 ** -126) & (p != 0))[::3]
    nan = np.flatnonzero(np.isnan(p))[::2]
    copy[torch.from_numpy(sub)] = 0.0
    copy.view(torch.int16)[torch.from_numpy(nan)] = 0x7fc1  # a NaN other than 0x7fc0
    a = (p, np.zeros(n, np.float32), np.zeros(n, np.float32),
         torch.zeros(n, dtype=torch.bfloat16), copy)
    ref = run("scalar", a, steps=1, resync=True)
    got = run(level, a, steps=1, resync=True)
    assert ref[0] == got[0] == len(sub) + len(nan)
    for x, y in zip(ref[1], got[1]):
        assert bool((bits(x) == bits(y)).all())


def one_lane_per_pair(value_at, n_pairs: int = 32) -> np.ndarray:
    """32-lane pairs of ordinary params, pair k with value_at(k) at lane k (k mod 32), so
    every lane of a pair, upper half included, holds the odd value in one pair."""
    p = np.full((n_pairs, 32), 1.5, np.float32) + np.arange(32, dtype=np.float32) / 64
    for k in range(n_pairs):
        p[k, k % 32] = value_at(k)
    return p.reshape(-1)


@pytest.mark.parametrize("level", ["avx512", "avx512bf16"])
def test_bf16_copy_of_one_edge_value_in_an_ordinary_pair_is_torchs(level):
    """The avx512bf16 level rounds 32 lanes (two vectors) at once and tests them in one mask:
    an edge value in either half, the other half ordinary, still takes torch's rounding."""
    if not available(level):
        pytest.skip(f"this CPU has no {level}")
    p = one_lane_per_pair(lambda k: EDGE[k % len(EDGE)], 64)
    n = len(p)
    copies = []
    for lv in ("scalar", level):
        q, m, v = p.copy(), np.zeros(n, np.float32), np.zeros(n, np.float32)
        copies.append(torch.zeros(n, dtype=torch.bfloat16))
        A.step_tensors([A.AdamTensor(q, m, v, torch.zeros(n, dtype=torch.bfloat16),
                                     copies[-1])], A.AdamConfig(simd=lv, lr=0.0), 1)
    assert torch.equal(bits(copies[1]), bits(copies[0]))


@pytest.mark.parametrize("level", ["avx512", "avx512bf16"])
@pytest.mark.parametrize("cdtype", ["bfloat16", "float16"])
def test_re_read_of_one_changed_lane_in_a_pair_is_counted_and_taken(level, cdtype):
    """A user's write to one lane of a 32-lane pair, at every lane position, upper half
    included: the pair's one compare sees it, the count is exact, the bits the scalar level's."""
    if not available(level):
        pytest.skip(f"this CPU has no {level}")
    p = one_lane_per_pair(lambda k: 1.5)
    n = len(p)
    copy = torch.from_numpy(p).to(TORCH[cdtype])
    copy.view(-1, 32).diagonal().fill_(-3.25)  # lane k of pair k
    a = (p, np.zeros(n, np.float32), np.zeros(n, np.float32),
         torch.full((n,), 0.5, dtype=TORCH[cdtype]), copy)
    ref = run("scalar", a, steps=1, resync=True)
    got = run(level, a, steps=1, resync=True)
    assert ref[0] == got[0] == 32
    for x, y in zip(ref[1], got[1]):
        assert bool((bits(x) == bits(y)).all())


@pytest.mark.parametrize("level", ["avx512", "avx512bf16"])
def test_re_read_of_zero_masters_in_a_pair_counts_only_the_written_lanes(level):
    """Zero masters round to zero at every level; the pair path takes such a pair back from
    its exponent test (zeros look like rounded subnormals there): a zero whose bf16 param is
    still zero is no change, one a user overwrote is taken, at every lane position."""
    if not available(level):
        pytest.skip(f"this CPU has no {level}")
    p = one_lane_per_pair(lambda k: 0.0 if k % 4 else -0.0)
    n = len(p)
    copy = torch.from_numpy(p).to(torch.bfloat16)
    copy.view(-1, 32).diagonal()[::2] = 2.5  # lane k of every even pair k
    a = (p, np.zeros(n, np.float32), np.zeros(n, np.float32),
         torch.full((n,), 0.5, dtype=torch.bfloat16), copy)
    ref = run("scalar", a, steps=1, resync=True)
    got = run(level, a, steps=1, resync=True)
    assert ref[0] == got[0] == 16
    for x, y in zip(ref[1], got[1]):
        assert bool((bits(x) == bits(y)).all())
