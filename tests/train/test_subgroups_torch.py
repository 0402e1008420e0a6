"""SpilledAdamW(..., spill=SubgroupStore) against TieredAdamW without spill: same params bit
for bit, state_dict / load_state_dict through the paths, the DeepSpeed-style config."""
from __future__ import annotations

import copy
import json

import pytest
import torch

from cxlkit.integrations.torch import TieredAdamW
from cxlkit.integrations.torch_spill import SpilledAdamW, optimizer_from_config
from cxlkit.train import OffloadConfig, SubgroupStore, from_config


def model(dtype=torch.bfloat16) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 48), torch.nn.GELU(),
                               torch.nn.Linear(48, 8)).to(dtype)


def store(tmp_path, **kw) -> SubgroupStore:
    dirs = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir(exist_ok=True)
        dirs.append(str(tmp_path / name))
    kw.setdefault("bandwidths", [1.0, 1.0, 1.0])
    return SubgroupStore([*dirs, "mem"], subgroup_params=400, cache_subgroups=3, **kw)


def train(m, opt, steps: int, skip_last: bool = False) -> list[float]:
    x = torch.randn(16, 32, generator=torch.Generator().manual_seed(1)).to(
        next(m.parameters()).dtype)
    losses = []
    for _ in range(steps):
        loss = m(x).float().pow(2).mean()
        loss.backward()
        if skip_last:
            m[2].bias.grad = None  # a param without a grad is skipped, as torch does
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_spilled_params_equal_tiered_adamw_bit_for_bit(tmp_path, dtype):
    m1, m2 = model(dtype), model(dtype)
    o1 = TieredAdamW(m1.parameters(), lr=1e-2, team=None)
    o2 = SpilledAdamW([{"params": list(m2[0].parameters())},
                       {"params": list(m2[2].parameters())}], lr=1e-2, team=None,
                      spill=store(tmp_path))
    o1b = TieredAdamW([{"params": list(m1[0].parameters())},
                       {"params": list(m1[2].parameters())}], lr=1e-2, team=None)
    del o1
    try:
        assert isinstance(o2, SpilledAdamW)
        assert train(m1, o1b, 4, skip_last=True) == train(m2, o2, 4, skip_last=True)
        for a, b in zip(m1.parameters(), m2.parameters()):
            assert torch.equal(a, b)
        assert o2.last_metrics["cache_hits"] == 3
        assert {p["kind"] for p in o2.last_metrics["paths"]} == {"dir", "memory"}
    finally:
        o2.close()


def test_state_dict_round_trip_continues_identically(tmp_path):
    m1, m2 = model(), model()
    o1 = TieredAdamW(m1.parameters(), lr=1e-2, team=None)
    o2 = SpilledAdamW(m2.parameters(), lr=1e-2, team=None, spill=store(tmp_path))
    try:
        train(m1, o1, 2)
        train(m2, o2, 2)
        sd1, sd2 = o1.state_dict(), o2.state_dict()
        for k, st in sd1["state"].items():
            for key in ("exp_avg", "exp_avg_sq", "step"):
                assert torch.equal(st[key], sd2["state"][k][key])
        # a fresh spilled optimizer takes TieredAdamW's state dict and goes on in step
        m3 = copy.deepcopy(m2)
        o3 = SpilledAdamW(m3.parameters(), lr=5e-2, team=None,
                          spill=SubgroupStore(["mem"], subgroup_params=300, bandwidths=[1]))
        try:
            o3.load_state_dict(sd1)
            assert o3.param_groups[0]["lr"] == 1e-2
            assert train(m1, o1, 2) == train(m3, o3, 2)
            for a, b in zip(m1.parameters(), m3.parameters()):
                assert torch.equal(a, b)
        finally:
            o3.close()
        with pytest.raises(ValueError, match="param groups"):
            o2.load_state_dict({"state": {}, "param_groups": []})
    finally:
        o2.close()


def test_spill_rejects_placement_arguments_and_late_groups(tmp_path):
    m = model()
    with pytest.raises(ValueError, match="place_grads"):
        SpilledAdamW(m.parameters(), spill=SubgroupStore(["mem"], bandwidths=[1]),
                     place_grads=True)
    with pytest.raises(TypeError, match="SubgroupStore"):
        SpilledAdamW(m.parameters(), spill="/tmp")
    o = SpilledAdamW(list(m[0].parameters()), team=None,
                     spill=SubgroupStore(["mem"], subgroup_params=300, bandwidths=[1]))
    try:
        with pytest.raises(ValueError, match="constructor"):
            o.add_param_group({"params": list(m[2].parameters())})
    finally:
        o.close()


