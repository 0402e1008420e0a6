"""libcxlkit_preload.so under real programs on this machine (one node is enough: a stripe over
node 0 still goes through every hook, mbind and the log): an unmodified C program doing mmap,
malloc, calloc, memalign, realloc and fork; python with numpy; exec; bad configuration; a
failing mbind. Two-node residency: tests/vm/test_vm_preload.py."""
from __future__ import annotations

import json
import shutil
import subprocess

import pytest

import preload_prog as PP

MiB = 1 << 20


@pytest.fixture(scope="module")
def prog(tmp_path_factory):
    return str(PP.alloc_prog(tmp_path_factory.mktemp("prog")))


def _run(prog, args, env, readies=1):
    s = PP.start([prog, *args], env, readies)
    rc, err = s.finish()
    assert rc == 0, err
    return s, err


def test_each_large_block_is_placed_whole_and_small_ones_are_not_logged(prog, tmp_path):
    log = tmp_path / "log"
    s, _ = _run(prog, ["mmap:8M", "malloc:3M", "calloc:5M", "memalign:4M", "malloc:100K",
                       "mmap:1M"], PP.preload_env("0:1", log))
    text = log.read_text()
    pid = s.pids["parent"]
    lines = PP.log_lines(text)
    assert lines[0][:2] == (pid, "on") and "stripe 0:1 chunk 2097152 min 2097152" in lines[0][2]
    placed = PP.placements(text)
    assert [p["what"] for p in placed] == ["mmap", "malloc", "calloc", "memalign"]
    for p, b in zip(placed, s.blocks):
        assert b.name == p["what"]
        # the whole mapping malloc made: it holds the block, header page included
        assert p["start"] <= b.address and b.address + b.nbytes <= p["start"] + p["nbytes"]
        assert p["start"] % 4096 == 0 and p["nbytes"] % 4096 == 0
        assert p["per_node"] == {0: p["nbytes"]} and p["runs"] == 1
    assert placed[0]["start"] == s.blocks[0].address
    assert placed[0]["nbytes"] == 8 * MiB
    assert len(placed) == 4  # the 100 KiB block and the 1 MiB mapping are below 2 MiB


def test_realloc_growth_from_the_heap_and_of_a_mapped_block_is_placed(prog, tmp_path):
    log = tmp_path / "log"
    s, _ = _run(prog, ["malloc:64K", "realloc:3M", "realloc:9M"], PP.preload_env("0:1", log))
    text = log.read_text()
    verbs = [(v, r.split()[0]) for _, v, r in PP.log_lines(text)][1:]
    # heap block past the minimum: a placed malloc, then the copy; then mremap growth placed
    assert verbs[0] == ("place", "malloc"), text
    assert verbs[1][0] == "realloc" and "copied into a placed one" in text
    assert verbs[2] == ("place", "realloc"), text
    grown = PP.placements(text)[-1]
    (b,) = s.blocks
    assert b.name == "realloc" and b.nbytes == 9 * MiB
    assert grown["start"] <= b.address < grown["start"] + 4096
    assert grown["nbytes"] >= 9 * MiB


def test_reallocarray_growth_is_placed_too(prog, tmp_path):
    # glibc's reallocarray calls realloc through the PLT (malloc is interposable inside libc)
    log = tmp_path / "log"
    s, _ = _run(prog, ["malloc:64K", "reallocarray:4M", "reallocarray:8M"],
                PP.preload_env("0:1", log))
    text = log.read_text()
    assert "heap block copied into a placed one" in text, text
    grown = PP.placements(text)[-1]
    (b,) = s.blocks
    assert grown["what"] == "realloc" and grown["start"] <= b.address < grown["start"] + 4096


def test_a_forked_child_keeps_the_policy_and_places_its_own_blocks(prog, tmp_path):
    log = tmp_path / "log"
    s = PP.start([prog, "mmap:4M", "fork"], PP.preload_env("0:1", log), readies=2)
    try:
        child = s.pids["child"]
        numa_maps = open(f"/proc/{child}/numa_maps").read()
        mine = [b for b in s.blocks if b.who == "child" and b.name == "mmap"][0]
        line = next(x for x in numa_maps.splitlines() if int(x.split()[0], 16) == mine.address)
        assert line.split()[1] == "bind:0", line  # inherited from the parent's mbind
    finally:
        rc, err = s.finish()
    assert rc == 0, err
    placed = PP.placements(log.read_text())
    assert {p["pid"] for p in placed} == {s.pids["parent"], child}
    assert [p["what"] for p in placed if p["pid"] == child] == ["malloc"]


