"""bench/adam_e2e.py: in the default suite, tiny runs in this process (a configuration's
child at 2K params and one round, the parent's loop over configurations with the children
stood in for, the summary); one JSON line per configuration with the step times of every
implementation, the paired ratios and the bound; without DeepSpeed in the environment the
line says why its column is missing. Its full runs, children and all, are bench-marked."""
from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

import bench_inproc

BENCH = pathlib.Path(__file__).parents[2] / "bench" / "adam_e2e.py"


def check_line(d: dict, params: int, threads: int, model: str) -> None:
    """A configuration's line: its keys and what they say, not its figures."""
    assert (d["params"], d["threads"], d["model"]) == (params, threads, model)
    assert d["bytes_per_param"] == (30 if model == "bf16" else 28)
    assert {"cxlkit", "torch_fused", "bound", "stream", "bound_mul"} <= set(d["ms"])
    assert set(d["ms_spread"]) == set(d["ms"])
    assert ("cxlkit_pinned" in d["ms"]) == (threads > 1)
    for k in ("vs_torch_fused", "pct_of_bound", "bound_gbs", "pct_of_stream", "cxlkit_gbs"):
        assert isinstance(d[k], float), k
    assert "deepspeed" in d["ms"] or "deepspeed_error" in d


def child_line(*args: str) -> dict:
    r = bench_inproc.run("adam_e2e.py", "--child", "--reps", "1", *args)
    assert r.returncode == 0, r.stderr[-2000:]
    (d,) = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
    return d


@pytest.mark.parametrize("model, threads", [("fp32", "1"), ("bf16", "2")])
def test_adam_e2e_child_prints_its_configurations_line(model, threads, tmp_path):
    d = child_line("--size", "2K", "--threads", threads, "--model", model)
    check_line(d, 2000, int(threads), model)
    assert d["omp_wait_policy"] == "default" and d["reps"] == 1 and d["thp_move"] is True
    path = tmp_path / "run.jsonl"
    path.write_text(json.dumps(d) + "\n")
    table = bench_inproc.run("adam_e2e.py", "--summary", str(path), str(path))
    assert table.returncode == 0, table.stderr
    (row,) = [x for x in table.stdout.splitlines() if x.startswith("| default")]
    assert row.split(" | ")[:4] == ["| default", "2K", threads, model]
    assert f"{d['pct_of_bound']:.2f}, {d['pct_of_bound']:.2f}" in row


def test_adam_e2e_runs_a_child_per_configuration_in_order(monkeypatch):
    # the children stood in for: each records its argv and OpenMP wait policy
    mod = bench_inproc.load("adam_e2e.py")
    seen = []

    def child(cmd, env):
        i = cmd.index
        seen.append((env.get("OMP_WAIT_POLICY", "default"), cmd[i("--size") + 1],
                     cmd[i("--threads") + 1], cmd[i("--model") + 1],
                     "--no-pinned" in cmd, "--no-thp-move" in cmd))
        assert cmd[:3] == [sys.executable, mod.__file__, "--child"]
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(mod.subprocess, "run", child)
    monkeypatch.setattr(sys, "argv", [str(BENCH), "--sizes", "1K,2K", "--threads", "2",
                                      "--models", "fp32,bf16", "--omp", "default,passive",
                                      "--no-pinned"])
    mod.main()
    assert seen == [(w, s, "2", m, True, False) for w in ("default", "PASSIVE")
                    for s in ("1K", "2K") for m in ("fp32", "bf16")]


@pytest.mark.bench
@pytest.mark.slow  # a child process per configuration, each importing torch
def test_adam_e2e_bench_prints_one_line_per_configuration(tmp_path):
    r = subprocess.run([sys.executable, str(BENCH), "--sizes", "200K", "--threads", "2",
                        "--models", "fp32,bf16", "--omp", "default,passive", "--reps", "2"],
                       capture_output=True, text=True, timeout=900)  # 4 children; a shared
    # machine at a load average of 25 took more than 300 s
    assert r.returncode == 0, r.stderr[-2000:]
    lines = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
    assert [(d["omp_wait_policy"], d["threads"], d["model"]) for d in lines] == [
        (w, 2, m) for w in ("default", "PASSIVE") for m in ("fp32", "bf16")]
    for d in lines:
        check_line(d, 200_000, 2, d["model"])
        assert d["vs_torch_fused"] > 0 and d["pct_of_bound"] > 0 and d["bound_gbs"] > 0
        assert d["pct_of_stream"] > 0
    runs = [tmp_path / "a.jsonl", tmp_path / "b.jsonl"]
    for path in runs:
        path.write_text(r.stdout)
    table = subprocess.run([sys.executable, str(BENCH), "--summary", *map(str, runs)],
                           capture_output=True, text=True, timeout=60, check=True).stdout
    rows = [x for x in table.splitlines() if x.startswith("| default") or
            x.startswith("| PASSIVE")]
    assert len(rows) == 4  # one per configuration, the two runs' medians
    first = lines[0]
    assert rows[0].split(" | ")[:4] == ["| default", "200K", "2", "fp32"]
    assert f"{first['pct_of_bound']:.2f}, {first['pct_of_bound']:.2f}" in rows[0]


