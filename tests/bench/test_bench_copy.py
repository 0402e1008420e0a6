"""bench copy: the copy paths per node pair and size, and the GPU matrix — which on a machine
without a GPU says so, and with a recording fake backend assembles one row per host node and
device plus an all-devices row."""
from __future__ import annotations

import json
import os

import pytest

from cxlkit import _native, topology
from cxlkit.bench import copy as BC

KiB, MiB = 1 << 10, 1 << 20
NODE = topology.memory_nodes()[0]
CPUS = sorted(os.sched_getaffinity(0))


def tiny(**over) -> BC.CopySettings:
    base = dict(sizes=(64, 4 * KiB, 1 * MiB), span_bytes=1 * MiB, target_s=0.002, reps=2)
    base.update(over)
    return BC.CopySettings(**base)


def test_run_times_every_method_and_size_for_the_pair():
    seen = []
    doc = BC.run([(NODE, NODE)], config=tiny(), gpu=False,
                 progress=lambda d, t, w: seen.append(w))
    json.dumps(doc)
    assert doc["kind"] == "copy" and doc["parameters"]["cpu"] in CPUS
    (p,) = doc["figures"]["pairs"]
    assert (p["src"], p["dst"]) == (NODE, NODE)
    for m in BC.METHODS:
        pts = p["methods"][m]
        assert [x["bytes"] for x in pts] == [64, 4 * KiB, 1 * MiB]
        for x in pts:
            assert x["ns_per_copy"] > 0 and x["gbps"] == pytest.approx(x["bytes"] / x["ns_per_copy"])
            assert len(x["samples_ns"]) == 2
    assert doc["figures"]["gpu"] is None and seen[-1] == "done"
    rows = BC.summary(doc)
    assert {r["method"] for r in rows} == set(BC.METHODS)


def test_default_pairs_are_every_ordered_pair_of_memory_nodes():
    doc = BC.run(config=tiny(sizes=(64,)), gpu=False)
    nodes = topology.memory_nodes()
    assert [(p["src"], p["dst"]) for p in doc["figures"]["pairs"]] == \
        [(s, d) for s in nodes for d in nodes]


def test_a_node_without_memory_raises_ValueError():
    with pytest.raises(ValueError, match="node 77"):
        BC.run([(NODE, 77)], config=tiny(), gpu=False)


def test_a_cpu_this_process_may_not_use_raises_ValueError():
    bad = next(c for c in range(4096) if c not in CPUS)
    with pytest.raises(ValueError, match=f"cpu {bad}"):
        BC.run([(NODE, NODE)], config=tiny(), cpu=bad, gpu=False)


def test_an_unknown_method_raises_ValueError():
    with pytest.raises(ValueError, match="method 'dma'"):
        BC.time_copy(bytearray(4096), bytes(4096), 64, "dma", cpu=-1, target_s=0.001, reps=1)


@pytest.mark.parametrize("over, match", [(dict(sizes=()), "sizes"),
                                         (dict(sizes=(2 * MiB,)), "sizes"),
                                         (dict(reps=0), "reps")])
def test_bad_copy_settings_raise_ValueError(over, match):
    with pytest.raises(ValueError, match=match):
        tiny(**over)


def test_quick_sizes_run_from_64_bytes_to_64_MiB():
    q = BC.copy_settings(quick=True)
    assert q.sizes[0] == 64 and q.sizes[-1] == 64 * MiB
    assert BC.copy_settings().sizes[0] == 64 and BC.copy_settings().sizes[-1] == 64 * MiB


@pytest.mark.skipif(_native.pin_available(), reason="this machine has a usable CUDA device")
def test_without_a_gpu_the_matrix_says_no_gpu_is_present():
    g = BC.gpu_matrix([NODE])
    assert g == {"available": False, "reason": BC.no_gpu_reason()}
    assert "no GPU present" in g["reason"]


class FakeCuda:
    """Records every copy asked for; each takes nbytes / 10 GB/s per device."""

    def __init__(self, devices):
        self.devs = devices
        self.calls = []

    def devices(self):
        return list(self.devs)

    def copy_seconds(self, host, devs, nbytes, direction):
        self.calls.append((len(host), tuple(devs), nbytes, direction))
        return nbytes / 10e9


def test_gpu_matrix_with_a_backend_has_a_row_per_node_and_device_and_an_all_row():
    fake = FakeCuda([0, 1])
    g = BC.gpu_matrix([NODE], backend=fake, nbytes=1 * MiB, reps=2)
    assert g["available"] and g["devices"] == [0, 1]
    assert [r["device"] for r in g["rows"]] == [0, 1, "all"]
    for r in g["rows"]:
        n = 2 if r["device"] == "all" else 1
        assert r["h2d_gbps"] == pytest.approx(n * 1 * MiB / (1 * MiB / 10e9) / 1e9)
        assert r["pinned"] is bool(_native.pin_available())
    # host buffers are sized for every device at once; both directions, reps each
    assert {c[0] for c in fake.calls} == {2 * MiB}
    assert len(fake.calls) == 3 * 2 * 2


def test_gpu_matrix_with_no_devices_reports_unavailable():
    assert BC.gpu_matrix([NODE], backend=FakeCuda([])) == {
        "available": False, "reason": "the CUDA runtime reports no device"}
