"""Helpers of the preload tests (tests/placement/test_preload*.py, tests/vm/test_vm_preload.py): build
tests/preload/alloc_prog.c, start it under libcxlkit_preload.so, read what it reports."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / "build" / "preload-test"


def build(name: str, tmp_dir: Path) -> Path:
    """tests/preload/NAME.c compiled: build/preload-test/NAME when newer than its source (the
    guest sees the host's tree read-only), else compiled into tmp_dir."""
    src = ROOT / "tests" / "preload" / f"{name}.c"
    cached = CACHE / name
    if cached.exists() and cached.stat().st_mtime >= src.stat().st_mtime:
        return cached
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise RuntimeError(f"no C compiler (cc) to build {src}")
    for out_dir in (CACHE, tmp_dir):
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
            out = out_dir / name
            subprocess.run([cc, "-O1", "-pthread", "-o", str(out), str(src)], check=True)
            return out
        except (OSError, subprocess.CalledProcessError):
            continue
    raise RuntimeError(f"cannot build {src}")


def alloc_prog(tmp_dir: Path) -> Path:
    """tests/preload/alloc_prog.c compiled (build())."""
    return build("alloc_prog", tmp_dir)


@dataclass
class Block:
    who: str  # "parent" / "child"
    name: str
    address: int
    nbytes: int


@dataclass
class Started:
    """A program started under the library, stopped at its "ready" line(s)."""

    proc: subprocess.Popen
    blocks: list[Block] = field(default_factory=list)
    pids: dict[str, int] = field(default_factory=dict)

    def finish(self, timeout: float = 60) -> tuple[int, str]:
        """Let it exit (a line to each waiting process); (exit code, stderr)."""
        _, err = self.proc.communicate("\n\n", timeout=timeout)
        return self.proc.returncode, err


def start(cmd: list[str], env: dict[str, str], readies: int = 1) -> Started:
    """Run cmd (alloc_prog or something that execs it) and read its report up to `readies`
    "ready" lines (2 with a fork step: the child reports first)."""
    proc = subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    s = Started(proc)
    while len(s.pids) < readies:
        line = proc.stdout.readline()
        if not line:
            _, err = proc.communicate(timeout=30)
            raise AssertionError(f"{cmd} ended (rc {proc.returncode}) before ready: {err}")
        who, what, *rest = line.split()
        if what == "ready":
            s.pids[who] = int(rest[0])
        else:
            s.blocks.append(Block(who, what, int(rest[0], 16), int(rest[1])))
    return s


def preload_env(stripe: str | None, log: Path | str | None = None, **extra: str) -> dict:
    """os.environ plus the library in LD_PRELOAD and its configuration (stripe None: unset)."""
    from cxlkit.placement import preload as PL

    env = dict(os.environ)
    env.pop("CXLKIT_STRIPE", None)
    env["LD_PRELOAD"] = str(PL.library_path())
    if stripe is not None:
        env["CXLKIT_STRIPE"] = stripe
    if log is not None:
        env["CXLKIT_PRELOAD_LOG"] = str(log)
    env.update(extra)
    return env


_LINE = re.compile(r"^cxlkit-preload\[(\d+)\]: (\w+):? (.*)$")


def log_lines(text: str) -> list[tuple[int, str, str]]:
    """(pid, verb, rest) of every library line in `text`."""
    out = []
    for line in text.splitlines():
        m = _LINE.match(line)
        if m:
            out.append((int(m.group(1)), m.group(2), m.group(3)))
    return out


_PLACE = re.compile(r"^(\w+) 0x([0-9a-f]+)\+(\d+): (\d+) runs, bytes per node (.*)$")


def placements(text: str) -> list[dict]:
    """Each "place" line: pid, what, start, nbytes, runs, {node: bytes}."""
    out = []
    for pid, verb, rest in log_lines(text):
        if verb != "place":
            continue
        m = _PLACE.match(rest)
        assert m, rest
        per = dict(tuple(map(int, x.split(":"))) for x in m.group(5).split())
        out.append({"pid": pid, "what": m.group(1), "start": int(m.group(2), 16),
                    "nbytes": int(m.group(3)), "runs": int(m.group(4)), "per_node": per})
    return out


def python() -> str:
    return sys.executable
