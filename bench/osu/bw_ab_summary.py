"""bw_ab_summary.py OUTDIR — medians [min..max] of the runs bench/osu/bw_ab.sh wrote: osu bw
per size and variant (files <variant>.<round>.txt), the memcpy columns (memcpy*.txt: out of
cache, in cache, and since the fifth round two cores, held and written), each transport's
ratios to the memcpy columns and to both MPIs, 8 B latency and the RPC's QD 1 round trip."""
from __future__ import annotations

import argparse
import collections
import pathlib
import statistics


def rows(path: pathlib.Path) -> dict[int, list[float]]:
    """size -> the numbers after it on each table row of one OSU-format output."""
    out: dict[int, list[float]] = {}
    for line in path.read_text(errors="replace").splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0].isdigit():
            try:
                out[int(parts[0])] = [float(x) for x in parts[1:]]
            except ValueError:
                continue
    return out


def fmt(vals: list[float]) -> str:
    if not vals:
        return "-"
    d = 2 if max(vals) < 100 else 0  # latencies in us; bandwidths in MB/s
    return f"{statistics.median(vals):.{d}f} [{min(vals):.{d}f}..{max(vals):.{d}f}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("outdir", type=pathlib.Path)
    a = ap.parse_args()
    bw: dict[str, dict[int, list[float]]] = collections.defaultdict(lambda: collections.defaultdict(list))
    for f in sorted(a.outdir.glob("*.txt")):
        name = f.name.split(".")[0]
        if name == "load":
            continue
        for size, vals in rows(f).items():
            if name.startswith("memcpy"):
                # one thread out of / in cache, then (fifth round) two cores: held, written
                for col, v in zip(("memcpy-ooc", "memcpy-hot", "xcore-held", "xcore-written"), vals):
                    bw[col][size].append(v)
            elif name.startswith("rpc"):
                bw[name][size].append(vals[1])  # rpc_bench: QD, then the round trip in us
            else:
                bw[name][size].append(vals[0])
    print((a.outdir / "load.txt").read_text().strip() if (a.outdir / "load.txt").exists() else "")
    names = sorted(bw)
    sizes = sorted({s for n in names for s in bw[n]})
    print("size " + " | ".join(names))
    for s in sizes:
        print(f"{s} " + " | ".join(fmt(bw[n].get(s, [])) for n in names))
    med = {n: {s: statistics.median(v) for s, v in bw[n].items() if v} for n in names}
    for cx in [n for n in names if n.startswith(("cxk", "e", "r", "shim", "mpich", "ompi"))
               and not n.startswith("rpc")]:
        for ref in ("memcpy-ooc", "memcpy-hot", "xcore-held", "xcore-written", "mpich-shm",
                    "ompi-shm"):
            if ref not in med:
                continue
            r = [f"{s}: {med[cx][s] / med[ref][s]:.2f}" for s in sizes if s in med[cx] and s in med[ref]]
            if r:
                print(f"{cx} / {ref}: " + ", ".join(r))


if __name__ == "__main__":
    main()
