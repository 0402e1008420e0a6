"""The payload checksum as parts that add (cxk_adam_sum_add / _finish) and folded into the
out-of-place step (cxk_adam_step_into_sum): any split of an image into 4-byte-aligned ranges,
folded in any order, finishes to cxk_kv_checksum of the whole image; the kernel's folded
parts of the bytes it reads and writes equal those taken over the arrays before and after
(at every SIMD level, on a team, in place), and the step's bits are the unfolded step's."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cxlkit
from cxlkit import _native
from cxlkit.train import adam as A

BF16 = A.DTYPES["bfloat16"]
LEVELS = ["scalar", "avx2", "avx512", "avx512bf16"]


def kv_sum(buf: np.ndarray) -> int:
    return int(_native.kv_checksum(buf.ctypes.data, buf.nbytes))


def parts() -> np.ndarray:
    return np.zeros(8, np.uint64)


@settings(max_examples=200, deadline=None)
@given(words=st.integers(1, 700), cuts=st.lists(st.integers(0, 700), max_size=8),
       seed=st.integers(0, 2**32 - 1), shuffle=st.booleans())
def test_parts_of_any_split_in_any_order_finish_to_kv_checksum(words, cuts, seed, shuffle):
    # an image of 4-byte values (the optimizer state's fp32 arrays), cut anywhere on a value
    n4 = words
    img = np.random.default_rng(seed).integers(0, 2**32, n4, dtype=np.uint64) \
        .astype(np.uint32).view(np.uint8)
    bounds = sorted({0, n4, *(min(c, n4) for c in cuts)})
    ranges = list(zip(bounds, bounds[1:]))
    if shuffle:
        ranges.reverse()
    p = parts()
    for lo, hi in ranges:
        _native.sum_parts_add(p, img[4 * lo:4 * hi], 4 * lo)
    assert _native.sum_parts_finish(p, img.nbytes) == kv_sum(img)


def test_parts_merge_by_adding_and_bad_offsets_raise():
    img = np.arange(4096, dtype=np.uint8)
    a, b = parts(), parts()
    _native.sum_parts_add(a, img[:1000], 0)
    _native.sum_parts_add(b, img[1000:], 1000)
    assert _native.sum_parts_finish(a + b, 4096) == kv_sum(img)
    with pytest.raises(OSError):
        _native.sum_parts_add(a, img[:6], 2)
    with pytest.raises(ValueError, match="uint64 array of 8"):
        _native.sum_parts_add(np.zeros(7, np.uint64), img[:4], 0)


def image_state(n: int, pad: int, seed: int):
    """A subgroup payload: master | exp_avg | exp_avg_sq (n fp32 each), then pad bytes."""
    rng = np.random.default_rng(seed)
    img = np.zeros(12 * n + pad, np.uint8)
    f = img[:12 * n].view(np.float32)
    f[:n] = rng.standard_normal(n)
    f[n:2 * n] = rng.standard_normal(n) * 0.1
    f[2 * n:] = rng.random(n) * 0.01
    img[12 * n:] = rng.integers(0, 256, pad, dtype=np.uint8)
    return img


def views(img: np.ndarray, n: int, pieces: list[tuple[int, int]]):
    f = img[:12 * n].view(np.float32)
    return [(f[a:b], f[n + a:n + b], f[2 * n + a:2 * n + b]) for a, b in pieces]


def offs_of(n: int, pieces):
    return [o for a, _ in pieces for o in (4 * a, 4 * (n + a), 4 * (2 * n + a))]


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("n,cut", [(1, 0), (1037, 401), (5000, 2048), (4099, 3)])
def test_folded_step_parts_are_the_images_checksums_and_the_bits_unfolded(level, n, cut):
    feats = cxlkit._native.cpu_features()
    need = {"scalar": 0, "avx2": (1 << 2) | (1 << 8), "avx512": 1 << 3,
            "avx512bf16": (1 << 3) | (1 << 4) | (1 << 5)}[level]  # F, BW, BF16
    if feats & need != need:
        pytest.skip(f"this CPU has no {level}")
    pad = 4096 - (12 * n) % 4096
    src = image_state(n, pad, n)
    pieces = [(0, cut), (cut, n)] if 0 < cut < n else [(0, n)]
    g = (np.random.default_rng(1).standard_normal(n).astype(np.float32).view(np.uint32)
         >> 16).astype(np.uint16)
    cfg = A.AdamConfig(simd=level, nt_state=True)
    # reference: the unfolded out-of-place step, sums taken over whole images
    ref_dst = np.zeros_like(src)
    ref_dst[12 * n:] = src[12 * n:]
    A.step_raw_into([(*v, g[a:b], BF16, None, -1) for v, (a, b) in
                     zip(views(src, n, pieces), pieces)], views(ref_dst, n, pieces), cfg, 3)
    dst = np.full_like(src, 0xEE)
    dst[12 * n:] = src[12 * n:]
    pin, pout = parts(), parts()
    A.step_raw_into_sum([(*v, g[a:b], BF16, None, -1) for v, (a, b) in
                         zip(views(src, n, pieces), pieces)], views(dst, n, pieces),
                        offs_of(n, pieces), cfg, 3, in_parts=pin, out_parts=pout)
    assert np.array_equal(dst, ref_dst)
    _native.sum_parts_add(pin, src[12 * n:], 12 * n)
    _native.sum_parts_add(pout, dst[12 * n:], 12 * n)
    assert _native.sum_parts_finish(pin, src.nbytes) == kv_sum(src)
    assert _native.sum_parts_finish(pout, dst.nbytes) == kv_sum(dst)


def test_folded_step_in_place_sums_the_bytes_before_and_after():
    n = 3001
    img = image_state(n, 12, 7)
    before = img.copy()
    g = np.ones(n, np.uint16)
    pin, pout = parts(), parts()
    v = views(img, n, [(0, n)])
    A.step_raw_into_sum([(*v[0], g, BF16, None, -1)], v, offs_of(n, [(0, n)]), A.AdamConfig(),
                        1, in_parts=pin, out_parts=pout)
    for p, im in ((pin, before), (pout, img)):
        _native.sum_parts_add(p, im[12 * n:], 12 * n)
        assert _native.sum_parts_finish(p, im.nbytes) == kv_sum(im)
    assert not np.array_equal(before, img)


def test_folded_team_step_merges_its_chunks_parts():
    n = 300_001
    src = image_state(n, 4, 3)
    dst = np.zeros_like(src)
    dst[12 * n:] = src[12 * n:]
    g = np.ones(n, np.uint16)
    pin, pout = parts(), parts()
    with A.AdamTeam(2, chunk_bytes=8192) as team:
        A.step_raw_into_sum([(*views(src, n, [(0, n)])[0], g, BF16, None, -1)],
                            views(dst, n, [(0, n)]), offs_of(n, [(0, n)]), A.AdamConfig(), 2,
                            in_parts=pin, out_parts=pout, team=team)
    for p, im in ((pin, src), (pout, dst)):
        _native.sum_parts_add(p, im[12 * n:], 12 * n)
        assert _native.sum_parts_finish(p, im.nbytes) == kv_sum(im)


def test_folded_step_bad_offsets_raise():
    n = 16
    img = image_state(n, 0, 0)
    v = views(img, n, [(0, n)])
    out = [tuple(np.zeros(n, np.float32) for _ in range(3))]
    g = np.ones(n, np.uint16)
    with pytest.raises(ValueError, match="3 per tensor"):
        A.step_raw_into_sum([(*v[0], g, BF16, None, -1)], out, [0, 64], A.AdamConfig(), 1,
                            out_parts=parts())
    with pytest.raises(OSError):
        A.step_raw_into_sum([(*v[0], g, BF16, None, -1)], out, [0, 66, 128], A.AdamConfig(), 1,
                            out_parts=parts())
