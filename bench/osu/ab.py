"""bench/osu/ab.py — OSU-format programs under several settings, in interleaved rounds: each
round runs every variant once (the order rotates from round to round, so a neighbour's
build or a warming machine does not favour one side), and the rows of each table are
gathered across rounds. Prints one JSON line per (bench, size): each variant's median,
range and round count, and the ratio of each median to the first variant's; one JSON line
per round with the load average before it (the machine may be shared), and one per run
with its raw rows as it ends (a failed run is reported and left out).

  python bench/osu/ab.py --rounds 5 --bench latency -m 64 -i 20000 \\
      --variant 'before=build/osu-before/osu_cxk' \\
      --variant 'spin50=env CXLKIT_MSG_SPIN_US=50 build/osu/osu_cxk' \\
      --variant 'mpich=mpiexec.mpich -n 2 build/osu/osu_mpich'

A variant is NAME=COMMAND (run by the shell; the benchmark name and -m/-i/-w/-s are
appended). Figures are what the table prints: latency in us, bandwidth in MB/s.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from summary import parse_table  # noqa: E402  (the OSU table's rows, one parser)


def parse_variant(text: str) -> tuple[str, str]:
    name, sep, cmd = text.partition("=")
    if not sep or not name or not cmd.strip():
        raise argparse.ArgumentTypeError(f"--variant wants NAME=COMMAND, got {text!r}")
    return name, cmd


def run_once(cmd: str, args: list[str], timeout: float) -> dict[int, float]:
    full = f"{cmd} {' '.join(args)}"
    r = subprocess.run(full, shell=True, capture_output=True, text=True, timeout=timeout)
    rows = parse_table(r.stdout)
    if r.returncode != 0 or not rows:
        tail = (r.stderr or r.stdout).strip().splitlines()[-1:] or ["(no output)"]
        raise RuntimeError(f"{full} exited {r.returncode}: {tail[0]}")
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variant", type=parse_variant, action="append", required=True)
    ap.add_argument("--bench", default="latency")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("-m", dest="max_bytes", default="64")
    ap.add_argument("-i", dest="iters", default="10000")
    ap.add_argument("-w", dest="window", default=None)
    ap.add_argument("-s", dest="sync", default=None)
    ap.add_argument("--timeout", type=float, default=600)
    a = ap.parse_args()
    if a.rounds < 1:
        ap.error("--rounds must be >= 1")
    args = [a.bench, "-m", a.max_bytes, "-i", a.iters]
    if a.window:
        args += ["-w", a.window]
    if a.sync:
        args += ["-s", a.sync]
    names = [n for n, _ in a.variant]
    got: dict = defaultdict(lambda: defaultdict(list))  # size -> variant -> [values]
    for i in range(a.rounds):
        k = i % len(a.variant)
        order = a.variant[k:] + a.variant[:k]
        print(json.dumps({"round": i + 1, "loadavg": os.getloadavg()[0],
                          "order": [n for n, _ in order]}), flush=True)
        for name, cmd in order:
            try:
                rows = run_once(cmd, args, a.timeout)
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                print(json.dumps({"round": i + 1, "variant": name, "failed": str(e)[-300:]}),
                      flush=True)
                continue
            print(json.dumps({"round": i + 1, "variant": name, "rows": rows}), flush=True)
            for size, v in rows.items():
                got[size][name].append(v)
    for size in sorted(got):
        row: dict = {"bench": a.bench, "size": size}
        base = None
        for name in names:
            vals = got[size].get(name, [])
            if not vals:
                continue
            med = statistics.median(vals)
            base = med if base is None else base
            row[name] = {"median": med, "min": min(vals), "max": max(vals), "n": len(vals),
                         "ratio": round(med / base, 3) if base else None}
        print(json.dumps(row), flush=True)
    print(json.dumps({"end": True, "loadavg": os.getloadavg()[0]}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
