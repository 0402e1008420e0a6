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
# Python floors, lowest first (docs/architecture.md keeps this table); above the leaves each
# floor is a folder (or sizing.py). A module may import its own floor or one below it. The
# python core is ordered inside: the leaves, then topology, placement, the pool, sizing (node
# facts from topology), then the benchmarks over them all.
FLOORS = [
    ("core: leaves", {"_native", "_config", "_moved", "errors", "units", "_views", "testing"}),
    ("core: topology", {"topology"}),
    ("core: placement", {"placement"}),
    ("core: pool", {"pool"}),
    ("core: sizing", {"sizing"}),
    ("core: measurements", {"bench"}),
    ("workloads", {"train", "kv", "msg"}),
    ("integrations", {"integrations"}),
    ("cli", {"cli", "__main__"}),
]
ENGINES = {"torch", "transformers", "vllm", "deepspeed", "mpi4py", "accelerate"}
# A module outside integrations/ that still imports an engine at its top, while its torch half
# moves to integrations/ (as cli/train.py's demo moved to integrations/demo.py).
PENDING_ENGINE_IMPORTS: dict[str, str] = {}  # module -> the branch cleaning it
# The files that stand beside the floor folders: the leaves, sizing (a floor that is one
# file), the package's face and its entry point. Every other module lives in a folder.
TOP_FILES = {"__init__", "__main__", "_native", "_config", "_moved", "errors", "units", "_views",
             "testing", "sizing"}
# Import circles being broken on their owners' branches: {frozenset(modules): branch}.
PENDING_CIRCLES: dict[frozenset, str] = {}
# The floors held to the size limits (the workloads and integrations are split on their
# owners' branches): a module over MAX_MODULE_LINES, or a function over MAX_FUNCTION_LINES
# without a `# long:` comment in its first lines saying why, is two jobs.
SIZED = ("topology", "placement", "pool", "msg", "bench", "cli", "sizing", "errors", "units",
         "train", "kv", "integrations",
         "_moved", "_config", "_views", "testing", "__init__")
MAX_MODULE_LINES, MAX_FUNCTION_LINES = 500, 60


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
    code = ("import sys, cxlkit, cxlkit.pool, cxlkit.placement, cxlkit.topology, cxlkit.sizing\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            f"{sorted(ENGINES)!r} or m.startswith('cxlkit.bench') or "
            "m.startswith('cxlkit.integrations')))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


@pytest.mark.parametrize("src,expected", [
    ("from ..bench.weights import w", ("bench", "weights")),
    ("from . import layout", ("kv", "layout")),
    ("from .. import placement", ("placement",)),
    ("import cxlkit.pool", ("pool",)),
])
def test_the_walker_resolves_relative_and_absolute_imports(monkeypatch, src, expected):
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: src)
    assert [t for t, _, _, _ in imports(PKG / "kv" / "store.py")] == [expected]


def test_the_pending_engine_imports_are_still_there_to_move():
    # once a listed file imports no engine, this fails: drop it from PENDING_ENGINE_IMPORTS
    for rel in PENDING_ENGINE_IMPORTS:
        assert any(top in ENGINES for _, top, _, _ in imports(PKG / rel)), rel


def test_the_floors_are_folders():
    loose = sorted(p.stem for p in PKG.iterdir()
                   if p.suffix == ".py" and p.stem not in TOP_FILES)
    assert not loose, f"modules outside every floor folder: {loose} (move each into its floor)"
    folders = {p.name for p in PKG.iterdir() if (p / "__init__.py").is_file()}
    named = set().union(*(names for _, names in FLOORS))
    assert folders <= named, f"folders in no floor: {sorted(folders - named)}"


def test_docs_architecture_names_every_folder():
    text = (PKG.parents[1] / "docs" / "architecture.md").read_text()
    folders = sorted(p.name for p in PKG.iterdir() if (p / "__init__.py").is_file())
    missing = [f for f in folders if f"{f}/" not in text and f"{f},"  not in text]
    assert not missing, f"docs/architecture.md does not name {missing}"


def _module_of(target: tuple[str, ...]) -> str:
    """The module an import names: a from-import of a function names its module."""
    while target and not ((PKG.joinpath(*target).with_suffix(".py")).is_file()
                          or (PKG.joinpath(*target) / "__init__.py").is_file()):
        target = target[:-1]
    return ".".join(target)


def _type_only_lines(path: Path) -> set[int]:
    """Lines under `if TYPE_CHECKING:`: imports for annotations, never run."""
    out: set[int] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            out |= {n.lineno for n in ast.walk(node) if hasattr(n, "lineno")}
    return out


def import_graph() -> dict[str, set[str]]:
    """module -> the cxlkit modules it imports, at import time or inside functions alike
    (imports for type annotations alone do not run, and do not count)."""
    graph: dict[str, set[str]] = {}
    for path in sources():
        me = ".".join(module_parts(path))
        skip = _type_only_lines(path)
        for target, _, _, line in imports(path):
            if target and line not in skip:
                them = _module_of(target)
                if them and them != me:
                    graph.setdefault(me, set()).add(them)
    return graph


def circles(graph: dict[str, set[str]]) -> list[frozenset]:
    """The strongly connected groups of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[frozenset] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    group = set()
                    while True:
                        x = stack.pop()
                        group.add(x)
                        if x == v:
                            break
                    if len(group) > 1:
                        out.append(frozenset(group))
            elif w not in index:
                index[w] = low[w] = len(index)
                stack.append(w)
                work.append((w, iter(sorted(graph.get(w, ())))))
            elif w in stack:
                low[v] = min(low[v], index[w])
    return out


def test_no_import_circles():
    found = [c for c in circles(import_graph()) if c not in PENDING_CIRCLES]
    assert not found, "import circles:\n" + "\n".join(sorted(" <-> ".join(sorted(c))
                                                               for c in found))


def test_the_circle_finder_finds_a_circle_and_only_it():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [frozenset({"a", "b", "c"})]


def test_the_pending_circles_are_still_there_to_break():
    # once a listed circle is gone, this fails: drop it from PENDING_CIRCLES
    found = circles(import_graph())
    for c in PENDING_CIRCLES:
        assert c in found, sorted(c)


def _sized_sources():
    for path in sources():
        rel = path.relative_to(PKG)
        if rel.parts[0].removesuffix(".py") in SIZED:
            yield path, rel


def test_no_module_over_the_limit():
    big = [f"{rel}: {n} lines" for path, rel in _sized_sources()
           if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES]
    assert not big, f"modules over {MAX_MODULE_LINES} lines (split by job):\n" + "\n".join(big)


def test_no_function_over_the_limit_without_a_reason():
    long = []
    for path, rel in _sized_sources():
        lines = path.read_text().splitlines()
        for node in ast.walk(ast.parse("\n".join(lines))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                head = lines[node.lineno - 1:node.lineno + 5]
                if n > MAX_FUNCTION_LINES and not any("# long:" in x for x in head):
                    long.append(f"{rel}:{node.lineno} {node.name}: {n} lines")
    assert not long, (f"functions over {MAX_FUNCTION_LINES} lines with no `# long:` reason:\n"
                      + "\n".join(long))
