"""bench/subgroups.py runs end to end at a tiny size and prints every row (its figures are
docs/subgroups.md's business; here only that it runs and reports)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PATH_ROWS = ["1 path: disk", "1 path: tmpfs", "1 path: tmpfs, async I/O engine",
             "2 paths: disk+tmpfs", "2 paths: disk+tmpfs, async I/O engine on tmpfs",
             "3 paths: disk+tmpfs+mem", "3 paths: disk+tmpfs+mem, Eq. 1 split", "1 path: pool",
             "2 paths: disk+pool", "3 paths: disk+tmpfs+pool", "4 paths: disk+tmpfs+mem+pool",
             # run 7: the store of run 6 (cache route) beside the zero-copy route
             "1 path: tmpfs, cache route", "1 path: tmpfs, in place, sums separate",
             "2 paths: disk+tmpfs, cache route", "3 paths: disk+tmpfs+mem, cache route",
             "1 path: mem", "1 path: mem, cache route", "1 path: pool, cache route",
             "2 paths: disk+pool, cache route", "3 paths: disk+tmpfs+pool, cache route"]
NP = len(PATH_ROWS)


def paths_and_ablation(tmp_path, runs: int) -> list[dict]:
    """bench/subgroups.py's paths and ablation rows at 2M params, two steps, `runs` runs;
    their shape checked (every row, every round's path figures, the cache hits and locks)."""
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "subgroups.py"), "--params", "2M",
                        "--subgroup", "250K", "--steps", "2", "--runs", str(runs), "--disk",
                        str(tmp_path), "--only", "paths,ablation"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
    figs = [x["path_figure"] for x in rows if "path_figure" in x]
    # one per round: disk, tmpfs mapped, tmpfs through the engine, memory tier, pool
    assert [f["kind"] for f in figs] == ["dir", "dir", "dir", "memory", "pool"] * runs
    assert [f.get("io") for f in figs[:3]] == ["io_uring", "mmap", "io_uring"]
    assert all("fio_together_read_GBps" in f for f in figs[:2])
    names = [x["row"] for x in rows if "row" in x]
    assert names[:NP] == PATH_ROWS
    assert names[NP].startswith("baseline") and names[-1].startswith("+ multi-path")
    assert sum("2 processes" in n for n in names) == 3
    for x in rows:
        if "row" in x:
            # `runs` runs of one process, or of two processes (a result each)
            assert x["runs"] == (2 * runs if "2 processes" in x["row"] else runs)
            # the spread's order holds for any timing: min, median, max of the same runs
            assert x["update_s"]["min"] <= x["update_s"]["median"] <= x["update_s"]["max"]
    alt = next(x for x in rows if x.get("row") == "+ delayed upcast")
    assert [h[1:] for h in alt["cache_hits"]] == [[4]] * runs  # K of M skip I/O
    base = next(x for x in rows if x.get("row", "").startswith("baseline"))
    assert [h[1:] for h in base["cache_hits"]] == [[0]] * runs  # ascending: none
    locked = next(x for x in rows if x.get("row") == "+ per-path locks, 2 processes")
    assert [p["lock"] for p in locked["per_path"]] == ["exclusive"]
    pool = next(x for x in rows if x.get("row") == "1 path: pool")
    assert pool["per_path"][0]["path"].startswith("pool:")
    # the CPU-aware split may leave a path out; Eq. 1 gives every path a subgroup
    four = next(x for x in rows if x.get("row") == "4 paths: disk+tmpfs+mem+pool")
    assert sum(p["subgroups"] for p in four["per_path"]) == four["subgroups"]
    eq1 = next(x for x in rows if x.get("row") == "3 paths: disk+tmpfs+mem, Eq. 1 split")
    assert all(p["subgroups"] > 0 for p in eq1["per_path"])
    assert not list(tmp_path.iterdir())
    return rows


@pytest.mark.slow
def test_subgroups_bench_prints_paths_figures_and_every_ablation_row(tmp_path):
    paths_and_ablation(tmp_path, runs=1)


@pytest.mark.bench
@pytest.mark.slow
def test_subgroups_bench_figures_are_positive_rates(tmp_path):
    rows = paths_and_ablation(tmp_path, runs=2)
    figs = [x["path_figure"] for x in rows if "path_figure" in x]
    assert all(f["read_GBps"] > 0 and f["write_GBps"] > 0 and f["cpu_s_per_GB"] >= 0
               for f in figs)
    for x in rows:
        if "row" in x:
            assert x["Mparams_per_s"] > 0 and x["io_GBps"]["median"] > 0
            assert x["paths_sum_GBps"] > 0 and x["io_of_paths"] > 0
            assert x["paths_together_GBps"] > 0 and x["io_of_together"] > 0
    pool = next(x for x in rows if x.get("row") == "1 path: pool")
    assert pool["io_GBps"]["median"] > 0


