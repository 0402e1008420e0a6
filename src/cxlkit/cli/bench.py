"""`cxlkit bench memory` and `cxlkit bench copy`: run the measurements with a progress bar,
print rich tables, write the JSON document and PNG plots; and the demo's quick section."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import NoReturn, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from ..bench.load import BUSY_SHARE, Load, LoadMeter
from . import tables as T
from .main import app, fail, one_line
from .outpath import check_dir, check_file

bench_app = typer.Typer(no_args_is_help=True,
                        help="Measure the tiers: latency, bandwidth, loaded latency, copy paths.")
app.add_typer(bench_app, name="bench")


# The measurement's messages name its settings; on the command line they are flags.
_FLAGS = (("loaded_kind ", "--load-kind "), ("thread_counts ", "--threads "),
          ("reps ", "--reps "), ("cpu ", "--cpu "), ("node ", "--nodes: node "))


def _fail(msg: str) -> NoReturn:
    for py, flag in _FLAGS:
        if msg.startswith(py):
            msg = flag + msg[len(py):]
            break
    fail(msg)  # one line on stderr, exit 2


def _nodes(spec: Optional[str]) -> Optional[list[int]]:
    from ..placement import parse_nodes

    return None if spec is None else parse_nodes(spec)


def _threads(spec: str) -> tuple[int, ...]:
    from ..topology import parse_cpulist

    try:
        counts = tuple(parse_cpulist(spec))
    except ValueError:
        counts = ()
    if not counts:
        raise ValueError(f"threads {spec!r}: expected counts like 1,2,4 or 1-8")
    return counts


def _thread_counts(spec: Optional[str]) -> Optional[tuple[int, ...]]:
    """--threads parsed, with a warning for counts this process has no CPUs for (the sweep
    skips a count above a node's CPUs: the figure would not be what was asked)."""
    if spec is None:
        return None
    try:
        counts = _threads(spec)
    except ValueError as e:
        _fail(f"--{one_line(e)}")
    ncpus = len(os.sched_getaffinity(0))
    over = [c for c in counts if c > ncpus]
    if over:
        typer.echo(f"Warning: --threads {','.join(map(str, over))}: more than the {ncpus} "
                   "CPUs this process may run on; those counts are skipped (a node's sweep "
                   "stops at its CPUs)", err=True)
    return counts


def _run_with_bar(con: Console, quiet: bool, fn):
    """fn(progress_callback) under a rich progress bar (none when quiet)."""
    if quiet:
        return fn(None)
    with Progress(TextColumn("{task.description:<42}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeElapsedColumn(), console=con, transient=True) as bar:
        task = bar.add_task("starting", total=1)

        def cb(done: int, total: int, what: str) -> None:
            bar.update(task, completed=done, total=total, description=what)
        return fn(cb)


def _check_outputs(out: Optional[Path], plots: Optional[Path]) -> None:
    """Fail now (one line, exit 2) when --out or --plots cannot be written: a measurement
    takes minutes, and its result must not be lost at the end for a mistyped path."""
    if out is not None:
        check_file(out, "--out")
    if plots is not None:
        check_dir(plots, "--plots")


def _write(doc: dict, out: Optional[Path], as_json: bool, con: Console) -> None:
    text = json.dumps(doc, indent=1)
    if out is not None:
        out.write_text(text + "\n")
        if not as_json:
            con.print(f"result: {out}")
    if as_json:
        typer.echo(text)


def _report(con: Console, doc: dict, as_json: bool, out, plots, tables, plotter: str) -> None:
    """Tables (unless --json), the result file or JSON on stdout, then the plots; a warning
    on stderr when the machine was too busy for the figures to be trusted."""
    if not as_json:
        tables(con, doc)
        load_line(con, doc)
    _warn_busy(doc)
    _write(doc, out, as_json, con)
    if plots is not None:
        from ..bench import plot  # matplotlib only when plots are asked for

        for p in getattr(plot, plotter)(doc, plots):
            con.print(f"plot: {p}")


def load_line(con: Console, doc: dict) -> None:
    ld = doc.get("load")
    if ld:
        con.print(f"machine during the run: {Load(**ld).describe()}", highlight=False)


def _warn_busy(doc: dict) -> None:
    ld = doc.get("load")
    if ld and ld["busy"]:
        typer.echo(f"Warning: the machine was busy: other processes used "
                   f"{ld['others_share']:.0%} of its CPU time during the measurement (over "
                   f"{BUSY_SHARE:.0%}); figures may read low: rerun on a quiet machine",
                   err=True)


def _f(x, fmt: str = "{:.1f}") -> str:
    return "-" if x is None else fmt.format(x)


def memory_tables(con: Console, doc: dict) -> None:
    """A `bench memory` result as tables: the summary per node, each node's latency,
    bandwidth and loaded-latency curves, the copy reference, the CPU x memory matrix."""
    _memory_summary(con, doc)
    for n, e in doc["figures"]["nodes"].items():
        _node_tables(con, doc, n, e)
    ref = doc["figures"].get("reference") or {}
    for n, r in ref.items():
        # the two medians come from different moments of a shared machine; the ratio is the
        # median of pairs taken side by side, so it need not be their quotient
        con.print(f"node {n}: copy, 1 thread {r['copy_1thread_gbps']:.1f} GB/s, numpy copy "
                  f"{r['numpy_copy_gbps']:.1f} GB/s (medians); side-by-side pairs: cxlkit / "
                  f"numpy {r['ratio']:.2f}, on-CPU {r['oncpu_ratio']:.2f} (medians of the "
                  "pairs' ratios)")
    _matrix_table(con, doc)


def _memory_summary(con: Console, doc: dict) -> None:
    from ..bench.memory import KINDS
    from ..bench.weights import weights_from

    con.print(f"memory per node — {doc['machine']['cpu']}, Linux {doc['kernel']}",
              highlight=False)
    t = T.table(caption="idle: latency ns; read..nt_write: peak GB/s", caption_justify="left")
    T.num(t, "node")
    t.add_column("kind", no_wrap=True)
    T.text(t, "CPUs")
    for c in ("idle", *KINDS, "weight"):
        T.num(t, c)
    nodes = doc["figures"]["nodes"]
    try:
        w = weights_from(doc)
    except ValueError:
        w = {}
    for n, e in nodes.items():
        lat = e["latency"][-1]["ns"] if e["latency"] else None
        t.add_row(n, e["kind"], ",".join(map(str, e["initiator_cpus"])), _f(lat),
                  *(_f(e["peak_gbps"].get(k)) for k in KINDS), str(w.get(int(n), "-")))
    con.print(t)
    for n, e in nodes.items():
        h = e.get("hmat")
        if h:  # the firmware's figures beside ours (emulated in a VM: compare, don't trust)
            con.print(f"node {n} HMAT (firmware): read latency {_f(h['read_latency_ns'], '{}')} ns, "
                      f"read bandwidth {_f(h['read_bandwidth_mbps'], '{}')} MB/s, write bandwidth "
                      f"{_f(h['write_bandwidth_mbps'], '{}')} MB/s")


def _node_tables(con: Console, doc: dict, n: str, e: dict) -> None:
    from ..bench.memory import KINDS

    t = T.table(f"node {n}: latency")
    T.num(t, "buffer")
    T.num(t, "ns/load")
    for p in e["latency"]:
        t.add_row(_size(p["bytes"]), _f(p["ns"]))
    con.print(t)
    t = T.table(f"node {n}: bandwidth GB/s by threads", caption="median (on-CPU "
                "estimate)", caption_justify="left")
    T.num(t, "threads")
    for k in KINDS:
        T.num(t, k)
    counts = sorted({p["threads"] for k in KINDS for p in e["bandwidth"][k]})
    for c in counts:
        row = [str(c)]
        for k in KINDS:
            p = next((p for p in e["bandwidth"][k] if p["threads"] == c), None)
            row.append("-" if p is None else
                       f"{p['gbps']:.1f} ({_f(p.get('oncpu_gbps'))})")
        t.add_row(*row)
    con.print(t)
    if e.get("loaded_latency"):
        t = T.table(f"node {n}: loaded latency ({doc['parameters']['loaded_kind']} load)")
        for c in ("target GB/s", "reached GB/s", "ns/load"):
            T.num(t, c)
        for p in e["loaded_latency"]:
            tgt = "none" if p["target_gbps"] == 0 else (
                "max" if p["target_gbps"] is None else _f(p["target_gbps"]))
            t.add_row(tgt, _f(p["gbps"]), _f(p["ns"]))
        con.print(t)
    elif e.get("loaded_latency_note"):
        con.print(f"node {n}: loaded latency not measured: {e['loaded_latency_note']}")


def _matrix_table(con: Console, doc: dict) -> None:
    m = doc["figures"].get("matrix")
    if m:
        t = T.table("CPU node x memory node: latency ns / read GB/s")
        t.add_column("CPUs of", no_wrap=True)
        for mn in m["mem_nodes"]:
            T.num(t, f"mem {mn}")
        for i, cn in enumerate(m["cpu_nodes"]):
            t.add_row(f"node {cn}", *(f"{_f(m['latency_ns'][i][j])} / {_f(m['read_gbps'][i][j])}"
                                      for j in range(len(m["mem_nodes"]))))
        con.print(t)
    elif doc["figures"].get("matrix_note"):
        con.print(f"matrix: {doc['figures']['matrix_note']}")


def _size(n: int) -> str:
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div:
            return f"{n / div:g} {unit}"
    return f"{n} B"


@bench_app.command("memory")
def memory_cmd(
    quick: bool = typer.Option(False, "--quick", help="fewer sizes and repetitions (< 1 min)"),
    nodes: Optional[str] = typer.Option(None, "--nodes", help="memory nodes to measure, e.g. 0,1"),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="write the JSON result here"),
    as_json: bool = typer.Option(False, "--json", help="print the JSON result, no tables"),
    plots: Optional[Path] = typer.Option(None, "--plots", help="write PNG plots to this folder "
                                         "(made if its parent exists)"),
    hugepages: bool = typer.Option(True, "--hugepages/--no-hugepages",
                                   help="ask for transparent huge pages (madvise) on buffers"),
    threads: Optional[str] = typer.Option(None, "--threads",
                                          help="thread counts to sweep, e.g. 1,2,4 (default 1..N)"),
    load_kind: str = typer.Option("read", "--load-kind",
                                  help="what loaded-latency generators do: read|write|copy|nt_write"),
    reps: Optional[int] = typer.Option(None, "--reps", help="repetitions per figure (median)"),
    matrix: bool = typer.Option(True, "--matrix/--no-matrix", help="CPU x memory node matrix"),
) -> None:
    """Latency, bandwidth (thread sweep), loaded latency per node, and the cross-node matrix."""
    from ..bench import memory as BM

    counts = _thread_counts(threads)
    _check_outputs(out, plots)  # before the measurement, not after it
    con = Console(stderr=as_json)
    try:
        over: dict = {"hugepages": hugepages, "loaded_kind": load_kind}
        if counts is not None:
            over["thread_counts"] = counts
        if reps is not None:
            over["reps"] = reps
        cfg = BM.settings(quick, **over)
        with LoadMeter() as lm:
            doc = _run_with_bar(con, as_json, lambda cb: BM.run(
                _nodes(nodes), config=cfg, progress=cb, matrix=matrix))
        doc["load"] = lm.load.to_dict()
    except (ValueError, KeyError) as e:
        _fail(one_line(e))
    except OSError as e:
        _fail(f"measurement failed: {one_line(e)}")
    _report(con, doc, as_json, out, plots, memory_tables, "plot_memory")


def copy_tables(con: Console, doc: dict) -> None:
    for p in doc["figures"]["pairs"]:
        t = T.table(f"copy node {p['src']} -> node {p['dst']} (CPU "
                    f"{doc['parameters']['cpu']})", caption="GB/s (ns per copy)",
                    caption_justify="left")
        T.num(t, "size")
        methods = [m for m, pts in p["methods"].items() if pts]
        for m in methods:
            T.num(t, m)
        for i, pt in enumerate(p["methods"][methods[0]]):
            t.add_row(_size(pt["bytes"]), *(
                f"{p['methods'][m][i]['gbps']:.2f} ({p['methods'][m][i]['ns_per_copy']:.0f})"
                for m in methods))
        con.print(t)
    g = doc["figures"].get("gpu")
    if g is None:
        return
    if not g["available"]:
        con.print(f"GPU copies: {g['reason']}")
        return
    t = T.table(f"GPU copies, {_size(g['bytes'])} per device (GB/s)")
    for c in ("host node", "device", "pinned", "host->device", "device->host"):
        T.num(t, c)
    for r in g["rows"]:
        t.add_row(str(r["node"]), str(r["device"]), "yes" if r["pinned"] else "no",
                  _f(r["h2d_gbps"]), _f(r["d2h_gbps"]))
    con.print(t)


@bench_app.command("copy")
def copy_cmd(
    quick: bool = typer.Option(False, "--quick", help="fewer sizes and repetitions"),
    nodes: Optional[str] = typer.Option(None, "--nodes",
                                        help="memory nodes; every ordered pair of them is run"),
    cpu: Optional[int] = typer.Option(None, "--cpu", help="CPU of the copying thread"),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="write the JSON result here"),
    as_json: bool = typer.Option(False, "--json", help="print the JSON result, no tables"),
    plots: Optional[Path] = typer.Option(None, "--plots", help="write PNG plots to this folder "
                                         "(made if its parent exists)"),
    gpu: bool = typer.Option(True, "--gpu/--no-gpu", help="the GPU copy matrix (needs CUDA)"),
) -> None:
    """memcpy, non-temporal, copy+flush and invalidate+copy per node pair and size; GPU copies."""
    from ..bench import copy as BC

    _check_outputs(out, plots)  # before the measurement, not after it
    con = Console(stderr=as_json)
    try:
        ns = _nodes(nodes)
        pairs = None if ns is None else [(s, d) for s in ns for d in ns]
        backend = _cuda_copier() if gpu else None
        with LoadMeter() as lm:
            doc = _run_with_bar(con, as_json, lambda cb: BC.run(
                pairs, quick=quick, cpu=cpu, progress=cb, gpu=gpu, gpu_backend=backend))
        doc["load"] = lm.load.to_dict()
    except (ValueError, KeyError) as e:
        _fail(one_line(e))
    except OSError as e:
        _fail(f"measurement failed: {one_line(e)}")
    _report(con, doc, as_json, out, plots, copy_tables, "plot_copy")


def _cuda_copier():
    """The torch.cuda copier when a CUDA runtime and torch with CUDA are both here, else None
    (the GPU matrix then says why)."""
    from .. import _native

    if not _native.pin_available():
        return None
    try:
        from ..integrations.cuda import torch_copier
    except ImportError:
        return None
    return torch_copier()


def run_demo(console: Console) -> None:
    """The demo's section: a quick latency and read-bandwidth figure per node, and the
    weighted-interleave weights cxlkit would use from them (beside the kernel's)."""
    from .. import topology
    from ..bench import memory as BM
    from ..bench.weights import weights_from

    t = T.table("memory per node (quick: 64 MiB chase, read with every initiator CPU)")
    for c in ("node", "kind", "CPUs", "latency ns", "read GB/s"):
        T.num(t, c)
    bws = {}
    for f in BM.M.nodes():
        cpus = list(f.initiator_cpus)
        with BM.place(64 << 20, f.node, hugepages=True) as buf:
            ns = BM._median(BM.chase_latency(buf, cpu=cpus[0], target_s=0.03, reps=3))
            bw = BM._median(BM.bandwidth(buf, None, "read", len(cpus), cpus, target_s=0.03,
                                         reps=3)) / 1e9
        bws[f.node] = bw
        t.add_row(str(f.node), f.kind, ",".join(map(str, cpus)), f"{ns:.1f}", f"{bw:.1f}")
    console.print(t)
    w = weights_from(bws)
    kw = topology.weighted_interleave_weights()
    cur = "kernel has no weighted interleave" if kw is None else \
        ", ".join(f"{n}:{kw.get(n, 1)}" for n in w)
    console.print("weighted-interleave weights from read bandwidth: "
                  + ", ".join(f"{n}:{v}" for n, v in w.items()) + f"  (kernel now: {cur})")
