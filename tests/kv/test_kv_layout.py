"""Block layout descriptors and the native scatter/gather: round trips for every engine layout
and dtype against a torch reference of the canonical image [layers][parts][tokens][heads][dim]."""
import numpy as np
import pytest
import torch

from cxlkit import _native
from cxlkit.kv.layout import BlockLayout, EngineTensors

DTYPES = ["float32", "float16", "bfloat16", "float8_e4m3fn", "int8", "uint8"]
CANON = "LKBTHD"


def rand_tensor(shape, dtype, gen):
    # random bytes viewed as the dtype: every bit pattern is a valid thing to copy
    n = int(np.prod(shape)) * getattr(torch, dtype).itemsize
    raw = torch.randint(0, 256, (n,), dtype=torch.uint8, generator=gen)
    return raw.view(getattr(torch, dtype)).view(shape)


def canonical_block(entries, axes, layout, b):
    """Reference image bytes of block b built with torch permutes, one (layer, part) at a time."""
    out = []
    for layer in range(layout.num_layers):
        for part in range(layout.kv_parts):
            for t, lyr, prt in entries:
                if lyr not in (None, layer) or prt not in (None, part):
                    continue
                order = [axes.index(c) for c in CANON if c in axes]
                v = t.permute(*order)
                present = [c for c in CANON if c in axes]
                idx = []
                for c in present:
                    idx.append({"L": layer, "K": part, "B": b}.get(c, slice(None)))
                out.append(v[tuple(idx)].contiguous().view(torch.uint8).reshape(-1))
    return torch.cat(out).numpy()


def shape_for(axes, layout, nblocks):
    n = {"L": layout.num_layers, "K": layout.kv_parts, "B": nblocks, "T": layout.block_tokens,
         "H": layout.num_kv_heads, "D": layout.head_dim}
    return tuple(n[c] for c in axes)


def build(kind, axes, layout, nblocks, dtype, gen):
    if kind == "per_layer":
        ts = [rand_tensor(shape_for(axes, layout, nblocks), dtype, gen)
              for _ in range(layout.num_layers)]
        return [(t, i, None) for i, t in enumerate(ts)], lambda ts2: EngineTensors.per_layer(
            layout, [e[0] for e in ts2], axes)
    if kind == "per_layer_kv":
        ts = [(rand_tensor(shape_for(axes, layout, nblocks), dtype, gen), i, p)
              for p in range(2) for i in range(layout.num_layers)]
        return ts, lambda ts2: EngineTensors.per_layer_kv(
            layout, [e[0] for e in ts2 if e[2] == 0], [e[0] for e in ts2 if e[2] == 1], axes)
    t = rand_tensor(shape_for(axes, layout, nblocks), dtype, gen)
    return [(t, None, None)], lambda ts2: EngineTensors.cross_layer(layout, ts2[0][0], axes)


