"""The CPU Adam kernel through cxlkit.train.adam: every SIMD level gives the scalar level's
bits, all of them match torch.optim.AdamW / Adam (fp32 grads, and bf16/fp16 grads against
torch on the upcast grads) on lengths that are not multiples of the vector width, copies
match torch's rounding, teams give the single-thread bits, and bad input is a typed error."""
from __future__ import annotations

import errno
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import cxlkit
from cxlkit.testing import inject_fault
from cxlkit.train import adam as A

LEVELS = ["scalar", "avx2", "avx512", "avx512bf16"]
SIMD = LEVELS[1:]
ODD = [1, 7, 15, 17, 31, 33, 1000, 1037]


def available(level: str) -> bool:
    feats = cxlkit._native.cpu_features()
    need = {"scalar": 0, "avx2": (1 << 2) | (1 << 8), "avx512": 1 << 3,
            "avx512bf16": (1 << 3) | (1 << 4) | (1 << 5)}[level]  # F, BW, BF16
    return feats & need == need


def arrays(n: int, seed: int = 0, gdtype: str = "float32"):
    rng = np.random.default_rng(seed)
    p = rng.standard_normal(n).astype(np.float32)
    m = (rng.standard_normal(n) * 0.1).astype(np.float32)
    v = (rng.random(n) * 0.01).astype(np.float32)
    g32 = rng.standard_normal(n).astype(np.float32)
    g = torch.from_numpy(g32).to(getattr(torch, gdtype))
    return p, m, v, g


def run(level: str, n: int, gdtype: str, cdtype: str | None, steps: int = 3,
        offset: int = 0, **kw):
    p, m, v, g = arrays(n + offset, gdtype=gdtype)
    p, m, v, g = p[offset:], m[offset:], v[offset:], g[offset:]
    copy = None if cdtype is None else torch.zeros(n, dtype=getattr(torch, cdtype))
    cfg = A.AdamConfig(simd=level, **kw)
    for s in range(1, steps + 1):
        A.step_tensors([A.AdamTensor(p, m, v, g, copy)], cfg, s)
    return p, m, v, copy