@pytest.mark.slow
def test_subgroups_bench_deepspeed_row_reports_a_failed_engine_without_dying(tmp_path):
    # a python without DeepSpeed: the DeepSpeed row is left out with the reason on stderr
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "subgroups.py"), "--params", "1M",
                        "--subgroup", "250K", "--steps", "2", "--runs", "1", "--disk",
                        str(tmp_path), "--only", "paths,deepspeed",
                        "--deepspeed-python", sys.executable],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "DeepSpeed row 'DeepSpeed ZeRO-3, nvme_path = disk' failed" in r.stderr
    rows = [json.loads(x) for x in r.stdout.splitlines() if x.startswith('{"row"')]
    assert [x["row"] for x in rows] == PATH_ROWS


def test_decompose_splits_effective_over_sum_into_contention_times_occupancy():
    import importlib.util
    spec = importlib.util.spec_from_file_location("sgbench", ROOT / "bench" / "subgroups.py")
    b = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(b)
    # two paths: A moved 4 GB in 2 s busy, B 1 GB in 1 s busy, union 2.5 s (B ran 0.5 s
    # while A was idle), update 3 s; unused path C is left out
    m = dict(io_bytes=5e9, io_busy_s=2.5, update_s=3.0, paths=[
        dict(path="A", busy_s=2.0, busy_GBps=2.0), dict(path="B", busy_s=1.0, busy_GBps=1.0),
        dict(path="C", busy_s=0.0, busy_GBps=None)])
    d = b.decompose(m, ["A", "B"])
    assert d["in_step_GBps"] == pytest.approx(3.0)
    assert d["occupancy"] == pytest.approx(2.0 / 3.0)        # 2 GB/s effective of 3
    assert d["overlap"] == pytest.approx(3.0 / 2.5)
    assert d["busy_of_update"] == pytest.approx([2 / 3, 1 / 3])
    own = 4.0  # the paths' own figures alone: contention 3/4
    assert (d["in_step_GBps"] / own) * d["occupancy"] == pytest.approx(2.0 / own)
    assert b.decompose(m, ["A", "C"]) is None  # a used path that moved nothing
    assert b.decompose(dict(m, io_busy_s=0.0), ["A"]) is None
    figs = {"A": [dict(fio_together_read_GBps=1.0, fio_together_write_GBps=2.0)] * 3,
            "B": [dict(fio_together_read_GBps=0.5, fio_together_write_GBps=0.4)]}
    assert b.sum_fio_together(["A", "B"], figs) == pytest.approx(1.4)
    assert b.sum_fio_together(["A", "mem"], figs) is None


def test_cpu_ceiling_is_the_knapsack_of_the_paths_alone_within_the_cpu_budget():
    import importlib.util
    spec = importlib.util.spec_from_file_location("sgbench2", ROOT / "bench" / "subgroups.py")
    b = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(b)
    plan = [dict(path="disk", read=1e9, write=2e9, cpu_per_byte=0.05e-9, cpu_rate=0.5),
            dict(path="shm", read=4e9, write=5e9, cpu_per_byte=0.2e-9, cpu_rate=0.5),
            dict(path="unused", read=9e9, write=9e9, cpu_per_byte=0.1e-9, cpu_rate=0.5)]
    # disk first (cheapest): 1 GB/s for 0.05 CPU s/s; 0.45 left carries 2.25 GB/s of shm
    assert b.cpu_ceiling(plan, ["disk", "shm"]) == pytest.approx(3.25)
    free = [dict(q, cpu_rate=None) for q in plan]  # not CPU-bound: the sum alone
    assert b.cpu_ceiling(free, ["disk", "shm"]) == pytest.approx(5.0)
    assert b.cpu_ceiling([dict(plan[0], cpu_per_byte=None)], ["disk"]) is None


def test_subgroups_cpu_bench_reports_cpu_by_thread_group_and_cores(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "subgroups_cpu.py"), "--params",
                        "1M", "--subgroup", "250K", "--steps", "3", "--cache", "3",
                        "--disk", str(tmp_path), "--sets", "disk+mem"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
    assert [x["route"] for x in rows] == ["folded", "in-place"]  # run 6's store, the store
    # the cache route never updates in place (whether the store's route does here depends
    # on the split and its re-estimation on this tiny model: tests/train/test_subgroups_inplace.py)
    assert rows[0]["in_place"] == 0 and rows[1]["in_place"] >= 0
    assert rows[1]["cpu_s_per_state_GB"] >= 0 and rows[1]["Mparams_per_s"] > 0  # 10 ms ticks
    row = rows[0]
    assert row["set"] == "disk+mem" and row["steps"] == 2 and sum(row["subgroups"]) == 4
    assert "store thread (kernel, waits)" in row["cpu_s_per_step"]
    assert all(v >= 0 for v in row["cpu_s_per_step"].values())
    assert row["update_s"] > 0 and row["machine_cores"] > 0 and row["process_cores"] >= 0
    assert not list(tmp_path.iterdir())
    bad = subprocess.run([sys.executable, str(ROOT / "bench" / "subgroups_cpu.py"), "--sets",
                          "nvme", "--disk", str(tmp_path)], capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode == 2 and "paths are disk, tmpfs, mem" in bad.stderr


def test_subgroups_cpu_bench_compares_the_folded_and_separate_routes_on_a_pool(tmp_path,
                                                                             shm_dir):
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "subgroups_cpu.py"), "--params",
                        "1M", "--subgroup", "250K", "--steps", "3", "--cache", "3",
                        "--disk", str(tmp_path), "--tmpfs", shm_dir, "--sets", "pool",
                        "--routes", "folded,separate"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
    assert [(x["set"], x["route"]) for x in rows] == [("pool", "folded"), ("pool", "separate")]
    for x in rows:
        assert x["cpu_s_per_GB"] >= 0 and x["io_cpu_s_per_GB"] >= 0
    assert not list(tmp_path.iterdir()) and not os.listdir(shm_dir)


