"""The benchmark scripts of bench/ run end to end at tiny sizes and print their JSON lines
(their figures are the closing notes' business; here only that they run and report)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import bench_inproc

ROOT = Path(__file__).resolve().parents[2]


def run(script: str, *args: str, timeout: int = 300) -> list[dict]:
    r = subprocess.run([sys.executable, str(ROOT / "bench" / script), *args],
                       capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stderr[-2000:]
    return [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]


VARIANTS = {"fp32", "bf16_grads", "fp32+bf16_copy", "bf16_grads+bf16_copy"}


def test_adam_bench_worker_reports_every_variant_against_torch_and_the_bound(monkeypatch):
    # the worker in this process; the labels it prints come from the environment its parent
    # gives it (below)
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    monkeypatch.setenv("THP_MEM_ALLOC_ENABLE", "1")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    r = bench_inproc.run("adam.py", "--worker", "--sizes", "4K", "--threads", "1", "--reps",
                         "1", "--no-deepspeed")
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
    ours = {r["variant"]: r for r in rows if r.get("impl") == "cxlkit"}
    assert set(ours) == VARIANTS
    for r in ours.values():
        assert r["params"] == 4000 and {"gbps", "pct_of_bound_paired"} <= set(r)
        assert r["thp"] == "on" and r["omp_wait_policy"] == "PASSIVE"
        assert r["bytes_per_param"] in (26, 28, 30)
        assert set(r["copy_gbps"]) >= {"cxlkit_copy", "torch_copy", "torch_inplace_mul"}
    assert {r["variant"] for r in rows if r.get("impl") == "torch_fused"} == set(ours)


@pytest.mark.parametrize("policy, thp, want", [
    ("passive", "on", {"OMP_WAIT_POLICY": "PASSIVE", "THP_MEM_ALLOC_ENABLE": "1"}),
    ("default", "off", {"OMP_WAIT_POLICY": None, "THP_MEM_ALLOC_ENABLE": None})])
def test_adam_bench_runs_a_worker_per_thread_count_with_its_environment(monkeypatch, policy,
                                                                        thp, want):
    mod = bench_inproc.load("adam.py")
    seen = []

    def worker(cmd, env, timeout):
        seen.append((cmd, env))
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(mod.subprocess, "run", worker)
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.delenv("THP_MEM_ALLOC_ENABLE", raising=False)
    argv = ["--sizes", "1K", "--threads", "1,2", "--omp-wait-policy", policy, "--thp", thp]
    monkeypatch.setattr(sys, "argv", [mod.__file__, *argv])
    mod.main()
    assert [cmd for cmd, _ in seen] == [[sys.executable, mod.__file__, "--worker", *argv]] * 2
    assert [env["OMP_NUM_THREADS"] for _, env in seen] == ["1", "2"]
    for _, env in seen:
        assert {k: env.get(k) for k in want} == want


@pytest.mark.bench
@pytest.mark.slow
def test_adam_bench_reports_every_variant_against_torch_and_the_bound():
    rows = run("adam.py", "--sizes", "200K", "--threads", "1", "--reps", "2",
               "--no-deepspeed")
    ours = {r["variant"]: r for r in rows if r.get("impl") == "cxlkit"}
    assert set(ours) == VARIANTS
    for r in ours.values():
        assert r["params"] == 200_000 and r["gbps"] > 0 and r["pct_of_bound_paired"] > 0
        assert r["thp"] == "on" and r["omp_wait_policy"] == "PASSIVE"


def test_adam_summary_takes_medians_over_saved_runs(tmp_path):
    def row(impl: str, pct: float, speedup: float) -> str:
        return json.dumps({"bench": "adam", "params": 10_000_000, "threads": 1,
                           "variant": "fp32", "impl": impl, "gbps": 40.0,
                           "pct_of_bound_paired": pct, "cxlkit_speedup_paired": speedup})
    files = []
    for i, (pct, sp) in enumerate([(90.0, 1.1), (100.0, 1.3), (95.0, 0.9)]):
        f = tmp_path / f"run{i}.jsonl"
        f.write_text(row("cxlkit", pct, 1.0) + "\n" + row("deepspeed", 50.0, sp) + "\n")
        files.append(str(f))
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "adam.py"), "--summary", *files],
                       capture_output=True, text=True, timeout=60, check=True)
    line = [x for x in r.stdout.splitlines() if x.startswith("| 10M")]
    assert line == ["| 10M | 1 | fp32 | 40.0 | 95.0 | 1.10 | - | 90, 100, 95 | "
                    "1.10, 1.30, 0.90 |"]


def test_pool_bench_runs_over_the_public_pool_face():
    rows = run("pool.py", "--ops", "20", "--repeat", "1", "--copy-mib", "1",
               "--lookup-max", "1000", "--fill-mib", "16")
    lookups = [r for r in rows if r["bench"] == "pool.lookup"]
    assert lookups and lookups[0]["native_hit_median_ns"] > 0
    assert any(r["bench"] != "pool.lookup" for r in rows)


def kv_rows(pool_path: str, blocks: int, tiny: int) -> list[dict]:
    return run("kv.py", "--blocks", str(blocks), "--reps", "1", "--tiny", str(tiny), "--ttft",
               "", "--no-mooncake", "--pool", pool_path)


def test_kv_bench_reports_fractions_of_memcpy(pool_path):
    rows = kv_rows(pool_path, 1, 2)
    puts = [r for r in rows if r.get("op") == "put"]
    assert puts and all("fraction_of_memcpy" in r for r in puts if r.get("layout"))
    assert any(r.get("op") == "memcpy_into_pool_pages" for r in rows)


@pytest.mark.bench
@pytest.mark.slow
def test_kv_bench_fractions_of_memcpy_are_positive(pool_path):
    rows = kv_rows(pool_path, 2, 8)
    puts = [r for r in rows if r.get("op") == "put"]
    assert puts and all(r["fraction_of_memcpy"] > 0 for r in puts if "fraction_of_memcpy" in r)


def test_the_pool_lookup_benchmark_times_names_in_C(tmp_path):
    import cxlkit
    from cxlkit import _native

    path = f"/dev/shm/cxlkit-test-lookup-{tmp_path.name}"
    try:
        with cxlkit.Pool(path, size=8 << 20, host_id=0) as pool:
            pool.create("a", 64, publish=True).close()
            assert _native.bench_pool_lookup(pool, ["a", "a", "missing"]) > 0
            assert _native.bench_pool_lookup(pool, []) == 0.0
        with pytest.raises(ValueError, match="closed"):
            _native.bench_pool_lookup(pool, ["a"])
    finally:
        cxlkit.pool.remove(path)


def _gone(pid: int, within: float = 10.0) -> bool:
    """The process ended (no such pid, or a zombie waiting for init to reap it)."""
    import time

    end = time.monotonic() + within
    while time.monotonic() < end:
        try:
            if Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] in "ZX":
                return True
        except (FileNotFoundError, ProcessLookupError):
            return True
        time.sleep(0.05)
    return False


def test_the_vllm_bench_runner_kills_what_an_engine_leaves_behind():
    """bench/kv_vllm.py's run_session (also the engine tests' runner): on a timeout, and after a
    normal exit, the processes the child started go too (vLLM's EngineCore and Worker outlived
    a timed-out subprocess.run before and kept two cores busy)."""
    sys.path.insert(0, str(ROOT / "bench"))
    from kv_vllm import run_session

    with pytest.raises(subprocess.TimeoutExpired) as e:
        run_session(["bash", "-c", "sleep 300 & echo $!; wait"], 1.0)
    assert _gone(int(e.value.stdout.split()[0]))
    r = run_session(["bash", "-c", "sleep 300 >/dev/null 2>&1 & echo $!"], 30.0)
    assert r.returncode == 0 and _gone(int(r.stdout.split()[0]))
    r = run_session([sys.executable, "-c", "import sys; print('out'); sys.exit(3)"], 30.0)
    assert (r.returncode, r.stdout) == (3, "out\n")


def test_lammps_bench_adds_pool_variants_with_their_environment_and_refuses_a_bad_spec(
        tmp_path):
    lam = bench_inproc.load("lammps_netns.py")
    assert lam.pool_env("yield:CXLKIT_MSG_SLEEP_US=0,CXLKIT_MSG_SPIN_US=50") == (
        "yield", {"CXLKIT_MSG_SLEEP_US": "0", "CXLKIT_MSG_SPIN_US": "50"})
    vs = lam.variants([4], [], "/dev/shm/p", extra=[("yield", {"CXLKIT_MSG_SLEEP_US": "0"})])
    by = {v[0]: v for v in vs}
    assert set(by) == {"tcp4", "pool4", "pool4+yield", "shm4"}
    assert by["pool4+yield"][3]["CXLKIT_MSG_SLEEP_US"] == "0"
    assert by["pool4+yield"][3]["CXLKIT_MPI_POOL"] == "/dev/shm/p"  # the shim's own kept
    assert "CXLKIT_MSG_SLEEP_US" not in by["pool4"][3]
    assert by["pool4+yield"][4] == "tcp4"  # its energies checked against TCP's
    for bad in ("yield", "yield:", "yield:K", "no-alnum:K=V", ":K=V", "y:=V"):
        with pytest.raises(SystemExit, match="--pool-env"):
            lam.pool_env(bad)
    r = bench_inproc.run("lammps_netns.py", "--across", "2", "--one", "", "--rounds", "0",
                         "--pool-env", "a:K=V", "--pool-env", "a:K=W", "--out", str(tmp_path))
    assert r.returncode == 1 and "a NAME given twice" in r.stderr
