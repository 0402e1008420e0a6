"""TieredAdamW never overwrites weights the user changed between steps (the defect: a
master captured at construction was written back over load_state_dict / copy_ / init / to()).
Every way a user changes weights is checked against torch: torch.optim.AdamW on an fp32 model,
and for bf16/fp16 models torch AdamW on an fp32 master that takes the param's value wherever
the param is no longer the master rounded to its dtype (exact for fp32, an upcast for 16-bit,
with one warning that the old master's low bits are gone)."""
from __future__ import annotations

import copy
import logging

import pytest
import torch

from cxlkit.integrations.torch import TieredAdamW

DTYPES = [torch.float32, torch.bfloat16, torch.float16]


def mlp(dtype, seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 24), torch.nn.Tanh(),
                               torch.nn.Linear(24, 3)).to(dtype)


class Reference:
    """torch AdamW as a user would run it: on the params of an fp32 model, or on fp32 masters
    of a 16-bit model that are re-read where the param changed, then copied back."""

    def __init__(self, model, **kw):
        self.model = model
        self.low = next(model.parameters()).dtype != torch.float32
        params = list(model.parameters())
        self.master = [p.detach().float().clone().requires_grad_() for p in params] \
            if self.low else params
        self.opt = torch.optim.AdamW(self.master, foreach=False, **kw)

    def step(self):
        if self.low:
            for p, mp in zip(self.model.parameters(), self.master):
                with torch.no_grad():
                    changed = p != mp.to(p.dtype)
                    mp[changed] = p[changed].float()
                mp.grad = p.grad.float()
        self.opt.step()
        if self.low:
            with torch.no_grad():
                for p, mp in zip(self.model.parameters(), self.master):
                    p.copy_(mp)


def backward(model, seed):
    g = torch.Generator().manual_seed(seed)
    dt = next(model.parameters()).dtype
    x, y = torch.randn(16, 8, generator=g).to(dt), torch.randn(16, 3, generator=g).to(dt)
    model.zero_grad(set_to_none=True)
    ((model(x) - y).float() ** 2).mean().backward()


def run_pair(dtype, change, steps_before=2, steps_after=2):
    """Step TieredAdamW and the reference, apply change(model) to both, step again."""
    mine, ref_model = mlp(dtype), mlp(dtype)
    opt = TieredAdamW(mine.parameters(), lr=1e-2, weight_decay=0.01)
    ref = Reference(ref_model, lr=1e-2, weight_decay=0.01)
    for s in range(steps_before):
        for mdl, o in ((mine, opt), (ref_model, ref)):
            backward(mdl, s)
            o.step()
    change(mine)
    change(ref_model)
    for s in range(steps_before, steps_before + steps_after):
        for mdl, o in ((mine, opt), (ref_model, ref)):
            backward(mdl, s)
            o.step()
    return mine, ref_model, opt


def assert_same(mine, ref_model):
    tol = dict(rtol=1e-5, atol=1e-6)
    for a, b in zip(mine.parameters(), ref_model.parameters()):
        if a.dtype == torch.float32:
            torch.testing.assert_close(a, b, **tol)
        else:  # one ulp of the 16-bit type where the fp32 masters differ in the last bits
            torch.testing.assert_close(a.float(), b.float(), rtol=1e-2, atol=1e-3)


def loaded(dtype):
    src = mlp(dtype, seed=7)
    return lambda m: m.load_state_dict(src.state_dict())


def data_copy(m):
    for p in m.parameters():
        p.data.copy_(torch.full_like(p, 5.0))


def no_grad_copy(m):
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.linspace(-1, 1, p.numel()).view(p.shape))


def inits(m):
    torch.manual_seed(3)
    torch.nn.init.xavier_uniform_(m[0].weight)
    torch.nn.init.zeros_(m[0].bias)
    torch.nn.init.kaiming_normal_(m[2].weight)
    torch.nn.init.constant_(m[2].bias, 0.25)


def to_round_trip(m):
    dt = next(m.parameters()).dtype
    other = torch.bfloat16 if dt != torch.bfloat16 else torch.float32
    m.to(other)
    with torch.no_grad():  # a change made while the model was in the other dtype
        m[2].bias.add_(1.0)
    m.to(dt)


def data_assign(m):
    for p in m.parameters():
        p.data = p.data.clone() * 0.5


