"""bench/adam_lib_ab_summary.py — the runs of bench/adam_lib_ab.c between two builds named
`old` and `new` (either may be side a or b: the sides swap from run to run), as a Markdown
table per (params, model): medians over runs of each run's paired figures, per-run values
beside them.

  .venv/bin/python bench/adam_lib_ab_summary.py build/adam_e2e/lib_ab_*.jsonl
"""
from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict


def per_run(r: dict) -> dict:
    """new against old in one run: step speed-up, each step's % of its own traffic kernel,
    new's % of old's traffic kernel, GB/s and the load."""
    if {r["a"], r["b"]} != {"old", "new"}:
        raise ValueError(f"sides {r['a']!r}, {r['b']!r}: want one 'old' and one 'new'")
    new_is_b = r["b"] == "new"
    o, w = ("a", "b") if new_is_b else ("b", "a")
    return {"speedup": r["b_over_a_step"] if new_is_b else 1 / r["b_over_a_step"],
            "old_pct": r[f"{o}_pct_of_{o}_traffic"], "new_pct": r[f"{w}_pct_of_{w}_traffic"],
            "new_pct_old_traffic": r["b_pct_of_a_traffic"] if new_is_b else None,
            "old_gbs": r[f"{o}_step_gbs"], "new_gbs": r[f"{w}_step_gbs"],
            "load": r["loadavg_1m"]}


def table(paths: list[str]) -> list[str]:
    recs = []
    for path in paths:
        with open(path) as f:
            recs += [json.loads(line) for line in f if line.startswith("{")]
    return table_from_records(recs)


def table_from_records(recs: list[dict]) -> list[str]:
    rows: dict = defaultdict(list)
    for r in recs:
        model = r["model"] + (" (zero params)" if r.get("zero_params") else "")
        rows[(r["params"], model)].append(per_run(r))
    med = statistics.median
    out = ["| params | model | runs | new vs old step (per run) | old % of its traffic | "
           "new % of its traffic (per run) | new % of old's traffic | old GB/s | new GB/s | "
           "load |", "|---|---|---|---|---|---|---|---|---|---|"]
    for (n, model), runs in sorted(rows.items()):
        sp = [x["speedup"] for x in runs]
        pn = [x["new_pct"] for x in runs]
        pno = [x["new_pct_old_traffic"] for x in runs if x["new_pct_old_traffic"] is not None]
        ld = [x["load"] for x in runs]
        out.append(
            f"| {n / 1e6:g}M | {model} | {len(runs)} | {med(sp):.3f} "
            f"({', '.join(f'{x:.3f}' for x in sp)}) | {med(x['old_pct'] for x in runs):.1f} | "
            f"{med(pn):.1f} ({', '.join(f'{x:.1f}' for x in pn)}) | "
            f"{f'{med(pno):.1f}' if pno else '-'} | {med(x['old_gbs'] for x in runs):.1f} | "
            f"{med(x['new_gbs'] for x in runs):.1f} | {min(ld):.1f}-{max(ld):.1f} |")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", metavar="RUN.jsonl")
    print("\n".join(table(ap.parse_args().runs)))


if __name__ == "__main__":
    main()