DS = {
    "optimizer": {"type": "AdamW", "params": {"lr": 2e-3, "betas": [0.8, 0.99],
                                              "eps": 1e-7, "weight_decay": 0.05}},
    "zero_optimization": {
        "stage": 3, "sub_group_size": 1e3,
        "offload_optimizer": {"device": "nvme", "nvme_path": ["A", "B", "mem"],
                              "buffer_count": 5, "pipeline_read": True,
                              "pipeline_write": False}},
    "aio": {"block_size": 262144, "queue_depth": 8, "thread_count": 2,
            "single_submit": False, "overlap_events": True},
    "cxlkit": {"order": "alternate", "lock": "shared", "bandwidths": [1, 1, 1]},
}


def test_from_config_reads_the_deepspeed_block(tmp_path):
    (tmp_path / "A").mkdir()
    (tmp_path / "B").mkdir()
    cfg = json.loads(json.dumps(DS).replace('"A"', json.dumps(str(tmp_path / "A")))
                     .replace('"B"', json.dumps(str(tmp_path / "B"))))
    oc = from_config(json.dumps(cfg))
    assert isinstance(oc, OffloadConfig)
    assert oc.paths[2] == "mem" and oc.sub_group_size == 1000 and oc.buffer_count == 5
    assert oc.aio.block_size == 262144 and oc.aio.queue_depth == 8 and oc.aio.threads == 2
    assert oc.optimizer_kwargs() == dict(lr=2e-3, eps=1e-7, weight_decay=0.05,
                                         betas=(0.8, 0.99))
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(cfg))
    assert from_config(str(path)) == oc
    m1, m2 = model(), model()
    o = optimizer_from_config(m2.parameters(), oc, team=None)
    ref = TieredAdamW(m1.parameters(), team=None, **oc.optimizer_kwargs())
    try:
        assert isinstance(o, SpilledAdamW)
        st = o._spill
        assert st.cache_subgroups == 5 and not st.pipeline_write and st.lock == "shared"
        assert [p.kind for p in st.paths] == ["dir", "dir", "memory"]
        assert train(m1, ref, 3) == train(m2, o, 3)
    finally:
        o.close()
    plain = optimizer_from_config(model().parameters(), {"optimizer": DS["optimizer"]})
    assert type(plain) is TieredAdamW


@pytest.mark.parametrize("bad, match", [
    ({"offload_optimizer": {"device": "disk"}}, "device"),
    ({"offload_optimizer": {"device": "nvme"}}, "nvme_path"),
    ({"offload_optimizer": {"device": "nvme", "nvme_path": [3]}}, "nvme_path"),
    ({"offload_optimizer": {"nvme_pth": "/x"}}, "unknown key"),
    ({"aio": {"block_size": 100}}, "block_size"),
    ({"aio": {"queue_dept": 4}}, "unknown key"),
    ({"cxlkit": {"ordr": "x"}}, "unknown key"),
    ({"sub_group_size": 0}, "sub_group_size"),
    ({"offload_optimizer": {"pipeline_read": "yes"}}, "pipeline_read"),
])
def test_from_config_refuses_bad_blocks(bad, match):
    with pytest.raises(ValueError, match=match):
        from_config(bad)


def test_tiered_adamw_with_spill_warns_and_builds_a_spilled_adamw(tmp_path):
    m = model()
    with pytest.warns(DeprecationWarning, match="SpilledAdamW"):
        o = TieredAdamW(m.parameters(), team=None,
                        spill=SubgroupStore(["mem"], subgroup_params=300, bandwidths=[1]))
    try:
        assert type(o) is SpilledAdamW
    finally:
        o.close()


def test_torch_adamw_never_imports_the_spilled_optimizer():
    import ast
    import cxlkit.integrations.torch_adamw as base
    tree = ast.parse(open(base.__file__).read())
    names = {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    names |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not any("torch_spill" in n for n in names)


def test_tiered_adamw_module_alone_refuses_spill_with_a_TypeError_naming_SpilledAdamW():
    import subprocess
    import sys
    code = ("import torch\n"
            "from cxlkit.integrations.torch_adamw import TieredAdamW\n"
            "try:\n"
            "    TieredAdamW([torch.nn.Parameter(torch.zeros(4))], spill=object())\n"
            "except TypeError as e:\n"
            "    print(e)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert "SpilledAdamW(params, spill=store)" in r.stdout