def test_subgroups_passes_bench_prints_every_pass_and_route(tmp_path, shm_dir):
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "subgroups_passes.py"), "--size",
                        "256K", "--reps", "1", "--rounds", "1", "--paths",
                        f"aio:{tmp_path},map:{shm_dir},mem,pool"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    ways = [json.loads(x)["way"] for x in r.stdout.splitlines() if '"way"' in x]
    assert "copy with the sum folded in (aio.copy_sum)" in ways
    for kind in ("dir", "memory", "pool"):
        for route in ("folded", "separate", "no sum"):
            assert any(w.startswith(kind) and w.endswith(route) for w in ways), (kind, route)
    assert len([w for w in ways if w.startswith("dir ")]) == 6  # the disk and the tmpfs
    assert not list(tmp_path.iterdir()) and not os.listdir(shm_dir)


def test_subgroups_bench_stopped_by_sigterm_removes_its_scratch_directories(tmp_path):
    # the docs run these benches under `timeout`; killed by SIGTERM's default action a run
    # left its subgroup files (1-2 GB each) in /dev/shm
    import signal
    import time

    disk, shm = tmp_path / "disk", tmp_path / "shm"
    disk.mkdir()
    shm.mkdir()
    p = subprocess.Popen([sys.executable, str(ROOT / "bench" / "subgroups.py"), "--params",
                          "4M", "--subgroup", "250K", "--steps", "50", "--runs", "50",
                          "--disk", str(disk), "--tmpfs", str(shm), "--pool", "off",
                          "--only", "paths"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, PYTHONFAULTHANDLER="1"))
    try:
        deadline = time.monotonic() + 120
        while not p.stderr.readline().startswith("round 0:"):  # a row is running
            assert p.poll() is None and time.monotonic() < deadline, p.stderr.read()[-2000:]
        assert list(disk.iterdir()) and list(shm.iterdir())  # its scratch directories
        p.send_signal(signal.SIGTERM)
        try:
            rc = p.wait(60)
        except subprocess.TimeoutExpired:  # where it hangs: faulthandler dumps every thread
            p.send_signal(signal.SIGABRT)
            rc = p.wait(30)
            pytest.fail(f"no exit 60 s after SIGTERM; rc {rc}; {p.stderr.read()[-6000:]}")
        assert rc == 128 + signal.SIGTERM
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert not list(disk.iterdir()) and not list(shm.iterdir())


def test_subgroups_tmpfs_bench_prints_every_way_with_cpu_per_gb(shm_dir):
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "subgroups_tmpfs.py"), "--dir",
                        str(shm_dir), "--size", "4M", "--reps", "2", "--rounds", "1"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
    ways = [x for x in rows if "way" in x]
    assert any(w["way"].startswith("memcpy") for w in ways) and len(ways) >= 6
    assert all(w["GBps"] > 0 and w["cpu_s_per_GB"] >= 0 for w in ways)
    assert not os.listdir(shm_dir)  # its scratch directory is gone


def test_a_sigterm_whose_exit_a_finaliser_dropped_still_stops_the_bench_loop(tmp_path):
    # SIGTERM's handler runs wherever the main thread is; inside a __del__ Python prints the
    # SystemExit it raises and drops it, and the bench ran on (a minute past SIGTERM in CI)
    prog = f"""
import os, signal, sys
sys.path.insert(0, {str(ROOT / "bench")!r})
import subgroups as B
B.exit_on_sigterm()

class Dropped:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGTERM)  # the handler runs here, inside __del__

Dropped()
print("ran on", flush=True)
B.stop_if_asked()
print("not stopped", flush=True)
"""
    r = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, timeout=60)
    assert r.stdout.splitlines() == ["ran on"], r.stdout + r.stderr[-2000:]
    assert r.returncode == 128 + 15 and "SystemExit" in r.stderr  # the dropped one, printed
