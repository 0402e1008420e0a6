"""Module paths that moved into a floor's folder, importable for one release: `import
cxlkit.policy` gives a module whose every attribute read warns (DeprecationWarning) and
forwards to where the name lives now. Nothing here imports the new modules until a name is read."""
from __future__ import annotations

import importlib
import importlib.machinery
import sys
import types
import warnings

# old module -> the modules that hold its names now, searched in order
MOVED = {
    "cxlkit.policy": ("cxlkit.placement", "cxlkit.placement.policy", "cxlkit.placement.buffer",
                      "cxlkit.placement.weights"),
    "cxlkit.preload": ("cxlkit.placement.preload",),
    "cxlkit.preload_registry": ("cxlkit.placement.preload_registry",),
    "cxlkit.tiering": ("cxlkit.placement.tiering",),
    "cxlkit.audit": ("cxlkit.placement.audit",),
    "cxlkit.plan": ("cxlkit.sizing",),
    "cxlkit.pool_upgrade": ("cxlkit.pool.upgrade",),
    "cxlkit.rpc": ("cxlkit.msg.rpc",),
    "cxlkit._waitpolicy": ("cxlkit.msg.wait",),
}


class MovedModule(types.ModuleType):
    """Stands at an old module path; reading a name warns and returns the name's new home's."""

    def __getattr__(self, name: str) -> object:
        if name.startswith("__"):
            raise AttributeError(name)
        for target in MOVED[self.__name__]:
            mod = importlib.import_module(target)
            if name in vars(mod):
                warnings.warn(f"{self.__name__} is deprecated: import {name} from {target}",
                              DeprecationWarning, stacklevel=2)
                return vars(mod)[name]
        from .errors import deprecated_name  # an old error name read through an old path

        return deprecated_name(self.__name__, name)

    def __dir__(self) -> list[str]:
        return sorted({n for t in MOVED[self.__name__] for n in vars(importlib.import_module(t))})


class _Finder:
    """The meta path finder and loader of the old paths (the protocols, not importlib.abc:
    that module costs `import cxlkit` tens of milliseconds)."""

    def find_spec(self, fullname: str, path: object, target: object = None
                  ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return MovedModule(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        """Nothing to run: names are found when read."""


def install() -> None:
    """Put the finder first on sys.meta_path (once), so an old path never reaches a stale file."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
