"""bench/sim_branch.py — what the non-coherence simulator (coherence="sim") costs a
production process that never uses it: cxk_flush and cxk_sfence (the simulator's flag checked,
then the instruction) against the same instructions without the check, timed alternately in
the same run by libcxlkit (cxk_bench_sim_branch). One JSON line per repetition, then a summary
line: the median over repetitions of each repetition's median per-round ratio (checked /
unchecked), with the smallest and largest.

  .venv/bin/python bench/sim_branch.py --reps 7 --rounds 401 --calls 2000
"""
from __future__ import annotations

import argparse
import json
import statistics

from cxlkit import _native


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=7, help="repetitions (one JSON line each)")
    ap.add_argument("--rounds", type=int, default=401, help="alternating rounds per repetition")
    ap.add_argument("--calls", type=int, default=2000, help="calls per round")
    a = ap.parse_args()
    flush, fence = [], []
    for rep in range(a.reps):
        f_chk, f_raw, s_chk, s_raw, f_pair, s_pair = _native.bench_sim_branch(a.rounds, a.calls)
        flush.append(f_pair)  # medians of per-round ratios: drift between rounds cancels
        fence.append(s_pair)
        print(json.dumps({"rep": rep, "flush_ns": round(f_chk, 3), "flush_raw_ns": round(f_raw, 3),
                          "flush_ratio": round(flush[-1], 4), "sfence_ns": round(s_chk, 3),
                          "sfence_raw_ns": round(s_raw, 3), "sfence_ratio": round(fence[-1], 4),
                          "flush_kind": _native.flush_kind()}))
    print(json.dumps({"summary": True, "reps": a.reps,
                      "flush_ratio_median": round(statistics.median(flush), 4),
                      "flush_ratio_min": round(min(flush), 4),
                      "flush_ratio_max": round(max(flush), 4),
                      "sfence_ratio_median": round(statistics.median(fence), 4),
                      "sfence_ratio_min": round(min(fence), 4),
                      "sfence_ratio_max": round(max(fence), 4)}))


if __name__ == "__main__":
    main()
