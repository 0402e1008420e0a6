"""Run a bench/ script in the test's own process (torch and cxlkit are loaded once for the
session, not once per child): its main with the given argv, its output captured. Used by the
default suite's tiny runs of the benchmark scripts; their full runs (`make bench`) start the
scripts as a user does, in processes of their own."""
from __future__ import annotations

import contextlib
import io
import runpy
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[1] / "bench"


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


def load(script: str) -> ModuleType:
    """bench/<script> as a module (a script, not a package): its functions, main not run."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(Path(script).stem, BENCH / script)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run(script: str, *args: str) -> Result:
    """`python bench/<script> args...` in this process: the exit status as the interpreter
    gives it (sys.exit("why") or an uncaught exception: 1 with the why or the traceback on
    stderr), torch's thread count restored."""
    try:  # loaded first, so that the thread count the script may change is known
        import torch
    except ImportError:
        torch = None
    threads = torch.get_num_threads() if torch else None
    out, err = io.StringIO(), io.StringIO()
    argv = sys.argv
    sys.argv = [str(BENCH / script), *args]
    rc = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                runpy.run_path(str(BENCH / script), run_name="__main__")
            except SystemExit as e:
                if isinstance(e.code, str):
                    print(e.code, file=sys.stderr)
                    rc = 1
                else:
                    rc = e.code or 0
            except Exception:  # as the interpreter ends on one: the traceback, status 1
                traceback.print_exc()
                rc = 1
    finally:
        sys.argv = argv
        if torch is not None:
            torch.set_num_threads(threads)
    return Result(rc, out.getvalue(), err.getvalue())
