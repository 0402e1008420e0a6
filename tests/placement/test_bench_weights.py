"""weights_from: the kernel's bandwidth rule (floor(32 * bw / total), at least 1, divided by
the GCD) on measured figures; weights_table for `cxlkit policy weights --from-bench`."""
from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cxlkit.bench.weights import (KERNEL_MAX_WEIGHT, load_result, node_bandwidths,
                                  weights_from, weights_table)
from conftest import make_sysfs


def doc(**peaks) -> dict:
    """A minimal memory result: node -> (read, write) peak GB/s."""
    return {"kind": "memory", "figures": {"nodes": {
        str(n): {"peak_gbps": {"read": r, "write": w, "copy": r, "nt_write": w}}
        for n, (r, w) in ((int(k[1:]), v) for k, v in peaks.items())}}}


def test_three_to_one_bandwidth_gives_weights_3_and_1():
    # 32*300/400 = 24, 32*100/400 = 8, reduced by their GCD 8
    assert weights_from({0: 300.0, 1: 100.0}) == {0: 3, 1: 1}


def test_a_node_under_one_32nd_of_the_total_still_gets_weight_1():
    assert weights_from({0: 1000, 1: 1}) == {0: 31, 1: 1}


def test_equal_bandwidths_give_equal_weights_and_one_node_gets_1():
    assert weights_from({0: 50, 1: 50, 2: 50}) == {0: 1, 1: 1, 2: 1}
    assert weights_from({3: 12.5}) == {3: 1}


def test_max_weight_sets_the_resolution():
    # 255*2/3 = 170 and 255/3 = 85 reduce to 2:1; a coarse scale rounds 250:60 to 8:1
    assert weights_from({0: 2, 1: 1}, max_weight=255) == {0: 2, 1: 1}
    assert weights_from({0: 250, 1: 60}, max_weight=10) == {0: 8, 1: 1}


def test_nodes_pick_and_order_the_result():
    w = weights_from({0: 300, 1: 100, 2: 100}, nodes=[1, 0])
    assert list(w) == [1, 0] and w == {1: 1, 0: 3}


def test_a_node_without_a_figure_raises_KeyError_naming_it():
    with pytest.raises(KeyError, match="node.s. 5"):
        weights_from({0: 1.0}, nodes=[0, 5])


@pytest.mark.parametrize("bw, exc, match", [
    ({0: 0}, ValueError, "node 0"),
    ({0: -3}, ValueError, "node 0"),
    ({0: float("nan")}, ValueError, "node 0"),
    ({0: "fast"}, ValueError, "node 0"),
    ({"0": 1.0}, TypeError, "node '0'"),
    ({}, ValueError, "no nodes"),
])
def test_bad_bandwidths_raise_typed_errors_naming_the_node(bw, exc, match):
    with pytest.raises(exc, match=match):
        weights_from(bw)


@pytest.mark.parametrize("mw", [0, 256, 1.5, True])
def test_bad_max_weight_raises_ValueError(mw):
    with pytest.raises(ValueError, match="max_weight"):
        weights_from({0: 1}, max_weight=mw)


def test_something_that_is_not_a_mapping_raises_TypeError():
    with pytest.raises(TypeError, match="list"):
        weights_from([100, 50])


def test_from_a_result_min_of_read_and_write_is_the_default_like_the_kernel():
    d = doc(n0=(40.0, 30.0), n1=(10.0, 15.0))
    assert node_bandwidths(d) == {0: 30.0, 1: 10.0}
    assert weights_from(d) == weights_from({0: 30.0, 1: 10.0}) == {0: 3, 1: 1}
    # read 40:10: floor(25.6) = 25 and floor(6.4) = 6 share no factor: the kernel keeps 25:6
    assert weights_from(d, kind="read") == {0: 25, 1: 6}


def test_a_result_without_figures_or_a_kind_raises_ValueError():
    with pytest.raises(ValueError, match="figures"):
        node_bandwidths({"kind": "memory"})
    with pytest.raises(ValueError, match="no read"):
        weights_from({"figures": {"nodes": {"0": {"peak_gbps": {"write": 1.0}}}}})
    with pytest.raises(ValueError, match="kind 'fastest'"):
        node_bandwidths(doc(n0=(1, 1)), kind="fastest")


@given(st.dictionaries(st.integers(0, 63), st.floats(0.01, 1e4), min_size=1, max_size=8),
       st.integers(1, 255))
def test_weights_are_reduced_in_range_and_follow_bandwidth_order(bw, mw):
    w = weights_from(bw, max_weight=mw)
    assert set(w) == set(bw)
    assert all(1 <= v <= mw for v in w.values())
    assert math.gcd(*w.values()) == 1
    for a in bw:
        for b in bw:
            if bw[a] >= bw[b]:
                assert w[a] >= w[b]


def test_weights_table_gives_computed_and_the_kernels_current(tmp_path, monkeypatch):
    p = tmp_path / "r.json"
    p.write_text(json.dumps(doc(n0=(300, 300), n1=(100, 100))))
    root = make_sysfs(tmp_path / "sys", nodes="0-1", weights={0: 1, 1: 1})
    monkeypatch.setenv("CXLKIT_SYSFS_ROOT", str(root))
    assert weights_table(p) == ({0: 3, 1: 1}, {0: 1, 1: 1})
    assert weights_table(str(p), max_weight=KERNEL_MAX_WEIGHT, kind="read")[0] == {0: 3, 1: 1}


def test_weights_table_without_kernel_weighted_interleave_gives_None(tmp_path, monkeypatch):
    p = tmp_path / "r.json"
    p.write_text(json.dumps(doc(n0=(1, 1))))
    monkeypatch.setenv("CXLKIT_SYSFS_ROOT", str(make_sysfs(tmp_path / "sys", nodes="0")))
    assert weights_table(p) == ({0: 1}, None)


def test_load_result_errors_name_the_path(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="bad.json: not JSON"):
        load_result(bad)
    other = tmp_path / "copy.json"
    other.write_text(json.dumps({"kind": "copy", "figures": {}}))
    with pytest.raises(ValueError, match="copy.json: not a `cxlkit bench memory` result"):
        load_result(other)
    with pytest.raises(FileNotFoundError):
        load_result(tmp_path / "absent.json")


def test_policy_reexports_weights_from():
    import cxlkit.placement as P

    assert P.weights_from({0: 3, 1: 1}) == {0: 3, 1: 1}