def test_adam_e2e_bench_rejects_an_unknown_wait_policy():
    r = bench_inproc.run("adam_e2e.py", "--omp", "turbo", "--sizes", "1K")
    assert r.returncode != 0 and "turbo" in r.stderr


def load_bench():
    """bench/adam_e2e.py as a module (it is a script, not a package)."""
    return bench_inproc.load("adam_e2e.py")


def write_runs(tmp_path, runs: list[dict]) -> list[str]:
    """One JSONL file per run, each with a non-JSON line first (as the bench's logs have)."""
    paths = []
    for i, d in enumerate(runs):
        paths.append(tmp_path / f"r{i}.jsonl")
        paths[-1].write_text("[noise line]\n" + json.dumps(d) + "\n")
    return [str(p) for p in paths]


def test_adam_e2e_summary_best_of_rounds(tmp_path, capsys):
    # the best-of-rounds columns come from ms_spread's minima: bound 8 / cxlkit 10 = 80 %,
    # torch 12 / 10 = 1.2x, DeepSpeed 9 / 10 = 0.9x; medians over the two runs
    mod = load_bench()
    base = {"size": "1M", "params": 10**6, "threads": 1, "model": "fp32",
            "omp_wait_policy": "default", "cxlkit_gbs": 5.0, "pct_of_bound": 90.0,
            "vs_torch_fused": 1.1, "vs_deepspeed": 1.0}
    a = dict(base, ms_spread={"cxlkit": [10, 30], "bound": [8, 9], "torch_fused": [12, 40],
                              "deepspeed": [9, 50]})
    b = dict(base, ms_spread={"cxlkit": [10, 20], "bound": [9, 9], "torch_fused": [14, 40]})
    assert mod.best_of_rounds(a) == pytest.approx(
        {"best_pct_of_bound": 80.0, "best_vs_torch_fused": 1.2, "best_vs_deepspeed": 0.9})
    assert "best_vs_deepspeed" not in mod.best_of_rounds(b)
    mod.summary(write_runs(tmp_path, [a, b]))
    row = [x for x in capsys.readouterr().out.splitlines() if x.startswith("| default")]
    assert len(row) == 1
    cells = [c.strip() for c in row[0].strip("|").split("|")]
    assert cells[:4] == ["default", "1M", "1", "fp32"]
    assert cells[9:12] == ["85.00", "1.30", "0.90"]  # medians: (80, 90), (1.2, 1.4), (0.9)
    assert cells[16:18] == ["- (-, -)", "- (-, -)"]  # no "ms": no baseline % of the bound


def test_adam_e2e_summary_gives_each_baselines_own_share_of_the_bound(tmp_path, capsys):
    # bound 10 ms: torch fused at 12.5 ms ran at 80 % of it, then at 10 ms at 100 %;
    # DeepSpeed 20 ms = 50 %, and absent from the second run
    mod = load_bench()
    base = {"size": "1M", "params": 10**6, "threads": 2, "model": "fp32",
            "omp_wait_policy": "PASSIVE", "cxlkit_gbs": 5.0, "pct_of_bound": 100.0,
            "vs_torch_fused": 1.0, "vs_deepspeed": 2.0}
    runs = [dict(base, ms={"cxlkit": 10, "bound": 10, "torch_fused": 12.5, "deepspeed": 20}),
            dict(base, ms={"cxlkit": 10, "bound": 10, "torch_fused": 10.0})]
    for d in runs:
        d["ms_spread"] = {k: [v, v] for k, v in d["ms"].items()}
    mod.summary(write_runs(tmp_path, runs))
    out = capsys.readouterr().out.splitlines()
    assert "torch fused: % of bound (per run)" in out[0]
    cells = [c.strip() for c in out[2].strip("|").split("|")]
    assert cells[16] == "90.00 (80.00, 100.00)"
    assert cells[17] == "50.00 (50.00, -)"