def test_exec_reads_the_environment_again(prog, tmp_path):
    log = tmp_path / "log"
    env = PP.preload_env("0:1", log)
    s = PP.start(["/bin/sh", "-c", f"CXLKIT_MIN_SIZE=8M exec {prog} mmap:4M mmap:8M"], env)
    rc, err = s.finish()
    assert rc == 0, err
    lines = PP.log_lines(log.read_text())
    ons = [(pid, r) for pid, v, r in lines if v == "on"]
    assert len(ons) == 2 and ons[0][0] == ons[1][0] == s.pids["parent"]
    assert "min 2097152" in ons[0][1] and "min 8388608" in ons[1][1]
    assert [(p["what"], p["nbytes"]) for p in PP.placements(log.read_text())] == [
        ("mmap", 8 * MiB)]


@pytest.mark.parametrize("extra, message", [
    ({"CXLKIT_STRIPE": "0:3;1:1"}, "CXLKIT_STRIPE=0:3;1:1: expected node:weight"),
    ({"CXLKIT_STRIPE": "0:0"}, "weight 0 of node 0 out of range 1..255"),
    ({"CXLKIT_STRIPE": "0:1,0:2"}, "node 0 named twice"),
    ({"CXLKIT_STRIPE": "0:1,1000:1"}, "node 1000 has no memory this process may use"),
    ({"CXLKIT_STRIPE": "2000:1"}, "node 2000 out of range 0..1023"),
    ({"CXLKIT_STRIPE": ""}, "CXLKIT_STRIPE is not set"),
    ({"CXLKIT_STRIPE": "0:1", "CXLKIT_STRIPE_CHUNK": "3000"}, "CXLKIT_STRIPE_CHUNK=3000"),
    ({"CXLKIT_STRIPE": "0:1", "CXLKIT_MIN_SIZE": "2Q"}, "CXLKIT_MIN_SIZE=2Q"),
    ({"CXLKIT_STRIPE": "0:1", "CXLKIT_PRELOAD_FAULT": "open:1"}, "CXLKIT_PRELOAD_FAULT"),
])
def test_bad_configuration_says_so_once_and_the_program_runs_unplaced(prog, tmp_path, extra,
                                                                      message):
    log = tmp_path / "log"
    env = PP.preload_env(None, log, **extra)
    s, err = _run(prog, ["mmap:4M", "malloc:3M", "realloc:5M"], env)
    lines = [x for x in err.splitlines() if x.startswith("cxlkit-preload")]
    assert len(lines) == 1 and message in lines[0] and lines[0].endswith("placement off"), err
    assert [b.name for b in s.blocks] == ["mmap", "realloc"]
    assert not PP.placements(log.read_text())


def test_without_any_configuration_the_library_stays_out_of_the_way(prog):
    env = PP.preload_env(None)
    s, err = _run(prog, ["mmap:4M", "malloc:3M"], env)
    assert "CXLKIT_STRIPE is not set" in err and len(s.blocks) == 2


def test_a_failing_mbind_is_logged_and_the_program_goes_on(prog, tmp_path):
    log = tmp_path / "log"
    env = PP.preload_env("0:1", log, CXLKIT_PRELOAD_FAULT="mbind:2:12")
    s, _ = _run(prog, ["mmap:4M", "mmap:4M", "mmap:4M"], env)
    text = log.read_text()
    errors = [r for _, v, r in PP.log_lines(text) if v == "error"]
    assert len(errors) == 1 and "mbind: Cannot allocate memory" in errors[0], text
    assert len(PP.placements(text)) == 2 and len(s.blocks) == 3


def test_log_to_stderr_and_an_unwritable_log_falls_back_to_stderr(prog, tmp_path):
    _, err = _run(prog, ["mmap:4M"], PP.preload_env("0:1", "stderr"))
    assert len(PP.placements(err)) == 1
    _, err = _run(prog, ["mmap:4M"], PP.preload_env("0:1", tmp_path / "no" / "dir" / "log"))
    assert "No such file or directory; logging to stderr" in err
    assert len(PP.placements(err)) == 1