CHANGES = {"load_state_dict": None, "p.data.copy_": data_copy, "no_grad_copy_": no_grad_copy,
           "nn.init": inits, "to_round_trip": to_round_trip, "p.data=": data_assign}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("how", list(CHANGES))
def test_weights_changed_between_steps_are_what_the_next_step_starts_from(dtype, how):
    change = CHANGES[how] or loaded(dtype)
    mine, ref_model, _ = run_pair(dtype, change)
    assert_same(mine, ref_model)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_weights_set_to_5_stay_near_5_after_one_step(dtype):
    m = mlp(dtype)
    opt = TieredAdamW(m.parameters(), lr=1e-3)
    m.load_state_dict({k: torch.full_like(v, 5.0) for k, v in m.state_dict().items()})
    backward(m, 0)
    opt.step()
    for p in m.parameters():
        assert torch.all((p.float() - 5.0).abs() <= 2e-2), p


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_change_before_the_first_step_is_taken(dtype):
    mine, ref_model, _ = run_pair(dtype, loaded(dtype), steps_before=0)
    assert_same(mine, ref_model)


def test_low_precision_re_read_warns_once_that_low_bits_are_gone(caplog):
    m = mlp(torch.bfloat16)
    opt = TieredAdamW(m.parameters(), lr=1e-2)
    caplog.set_level(logging.WARNING, logger="cxlkit")
    for s in range(3):
        backward(m, s)
        opt.step()
    assert not [r for r in caplog.records if "low bits" in r.getMessage()]
    for s in range(3):
        data_copy(m)
        backward(m, s)
        opt.step()
    warned = [r for r in caplog.records if "low bits" in r.getMessage()]
    assert len(warned) == 1 and "bfloat16" in warned[0].getMessage()


def test_fp32_re_read_is_exact_and_silent(caplog):
    caplog.set_level(logging.WARNING, logger="cxlkit")
    mine, ref_model, _ = run_pair(torch.float32, data_copy)
    assert not [r for r in caplog.records if "low bits" in r.getMessage()]
    assert_same(mine, ref_model)


def test_resume_in_either_order_keeps_the_saved_master_bits(caplog):
    # model then optimizer, or optimizer then model: the bf16 weights loaded are the saved
    # masters rounded, so nothing changed behind the optimizer's back and the masters keep
    # the low bits the checkpoint saved
    m = mlp(torch.bfloat16)
    opt = TieredAdamW(m.parameters(), lr=1e-2)
    for s in range(3):
        backward(m, s)
        opt.step()
    saved_model, saved_opt = copy.deepcopy(m.state_dict()), copy.deepcopy(opt.state_dict())
    backward(m, 3)
    opt.step()  # what the resumed runs must give
    caplog.set_level(logging.WARNING, logger="cxlkit")
    for order in ("model_first", "opt_first"):
        m2 = mlp(torch.bfloat16, seed=9)
        o2 = TieredAdamW(m2.parameters(), lr=1e-2)
        if order == "model_first":
            m2.load_state_dict(saved_model)
            o2.load_state_dict(saved_opt)
        else:
            o2.load_state_dict(saved_opt)
            m2.load_state_dict(saved_model)
        backward(m2, 3)
        o2.step()
        for a, b in zip(m.parameters(), m2.parameters()):
            assert torch.equal(a, b), order
            assert torch.equal(opt.state[a]["master"], o2.state[b]["master"]), order
    assert not [r for r in caplog.records if "low bits" in r.getMessage()]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_staged_params_see_writes_their_version_counter_or_storage_shows(dtype):
    # a non-contiguous param takes the path of a param off the CPU (a staged CPU copy the
    # kernel writes, then copied back): in-place writes bump its version counter and a new
    # storage changes its data_ptr, and either refills the staged copy before the step
    torch.manual_seed(0)
    base = torch.randn(6, 5).to(dtype)
    mine = torch.nn.Parameter(base.clone().t())  # [5, 6], strides (1, 5)
    ref = torch.nn.Parameter(base.clone().t())
    assert not mine.is_contiguous()
    opt = TieredAdamW([mine], lr=1e-2)
    master = ref.detach().float().clone().requires_grad_()
    ref_opt = torch.optim.AdamW([master], lr=1e-2, foreach=False)

    def step(s):
        g = torch.randn(5, 6, generator=torch.Generator().manual_seed(s)).to(dtype)
        mine.grad, ref.grad = g.clone(), g.clone()
        opt.step()
        with torch.no_grad():
            changed = ref != master.to(dtype)
            master[changed] = ref[changed].float()
        master.grad = ref.grad.float()
        ref_opt.step()
        with torch.no_grad():
            ref.copy_(master)

    writes = [lambda p: torch.nn.init.normal_(p),
              lambda p: p.detach().mul_(-2.0),
              lambda p: setattr(p, "data", torch.full((6, 5), 0.75).to(dtype).t())]
    step(0)
    for s, write in enumerate(writes, start=1):
        with torch.no_grad():
            torch.manual_seed(s)
            write(mine)
            torch.manual_seed(s)
            write(ref)
        step(s)
        torch.testing.assert_close(mine.float(), ref.float(), rtol=1e-2 if dtype != torch.float32
                                   else 1e-5, atol=1e-3 if dtype != torch.float32 else 1e-6)
    assert "staged" not in opt.state[mine]  # the staged copy stays out of checkpoints


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("how", ["load_state_dict", "no_grad_copy_", "nn.init", "to_round_trip",
                                 "p.data="])