def test_adam_e2e_bench_reports_a_failed_configuration_and_goes_on():
    r = subprocess.run([sys.executable, str(BENCH), "--sizes", "zz,yyM", "--threads", "1",
                        "--models", "fp32", "--omp", "default"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "some configurations failed" in r.stderr
    lines = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
    assert [(d["size"], d["error"]) for d in lines] == [("zz", "exit status 1"),
                                                        ("yyM", "exit status 1")]


PHASES = BENCH.parent / "adam_phases.py"


@pytest.mark.parametrize("team, fwd", [("auto", "--no-fwd"), ("2", "")])
def test_adam_phases_bench_splits_the_step_into_native_and_python(team, fwd, monkeypatch):
    from cxlkit.train import adam as A
    monkeypatch.setattr(A, "step_raw", A.step_raw)  # the script wraps it with a timer
    r = bench_inproc.run("adam_phases.py", "--size", "20K", "--threads", "2", "--reps", "1",
                         "--tensors", "3", "--team", team, *filter(None, [fwd]))
    assert r.returncode == 0, r.stderr[-2000:]
    d = json.loads(r.stdout.strip().splitlines()[-1])
    assert (d["params"], d["tensors"], d["team"], d["fwd"]) == (20_000, 3, team, not fwd)
    ms = d["ms"]
    assert set(ms) == {"cxlkit", "cxlkit_native", "cxlkit_python", "torch_fused",
                       "cxlkit_tiny", "torch_fused_tiny"}
    # the native call is timed inside the step it belongs to: never longer than the step
    assert 0 < ms["cxlkit_native"] <= ms["cxlkit"] and ms["cxlkit_python"] >= 0
    assert isinstance(d["vs_torch_fused"], float) and isinstance(d["cxlkit_gbs"], float)


def test_adam_phases_bench_names_a_bad_team():
    r = bench_inproc.run("adam_phases.py", "--team", "many")
    assert r.returncode == 2 and "many" in r.stderr


@pytest.mark.bench
def test_adam_phases_bench_full_run_reports_positive_rates():
    r = subprocess.run([sys.executable, str(PHASES), "--size", "50K", "--threads", "2",
                        "--reps", "2", "--tensors", "3"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    d = json.loads(r.stdout.strip().splitlines()[-1])
    assert d["vs_torch_fused"] > 0 and d["cxlkit_gbs"] > 0


@pytest.mark.parametrize("thp_move", [True, False])
def test_adam_e2e_thp_move_both_ways(thp_move, monkeypatch, tmp_path):
    # TieredAdamW's fp32 param (3M params, 12 MB: past THP_MOVE_BYTES) moves into its huge-page
    # buffer by default and stays in torch's pages with --no-thp-move; the line says which,
    # and the summary keeps the two apart
    import cxlkit.integrations.torch_adamw as cxt
    monkeypatch.setattr(cxt, "THP_MOVE_BYTES", cxt.THP_MOVE_BYTES)  # --no-thp-move sets it
    d = child_line("--size", "3M", "--threads", "1", "--model", "fp32", "--no-pinned",
                   *([] if thp_move else ["--no-thp-move"]))
    assert (d["thp_move"], d["cxlkit_param_moved"]) == (thp_move, thp_move)
    path = tmp_path / "one.jsonl"
    path.write_text(json.dumps(d) + "\n")
    table = bench_inproc.run("adam_e2e.py", "--summary", str(path)).stdout
    assert [x.split(" | ")[0] for x in table.splitlines() if x.startswith("| default")] == [
        "| default" if thp_move else "| default, no THP move"]


@pytest.mark.bench
@pytest.mark.slow  # two children, each importing torch
def test_adam_e2e_bench_thp_move_both_ways(tmp_path):
    # TieredAdamW's fp32 param (3M params, 12 MB: past THP_MOVE_BYTES) moves into its huge-page
    # buffer by default and stays in torch's pages with --no-thp-move; the line says which,
    # and the summary keeps the two apart
    lines = []
    for extra in ([], ["--no-thp-move"]):
        r = subprocess.run([sys.executable, str(BENCH), "--sizes", "3M", "--threads", "1",
                            "--models", "fp32", "--omp", "default", "--reps", "1",
                            "--no-pinned", *extra], capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr[-2000:]
        (d,) = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
        lines.append(d)
    assert [(d["thp_move"], d["cxlkit_param_moved"]) for d in lines] == [(True, True),
                                                                         (False, False)]
    path = tmp_path / "both.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in lines))
    table = subprocess.run([sys.executable, str(BENCH), "--summary", str(path)],
                           capture_output=True, text=True, timeout=60, check=True).stdout
    assert [x.split(" | ")[0] for x in table.splitlines() if x.startswith("| default")] == [
        "| default", "| default, no THP move"]
