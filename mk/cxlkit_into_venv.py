"""Make the cxlkit of this interpreter's venv (.venv: `make build`'s editable install) importable
in another venv, with nothing else of .venv: a .pth there runs .venv's editable import hook by
its path, so an engine's environment (mk/vllm.mk, mk/deepspeed.mk) uses the build `make build`
compiled instead of compiling the C++ core again, and keeps its own packages.

    .venv/bin/python mk/cxlkit_into_venv.py .venv-vllm/bin/python

Checks, with the other venv's interpreter, that cxlkit and its native module then import from
this checkout; exit 1 saying why otherwise.
"""
from __future__ import annotations

import re
import subprocess
import sys
import sysconfig
from pathlib import Path

PTH = "zz-cxlkit-from-venv.pth"
CHECK = ("import cxlkit, cxlkit._native as n, sys; "
         "sys.stdout.write(cxlkit.__file__ + '\\n' + n.__file__ + '\\n')")


def editable_hook(site: Path) -> tuple[Path, list[str]]:
    """The module an editable install's .pth imports (scikit-build-core writes one per
    project), and the directories that .pth puts on sys.path."""
    for pth in sorted(site.glob("*cxlkit*.pth")):
        lines = pth.read_text().splitlines()
        names = [m[1] for ln in lines for m in [re.fullmatch(r"import (\w+)\s*", ln)] if m]
        if names and (site / f"{names[0]}.py").is_file():
            dirs = [ln for ln in lines if ln.startswith("/") and Path(ln).is_dir()]
            return site / f"{names[0]}.py", dirs
    raise SystemExit(f"{site}: no editable cxlkit install (run make build)")


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        raise SystemExit(f"usage: {sys.argv[0]} OTHER_VENV/bin/python")
    other = argv[0]
    hook, dirs = editable_hook(Path(sysconfig.get_paths()["purelib"]))
    # a cxlkit installed there before (its own build) would shadow this one's hook
    if subprocess.run([other, "-m", "pip", "show", "-q", "cxlkit"],
                      capture_output=True).returncode == 0:
        subprocess.run([other, "-m", "pip", "uninstall", "-y", "-q", "cxlkit"], check=True)
    dest = subprocess.run([other, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    # the hook in one line (site runs a .pth line that starts with "import"), then the
    # editable install's own directories
    (Path(dest) / PTH).write_text(
        f"import importlib.util as u; s = u.spec_from_file_location({hook.stem!r}, "
        f"{str(hook)!r}); s.loader.exec_module(u.module_from_spec(s))\n"
        + "".join(f"{d}\n" for d in dirs))
    r = subprocess.run([other, "-c", CHECK], capture_output=True, text=True)
    src = Path(__file__).resolve().parents[1] / "src" / "cxlkit"
    if r.returncode != 0 or not r.stdout.startswith(str(src)):
        print(f"{other}: cxlkit does not import from {src} through {dest}/{PTH}:\n"
              f"{r.stdout}{r.stderr[-2000:]}", file=sys.stderr)
        return 1
    print(f"{other}: cxlkit from {src}, its native module {r.stdout.split()[1]}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except (OSError, subprocess.CalledProcessError) as e:
        sys.exit(f"{sys.argv[1:]}: {e}; build that venv first (its stamp target)")
