"""bench/ab.py — one benchmark script over two builds of cxlkit, in interleaved rounds: each
round runs the script once under every interpreter given (the order alternates from round to
round, so a neighbour's load or a warming machine does not favour one side), and the figures
of the same measurement are gathered across rounds. Prints one JSON line per measurement and
figure: each side's median and range, and the ratio of the medians against the first side.

A JSON line of the script is one measurement: its float fields are figures, every other field
(strings, booleans, integers: op, layout, block sizes, counts) names the measurement.

  .venv/bin/python bench/ab.py --side before=/tmp/before-venv/bin/python \\
      --side after=.venv/bin/python --rounds 5 -- bench/kv.py --blocks 16 --ttft "" --no-mooncake

Each side is an interpreter that imports the build to measure (e.g. a venv whose path holds
that build's package first); the script path is the same for both sides.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from collections import defaultdict


def parse_side(text: str) -> tuple[str, str]:
    name, sep, python = text.partition("=")
    if not sep or not name or not python:
        raise argparse.ArgumentTypeError(f"--side wants NAME=PYTHON, got {text!r}")
    return name, python


def measurement_key(rec: dict) -> tuple:
    """The fields that name a measurement: everything but the float figures."""
    return tuple(sorted((k, v) for k, v in rec.items() if not isinstance(v, float)))


def run_once(python: str, script: list[str], timeout: float) -> list[dict]:
    r = subprocess.run([python, *script], capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        tail = (r.stderr or r.stdout).strip().splitlines()[-1:] or ["(no output)"]
        raise RuntimeError(f"{python} {' '.join(script)} exited {r.returncode}: {tail[0]}")
    recs = []
    for line in r.stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            recs.append(json.loads(line))
    return recs


def rounds(sides: list[tuple[str, str]], script: list[str], n: int, timeout: float,
           log=None) -> dict:
    """{key: {figure: {side: [value per round]}}} over n interleaved rounds."""
    got: dict = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for i in range(n):
        order = sides if i % 2 == 0 else sides[::-1]
        for name, python in order:
            for rec in run_once(python, script, timeout):
                key = measurement_key(rec)
                for fig, v in rec.items():
                    if isinstance(v, float):
                        got[key][fig][name].append(v)
            if log:
                log(f"round {i + 1}/{n}: {name} done")
    return got


def summary(got: dict, sides: list[str], figures: set[str] | None = None) -> list[dict]:
    out = []
    for key, figs in got.items():
        for fig, per in figs.items():
            if figures and fig not in figures:
                continue
            row = dict(key)
            row["figure"] = fig
            for s in sides:
                vals = per.get(s, [])
                row[s] = ({"median": round(statistics.median(vals), 4), "min": min(vals),
                           "max": max(vals), "n": len(vals)} if vals else None)
            base = row[sides[0]]
            for s in sides[1:]:
                if base and row[s] and base["median"]:
                    row[f"{s}/{sides[0]}"] = round(row[s]["median"] / base["median"], 3)
            out.append(row)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--side", type=parse_side, action="append", required=True,
                    help="NAME=PYTHON (twice or more; the first is the baseline)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--figure", action="append", help="report only these figures")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per script run")
    ap.add_argument("script", nargs=argparse.REMAINDER, help="-- SCRIPT [ARGS...]")
    a = ap.parse_args()
    script = a.script[1:] if a.script[:1] == ["--"] else a.script
    if len(a.side) < 2 or not script or a.rounds < 1:
        ap.error("two --side, a script after --, and --rounds >= 1 are needed")
    names = [n for n, _ in a.side]
    if len(set(names)) != len(names):
        ap.error(f"side names must differ: {names}")
    got = rounds(a.side, script, a.rounds, a.timeout,
                 log=lambda m: print(m, file=sys.stderr, flush=True))
    for row in summary(got, names, set(a.figure) if a.figure else None):
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
