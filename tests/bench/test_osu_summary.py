"""bench/osu/summary.py over a run directory laid out as bench/osu/run.sh writes it: medians
and spreads per size, the goal ratios, and --check failing on a failed or missing run."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "osu" / "summary.py"


def table(title: str, rows: dict[int, float]) -> str:
    body = "".join(f"{n:<10}{v:18.2f}\n" for n, v in rows.items())
    return f"# command: x -m {max(rows)}\n# OSU MPI {title}\n# Library: t\n# Ranks: 2\n# Size  Col\n{body}"


def rpc(rt1: float, ops1: float, rtq: float, opsq: float) -> str:
    return ("# OSU MPI RPC Test\n# Size  QD    Avg Latency(us)  Throughput(Mops/s)\n"
            f"64    1     {rt1:16.2f}{ops1:20.3f}\n64    128   {rtq:16.2f}{opsq:20.3f}\n")


def write_run(d: Path, rounds: int = 3) -> None:
    for r in range(1, rounds + 1):
        # osu memcpy's rows: size, out-of-cache MB/s, in-cache MB/s, and since the fifth
        # round two cores, held and written
        (d / f"memcpy.memcpy.{r}.txt").write_text(
            "# OSU MPI memcpy Bandwidth\n# Size  Out-of-cache (MB/s)  In-cache (MB/s)  "
            "Cross-core held (MB/s)  Cross-core written (MB/s)\n# Cross-core CPUs: 0,1\n"
            "8           100.00               900.00   800.00   700.00\n"
            "65536       10000.00             40000.00   32000.00   30000.00\n")
        lat = {"cxk": 0.2 * r, "mpich-shm": 0.2, "ompi-shm": 0.4, "mpich-tcp": 20.0,
               "ompi-tcp": 30.0}
        for t, v in lat.items():
            (d / f"{t}.latency.{r}.txt").write_text(table("Latency Test", {8: v, 65536: 9.0}))
            (d / f"{t}.bw.{r}.txt").write_text(table("Bandwidth Test", {8: 1.0, 65536: 8000.0}))
        (d / f"rpc-cxk.rpc.{r}.txt").write_text(rpc(1.0, 1.0, 0.1, 10.0))
        (d / f"rpc-tcp.rpc.{r}.txt").write_text(rpc(20.0, 0.05, 2.0, 1.0))


def summary(d: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), str(d), "--sizes", "8,65536", *args],
                          capture_output=True, text=True, timeout=60)


def test_medians_spreads_and_goal_ratios(tmp_path):
    write_run(tmp_path)
    r = summary(tmp_path, "--check")
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert "0.40 [0.20..0.60]" in out  # cxk 8 B latency over the three rounds
    assert "8 B latency cxlkit / mpich-shm = 2.00 (goal <= 1.5); mpich-tcp / cxlkit = 50.00" in out
    # judged against memcpy in cache (osu bw reuses its buffers), out of cache and the copy
    # between two cores beside it
    assert ("bw 65536 B: cxlkit / memcpy in cache = 0.20 (goal >= 0.7), out of cache = 0.80, "
            "cross-core = 0.25; cxlkit / mpich-shm = 1.00") in out
    assert "RPC 64 B QD 1:" in out and "TCP / cxlkit = 20.00" in out
    assert "RPC 64 B QD 128:" in out and "ratio 10.00" in out


def test_memcpy_of_an_earlier_round_without_cross_core_columns_still_parses(tmp_path):
    write_run(tmp_path)
    for f in tmp_path.glob("memcpy.memcpy.*.txt"):  # three columns, as before the fifth round
        f.write_text("# OSU MPI memcpy Bandwidth\n8   100.00   900.00\n65536   10000.00   40000.00\n")
    out = summary(tmp_path).stdout
    assert "memcpy in cache = 0.20 (goal >= 0.7), out of cache = 0.80, cross-core = -;" in out


def test_check_fails_on_a_failed_or_missing_run(tmp_path):
    write_run(tmp_path, rounds=1)
    f = tmp_path / "ompi-tcp.bw.1.txt"
    f.write_text(f.read_text() + "MPI_ABORT was invoked\n# exit status 1\n")
    r = summary(tmp_path, "--check")
    assert r.returncode == 1 and "runs that failed" in r.stdout and "ompi-tcp.bw.1.txt" in r.stdout
    write_run(tmp_path, rounds=1)
    (tmp_path / "mpich-shm.bw.1.txt").unlink()
    (tmp_path / "rpc-tcp.rpc.1.txt").unlink()
    r = summary(tmp_path, "--check")
    assert r.returncode == 1
    assert "mpich-shm bw: no table" in r.stdout and "rpc-tcp: no table" in r.stdout


def test_a_run_that_hung_after_its_whole_table_is_listed_apart(tmp_path):
    write_run(tmp_path, rounds=1)
    f = tmp_path / "mpich-tcp.latency.1.txt"
    f.write_text(f.read_text() + "# exit status 124\n")
    r = summary(tmp_path, "--check")
    assert r.returncode == 0, r.stdout
    assert "hung until the timeout" in r.stdout and "mpich-tcp.latency.1.txt" in r.stdout
    # cut short (the largest size missing): a failure
    f.write_text(table("Latency Test", {8: 1.0}).replace("-m 8", "-m 65536") + "# exit status 124\n")
    r = summary(tmp_path, "--check")
    assert r.returncode == 1 and "runs that failed" in r.stdout