@pytest.mark.parametrize("level", SIMD)
@pytest.mark.parametrize("gdtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("cdtype", [None, "float32", "bfloat16", "float16"])
def test_simd_level_gives_the_scalar_bits_on_odd_lengths(level, gdtype, cdtype):
    if not available(level):
        pytest.skip(f"this CPU has no {level}")
    for n in ODD:
        for offset in (0, 1):  # 1: unaligned start
            ref = run("scalar", n, gdtype, cdtype, offset=offset)
            got = run(level, n, gdtype, cdtype, offset=offset, nt_state=True, nt_copy=True)
            for a, b in zip(ref[:3], got[:3]):
                assert np.array_equal(a.view(np.uint32), b.view(np.uint32)), (n, offset)
            if cdtype is not None:
                assert torch.equal(ref[3].view(torch.int16 if cdtype != "float32"
                                               else torch.int32),
                                   got[3].view(torch.int16 if cdtype != "float32"
                                               else torch.int32))


def torch_reference(p, g32, steps, *, lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                    weight_decay=1e-2, decoupled=True, maximize=False):
    """torch's single-tensor AdamW (decoupled) or Adam, from zero moments."""
    tp = torch.tensor(p, requires_grad=True)
    cls = torch.optim.AdamW if decoupled else torch.optim.Adam
    opt = cls([tp], lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
              maximize=maximize, foreach=False)
    tp.grad = torch.tensor(g32)
    for _ in range(steps):
        opt.step()
    st_ = opt.state[tp]
    return tp.detach().numpy(), st_["exp_avg"].numpy(), st_["exp_avg_sq"].numpy()


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("gdtype", ["float32", "bfloat16", "float16"])
def test_matches_torch_adamw_on_upcast_grads(level, gdtype):
    if not available(level):
        pytest.skip(f"this CPU has no {level}")
    for n in (17, 1037):
        p0, _, _, g = arrays(n, seed=n, gdtype=gdtype)
        m = np.zeros(n, np.float32)
        v = np.zeros(n, np.float32)
        p = p0.copy()
        cfg = A.AdamConfig(simd=level)
        for s in range(1, 6):
            A.step_tensors([A.AdamTensor(p, m, v, g)], cfg, s)
        tp, tm, tv = torch_reference(p0, g.float().numpy(), 5)
        np.testing.assert_allclose(m, tm, rtol=1e-6, atol=1e-9)
        np.testing.assert_allclose(v, tv, rtol=1e-6, atol=1e-12)
        np.testing.assert_allclose(p, tp, rtol=1e-6, atol=1e-8)


def test_bf16_copy_is_torchs_rounding_of_the_updated_params():
    p, m, v, copy = run("auto", 1037, "bfloat16", "bfloat16")
    assert torch.equal(copy, torch.from_numpy(p).to(torch.bfloat16))
    p, m, v, copy = run("auto", 1037, "float32", "float16")
    assert torch.equal(copy, torch.from_numpy(p).to(torch.float16))


def test_bf16_copy_rounds_ties_to_even_subnormals_and_nan_like_torch():
    vals = np.array([1.0 + 2 ** -8, 1.0 + 3 * 2 ** -8, 1e-40, -1e-41, np.inf, -np.inf, np.nan,
                     3.4e38, 65504.0, 65520.0, 6e-8, 2 ** -25],
                    dtype=np.float32)
    n = len(vals)
    for level in [lv for lv in LEVELS if available(lv)]:
        for cdt in (torch.bfloat16, torch.float16):
            p = vals.copy()
            m = np.zeros(n, np.float32)
            v = np.zeros(n, np.float32)
            g = np.zeros(n, np.float32)
            copy = torch.zeros(n, dtype=cdt)
            # lr=0 and zero grads leave p as it is, so the copy is the rounding alone
            A.adam_step(p, m, v, g, step=1, lr=0.0, weight_decay=0.0, param_copy=copy,
                        simd=level)
            want = torch.from_numpy(vals).to(cdt)
            finite = ~torch.isnan(want)
            assert torch.equal(copy[finite], want[finite]), (level, cdt)
            assert torch.isnan(copy[~finite]).all()


def test_adam_with_l2_decay_maximize_and_grad_scale_match_torch():
    n = 33
    p0, _, _, g = arrays(n, seed=3)
    for decoupled, maximize in [(False, False), (False, True), (True, True)]:
        p = p0.copy()
        m = np.zeros(n, np.float32)
        v = np.zeros(n, np.float32)
        for s in range(1, 4):
            A.adam_step(p, m, v, g, step=s, weight_decay=0.1, decoupled=decoupled,
                        maximize=maximize, grad_scale=0.25)
        # grad_scale 0.25 is exact in fp32, so torch sees the same scaled grads
        tp, tm, tv = torch_reference(p0, (g * 0.25).numpy(), 3, weight_decay=0.1,
                                     decoupled=decoupled, maximize=maximize)
        np.testing.assert_allclose(p, tp, rtol=1e-6, atol=1e-8)
        np.testing.assert_allclose(m, tm, rtol=1e-6, atol=1e-9)


def test_without_bias_correction_the_step_is_lr_times_m_over_sqrt_v():
    p = np.array([1.0], np.float32)
    m = np.array([0.0], np.float32)
    v = np.array([0.0], np.float32)
    g = np.array([2.0], np.float32)
    cfg = A.AdamConfig(lr=0.1, betas=(0.5, 0.75), eps=0.0, weight_decay=0.0,
                       bias_correction=False)
    A.step_tensors([A.AdamTensor(p, m, v, g)], cfg, 1)
    assert m[0] == np.float32(1.0) and v[0] == np.float32(1.0)
    assert p[0] == np.float32(1.0 - 0.1 * 1.0 / 1.0)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 80), lr=st.floats(0, 0.1), b1=st.floats(0, 0.99),
       b2=st.floats(0.5, 0.9999), eps=st.floats(1e-10, 1e-3), wd=st.floats(0, 0.5),
       decoupled=st.booleans(), maximize=st.booleans(), steps=st.integers(1, 4),
       gdtype=st.sampled_from(["float32", "bfloat16", "float16"]))