# python with numpy, unmodified: arrays large enough come from malloc/calloc's own mappings
_NUMPY = """
import os, sys
import numpy as np
a = np.ones(3 << 20, dtype=np.uint8)         # malloc
b = np.zeros(5 << 20, dtype=np.uint8); b += 1  # calloc
a.resize(9 << 20, refcheck=False)            # realloc growth
print("a", hex(a.ctypes.data), a.nbytes, flush=True)
print("b", hex(b.ctypes.data), b.nbytes, flush=True)
pid = os.fork()
if pid == 0:
    c = np.ones(4 << 20, dtype=np.uint8)
    print("c", hex(c.ctypes.data), c.nbytes, flush=True)
    os._exit(0)
os.waitpid(pid, 0)
"""


def test_python_with_numpy_has_its_large_arrays_placed(tmp_path):
    log = tmp_path / "log"
    r = subprocess.run([PP.python(), "-c", _NUMPY], env=PP.preload_env("0:1", log),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    arrays = {w[0]: (int(w[1], 16), int(w[2])) for w in map(str.split, r.stdout.splitlines())}
    placed = PP.placements(log.read_text())
    for name, (addr, n) in arrays.items():
        assert any(p["start"] <= addr and addr + n <= p["start"] + p["nbytes"]
                   for p in placed), (name, placed)
    whats = {p["what"] for p in placed}
    assert {"malloc", "calloc", "realloc"} <= whats, whats
    assert len({p["pid"] for p in placed}) == 2  # the forked child placed its own array


BENCH_SMALL = ["--iters", "20000", "--large-every", "500", "--large-iters", "30",
               "--numpy-steps", "10", "--kv-ops", "20000", "--py-steps", "5"]


def _bench(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    bench = PP.ROOT / "bench" / "preload_overhead.py"
    return subprocess.run([PP.python(), str(bench), *args], capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.slow
def test_overhead_bench_runs_and_reports_medians_for_every_mix():
    r = _bench("--runs", "2", "--insns", "off", *BENCH_SMALL)
    assert r.returncode == 0, r.stderr
    rows = [json.loads(x) for x in r.stdout.splitlines()]
    summaries = {x["mix"]: x for x in rows if x.get("summary")}
    assert set(summaries) == {"small", "with_large", "large", "midsize", "numpy", "kvstore",
                              "python"}
    for mix, s in summaries.items():
        # glibc with the library's malloc settings runs for every mix (the environment's
        # share apart from the code's); the library without its cache for the large ones
        variants = ["base", "base_fixed_threshold", "preload"] + (
            [] if mix in ("small", "kvstore", "python", "midsize") else ["preload_nocache"])
        assert {k[len("median_per_s_"):] for k in s if k.startswith("median_per_s_")} == \
            set(variants)
        for v in variants:
            assert s[f"median_per_s_{v}"] > 0 and len(s[f"spread_{v}"]) == 2
            # page faults and CPU seconds per variant, and the loop's rate by CPU time
            assert s[f"median_minflt_{v}"] > 0 and s[f"median_cpu_rate_{v}"] > 0
            assert s[f"median_utime_s_{v}"] + s[f"median_stime_s_{v}"] > 0
            if v != "preload":
                r = s[f"paired_ratio_vs_{v}"]
                assert 0 < r["min"] <= r["ci95"][0] <= r["median"] <= r["ci95"][1] <= r["max"]
                assert s[f"paired_ratio_cpu_vs_{v}"]["min"] > 0
        assert s["paired_ratio_base_fixed_threshold_vs_base"]["min"] > 0
        assert s["runs"] == 2 and "overhead_pct" in s and s["load"] >= 0
        assert "insns_source" not in s
    runs = [x for x in rows if not x.get("summary")]
    assert len(runs) == 14
    assert all(x["minflt_base"] > 0 and x["minflt_preload"] > 0 for x in runs)


def test_overhead_bench_repeat_keeps_each_variants_fastest_try_and_aa_pairs_glibc_with_itself():
    r = _bench("--runs", "2", "--repeat", "3", "--aa", "--mix", "small", "--insns", "off",
               *BENCH_SMALL)
    assert r.returncode == 0, r.stderr
    rows = [json.loads(x) for x in r.stdout.splitlines()]
    (s,) = [x for x in rows if x.get("summary")]
    assert s["repeat"] == 3 and s["median_per_s_base_again"] > 0
    aa = s["paired_ratio_base_again_vs_base"]
    assert 0 < aa["min"] <= aa["median"] <= aa["max"]
    for x in (x for x in rows if not x.get("summary")):
        for v in ("base", "base_fixed_threshold", "preload", "base_again"):
            assert len(x[f"tries_per_s_{v}"]) == 3
            assert x[f"per_s_{v}"] == max(x[f"tries_per_s_{v}"])
        # the ratio printed per run is of the kept (fastest) tries
        assert x["ratio"] == pytest.approx(x["per_s_preload"] / x["per_s_base"])
        assert {"per_s_base", "per_s_base_fixed_threshold", "per_s_preload",
                "per_s_base_again"} <= set(x)


def test_overhead_bench_refuses_a_repeat_below_one():
    r = _bench("--runs", "1", "--repeat", "0", "--mix", "small", timeout=60)
    assert r.returncode == 2 and "--repeat 0: expected at least 1" in r.stderr


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="callgrind counts instructions "
                    "where the machine has no hardware counter; valgrind is not installed")
def test_overhead_bench_counts_instructions_per_operation_of_both_variants():
    r = _bench("--runs", "0", "--mix", "small", "--mix", "kvstore", "--insns", "callgrind",
               "--insn-scale", "0.5", *BENCH_SMALL)
    assert r.returncode == 0, r.stderr
    rows = [json.loads(x) for x in r.stdout.splitlines()]
    assert [x["mix"] for x in rows] == ["small", "kvstore"]
    for s in rows:
        assert s["insns_source"] == "callgrind"
        assert s["insns_per_op_base"] > 50 and s["insns_per_op_preload"] > 50
        assert s["insn_ratio_preload_vs_base"] == pytest.approx(
            s["insns_per_op_preload"] / s["insns_per_op_base"], rel=1e-3)
        # glibc with the library's malloc settings, counted beside them
        assert s["insns_per_op_base_fixed_threshold"] > 50
        assert s["insn_ratio_base_fixed_threshold_vs_base"] == pytest.approx(
            s["insns_per_op_base_fixed_threshold"] / s["insns_per_op_base"], rel=1e-3)


def test_overhead_bench_refuses_a_stripe_node_without_memory():
    from cxlkit import topology

    missing = max(topology.memory_nodes()) + 1
    r = _bench("--runs", "1", "--mix", "small", "--stripe", f"0:3,{missing}:1", timeout=60)
    assert r.returncode == 2 and f"node {missing} has no memory on this machine" in r.stderr
    assert r.stdout == ""


def _bench_environments(stripe: str = "0:1") -> dict[str, dict]:
    """The variants' environments as bench/preload_overhead.py builds them."""
    import argparse
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "preload_overhead", PP.ROOT / "bench" / "preload_overhead.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    _, variants = mod.environments(argparse.Namespace(stripe=stripe, cache=None,
                                                      cache_count=None))
    return dict(variants)


