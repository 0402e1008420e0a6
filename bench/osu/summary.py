"""Summarise a bench/osu/run.sh output directory: per transport, benchmark and size the
median over the rounds and the spread (min..max), then the ratios set as goals:
  8 B latency: cxlkit / each MPI's shared memory (goal <= 1.5), each MPI over TCP / cxlkit
  (goal >= 10); bandwidth at >= 64 KiB: cxlkit / memcpy of the same run (goal >= 0.7) against
  the in-cache column (osu memcpy's third: osu bw reuses one send and one receive buffer, so
  both MPIs copy between cached buffers; docs/msg.md "Bandwidth"), the out-of-cache column
  (the second) printed beside it, and
  cxlkit / each MPI's shared memory (goal >= 1); RPC: round trip and throughput at QD 1 and
  the pipelined depth against TCP loopback.
Usage: python bench/osu/summary.py OUTDIR [--sizes 8,65536,...]"""
from __future__ import annotations

import argparse
import re
import statistics
from collections import defaultdict
from pathlib import Path

TRANSPORTS = ["cxk", "mpich-shm", "ompi-shm", "mpich-tcp", "ompi-tcp"]


def parse_table(text: str) -> dict[int, float]:
    rows = {}
    for line in text.splitlines():
        # mbw_mr: + msgs/s; memcpy: + in cache (and two cores, held and written)
        m = re.match(r"^(\d+)\s+([0-9.]+)(?:\s+[0-9.]+){0,3}\s*$", line)
        if m:
            rows[int(m.group(1))] = float(m.group(2))
    return rows


def parse_rpc(text: str) -> dict[int, tuple[float, float]]:
    rows = {}
    for line in text.splitlines():
        m = re.match(r"^(\d+)\s+(\d+)\s+([0-9.]+)\s+([0-9.]+)\s*$", line)
        if m:
            rows[int(m.group(2))] = (float(m.group(3)), float(m.group(4)))
    return rows


def load(out: Path) -> tuple[dict, dict, list[str], list[str]]:
    """{(transport, bench): {size: [values per round]}}, {(transport, qd): [(rt, mops)]},
    the failures (files with an exit status), the runs that hung after their whole table."""
    tables: dict = defaultdict(lambda: defaultdict(list))
    rpc: dict = defaultdict(list)
    failed, hung = [], []
    for f in sorted(out.glob("*.txt")):
        parts = f.name[:-4].split(".")
        if len(parts) != 3:
            continue
        transport, bench, _ = parts
        text = f.read_text(errors="replace")
        status = re.search(r"^# exit status (\d+)", text, re.M)
        top = re.search(r"^# command: .* -m (\d+)", text, re.M)
        if status and status.group(1) == "124" and top and int(top.group(1)) in parse_table(text):
            # the whole table printed, then the timeout: the MPI hung in MPI_Finalize (seen
            # with MPICH over UCX's TCP); its figures stand, the hang is listed apart
            hung.append(f.name)
        elif status:
            lines = text.strip().splitlines()
            failed.append(f"{f.name}: {lines[-2][:160] if len(lines) > 1 else ''}")
        if bench == "rpc":
            for qd, v in parse_rpc(text).items():
                rpc[(transport, qd)].append(v)
        else:
            for size, v in parse_table(text).items():
                tables[(transport, bench)][size].append(v)
        if bench == "memcpy":  # third column: the in-cache loop; fourth: two cores, held
            for m in re.finditer(r"^(\d+)\s+[0-9.]+\s+([0-9.]+)(?:\s+([0-9.]+)\s+[0-9.]+)?\s*$",
                                 text, re.M):
                tables[("memcpy-hot", bench)][int(m.group(1))].append(float(m.group(2)))
                if m.group(3):
                    tables[("memcpy-xcore", bench)][int(m.group(1))].append(float(m.group(3)))
    return tables, rpc, failed, hung


