"""Start-up cost of libcxlkit_preload.so: processes that do nothing (`python -c pass`,
`/bin/true`) without and with the environment `cxlkit run --stripe` execs with, interleaved
(the order swapped every run), wall time and CPU time (getrusage of the child). The other
benchmarks' programs time only their loops, after start-up; this is the part they leave out.
Prints one JSON line per program: medians and minima in ms.
  .venv/bin/python bench/preload/startup_cost.py --runs 41 --stripe 0:1"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time


def environments(stripe: str) -> dict[str, dict]:
    from cxlkit.cli.stripe import stripe_env

    base = {k: v for k, v in os.environ.items()
            if not k.startswith("CXLKIT_") and k not in ("LD_PRELOAD", "MALLOC_MMAP_THRESHOLD_",
                                                         "MALLOC_TRIM_THRESHOLD_")}
    return {"base": base, "preload": dict(base, **stripe_env(stripe, "2M", "2M", None, True))}


def timed(cmd: list[str], env: dict) -> tuple[float, float]:
    """(wall s, CPU s) of one run of cmd; one child at a time, so RUSAGE_CHILDREN's change
    is this child's."""
    before, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    subprocess.run(cmd, env=env, check=True)
    wall, after = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=41, help="runs of each program and variant")
    ap.add_argument("--stripe", default="0:1", help="the stripe the library places with")
    a = ap.parse_args()
    if a.runs < 1:
        ap.error(f"--runs {a.runs}: expected at least 1")
    envs = environments(a.stripe)
    for cmd in ([sys.executable, "-c", "pass"], ["/bin/true"]):
        got = {k: ([], []) for k in envs}
        for i in range(a.runs):
            for k in (list(envs) if i % 2 == 0 else list(envs)[::-1]):
                w, c = timed(cmd, envs[k])
                got[k][0].append(w)
                got[k][1].append(c)
        doc = {"program": " ".join(cmd), "runs": a.runs, "load": os.getloadavg()[0]}
        for k, (w, c) in got.items():
            doc.update({f"median_wall_ms_{k}": round(1e3 * statistics.median(w), 3),
                        f"median_cpu_ms_{k}": round(1e3 * statistics.median(c), 3),
                        f"min_wall_ms_{k}": round(1e3 * min(w), 3),
                        f"min_cpu_ms_{k}": round(1e3 * min(c), 3)})
        print(json.dumps(doc), flush=True)


if __name__ == "__main__":
    main()
