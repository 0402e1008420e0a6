"""cxlkit.integrations.torch: TieredAdamW against torch.optim.AdamW (fp32 and bf16/fp16
models, param groups, a small Llama from a config for 20 steps with activation offload, HF
Trainer via optimizers=), exact state_dict round trips, placement of every class where the
plan says, budgets, and activation offload giving bit-identical gradients."""
from __future__ import annotations

import copy
import io

import pytest
import torch

import cxlkit
from cxlkit.integrations.torch import (ActivationOffload, TieredAdamW, offload_activations,
                                       param_count, tier_policy)
from cxlkit.train import plan as TP


def mlp(seed: int = 0, dtype=torch.float32) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(16, 33), torch.nn.GELU(),
                               torch.nn.Linear(33, 4)).to(dtype)


def data(dtype=torch.float32):
    g = torch.Generator().manual_seed(1)
    return torch.randn(64, 16, generator=g).to(dtype), torch.randn(64, 4, generator=g).to(dtype)


def train(model, opt, steps, x, y):
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = ((model(x) - y).float() ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_fp32_model_matches_torch_adamw():
    m1, m2 = mlp(), mlp()
    o1 = TieredAdamW(m1.parameters(), lr=1e-2, weight_decay=0.05)
    o2 = torch.optim.AdamW(m2.parameters(), lr=1e-2, weight_decay=0.05, foreach=False)
    x, y = data()
    l1, l2 = train(m1, o1, 10, x, y), train(m2, o2, 10, x, y)
    assert l1 == pytest.approx(l2, rel=1e-5)
    for a, b in zip(m1.parameters(), m2.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_model_equals_torch_on_upcast_grads(dtype):
    # torch reference: an fp32 master copy stepped by torch AdamW on the upcast grads of the
    # low-precision model, then rounded back, exactly what TieredAdamW does in one pass
    model = mlp(dtype=dtype)
    ref_model = copy.deepcopy(model)
    master = [p.detach().float().clone().requires_grad_() for p in ref_model.parameters()]
    ref_opt = torch.optim.AdamW(master, lr=1e-2, foreach=False)
    opt = TieredAdamW(model.parameters(), lr=1e-2)
    x, y = data(dtype)
    for _ in range(5):
        for mdl in (model, ref_model):
            mdl.zero_grad()
            ((mdl(x) - y).float() ** 2).mean().backward()
        for p, mp in zip(ref_model.parameters(), master):
            assert p.grad.dtype == dtype
            mp.grad = p.grad.float()
        opt.step()
        ref_opt.step()
        with torch.no_grad():
            for p, mp in zip(ref_model.parameters(), master):
                p.copy_(mp)
        for (p, q, mp) in zip(model.parameters(), ref_model.parameters(), master):
            torch.testing.assert_close(opt.state[p]["master"], mp.detach(), rtol=1e-5,
                                       atol=1e-6)
            # the model's params are the master rounded to their dtype, bit for bit
            assert torch.equal(p.detach(), opt.state[p]["master"].to(dtype))


def test_param_groups_take_their_own_hyperparameters():
    m1, m2 = mlp(), mlp()
    groups = lambda m: [{"params": m[0].parameters(), "lr": 1e-2},  # noqa: E731
                        {"params": m[2].parameters(), "lr": 1e-3, "weight_decay": 0.0}]
    o1 = TieredAdamW(groups(m1))
    o2 = torch.optim.AdamW(groups(m2), foreach=False)
    x, y = data()
    train(m1, o1, 5, x, y)
    train(m2, o2, 5, x, y)
    for a, b in zip(m1.parameters(), m2.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert [g["lr"] for g in o1.param_groups] == [1e-2, 1e-3]


def test_hyperparameters_changed_between_steps_are_followed_like_torch():
    torch.manual_seed(5)
    p1 = torch.nn.Parameter(torch.randn(257))
    p2 = torch.nn.Parameter(p1.detach().clone())
    ref = torch.optim.AdamW([p1], lr=1e-2, weight_decay=0.1)
    opt = TieredAdamW([p2], lr=1e-2, weight_decay=0.1, team=None)
    scheds = [torch.optim.lr_scheduler.StepLR(o, step_size=1, gamma=0.5) for o in (ref, opt)]
    for s in range(4):
        g = torch.randn(257, generator=torch.Generator().manual_seed(s))
        p1.grad, p2.grad = g.clone(), g.clone()
        if s == 2:  # set by hand too, as users do
            for o in (ref, opt):
                o.param_groups[0]["weight_decay"] = 0.0
                o.param_groups[0]["betas"] = (0.8, 0.99)
        ref.step()
        opt.step()
        for sc in scheds:
            sc.step()
        torch.testing.assert_close(p2, p1, rtol=1e-5, atol=1e-6)
    opt.param_groups[0]["lr"] = float("nan")
    p2.grad = torch.ones(257)
    with pytest.raises(ValueError, match="lr"):
        opt.step()


def test_state_dict_round_trip_is_exact():
    m1 = mlp(dtype=torch.bfloat16)
    o1 = TieredAdamW(m1.parameters(), lr=1e-2)
    x, y = data(torch.bfloat16)
    train(m1, o1, 3, x, y)
    f = io.BytesIO()
    torch.save({"model": m1.state_dict(), "opt": o1.state_dict()}, f)
    f.seek(0)
    saved = torch.load(f)
    m2 = mlp(seed=5, dtype=torch.bfloat16)
    m2.load_state_dict(saved["model"])
    o2 = TieredAdamW(m2.parameters(), lr=0.5)
    o2.load_state_dict(saved["opt"])
    assert o2.param_groups[0]["lr"] == 1e-2
    l1, l2 = train(m1, o1, 3, x, y), train(m2, o2, 3, x, y)
    assert l1 == l2
    for a, b in zip(m1.parameters(), m2.parameters()):
        assert torch.equal(a, b)
        for key in ("master", "exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(o1.state[a][key], o2.state[b][key])


def test_loads_a_torch_adamw_state_dict():
    m1, m2 = mlp(), mlp()
    o1 = torch.optim.AdamW(m1.parameters(), lr=1e-2, foreach=False)
    x, y = data()
    train(m1, o1, 3, x, y)
    m2.load_state_dict(m1.state_dict())
    o2 = TieredAdamW(m2.parameters())
    o2.load_state_dict(o1.state_dict())
    train(m1, o1, 3, x, y)
    train(m2, o2, 3, x, y)
    for a, b in zip(m1.parameters(), m2.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_load_state_dict_rejects_a_mismatched_dict():
    o = TieredAdamW(mlp().parameters())
    sd = copy.deepcopy(o.state_dict())  # torch's state_dict shares the state's tensors
    sd["param_groups"][0]["params"] = sd["param_groups"][0]["params"][:-1]
    with pytest.raises(ValueError, match="param group 0"):
        o.load_state_dict(sd)
    sd = copy.deepcopy(o.state_dict())
    sd["state"][0]["exp_avg"] = torch.zeros(3)
    with pytest.raises(ValueError, match="exp_avg has shape"):
        o.load_state_dict(sd)
    sd = copy.deepcopy(o.state_dict())
    sd["state"][99] = sd["state"][0]
    with pytest.raises(KeyError, match="99"):
        o.load_state_dict(sd)
    with pytest.raises(ValueError, match="2 param groups"):
        o.load_state_dict({"state": {}, "param_groups": sd["param_groups"] * 2})


def test_zero_grad_follows_torch_and_placed_grads_stay_placed():
    m = mlp()
    o = TieredAdamW(m.parameters())
    x, y = data()
    ((m(x) - y) ** 2).mean().backward()
    o.zero_grad()
    assert all(p.grad is None for p in m.parameters())
    ((m(x) - y) ** 2).mean().backward()
    o.zero_grad(set_to_none=False)
    assert all(torch.count_nonzero(p.grad) == 0 for p in m.parameters())

    m = mlp(dtype=torch.bfloat16)
    o = TieredAdamW(m.parameters(), policy=cxlkit.default(), place_grads=True)
    ptrs = [p.grad.data_ptr() for p in m.parameters()]
    xb, yb = data(torch.bfloat16)
    for _ in range(2):
        ((m(xb) - yb).float() ** 2).mean().backward()
        assert [p.grad.data_ptr() for p in m.parameters()] == ptrs  # accumulated in place
        assert any(torch.count_nonzero(p.grad) for p in m.parameters())
        o.step()
        o.zero_grad()
        assert [p.grad.data_ptr() for p in m.parameters()] == ptrs
        assert all(torch.count_nonzero(p.grad) == 0 for p in m.parameters())


def test_every_class_is_where_the_plan_says(memory_nodes):
    m = mlp(dtype=torch.bfloat16)
    fp = TP.Footprint(param_count(m), fp32_grads=False)
    plan = TP.plan_training(fp)
    o = TieredAdamW(m.parameters(), plan=plan, place_grads=True, place_params=True)
    off = ActivationOffload(1 << 20, tier=plan.policy("activations"))
    got = {cls: buf for cls, buf in o.buffers()}
    assert set(got) == {"fp32_params", "optimizer_states", "bf16_grads", "bf16_params"}
    for cls, buf in list(got.items()) + [("activations", off.buffer)]:
        assert buf.policy == plan.policy(cls)
        audit = buf.audit()
        assert audit.ok, (cls, audit.problems)
        assert set(audit.actual.pages) <= set(plan.classes[cls].nodes)
    assert plan.used["fp32_params"] == 4 * fp.params
    assert plan.used["optimizer_states"] == 8 * fp.params
    assert all(p.data_ptr() >= got["bf16_params"].address for p in m.parameters())


def test_a_plan_for_a_smaller_model_raises_BudgetExceeded():
    m = mlp()
    plan = TP.plan_training(TP.Footprint(param_count(m) - 1))
    with pytest.raises(TP.BudgetExceeded, match="fp32_params"):
        TieredAdamW(m.parameters(), plan=plan)
    assert plan.used.get("fp32_params", 0) == 0


def test_bad_arguments_raise_typed_errors():
    with pytest.raises(TypeError, match="float64"):
        TieredAdamW([torch.zeros(3, dtype=torch.float64, requires_grad=True)])
    with pytest.raises(ValueError, match="plan= or policy="):
        TieredAdamW(mlp().parameters(), place_grads=True)
    with pytest.raises(ValueError, match="not both"):
        TieredAdamW(mlp().parameters(), plan=TP.plan_training(TP.Footprint(10**4)),
                    policy=cxlkit.default())
    with pytest.raises(ValueError, match="lr"):
        TieredAdamW(mlp().parameters(), lr=-1.0)


def test_team_and_grad_scale():
    m1, m2 = mlp(), mlp()
    o1 = TieredAdamW(m1.parameters(), lr=1e-2, team=2)
    o2 = torch.optim.AdamW(m2.parameters(), lr=1e-2, foreach=False)
    x, y = data()
    for _ in range(3):
        for m in (m1, m2):
            m.zero_grad()
            (((m(x) - y) ** 2).mean() * 4).backward()
        o1.step(grad_scale=0.25)  # unscale by an exact power of two
        for p in m2.parameters():
            p.grad *= 0.25
        o2.step()
    o1.close()
    for a, b in zip(m1.parameters(), m2.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


# ---- activation offload ----

def grads_of(model, x, y, off=None):
    model.zero_grad()
    if off is not None:
        with off:
            loss = ((model(x) - y).float() ** 2).mean()
    else:
        loss = ((model(x) - y).float() ** 2).mean()
    loss.backward()
    return [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_activation_offload_gives_identical_gradients(dtype):
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).to(dtype)
    x = torch.randn(4, 24, 32).to(dtype)
    y = torch.randn(4, 24, 32).to(dtype)
    want = grads_of(model, x, y)
    off = ActivationOffload(8 << 20, tier="dram")
    for _ in range(2):  # the second pass reuses the buffer from its start
        got = grads_of(model, x, y, off)
        assert all(torch.equal(a, b) for a, b in zip(want, got))
    assert off.saved_count > 0 and 0 < off.peak_bytes <= 8 << 20
    assert off._live == 0


def test_activation_offload_keeps_strides_of_saved_views():
    a = torch.randn(8, 16, requires_grad=True)
    off = offload_activations(1 << 16, tier=cxlkit.default(), min_bytes=0)
    with off:
        t = a.exp().t()  # a transposed (non-contiguous, dense) activation
        loss = (t.sin() * 3).sum()
    loss.backward()
    assert torch.equal(a.grad, (a.exp().t().cos() * 3).t() * a.exp())
    assert off.saved_count >= 1


def test_activation_offload_past_its_capacity_raises_BudgetExceeded():
    a = torch.randn(1024, requires_grad=True)
    off = ActivationOffload(4096, tier="dram", min_bytes=0)
    with pytest.raises(TP.BudgetExceeded, match="activation offload buffer full"):
        with off:
            b = a.exp()
            c = b.exp()
            (c * c).sum()
    off.close()


def test_activation_offload_with_a_plan_charges_the_activation_budget():
    plan = TP.plan_training(TP.Footprint(1000, 1, 64, 64, 1, 1))
    budget = plan.budget("activations")
    off = ActivationOffload(budget, plan=plan)
    assert plan.remaining("activations") == 0
    with pytest.raises(TP.BudgetExceeded):
        ActivationOffload(1, plan=plan)
    off.close()
    assert plan.remaining("activations") == budget


def test_tier_policy_names_what_the_machine_has():
    assert tier_policy(0) == cxlkit.bind(0)
    assert tier_policy(cxlkit.default()) == cxlkit.default()
    kinds = {n.kind for n in cxlkit.topology.discover().nodes if n.has_memory}
    for kind in ("dram", "cxl", "hbm", "pmem"):
        if kind in kinds:
            assert tier_policy(kind).nodes
        else:
            with pytest.raises(ValueError, match=f"no {kind} memory"):
                tier_policy(kind)
    with pytest.raises(ValueError, match="tier 'fast'"):
        tier_policy("fast")
    with pytest.raises(ValueError, match="nbytes"):
        ActivationOffload(0)


# ---- transformers ----

@pytest.mark.slow
def test_small_llama_20_steps_with_offload_matches_torch_adamw():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128,
                                   num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    m1 = transformers.LlamaForCausalLM(cfg)
    m2 = copy.deepcopy(m1)
    o1 = TieredAdamW(m1.parameters(), lr=1e-3)
    o2 = torch.optim.AdamW(m1.parameters() and m2.parameters(), lr=1e-3, foreach=False)
    off = ActivationOffload(32 << 20, tier="dram")
    ids = torch.randint(0, 128, (2, 32), generator=torch.Generator().manual_seed(2))
    l1, l2 = [], []
    for _ in range(20):
        for m, o, losses, use in ((m1, o1, l1, True), (m2, o2, l2, False)):
            o.zero_grad()
            if use:
                with off:
                    loss = m(input_ids=ids, labels=ids).loss
            else:
                loss = m(input_ids=ids, labels=ids).loss
            loss.backward()
            o.step()
            losses.append(loss.item())
    assert off.saved_count > 0
    assert l1[-1] < l1[0]
    assert l1 == pytest.approx(l2, rel=1e-4, abs=1e-5)


@pytest.mark.slow  # transformers' import and a Trainer: tens of seconds
def test_hf_trainer_runs_with_tiered_adamw(tmp_path):
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
                                   num_hidden_layers=1, num_attention_heads=2,
                                   num_key_value_heads=1, max_position_embeddings=32)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg)
    ids = torch.randint(0, 64, (8, 16), generator=torch.Generator().manual_seed(3))
    ds = [{"input_ids": r, "labels": r} for r in ids]
    opt = TieredAdamW(model.parameters(), lr=1e-3)
    args = transformers.TrainingArguments(output_dir=str(tmp_path), max_steps=4,
                                          per_device_train_batch_size=4, report_to=[],
                                          use_cpu=True, logging_steps=1, save_strategy="no")
    trainer = transformers.Trainer(model=model, args=args, train_dataset=ds,
                                   optimizers=(opt, None))
    before = [p.detach().clone() for p in model.parameters()]
    out = trainer.train()
    assert out.global_step == 4
    assert int(opt.state[next(model.parameters())]["step"]) == 4
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_step_with_a_grad_missing_skips_that_param():
    m = mlp()
    o = TieredAdamW(m.parameters(), lr=1e-2)
    x, y = data()
    ((m(x) - y) ** 2).mean().backward()
    m[2].bias.grad = None
    before = m[2].bias.detach().clone()
    o.step()
    assert torch.equal(m[2].bias, before)
    assert int(o.state[m[2].bias]["step"]) == 0
    assert int(o.state[m[0].weight]["step"]) == 1


def test_run_demo_trains_and_audits_every_class():
    from rich.console import Console

    from cxlkit.cli.train import run_demo

    con = Console(record=True, width=120)
    run_demo(con)
    out = con.export_text()
    for text in ("TieredAdamW + activation offload", "optimizer_states", "activations",
                 "kernel:"):
        assert text in out
    assert "no:" not in out  # every audit row says yes


def test_auto_team_starts_threads_only_for_large_models(monkeypatch):
    import cxlkit.integrations.torch_adamw as T

    m1, m2 = mlp(), mlp()
    x, y = data()
    small = TieredAdamW(m1.parameters(), lr=1e-2)
    train(m1, small, 2, x, y)  # the team is decided at the first step
    monkeypatch.setattr(T, "AUTO_TEAM_PARAMS", 10)
    big = TieredAdamW(m2.parameters(), lr=1e-2)
    train(m2, big, 2, x, y)
    assert small._team is None
    assert big._team is not None and big._team.threads >= 1
    for a, b in zip(m1.parameters(), m2.parameters()):
        assert torch.equal(a, b)  # a team gives the calling thread's bits
    big.close()
    with pytest.raises(ValueError, match="team 'many'"):
        TieredAdamW(mlp().parameters(), team="many")


def test_grads_moved_out_of_their_placed_buffer_are_put_back_with_a_warning(caplog):
    m1, m2 = mlp(), mlp()
    o1 = TieredAdamW(m1.parameters(), lr=1e-2, policy=cxlkit.default(), place_grads=True)
    o2 = torch.optim.AdamW(m2.parameters(), lr=1e-2, foreach=False)
    ptrs = [p.grad.data_ptr() for p in m1.parameters()]
    x, y = data()
    for _ in range(2):
        for m, o in ((m1, o1), (m2, o2)):
            m.zero_grad()  # the model's, not the optimizer's: grads become None
            ((m(x) - y) ** 2).mean().backward()
            o.step()
    assert "moved out of their placed buffer" in caplog.text
    assert [p.grad.data_ptr() for p in m1.parameters()] == ptrs
    for a, b in zip(m1.parameters(), m2.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_nt_copy_gives_the_same_bits_and_rejects_bad_values():
    m1, m2 = mlp(dtype=torch.bfloat16), mlp(dtype=torch.bfloat16)
    o1 = TieredAdamW(m1.parameters(), lr=1e-2, nt_copy=True, nt_state=True)
    o2 = TieredAdamW(m2.parameters(), lr=1e-2, nt_copy=False)
    x, y = data(torch.bfloat16)
    assert train(m1, o1, 3, x, y) == train(m2, o2, 3, x, y)
    assert all(torch.equal(a, b) for a, b in zip(m1.parameters(), m2.parameters()))
    with pytest.raises(ValueError, match="nt_copy"):
        TieredAdamW(mlp().parameters(), nt_copy="yes")


def test_loads_a_torch_adam_l2_state_dict_and_keeps_its_decay_coupled():
    m1, m2 = mlp(), mlp()
    o1 = torch.optim.Adam(m1.parameters(), lr=1e-2, weight_decay=0.1, foreach=False)
    x, y = data()
    train(m1, o1, 3, x, y)
    m2.load_state_dict(m1.state_dict())
    o2 = TieredAdamW(m2.parameters())  # decoupled=True by default; the dict says L2
    o2.load_state_dict(o1.state_dict())
    assert o2.param_groups[0]["decoupled"] is False
    train(m1, o1, 3, x, y)
    train(m2, o2, 3, x, y)
    for a, b in zip(m1.parameters(), m2.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_load_state_dict_refuses_amsgrad_instead_of_dropping_its_state():
    m1 = mlp()
    o1 = torch.optim.AdamW(m1.parameters(), amsgrad=True, foreach=False)
    x, y = data()
    train(m1, o1, 1, x, y)
    o2 = TieredAdamW(mlp().parameters())
    before = copy.deepcopy(o2.state_dict())
    with pytest.raises(ValueError, match="amsgrad"):
        o2.load_state_dict(o1.state_dict())
    after = o2.state_dict()
    for k, st in before["state"].items():
        assert torch.equal(st["exp_avg"], after["state"][k]["exp_avg"])


def test_state_asks_for_huge_pages_unless_told_not_to_or_interleaved(memory_nodes):
    m = mlp(dtype=torch.bfloat16)  # an fp32 CPU model would be its own master (no buffer)
    on = {cls: b for cls, b in TieredAdamW(m.parameters()).buffers()}
    assert on["fp32_params"].thp is True and on["optimizer_states"].thp is True
    assert on["optimizer_states"].address % (2 << 20) == 0
    off = TieredAdamW(m.parameters(), huge_pages=False).buffers()
    assert all(b.thp is None for _, b in off)  # the system's THP setting decides
    inter = TieredAdamW(m.parameters(), policy=cxlkit.interleave(memory_nodes)).buffers()
    assert all(b.thp is False for _, b in inter)  # the kernel would interleave whole folios
    plan = TP.plan_training(TP.Footprint(param_count(m)))
    planned = TieredAdamW(m.parameters(), plan=plan).buffers()
    assert all(b.thp is (None if b.policy.page_granular else True) for _, b in planned)


def test_fp32_cpu_param_is_its_own_master_without_a_buffer():
    m1, m2 = mlp(), mlp()
    o1 = TieredAdamW(m1.parameters(), lr=1e-2)
    assert [cls for cls, _ in o1.buffers()] == ["optimizer_states"]
    for p in m1.parameters():
        assert o1.state[p]["master"].data_ptr() == p.data_ptr()
    o2 = TieredAdamW(m2.parameters(), lr=1e-2, master="copy")
    assert sorted(cls for cls, _ in o2.buffers()) == ["fp32_params", "optimizer_states"]
    x, y = data()
    assert train(m1, o1, 4, x, y) == train(m2, o2, 4, x, y)
    for a, b in zip(m1.parameters(), m2.parameters()):
        assert torch.equal(a, b)
        assert o2.state[b]["master"].data_ptr() != b.data_ptr()
    with pytest.raises(ValueError, match="master 'half'"):
        TieredAdamW(mlp().parameters(), master="half")


def test_a_plan_moves_fp32_params_into_its_master_buffer_and_keeps_them_there():
    m, ref = mlp(), mlp()
    plan = TP.plan_training(TP.Footprint(param_count(m)))
    o = TieredAdamW(m.parameters(), lr=1e-2, plan=plan)
    o_ref = torch.optim.AdamW(ref.parameters(), lr=1e-2, foreach=False)
    buf = dict(o.buffers())["fp32_params"]
    inside = lambda p: buf.address <= p.data_ptr() < buf.address + buf.nbytes  # noqa: E731
    assert all(inside(p) for p in m.parameters())
    x, y = data()
    train(m, o, 2, x, y)
    train(ref, o_ref, 2, x, y)
    for mdl in (m, ref):  # a round trip gives the params new storage (and bf16 values)
        mdl.to(torch.bfloat16).to(torch.float32)
    assert not any(inside(p) for p in m.parameters())
    train(m, o, 2, x, y)
    train(ref, o_ref, 2, x, y)
    assert all(inside(p) for p in m.parameters())  # moved back where the plan placed them
    for a, b in zip(m.parameters(), ref.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    m.to(torch.bfloat16)
    with pytest.raises(TypeError, match="build the optimizer again"):
        train(m, o, 1, *data(torch.bfloat16))


def test_auto_team_runs_on_torchs_openmp_threads_on_one_node(monkeypatch, memory_nodes):
    import cxlkit.integrations.torch_adamw as T

    if len(memory_nodes) != 1:
        pytest.skip("several memory nodes: 'auto' picks pinned teams that follow memory")
    monkeypatch.setattr(T, "AUTO_TEAM_PARAMS", 10)
    m1, m2 = mlp(), mlp()
    x, y = data()
    o1 = TieredAdamW(m1.parameters(), lr=1e-2)
    o2 = TieredAdamW(m2.parameters(), lr=1e-2, team=None)
    train(m1, o1, 2, x, y)
    train(m2, o2, 2, x, y)
    assert o1._team.kind == "openmp" and o1._team.threads == torch.get_num_threads()
    for a, b in zip(m1.parameters(), m2.parameters()):
        assert torch.equal(a, b)
    m3 = mlp()
    o3 = TieredAdamW(m3.parameters(), lr=1e-2, team="openmp")  # below AUTO_TEAM_PARAMS too
    monkeypatch.setattr(T, "AUTO_TEAM_PARAMS", 1 << 20)
    train(m3, o3, 2, x, y)
    assert o3._team.kind == "openmp"
    for a, b in zip(m1.parameters(), m3.parameters()):
        assert torch.equal(a, b)
    o1.close()
    o3.close()


@pytest.mark.slow  # two fresh processes importing transformers / accelerate
def test_docs_train_recipes_run_as_written(tmp_path):
    # every ```python block after a <!-- recipe --> line of docs/train.md, each in a fresh
    # process (as a user pastes it into a script), in an empty directory
    import pathlib
    import re
    import subprocess
    import sys

    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    doc = (pathlib.Path(__file__).parents[2] / "docs" / "train.md").read_text()
    blocks = re.findall(r"<!-- recipe -->\n```python\n(.*?)```", doc, re.S)
    assert len(blocks) == 2, "docs/train.md: the HF Trainer and accelerate recipes"
    for i, code in enumerate(blocks):
        script = tmp_path / f"recipe{i}.py"
        script.write_text(code + "\nprint('RECIPE-OK', opt.state[next(iter(opt.state))]['step'])\n")
        r = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-3000:]
        steps = float(r.stdout.split("RECIPE-OK")[1].split()[0].strip("tensor()"))
        assert steps == (4 if i == 0 else 5), r.stdout


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_traffic_step_changes_no_param_state_or_step_count(dtype):
    # bench/adam_e2e.py's bound: the optimizer's own step traffic, nothing updated
    m = mlp().to(dtype)
    o = TieredAdamW(m.parameters(), lr=1e-2)
    x, y = data(dtype)
    train(m, o, 2, x, y)
    with torch.no_grad():  # a param written since the step: its copy must survive as written
        next(m.parameters()).add_(1.0)
    params = [p.detach().clone() for p in m.parameters()]
    state = {k: v.clone() for p in m.parameters() for k, v in o.state[p].items()
             for k in [f"{id(p)}{k}"] if isinstance(v, torch.Tensor)}
    o.traffic_step()
    for a, b in zip(m.parameters(), params):
        assert torch.equal(a, b)
    now = {f"{id(p)}{k}": v for p in m.parameters() for k, v in o.state[p].items()
           if isinstance(v, torch.Tensor)}
    assert now.keys() == state.keys()
    assert all(torch.equal(now[k], state[k]) for k in state)
    train(m, o, 1, x, y)  # the step after re-reads the written param as before
    assert int(o.state[next(m.parameters())]["step"]) == 3


# ---- step() outside torch's step wrapper ----

def _one_param_opt():
    p = torch.nn.Parameter(torch.randn(64))
    p.grad = torch.randn(64)
    return p, TieredAdamW([p], lr=1e-3)


def test_step_hooks_run_once_each_and_can_replace_the_arguments():
    p, o = _one_param_opt()
    calls = []
    h1 = o.register_step_pre_hook(lambda opt, args, kw: calls.append(("pre", args, kw)))
    h2 = o.register_step_post_hook(lambda opt, args, kw: calls.append(("post", args, kw)))
    o.step(grad_scale=0.5)
    assert [c[0] for c in calls] == ["pre", "post"]
    assert calls[0][2] == {"grad_scale": 0.5}
    # a pre hook returning (args, kwargs) replaces them, as under torch's wrapper
    h3 = o.register_step_pre_hook(lambda opt, args, kw: (args, {"grad_scale": 0.0}))
    calls.clear()
    o.step(grad_scale=2.0)
    assert calls[-1][0] == "post" and calls[-1][2] == {"grad_scale": 0.0}
    assert int(o.state[p]["step"]) == 2
    for h in (h1, h2, h3):
        h.remove()
    calls.clear()
    o.step()
    assert calls == []  # removed: the plain path runs no hook
    gcalls = []
    from torch.optim.optimizer import register_optimizer_step_post_hook
    g = register_optimizer_step_post_hook(
        lambda opt, args, kw: gcalls.append(type(opt).__name__))
    try:
        o.step()
    finally:
        g.remove()
    assert gcalls == ["TieredAdamW"]


def test_step_is_labelled_for_the_profiler_only_while_it_records(monkeypatch):
    p, o = _one_param_opt()
    assert getattr(TieredAdamW.step, "hooked", False)  # torch does not wrap it again
    with torch.profiler.profile() as prof:
        o.step()
    assert "Optimizer.step#TieredAdamW.step" in {e.name for e in prof.events()}
    # without hooks or a profiler, torch's wrapper (record_function & co.) is not entered
    entered = []
    real = torch.autograd.profiler.record_function
    monkeypatch.setattr(torch.autograd.profiler, "record_function",
                        lambda *a, **k: entered.append(a) or real(*a, **k))
    o.step()
    assert entered == []
    with torch.autograd.profiler.profile():
        o.step()
    assert entered and entered[0][0] == "Optimizer.step#TieredAdamW.step"
    assert int(o.state[p]["step"]) == 3


def test_plain_and_hooked_steps_give_the_same_bits():
    p1, o1 = _one_param_opt()
    p2 = torch.nn.Parameter(p1.detach().clone())
    p2.grad = p1.grad.clone()
    o2 = TieredAdamW([p2], lr=1e-3)
    o2.register_step_pre_hook(lambda *a: None)
    for _ in range(3):
        o1.step()
        o2.step()
    assert torch.equal(p1, p2)
    assert torch.equal(o1.state[p1]["exp_avg_sq"], o2.state[p2]["exp_avg_sq"])


def _torch_twin(p: torch.Tensor):
    q = torch.nn.Parameter(p.detach().clone())
    q.grad = p.grad.clone()
    return q, torch.optim.AdamW([q], lr=1e-3, foreach=False)


def test_step_counts_written_from_outside_are_what_the_next_step_uses():
    # the counts live in a numpy-advanced array: an in-place write to state["step"], a
    # replaced step tensor and load_state_dict must all still drive the bias correction
    p, o = _one_param_opt()
    q, ref = _torch_twin(p)
    o.step()
    ref.step()
    o.state[p]["step"].fill_(7.0)  # in place: the slot itself
    ref.state[q]["step"].fill_(7.0)
    o.step()
    ref.step()
    assert int(o.state[p]["step"]) == 8
    torch.testing.assert_close(p.detach(), q.detach(), rtol=1e-6, atol=1e-7)
    o.state[p]["step"] = torch.tensor(20.0)  # replaced: advanced the torch way
    ref.state[q]["step"] = torch.tensor(20.0)
    o.step()
    ref.step()
    assert int(o.state[p]["step"]) == 21
    torch.testing.assert_close(p.detach(), q.detach(), rtol=1e-6, atol=1e-7)
    sd = copy.deepcopy(o.state_dict())
    sd["state"][0]["step"] = torch.tensor(3.0)
    o.load_state_dict(sd)
    ref.state[q]["step"] = torch.tensor(3.0)
    ref.state[q]["exp_avg"].copy_(o.state[p]["exp_avg"])
    ref.state[q]["exp_avg_sq"].copy_(o.state[p]["exp_avg_sq"])
    o.step()
    ref.step()
    assert int(o.state[p]["step"]) == 4
    torch.testing.assert_close(p.detach(), q.detach(), rtol=1e-6, atol=1e-7)


def test_step_counts_advance_without_a_torch_op(monkeypatch):
    m = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    o = TieredAdamW(m.parameters(), lr=1e-3)
    called = []
    monkeypatch.setattr(torch, "_foreach_add_", lambda *a, **k: called.append(a))
    m(torch.randn(5, 4)).sum().backward()
    m[1].bias.grad = None  # a param without a grad keeps its count
    o.step()
    o.step()
    assert called == []
    assert [int(o.state[p]["step"]) for p in m.parameters()] == [2, 2, 2, 0]


def test_step_and_traffic_step_restore_grad_mode_even_when_they_raise():
    p, o = _one_param_opt()
    seen = []
    o.register_step_post_hook(lambda *a: seen.append(torch.is_grad_enabled()))
    o.step()
    assert torch.is_grad_enabled() and seen == [True]  # hooks run outside the step's no-grad
    o.traffic_step()
    assert torch.is_grad_enabled()
    p.grad = torch.zeros(64).to_sparse()  # TypeError mid-step
    for f in (o.step, o.traffic_step):
        with pytest.raises(TypeError, match="sparse"):
            f()
        assert torch.is_grad_enabled()
    with torch.no_grad():
        p.grad = torch.ones(64)
        o.step()
        assert not torch.is_grad_enabled()


# ---- huge_pages moves large fp32 params into a THP buffer ----

def _in(buf, t):
    base = torch.frombuffer(buf, dtype=torch.uint8).data_ptr()
    return base <= t.data_ptr() < base + len(buf)


def test_large_fp32_params_move_into_a_huge_page_buffer(monkeypatch):
    import cxlkit.integrations.torch_adamw as cxt
    monkeypatch.setattr(cxt, "THP_MOVE_BYTES", 4096)
    big = torch.nn.Parameter(torch.randn(2048))  # 8 KiB: moved
    small = torch.nn.Parameter(torch.randn(100))  # under THP_MOVE_BYTES: stays
    flat = torch.randn(4096)
    view = torch.nn.Parameter(flat[:2048])  # a view into a larger storage: stays
    whole = torch.randn(2048)
    shared = torch.nn.Parameter(whole.view(32, 64))  # its storage whole, but `whole` shares it
    ps = (big, small, view, shared)
    before = {id(p): (p.data_ptr(), p.detach().clone()) for p in ps}
    for p in ps:
        p.grad = torch.randn_like(p)
    q = torch.nn.Parameter(big.detach().clone())
    q.grad = big.grad.clone()
    ref = torch.optim.AdamW([q], lr=1e-3, foreach=False)
    o = TieredAdamW(list(ps), lr=1e-3)
    (buf,) = [b for c, b in o.buffers() if c == "fp32_params"]
    assert len(buf) == 4 * 2048 and buf.thp is True
    assert _in(buf, big) and not any(_in(buf, p) for p in (small, view, shared))
    for p in (small, view, shared):
        assert p.data_ptr() == before[id(p)][0]
    for p in ps:
        assert torch.equal(p.detach(), before[id(p)][1])  # moved or not, same values
    for _ in range(2):
        o.step()
        ref.step()
    torch.testing.assert_close(big.detach(), q.detach(), rtol=1e-6, atol=1e-7)
    assert o.state[big]["master"].data_ptr() == big.data_ptr()  # still its own master
    assert torch.equal(flat[:2048], view.detach())  # the aliases still alias
    assert torch.equal(whole.view(32, 64), shared.detach())


def test_huge_pages_false_leaves_fp32_params_in_place(monkeypatch):
    import cxlkit.integrations.torch_adamw as cxt
    monkeypatch.setattr(cxt, "THP_MOVE_BYTES", 4096)
    p = torch.nn.Parameter(torch.randn(2048))
    ptr = p.data_ptr()
    o = TieredAdamW([p], lr=1e-3, huge_pages=False)
    assert p.data_ptr() == ptr
    assert not [b for c, b in o.buffers() if c == "fp32_params"]


def test_moved_params_outlive_the_optimizer(monkeypatch):
    # the moved param's storage is a view of the optimizer's buffer: dropping the optimizer
    # must leave the param's memory mapped and its values as they were
    import gc

    import cxlkit.integrations.torch_adamw as cxt
    monkeypatch.setattr(cxt, "THP_MOVE_BYTES", 4096)
    p = torch.nn.Parameter(torch.randn(4096))
    p.grad = torch.randn(4096)
    o = TieredAdamW([p], lr=1e-3)
    o.step()
    after = p.detach().clone()
    (buf,) = [b for c, b in o.buffers() if c == "fp32_params"]
    assert _in(buf, p)
    del o, buf
    gc.collect()
    junk = [torch.full((4096,), 7.0) for _ in range(64)]  # reuse of freed memory would show
    assert torch.equal(p.detach(), after)
    p.detach().add_(1.0)
    assert torch.equal(p.detach(), after + 1.0)
    del junk


def test_a_subclass_step_calling_super_runs_each_hook_once():
    # torch wraps the subclass's own step; TieredAdamW.step under it must not run the hooks
    # a second time
    class Clipped(TieredAdamW):
        def step(self, closure=None, *, grad_scale=1.0):
            return super().step(closure, grad_scale=grad_scale)

    p = torch.nn.Parameter(torch.randn(64))
    p.grad = torch.randn(64)
    o = Clipped([p], lr=1e-3)
    calls = []
    o.register_step_pre_hook(lambda *a: calls.append("pre"))
    o.register_step_post_hook(lambda *a: calls.append("post"))
    o.step()
    assert calls == ["pre", "post"] and int(o.state[p]["step"]) == 1


def test_moved_params_save_and_load_with_transformers(monkeypatch, tmp_path):
    # moved params in huge-page buffers: save_pretrained (safetensors) must keep every one
    # of them, not take them for tied weights
    transformers = pytest.importorskip("transformers")
    import cxlkit.integrations.torch_adamw as cxt
    monkeypatch.setattr(cxt, "THP_MOVE_BYTES", 4096)
    cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128,
                                   num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=4)
    torch.manual_seed(0)
    m = transformers.LlamaForCausalLM(cfg)
    before = {k: v.clone() for k, v in m.state_dict().items()}
    o = TieredAdamW(m.parameters(), lr=1e-3)
    bufs = [b for c, b in o.buffers() if c == "fp32_params"]
    assert sum(any(_in(b, p) for b in bufs) for p in m.parameters()) >= 10  # moved
    m.save_pretrained(tmp_path)
    back = transformers.LlamaForCausalLM.from_pretrained(tmp_path)
    assert before.keys() == back.state_dict().keys()
    for k, v in back.state_dict().items():
        assert torch.equal(before[k], v), k


def test_torch_save_of_a_moved_param_writes_that_param_only(monkeypatch, tmp_path):
    # each param moved for huge pages has a buffer of its own: in the group's shared buffer,
    # torch.save of one param (or a state_dict) wrote the whole buffer, the bf16 params'
    # masters included (a 2048-param fp32 weight beside 64K bf16 params saved 280 KB, now 9.6 KB)
    import cxlkit.integrations.torch_adamw as cxt
    monkeypatch.setattr(cxt, "THP_MOVE_BYTES", 4096)
    w = torch.nn.Parameter(torch.randn(2048))  # fp32, moved
    u = torch.nn.Parameter(torch.randn(2048))  # fp32, moved
    h = torch.nn.Parameter(torch.randn(65536).bfloat16())  # its fp32 master: 256 KiB
    for p in (w, u, h):
        p.grad = torch.randn_like(p)
    o = TieredAdamW([w, h, u], lr=1e-3)
    bufs = [b for c, b in o.buffers() if c == "fp32_params"]
    assert sum(_in(b, w) for b in bufs) == 1 and sum(_in(b, u) for b in bufs) == 1
    assert not any(_in(b, w) and _in(b, u) for b in bufs)
    o.step()
    torch.save(w, tmp_path / "w.pt")
    assert (tmp_path / "w.pt").stat().st_size < 4 * 2048 + 4096
    back = torch.load(tmp_path / "w.pt")
    assert torch.equal(back.detach(), w.detach())
    torch.save({"w": w, "u": u}, tmp_path / "wu.pt")
    assert (tmp_path / "wu.pt").stat().st_size < 8 * 2048 + 4096