def med(vals: list[float]) -> str:
    if not vals:
        return "-"
    return f"{statistics.median(vals):.2f} [{min(vals):.2f}..{max(vals):.2f}]"


def median(tables: dict, transport: str, bench: str, size: int) -> float | None:
    v = tables.get((transport, bench), {}).get(size)
    return statistics.median(v) if v else None


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}" if a and b else "-"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--sizes", default="1,8,64,1024,8192,65536,1048576,8388608")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 unless every run finished and every table has every size")
    a = ap.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    tables, rpc, failed, hung = load(a.out)
    benches = sorted({b for _, b in tables})
    print(f"# medians [min..max] over rounds, {a.out}")
    for b in benches:
        unit = "MB/s" if "bw" in b or b == "memcpy" else "us"
        print(f"\n## {b} ({unit})")
        ts = ["memcpy", "memcpy-hot", "memcpy-xcore"] if b == "memcpy" else TRANSPORTS
        print("size".ljust(9) + "".join(t.ljust(30) for t in ts))
        for s in sizes:
            print(str(s).ljust(9) + "".join(
                med(tables.get((t, b), {}).get(s, [])).ljust(30) for t in ts))
    print("\n## goals (ratios of medians)")
    lat = {t: median(tables, t, "latency", 8) for t in TRANSPORTS}
    for m in ("mpich", "ompi"):
        print(f"8 B latency cxlkit / {m}-shm = {ratio(lat['cxk'], lat[m + '-shm'])} (goal <= 1.5); "
              f"{m}-tcp / cxlkit = {ratio(lat[m + '-tcp'], lat['cxk'])} (goal >= 10)")
    for s in [s for s in sizes if s >= 65536]:
        bw = median(tables, "cxk", "bw", s)
        hot = median(tables, "memcpy-hot", "memcpy", s)
        cp = median(tables, "memcpy", "memcpy", s)
        xc = median(tables, "memcpy-xcore", "memcpy", s)
        line = (f"bw {s} B: cxlkit / memcpy in cache = {ratio(bw, hot)} (goal >= 0.7), "
                f"out of cache = {ratio(bw, cp)}, cross-core = {ratio(bw, xc)}")
        for m in ("mpich", "ompi"):
            line += f"; cxlkit / {m}-shm = {ratio(bw, median(tables, m + '-shm', 'bw', s))}"
        print(line + " (goal >= 1)")
    for qd in sorted({q for _, q in rpc}):
        c, t = rpc.get(("rpc-cxk", qd), []), rpc.get(("rpc-tcp", qd), [])
        if c and t:
            crt, trt = statistics.median(x[0] for x in c), statistics.median(x[0] for x in t)
            cop, top = statistics.median(x[1] for x in c), statistics.median(x[1] for x in t)
            print(f"RPC 64 B QD {qd}: round trip cxlkit {med([x[0] for x in c])} us, TCP "
                  f"{med([x[0] for x in t])} us, TCP / cxlkit = {trt / crt:.2f} (goal >= 10); "
                  f"throughput cxlkit {med([x[1] for x in c])} Mops/s, TCP "
                  f"{med([x[1] for x in t])} Mops/s, ratio {cop / top:.2f}")
    if hung:
        print("\n## runs that printed their table, then hung until the timeout (finalize)")
        print("\n".join(hung))
    if failed:
        print("\n## runs that failed")
        print("\n".join(failed))
    if a.check:
        missing = [f"{t} {b} {s}" for (t, b), rows in tables.items() for s in sizes
                   if s not in rows]
        want = {(t, b) for t in TRANSPORTS for b in benches if b != "memcpy"}
        missing += [f"{t} {b}: no table" for t, b in sorted(want - set(tables))]
        missing += [f"rpc-{t}: no table" for t in ("cxk", "tcp") if (f"rpc-{t}", 1) not in rpc]
        if failed or missing:
            print("\n## missing\n" + "\n".join(missing))
            raise SystemExit(1)


if __name__ == "__main__":
    main()
