"""A numpy program that creates and frees large arrays, for bench/preload_overhead.py: each
step makes a 4 MiB float64 array, fills it, computes a*2+1 (two 4 MiB temporaries numpy
allocates and frees) and reduces it. Prints "steps N seconds S steps_per_s R cpu_seconds C
steps_per_cpu_s Q check K" (C: the loop's CPU time, time.process_time).
Usage: numpy_loop.py STEPS"""
import sys
import time

import numpy as np

steps = int(sys.argv[1])
n = (4 << 20) // 8
total = 0.0
t0, c0 = time.perf_counter(), time.process_time()
for i in range(steps):
    a = np.empty(n)
    a.fill(float(i))
    b = a * 2.0 + 1.0
    total += float(b[::4096].sum())
dt, ct = time.perf_counter() - t0, time.process_time() - c0
print(f"steps {steps} seconds {dt:.6f} steps_per_s {steps / dt:.1f} cpu_seconds {ct:.6f} "
      f"steps_per_cpu_s {steps / ct:.1f} check {total:.0f}")
