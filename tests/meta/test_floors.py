"""The floors hold (DESIGN.md, docs/architecture.md): every import inside the cxlkit package
points down or sideways within its floor, never up; torch and the other engines are imported
only under cxlkit.integrations (and lazily, inside functions, by the train and kv workloads);
`import cxlkit` loads neither an engine nor the benchmarks."""
import ast
import subprocess
import sys
from pathlib import Path

import pytest

import cxlkit

PKG = Path(cxlkit.__file__).parent
# Python floors, lowest first (docs/architecture.md keeps this table). A module may import its
# own floor or one below it. The python core is ordered inside: the leaves, then topology,
# placement, the pool, sizing (node facts from topology), then the benchmarks over them all.
FLOORS = [
    ("core: leaves", {"_native", "_config", "errors", "units", "_views", "testing", "audit"}),
    ("core: topology", {"topology"}),
    ("core: placement", {"policy", "preload", "preload_registry", "tiering"}),
    ("core: pool", {"pool", "pool_upgrade"}),
    ("core: sizing", {"plan"}),
    ("core: measurements", {"bench"}),
    ("workloads", {"train", "kv", "msg", "rpc", "_waitpolicy"}),
    ("integrations", {"integrations"}),
    ("cli", {"cli", "__main__"}),
]
ENGINES = {"torch", "transformers", "vllm", "deepspeed", "mpi4py", "accelerate"}
# Landed from another branch while issue 11 was open: its torch half moves to integrations/
# (as cli/train.py's demo moved to integrations/demo.py); the integrator drops it from here.
PENDING_ENGINE_IMPORTS: dict[str, str] = {}  # module -> the branch cleaning it


def floor_of(parts: tuple[str, ...]) -> int:
    """Floor index of the module cxlkit.<parts...> (the package itself is the public face)."""
    if not parts:
        return len(FLOORS)  # cxlkit/__init__: imports from any floor it re-exports
    for i, (_, names) in enumerate(FLOORS):
        if parts[0] in names:
            return i
    raise AssertionError(f"cxlkit.{'.'.join(parts)} is in no floor: add it to FLOORS and to "
                         "docs/architecture.md")


def module_parts(path: Path) -> tuple[str, ...]:
    rel = path.relative_to(PKG).with_suffix("")
    parts = rel.parts
    return parts[:-1] if parts[-1] == "__init__" else parts


def imports(path: Path):
    """(imported module as a tuple of names relative to cxlkit or None for a third-party one,
    its top-level name, whether the import runs at module import time, line)."""
    tree = ast.parse(path.read_text(), str(path))
    me = module_parts(path)
    pkg = me if path.name == "__init__.py" else me[:-1]
    top_level = {id(n) for n in tree.body}
    for node in tree.body:  # statements nested in if/try at module level also run at import
        if isinstance(node, (ast.If, ast.Try)):
            top_level |= {id(n) for n in ast.walk(node)}
    for node in ast.walk(tree):
        eager = id(node) in top_level
        if isinstance(node, ast.Import):
            for a in node.names:
                names = tuple(a.name.split("."))
                if names[0] == "cxlkit":
                    yield names[1:], None, eager, node.lineno
                else:
                    yield None, names[0], eager, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                names = tuple((node.module or "").split("."))
                if names[0] == "cxlkit":
                    yield names[1:], None, eager, node.lineno
                else:
                    yield None, names[0], eager, node.lineno
                continue
            base = pkg[:len(pkg) - (node.level - 1)] if node.level > 1 else pkg
            target = base + tuple((node.module or "").split(".")) if node.module else base
            if node.module is None:  # from . import a, b: each name may be a module
                for a in node.names:
                    yield target + (a.name,), None, eager, node.lineno
            else:
                yield target, None, eager, node.lineno


def sources():
    return sorted(p for p in PKG.rglob("*.py"))


def test_no_import_runs_up_a_floor():
    bad = []
    for path in sources():
        me = module_parts(path)
        mine = floor_of(me)
        for target, _, _, line in imports(path):
            if target is None or not target:
                continue
            theirs = floor_of(target)
            if theirs > mine:
                bad.append(f"{path.relative_to(PKG)}:{line}: cxlkit.{'.'.join(me)} "
                           f"({FLOORS[mine][0]}) imports cxlkit.{'.'.join(target)} "
                           f"({FLOORS[theirs][0]})")
    assert not bad, "imports up a floor:\n" + "\n".join(bad)


def test_engines_are_imported_only_by_integrations_and_lazily_by_workloads():
    bad = []
    for path in sources():
        me = module_parts(path)
        where = FLOORS[floor_of(me)][0] if me else "cxlkit"
        for target, top, eager, line in imports(path):
            if top not in ENGINES or where == "integrations":
                continue
            if str(path.relative_to(PKG)) in PENDING_ENGINE_IMPORTS:
                continue
            if where == "workloads" and not eager:
                continue  # DESIGN: the training and KV modules import torch lazily
            bad.append(f"{path.relative_to(PKG)}:{line}: {top} imported in {where}"
                       f"{' at import time' if eager else ''}")
    assert not bad, "engine imports outside integrations:\n" + "\n".join(bad)


def test_import_cxlkit_loads_no_engine_and_no_benchmark():
    code = ("import sys, cxlkit, cxlkit.pool, cxlkit.policy, cxlkit.topology, cxlkit.plan\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            f"{sorted(ENGINES)!r} or m.startswith('cxlkit.bench') or "
            "m.startswith('cxlkit.integrations')))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


@pytest.mark.parametrize("src,expected", [
    ("from ..bench.weights import w", ("bench", "weights")),
    ("from . import layout", ("kv", "layout")),
    ("from .. import policy", ("policy",)),
    ("import cxlkit.pool", ("pool",)),
])
def test_the_walker_resolves_relative_and_absolute_imports(monkeypatch, src, expected):
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: src)
    assert [t for t, _, _, _ in imports(PKG / "kv" / "store.py")] == [expected]


def test_the_pending_engine_imports_are_still_there_to_move():
    # once a listed file imports no engine, this fails: drop it from PENDING_ENGINE_IMPORTS
    for rel in PENDING_ENGINE_IMPORTS:
        assert any(top in ENGINES for _, top, _, _ in imports(PKG / rel)), rel
