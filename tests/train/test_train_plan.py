"""cxlkit.train.plan and `cxlkit plan train`: the footprint table, the tiered placement
(DRAM first for latency-sensitive classes, CXL for streamed ones, bandwidth-proportional
stripes when DRAM runs out), the naive modes, enforced budgets, and every class's pages on
the nodes the plan names (multi-node cases: tests/vm)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import cxlkit
from cxlkit.testing import inject_fault
from cxlkit.train import plan as TP

FIXTURES = Path(__file__).parents[1] / "fixtures" / "sysfs"
GiB = 1 << 30
SEVEN_B = TP.Footprint(7_000_000_000, 28, 3584, 32768, 4, 2)


def tiers(dram=96, cxl=(64, 64), dram_bw=200.0, cxl_bw=60.0):
    out = [TP.Tier(0, "dram", dram * GiB, dram_bw, "given")]
    out += [TP.Tier(i + 1, "cxl", c * GiB, cxl_bw, "given") for i, c in enumerate(cxl)]
    return out


def test_footprint_follows_the_published_model():
    b = SEVEN_B.bytes()
    p = 7_000_000_000
    assert b == {"bf16_params": 2 * p, "bf16_grads": 2 * p,
                 "activations": 2 * 2 * 4 * 32768 * 28 * 3584, "fp32_params": 4 * p,
                 "fp32_grads": 4 * p, "optimizer_states": 8 * p}
    assert SEVEN_B.total == sum(b.values())
    assert TP.Footprint(10, fp32_grads=False).bytes()["fp32_grads"] == 0
    assert list(b) == list(TP.CLASS_NAMES)


@pytest.mark.parametrize("field", ["params", "layers", "hidden", "context", "batch", "gpus"])
def test_footprint_rejects_non_positive_counts(field):
    kw = dict(params=10, layers=1, hidden=1, context=1, batch=1, gpus=1)
    kw[field] = 0
    with pytest.raises(ValueError, match=field):
        TP.Footprint(**kw)


def test_tiered_puts_streamed_classes_on_cxl_and_the_rest_in_dram():
    pl = TP.plan_training(TP.Footprint(1_000_000_000, 8, 1024, 4096, 1, 1), tiers())
    assert pl.fits
    for cls in ("bf16_params", "bf16_grads", "activations"):
        c = pl.classes[cls]
        assert set(c.nodes) == {1, 2} and c.nodes[1] == pytest.approx(c.nodes[2], abs=1)
        assert c.policy.mode == "stripe" and c.policy.nodes == (1, 2)
    for cls in ("fp32_params", "fp32_grads", "optimizer_states"):
        assert pl.classes[cls].nodes == {0: pl.classes[cls].nbytes}
        assert pl.policy(cls) == cxlkit.bind(0)


def test_when_dram_runs_out_optimizer_state_is_striped_by_bandwidth():
    pl = TP.plan_training(SEVEN_B, tiers())
    assert pl.fits
    st = pl.classes["optimizer_states"]
    assert set(st.nodes) == {0, 1, 2}
    # 200 : 60 : 60 GB/s -> shares 200/320, 60/320, 60/320
    assert st.nodes[0] / st.nbytes == pytest.approx(200 / 320, rel=1e-6)
    assert st.nodes[1] == pytest.approx(st.nodes[2], abs=1)
    assert st.policy.mode == "stripe" and st.policy.weights == (10, 3, 3)
    # master params and fp32 grads came first and fit DRAM whole
    assert pl.classes["fp32_params"].nodes == {0: SEVEN_B.bytes()["fp32_params"]}
    for n, used in pl.node_use().items():
        assert used <= next(t.capacity_bytes for t in pl.tiers if t.node == n)


def test_a_full_node_passes_its_share_on():
    # DRAM can take only 10 GiB of the state's bandwidth share: the rest flows to CXL
    t = tiers(dram=10, cxl=(200, 200))
    pl = TP.plan_training(TP.Footprint(1_000_000_000, fp32_grads=False), t)
    assert pl.fits
    assert pl.node_use()[0] <= 10 * GiB
    assert pl.classes["fp32_params"].nodes[0] == 4_000_000_000


def test_dram_only_reports_the_shortfall_and_budgets_cover_only_what_was_placed():
    pl = TP.plan_training(SEVEN_B, tiers(), mode="dram_only")
    assert not pl.fits
    assert all(not pl.classes[c].nodes for c in ("bf16_params", "bf16_grads", "activations"))
    assert pl.node_use() == {0: 96 * GiB, 1: 0, 2: 0}
    assert pl.shortfall == SEVEN_B.total - 96 * GiB
    with pytest.raises(TP.BudgetExceeded, match="bf16_params has no placement"):
        pl.policy("bf16_params")
    assert pl.budget("optimizer_states") == pl.classes["optimizer_states"].placed


def test_interleave_all_spreads_every_class_evenly():
    pl = TP.plan_training(SEVEN_B, tiers(), mode="interleave_all")
    assert pl.fits
    for c in pl.classes.values():
        assert c.policy == cxlkit.interleave([0, 1, 2])
        assert max(c.nodes.values()) - min(c.nodes.values()) <= 2


def test_plan_on_the_cxl_hmat_fixture_uses_firmware_bandwidth():
    t = TP.machine_tiers(sysfs_root=FIXTURES / "cxl-hmat", reserve=0.0)
    assert [(x.kind, x.bandwidth_source) for x in t] == [("dram", "hmat"), ("cxl", "hmat"),
                                                        ("cxl", "hmat")]
    pl = TP.plan_training(TP.Footprint(3_000_000_000, 16, 2048, 8192, 2, 1), t)
    act = pl.classes["activations"]
    # 51.2 vs 20.48 GB/s: the faster expander takes 5/7 of the stripe (until it is full)
    assert act.nodes[1] / act.placed == pytest.approx(51.2 / 71.68, rel=1e-6)


def test_plan_errors_are_typed():
    with pytest.raises(ValueError, match="plan mode"):
        TP.plan_training(SEVEN_B, tiers(), mode="fastest")
    with pytest.raises(TypeError, match="Footprint"):
        TP.plan_training(7e9, tiers())
    with pytest.raises(TP.PlanError, match="no memory tiers"):
        TP.plan_training(SEVEN_B, [])
    with pytest.raises(TP.PlanError, match="repeat a node"):
        TP.plan_training(SEVEN_B, tiers()[:1] * 2)
    with pytest.raises(TP.PlanError, match="dram_only needs a DRAM tier"):
        TP.plan_training(SEVEN_B, tiers()[1:], mode="dram_only")
    with pytest.raises(KeyError, match="'weights'"):
        TP.plan_training(SEVEN_B, tiers()).budget("weights")
    with pytest.raises(ValueError, match="tier kind"):
        TP.Tier(0, "ssd", 1)
    with pytest.raises(ValueError, match="bandwidth"):
        TP.Tier(0, "dram", 1, 0.0)
    with pytest.raises(ValueError, match="reserve"):
        TP.machine_tiers(reserve=1.0)


def test_parse_tier_and_counts():
    assert TP.parse_tier("cxl:2:256G:64") == TP.Tier(2, "cxl", 256 * GiB, 64.0, "given")
    assert TP.parse_tier("dram:0:1.5T") == TP.Tier(0, "dram", int(1.5 * (1 << 40)), None)
    for bad in ("cxl:2", "cxl:x:1G", "cxl:1:lots", "ssd:1:1G"):
        with pytest.raises(ValueError):
            TP.parse_tier(bad)
    assert TP.parse_count("7e9") == TP.parse_count("7B") == 7_000_000_000
    assert TP.parse_count("32k", binary=True) == 32768
    assert TP.parse_count("32k") == 32000
    assert TP.parse_count(4096) == 4096
    for bad in ("", "seven", "0", "-5", "1.5"):
        with pytest.raises(ValueError):
            TP.parse_count(bad)


def test_budgets_are_enforced_on_this_machine(memory_nodes):
    pl = TP.plan_training(TP.Footprint(1 << 20), mode="dram_only")
    budget = pl.budget("fp32_params")
    assert budget == 4 << 20
    a = pl.alloc("fp32_params", budget - 4096)
    with pytest.raises(TP.BudgetExceeded, match="fp32_params: allocating 8192 bytes"):
        pl.alloc("fp32_params", 8192)
    b = pl.alloc("fp32_params", 4096)
    assert pl.remaining("fp32_params") == 0
    pl.free("fp32_params", a)
    assert pl.remaining("fp32_params") == budget - 4096
    pl.free("fp32_params", b)
    with pytest.raises(ValueError, match="nbytes"):
        pl.charge("fp32_params", -1)


def test_a_failed_allocation_returns_its_charge():
    pl = TP.plan_training(TP.Footprint(1 << 20), mode="dram_only")
    with inject_fault("mmap", 1):
        with pytest.raises(OSError, match="Cannot allocate memory"):
            pl.alloc("optimizer_states", 1 << 20)
    assert pl.remaining("optimizer_states") == 8 << 20


def test_every_class_lands_where_the_plan_says(memory_nodes):
    fp = TP.Footprint(1 << 18, 2, 256, 256, 1, 1)
    for mode in TP.MODES:
        pl = TP.plan_training(fp, mode=mode)
        for cls in TP.CLASS_NAMES:
            if not pl.classes[cls].nodes:
                continue
            with pl.alloc(cls, pl.budget(cls)) as buf:
                audit = buf.audit()
                assert audit.ok, (mode, cls, audit.problems)
                assert set(audit.actual.pages) <= set(pl.classes[cls].nodes)


def test_to_dict_is_json():
    d = TP.plan_training(SEVEN_B, tiers()).to_dict()
    json.dumps(d)
    assert d["fits"] and d["footprint"]["total_bytes"] == SEVEN_B.total
    assert [r["class"] for r in d["classes"]] == list(TP.CLASS_NAMES)


def _cli(*args):
    from cxlkit.cli.main import _load, app

    _load()
    return CliRunner().invoke(app, ["plan", "train", *args])


def test_cli_plan_train_prints_the_table_per_class_and_tier():
    r = _cli("--params", "7e9", "--layers", "28", "--hidden", "3584", "--context", "32k",
             "--batch", "4", "--gpus", "2", "--tier", "dram:0:96G:200", "--tier",
             "cxl:1:64G:60", "--tier", "cxl:2:64G:60")
    assert r.exit_code == 0, r.output
    for text in ("optimizer_states", "bf16_params", "N1 cxl", "N0 dram", "fits (tiered)",
                 "P=7,000,000,000"):
        assert text in r.output


def test_cli_plan_train_json_on_this_machine_and_all_modes():
    r = _cli("--params", "7e9", "--layers", "28", "--hidden", "3584", "--context", "32k",
             "--batch", "4", "--gpus", "2", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["footprint"]["context"] == 32768 and d["mode"] == "tiered"
    r = _cli("--params", "1e6", "--layers", "2", "--hidden", "64", "--context", "128",
             "--mode", "all", "--json", "--no-fp32-grads")
    assert [p["mode"] for p in json.loads(r.output)] == list(TP.MODES)


def test_cli_plan_train_bad_input_exits_2_naming_it():
    r = _cli("--params", "lots", "--layers", "1", "--hidden", "1", "--context", "1")
    assert r.exit_code == 2 and "lots" in r.output
    r = _cli("--params", "1e6", "--layers", "1", "--hidden", "1", "--context", "1",
             "--tier", "ssd:1:1G")
    assert r.exit_code == 2 and "ssd" in r.output