def test_hypothesis_levels_agree_bitwise_and_with_torch(n, lr, b1, b2, eps, wd, decoupled,
                                                       maximize, steps, gdtype):
    kw = dict(lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd, decoupled=decoupled,
              maximize=maximize)
    outs = [run(lv, n, gdtype, "bfloat16", steps=steps, **kw)
            for lv in LEVELS if available(lv)]
    for o in outs[1:]:
        for a, b in zip(outs[0][:3], o[:3]):
            assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
    p0, m0, v0, g = arrays(n, gdtype=gdtype)
    tp = torch.tensor(p0, requires_grad=True)
    cls = torch.optim.AdamW if decoupled else torch.optim.Adam
    opt = cls([tp], lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd, maximize=maximize,
              foreach=False)
    tp.grad = g.float()
    opt.step()  # creates the state; then hand torch our starting moments and redo
    st_ = opt.state[tp]
    with torch.no_grad():
        tp.copy_(torch.from_numpy(p0))
    st_["exp_avg"].copy_(torch.from_numpy(m0))
    st_["exp_avg_sq"].copy_(torch.from_numpy(v0))
    st_["step"].zero_()
    for _ in range(steps):
        opt.step()
    np.testing.assert_allclose(outs[0][1], st_["exp_avg"].numpy(), rtol=2e-5, atol=1e-7)
    np.testing.assert_allclose(outs[0][2], st_["exp_avg_sq"].numpy(), rtol=2e-5, atol=1e-9)
    np.testing.assert_allclose(outs[0][0], tp.detach().numpy(), rtol=2e-5, atol=2e-6)


def test_team_gives_the_single_thread_bits_and_counts_its_chunks():
    n = 100_003
    ref = run("auto", n, "bfloat16", "bfloat16", steps=2)
    with A.AdamTeam(2, chunk_bytes=4096) as team:
        p, m, v, g = arrays(n, gdtype="bfloat16")
        copy = torch.zeros(n, dtype=torch.bfloat16)
        for s in (1, 2):
            A.step_tensors([A.AdamTensor(p, m, v, g, copy)], A.AdamConfig(), s, team=team)
        info = team.info()
        assert sum(t["chunks"] for t in info) >= n * 4 // 4096
        assert team.threads == 2 * len(info)
        assert all(t["cpu"] >= 0 for t in info)
    for a, b in zip(ref[:3], (p, m, v)):
        assert np.array_equal(a, b)
    assert torch.equal(ref[3], copy)


def test_team_chunks_go_to_the_node_holding_the_params(memory_nodes):
    node = memory_nodes[-1]
    n = 1 << 20
    bufs = [cxlkit.alloc(n * 4, cxlkit.bind(node)) for _ in range(4)]
    p, m, v, g = (b.numpy("float32") for b in bufs)
    g[:] = 1.0
    with A.AdamTeam({node: 1}, chunk_bytes=1 << 20) as team:
        A.step_tensors([A.AdamTensor(p, m, v, g)], A.AdamConfig(), 1, team=team)
        assert team.info() == [dict(node=node, threads=1, cpu=team.info()[0]["cpu"],
                                    chunks=4)]
    assert np.all(p < 1e-3)  # every element moved (from 0 against the gradient)
    del p, m, v, g
    for b in bufs:
        b.close()


def test_team_node_query_failure_raises_and_writes_nothing():
    p, m, v, g = arrays(1000)
    before = p.copy()
    with A.AdamTeam(1) as team, inject_fault("move_pages", 1, errno.EPERM):
        with pytest.raises(PermissionError):
            A.step_tensors([A.AdamTensor(p, m, v, g)], A.AdamConfig(), 1, team=team)
    assert np.array_equal(p, before)


def test_bad_team_arguments_raise_ValueError():
    with pytest.raises(ValueError, match="chunk_bytes"):
        A.AdamTeam(1, chunk_bytes=100)
    with pytest.raises(ValueError, match="threads of node"):
        A.AdamTeam({0: -1})
    with pytest.raises(ValueError, match="either"):
        A.AdamTeam({0: 1}, nodes=[1])
    with pytest.raises(OSError):
        A.AdamTeam(nodes=[0, 0])
    team = A.AdamTeam(1)
    team.close()
    p, m, v, g = arrays(10)
    with pytest.raises(ValueError, match="closed"):
        A.step_tensors([A.AdamTensor(p, m, v, g)], A.AdamConfig(), 1, team=team)


