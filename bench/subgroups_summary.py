"""bench/subgroups_summary.py — one markdown table from several runs of bench/subgroups.py
(each a JSONL file of its row lines): per row, the median over the runs of each run's
median, with the per-run values beside it.

  .venv/bin/python bench/subgroups_summary.py RUN1.jsonl RUN2.jsonl RUN3.jsonl

Columns: update time (s), effective I/O (GB/s), the paths' own sum (the store's figures /
fio's), effective / own sum against each, effective / the paths measured together, and the
subgroups per path of the last run. A row a run did not have is left out of that run's values.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys

COLS = [("update_s", "update s", "{:.3f}"),
        ("io_GBps", "effective I/O GB/s", "{:.2f}"),
        ("paths_sum_GBps", "own sum (store) GB/s", "{:.2f}"),
        ("paths_sum_fio_GBps", "own sum (fio) GB/s", "{:.2f}"),
        ("io_of_paths", "effective / own (store)", "{:.2f}"),
        ("io_of_paths_fio", "effective / own (fio)", "{:.2f}"),
        ("io_of_together", "effective / together", "{:.2f}")]


def figure(v: object) -> float | None:
    """A row's figure: a number, or the median of a {median, min, max} record; else None."""
    if isinstance(v, dict):
        v = v.get("median")
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def load(paths: list[str]) -> dict[str, list[dict]]:
    """Row name -> that row's line in each run (in the order of the files)."""
    rows: dict[str, list[dict]] = {}
    for path in paths:
        with open(path) as f:
            for n, line in enumerate(f, 1):
                if not line.startswith("{"):
                    continue
                try:
                    d = json.loads(line)
                except json.JSONDecodeError as e:
                    raise SystemExit(f"{path}:{n}: not a JSON line: {e}") from None
                if isinstance(d, dict) and isinstance(d.get("row"), str):
                    rows.setdefault(d["row"], []).append(d)
    return rows


def table(rows: dict[str, list[dict]]) -> list[str]:
    """The markdown lines: a header, then one line per row in first-seen order."""
    out = ["| row | runs | " + " | ".join(f"{title} (per run)" for _, title, _ in COLS)
           + " | subgroups per path (last run) |",
           "|" + "---|" * (len(COLS) + 3)]
    for name, ds in rows.items():
        cells = []
        for key, _, fmt in COLS:
            vals = [x for x in (figure(d.get(key)) for d in ds) if x is not None]
            cells.append("-" if not vals else fmt.format(statistics.median(vals)) + " ("
                         + ", ".join(fmt.format(x) for x in vals) + ")")
        plan = ds[-1].get("plan")
        counts = ", ".join(str(p.get("subgroups")) for p in plan) if isinstance(plan, list) else "-"
        out.append(f"| {name} | {len(ds)} | " + " | ".join(cells) + f" | {counts} |")
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("jsonl", nargs="+", help="bench/subgroups.py outputs, one per run")
    a = ap.parse_args(argv)
    rows = load(a.jsonl)
    if not rows:
        raise SystemExit(f"no row lines in {', '.join(a.jsonl)}")
    sys.stdout.write("\n".join(table(rows)) + "\n")


if __name__ == "__main__":
    main()
