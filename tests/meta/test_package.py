"""The package's public face: a light import path and an honest __all__."""
from __future__ import annotations

import subprocess
import sys

import cxlkit

HEAVY = ("torch", "transformers", "matplotlib", "rich", "typer")


def test_import_cxlkit_imports_no_heavy_dependency():
    code = ("import sys, cxlkit\n"
            f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == ""


def test_every_name_in___all___exists():
    for name in cxlkit.__all__:
        assert hasattr(cxlkit, name), name


def test_version_matches_the_native_library():
    assert cxlkit.__version__ == cxlkit._native.version() == "0.1.0"