def test_bad_arrays_raise_typed_errors_naming_the_array():
    p, m, v, g = arrays(10)
    cfg = A.AdamConfig()
    with pytest.raises(ValueError, match="exp_avg of tensor 0: 9 elements"):
        A.step_tensors([A.AdamTensor(p, m[:9], v, g)], cfg, 1)
    with pytest.raises(TypeError, match="param: float64"):
        A.step_tensors([A.AdamTensor(p.astype(np.float64), m, v, g)], cfg, 1)
    with pytest.raises(TypeError, match="uint16 elements.*bfloat16"):
        A.step_tensors([A.AdamTensor(p, m, v, np.zeros(10, np.uint16))], cfg, 1)
    with pytest.raises(ValueError, match="grad of tensor 0: expected a contiguous"):
        A.step_tensors([A.AdamTensor(p, m, v, np.zeros(20, np.float32)[::2])], cfg, 1)
    with pytest.raises(ValueError, match="grad of tensor 0: expected 16-bit"):
        A.step_tensors([A.AdamTensor(p, m, v, g.numpy(), grad_dtype="bfloat16")], cfg, 1)
    with pytest.raises(ValueError, match="copy_dtype given"):
        A.step_tensors([A.AdamTensor(p, m, v, g, copy_dtype="bfloat16")], cfg, 1)
    with pytest.raises(ValueError, match="grad dtype 'int8'"):
        A.step_tensors([A.AdamTensor(p, m, v, g, grad_dtype="int8")], cfg, 1)
    # a uint16 array named bfloat16 is accepted: the kernel reads its bits as bf16
    gb = torch.from_numpy(g.numpy()).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    A.step_tensors([A.AdamTensor(p, m, v, gb, grad_dtype="bfloat16")], cfg, 1)


@pytest.mark.parametrize("kw,match", [
    (dict(lr=-1.0), "lr"), (dict(eps=float("nan")), "eps"), (dict(betas=(1.0, 0.9)), "betas"),
    (dict(betas=(0.9,)), "betas"), (dict(simd="sse"), "simd"), (dict(weight_decay=-0.1), "weight"),
])
def test_bad_hyperparameters_raise_ValueError(kw, match):
    with pytest.raises(ValueError, match=match):
        A.AdamConfig(**kw)


def test_bad_step_and_grad_scale_raise_ValueError():
    p, m, v, g = arrays(4)
    with pytest.raises(ValueError, match="step"):
        A.step_tensors([A.AdamTensor(p, m, v, g)], A.AdamConfig(), 0)
    with pytest.raises(ValueError, match="grad_scale"):
        A.step_tensors([A.AdamTensor(p, m, v, g)], A.AdamConfig(), 1, grad_scale=float("inf"))


def test_unavailable_level_raises_OSError_ENOTSUP():
    missing = [lv for lv in LEVELS if not available(lv)]
    if not missing:
        pytest.skip("this CPU has every SIMD level (scalar, avx2, avx512, avx512bf16)")
    p, m, v, g = arrays(4)
    with pytest.raises(OSError) as e:
        A.adam_step(p, m, v, g, step=1, simd=missing[0])
    assert e.value.errno == errno.ENOTSUP


def _in_child(env: dict[str, str], code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], env={**os.environ, **env},
                          capture_output=True, text=True, timeout=60)


def test_CXLKIT_SIMD_forces_the_level():
    code = "from cxlkit.train import adam; print(adam.simd_level())"
    r = _in_child({"CXLKIT_SIMD": "scalar"}, code)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "scalar"
    best = [lv for lv in LEVELS if available(lv)][-1]
    r = _in_child({"CXLKIT_SIMD": ""}, code)
    assert r.stdout.strip() == best


def test_unknown_CXLKIT_SIMD_raises_EINVAL_at_the_step():
    code = ("import errno, numpy as np\nfrom cxlkit.train import adam\n"
            "a = np.zeros(4, np.float32)\n"
            "try:\n    adam.adam_step(a, a.copy(), a.copy(), a.copy(), step=1)\n"
            "except OSError as e:\n    print(e.errno == errno.EINVAL, 'CXLKIT_SIMD' in str(e))\n")
    r = _in_child({"CXLKIT_SIMD": "sse9"}, code)
    assert r.stdout.strip() == "True True", r.stderr