CASES = [("per_layer", "KBTHD", 2), ("per_layer", "BKTHD", 2), ("per_layer", "KBHTD", 2),
         ("per_layer_kv", "BTHD", 2), ("per_layer_kv", "HBTD", 2), ("cross_layer", "BLKTHD", 2),
         ("cross_layer", "LKBTHD", 2), ("per_layer", "BTD", 1)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind,axes,parts", CASES)
def test_gather_then_scatter_round_trips_every_layout_and_dtype(kind, axes, parts, dtype):
    heads = 1 if "H" not in axes else 2
    layout = BlockLayout(num_layers=3, num_kv_heads=heads, head_dim=8, dtype=dtype,
                         block_tokens=4, kv_parts=parts)
    gen = torch.Generator().manual_seed(hash((kind, axes, dtype)) & 0xFFFF)
    nblocks = 5
    entries, make = build(kind, axes, layout, nblocks, dtype, gen)
    eng = make(entries)
    blocks = [3, 0, 4]
    images = [np.zeros(layout.nbytes, np.uint8) for _ in blocks]
    eng.gather(blocks, [im.ctypes.data for im in images])
    for b, im in zip(blocks, images):
        np.testing.assert_array_equal(im, canonical_block(entries, axes, layout, b))
        assert eng.checksum(b) == _native.kv_checksum(im.ctypes.data, im.nbytes)
    # scatter into a zeroed twin at other block ids; only those blocks change
    zeros = [(torch.zeros_like(t), lyr, prt) for t, lyr, prt in entries]
    twin = make(zeros)
    sums = twin.scatter([1, 2, 0], [im.ctypes.data for im in images], want_sums=True)
    assert sums == [_native.kv_checksum(im.ctypes.data, im.nbytes) for im in images]
    for dst, src in zip([1, 2, 0], blocks):
        np.testing.assert_array_equal(canonical_block(zeros, axes, layout, dst),
                                      canonical_block(entries, axes, layout, src))
    assert not canonical_block(zeros, axes, layout, 3).any()


def test_llama3_8b_per_layer_plan_is_64_runs_of_32KiB_and_cross_layer_one_run():
    layout = BlockLayout.llama3_8b()
    assert layout.nbytes == 2 << 20 and layout.sub_block_bytes == 32 << 10
    ts = [torch.zeros(2, 2, 16, 8, 128, dtype=torch.bfloat16) for _ in range(32)]
    assert EngineTensors.per_layer(layout, ts).nsegs == 64
    x = torch.zeros(2, 32, 2, 16, 8, 128, dtype=torch.bfloat16)
    assert EngineTensors.cross_layer(layout, x).nsegs == 1


def test_flags_variants_copy_the_same_bytes():
    layout = BlockLayout(2, 2, 32, "float32", 16)
    gen = torch.Generator().manual_seed(1)
    ts = [rand_tensor((2, 3, 16, 2, 32), "float32", gen) for _ in range(2)]
    eng = EngineTensors.per_layer(layout, ts)
    ref = np.zeros(layout.nbytes, np.uint8)
    eng.gather([1], [ref.ctypes.data])
    for flags in (_native.KV_FLUSH, _native.KV_NT, _native.KV_FLUSH | _native.KV_NT):
        im = np.zeros(layout.nbytes, np.uint8)
        eng.gather([1], [im.ctypes.data], flags)
        np.testing.assert_array_equal(im, ref)
    out = [torch.zeros_like(t) for t in ts]
    EngineTensors.per_layer(layout, out).scatter([2], [ref.ctypes.data], _native.KV_INVALIDATE)
    for a, b in zip(out, ts):
        assert torch.equal(a[:, 2].view(torch.int32), b[:, 1].view(torch.int32))  # NaN-safe


def test_checksum_detects_a_single_flipped_bit_and_is_never_zero():
    buf = np.zeros(4096 + 5, np.uint8)
    s0 = _native.kv_checksum(buf.ctypes.data, buf.nbytes)
    assert s0 != 0
    buf[4097] ^= 1
    assert _native.kv_checksum(buf.ctypes.data, buf.nbytes) != s0
    assert _native.kv_checksum(buf.ctypes.data, 0) != 0


def test_layout_pack_unpack_round_trip_and_fingerprint():
    lay = BlockLayout(4, 2, 64, "float16", 16, 2)
    assert BlockLayout.unpack(lay.pack()) == lay
    assert lay.fingerprint() != BlockLayout(4, 2, 64, "bfloat16").fingerprint()
    with pytest.raises(ValueError, match="layout descriptor"):
        BlockLayout.unpack(b"XXXX" + lay.pack()[4:])
    with pytest.raises(ValueError, match="layout descriptor"):
        BlockLayout.unpack(b"short")


@pytest.mark.parametrize("kwargs,exc,match", [
    (dict(num_layers=0), ValueError, "num_layers"), (dict(head_dim=1.5), TypeError, "head_dim"),
    (dict(dtype="float64"), ValueError, "dtype"), (dict(kv_parts=3), ValueError, "kv_parts"),
    (dict(block_tokens=True), TypeError, "block_tokens"),
])
def test_bad_layout_raises_naming_the_field(kwargs, exc, match):
    args = dict(num_layers=2, num_kv_heads=2, head_dim=8) | kwargs
    with pytest.raises(exc, match=match):
        BlockLayout(**args)


def test_bad_engine_tensors_raise_naming_the_problem():
    lay = BlockLayout(2, 2, 8, "float32", 4)
    good = [torch.zeros(2, 3, 4, 2, 8) for _ in range(2)]
    with pytest.raises(ValueError, match="dtype"):
        EngineTensors.per_layer(lay, [t.half() for t in good])
    with pytest.raises(ValueError, match="axis H"):
        EngineTensors.per_layer(lay, [torch.zeros(2, 3, 4, 3, 8) for _ in range(2)])
    with pytest.raises(ValueError, match="contiguous"):
        EngineTensors.per_layer(lay, [torch.zeros(2, 3, 4, 8, 2).transpose(3, 4)
                                      for _ in range(2)])
    with pytest.raises(ValueError, match="layers"):
        EngineTensors.per_layer(lay, good[:1])
    with pytest.raises(ValueError, match="axes"):
        EngineTensors.per_layer(lay, good, axes="KBTHX")
    with pytest.raises(ValueError, match="lacks H"):
        EngineTensors.per_layer(lay, [torch.zeros(2, 3, 4, 8) for _ in range(2)], axes="KBTD")
    with pytest.raises(TypeError, match="torch.Tensor or numpy"):
        EngineTensors.per_layer(lay, [[0.0]] * 2)
    with pytest.raises(TypeError, match="BlockLayout"):
        EngineTensors("layout", [], "KBTHD")
    eng = EngineTensors.per_layer(lay, good)
    im = np.zeros(lay.nbytes, np.uint8)
    with pytest.raises(IndexError, match="block ids"):
        eng.gather([3], [im.ctypes.data])
    with pytest.raises(ValueError, match="differ in length"):
        eng.plan.gather(np.array([0], np.int64), np.array([], np.uint64), 0)
    with pytest.raises(OSError):  # an id past the extent caught natively (ERANGE)
        eng.plan.gather(np.array([7], np.int64), np.array([im.ctypes.data], np.uint64), 0)
    with pytest.raises(OSError):  # unknown flags
        eng.plan.gather(np.array([0], np.int64), np.array([im.ctypes.data], np.uint64), 64)


def test_numpy_arrays_work_as_engine_tensors():
    lay = BlockLayout(1, 1, 4, "float32", 2)
    a = np.arange(2 * 3 * 2 * 1 * 4, dtype=np.float32).reshape(2, 3, 2, 1, 4)
    eng = EngineTensors.per_layer(lay, [a])
    im = np.zeros(lay.nbytes, np.uint8)
    eng.gather([2], [im.ctypes.data])
    np.testing.assert_array_equal(im.view(np.float32), np.concatenate([a[0, 2].ravel(),
                                                                       a[1, 2].ravel()]))


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=40, deadline=None)
@given(perm=st.permutations("KBTHD"), layers=st.integers(1, 3), heads=st.integers(1, 3),
       dim=st.sampled_from([1, 2, 8]), tokens=st.integers(1, 5), nblocks=st.integers(1, 4),
       cross=st.booleans(), data=st.data())
def test_any_axis_order_round_trips(perm, layers, heads, dim, tokens, nblocks, cross, data):
    axes = "".join(perm)
    if axes[-1] != "D":  # head_dim must stay contiguous: move D last
        axes = axes.replace("D", "") + "D"
    lay = BlockLayout(layers, heads, dim, "float32", tokens)
    gen = torch.Generator().manual_seed(data.draw(st.integers(0, 2**31)))
    if cross:
        pos = data.draw(st.integers(0, len(axes) - 1))  # L anywhere but after D
        axes = axes[:pos] + "L" + axes[pos:]
        entries, make = build("cross_layer", axes, lay, nblocks, "float32", gen)
    else:
        entries, make = build("per_layer", axes, lay, nblocks, "float32", gen)
    eng = make(entries)
    b = data.draw(st.integers(0, nblocks - 1))
    im = np.zeros(lay.nbytes, np.uint8)
    eng.gather([b], [im.ctypes.data])
    np.testing.assert_array_equal(im, canonical_block(entries, axes, lay, b))
    zeros = [(torch.zeros_like(t), ly, pt) for t, ly, pt in entries]
    make(zeros).scatter([b], [im.ctypes.data])
    np.testing.assert_array_equal(canonical_block(zeros, axes, lay, b), im)
