"""cxlkit.integrations.deepspeed in the real engine (run by `make test-deepspeed` in .venv-ds,
DS_ACCELERATOR=cpu, a gloo world of one): ZeRO-2 and ZeRO-3 with offload_optimizer: cpu train
a small bf16 model with DeepSpeed's own DeepSpeedCPUAdam and with CxlkitCPUAdam + place_offload
to the same losses, every placed class audited (ZeRO-2's gradient buckets kept in placed
buffers across backwards); CxlkitCPUAdam against DeepSpeedCPUAdam step by step."""
from __future__ import annotations

import os

import pytest

if os.environ.get("CXLKIT_REQUIRE_DEEPSPEED"):  # make test-deepspeed: a broken install fails
    import deepspeed
else:
    deepspeed = pytest.importorskip("deepspeed",
                                    reason="DeepSpeed lives in .venv-ds: make test-deepspeed")
import torch  # noqa: E402

from cxlkit.integrations.deepspeed import (CLASSES, CxlkitCPUAdam, audit_offload,  # noqa: E402
                                           place_offload)
from cxlkit.train import plan as TP  # noqa: E402

pytestmark = pytest.mark.slow  # DeepSpeed JIT-builds its cpu_adam op on first use (minutes)


@pytest.fixture(scope="module", autouse=True)
def world_of_one():
    if os.environ.get("DS_ACCELERATOR") != "cpu":
        pytest.skip("run with DS_ACCELERATOR=cpu (make test-deepspeed)")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
    for k, v in (("RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0")):
        os.environ.setdefault(k, v)
    deepspeed.init_distributed(dist_backend="gloo")
    yield


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.GELU(), torch.nn.Linear(64, 4))


def config(stage):
    return {"train_micro_batch_size_per_gpu": 8, "bf16": {"enabled": True},
            "zero_optimization": {"stage": stage, "offload_optimizer": {"device": "cpu"}}}


def train(engine, steps=5):
    g = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(steps):
        x, y = torch.randn(8, 16, generator=g).bfloat16(), torch.randn(8, 4, generator=g).bfloat16()
        loss = ((engine(x) - y).float() ** 2).mean()
        engine.backward(loss)
        engine.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("stage", [2, 3])
def test_zero_offload_with_cxlkit_trains_like_deepspeed_and_places_every_class(stage):
    cfg = dict(config(stage),
               optimizer={"type": "AdamW", "params": {"lr": 1e-2, "weight_decay": 0.01}})
    ref_engine, ref_opt, _, _ = deepspeed.initialize(model=model(), config=cfg)
    assert type(ref_opt.optimizer).__name__ == "DeepSpeedCPUAdam"
    ref = train(ref_engine)
    ref_audit = audit_offload(ref_engine)  # DeepSpeed's own tensors, class by class
    assert set(ref_audit) == set(CLASSES)
    transient = {"compute_grads"} if stage == 2 else set()  # stage 1/2: IPG buckets per backward
    for name, a in ref_audit.items():
        assert not a.placed and not a.ok, a
        if name in transient:
            assert a.nbytes == 0, a
        else:
            assert a.nbytes > 0 and sum(a.pages.values()) > 0, a

    m = model()
    plan = TP.plan_training(TP.Footprint(sum(p.numel() for p in m.parameters())))
    opt = CxlkitCPUAdam(m.parameters(), lr=1e-2, weight_decay=0.01, plan=plan)
    engine, zo, _, _ = deepspeed.initialize(model=m, optimizer=opt, config=config(stage))
    assert zo.optimizer is opt
    placed = place_offload(engine)
    got = train(engine)
    print(f"ZeRO-{stage} losses: DeepSpeedCPUAdam {ref}, CxlkitCPUAdam {got}")  # with -s
    assert got == pytest.approx(ref, rel=2e-3)
    assert got[-1] < got[0]

    audit = audit_offload(engine)
    assert set(audit) == set(CLASSES)
    for name in CLASSES:  # every class is placed, stage 2's compute grads included
        a = audit[name]
        assert a.placed and a.ok, (a, ref_audit[name])
        if name not in transient:
            assert a.nbytes == ref_audit[name].nbytes, (a, ref_audit[name])
        assert set(a.pages) <= set(plan.classes[CLASSES[name]].nodes), a
        assert all(b.policy == plan.policy(CLASSES[name]) for b in placed.get(name, []) +
                   opt.buffers()[name])
    if stage == 2:  # the IPG buckets: a bucket never holds more than the model's grads
        n = sum(p.numel() for p in m.parameters())
        assert audit["compute_grads"].nbytes == n * 2 * len(opt.buffers()["compute_grads"])
    flat = opt.buffers()["compute_weights"][0]
    parts = [p.data for p in m.parameters()] if stage == 2 else \
        zo._get_parameter_partitions()  # stage 3: the params' partitions (ds_tensor)
    for t in parts:  # what the model computes with lives in the placed compute weights
        assert flat.address <= t.data_ptr() < flat.address + flat.nbytes
    if stage == 3:
        g = opt.buffers()["compute_grads"][0]
        views = zo._DeepSpeedZeroOptimizer_Stage3__param_id_to_grad_partition
        assert views and all(g.address <= v.data_ptr() < g.address + g.nbytes
                             for v in views.values())


