"""The out-of-place Adam step (cxk_adam_step_into, cxlkit.train.adam.step_raw_into): at every
SIMD level the bits of the in-place step in the output arrays, the inputs untouched; an
output that is its own input is the in-place step; a team gives the same bits; an output that
overlaps another array, a wrong length, dtype or count is a ValueError naming it."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cxlkit
from cxlkit.train import adam as A

LEVELS = ["scalar", "avx2", "avx512", "avx512bf16"]
BF16 = A.DTYPES["bfloat16"]


def available(level: str) -> bool:
    feats = cxlkit._native.cpu_features()
    need = {"scalar": 0, "avx2": (1 << 2) | (1 << 8), "avx512": 1 << 3,
            "avx512bf16": (1 << 3) | (1 << 4) | (1 << 5)}[level]  # F, BW, BF16
    return feats & need == need


def state(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    p = rng.standard_normal(n).astype(np.float32)
    m = (rng.standard_normal(n) * 0.1).astype(np.float32)
    v = (rng.random(n) * 0.01).astype(np.float32)
    g = (rng.standard_normal(n).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    return p, m, v, g


def in_place(level, n, steps, seed=0, **kw):
    p, m, v, g = state(n, seed)
    copy = np.zeros(n, np.uint16)
    cfg = A.AdamConfig(simd=level, **kw)
    for s in range(1, steps + 1):
        A.step_raw([(p, m, v, g, BF16, copy, BF16)], cfg, s)
    return p, m, v, copy


def ping_pong(level, n, steps, seed=0, team=None, **kw):
    """Two sets of state arrays, each step reading one and writing the other (the two slots
    of a subgroup)."""
    a = state(n, seed)
    g = a[3]
    b = tuple(np.full(n, np.nan, np.float32) for _ in range(3))
    sets = [a[:3], b]
    copy = np.zeros(n, np.uint16)
    cfg = A.AdamConfig(simd=level, **kw)
    for s in range(1, steps + 1):
        src, dst = sets[(s - 1) % 2], sets[s % 2]
        before = [x.copy() for x in src]
        A.step_raw_into([(*src, g, BF16, copy, BF16)], [dst], cfg, s, team=team)
        for x, y in zip(before, src):
            assert np.array_equal(x.view(np.uint32), y.view(np.uint32))  # inputs untouched
    return (*sets[steps % 2], copy)


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("n", [1, 15, 17, 1037])
def test_step_into_gives_the_in_place_bits_at_every_level(level, n):
    if not available(level):
        pytest.skip(f"this CPU has no {level}")
    ref = in_place(level, n, 3)
    got = ping_pong(level, n, 3)
    for r, x in zip(ref, got):
        assert np.array_equal(r.view(np.uint8), x.view(np.uint8))


@pytest.mark.parametrize("level", LEVELS)
def test_step_into_with_outputs_equal_to_inputs_is_the_in_place_step(level):
    if not available(level):
        pytest.skip(f"this CPU has no {level}")
    ref = in_place(level, 1003, 2, nt_state=True)
    p, m, v, g = state(1003)
    copy = np.zeros(1003, np.uint16)
    cfg = A.AdamConfig(simd=level, nt_state=True)
    for s in (1, 2):
        A.step_raw_into([(p, m, v, g, BF16, copy, BF16)], [(p, m, v)], cfg, s)
    for r, x in zip(ref, (p, m, v, copy)):
        assert np.array_equal(r.view(np.uint8), x.view(np.uint8))


def test_team_step_into_gives_the_single_thread_bits():
    ref = in_place(None, 100_003, 2)
    with A.AdamTeam(2, chunk_bytes=4096) as team:
        got = ping_pong(None, 100_003, 2, team=team)
    for r, x in zip(ref, got):
        assert np.array_equal(r.view(np.uint8), x.view(np.uint8))


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 300), off_in=st.integers(0, 15), off_out=st.integers(0, 15),
       wd=st.sampled_from([0.0, 0.01]), decoupled=st.booleans(), maximize=st.booleans())
def test_step_into_matches_in_place_on_random_offsets_and_modes(n, off_in, off_out, wd,
                                                              decoupled, maximize):
    kw = dict(weight_decay=wd, decoupled=decoupled, maximize=maximize)
    p, m, v, g = state(n + off_in, seed=n)
    src = [x[off_in:] for x in (p, m, v)]
    g = g[off_in:]
    outs = [np.zeros(n + off_out, np.float32)[off_out:] for _ in range(3)]
    before = [x.copy() for x in src]
    A.step_raw_into([(*src, g, BF16, None, -1)], [tuple(outs)], A.AdamConfig(**kw), 2)
    A.step_raw([(*before, g, BF16, None, -1)], A.AdamConfig(**kw), 2)
    for r, x in zip(before, outs):
        assert np.array_equal(r.view(np.uint32), x.view(np.uint32))


def _args(n=64):
    p, m, v, g = state(n)
    return p, m, v, g


def test_step_into_output_over_another_input_raises_ValueError_naming_it():
    p, m, v, g = _args()
    cfg = A.AdamConfig()
    keep = [x.copy() for x in (p, m, v)]
    big = np.zeros(200, np.float32)
    cases = [
        ((np.zeros(64, np.float32), p, np.zeros(64, np.float32)), "out exp_avg of tensor 0"),
        ((big[:64], big[32:96], np.zeros(64, np.float32)), "out param of tensor 0"),
    ]
    for out, what in cases:
        with pytest.raises(ValueError, match=what):
            A.step_raw_into([(p, m, v, g, BF16, None, -1)], [out], cfg, 1)
    # an output over the grad's bytes (viewed as float32: 32 of them)
    gview = np.zeros(128, np.uint16)
    with pytest.raises(ValueError, match="overlaps"):
        A.step_raw_into([(p, m, v, gview[:64], BF16, None, -1)],
                        [(gview.view(np.float32), m.copy(), v.copy())], cfg, 1)
    for k, x in zip(keep, (p, m, v)):
        assert np.array_equal(k, x)  # nothing written


def test_step_into_bad_lengths_dtypes_and_counts_raise_ValueError():
    p, m, v, g = _args()
    cfg = A.AdamConfig()
    t = [(p, m, v, g, BF16, None, -1)]
    z = np.zeros(64, np.float32)
    with pytest.raises(ValueError, match="out param of tensor 0: 63 elements"):
        A.step_raw_into(t, [(z[:63], z.copy(), z.copy())], cfg, 1)
    with pytest.raises(ValueError, match="out exp_avg_sq of tensor 0"):
        A.step_raw_into(t, [(z, z.copy() + 1, np.zeros(64, np.int32))], cfg, 1)
    with pytest.raises(ValueError, match="outs: 0 entries for 1 tensors"):
        A.step_raw_into(t, [], cfg, 1)
    with pytest.raises(ValueError, match="contiguous"):
        A.step_raw_into(t, [(np.zeros(128, np.float32)[::2], z.copy(), z.copy())], cfg, 1)
    with pytest.raises(ValueError, match="step 0"):
        A.step_raw_into(t, [(z, z.copy(), z.copy())], cfg, 0)
