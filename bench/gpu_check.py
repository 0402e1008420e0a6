"""GPU check (`make gpu-check`): every cxlkit GPU path run once, in minutes, on a machine with a
CUDA device: host<->GPU copies by source tier (pinned by cxlkit's hook vs pageable), a
TieredAdamW training step against torch's CPU-offload pattern, PrefixCache TTFT (pooled hit vs
recompute), the vLLM connector's staging copies (byte for byte), the `gpu`-marked tests.
Without CUDA the same command runs the CPU halves (the same code with CPU tensors), names what
it skipped and why, and exits 0. cxlkit is built from this tree when it does not import.

    python3 bench/gpu_check.py [--device auto|cuda|cpu] [--sizes auto|full|cpu|tiny]
        [--budget-s 480] [--parts vllm_staging,train,prefix_cache,gpu_tests,copy]
        [--out FILE] [--build auto|always|never]

Writes one JSON document (--out, else $OUT/gpu-check.json when OUT is set, else
build/gpu-check/gpu-check.json) and prints a summary. Each part has a time budget (BUDGETS,
cut to what is left of --budget-s, which the build counts against); a part that finds its
time spent stops and says what it did not run, one that finds none left is skipped. Exit 1
when a check failed, a part raised or cxlkit did not build; 2 for a bad argument.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
SITE = REPO / "build" / "gpu-check" / "site"  # where a build from this tree is installed
ORDER = ("vllm_staging", "train", "prefix_cache", "gpu_tests", "copy")
BUDGETS = {"vllm_staging": 45, "train": 90, "prefix_cache": 90, "gpu_tests": 90, "copy": 150}
MIN_PART_S = 10  # below this a part is skipped rather than started
DOC_VERSION = 1


class Skipped(Exception):
    """A part that cannot run here; the message says why."""


# ---- cxlkit from this tree ----

def cxlkit_problem() -> str | None:
    """None when `import cxlkit` gives this tree's package with its native module (the
    editable install of `make build`, or a build in SITE); else why not."""
    try:
        import cxlkit
        import cxlkit._native  # noqa: F401
    except ImportError as e:
        return f"cxlkit does not import ({e})"
    path = Path(cxlkit.__file__).resolve()
    if not (path.is_relative_to(REPO / "src") or path.is_relative_to(SITE)):
        return f"cxlkit imports from {path.parent}, not from this tree"
    return None


def build(timeout_s: float) -> dict:
    """pip-installs this tree into SITE with the running python and the build tools already
    there (no download: --no-build-isolation --no-deps); CMake's build folder is build/<tag>
    (pyproject.toml), so a second build is incremental."""
    cmd = [sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-deps",
           "--upgrade", "--target", str(SITE), str(REPO)]
    log = SITE.parent / "build.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    try:
        r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True,
                           timeout=max(1.0, timeout_s))
        text, rc = r.stdout + r.stderr, r.returncode
    except subprocess.TimeoutExpired as e:
        text, rc = f"{e.stdout or ''}{e.stderr or ''}\nkilled after {timeout_s:.0f} s", -1
    log.write_text(text if isinstance(text, str) else text.decode(errors="replace"))
    out = {"ok": rc == 0, "seconds": round(time.monotonic() - t0, 1), "command": " ".join(cmd),
           "log": str(log)}
    if rc != 0:
        out["log_tail"] = str(text)[-3000:]
    return out


# ---- the parts ----

def run_gpu_tests(ctx: Any) -> dict:
    """The tests marked `gpu`, in the files that mark any, with the pytest found here."""
    if ctx.device != "cuda":
        raise Skipped(f"device {ctx.device}: the gpu-marked tests need a CUDA device")
    try:
        import pytest  # noqa: F401
    except ImportError:
        raise Skipped("pytest is not installed here") from None
    files = [str(p.relative_to(REPO)) for p in sorted((REPO / "tests").rglob("test_*.py"))
             if "mark.gpu" in p.read_text()]
    cmd = [sys.executable, "-m", "pytest", "-q", "-rs", "-m", "gpu", "-p", "no:cacheprovider",
           *files]
    try:
        r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True,
                           timeout=max(1.0, ctx.left()))
    except subprocess.TimeoutExpired:
        return {"files": files, "stopped": f"time budget spent: pytest killed after "
                                           f"{max(1.0, ctx.left()):.0f} s"}
    counts = {k: int(n) for n, k in re.findall(
        r"(\d+) (passed|failed|skipped|errors?|deselected|xfailed|xpassed)", r.stdout)}
    ok = r.returncode == 0 and counts.get("passed", 0) > 0
    return {"files": files, "command": " ".join(cmd), "returncode": r.returncode,
            "counts": counts, "output_tail": (r.stdout + r.stderr)[-3000:],
            "checks": [{"name": "gpu-marked tests pass", "ok": ok,
                        "detail": ", ".join(f"{n} {k}" for k, n in counts.items())}]}


def status_of(res: dict) -> str:
    if any(not c["ok"] for c in res.get("checks", [])):
        return "failed"
    return "partial" if res.get("stopped") else "ok"


def run_part(name: str, fn: Any, ctx: Any, budget: float) -> dict:
    t0 = time.monotonic()
    try:
        res = fn(ctx)
        res["status"] = status_of(res)
    except Skipped as e:
        res = {"status": "skipped", "reason": str(e)}
    except Exception as e:  # noqa: BLE001 - one part's failure is reported, the rest run
        res = {"status": "failed", "error": f"{type(e).__name__}: {e}",
               "traceback": traceback.format_exc()[-3000:]}
    if ctx.skipped:
        res["skipped"] = list(ctx.skipped)
    res["budget_s"] = round(budget, 1)
    res["elapsed_s"] = round(time.monotonic() - t0, 2)
    return res


def environment(device: str) -> dict:
    import torch

    import cxlkit
    from cxlkit import _native

    env = {"python": platform.python_version(), "torch": torch.__version__,
           "torch_cuda": torch.version.cuda, "device": device,
           "cxlkit": _native.version(), "cxlkit_python": str(Path(cxlkit.__file__).parent),
           "cxlkit_native": _native.__file__,
           "pin_available": bool(_native.pin_available()),
           "cublas_workspace_config": os.environ.get("CUBLAS_WORKSPACE_CONFIG")}
    if device == "cuda":
        env.update(device_name=torch.cuda.get_device_name(0),
                   device_count=torch.cuda.device_count())
    try:
        env["commit"] = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, text=True,
                                       capture_output=True, timeout=10).stdout.strip() or None
    except (OSError, subprocess.TimeoutExpired):
        env["commit"] = None
    return env


def run_all(args: argparse.Namespace, start: float, doc: dict) -> None:
    import torch

    import gpu_models as M
    import gpu_parts as G

    has = torch.cuda.is_available()
    if args.device == "cuda" and not has:
        raise SystemExit("--device cuda: torch sees no CUDA device (torch.cuda.is_available() "
                         "is False); use --device auto or cpu")
    device = "cuda" if args.device == "cuda" or (args.device == "auto" and has) else "cpu"
    sizes = args.sizes if args.sizes != "auto" else ("full" if device == "cuda" else "cpu")
    doc.update(device=device, sizes=sizes, environment=environment(device))
    if device == "cpu":
        why = ("--device cpu" if args.device == "cpu" else "no CUDA device here "
               f"(torch {torch.__version__}, built with CUDA {torch.version.cuda})")
        doc["skipped"].append({"part": "all", "what": "every GPU half (each part runs with "
                               "CPU tensors)", "reason": why})
    fns = {"vllm_staging": G.run_vllm_staging, "train": M.run_train,
           "prefix_cache": M.run_prefix_cache, "gpu_tests": run_gpu_tests, "copy": G.run_copy}
    for name in args.parts:
        left = args.budget_s - (time.monotonic() - start)
        if left < MIN_PART_S:
            doc["parts"][name] = {"status": "skipped", "reason": f"time budget spent: {left:.0f}"
                                  f" s of {args.budget_s:.0f} left, a part needs {MIN_PART_S}"}
            continue
        budget = min(BUDGETS[name], left)
        ctx = G.Ctx(device, G.PRESETS[sizes], time.monotonic() + budget)
        doc["parts"][name] = run_part(name, fns[name], ctx, budget)


# ---- the document and its summary ----

def new_doc(args: argparse.Namespace) -> dict:
    return {"kind": "gpu-check", "version": DOC_VERSION,
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "budget_s": args.budget_s, "parts": {}, "skipped": [], "build": None}


def finish(doc: dict) -> None:
    """Every skip in one list: whole parts, and what a part left out."""
    for name, res in doc["parts"].items():
        if res["status"] == "skipped":
            doc["skipped"].append({"part": name, "what": "the whole part",
                                   "reason": res["reason"]})
        for s in res.get("skipped", []):
            doc["skipped"].append({"part": name, **s})
        if res.get("stopped"):
            doc["skipped"].append({"part": name, "what": "the rest of the part",
                                   "reason": res["stopped"]})


def _gb(x: Any) -> str:
    return "-" if x is None else f"{x:.2f}"


def _copy_line(res: dict) -> list[str]:
    out = []
    for arm in res.get("tiers", []):
        rows = arm.get("rows", [])
        if not rows:
            continue
        big = max(r["bytes"] for r in rows)
        at = {r["streams"]: r for r in rows if r["bytes"] == big}
        parts = [f"x{k} {_gb(r['h2d_gbps'])}/{_gb(r['d2h_gbps'])}" for k, r in sorted(at.items())]
        out.append(f"{arm['tier']} {'pinned' if arm['pinned'] else 'pageable'}, "
                   f"{big >> 10} KiB, h2d/d2h GB/s: " + ", ".join(parts))
    return out


def _train_line(res: dict) -> list[str]:
    out = []
    for r in res.get("runs", []):
        a, b = r["cxlkit"], r["torch_cpu_offload"]
        d = r.get("masters_after_step1", {})
        out.append(f"{r['dtype']} {r['params'] / 1e6:.2f}M params: TieredAdamW {a['step_ms']} ms"
                   f"/step (optimizer {a['opt_ms']}) vs torch CPU offload {b['step_ms']} ms "
                   f"(optimizer {b['opt_ms']}); step-1 masters differ by at most "
                   f"{d.get('of_tolerance', float('nan')):.2g} of the tolerance")
    return out


def _prefix_line(res: dict) -> list[str]:
    return [f"{r['tokens']} tokens: hit {r['hit_ms']} ms vs recompute {r['recompute_ms']} ms "
            f"(x{r['hit_over_recompute']}; {r['pooled_tokens']} pooled)"
            for r in res.get("runs", [])]


def _vllm_line(res: dict) -> list[str]:
    if "save_gbps" not in res:
        return []
    return [f"{res['blocks']} blocks of {res['block_bytes'] / 2**20:.2f} MiB: save "
            f"{res['save_gbps']} GB/s, load {res['load_gbps']} GB/s, staging pinned: "
            f"{res['staging_pinned']}"]


def _tests_line(res: dict) -> list[str]:
    c = res.get("counts")
    return [", ".join(f"{n} {k}" for k, n in c.items()) or "no tests ran"] if c is not None else []


LINES = {"copy": _copy_line, "train": _train_line, "prefix_cache": _prefix_line,
         "vllm_staging": _vllm_line, "gpu_tests": _tests_line}


def summary_lines(doc: dict) -> list[str]:
    env = doc.get("environment") or {}
    where = env.get("device_name") or doc.get("device") or "?"
    out = [f"cxlkit GPU check on {doc.get('device', '?')} ({where}; torch "
           f"{env.get('torch', '?')}, CUDA {env.get('torch_cuda')}): budget "
           f"{doc['budget_s']:.0f} s, took {doc.get('elapsed_s', 0):.0f} s"]
    b = doc.get("build")
    if b:
        out.append(f"  {'build':<12} {'ok' if b['ok'] else 'failed':<7} {b['seconds']:>6.1f} s"
                   f"  {b['log']}")
    failed = []
    for name, res in doc["parts"].items():
        out.append(f"  {name:<12} {res['status']:<7} {res.get('elapsed_s', 0):>6.1f} s")
        out += [f"      {line}" for line in LINES[name](res)]
        if res.get("error"):
            failed.append(f"{name}: raised {res['error']}")
        failed += [f"{name}: {c['name']}" + (f" ({c['detail']})" if c["detail"] else "")
                   for c in res.get("checks", []) if not c["ok"]]
    if failed:
        out.append("failed:")
        out += [f"  {f}" for f in failed]
    if doc["skipped"]:
        out.append("skipped:")
        out += [f"  {s['part']}: {s['what']}: {s['reason']}" for s in doc["skipped"]]
    if doc.get("out"):
        out.append(f"JSON: {doc['out']}")
    return out


def exit_code(doc: dict) -> int:
    bad = doc.get("build") and not doc["build"]["ok"]
    return 1 if bad or any(r["status"] == "failed" for r in doc["parts"].values()) else 0


def out_path(args: argparse.Namespace) -> Path:
    if args.out:
        return Path(args.out)
    if os.environ.get("OUT"):
        return Path(os.environ["OUT"]) / "gpu-check.json"
    return REPO / "build" / "gpu-check" / "gpu-check.json"


def write(doc: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    doc["out"] = str(path)
    path.write_text(json.dumps(doc, indent=1) + "\n")


# ---- the command ----

def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    ap.add_argument("--sizes", choices=("auto", "full", "cpu", "tiny"), default="auto",
                    help="auto: full on a GPU, cpu without one (tiny: the tests)")
    ap.add_argument("--budget-s", type=float, default=480.0, help="for everything, the build too")
    ap.add_argument("--parts", default=",".join(ORDER))
    ap.add_argument("--out", default=None)
    ap.add_argument("--build", choices=("auto", "always", "never"), default="auto")
    ap.add_argument("--build-info", default=None, help=argparse.SUPPRESS)  # the parent's build
    args = ap.parse_args(argv)
    args.parts = [p for p in args.parts.split(",") if p]
    unknown = [p for p in args.parts if p not in ORDER]
    if unknown or not args.parts:
        ap.error(f"--parts {','.join(unknown) or '(none)'}: expected some of {','.join(ORDER)}")
    if args.budget_s < 0:
        ap.error(f"--budget-s {args.budget_s}: expected >= 0")
    return args


def rerun_with_build(args: argparse.Namespace, info: dict, left: float) -> int:
    """This script again in a child that imports the build in SITE."""
    info_path = SITE.parent / "build-info.json"
    info_path.write_text(json.dumps(info))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(SITE)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    cmd = [sys.executable, str(Path(__file__).resolve()), "--device", args.device,
           "--sizes", args.sizes, "--budget-s", f"{max(0.0, left):.1f}",
           "--parts", ",".join(args.parts), "--build", "never", "--build-info", str(info_path)]
    if args.out:
        cmd += ["--out", args.out]
    return subprocess.run(cmd, cwd=REPO, env=env).returncode


def main(argv: list[str] | None = None) -> int:
    start = time.monotonic()
    args = parse_args(argv)
    # cuBLAS gives the same bits run to run only with a fixed workspace (read at its first use)
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # gpu_parts, gpu_models
    doc = new_doc(args)
    problem = cxlkit_problem() if args.build != "always" else "--build always"
    if problem and args.build != "never":
        info = build(args.budget_s)
        info["why"] = problem
        if info["ok"]:
            return rerun_with_build(args, info, args.budget_s - (time.monotonic() - start))
        doc["build"] = info
        for name in args.parts:
            doc["parts"][name] = {"status": "skipped", "reason": "cxlkit did not build"}
    elif problem:
        raise SystemExit(f"--build never: {problem}")
    else:
        if args.build_info:
            doc["build"] = json.loads(Path(args.build_info).read_text())
            doc["budget_s"] += doc["build"]["seconds"]  # the parent's whole budget
        run_all(args, start, doc)
    finish(doc)
    doc["elapsed_s"] = round(time.monotonic() - start + (doc["build"] or {}).get("seconds", 0), 1)
    write(doc, out_path(args))
    print("\n".join(summary_lines(doc)), flush=True)
    return exit_code(doc)


if __name__ == "__main__":
    sys.exit(main())