def test_resync_false_trusts_the_version_counter_and_storage(dtype, how):
    # resync=False: no per-element re-read in the kernel (the copy can stream), a param whose
    # version counter or storage changed is re-read whole: the same result as torch for every
    # write the counter or the storage shows
    change = CHANGES[how] or loaded(dtype)
    mine, ref_model = mlp(dtype), mlp(dtype)
    opt = TieredAdamW(mine.parameters(), lr=1e-2, resync=False, nt_copy=True)
    ref = Reference(ref_model, lr=1e-2)
    for s in range(4):
        if s == 2:
            change(mine)
            change(ref_model)
        for mdl, o in ((mine, opt), (ref_model, ref)):
            backward(mdl, s)
            o.step()
    assert_same(mine, ref_model)


def test_resync_false_misses_writes_through_data_as_documented():
    m = mlp(torch.bfloat16)
    opt = TieredAdamW(m.parameters(), lr=1e-3, resync=False)
    backward(m, 0)
    opt.step()
    data_copy(m)  # .data has a version counter of its own: unseen
    backward(m, 1)
    opt.step()
    assert all((p.float() - 5.0).abs().max() > 1 for p in m.parameters())


def test_resync_false_resume_keeps_the_saved_master_bits():
    m = mlp(torch.bfloat16)
    opt = TieredAdamW(m.parameters(), lr=1e-2, resync=False)
    for s in range(3):
        backward(m, s)
        opt.step()
    saved_model, saved_opt = copy.deepcopy(m.state_dict()), copy.deepcopy(opt.state_dict())
    backward(m, 3)
    opt.step()
    m2 = mlp(torch.bfloat16, seed=9)
    o2 = TieredAdamW(m2.parameters(), lr=1e-2, resync=False)
    m2.load_state_dict(saved_model)
    o2.load_state_dict(saved_opt)
    backward(m2, 3)
    o2.step()
    for a, b in zip(m.parameters(), m2.parameters()):
        assert torch.equal(a, b)
        assert torch.equal(opt.state[a]["master"], o2.state[b]["master"])


@pytest.mark.parametrize("how", list(CHANGES))
def test_fp32_params_moved_into_huge_pages_see_every_change(monkeypatch, how):
    # huge_pages moves large fp32 params into the optimizer's THP buffer at construction:
    # every way of changing weights between steps must still be what the next step reads
    import cxlkit.integrations.torch_adamw as cxt
    monkeypatch.setattr(cxt, "THP_MOVE_BYTES", 1)  # the MLP's params are small
    change = CHANGES[how] or loaded(torch.float32)
    mine, ref_model, opt = run_pair(torch.float32, change)
    assert_same(mine, ref_model)
    bufs = [buf for cls, buf in opt.buffers() if cls == "fp32_params"]
    spans = [(torch.frombuffer(b, dtype=torch.uint8).data_ptr(), len(b)) for b in bufs]
    for p in mine.parameters():  # where they live now (a to() round trip moved them back)
        assert any(base <= p.data_ptr() < base + n for base, n in spans)  # one buffer each