def _heap(prog: str, kib: int, env: dict) -> str:
    r = subprocess.run([prog, str(kib)], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_bench_glibc_with_the_librarys_settings_serves_and_trims_blocks_as_the_library(tmp_path):
    # base_fixed_threshold is the share of the library's malloc settings apart from its code:
    # glibc in that environment must keep a freed 1 MiB heap block at the top of its heap as
    # under the library (trim threshold 4 MiB) and map a 4 MiB one. With the mmap threshold
    # alone (what the bench set before) the free trimmed the heap: another allocator.
    prog = str(PP.build("heap_prog", tmp_path))
    env = _bench_environments()
    for kib, want in ((1024, "mmapped 0 trimmed 0"), (4096, "mmapped 1 trimmed 0")):
        assert _heap(prog, kib, env["preload"]) == want
        assert _heap(prog, kib, env["base_fixed_threshold"]) == want
    # glibc's defaults differ, so the comparison tells settings apart: 1 MiB is mapped
    assert _heap(prog, 1024, env["base"]) == "mmapped 1 trimmed 0"
    only_mmap = dict(env["base"], MALLOC_MMAP_THRESHOLD_="2097152")
    assert _heap(prog, 1024, only_mmap) == "mmapped 0 trimmed 1"


def test_startup_cost_bench_reports_both_variants_of_both_programs():
    script = PP.ROOT / "bench" / "preload" / "startup_cost.py"
    r = subprocess.run([PP.python(), str(script), "--runs", "2"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    rows = [json.loads(x) for x in r.stdout.splitlines()]
    assert [x["program"].split()[-1] for x in rows] == ["pass", "/bin/true"]
    for x in rows:
        for v in ("base", "preload"):
            assert 0 < x[f"min_wall_ms_{v}"] <= x[f"median_wall_ms_{v}"]
            assert x[f"median_cpu_ms_{v}"] >= 0