def test_bytes_per_element():
    assert A.bytes_per_element() == 28
    assert A.bytes_per_element("bfloat16") == 26
    assert A.bytes_per_element("float32", "bfloat16") == 30
    with pytest.raises(ValueError):
        A.bytes_per_element("int8")


def test_one_team_shared_by_threads_steps_one_at_a_time_and_closes_safely():
    import threading

    team = A.AdamTeam(2, nodes=[0], chunk_bytes=64, pin=False)
    cfg = A.AdamConfig(lr=1e-2)

    def arrays(seed):
        r = np.random.default_rng(seed)
        return [r.standard_normal(4096).astype(np.float32), np.zeros(4096, np.float32),
                np.zeros(4096, np.float32), r.standard_normal(4096).astype(np.float32)]

    def run(seed, use_team, out):
        p, m, v, g = arrays(seed)
        for s in range(1, 201):
            A.step_tensors([A.AdamTensor(p, m, v, g)], cfg, s, team=team if use_team else None)
        out[seed] = p

    ref, got = {}, {}
    for seed in range(4):
        run(seed, False, ref)
    threads = [threading.Thread(target=run, args=(seed, True, got), daemon=True)
               for seed in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)
    assert not any(t.is_alive() for t in threads), "concurrent steps on one team hung"
    for seed in range(4):
        assert np.array_equal(ref[seed], got[seed])

    # close while another thread steps: the step either ran whole or raises "closed"
    errors = []

    def step_loop():
        p, m, v, g = arrays(9)
        try:
            for s in range(1, 10_000):
                A.step_tensors([A.AdamTensor(p, m, v, g)], cfg, s, team=team)
        except ValueError as e:
            errors.append(str(e))

    t = threading.Thread(target=step_loop, daemon=True)
    t.start()
    team.close()
    t.join(timeout=60)
    assert not t.is_alive() and errors and "closed" in errors[0]


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("gdtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("cdtype", [None, "float32", "bfloat16", "float16"])
def test_traffic_only_writes_every_array_back_bit_for_bit_at_every_level(level, gdtype, cdtype):
    # the bound of bench/adam_e2e.py: the step's own loop without its arithmetic; -0.0, NaN
    # payloads and a copy that is not the master's rounding all come back as they were
    if not available(level):
        pytest.skip(f"this CPU has no {level}")
    cfg = A.AdamConfig(simd=level, traffic_only=True, resync=True)  # resync: nothing re-read
    for n in (1, 17, 1037):
        for offset in (0, 1):
            p, m, v, g = arrays(n + offset, gdtype=gdtype)
            p, m, v, g = p[offset:], m[offset:], v[offset:], g[offset:]
            p[0], m[-1] = -0.0, np.frombuffer(np.uint32(0x7fa00001).tobytes(), np.float32)[0]
            copy = None if cdtype is None else \
                torch.randn(n).to(getattr(torch, cdtype))  # not p's rounding
            before = [x.copy() for x in (p, m, v)] + [None if copy is None else copy.clone()]
            assert A.step_tensors([A.AdamTensor(p, m, v, g, copy)], cfg, 1,
                                  grad_scale=3.0) == 0
            for a, b in zip((p, m, v), before):
                assert np.array_equal(a.view(np.uint32), b.view(np.uint32)), (n, offset)
            if copy is not None:
                assert torch.equal(copy, before[3])


def test_traffic_only_runs_through_teams_and_changes_nothing():
    n = 100_003
    p, m, v, g = arrays(n)
    want = [x.copy() for x in (p, m, v)]
    with A.AdamTeam(2, chunk_bytes=4096) as team:
        A.step_tensors([A.AdamTensor(p, m, v, g)], A.AdamConfig(traffic_only=True), 1,
                       team=team)
        assert sum(t["chunks"] for t in team.info()) >= n * 4 // 4096
    for a, b in zip((p, m, v), want):
        assert np.array_equal(a, b)