def test_cxlkit_cpu_adam_steps_like_deepspeed_cpu_adam():
    from deepspeed.ops.adam import DeepSpeedCPUAdam

    torch.manual_seed(3)
    p1 = [torch.randn(1003), torch.randn(64, 17)]
    p2 = [p.clone() for p in p1]
    ref = DeepSpeedCPUAdam(p1, lr=1e-2, weight_decay=0.1, adamw_mode=True)
    opt = CxlkitCPUAdam(p2, lr=1e-2, weight_decay=0.1, adamw_mode=True, team=None)
    for s in range(5):
        for a, b in zip(p1, p2):
            a.grad = torch.randn(a.shape, generator=torch.Generator().manual_seed(s))
            b.grad = a.grad.clone()
        ref.step()
        opt.step()
    for a, b in zip(p1, p2):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(ref.state[a]["exp_avg_sq"], opt.state[b]["exp_avg_sq"])
        assert opt.state[b]["step"] == 5


def test_bad_arguments_raise_typed_errors():
    with pytest.raises(ValueError, match="AMSGrad"):
        CxlkitCPUAdam([torch.zeros(3)], amsgrad=True)
    with pytest.raises(ValueError, match="fp32"):
        CxlkitCPUAdam([torch.zeros(3)], fp32_optimizer_states=False)
    with pytest.raises(ValueError, match="team"):
        CxlkitCPUAdam([torch.zeros(3)], team="many")
    p = torch.zeros(3, dtype=torch.bfloat16)
    p.grad = torch.zeros(3, dtype=torch.bfloat16)
    with pytest.raises(TypeError, match="fp32 CPU master"):
        CxlkitCPUAdam([p]).step()
    with pytest.raises(ValueError, match="offload_optimizer"):
        place_offload(object())
    with pytest.raises(NotImplementedError, match="SuperOffload"):
        CxlkitCPUAdam([torch.zeros(3)]).step_subgroup(0)


def test_zero2_gradient_buckets_are_placed_and_kept_across_backwards():
    m = model()
    plan = TP.plan_training(TP.Footprint(sum(p.numel() for p in m.parameters())))
    opt = CxlkitCPUAdam(m.parameters(), lr=1e-2, plan=plan)
    engine, zo, _, _ = deepspeed.initialize(model=m, optimizer=opt, config=config(2))
    place_offload(engine)
    setup, now = zo.setup_buckets, set()

    def spy():  # DeepSpeed calls it at every gradient; its buckets are gone after backward
        setup()
        now.update(b.data_ptr() for k in zo.ipg_buckets.values() for b in k.buffer)

    zo.setup_buckets = spy
    g = torch.Generator().manual_seed(1)
    seen = []
    for _ in range(3):
        x, y = torch.randn(8, 16, generator=g).bfloat16(), torch.randn(8, 4, generator=g).bfloat16()
        loss = ((engine(x) - y).float() ** 2).mean()
        now.clear()
        engine.backward(loss)
        assert now  # DeepSpeed set up its buckets during this backward
        seen.append(sorted(now))
        engine.step()
    placed = opt.buffers()["compute_grads"]
    assert seen[0] == seen[1] == seen[2]  # the same placed buffers every backward
    assert all(any(pb.address <= p < pb.address + pb.nbytes for pb in placed) for p in seen[0])
    assert all(b.policy == plan.policy("bf16_grads") for b in placed)


def test_place_offload_names_a_zero_optimizer_without_gradient_buckets():
    class Zero2Elsewhere:  # a ZeRO-1/2 optimizer of another DeepSpeed layout
        cpu_offload = True
        contiguous_gradients = True
        single_partition_of_fp32_groups: list = []

    class Engine:
        optimizer = Zero2Elsewhere()

    with pytest.raises(TypeError, match="setup_buckets, ipg_buckets"):
        place_offload(Engine())


def test_place_offload_twice_returns_the_first_placement_and_another_plan_raises_ValueError():
    m = model()
    plan = TP.plan_training(TP.Footprint(sum(p.numel() for p in m.parameters())))
    opt = CxlkitCPUAdam(m.parameters(), lr=1e-2, plan=plan)
    engine, zo, _, _ = deepspeed.initialize(model=m, optimizer=opt, config=config(2))
    first = place_offload(engine, plan=plan)
    master = zo.single_partition_of_fp32_groups[0].data_ptr()
    for again in (place_offload(engine, plan=plan), place_offload(engine)):
        assert set(again) == set(first)  # nothing placed twice, no second budget charged
        assert all([b.address for b in again[k]] == [b.address for b in first[k]]
                   for k in first)
    assert zo.single_partition_of_fp32_groups[0].data_ptr() == master
    assert len(opt.buffers()["master_weights"]) == 1
    other = TP.plan_training(TP.Footprint(sum(p.numel() for p in m.parameters())))
    with pytest.raises(ValueError, match="placed already"):
        place_offload(engine, plan=other)
    losses = train(engine, steps=2)  # the engine still trains on the first placement
    assert all(x == x for x in losses)
    assert "compute_grads" in place_offload(engine)  # placed at the first backward
