"""A Python program of the kind users run under `cxlkit run`: each step builds 200 records
(dicts of str/int/float/list values, as parsed rows or API objects are), serialises them with
json.dumps, parses them back with json.loads, and indexes them by key into a dict of lists:
many small objects made and freed (pymalloc's arenas, and malloc for strings and containers
past its 512-byte limit). Prints "steps N seconds S steps_per_s R cpu_seconds C
steps_per_cpu_s Q check K" (C: the loop's CPU time, time.process_time).
Usage: py_objects.py STEPS"""
import json
import sys
import time


def step(i: int) -> int:
    rows = [{"id": i * 1000 + k, "name": f"user-{k:05d}", "score": k * 0.5,
             "tags": [f"t{k % 7}", f"g{k % 13}"], "bio": "x" * (16 + k % 600)}
            for k in range(200)]
    back = json.loads(json.dumps(rows))
    index: dict[str, list[int]] = {}
    for r in back:
        for t in r["tags"]:
            index.setdefault(t, []).append(r["id"])
    return sum(len(v) for v in index.values()) + len(back[-1]["bio"])


steps = int(sys.argv[1])
check = 0
t0, c0 = time.perf_counter(), time.process_time()
for i in range(steps):
    check += step(i)
dt, ct = time.perf_counter() - t0, time.process_time() - c0
print(f"steps {steps} seconds {dt:.6f} steps_per_s {steps / dt:.1f} cpu_seconds {ct:.6f} "
      f"steps_per_cpu_s {steps / ct:.1f} check {check}")
