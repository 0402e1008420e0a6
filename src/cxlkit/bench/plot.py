"""PNG plots of bench results: latency vs buffer size, bandwidth vs threads per kind, loaded
latency vs bandwidth, copy bandwidth vs size. matplotlib is imported here only, when called,
and drawn with the Agg canvas directly so no global backend is touched."""
from __future__ import annotations

from pathlib import Path


def _figure(w: float = 7.0, h: float = 4.5):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(w, h), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _title(doc: dict, what: str) -> str:
    ld = doc.get("load")  # how busy the machine was: figures on a busy one read low
    busy = "" if not ld else (f"\nload avg {ld['loadavg_after']:.2f}, other processes "
                              f"{ld['others_share']:.0%} of the CPU time"
                              + (" (BUSY: figures may read low)" if ld["busy"] else ""))
    return f"{what} — {doc['machine']['cpu']}, Linux {doc['kernel']}, {doc['date'][:10]}{busy}"


def _save(fig, path: Path) -> Path:
    path.parent.mkdir(exist_ok=True)  # the plots folder; its parent must exist
    fig.savefig(path, dpi=110)
    return path


def _finish(fig, ax, doc: dict, what: str, xlabel: str, ylabel: str, path: Path) -> Path:
    """Labels, title, grid and legend of a one-axes sweep plot, then save it."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(_title(doc, what), fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend()
    return _save(fig, path)


def plot_memory(doc: dict, outdir: str | Path, prefix: str = "memory") -> list[Path]:
    """latency.png, bandwidth.png, loaded_latency.png (when measured) under outdir."""
    out = Path(outdir)
    nodes = doc["figures"]["nodes"]
    written = []

    fig = _figure()
    ax = fig.add_subplot()
    for n, e in nodes.items():
        if e["latency"]:
            ax.plot([p["bytes"] for p in e["latency"]], [p["ns"] for p in e["latency"]],
                    marker="o", label=f"node {n} ({e['kind']})")
    ax.set_xscale("log", base=2)
    written.append(_finish(fig, ax, doc, "idle latency", "buffer size (bytes)",
                           "ns per dependent load", out / f"{prefix}_latency.png"))

    from matplotlib.ticker import MaxNLocator

    fig = _figure(9, 4.5)
    kinds = ("read", "write", "copy", "nt_write")
    axes = fig.subplots(1, len(kinds), sharey=True)
    for ax, k in zip(axes, kinds):
        for n, e in nodes.items():
            pts = e["bandwidth"].get(k) or []
            if pts:
                ax.plot([p["threads"] for p in pts], [p["gbps"] for p in pts], marker="o",
                        label=f"node {n}")
        ax.set_title(k, fontsize=9)
        ax.set_xlabel("threads")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("GB/s")
    axes[0].legend()
    fig.suptitle(_title(doc, "bandwidth"), fontsize=9)
    written.append(_save(fig, out / f"{prefix}_bandwidth.png"))

    loaded = {n: e["loaded_latency"] for n, e in nodes.items() if e.get("loaded_latency")}
    if loaded:
        fig = _figure()
        ax = fig.add_subplot()
        for n, pts in loaded.items():
            pts = sorted(pts, key=lambda p: p["gbps"])  # a line through rising bandwidth
            ax.plot([p["gbps"] for p in pts], [p["ns"] for p in pts], marker="o",
                    label=f"node {n}")
        ax.set_ylim(bottom=0)  # from zero: a few ns of noise must not look like a knee
        written.append(_finish(fig, ax, doc, "loaded latency",
                               "bandwidth of the load generators (GB/s)",
                               "ns per dependent load", out / f"{prefix}_loaded_latency.png"))
    return written


def plot_copy(doc: dict, outdir: str | Path, prefix: str = "copy") -> list[Path]:
    """One PNG per (src, dst) pair: GB/s vs size for every method."""
    out = Path(outdir)
    written = []
    for p in doc["figures"]["pairs"]:
        fig = _figure()
        ax = fig.add_subplot()
        for m, pts in p["methods"].items():
            if pts:
                ax.plot([x["bytes"] for x in pts], [x["gbps"] for x in pts], marker="o", label=m)
        ax.set_xscale("log", base=2)
        written.append(_finish(fig, ax, doc, f"copy node {p['src']} -> node {p['dst']}",
                               "copy size (bytes)", "GB/s (bytes copied)",
                               out / f"{prefix}_{p['src']}_to_{p['dst']}.png"))
    return written
